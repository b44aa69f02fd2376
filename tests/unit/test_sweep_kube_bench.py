"""Pure parts of bench/sweep_kube.py (one Indexed Job against one Job per point on the local
Kubernetes side): where its pods go and what keeps them alive there, what ends a side's wait, the
state it computes, and its row in the results table."""

from __future__ import annotations

from typing import Any

import pytest

from bench import readme_table, sweep_kube
from localenv import kwok


def test_both_sides_place_their_pods_on_kwok_nodes_and_keep_them_running() -> None:
    _, indexed = sweep_kube.manifests(1000, "ns")
    for job in (indexed, sweep_kube.one_job(indexed, 3)):
        template = job["spec"]["template"]
        assert template["metadata"]["annotations"][kwok.RUN_SECONDS_ANNOTATION] == str(sweep_kube.RUN_FOR_S)
        assert template["spec"]["nodeSelector"] == kwok.SIMULATED_PLACEMENT["nodeSelector"]
        assert kwok.SIMULATED_PLACEMENT["tolerations"][0] in template["spec"]["tolerations"]


def test_the_pods_claims_are_made_as_the_stack_makes_them() -> None:
    _, indexed = sweep_kube.manifests(10, "ns")
    claims = sweep_kube.claims(indexed, "ns")
    mounted = {
        v["persistentVolumeClaim"]["claimName"]
        for v in indexed["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert {c["metadata"]["name"] for c in claims} == mounted == {"bench-results", "bench-logs"}
    assert all(c["metadata"]["namespace"] == "ns" and c["spec"]["accessModes"] for c in claims)


def test_only_untainted_kwok_nodes_hold_the_bench_pods() -> None:
    requests = {"cpu": "1", "memory": "256Mi"}
    (cpu_node,) = kwok.cpu_nodes(1)
    (gpu_node,) = kwok.gpu_nodes(1)
    assert sweep_kube.pods_per_node(cpu_node, requests) == 16  # 16 CPUs, one each
    assert sweep_kube.pods_per_node(cpu_node, {"cpu": "100m", "memory": "256Mi"}) == 110  # the pods limit
    assert sweep_kube.pods_per_node(gpu_node, requests) == 0  # nvidia.com/gpu taint, not tolerated
    real = {"metadata": {"name": "n", "labels": {}}, "status": {"allocatable": {"cpu": "64", "pods": "110"}}}
    assert sweep_kube.pods_per_node(real, requests) == 0


def test_a_failed_pod_or_job_is_named() -> None:
    assert sweep_kube.pod_failure({"metadata": {"name": "p"}, "status": {"phase": "Running"}}) is None
    failed = {"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": "DeadlineExceeded"}}
    assert sweep_kube.pod_failure(failed) == "pod p failed: DeadlineExceeded"
    assert sweep_kube.job_failure({"metadata": {"name": "j"}, "status": {"active": 3}}) is None
    condition = {"type": "FailureTarget", "status": "True", "reason": "FailedIndexes", "message": "all"}
    assert sweep_kube.job_failure({"metadata": {"name": "j"}, "status": {"conditions": [condition]}}) == (
        "Job j failed: FailedIndexes: all"
    )
    assert sweep_kube.job_failure({"metadata": {"name": "j"}, "status": {"failedIndexes": "0-9"}}) == (
        "Job j: indexes 0-9 failed"
    )
    assert sweep_kube.job_failure({"metadata": {"name": "j"}, "status": {"failed": 1}}) == "Job j: 1 pod(s) failed"


def test_the_state_counts_the_manifest_twice_and_the_live_object_once() -> None:
    manifest = {"kind": "Job", "spec": {"a": 1}}
    live = {"kind": "Job", "spec": {"a": 1}, "status": {}}
    assert sweep_kube.state_bytes(manifest, live) == 2 * len('{"kind":"Job","spec":{"a":1}}') + len(
        '{"kind":"Job","spec":{"a":1},"status":{}}'
    )


def _ratio(median: float, low: float, high: float) -> dict[str, Any]:
    return {"median": median, "ci95": [low, high], "rounds": 4, "pairs": []}


@pytest.mark.parametrize(("ci", "verdict"), [((1.5, 2.5), "Indexed Job faster"), ((0.9, 1.2), "no clear winner")])
def test_the_kubernetes_row_says_where_each_figure_comes_from(ci: tuple[float, float], verdict: str) -> None:
    objects = {"ConfigMap": 1, "Job": 1, "Pod": 1000}
    data = {
        "points": 1000,
        "kwok_nodes": 63,
        "median_s": {"indexed": 50.0, "jobs": 100.0},
        "median_running_s": {"indexed": 52.0, "jobs": 104.0},
        "objects": {"indexed": objects, "jobs": {**objects, "Job": 1000}},
        "posts": {"indexed": 2, "jobs": 1001},
        "jobs_over_indexed": _ratio(2.0, *ci),
        "jobs_over_indexed_running": _ratio(2.0, *ci),
        "state": {"bytes": {"indexed": 50_000, "jobs": 10_000_000}},
    }
    ((what, figure, how),) = readme_table.sweep_kube_rows(data, "bench/results/f.json")
    assert "63 KWOK simulated nodes" in what and "real API server, Job controller and scheduler" in what
    assert figure.startswith("Indexed Job **50.0 s** to every pod made, 52.0 s to every pod Running, 2 POSTs")
    assert f"ratio made 2.00 (95 % CI {ci[0]:.2f} to {ci[1]:.2f}, 4 rounds), {verdict}" in figure
    assert figure.endswith("(computed from their JSON, not measured) 50.0 kB against 10.0 MB (200x)")
    assert how == "`bench/sweep_kube.py`, `bench/results/f.json`"
