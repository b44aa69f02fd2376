"""A 1,000-point sweep on the local Kubernetes side: one Indexed Job against 1,000 Jobs.

Both sides create, through the API server's REST API as Pulumi's Kubernetes provider does (one
POST per object; independent objects `--parallel` at once, the CLI's default here, 8), the same
sweep in a namespace of their own (made and deleted untimed):
- indexed: the table of points as a ConfigMap, then ONE Indexed Job
  (infra/openshift/manifests/sweep_jobs.py's `indexed_step_job`: `completionMode: Indexed`,
  `completions` = `parallelism` = the points, `backoffLimitPerIndex`);
- jobs: the same ConfigMap, then one Job per point: the same pod template, `completions: 1`, the
  point's index given in the pod's env instead of by the Job controller.
Timed from the first POST until a watch on the namespace's pods has seen a pod for every point
(the Job controller's work included); then the API objects in the namespace are counted. ABBA,
`--rounds` rounds.

The pods are created, not run: their volume claims are absent (they stay Pending, which costs the
scheduler the same on both sides); the local cluster's nodes for scale are KWOK's simulated nodes,
which run nothing in any case. Pulumi state is not measured here: the OpenShift side's Indexed Job
is wired into the stack by another slice (branch sweepk8s).

Not yet measured (2026-12-05): on its first run the Indexed Job's pods, scheduled onto KWOK's
nodes, failed (cause not found in the time left), so the Job failed every index
(`backoffLimitPerIndex` 0) before the controller had made all 1,000 pods, and the watch waited
for pods that never came. Before the next run: find why they fail (the KWOK stages, the absent
claims), or keep them running (`atlas.dev/kwok-run-seconds` on the pod template), and stop the
wait when the Job fails.

    .venv/bin/python -m bench.sweep_kube [--points 1000] [--rounds 4] [--up] [--out FILE]
        (the local environment of ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.stats import RESULTS, abba_order, machine, now_utc, paired_ratio, write_result
from bench.sweep_arrays import workload_definition
from infra.kubeapi import KubeApi
from infra.openshift.manifests.labels import RunIdentity
from infra.openshift.manifests.sweep_jobs import INDEX_ANNOTATION, indexed_step_job, points_config_map_data
from infra.openshift.manifests.volumes import Claims
from infra.toolchain.pins import REPO_ROOT
from infra.workload.parse import parse_workload
from infra.workload.render import render_step
from infra.workload.sweep import INDEX_ENV
from infra.workload_check import kubernetes_context
from localenv import kube
from localenv.layout import default_layout
from localenv.pki import admin_api

SIDES = ("indexed", "jobs")
PARALLEL = 8  # `pulumi up --help` here: "(default 8)"
POINTS_MAP = "sweep-points"
JOB_NAME = "sweep-train"


def manifests(points: int, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The points' ConfigMap and the Indexed Job, as the OpenShift side renders them."""
    workload = parse_workload(workload_definition(points))
    settings, context = kubernetes_context(workload, ())
    context = dataclasses.replace(
        context,
        identity=RunIdentity("sweepbench", "1", workload.name),
        namespace=namespace,
        image="127.0.0.1/atlas/bench:none",
        service_account="default",
        claims=Claims(data="bench-data", results="bench-results", logs="bench-logs"),
    )
    (step,) = workload.steps
    assert step.sweep is not None
    job = indexed_step_job(
        render_step(workload, step.name, "openshift"), step.sweep, workload, settings, context, POINTS_MAP
    )
    job["metadata"] = {**job.get("metadata", {}), "name": JOB_NAME, "namespace": namespace}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": POINTS_MAP, "namespace": namespace},
        "data": points_config_map_data(step.sweep),
    }
    return config_map, job


def one_job(indexed: dict[str, Any], index: int) -> dict[str, Any]:
    """Point `index` as a Job of its own: the Indexed Job's pod template, its index in the env."""
    job = copy.deepcopy(indexed)
    job["metadata"]["name"] = f"{JOB_NAME}-{index}"
    spec = job["spec"]
    for key in ("completionMode", "backoffLimitPerIndex"):
        spec.pop(key, None)
    spec.update(completions=1, parallelism=1, backoffLimit=indexed["spec"].get("backoffLimitPerIndex", 0))
    container = spec["template"]["spec"]["containers"][0]
    env = [e for e in container["env"] if e["name"] != INDEX_ENV]
    # The point program reads JOB_COMPLETION_INDEX, which only an Indexed Job's controller sets.
    container["env"] = [
        {"name": INDEX_ENV, "value": str(index)},
        {"name": "JOB_COMPLETION_INDEX", "value": str(index)},
        *env,
    ]
    spec["template"]["metadata"].get("annotations", {}).pop(INDEX_ANNOTATION, None)
    return job


