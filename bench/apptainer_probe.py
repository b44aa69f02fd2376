"""Benchmark: the probe's train step in Atlas's image under Apptainer on the local Slurm, against
the same step bare on the same Slurm and in the same image under containerd on the local node.

Every figure is a local stand-in: Slurm and sshd on this host (the local Satori, mock GPUs, so the
probe trains on the CPU), and a real kubelet + containerd + runc node on the same host. The image
is the one the local BuildConfig runner builds for the probe (localenv/images.py's
`build_image_from`, the runner's own function: buildah on a checkout of the commit, the probe's
Containerfile, BASE_IMAGE the local registry's Debian base), pushed to the local registry and
named by its digest; Apptainer is the toolchain's (`scripts/bootstrap --with apptainer`) that
localenv/satori.py installs for the login user under /opt/atlas-apptainer. Three measurements:

1. train (images/s): sides in ABC CBA order (bench/stats.py's abba_order), one run at a time,
   2 CPUs each, the whole machine (the same for all: the pod's limit and request, the job's --cpus-per-task):
   - apptainer: an sbatch job whose script is Atlas's own `apptainer exec` lines
     (infra/hpc/apptainer.py's ContainerExec: --nv as the step asks a GPU, PYTHONNOUSERSITE, the
     run folder bound at its path) on the SIF Atlas's conversion script made from the digest;
   - bare: an sbatch job of Debian's python3 with the image's pinned wheels installed into a
     folder of the bench's and the same code (bench/container_vs_bare.py's Bare): the same
     software as the image, so the ratio is Apptainer's cost, not a software stack's;
   - pod: a pod on the local node in the same image by digest, OpenShift's restricted security
     (bench/container_vs_bare.py's Container).
   Images/s is the probe's own closing line; request -> first iteration is from just before the
   submission (job) or creation (pod) to the probe's line after its first iteration, one clock.
   Each side runs once untimed first (the pod's image pulled, the SIF's pages read).
2. start-up (s): `apptainer exec` of the cached SIF running `python3 -c pass` against bare
   `/usr/bin/python3 -c pass`, directly as the login user on the login node (one SSH login that
   runs every round, ABBA, timed there with perf_counter; no Slurm in it: the jobs' whole
   request -> first iteration is in (1)).
3. conversion (s): `apptainer pull --no-https` of the image by digest from the local registry
   into a fresh, empty Apptainer cache and a new SIF each round, as the login user; the SIF's size.

Ratios are paired per round with a 95 % bootstrap interval (bench/stats.py); the issue's goal is
Apptainer within 3 % of bare images/s, judged only where the interval says so.

Heavy: each block of two rounds (ABC then CBA: the order is kept inside a hold) runs under
`--lock` (default /tmp/atlas-heavy.lock, flock), released between blocks; the raw JSON is
rewritten after every block, so a stopped run keeps what it measured.

    .venv/bin/python -m bench.apptainer_probe [--rounds 10] [--startup-rounds 30] [--pull-rounds 3]
        [--sides apptainer,bare,pod] [--out FILE]
    (the environment: ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE, up beforehand with
     `scripts/localenv up`: the registry comes with the node, so the node is needed by every side)

Writes bench/results/apptainer-probe-<date>.json with the commit, the machine and every sample.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.container_vs_bare import CPUS, Bare, Container, parse_run, say, train_argv
from bench.provenance import fresh_path, run_record, write_result
from bench.stats import RESULTS, abba_order, bootstrap_ci, now_utc, paired_ratio
from infra.hpc.apptainer import ContainerExec, ensure_sif_script, parse_conversion, parse_image_reference
from infra.toolchain.pins import REPO_ROOT
from localenv import images, kube, satori
from localenv.layout import Layout, default_layout

SIDES = ("apptainer", "bare", "pod")
GOAL_WITHIN = 0.03  # the goal: Apptainer within 3 % of bare images/s
PROVENANCE = {
    "apptainer": "local stand-in: Slurm on this host (the local Satori; mock GPUs, the probe runs on the CPU), "
    "Apptainer 1.4 built by the toolchain, unprivileged (user namespace, squashfuse)",
    "bare": "local stand-in: Slurm on this host (the local Satori; mock GPUs, the probe runs on the CPU), no container",
    "pod": "local stand-in: a real kubelet + containerd + runc node on this host "
    "(mock GPUs, the probe runs on the CPU)",
}

# Run on the login node as the login user: each round's sides in order, each timed there.
_STARTUP = """
import json, subprocess, sys, time
a = json.loads(sys.argv[1])
out = []
for r, order in enumerate(a["order"]):
    for side in order:
        t = time.perf_counter()
        p = subprocess.run(a["argv"][side], capture_output=True, text=True)
        s = time.perf_counter() - t
        if p.returncode:
            sys.exit(f"{side}: exit {p.returncode}: {p.stderr[-2000:]}")
        out.append({"round": r, "side": side, "seconds": round(s, 4)})
