"""Stack outputs + live sources -> one Snapshot (model.py). Renderers only read the result.

`Monitor` holds the sources of every environment a stack's outputs name: a `KubeCache`
(watches) for the Kubernetes side, an `HpcSource` (rate-limited polls) per HPC side. Taking
a snapshot reads those; it never makes a Kubernetes request of its own and never polls an
HPC scheduler sooner than the interval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.compare.kube_records import (
    GPU_MOCK_LABEL,
    GPU_RESOURCE,
    KWOK_NODE_ANNOTATION,
    LOCAL_NODE,
    NOT_EXECUTED,
    records_from_api,
)
from infra.compare.records import StepRecord
from infra.compare.report_model import MOCK_GPU
from infra.compare.timeparse import rfc3339
from infra.hpc.registry import scheduler_for
from infra.hpc.scheduler import Phase
from infra.hpc.target import PROVENANCE_NOT_STATED
from infra.monitor.hpc import HpcSource
from infra.monitor.kube import KubeCache
from infra.monitor.model import (
    REAL,
    SIMULATED_NODE,
    EnvironmentView,
    HpcNode,
    HpcPoll,
    NodeView,
    Snapshot,
    StepTelemetry,
    StepView,
)
from infra.nodes.estimate import JobShape, RunningJob, estimate_wait
from infra.nodes.idle import IDLE_PERCENT

RECENT_S = 3600.0  # waits of jobs that started within this window feed the estimate
KUBE_PHASES = {"Complete": Phase.SUCCEEDED, "Failed": Phase.FAILED, "NotFound": Phase.UNKNOWN}


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def step_view(
    record: StepRecord,
    phase: Phase,
    now: float,
    telemetry: StepTelemetry | None = None,
    telemetry_note: str = "",
    iterations_per_s: float | None = None,
) -> StepView:
    started = record.scheduled_at if record.scheduled_at is not None else record.started_at
    run_from = record.started_at if record.started_at is not None else record.scheduled_at
    elapsed = None
    if run_from is not None:
        elapsed = max(0.0, (record.finished_at if record.finished_at is not None else now) - run_from)
    wait = None
    if record.requested_at is not None:
        if started is not None:
            wait = max(0.0, started - record.requested_at)
        elif not phase.finished:
            wait = max(0.0, now - record.requested_at)
    cpu = mem = gpu = None
    note = telemetry_note
    if telemetry is not None and telemetry.t:
        cpu = _last(telemetry.cpu_percent)
        mem = _last(telemetry.rss_bytes)
        gpu = _last(telemetry.gpu_util_percent)
        gpu_reason = dict(telemetry.not_measured).get("gpu")
        if gpu is None and gpu_reason:
            note = f"GPU not measured: {gpu_reason}"
    return StepView(
        name=record.step,
        job=record.job,
        phase=phase.value,
        native_state=record.state,
        node=record.node,
        requested_at=record.requested_at,
        started_at=run_from,
        finished_at=record.finished_at,
        elapsed_s=elapsed,
        queue_wait_s=wait,
        reason=record.pending_reason,
        gpus=record.gpus_allocated if record.gpus_allocated is not None else record.gpus_requested,
        iterations_per_s=iterations_per_s,
        cpu_percent=cpu,
        memory_bytes=mem,
        gpu_util_percent=gpu,
        telemetry_note=note,
    )


def _last(values: Sequence[float]) -> float | None:
    finite = _finite(values)
    return finite[-1] if finite else None


def kube_phase(record: StepRecord) -> Phase:
    if record.state in KUBE_PHASES:
        return KUBE_PHASES[record.state]
    return Phase.RUNNING if record.started_at is not None else Phase.PENDING


@dataclass
class Monitor:
    outputs: Mapping[str, Any]
    kube: KubeCache | None
    hpc: dict[str, HpcSource]
    shape: JobShape | None
    interval_s: float = 30.0
    idle_percent: float = IDLE_PERCENT
    wall: Callable[[], float] = time.time
    # (environment, node) -> when its GPUs were first seen below the idle threshold
    idle_since: dict[tuple[str, str], float] = field(default_factory=dict)

    def snapshot(self) -> Snapshot:
        now = self.wall()
        atlas = self.outputs.get("atlas") or {}
        views = []
        for name, env in sorted((self.outputs.get("environments") or {}).items()):
            try:
                if env.get("kind") == "kubernetes":
                    views.append(self._kube_view(name, env, now))
                elif env.get("kind") == "hpc":
                    views.append(self._hpc_view(name, env, now))
                else:
                    views.append(_error_view(name, env, f"unknown kind {env.get('kind')!r}"))
            except Exception as error:  # noqa: BLE001 (one environment's failure must not blank the others)
                views.append(_error_view(name, env, f"{type(error).__name__}: {error}"))
        return Snapshot(
            taken_at=now,
            stack=str(atlas.get("stack", "")),
            workload=str(atlas.get("workload", "")),
            run_id=str(atlas.get("run_id", "")),
            interval_s=self.interval_s,
            environments=tuple(views),
        )

    def _track_idle(self, env: str, node: str, util: float | None, allocated: int, now: float) -> float | None:
        key = (env, node)
        if util is None or not allocated or util >= self.idle_percent:
            self.idle_since.pop(key, None)
            return None
        return self.idle_since.setdefault(key, now)

    # --- Kubernetes -----------------------------------------------------------------------------

    def _kube_view(self, name: str, env: Mapping[str, Any], now: float) -> EnvironmentView:
        if self.kube is None:
            return _error_view(name, env, "no kubeconfig: pass --kubeconfig or a stack file naming one")
        namespace = str(env.get("namespace", ""))
        pods = self.kube.items("pods")
        nodes = self.kube.items("nodes")
        ns_pods = [p for p in pods if (p.get("metadata") or {}).get("namespace") == namespace]
        records = records_from_api(
            name, env, {"items": self.kube.items("jobs")}, {"items": ns_pods}, {"items": []}, nodes
        )
        step_records = records.steps if isinstance(records.steps, tuple) else ()
        steps = tuple(
            step_view(r, kube_phase(r), now, telemetry_note=_kube_telemetry_note(records.telemetry.get(r.step)))
            for r in step_records
        )
        node_views = []
        for node in nodes:
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            total = int(allocatable.get(GPU_RESOURCE, 0) or 0)
            node_name = (node.get("metadata") or {}).get("name", "")
            holders = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node_name and pod_active(p)]
            gpu_holders = [p for p in holders if pod_gpus(p)]
            simulated = is_simulated(node)
            mock = ((node.get("metadata") or {}).get("labels") or {}).get(GPU_MOCK_LABEL) == "true"
            node_views.append(
                NodeView(
                    name=node_name,
                    state=_node_state(node),
                    gpus_total=total,
                    gpus_allocated=sum(pod_gpus(p) for p in gpu_holders),
                    gpu_util_percent=None,
                    util_source="not measured: simulated node (KWOK), no GPU ran"
                    if simulated
                    else MOCK_GPU
                    if mock
                    else "not readable: no GPU metrics source for Kubernetes nodes here (the sampler's files "
                    "sit on the run's PVC)",
                    simulated=simulated,
                    provenance=SIMULATED_NODE if simulated else LOCAL_NODE if mock else REAL,
                    site=str(env.get("api_url", "")) or self.kube.client.server,
                    workloads=tuple(
                        f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}"
                        for p in gpu_holders
                    ),
                )
            )
        node_views.sort(key=lambda n: n.name)
        estimate = None
        if self.shape is not None:
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
                name, self.shape, [n for n in node_views if n.gpus_total], pending, running, waits, now
            )
        return EnvironmentView(
            name=name,
            kind="kubernetes",
            platform=f"{str(env.get('flavour', 'kubernetes')).capitalize()} API (watch)",
            steps=steps,
            nodes=tuple(node_views),
            polled_at=self.kube.synced_at(),
            source=f"Kubernetes API {env.get('api_url', '')}: LIST then WATCH /api/v1/nodes, /api/v1/pods, "
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            estimate=estimate,
            notes=tuple(self.kube.notes) + (tuple(records.notes) if records.notes else ()),
            provenance=kube_provenance(steps, node_views),
        )

    # --- HPC ------------------------------------------------------------------------------------

    def _hpc_view(self, name: str, env: Mapping[str, Any], now: float) -> EnvironmentView:
        source = self.hpc.get(name)
        if source is None:
            return _error_view(name, env, "no SSH key or known_hosts: pass --ssh-key/--known-hosts or a stack file")
        poll: HpcPoll = source.poll()
        scheduler = scheduler_for(source.scheduler)
        running_steps = [s for s in poll.steps if s.started_at is not None and s.finished_at is None]
        steps = []
        for record in poll.steps:
            telemetry = poll.telemetry.get(record.step)
            rate = None
            if (
                len(running_steps) == 1
                and running_steps[0] is record
                and poll.log_stamp is not None
                and record.started_at is not None
                and poll.log_stamp >= record.started_at
            ):
                rate = poll.iterations_per_s
            note = "" if telemetry is not None else ("no sampler readings yet" if record in running_steps else "")
            steps.append(step_view(record, scheduler.phase_of(record.state), now, telemetry, note, rate))
        node_views = [self._hpc_node(name, node, poll, now) for node in poll.nodes]
        estimate = None
        if self.shape is not None and poll.nodes:
            recent = [
                j.started_at - j.submitted_at
                for j in poll.queue
                if j.started_at is not None and j.submitted_at is not None and now - j.started_at <= RECENT_S
            ]
            estimate = estimate_wait(
                name,
                self.shape,
                node_views,
                [j.gpus for j in poll.queue if j.state == "pending" and not j.preemptible],
                [RunningJob(j.expected_end, j.gpus or 0, j.preemptible) for j in poll.queue if j.state == "running"],
                recent,
                now,
            )
        notes = tuple(e for e in (poll.node_error, poll.queue_error) if e)
        return EnvironmentView(
            name=name,
            kind="hpc",
            platform=f"{scheduler.label} over SSH (every {source.interval_s:g} s)",
            steps=tuple(steps),
            nodes=tuple(node_views),
            polled_at=poll.at,
            source=f"{env.get('user')}@{env.get('host')}:{env.get('port')}: "
            + " ; ".join(c if len(c) < 160 else c[:157] + "..." for c in poll.commands[:1])
            + " ; one node/queue/telemetry script",
            estimate=estimate,
            notes=notes,
            provenance=hpc_provenance(env),
        )

    def _hpc_node(self, env: str, node: HpcNode, poll: HpcPoll, now: float) -> NodeView:
        util, source = node.gpu_util_percent, node.util_source
        idle_since: float | None = None
        on_node = [s for s in poll.steps if s.node == node.name and s.step in poll.telemetry]
        series = [poll.telemetry[s.step] for s in on_node]
        measured = [t for t in series if _finite(t.gpu_util_percent)]
        if measured:
            # The sampler's own readings of the GPUs the steps hold beat any scheduler index.
            util = sum(_finite(t.gpu_util_percent)[-1] for t in measured) / len(measured)
            source = "the sampler (NVML / nvidia-smi) of the steps on this node"
            idle_since = _idle_since(measured, self.idle_percent)
        tracked = self._track_idle(env, node.name, util, node.gpus_allocated, now)
        workloads = tuple(
            f"job {s.job} ({s.step})"
            for s in poll.steps
            if s.node == node.name and s.finished_at is None and s.started_at is not None
        )
        return NodeView(
            name=node.name,
            state=node.state,
            gpus_total=node.gpus_total,
            gpus_allocated=node.gpus_allocated,
            gpu_util_percent=util,
            util_source=source,
            workloads=workloads,
            idle_since=idle_since if idle_since is not None else tracked,
            site=f"{poll_site(self.outputs, env)}",
            provenance=hpc_provenance((self.outputs.get("environments") or {}).get(env) or {}),
        )


def hpc_provenance(env: Mapping[str, Any]) -> str:
    """An HPC environment is what its stack says (`atlas:hpc.<name>.provenance`), never "real" by default."""
    return str(env.get("provenance") or PROVENANCE_NOT_STATED)


def kube_provenance(steps: Sequence[StepView], nodes: Sequence[NodeView]) -> str:
    """What the nodes the steps' pods ran on are (pure); not executed when no step reached a node."""
    by_name = {n.name: n.provenance for n in nodes}
    seen = sorted({by_name.get(s.node, PROVENANCE_NOT_STATED) for s in steps if s.node})
    return " + ".join(seen) if seen else NOT_EXECUTED


def _idle_since(series: Sequence[StepTelemetry], idle_percent: float) -> float | None:
    """When the GPUs last were busy, from the samples: the first sample after the last busy one."""
    since: list[float] = []
    for telemetry in series:
        pairs = [(t, u) for t, u in zip(telemetry.t, telemetry.gpu_util_percent, strict=True) if not math.isnan(u)]
        if not pairs or pairs[-1][1] >= idle_percent:
            return None
        busy = [i for i, (_, u) in enumerate(pairs) if u >= idle_percent]
        since.append(pairs[busy[-1] + 1][0] if busy else pairs[0][0])
    return max(since) if since else None


def _kube_telemetry_note(value: object) -> str:
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


def _error_view(name: str, env: Mapping[str, Any], error: str) -> EnvironmentView:
    return EnvironmentView(
        name=name,
        kind=str(env.get("kind", "")),
        platform=str(env.get("scheduler") or env.get("flavour") or ""),
        steps=(),
        nodes=(),
        polled_at=None,
        source="",
        error=error,
    )


def poll_site(outputs: Mapping[str, Any], env: str) -> str:
    raw = (outputs.get("environments") or {}).get(env) or {}
    return f"{raw.get('host', '')}:{raw.get('port', '')}"


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
