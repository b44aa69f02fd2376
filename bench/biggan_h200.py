"""BigGAN-PyTorch itself, at the workload's reduced scale, on one GPU: the device-run driver.

    python3 -m bench.biggan_h200 --source .device-carry/biggan.bundle --out "$OUT" [--environment h200]

Runs on the machine with the GPU (scripts/biggan-device-run sends it there). Every step is
run as the OpenShift Job's container runs it (infra/openshift/manifests/step_jobs.py): the image's
entrypoint (infra/telemetry/entrypoint.sh), then the telemetry sampler, then the step's own
argv from workloads/biggan/workload.yaml rendered for `--environment` (the `h200` overrides),
in the BigGAN checkout, with the step's env, PYTHONPATH at Atlas (the image's /opt/atlas) and
HOME at the checkout (the image's HOME). What differs from a pod, and why:
- the source is materialised here from a bundle (no network) by infra/workload_source.py,
  with the same patch the Containerfile applies;
- the data input is made here (workload.yaml `data` override: small_imagefolder.py), and the
  Inception weights are a stand-in (standin_inception.py): the real file cannot be downloaded;
- the sampler samples every `--interval` seconds (1 by default, the workload says 5): the
  preparation steps last seconds;
- a `python` on PATH is provided where the machine has only `python3` (the image has both).

The console output of each step is kept as the container runtime keeps it (CRI format, each
line timestamped when it arrived): `kubectl logs --timestamps` would show the same. While a
step runs, the sampler's own CPU time (utime + stime, plus cutime + cstime: children it has
reaped, never the step, which it reaps last) is read from /proc/<sampler>/stat every second:
the sampler's cost, start-up and children included.

Writes into --out: `biggan-h200-run.tar.gz` (telemetry, BigGAN's logs, the timestamped
console logs, atlas-run.json) and prints progress as it goes. `scripts/biggan-device-run
--import` turns the tarball into docs/runs/ and bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.provenance import read_machine, run_record  # noqa: E402
from infra.telemetry.parsers.console_log import format_cri_line  # noqa: E402
from infra.workload.load import load_workload  # noqa: E402
from infra.workload.model import GitSource, Workload, input_override  # noqa: E402
from infra.workload.options import last_values  # noqa: E402
from infra.workload.render import render_step, sampled_argv  # noqa: E402
from infra.workload_source import MARKER, Materialized, SourceError, materialize, sha256_file  # noqa: E402

ENTRYPOINT = REPO / "infra" / "telemetry" / "entrypoint.sh"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
KILL_AFTER_S = 20.0  # after the deadline's SIGTERM, before the step's process group is killed
START = time.monotonic()


def say(message: str) -> None:
    print(f"[biggan-h200 {time.monotonic() - START:6.1f}s] {message}", flush=True)


def run_json(argv: list[str], cwd: Path) -> dict[str, Any]:
    """A helper script that prints one JSON line; its output is the provenance it returns."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def unpack_tree(tree: Path, workdir: Path, commit: str, patch: Path | None) -> Materialized:
    """Where the machine has no git: the tree the same materialiser made elsewhere (`scripts/biggan-device-run
    prepare`), accepted only if its record names this commit and this patch's content."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    with tarfile.open(tree) as tar:
        tar.extractall(workdir, filter="data")
    record = json.loads((workdir / MARKER).read_text())
    if record.get("commit") != commit or (patch is not None and record.get("patch_sha256") != sha256_file(patch)):
        raise SystemExit(f"{tree}: made for another commit or patch ({record}); run prepare again")
    record["unpacked_from"] = f"{tree.name} (no git on this machine; made by infra/workload_source.py elsewhere)"
    return Materialized(workdir, record)


def machine() -> dict[str, Any]:
    """bench/provenance.py's machine identity, with the GPUs and the packages the run used."""
    info: dict[str, Any] = {**asdict(read_machine()), "hostname": socket.gethostname()}
    smi = shutil.which("nvidia-smi")
    if smi:
        query = subprocess.run(
            [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        info["gpus"] = [line.strip() for line in query.stdout.splitlines() if line.strip()]
    versions = subprocess.run(
        [sys.executable, "-c", "import torch, torchvision, numpy, scipy, h5py; "
         "print(torch.__version__, torchvision.__version__, numpy.__version__, scipy.__version__, h5py.__version__, "
         "torch.version.cuda, torch.cuda.device_count())"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    names = ("torch", "torchvision", "numpy", "scipy", "h5py", "cuda", "cuda_devices")
    info["packages"] = dict(zip(names, versions.stdout.split(), strict=False)) or versions.stderr.strip()[-500:]
    return info


def ensure_shm(steps_memory_bytes: int) -> dict[str, Any]:
    """The shared-memory mount at least as large as the Job's (infra/openshift/settings.py shm_bytes: a
    quarter of the step's memory, at most 16 GiB): DataLoader workers hand batches over through it."""
    wanted = min(steps_memory_bytes // 4, 16 << 30)
    try:
        stat = os.statvfs("/dev/shm")  # noqa: S108 (the shared-memory mount, not a temporary file)
    except OSError as error:
        return {"wanted_bytes": wanted, "error": str(error)}
    before = stat.f_frsize * stat.f_blocks
    record: dict[str, Any] = {"wanted_bytes": wanted, "size_bytes": before}
    if before < wanted:
        done = subprocess.run(
            ["mount", "-o", f"remount,size={wanted}", "/dev/shm"], capture_output=True, text=True, check=False  # noqa: S108
        )
        after = os.statvfs("/dev/shm")  # noqa: S108
        record.update(remounted=done.returncode == 0, size_bytes=after.f_frsize * after.f_blocks,
                      mount_error=done.stderr.strip()[-300:] or None)  # fmt: skip
    return record


def sampler_cpu(pid: int) -> tuple[float, float] | None:
    """(own utime+stime, reaped children's cutime+cstime) of a live process, in seconds."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    children = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
    return own, children


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def is_sampler(pid: int) -> bool:
    try:
        return b"infra.telemetry.sampler" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def sampler_child(pid: int) -> int | None:
    """The step's process: the sampler's child (it has no other while it samples through NVML)."""
    with contextlib.suppress(OSError, ValueError):
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return int(children[0]) if children else None
    return None


def run_step(
    workload: Workload, environment: str, step: str, workdir: Path, logs: Path, interval: float, deadline: float,
    run_id: str,
) -> dict[str, Any]:
    """One step as a pod runs it; returns its record (times, exit code, argv, sampler cost)."""
    rendered = render_step(workload, step, environment)
    argv = [str(ENTRYPOINT), *sampled_argv(workload, rendered, interval)]
    env = {
        **os.environ,
        **dict(rendered.env),
        "ATLAS_RUN": run_id,
        "ATLAS_STEP": step,
        # The image's PYTHONPATH is /opt/atlas (the sampler's package); here, this checkout.
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONUNBUFFERED": "1",
        "HOME": str(workdir),
    }
    if rendered.resources.gpus_per_node > 0:
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
    console = logs / f"{step}.console.log"
    say(f"{step}: {' '.join(rendered.argv)}")
    started = time.time()
    process = subprocess.Popen(
        argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    readings: list[dict[str, float]] = []
    stopped_by_deadline = False

    output_done = threading.Event()

    def watch() -> None:
        # The sampler's CPU while its step lives: the last reading before the step ends is its cost.
        nonlocal stopped_by_deadline
        while not output_done.is_set():
            if process.poll() is None:
                # Only once the entrypoint has exec'd the sampler (the same pid): before that, the
                # shell's children are `id` and `getent`, not the step.
                child = sampler_child(process.pid) if is_sampler(process.pid) else None
                cpu = sampler_cpu(process.pid)
                if cpu is not None and child is not None and alive(child):
                    readings.append({"t": time.time(), "own_s": cpu[0], "children_s": cpu[1]})
            if time.monotonic() > deadline and not stopped_by_deadline:
                say(f"{step}: past the run's time limit; SIGTERM to the sampler (it forwards it to the step)")
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
                stopped_by_deadline = True
            elif stopped_by_deadline and time.monotonic() > deadline + KILL_AFTER_S:
                # A worker that outlives the step's process (main.py's mp.spawn child, its DataLoader
                # workers: a SIGTERM to the parent kills only it) would hold the console pipe open and
                # the run past its command limit: the step's whole process group goes.
                say(f"{step}: output still open {KILL_AFTER_S:.0f} s after SIGTERM; SIGKILL to its process group")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                output_done.wait(5.0)
            time.sleep(1.0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    last_progress = 0.0
    assert process.stdout is not None
    with console.open("w", encoding="utf-8") as out:
        for raw in process.stdout:
            now = time.time()
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            out.write(format_cri_line(now, "stdout", text) + "\n")
            out.flush()
            tail = text.rsplit("\r", 1)[-1].strip()
            if tail and (now - last_progress > 10 or "Error" in tail or "Traceback" in tail):
                say(f"{step}: {tail[:160]}")
                last_progress = now
    output_done.set()
    code = process.wait()
    watcher.join(timeout=5)
    finished = time.time()
    say(f"{step}: exit {code} after {finished - started:.1f} s")
    last = readings[-1] if readings else None
    return {
        "step": step,
        "argv": list(rendered.argv),
        "wrapped_argv": argv,
        "env": dict(rendered.env),
        "override_reason": rendered.override_reason,
        "gpus": rendered.resources.gpus_per_node,
        "started_at": started,
        "finished_at": finished,
        "exit_code": code,
        "stopped_by_deadline": stopped_by_deadline,
        "sampler_cpu": {
            "source": "/proc/<sampler pid>/stat utime+stime (own) and cutime+cstime (children it reaped), "
            "read every second by the driver while the step lived; the last reading counts",
            "readings": len(readings),
            "own_s": last["own_s"] if last else None,
            "children_s": last["children_s"] if last else None,
            "wall_s": (last["t"] - started) if last else None,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="a bundle or clone holding the pinned commit")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tree", type=Path, help="the materialised tree as .tar.gz, used only if git is missing")
    parser.add_argument("--environment", default="h200", help="the workload's overrides to apply (default h200)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "atlas-biggan")
    parser.add_argument("--interval", type=float, default=1.0, help="sampler interval, s (the workload says 5)")
    parser.add_argument("--limit", type=float, default=480.0, help="stop the last step after this many s in all")
    parser.add_argument("--workload", type=Path, default=REPO / "workloads" / "biggan" / "workload.yaml")
    args = parser.parse_args()
    deadline = START + args.limit
    # The commit: this copy has no .git; `scripts/biggan-device-run prepare` wrote it (ATLAS_BENCH_COMMIT_FILE).
    origin = {**run_record(), "machine": machine()}

    workload = load_workload(args.workload)
    source = workload.source
    if not isinstance(source, GitSource):
        raise SystemExit("the biggan workload names no git source")
    if args.work.exists():
        shutil.rmtree(args.work)
    workdir = args.work / "biggan"
    say(f"machine: {json.dumps(origin['machine'])}; commit: {origin['commit']} ({origin['commit_source']})")
    patch = REPO / source.patch if source.patch else None
    try:
        made = materialize(source.repository, source.commit, workdir, patch, args.source, key="--source")
    except SourceError as error:
        if "`git` command is not installed" not in str(error) or args.tree is None:
            raise
        made = unpack_tree(args.tree, workdir, source.commit, patch)
    say(f"source: {json.dumps(made.record)}")
    # The steps say `python` and the sampler `python3`: in the image both are its one Python, the one
    # with PyTorch. Here, both are this interpreter's, whatever else PATH holds.
    shim = args.work / "bin"
    shim.mkdir(parents=True)
    for name in ("python", "python3"):
        # A script, not a symlink: a virtualenv's Python finds its packages from the path it was started by.
        (shim / name).write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        (shim / name).chmod(0o755)
    os.environ["PATH"] = f"{shim}{os.pathsep}{os.environ['PATH']}"
    say(f"python, python3: {sys.executable}")

    # Inputs: what workload.yaml's data section names, made here for this environment.
    data_record: dict[str, Any] = {}
    make_hdf5 = render_step(workload, "make-hdf5", args.environment)
    resolution = last_values(make_hdf5.argv)["--resolution"][0]
    for item in workload.data:
        override = input_override(workload, args.environment, "make-hdf5", item.name)
        if override is not None:
            data_record[item.name] = run_json(
                [sys.executable, str(REPO / override.made_by), "--out", str(workdir / item.path),
                 "--images", str(override.images), "--size", resolution],
                workdir,
            )  # fmt: skip
            say(f"data {item.name}: {json.dumps(data_record[item.name])}")
    moments_env = dict(render_step(workload, "inception-moments", args.environment).env)
    torch_home = moments_env.get("TORCH_HOME", ".cache/torch")
    weights = run_json(
        [sys.executable, str(REPO / "workloads" / "biggan" / "standin_inception.py"), "--torch-home", torch_home],
        workdir,
    )
    say(f"inception weights: {json.dumps(weights)}")

    shm = ensure_shm(max(s.resources.memory_bytes for s in (render_step(workload, t.name, args.environment)
                                                            for t in workload.steps)))
    say(f"shared memory: {json.dumps(shm)}")
    logs = workdir / workload.logs.root
    logs.mkdir(parents=True, exist_ok=True)
    run_id = f"{args.environment}-{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%SZ')}"
    steps = []
    for step in workload.steps:
        record = run_step(workload, args.environment, step.name, workdir, logs, args.interval, deadline, run_id)
        steps.append(record)
        if record["exit_code"] != 0:
            why = "stopped at the run's time limit" if record["stopped_by_deadline"] else "failed"
            say(f"{step.name} {why}" + ("" if step is workload.steps[-1] else ": the steps after it are not run"))
            break

    # The data files the steps wrote and read (the HDF5 file, the moments): their size on disk.
    files = {item.name: {"path": item.path, "bytes": (workdir / item.path).stat().st_size}
               for item in workload.data if (workdir / item.path).is_file()}  # fmt: skip
    manifest = {
        "format": "atlas-device-run/1",
        "run_id": run_id,
        "environment": args.environment,
        "workload": workload.name,
        **origin,
        "source": made.record,
        "data": data_record,
        "data_files": files,
        "profile_iters": os.environ.get("ATLAS_PROFILE_ITERS") or None,
        "inception_weights": weights,
        "shm": shm,
        "sampler_interval_s": args.interval,
        "workload_interval_s": workload.telemetry.interval_seconds,
        "experiment": workload.logs.experiment,
        "steps": steps,
    }
    (workdir / "atlas-run.json").write_text(json.dumps(manifest, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    tarball = args.out / "biggan-h200-run.tar.gz"
    experiment = workload.logs.experiment
    keep = [
        "atlas-run.json",
        ".atlas-source.json",
        workload.telemetry.root,
        f"{workload.logs.root}/{experiment}_log.jsonl",
        f"{workload.logs.root}/{experiment}/metalog.txt",
        *(f"{workload.logs.root}/{experiment}/{n}.log" for n in ("G_loss", "D_loss_real", "D_loss_fake")),
        # The patch's per-iteration timing and, when ATLAS_PROFILE_ITERS asked for it, the profile.
        *(f"{workload.logs.root}/{experiment}/{n}" for n in ("timing.jsonl", "profile.json", "profile.txt")),
        *(f"{workload.logs.root}/{s['step']}.console.log" for s in steps),
        "data/ImageNet",
    ]
    with tarfile.open(tarball, "w:gz") as tar:
        for name in keep:
            path = workdir / name
            if not path.exists():
                say(f"not in the run: {name}")
                continue
            if path.is_dir() and name == "data/ImageNet":
                # The data's small records only (IS of the data, the moments' name); not the images.
                for small in sorted(path.glob("*.txt")):
                    tar.add(small, arcname=str(small.relative_to(workdir)))
                continue
            tar.add(path, arcname=name)
    say(f"wrote {tarball} ({tarball.stat().st_size} bytes)")
    failed = [s["step"] for s in steps if s["exit_code"] != 0]
    say("all steps succeeded" if not failed and len(steps) == len(workload.steps) else f"failed: {failed}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