print(json.dumps(out))
"""
_PULL = """
import json, os, shutil, subprocess, sys, tempfile, time
a = json.loads(sys.argv[1])
out = []
for r in range(a["rounds"]):
    d = tempfile.mkdtemp(prefix="pull-", dir=a["dir"])
    env = dict(os.environ, APPTAINER_CACHEDIR=os.path.join(d, "cache"), APPTAINER_TMPDIR=d)
    sif = os.path.join(d, "image.sif")
    t = time.perf_counter()
    p = subprocess.run(["apptainer", "pull", "--no-https", sif, a["uri"]], env=env, capture_output=True, text=True)
    s = time.perf_counter() - t
    if p.returncode:
        sys.exit(f"apptainer pull: exit {p.returncode}: {p.stderr[-2000:]}")
    out.append({"round": r, "seconds": round(s, 4), "sif_bytes": os.path.getsize(sif)})
    shutil.rmtree(d)
print(json.dumps(out))
"""


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """The shared heavy-work lock (flock(2), the lock `flock(1)` takes) for one block."""
    if lock is None:
        yield
        return
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def blocks(order: Sequence[list[str]], size: int = 2) -> list[list[tuple[int, list[str]]]]:
    """The rounds in holds of `size` (ABC then CBA kept together), each round with its index."""
    indexed = list(enumerate(order))
    return [indexed[i : i + size] for i in range(0, len(indexed), size)]


def within(ci95: Sequence[float], tolerance: float = GOAL_WITHIN) -> str:
    """What a ratio's 95 % interval says of 'within tolerance of 1': yes only when the whole
    interval is inside, no only when it is wholly outside, otherwise the interval decides nothing."""
    low, high = ci95
    if low >= 1 - tolerance and high <= 1 + tolerance:
        return "yes"
    if high < 1 - tolerance or low > 1 + tolerance:
        return "no"
    if high - low > 2 * tolerance:
        return "interval too wide to tell"
    return "not clear"


def paired_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Median of the per-round differences a - b (seconds) with its 95 % bootstrap interval."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    low, high = bootstrap_ci(diffs)
    return {"median": round(statistics.median(diffs), 4), "ci95": [round(low, 4), round(high, 4)],
            "rounds": len(diffs)}


def _by_round(samples: Sequence[dict[str, Any]], side: str, metric: str) -> dict[int, float]:
    return {s["round"]: s[metric] for s in samples if s["side"] == side}


def _pairs(samples: Sequence[dict[str, Any]], a: str, b: str, metric: str) -> tuple[list[float], list[float]]:
    """Both sides' values of the rounds where both ran (a stopped run's last round may be half)."""
    first, second = _by_round(samples, a, metric), _by_round(samples, b, metric)
    rounds = sorted(first.keys() & second.keys())
    return [first[r] for r in rounds], [second[r] for r in rounds]


def summarise_train(samples: Sequence[dict[str, Any]], sides: Sequence[str]) -> dict[str, Any]:
    """Per side medians, and per pair (apptainer/bare, pod/apptainer) the paired ratios."""
    summary: dict[str, Any] = {"median": {}, "runs": {}}
    for side in sides:
        rows = [s for s in samples if s["side"] == side]
        if rows:
            summary["median"][side] = {
                metric: round(statistics.median(s[metric] for s in rows), 3)
                for metric in ("images_per_s", "request_to_first_iteration_s", "train_s")
            }
            summary["runs"][side] = len(rows)
    for a, b in (("apptainer", "bare"), ("pod", "apptainer")):
        if a not in sides or b not in sides:
            continue
        speed_a, speed_b = _pairs(samples, a, b, "images_per_s")
        if len(speed_a) < 2:
            continue
        ratio = paired_ratio(speed_a, speed_b)
        first_a, first_b = _pairs(samples, a, b, "request_to_first_iteration_s")
        summary[f"{a}_over_{b}"] = {
            "images_per_s": {**ratio, "within_3_percent": within(ratio["ci95"])},
            "request_to_first_iteration_s_difference": paired_difference(first_a, first_b),
        }
    return summary


def summarise_startup(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    app, bare = _pairs(samples, "apptainer", "bare", "seconds")
    app_low, app_high = bootstrap_ci(app)
    bare_low, bare_high = bootstrap_ci(bare)
    return {
        "apptainer_median_s": round(statistics.median(app), 4),
        "apptainer_ci95": [round(app_low, 4), round(app_high, 4)],
        "bare_median_s": round(statistics.median(bare), 4),
        "bare_ci95": [round(bare_low, 4), round(bare_high, 4)],
        "apptainer_minus_bare_s": paired_difference(app, bare),
        "apptainer_over_bare": paired_ratio(app, bare),
    }


def summarise_pull(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    seconds = [s["seconds"] for s in samples]
    low, high = bootstrap_ci(seconds)
    return {"median_s": round(statistics.median(seconds), 3), "ci95": [round(low, 3), round(high, 3)],
            "rounds": len(seconds), "min_s": min(seconds), "max_s": max(seconds),
            "sif_bytes": sorted({s["sif_bytes"] for s in samples})}


class Site:
    """The login node as the login user: commands over SSH, jobs through sbatch."""

    def __init__(self, layout: Layout) -> None:
        self.info = satori.status(layout)["ssh"]

    def ssh(self, command: str, timeout: float = 120) -> str:
        proc = subprocess.run(satori.ssh_client_argv(self.info, command), capture_output=True, text=True,
                              timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"ssh {command[:200]}: exit {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def python(self, code: str, args: dict[str, Any], timeout: float = 600) -> Any:
        return json.loads(self.ssh(f"python3 -c {shlex.quote(code)} {shlex.quote(json.dumps(args))}", timeout)
                          .strip().splitlines()[-1])

    def job(self, script: str, workdir: Path, cpus: int) -> tuple[str, float]:
        """Submit `script` as a job from `workdir` (the data linked in), wait for its end; (log, requested)."""
        workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o777)
        path = workdir / "job.sh"
        path.write_text("#!/bin/bash\n" + script + "\n")
        path.chmod(0o755)
        out = workdir / "out.txt"
        requested = time.time()
        job = self.ssh(f"cd {workdir} && sbatch --parsable --cpus-per-task={cpus} --mem=2G --gres=gpu:1 "
                       f"--output={out} {path}").strip().split(";")[0]
        while self.ssh(f"squeue -h -j {job} -o %T 2>/dev/null").strip():
            time.sleep(0.5)
        return out.read_text(), requested


def build_probe_image(layout: Layout, commit: str, tag: str) -> images.BuiltImage:
    """The probe's image as the BuildConfig runner builds it (localenv/builds.py: the commit
    checked out, `build_image_from` with the probe's Containerfile, the registry's base image)."""
    with tempfile.TemporaryDirectory(prefix="atlas-bench-apt-src-") as tmp:
        archive = Path(tmp) / "source.tar"
        subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "-o", str(archive), commit], check=True)
        subprocess.run(["tar", "-xf", str(archive), "-C", tmp], check=True)
        archive.unlink()
        log = layout.logs_dir / "build-bench-apptainer-probe.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        return images.build_image_from(Path(tmp), Path(tmp) / "workloads/probe/Containerfile", "atlas/probe", tag,
                                       {}, log, images.registry_host(layout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="train runs per side (ABC CBA order)")
    parser.add_argument("--startup-rounds", type=int, default=30)
    parser.add_argument("--pull-rounds", type=int, default=3)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--root", type=Path, default=Path("/tmp/atlas-bench-apptainer"),  # noqa: S108
                        help="the bench's folder (under /tmp: the login user must reach it)")
    parser.add_argument("--lock", type=Path, default=Path("/tmp/atlas-heavy.lock"))  # noqa: S108
    parser.add_argument("--no-lock", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sides = [s for s in args.sides.split(",") if s]
    if unknown := set(sides) - set(SIDES):
        raise SystemExit(f"--sides: unknown {sorted(unknown)}; choose from {', '.join(SIDES)}")
    lock = None if args.no_lock else args.lock
    start = time.monotonic()
    layout = default_layout()
    site = Site(layout)
    if not site.info["running"]:
        raise SystemExit("the local Satori is not running: `scripts/localenv up --only satori` (and node for the pod)")
    origin = run_record()
    if origin["commit"] is None:
        raise SystemExit(f"apptainer_probe builds the image from the commit: {origin['commit_source']}")
    commit = str(origin["commit"])
    root = args.root
    root.mkdir(exist_ok=True)
    root.chmod(0o755)
    # Claimed now, then rewritten as each part ends: an earlier run's file is never overwritten.
    out = fresh_path(args.out or RESULTS / f"apptainer-probe-{now_utc()[:10]}.json")
    argv = train_argv()
    result: dict[str, Any] = {
        "bench": "apptainer_probe", "date": now_utc(), **origin,
        "provenance": {side: PROVENANCE[side] for side in sides},
        "args": sys.argv[1:], "command": argv, "cpus_each": CPUS,
        "order": "ABC CBA (each round the reverse of the one before), one run at a time",
        "goal": "Apptainer within 3 % of bare images/s",
    }
    with held(lock):
        say(start, "building the probe's image as the BuildConfig runner does, pushing it to the local registry")
        built = build_probe_image(layout, commit, "bench-apptainer")
        image = parse_image_reference(built.reference, "image")
        version = site.ssh("apptainer --version").strip()
        cache = root / "sif"
        cache.mkdir(exist_ok=True)
        cache.chmod(0o777)
        conversion = parse_conversion(site.ssh(ensure_sif_script("apptainer", str(cache), image, True, "bench"),
                                               timeout=900))
        sif = cache / image.sif_name
        say(start, f"image {image.pinned}, {version}, SIF {sif} (converted now: {conversion.converted}); "
                   "preparing the bare side's Python and the data (untimed)")
        bare = Bare(layout, root / "bare")
        bare.prepare()
    result.update({
        "image": {"reference": image.pinned, "digest": image.digest, "built_by": "localenv/images.py "
                  "build_image_from on `git archive` of the commit (what the BuildConfig runner runs)",
                  "build_s": built.seconds, "all_layers_cached": built.cached},
        "apptainer": {"version": version, "sif": str(sif), "first_conversion": {
            "converted_by_this_run": conversion.converted, "seconds": conversion.seconds}},
    })
    container = Container(layout, root / "bare", image.pinned) if "pod" in sides else None
    if container is not None:
        container.prepare()
    app = ContainerExec(command="apptainer", binds=(str(root),), sif=str(sif))

    def run(side: str, workdir: Path) -> dict[str, float]:
        if side == "pod":
            assert container is not None
            log, requested = container.run(argv)
        elif side == "bare":
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / "data").unlink(missing_ok=True)
            (workdir / "data").symlink_to(root / "bare" / "data")
            command = " ".join(["/usr/bin/python3" if a == "python3" else a for a in argv])
            log, requested = site.job(f"{bare.env()} exec {command}", workdir, CPUS)
        else:
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / "data").unlink(missing_ok=True)
            (workdir / "data").symlink_to(root / "bare" / "data")
            log, requested = site.job("\n".join(app.script_lines(True, shlex.join(argv))), workdir, CPUS)
        return parse_run(log, requested)

    samples: list[dict[str, Any]] = []
    try:
        with held(lock):
            for side in sides:
                warm = run(side, root / "runs" / f"warmup-{side}")
                say(start, f"{side:9} warm-up (untimed): {warm['images_per_s']:.0f} images/s")
        for block in blocks(abba_order(sides, args.rounds)):
            with held(lock):
                for round_index, order in block:
                    for side in order:
                        sample = {"round": round_index, "side": side,
                                  **run(side, root / "runs" / f"r{round_index}-{side}")}
                        samples.append(sample)
                        say(start, f"{side:9} round {round_index}: {sample['images_per_s']:.0f} images/s, "
                                   f"request -> first iteration {sample['request_to_first_iteration_s']:.2f} s")
            result["train"] = {"summary": summarise_train(samples, sides), "samples": samples}
            write_result(result, out, update=True)
    finally:
        if container is not None:
            kube.kubectl(layout, "delete", "namespace", container.namespace, "--wait=false")
    startup_argv = {
        "apptainer": [*app.argv(False), "python3", "-c", "pass"],
        "bare": ["/usr/bin/python3", "-c", "pass"],
    }
    with held(lock):
        site.python(_STARTUP, {"order": abba_order(["apptainer", "bare"], 2), "argv": startup_argv})  # warm-up
        startup = site.python(_STARTUP, {"order": abba_order(["apptainer", "bare"], args.startup_rounds),
                                         "argv": startup_argv})
    result["startup"] = {
        "how": "directly as the login user on the login node, one SSH login running every round (no Slurm)",
        "argv": startup_argv, "summary": summarise_startup(startup), "samples": startup}
    write_result(result, out, update=True)
    say(start, f"start-up: {json.dumps(result['startup']['summary']['apptainer_minus_bare_s'])}")
    pulls = root / "pull"
    pulls.mkdir(exist_ok=True)
    pulls.chmod(0o777)
    pull_samples: list[dict[str, Any]] = []
    for _ in range(args.pull_rounds):  # one pull per hold: each is a minute or so of full CPU
        with held(lock):
            found = site.python(_PULL, {"rounds": 1, "dir": str(pulls), "uri": image.docker_uri}, timeout=900)
        pull_samples += [{**s, "round": len(pull_samples)} for s in found]
        say(start, f"pull into an empty cache: {found[0]['seconds']:.1f} s, SIF {found[0]['sif_bytes']:,} bytes")
    result["conversion"] = {
        "how": "`apptainer pull --no-https <sif> docker://<registry>/atlas/probe@<digest>` as the login user, "
               "each round a fresh APPTAINER_CACHEDIR and a new SIF (the local registry on loopback)",
        "summary": summarise_pull(pull_samples), "samples": pull_samples}
    write_result(result, out, update=True)
    print(json.dumps({k: result[k]["summary"] for k in ("train", "startup", "conversion") if k in result}, indent=2))
    say(start, f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
