"""The Kubernetes side of the monitor as a source: the watch cache's Jobs, pods and nodes as one
environment's view, and the running steps' own readings from the run's monitor.

Jobs, pods and nodes come only from what `KubeCache` (kube.py) holds: listing once and then
following watches, it makes no request when a view is taken. The steps are read by the
comparison's own parser of the API's JSON (`infra.compare.kube_records`), so the monitor and the
report agree on every time. A running step's telemetry and the training log are files on the run's
PVC, read through the run's monitor at most once an interval (`KubeLive`, kube_live.py). The
queue-wait estimate counts only the nodes the GPU step's pods may run on (placement.py).
"""

from __future__ import annotations

import dataclasses
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
from infra.hpc.target import DEFAULT_POLL_INTERVAL_S
from infra.monitor.estimate import JobShape, RunningJob, estimate_wait
from infra.monitor.kube import KubeCache
from infra.monitor.kube_live import KubeLive, LiveRead
from infra.monitor.model import (
    CellReasons,
    EnvironmentView,
    LiveReading,
    NodeView,
    StepView,
    SweepView,
    WaitEstimate,
)
from infra.monitor.placement import (
    GPU_PRODUCT_LABEL,
    GPU_TOLERATION,
    Placement,
    eligibility,
    placement_of_pod_spec,
    placement_of_selector,
    why_not,
)
from infra.monitor.reasons import SIMULATED, SWEPT, iteration_rate
from infra.monitor.sources import EnvironmentSource, ViewContext, step_view
from infra.outputs import KubernetesOutputs
from infra.provenance import REAL, label, loopback_url_fact
from infra.timeparse import rfc3339

RECENT_S = 3600.0  # waits of pods scheduled within this window feed the estimate
KUBE_PHASES = {"Complete": Phase.SUCCEEDED, "Failed": Phase.FAILED, "NotFound": Phase.UNKNOWN}


