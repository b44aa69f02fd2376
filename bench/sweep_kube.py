"""A 1,000-point sweep on the local Kubernetes side: one Indexed Job against 1,000 Jobs.

Both sides create, through the API server's REST API as Pulumi's Kubernetes provider does (one
POST per object; independent objects `--parallel` at once, the CLI's default here, 8), the same
sweep in a namespace of their own (made and deleted untimed):
- indexed: the table of points as a ConfigMap, then ONE Indexed Job
  (infra/openshift/manifests/sweep_jobs.py's `indexed_step_job`: `completionMode: Indexed`,
  `completions` = `parallelism` = the points, `backoffLimitPerIndex`);
- jobs: the same ConfigMap, then one Job per point: the same pod template, `completions: 1`, the
  point's index given in the pod's env instead of by the Job controller.
Each side's pods are placed on KWOK's simulated nodes (their selector and taint, as
localenv/kwok.py's `on_simulated_nodes` writes them) with `atlas.dev/kwok-run-seconds` RUN_FOR_S on
the template, so KWOK marks each one Running once the real scheduler has bound it and keeps it so
past the sample; their two claims are made, as the stack makes them (`project.pvc_spec`), and
Bound to the local pool before the clock starts. Timed from the first POST until watches on the
namespace have seen a pod for every point (`seconds`: the Job controller's work) and every pod
Running (`running_s`: the scheduler's and KWOK's too); a failed pod or Job (its condition, its
failed indexes), a watch error or DEADLINE_S ends the side with that named instead. Then the API
objects in the namespace are counted and the namespace deleted (untimed; also after a failure).
ABBA, `--rounds` rounds. The local cluster must hold every pod at once (1 CPU each): 63 KWOK CPU
nodes of 16 CPUs for 1,000 points (`scripts/localenv up --only kube --cpu-nodes 63`, or `--up`);
the bench refuses before making anything otherwise.

Pulumi state: computed from each POSTed object's JSON (`state_bytes`: the manifest twice, as
pulumi-kubernetes v4 keeps it as inputs and again under `__inputs`, and the object the API server
returned), not read from a stack export; the stack's other resources are not counted.

The first run (2026-12-05, 12:15 UTC) was read as "the Indexed Job's pods failed on KWOK's nodes".
They never reached a node: their claims did not exist (the scheduler's log, for every pod:
`status="not found"`) and they tolerated no KWOK taint, so all stayed Pending, which a pod
creation count does not mind: the watch had seen all 1,000 pods after 53 s (re-run at 14:14
with that code, observed every 3 s: 1,000 Pending, the Job `active`, no failed index). The
failures came after, from the bench's own cleanup: deleting the namespace deletes the Pending
pods, the Job controller counts every pod deleted before it finished as failed (`failedIndexes`
0-999, `FailureTarget` `FailedIndexes`, `backoffLimitPerIndex` 0), and PodGC marks the unscheduled
terminating pods `Failed` before removing them; the namespace took another 58 s to go, with
nothing printed. Pods that cannot be scheduled are not what the issue asks about, so they are now
scheduled and kept Running, and the wait says why it ended.

    .venv/bin/python -m bench.sweep_kube [--points 1000] [--rounds 4] [--up] [--out FILE]
        (the local environment of ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.provenance import fresh_path, run_record, write_result
from bench.stats import RESULTS, abba_order, now_utc, paired_ratio
from bench.sweep_arrays import workload_definition
from infra.kubeapi import KubeApi
from infra.openshift.manifests.labels import RunIdentity
from infra.openshift.manifests.project import pvc_spec
from infra.openshift.manifests.sweep_jobs import INDEX_ANNOTATION, indexed_step_job, points_config_map_data
from infra.openshift.manifests.volumes import Claims
from infra.openshift.section_models import parse_quantity
from infra.workload.parse import parse_workload
from infra.workload.render import render_step
from infra.workload.sweep import INDEX_ENV
from infra.workload_check import kubernetes_context
from localenv import kube, kwok
from localenv.layout import default_layout
from localenv.pki import admin_api

SIDES = ("indexed", "jobs")
PARALLEL = 8  # `pulumi up --help` here: "(default 8)"
POINTS_MAP = "sweep-points"
JOB_NAME = "sweep-train"
# How long KWOK keeps each pod Running (the pod template's atlas.dev/kwok-run-seconds): longer than
# any sample, so no pod finishes, and no index completes or fails, while a side is timed.
RUN_FOR_S = 3600
DEADLINE_S = 600.0  # a side that has not made (and run) every pod by then fails the bench
CLAIMS_BOUND_S = 120.0


def manifests(points: int, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The points' ConfigMap and the Indexed Job, as the OpenShift side renders them, its pods
    placed on KWOK's simulated nodes and kept Running there for RUN_FOR_S."""
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
    template = job["spec"]["template"]
    template["spec"] = kwok.on_simulated_nodes(template["spec"])
    template["metadata"]["annotations"] = {
        **template["metadata"].get("annotations", {}),
        kwok.RUN_SECONDS_ANNOTATION: str(RUN_FOR_S),
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": POINTS_MAP, "namespace": namespace},
        "data": points_config_map_data(step.sweep),
    }
    return config_map, job


