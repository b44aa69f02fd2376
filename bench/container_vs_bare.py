"""Benchmark: the probe's train step in a container on the local node against the same step
bare under Slurm, on this one host, with the same arguments and the same software.

A = a pod on the local node (kubelet, containerd, runc; OpenShift's restricted security: non-root,
RuntimeDefault seccomp, no capabilities), the probe's image from its Containerfile.
B = a Slurm job on the local Satori (sbatch over SSH), no container.

The same software on both sides: the image is Debian bookworm's python3 with the pinned wheels
pip installs in it (numpy, h5py, scikit-learn); the bare side runs Debian's python3 with the
same wheels installed into a folder of this bench's, and the same code. Both get the whole
machine (2 CPUs: the pod's limit, the job's --cpus-per-task) and read the same data (made once,
untimed). Rounds alternate ABBA; each side's figure is the median of its rounds, the ratio is
container/bare with a 95 % bootstrap interval over the ABBA pairs.

Measured per run: images/s (the probe's own closing line: iterations x batch x (D steps + 1) /
training seconds) and request -> first iteration (from just before the pod is created or the
job submitted to the time the probe prints after its first iteration; one clock, this host).

    .venv/bin/python -m bench.container_vs_bare [--rounds 6]

Writes bench/results/container-vs-bare-<date>.json with every sample. Own local environment
(ports 19000+, state under /tmp), started and stopped here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.provenance import run_record, write_result
from bench.stats import RESULTS, bootstrap_ci, now_utc
from infra.toolchain.pins import REPO_ROOT
from localenv import images, kube, node, satori
from localenv.layout import Layout, Ports

WHEELS = ("numpy==2.4.6", "h5py==3.16.0", "scikit-learn==1.9.1")  # as workloads/probe/Containerfile
CPUS = 2
FIRST = re.compile(r"First iteration done at (\d+\.\d+)")
SPEED = re.compile(r"Probe: (\d+) iterations in ([\d.]+) s \(([\d.]+) it/s, (\d+) images/s\)")


def say(start: float, line: str) -> None:
    print(f"bench {time.monotonic() - start:6.0f}s {line}", flush=True)


def train_argv() -> list[str]:
    definition = yaml.safe_load((REPO_ROOT / "workloads" / "probe" / "workload.yaml").read_text())
    step = next(s for s in definition["steps"] if s["name"] == "train")
    return [str(a) for a in (*step["command"], *step["args"])]


def prep_argv(name: str) -> list[str]:
    definition = yaml.safe_load((REPO_ROOT / "workloads" / "probe" / "workload.yaml").read_text())
    step = next(s for s in definition["steps"] if s["name"] == name)
    return [str(a) for a in (*step["command"], *step["args"])]


def parse_run(log: str, requested: float) -> dict[str, float]:
    first, speed = FIRST.search(log), SPEED.search(log)
    if not first or not speed:
        raise RuntimeError(f"the probe's log lacks its first-iteration or closing line:\n{log[-2000:]}")
    return {"images_per_s": float(speed[4]), "request_to_first_iteration_s": float(first[1]) - requested,
            "train_s": float(speed[2])}


class Bare:
    """The step as a Slurm job: Debian's python3, the same wheels and code as the image."""

    def __init__(self, layout: Layout, root: Path) -> None:
        self.layout, self.root = layout, root
        self.info = satori.status(layout)["ssh"]

    def ssh(self, command: str) -> str:
        proc = subprocess.run(satori.ssh_client_argv(self.info, command), capture_output=True, text=True,
                              timeout=120, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"ssh {command}: exit {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def prepare(self) -> None:
        site = self.root / "site"
        if not site.exists():
            # What the image's `pip install` resolves, resolved again here (same pins, same day).
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(site), "--only-binary=:all:",
                            *WHEELS], check=True)
        code = self.root / "code"
        shutil.rmtree(code, ignore_errors=True)
        for folder in ("infra/telemetry", "workloads/probe"):
            shutil.copytree(REPO_ROOT / folder, code / folder, ignore=shutil.ignore_patterns("__pycache__"))
        for init in ("infra/__init__.py", "workloads/__init__.py"):
            shutil.copy(REPO_ROOT / init, code / init)
        for path in [self.root, *self.root.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o055)
        data = self.root / "data"
        data.mkdir(exist_ok=True)
        data.chmod(0o777)
        for name in ("make-hdf5", "inception-moments"):
            self.run_job(prep_argv(name), self.root / "prep")

    def env(self) -> str:
        return f"PYTHONPATH={self.root / 'code'}:{self.root / 'site'} PYTHONUNBUFFERED=1"

    def run_job(self, argv: list[str], workdir: Path) -> tuple[str, float]:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "data").unlink(missing_ok=True)
        (workdir / "data").symlink_to(self.root / "data")
        workdir.chmod(0o777)
        out = workdir / "out.txt"
        command = " ".join(["/usr/bin/python3" if a == "python3" else a for a in argv])
        requested = time.time()
        job = self.ssh(f"cd {workdir} && sbatch --parsable --cpus-per-task={CPUS} --mem=2G --gres=gpu:1 "
                       f"--output={out} --wrap '{self.env()} exec {command}'").strip().split(";")[0]
        while self.ssh(f"squeue -h -j {job} -o %T 2>/dev/null").strip():
            time.sleep(0.5)
        return out.read_text(), requested