class PodCounter:
    """Counts the pods a watch sees added in a namespace, until `target` distinct ones."""

    def __init__(self, api: KubeApi, namespace: str, target: int) -> None:
        self.seen: set[str] = set()
        self.done = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.target = target
        path = f"/api/v1/namespaces/{namespace}/pods"
        version = api.get(f"{path}?limit=1")["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, args=(api, path, version), daemon=True)
        self.thread.start()

    def _run(self, api: KubeApi, path: str, version: str) -> None:
        try:
            for event in api.watch(path, version, self.stop, timeout_s=600):
                if event.get("type") == "ADDED":
                    self.seen.add(event["object"]["metadata"]["name"])
                    if len(self.seen) >= self.target:
                        self.done.set()
                        return
        except BaseException as error:  # noqa: BLE001 - reported by wait()
            self.error = error
            self.done.set()

    def wait(self, timeout: float) -> None:
        if not self.done.wait(timeout) or self.error is not None:
            self.stop.set()
            raise SystemExit(f"saw {len(self.seen)} of {self.target} pods ({self.error or 'timed out'})")


def count(api: KubeApi, namespace: str, kind: str, group: str = "api/v1") -> int:
    return len(api.get(f"/{group}/namespaces/{namespace}/{kind}")["items"])


def run_side(api: KubeApi, side: str, points: int, namespace: str) -> dict[str, Any]:
    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    config_map, indexed = manifests(points, namespace)
    bodies = [indexed] if side == "indexed" else [one_job(indexed, i) for i in range(points)]
    counter = PodCounter(api, namespace, points)
    started = time.perf_counter()
    api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map)
    jobs_path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(lambda body: api.request("POST", jobs_path, body), bodies))
    posts = 1 + len(bodies)
    posted = time.perf_counter() - started
    counter.wait(600)
    seconds = time.perf_counter() - started
    objects = {
        "ConfigMap": count(api, namespace, "configmaps") - 1,  # less kube-root-ca.crt, made by the cluster
        "Job": count(api, namespace, "jobs", "apis/batch/v1"),
        "Pod": count(api, namespace, "pods"),
    }
    return {"seconds": round(seconds, 3), "posted_s": round(posted, 3), "posts": posts, "objects": objects}


def delete_namespace(api: KubeApi, namespace: str, timeout: float = 600) -> float:
    started = time.perf_counter()
    api.request("DELETE", f"/api/v1/namespaces/{namespace}")
    while time.perf_counter() - started < timeout:
        try:
            api.get(f"/api/v1/namespaces/{namespace}")
        except Exception:  # noqa: BLE001 - 404: gone
            return time.perf_counter() - started
        time.sleep(1)
    raise SystemExit(f"namespace {namespace} still there after {timeout:.0f} s")


def summarise(samples: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    seconds = {side: [s["seconds"] for s in samples if s["side"] == side] for side in SIDES}
    result = {
        "bench": "sweep_kube",
        "date": now_utc(),
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip(),
        "machine": machine(),
        "provenance": "local Kubernetes side: a real kube-apiserver, etcd, kube-controller-manager (the Job "
        "controller) and kube-scheduler on this host; the nodes for scale are KWOK's simulated nodes; the pods "
        "are created, not run (their volume claims are absent, so they stay Pending)",
        "args": sys.argv[1:],
        "points": args.points,
        "rounds": args.rounds,
        "rounds_completed": len(samples) // len(SIDES),
        "parallel_posts": PARALLEL,
        "order": "ABBA (each round the reverse of the one before)",
        "median_s": {side: round(statistics.median(v), 3) for side, v in seconds.items()},
        "objects": {side: next(s["objects"] for s in samples if s["side"] == side) for side in SIDES},
        "posts": {side: next(s["posts"] for s in samples if s["side"] == side) for side in SIDES},
        # Above 1: the Indexed Job's pods were all created sooner.
        "jobs_over_indexed": paired_ratio(seconds["jobs"], seconds["indexed"]),
        "state": "not measured: the OpenShift side's Indexed Job is not yet in the stack (branch sweepk8s)",
        "samples": samples,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--up", action="store_true", help="start the local Kubernetes side first")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    layout = default_layout()
    if args.up:
        kube.up(layout, kube.KubeSettings(), lambda line: print(line, flush=True))
    api = admin_api(layout, 60)
    samples = []
    tag = int(time.time())
    for round_index, order in enumerate(abba_order(SIDES, args.rounds)):
        for side in order:
            namespace = f"sweepbench-{tag}-{round_index}-{side}"
            sample = {"round": round_index, "side": side, **run_side(api, side, args.points, namespace)}
            sample["namespace_deleted_s"] = round(delete_namespace(api, namespace), 1)
            samples.append(sample)
            print(sample, flush=True)
        # Written after every round: a run stopped early keeps the rounds it finished.
        result = summarise(samples, args)
        out = args.out or RESULTS / f"sweep-kube-{result['date'][:10]}.json"
        write_result(result, out)
    print(result["median_s"], result["objects"], result["jobs_over_indexed"]["median"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