def claims(job: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The claims the pod template mounts, as the stack makes them (project.pvc_spec of the
    workload's storage settings): made untimed before a side, so its pods can be scheduled."""
    settings, _ = kubernetes_context(parse_workload(workload_definition(1)), ())
    by_name = {"bench-data": settings.storage.data, "bench-results": settings.storage.results,
               "bench-logs": settings.storage.logs}
    mounted = [
        v["persistentVolumeClaim"]["claimName"]
        for v in job["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    return [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
         "spec": pvc_spec(by_name[name])}
        for name in mounted
    ]


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


def pods_per_node(node: dict[str, Any], requests: dict[str, str]) -> int:
    """How many pods with these requests the scheduler can place on a KWOK node the bench's pods
    tolerate (KWOK's taint alone): 0 for any other node."""
    labels = node["metadata"].get("labels", {})
    taints = node.get("spec", {}).get("taints") or []
    if labels.get("type") != "kwok" or any(t.get("key") != kwok.KWOK_TAINT["key"] for t in taints):
        return 0
    free = node.get("status", {}).get("allocatable", {})
    fits = [int(free.get("pods", 0))]
    for resource, wanted in requests.items():
        have = free.get(resource)
        if not have or have == "0":
            return 0
        fits.append(int(parse_quantity(have, resource).value // parse_quantity(wanted, resource).value))
    return min(fits)


def check_capacity(api: KubeApi, job: dict[str, Any], points: int) -> int:
    """The bench's KWOK nodes, refusing before anything is made if they cannot hold every pod at
    once (then some would stay Pending and the `running` time would never come)."""
    requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    nodes = api.get("/api/v1/nodes")["items"]
    room = {n["metadata"]["name"]: pods_per_node(n, requests) for n in nodes}
    usable = {name: pods for name, pods in room.items() if pods}
    total = sum(usable.values())
    if total < points:
        per_node = max(usable.values(), default=16)
        raise SystemExit(
            f"the local cluster's untainted KWOK nodes hold {total} of the {points} pods ({len(usable)} nodes, "
            f"pods requesting {requests}): start it with more, e.g. `scripts/localenv up --only kube --cpu-nodes "
            f"{-(-points // per_node)}` (after `scripts/localenv down`), or run `--up`"
        )
    return len(usable)


def pod_failure(pod: dict[str, Any]) -> str | None:
    """Why a pod makes the sample void (it failed), else None."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    return f"pod {pod['metadata']['name']} failed: {status.get('reason', '')} {status.get('message', '')}".rstrip()


def job_failure(job: dict[str, Any]) -> str | None:
    """Why a Job makes the sample void (failed, or an index or pod of it failed), else None."""
    status = job.get("status") or {}
    name = job["metadata"]["name"]
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Failed", "FailureTarget") and condition.get("status") == "True":
            return f"Job {name} failed: {condition.get('reason', '')}: {condition.get('message', '')}"
    if status.get("failedIndexes"):
        return f"Job {name}: indexes {status['failedIndexes']} failed"
    if status.get("failed"):
        return f"Job {name}: {status['failed']} pod(s) failed"
    return None


class SideWatch:
    """Watches a namespace's pods and Jobs: when each pod was first seen, and first seen Running;
    stops at the first failed pod or Job, a watch error, or the deadline (no wait without end)."""

    def __init__(self, api: KubeApi, namespace: str, target: int) -> None:
        self.target = target
        self.created: set[str] = set()
        self.running: set[str] = set()
        self.all_created_at: float | None = None
        self.all_running_at: float | None = None
        self.failure: str | None = None
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        for path, on_event in (
            (f"/api/v1/namespaces/{namespace}/pods", self._on_pod),
            (f"/apis/batch/v1/namespaces/{namespace}/jobs", self._on_job),
        ):
            version = api.get(f"{path}?limit=1")["metadata"]["resourceVersion"]
            thread = threading.Thread(target=self._run, args=(api, path, version, on_event), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _run(self, api: KubeApi, path: str, version: str, on_event: Any) -> None:
        try:
            while not self.stop.is_set():
                # The server ends a watch after timeoutSeconds: go on from the last version seen.
                for event in api.watch(path, version, self.stop, timeout_s=int(DEADLINE_S)):
                    if event.get("type") == "ERROR":
                        raise RuntimeError(f"watch of {path}: {event.get('object', {}).get('message', event)}")
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        with self.changed:
                            on_event(event["object"], time.perf_counter())
                            self.changed.notify_all()
        except Exception as error:  # noqa: BLE001 - reported by wait()
            with self.changed:
                self.failure = self.failure or f"{type(error).__name__}: {error}"
                self.changed.notify_all()

    def _on_pod(self, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        self.created.add(name)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.running.add(name)
        self.failure = self.failure or pod_failure(pod)
        if self.all_created_at is None and len(self.created) >= self.target:
            self.all_created_at = now
        if self.all_running_at is None and len(self.running) >= self.target:
            self.all_running_at = now

    def _on_job(self, job: dict[str, Any], now: float) -> None:
        self.failure = self.failure or job_failure(job)

    def wait_all_running(self, started: float, deadline_s: float = DEADLINE_S) -> None:
        """Until every pod has been seen Running; SystemExit naming the cause otherwise."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.all_running_at is not None or self.failure is not None,
                max(0.0, started + deadline_s - time.perf_counter()),
            )
            done, failure = self.all_running_at is not None, self.failure
            seen = f"{len(self.created)} of {self.target} pods made, {len(self.running)} Running"
        self.stop.set()
        if failure is not None:
            raise SystemExit(f"{failure} ({seen})")
        if not done:
            raise SystemExit(f"deadline: {deadline_s:.0f} s passed with {seen}")


def count(api: KubeApi, namespace: str, kind: str, group: str = "api/v1") -> int:
    return len(api.get(f"/{group}/namespaces/{namespace}/{kind}")["items"])


def compact_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def state_bytes(manifest: dict[str, Any], live: dict[str, Any]) -> int:
    """What pulumi-kubernetes (v4's checkpointObject) keeps of one object, computed, not read from
    a stack: its inputs (the manifest), and as outputs the object the API server returned with the
    inputs again under `__inputs`; compact JSON, without Pulumi's envelope (URN, type, provider,
    dependencies) or the two short strings it adds."""
    return 2 * compact_bytes(manifest) + compact_bytes(live)


def make_claims(api: KubeApi, bodies: list[dict[str, Any]], namespace: str) -> None:
    """The pods' claims, made and Bound (to the local cluster's pool volumes) before timing."""
    path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
    for body in bodies:
        api.request("POST", path, body)
    started = time.perf_counter()
    while True:
        phases = {c["metadata"]["name"]: c.get("status", {}).get("phase") for c in api.get(path)["items"]}
        if all(phase == "Bound" for phase in phases.values()):
            return
        if time.perf_counter() - started > CLAIMS_BOUND_S:
            raise SystemExit(
                f"claims {phases} not Bound after {CLAIMS_BOUND_S:.0f} s: the local cluster's pool of volumes "
                "is empty or its recycler (localenv's pv-recycler) is not running"
            )
        time.sleep(0.5)


def run_side(api: KubeApi, side: str, points: int, namespace: str) -> dict[str, Any]:
    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    config_map, indexed = manifests(points, namespace)
    make_claims(api, claims(indexed, namespace), namespace)
    bodies = [indexed] if side == "indexed" else [one_job(indexed, i) for i in range(points)]
    watch = SideWatch(api, namespace, points)
    started = time.perf_counter()
    made = [(config_map, api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map))]
    jobs_path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    with ThreadPoolExecutor(PARALLEL) as pool:
        made += zip(bodies, pool.map(lambda body: api.request("POST", jobs_path, body), bodies), strict=True)
    posts = len(made)
    posted = time.perf_counter() - started
    watch.wait_all_running(started)
    assert watch.all_created_at is not None and watch.all_running_at is not None
    objects = {
        "ConfigMap": count(api, namespace, "configmaps") - 1,  # less kube-root-ca.crt, made by the cluster
        "Job": count(api, namespace, "jobs", "apis/batch/v1"),
        "Pod": count(api, namespace, "pods"),
    }
    state: dict[str, int] = {}
    for manifest, live in made:
        state[manifest["kind"]] = state.get(manifest["kind"], 0) + state_bytes(manifest, live)
    return {
        "seconds": round(watch.all_created_at - started, 3),
        "running_s": round(watch.all_running_at - started, 3),
        "posted_s": round(posted, 3),
        "posts": posts,
        "objects": objects,
        "state_bytes": state,
    }


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


def summarise(
    samples: list[dict[str, Any]], args: argparse.Namespace, nodes: int, origin: dict[str, Any]
) -> dict[str, Any]:
    seconds = {side: [s["seconds"] for s in samples if s["side"] == side] for side in SIDES}
    running = {side: [s["running_s"] for s in samples if s["side"] == side] for side in SIDES}
    first = {side: next(s for s in samples if s["side"] == side) for side in SIDES}
    result = {
        "bench": "sweep_kube",
        "date": now_utc(),
        **origin,
        "provenance": "local Kubernetes side: a real kube-apiserver, etcd, kube-controller-manager (the Job "
        "controller, at its default client rate limit: --kube-api-qps 20, --kube-api-burst 30) and "
        "kube-scheduler on this host; the nodes are KWOK's simulated nodes, which run nothing: KWOK marks "
        f"each pod Running once scheduled and keeps it so ({RUN_FOR_S} s, longer than any sample); the pods' "
        "claims are made and Bound untimed before each side",
        "args": sys.argv[1:],
        "points": args.points,
        "rounds": args.rounds,
        "rounds_completed": len(samples) // len(SIDES),
        "kwok_nodes": nodes,
        "parallel_posts": PARALLEL,
        "order": "ABBA (each round the reverse of the one before)",
        "median_s": {side: round(statistics.median(v), 3) for side, v in seconds.items()},
        "median_running_s": {side: round(statistics.median(v), 3) for side, v in running.items()},
        "objects": {side: first[side]["objects"] for side in SIDES},
        "posts": {side: first[side]["posts"] for side in SIDES},
        # Above 1: the Indexed Job's pods were all created (all Running) sooner.
        "jobs_over_indexed": paired_ratio(seconds["jobs"], seconds["indexed"]),
        "jobs_over_indexed_running": paired_ratio(running["jobs"], running["indexed"]),
        "state": {
            "measured": False,
            "how": "computed, not measured: for each object POSTed, what pulumi-kubernetes v4 keeps in a stack "
            "(checkpointObject): the manifest as inputs, and as outputs the object the API server returned "
            "plus the manifest again under __inputs; compact JSON bytes, without Pulumi's per-resource "
            "envelope (URN, type, provider, dependencies) and without the stack's other resources (Atlas's "
            "SweepCompletion)",
            "bytes": {side: sum(first[side]["state_bytes"].values()) for side in SIDES},
            "bytes_by_kind": {side: first[side]["state_bytes"] for side in SIDES},
        },
        "samples": samples,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--up", action="store_true", help="start the local Kubernetes side first, with "
                        "enough KWOK CPU nodes for every pod at once")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    origin = run_record()
    # Claimed now and rewritten after every round: an earlier run's file is never overwritten.
    out = fresh_path(args.out or RESULTS / f"sweep-kube-{args.points}-{now_utc()[:10]}.json")
    layout = default_layout()
    _, job = manifests(args.points, "sizing")
    if args.up:
        requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        per_node = pods_per_node(kwok.cpu_nodes(1)[0], requests)
        settings = kube.KubeSettings(cpu_nodes=-(-args.points // per_node))
        kube.up(layout, settings, lambda line: print(line, flush=True))
    api = admin_api(layout, 60)
    nodes = check_capacity(api, job, args.points)
    samples = []
    tag = int(time.time())
    for round_index, order in enumerate(abba_order(SIDES, args.rounds)):
        for side in order:
            namespace = f"sweepbench-{tag}-{round_index}-{side}"
            try:
                sample = {"round": round_index, "side": side, **run_side(api, side, args.points, namespace)}
            finally:
                # Also after a failed side: nothing of it is left to weigh on the next run.
                deleted_s = delete_namespace(api, namespace)
            sample["namespace_deleted_s"] = round(deleted_s, 1)
            samples.append(sample)
            print(sample, flush=True)
        # Written after every round: a run stopped early keeps the rounds it finished.
        result = summarise(samples, args, nodes, origin)
        write_result(result, out, update=True)
    print(result["median_s"], result["median_running_s"], result["objects"], result["jobs_over_indexed"]["median"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