class KubeSource(EnvironmentSource):
    """One Kubernetes environment of the outputs, read from a watch cache of its cluster; a
    running step's telemetry and the training log from the run's monitor (`live`, kube_live.py)."""

    def __init__(self, name: str, outputs: KubernetesOutputs, cache: KubeCache, live: KubeLive | None = None) -> None:
        self.name, self.outputs, self.cache = name, outputs, cache
        # The cache's own client, reached when a step runs (a view of finished steps asks nothing).
        self.live = live or KubeLive(
            lambda path: cache.client.get(path), outputs.namespace, outputs.run_id, bool(outputs.monitor_url),
            DEFAULT_POLL_INTERVAL_S,
        )

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
        jobs = cache.items("jobs")
        ns_pods = [p for p in pods if (p.get("metadata") or {}).get("namespace") == namespace]
        records = records_from_api(
            self.name, outputs, {"items": jobs}, {"items": ns_pods}, {"items": []}, nodes,
            nodes_unread=cache.error("nodes"),
        )
        step_records = records.steps if isinstance(records.steps, tuple) else ()
        steps, live_note = self._steps(step_records, nodes, now, context)
        # A real node's GPU use where this run's running steps on it read theirs (their GPUs only).
        used: dict[str, list[float]] = {}
        for step in steps:
            if step.gpu_util_percent is not None and step.node:
                used.setdefault(step.node, []).append(step.gpu_util_percent)
        node_views = sorted((self._node_view(node, pods, used) for node in nodes), key=lambda n: n.name)
        estimate = None
        if context.shape is not None:
            unread = cache.error("nodes")
            estimate = (
                # Free GPUs are the nodes' to say: without them nothing can be estimated, and "never
                # starts" would be a guess.
                WaitEstimate(self.name, max(context.shape.gpus, 0), None, f"the nodes are {unread}", 0, 0)
                if unread
                else self._estimate(context.shape, nodes, node_views, pods, jobs, now)
            )
        notes = (*cache.notes, *(records.notes or ()), *((live_note,) if live_note else ()))
        return EnvironmentView(
            name=self.name,
            kind=outputs.kind,
            platform=f"{outputs.flavour.capitalize()} API (watch)",
            steps=steps,
            nodes=tuple(node_views),
            polled_at=cache.synced_at(),
            source=f"Kubernetes API {outputs.api_url}: LIST then WATCH /api/v1/nodes, /api/v1/pods, "
            f"/apis/batch/v1/namespaces/{namespace}/jobs; running steps' telemetry and the training log "
            f"through the run's monitor (services/<monitor>:http/proxy, at most every {self.live.interval_s:g} s)",
            estimate=estimate,
            notes=notes,
            # The report's own derivation from the same objects (infra.compare.kube_records).
            provenance=records.provenance,
            sweeps=self._sweeps({"items": jobs}, ns_pods, records.nodes),
        )

    def _steps(
        self, records: Sequence[StepRecord], nodes: Sequence[Mapping[str, Any]], now: float, context: ViewContext
    ) -> tuple[tuple[StepView, ...], str]:
        """Each step's row; the running ones (on a real node, not swept) with what the run's monitor
        serves of them, every empty cell with why."""
        swept = {s.name for s in self.outputs.steps if s.sweep is not None}
        mock = {
            str((n.get("metadata") or {}).get("name"))
            for n in nodes
            if ((n.get("metadata") or {}).get("labels") or {}).get(GPU_MOCK_LABEL) == "true"
        }
        phases = {r.step: kube_phase(r) for r in records}
        live_steps = [
            r.step for r in records if phases[r.step] is Phase.RUNNING and not r.simulated and r.step not in swept
        ]
        want_log = context.training_log and context.measured_step in live_steps
        read = self.live.read(live_steps, want_log) if live_steps else LiveRead(())
        views = []
        for r in records:
            phase = phases[r.step]
            rate, rate_why = iteration_rate(
                r.step, phase, r.started_at, read.log, context.measured_step, context.training_log, r.step in swept
            )
            telemetry = read.telemetry.get(r.step)
            why = SWEPT if r.step in swept else read.missing.get(r.step, "telemetry not read")
            live = LiveReading(telemetry, "" if telemetry is not None else why, rate, rate_why, r.node in mock)
            view = step_view(r, phase, now, live)
            if r.simulated and phase is not Phase.PENDING:
                view = dataclasses.replace(view, reasons=CellReasons(SIMULATED, SIMULATED, SIMULATED, SIMULATED))
            views.append(view)
        return tuple(views), read.note

    def _estimate(
        self,
        shape: JobShape,
        nodes: Sequence[Mapping[str, Any]],
        node_views: Sequence[NodeView],
        pods: Sequence[Mapping[str, Any]],
        jobs: Sequence[Mapping[str, Any]],
        now: float,
    ) -> WaitEstimate:
        """The wait of a job of the workload's shape, counting only the GPU nodes its pods may run
        on (node selector, GPU product, tolerations against taints): free GPUs elsewhere are no
        capacity for it."""
        placement = self.placement(jobs)
        gpu_nodes = {_name(n): n for n in nodes if _gpus(n)}
        fits = eligibility(list(gpu_nodes.values()), placement) if placement is not None else None
        admitted = set(fits.admitted) if fits is not None else set(gpu_nodes)
        by_name = {name: node for name, node in gpu_nodes.items() if name in admitted}

        def could_take(pod: Mapping[str, Any]) -> bool:
            # A pod pending for nodes this step cannot use is not ahead of it.
            own = placement_of_pod_spec(pod.get("spec") or {})
            return any(not why_not(node, own) for node in by_name.values())

        def on_admitted(pod: Mapping[str, Any]) -> bool:
            return (pod.get("spec") or {}).get("nodeName") in admitted

        # Pods below the default priority (backfill that yields) are preempted for a real job.
        pending = [
            pod_gpus(p)
            for p in pods
            if pod_active(p) and not (p.get("spec") or {}).get("nodeName") and pod_gpus(p) and not _yields(p)
            and could_take(p)
        ]
        waits = [w for p in pods if pod_gpus(p) and on_admitted(p) and (w := _pod_wait(p, now)) is not None]
        running = [
            RunningJob(_pod_deadline(p), pod_gpus(p), _yields(p))
            for p in pods
            if pod_active(p) and on_admitted(p) and pod_gpus(p)
        ]
        if placement is None:
            scope = "every GPU node counted: where the step may run is not known (no Job of the run, no placement "
            scope += "in the outputs)"
        else:
            counted = ", ".join(sorted(admitted)) or "none"
            left = fits.summary() if fits is not None else ""
            scope = f"nodes the step may run on ({placement.source}): {counted}" + (f"; {left}" if left else "")
        return estimate_wait(
            self.name, shape, [n for n in node_views if n.gpus_total and n.name in admitted],
            pending, running, waits, now, scope=scope,
        )

    def placement(self, jobs: Sequence[Mapping[str, Any]]) -> Placement | None:
        """Where the workload's GPU step may run: the pod template of the run's Job asking for the
        most GPUs (what the scheduler places), else the outputs' record of the GPU steps' placement
        (before the Jobs exist), else the GPU product alone; None where nothing says."""
        names = {s.job for s in self.outputs.steps}
        templates = [
            (pod_gpus(template), str(j["metadata"]["name"]), template)
            for j in jobs
            if (j.get("metadata") or {}).get("name") in names
            and (template := ((j.get("spec") or {}).get("template") or {}))
        ]
        gpu_templates = [t for t in templates if t[0] > 0]
        if gpu_templates:
            _, name, template = max(gpu_templates, key=lambda t: (t[0], t[1]))
            return placement_of_pod_spec(template.get("spec") or {}, f"Job {name}'s pod template")
        recorded = self.outputs.gpu_placement
        if recorded is not None:
            return placement_of_selector(
                recorded.node_selector, recorded.tolerations, "the stack's placement, as the outputs record it"
            )
        if self.outputs.gpu_product:
            return placement_of_selector(
                {GPU_PRODUCT_LABEL: self.outputs.gpu_product}, (GPU_TOLERATION,), "the outputs' GPU product alone"
            )
        return None

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

    def _node_view(
        self, node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], used: Mapping[str, Sequence[float]]
    ) -> NodeView:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        node_name = (node.get("metadata") or {}).get("name", "")
        holders = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node_name and pod_active(p)]
        gpu_holders = [p for p in holders if pod_gpus(p)]
        simulated = is_simulated(node)
        mock = ((node.get("metadata") or {}).get("labels") or {}).get(GPU_MOCK_LABEL) == "true"
        readings = [] if simulated or mock else list(used.get(node_name, ()))
        return NodeView(
            name=node_name,
            state=_node_state(node),
            gpus_total=int(allocatable.get(GPU_RESOURCE, 0) or 0),
            gpus_allocated=sum(pod_gpus(p) for p in gpu_holders),
            gpu_util_percent=sum(readings) / len(readings) if readings else None,
            util_source="not measured: simulated node (KWOK), no GPU ran"
            if simulated
            else MOCK_GPU
            if mock
            else "the sampler (NVML / nvidia-smi) of this run's running steps on it, their GPUs only"
            if readings
            else "not readable: no GPU metrics source for Kubernetes nodes here; a running step of this run "
            "shows its own GPUs' use (the sampler, through the run's monitor)",
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


def _name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def _gpus(node: Mapping[str, Any]) -> int:
    return int(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0) or 0)


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
