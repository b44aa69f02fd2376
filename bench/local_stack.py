"""Benchmark: `pulumi up` of the `local` stack's OpenShift side (namespace, quota, storage,
pipeline Jobs on KWOK GPU nodes, monitor), then with no changes (median of 5), and a warm
`localenv up` of the Kubernetes side (binaries and certificates present, processes
stopped; median of 3). Run with the toolchain built:

    .venv/bin/python -m bench.local_stack [--runs 5] [--json out.json]

Uses its own Pulumi home and backend and its own local environment state folder
(ports 19000+), so it neither sees nor disturbs a running demo.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.provenance import run_record, write_result
from localenv import kube
from localenv.layout import Layout, Ports
from tests.e2e.pulumi_cli import PulumiProject


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--create-runs", type=int, default=3, help="up (creating everything) then destroy")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    origin = run_record()
    quiet = lambda _line: None  # noqa: E731

    with tempfile.TemporaryDirectory(prefix="atlas-bench-") as tmp:
        port_base = int(os.environ.get("ATLAS_BENCH_PORT_BASE", "19000"))
        layout = Layout(state_dir=Path(tmp) / "localenv", ports=Ports(port_base))
        settings = kube.KubeSettings()
        print("bench: first localenv up (cold state: certificates, etcd data)", flush=True)
        cold = timed(lambda: kube.up(layout, settings, quiet))
        warm: list[float] = []
        for i in range(args.warm_runs):
            kube.down(layout, quiet)
            warm.append(timed(lambda: kube.up(layout, settings, quiet)))
            print(f"bench: warm localenv up #{i + 1}: {warm[-1]:.2f}s", flush=True)
        try:
            proj = PulumiProject.create(Path(tmp))
            config = proj.stack_config("local")
            config["atlas:openshift"] = {**config["atlas:openshift"], "kubeconfig": str(layout.kubeconfig)}
            # The OpenShift side alone (bench/hpc_sweep.py measures the HPC side).
            config["atlas:hpc"] = {n: {**e, "enabled": False} for n, e in config.get("atlas:hpc", {}).items()}
            proj.set_stack_config("local", config)
            proj.run("stack", "init", "local")
            first_ups: list[float] = []
            for i in range(args.create_runs):
                if i:
                    proj.run("destroy", "--yes", "-s", "local")
                first_ups.append(timed(lambda: proj.run("up", "--yes", "--skip-preview", "-s", "local")))
                print(f"bench: pulumi up creating the OpenShift side #{i + 1}: {first_ups[-1]:.2f}s", flush=True)
            noop: list[float] = []
            for i in range(args.runs):
                noop.append(timed(lambda: proj.run("up", "--yes", "--skip-preview", "-s", "local")))
                print(f"bench: no-change pulumi up #{i + 1}: {noop[-1]:.2f}s", flush=True)
            proj.run("destroy", "--yes", "-s", "local")
        finally:
            kube.down(layout, quiet)
    result = {
        "bench": "local_stack",
        **origin,
        "localenv_up_cold_s": round(cold, 2),
        "localenv_up_warm_median_s": round(statistics.median(warm), 2),
        "localenv_up_warm_runs_s": [round(w, 2) for w in warm],
        "pulumi_up_create_median_s": round(statistics.median(first_ups), 2),
        "pulumi_up_create_runs_s": [round(f, 2) for f in first_ups],
        "pulumi_up_noop_median_s": round(statistics.median(noop), 2),
        "pulumi_up_noop_runs_s": [round(n, 2) for n in noop],
    }
    print(json.dumps(result, indent=2))
    if args.json:
        print(f"bench: wrote {write_result(result, args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