class Container:
    """The step as a pod on the local node, the probe's image."""

    def __init__(self, layout: Layout, root: Path, image: str) -> None:
        self.layout, self.root, self.image = layout, root, image
        self.namespace = f"atlas-bench-{uuid.uuid4().hex[:6]}"

    def prepare(self) -> None:
        kube.kubectl(self.layout, "create", "namespace", self.namespace)

    def run(self, argv: list[str]) -> tuple[str, float]:
        name = f"train-{uuid.uuid4().hex[:6]}"
        limits = {"cpu": str(CPUS), "memory": "2Gi", "nvidia.com/gpu": "1"}
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {node.NODE_KIND_LABEL: "kubelet"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "train", "image": self.image, "command": ["/usr/local/bin/atlas-entrypoint"],
                    "args": argv, "workingDir": "/work",
                    "resources": {"limits": limits, "requests": limits},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "data", "mountPath": "/work/data", "readOnly": True},
                                     {"name": "scratch", "mountPath": "/work/logs"},
                                     {"name": "weights", "mountPath": "/work/weights"}],
                }],
                "volumes": [{"name": "data", "hostPath": {"path": str(self.root / "data"), "type": "Directory"}},
                            {"name": "scratch", "emptyDir": {}}, {"name": "weights", "emptyDir": {}}],
            },
        }
        requested = time.time()
        kube.kubectl(self.layout, "create", "-f", "-", stdin=json.dumps(pod))
        while True:
            phase = kube.api_get(self.layout, f"/api/v1/namespaces/{self.namespace}/pods/{name}")["status"].get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(0.5)
        log = kube.kubectl(self.layout, "logs", "-n", self.namespace, name)
        if phase != "Succeeded":
            raise RuntimeError(f"pod {name} {phase}:\n{log[-2000:]}")
        kube.kubectl(self.layout, "delete", "pod", "-n", self.namespace, name, "--wait=false")
        return log, requested


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="runs per side (ABBA order)")
    parser.add_argument("--keep", action="store_true", help="leave the bench's environment up")
    args = parser.parse_args()
    start = time.monotonic()
    origin = run_record()
    # Under /tmp: the local Satori's login user must reach the data and the bare side's Python.
    root = Path(os.environ.get("ATLAS_BENCH_DIR", "/tmp/atlas-bench-cvb"))  # noqa: S108
    root.mkdir(exist_ok=True)
    root.chmod(0o755)
    layout = Layout(state_dir=root / "localenv", ports=Ports(int(os.environ.get("ATLAS_BENCH_PORT_BASE", "19000"))))
    quiet: Callable[[str], None] = lambda _line: None  # noqa: E731
    say(start, "starting the bench's environment (control plane, node, Satori)")
    kube.up(layout, kube.KubeSettings(), quiet)
    node.up(layout, quiet)
    satori.up(layout)
    try:
        image = images.build_image(layout, REPO_ROOT, REPO_ROOT / "workloads/probe/Containerfile",
                                   "atlas/probe", "bench").reference
        say(start, f"image {image}; preparing the data and the bare side's Python (untimed)")
        bare, container = Bare(layout, root / "bare"), Container(layout, root / "bare", image)
        bare.prepare()
        container.prepare()
        argv = train_argv()
        order = ["A", "B", "B", "A"] * ((args.rounds + 1) // 2)
        samples: list[dict[str, Any]] = []
        for i, side in enumerate(order[: 2 * args.rounds]):
            if side == "A":
                log, requested = container.run(argv)
            else:
                log, requested = bare.run_job(argv, root / "bare" / f"run-{i}")
            sample = {"round": i, "side": "container" if side == "A" else "bare", **parse_run(log, requested)}
            samples.append(sample)
            say(start, f"{sample['side']:9} round {i}: {sample['images_per_s']:.0f} images/s, "
                       f"request -> first iteration {sample['request_to_first_iteration_s']:.1f} s")
    finally:
        if not args.keep:
            node.down(layout, quiet)
            kube.down(layout, quiet)
            satori.down(layout)
    result = summarise(samples, argv, origin)
    out = write_result(result, RESULTS / f"container-vs-bare-{dt.date.today().isoformat()}.json")
    print(json.dumps(result["summary"], indent=2))
    say(start, f"wrote {out.relative_to(REPO_ROOT)}")
    return 0


def summarise(samples: list[dict[str, Any]], argv: list[str], origin: dict[str, Any]) -> dict[str, Any]:
    by = {s: [x for x in samples if x["side"] == s] for s in ("container", "bare")}
    summary: dict[str, Any] = {}
    for metric in ("images_per_s", "request_to_first_iteration_s"):
        a = [x[metric] for x in by["container"]]
        b = [x[metric] for x in by["bare"]]
        # ABBA pairs: each container run with the bare run of the same pair of rounds.
        pairs = [ca / cb for ca, cb in zip(a, b, strict=False)]
        low, high = bootstrap_ci(pairs)
        summary[metric] = {
            "container_median": round(statistics.median(a), 3),
            "bare_median": round(statistics.median(b), 3),
            "ratio_container_over_bare": round(statistics.median(a) / statistics.median(b), 4),
            "paired_ratio_median": round(statistics.median(pairs), 4),
            "paired_ratio_ci95": [round(low, 4), round(high, 4)],
            "rounds_per_side": len(a),
        }
    return {
        "bench": "container_vs_bare",
        "date": now_utc(),
        **origin,
        "provenance": "local node (kubelet, containerd, runc; mock GPUs, the probe runs on the CPU) against "
                      "the local Satori's Slurm (real Slurm, same host)",
        "command": argv,
        "cpus_each": CPUS,
        "order": "ABBA",
        "summary": summary,
        "samples": samples,
        "goal": "container within 3 % of bare images/s",
    }


if __name__ == "__main__":
    sys.exit(main())
