"""The Kubernetes side of the monitor as a source: the watch cache's Jobs, pods and nodes as one
environment's view.

Reads only what `KubeCache` (kube.py) holds: listing once and then following watches, it
never makes a request of its own when a view is taken. The steps are read by the
comparison's own parser of the API's JSON (`infra.compare.kube_records`), so the monitor and
the report agree on every time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infra.compare.kube_records import (
    GPU_MOCK_LABEL,
    GPU_RESOURCE,
    KWOK_NODE_ANNOTATION,
    node_facts,
    node_record,
    records_from_api,
)
from infra.compare.records import NodeRecord, StepRecord
from infra.compare.report_model import MOCK_GPU
from infra.compare.sweep_records import kube_sweep_elements
from infra.compare.sweeps import state_counts
from infra.hpc.scheduler import Phase
from infra.monitor.estimate import RunningJob, estimate_wait
from infra.monitor.kube import KubeCache
from infra.monitor.model import EnvironmentView, NodeView, SweepView
from infra.monitor.sources import EnvironmentSource, ViewContext, step_view
from infra.outputs import KubernetesOutputs
from infra.provenance import REAL, label, loopback_url_fact
from infra.timeparse import rfc3339

RECENT_S = 3600.0  # waits of pods scheduled within this window feed the estimate
KUBE_PHASES = {"Complete": Phase.SUCCEEDED, "Failed": Phase.FAILED, "NotFound": Phase.UNKNOWN}


class KubeSource(EnvironmentSource):
    """One Kubernetes environment of the outputs, read from a watch cache of its cluster."""

    def __init__(self, name: str, outputs: KubernetesOutputs, cache: KubeCache) -> None:
        self.name, self.outputs, self.cache = name, outputs, cache

    def start(self, watch: bool) -> None:
        if watch:
            self.cache.start()
        else:
            self.cache.list_all()

    def close(self) -> None:
        self.cache.stop()

    def view(self, now: float, context: ViewContext) -> EnvironmentView:
        outputs, cache = self.outputs, self.cache
        namespace = outputs.namespace
        pods = cache.items("pods")
        nodes = cache.items("nodes")
        ns_pods = [p for p in pods if (p.get("metadata") or {}).get("namespace") == namespace]
        records = records_from_api(
            self.name, outputs, {"items": cache.items("jobs")}, {"items": ns_pods}, {"items": []}, nodes,
            nodes_unread=cache.error("nodes"),
        )
        step_records = records.steps if isinstance(records.steps, tuple) else ()
        steps = tuple(
            step_view(r, kube_phase(r), now, telemetry_note=_telemetry_note(records.telemetry.get(r.step)))
            for r in step_records
        )
        node_views = sorted((self._node_view(node, pods) for node in nodes), key=lambda n: n.name)
        estimate = None
        if context.shape is not None:
            # Pods below the default priority (backfill that yields) are preempted for a real job.
            pending = [
                pod_gpus(p)
                for p in pods
                if pod_active(p) and not (p.get("spec") or {}).get("nodeName") and pod_gpus(p) and not _yields(p)
            ]
            waits = [w for p in pods if pod_gpus(p) and (w := _pod_wait(p, now)) is not None]
            running = [
                RunningJob(_pod_deadline(p), pod_gpus(p), _yields(p))
                for p in pods
                if pod_active(p) and (p.get("spec") or {}).get("nodeName") and pod_gpus(p)
            ]
            estimate = estimate_wait(
                self.name, context.shape, [n for n in node_views if n.gpus_total], pending, running, waits, now
            )
        return EnvironmentView(
            name=self.name,
            kind=outputs.kind,
            platform=f"{outputs.flavour.capitalize()} API (watch)",
            steps=steps,
            nodes=tuple(node_views),
            polled_at=cache.synced_at(),
            source=f"Kubernetes API {outputs.api_url}: LIST then WATCH /api/v1/nodes, /api/v1/pods, "
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            estimate=estimate,
            notes=tuple(cache.notes) + (tuple(records.notes) if records.notes else ()),
            # The report's own derivation from the same objects (infra.compare.kube_records).
            provenance=records.provenance,
            sweeps=self._sweeps({"items": cache.items("jobs")}, ns_pods, records.nodes),
        )

    def _sweeps(
        self, jobs: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], nodes: Sequence[NodeRecord]
    ) -> tuple[SweepView, ...]:
        """Each swept step's elements by state: its Indexed Job's pods in the cache, read as the
        report reads them (infra.compare.sweep_records)."""
        by_name = {j["metadata"]["name"]: j for j in jobs.get("items", [])}
        simulated = frozenset(n.name for n in nodes if n.simulated)
        views = []
        for step in self.outputs.steps:
            if step.sweep is None:
                continue
            jobs_read = ", ".join(a.job_id for a in step.sweep.arrays) or "-"
            source = f"the watch cache's Indexed Job(s) {jobs_read} and their pods"
            elements, notes = kube_sweep_elements(step.sweep, by_name, pods, simulated, source)
            views.append(
                SweepView(
                    step.name,
                    step.sweep.points,
                    state_counts([e.phase for e in elements], step.sweep.points),
                    source,
                    "; ".join(notes),
                )
            )
        return tuple(views)

    def _node_view(self, node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> NodeView:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        node_name = (node.get("metadata") or {}).get("name", "")
        holders = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node_name and pod_active(p)]
        gpu_holders = [p for p in holders if pod_gpus(p)]
        simulated = is_simulated(node)
        mock = ((node.get("metadata") or {}).get("labels") or {}).get(GPU_MOCK_LABEL) == "true"
        return NodeView(
            name=node_name,
            state=_node_state(node),
            gpus_total=int(allocatable.get(GPU_RESOURCE, 0) or 0),
            gpus_allocated=sum(pod_gpus(p) for p in gpu_holders),
            gpu_util_percent=None,
            util_source="not measured: simulated node (KWOK), no GPU ran"
            if simulated
            else MOCK_GPU
            if mock
            else "not readable: no GPU metrics source for Kubernetes nodes here (the sampler's files "
            "sit on the run's PVC)",
            simulated=simulated,
            provenance=label(REAL, [loopback_url_fact("Kubernetes API", self.outputs.api_url),
                                    *node_facts(node_record(node))]),
            site=self.outputs.api_url or self.cache.client.server,
            workloads=tuple(
                f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}"
                for p in gpu_holders
            ),
        )


def kube_phase(record: StepRecord) -> Phase:
    if record.state in KUBE_PHASES:
        return KUBE_PHASES[record.state]
    return Phase.RUNNING if record.started_at is not None else Phase.PENDING


def _telemetry_note(value: object) -> str:
    reason = getattr(value, "reason", "")
    return str(reason)


def _node_state(node: Mapping[str, Any]) -> str:
    spec = node.get("spec") or {}
    ready = next((c for c in (node.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None)
    state = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    return state + (",SchedulingDisabled" if spec.get("unschedulable") else "")


def _pod_wait(pod: Mapping[str, Any], now: float) -> float | None:
    created = rfc3339((pod.get("metadata") or {}).get("creationTimestamp"))
    condition = next(
        (c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"), None
    )
    if created is None or condition is None or condition.get("status") != "True":
        return None
    scheduled = rfc3339(condition.get("lastTransitionTime"))
    if scheduled is None or now - scheduled > RECENT_S:
        return None
    return max(0.0, scheduled - created)


def _yields(pod: Mapping[str, Any]) -> bool:
    return int((pod.get("spec") or {}).get("priority") or 0) < 0


def _pod_deadline(pod: Mapping[str, Any]) -> float | None:
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    started = rfc3339((pod.get("status") or {}).get("startTime"))
    return started + float(deadline) if deadline and started is not None else None


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds: its containers' nvidia.com/gpu (limits, else requests)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(GPU_RESOURCE)
        if value is not None:
            total += int(value)
    return total


def pod_active(pod: Mapping[str, Any]) -> bool:
    """Bound or waiting, and not finished: it holds (or wants) its resources."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def is_simulated(node: Mapping[str, Any]) -> bool:
    meta = node.get("metadata") or {}
    return (meta.get("annotations") or {}).get(KWOK_NODE_ANNOTATION) == "fake" or (meta.get("labels") or {}).get(
        "type"
    ) == "kwok"
