"""An HPC side of the monitor as a source: the last poll of its scheduler (hpc.py) as one
environment's view.

The poll is rate-limited by `HpcSource` itself (at most once an interval); a view only reads its
last answer. A node's GPU use comes from the sampler's readings of the steps on it where there
are any, else from the scheduler's own index (LSF's `lsload -gpu`), else it is not readable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from infra.hpc.registry import scheduler_for
from infra.job_records import mock_gpu_nodes
from infra.monitor.estimate import RunningJob, estimate_wait
from infra.monitor.hpc import HpcSource
from infra.monitor.model import EnvironmentView, HpcNode, HpcPoll, LiveReading, NodeView, StepTelemetry
from infra.monitor.reasons import SWEPT, iteration_rate
from infra.monitor.sources import EnvironmentSource, IdleTracker, ViewContext, finite, step_view
from infra.outputs import HpcOutputs

RECENT_S = 3600.0  # waits of jobs that started within this window feed the estimate


class HpcEnvironmentSource(EnvironmentSource):
    """One batch-scheduler environment, polled over SSH by `poller`.

    `kind` and `platform_of` let another kind read its batch side this way (AWS: the one-node
    Slurm on its first instance) under its own name."""

    def __init__(self, name: str, outputs: HpcOutputs, poller: HpcSource, kind: str = HpcOutputs.kind,
                 where: str = "") -> None:
        self.name, self.outputs, self.poller, self.kind, self.where = name, outputs, poller, kind, where

    def view(self, now: float, context: ViewContext) -> EnvironmentView:
        name, outputs, source = self.name, self.outputs, self.poller
        poll: HpcPoll = source.poll()
        scheduler = scheduler_for(outputs.scheduler)
        swept = {s.name for s in outputs.steps if s.sweep is not None}
        steps = []
        mock_nodes = {n.name: n.gpu_fact for n in poll.nodes if n.gpu_fact is not None}
        for record in poll.steps:
            phase = scheduler.phase_of(record.state)
            rate, rate_why = iteration_rate(
                record.step, phase, record.started_at, poll.log, context.measured_step, context.training_log,
                record.step in swept,
            )
            telemetry = poll.telemetry.get(record.step)
            # On a node whose GPUs are mock, whatever the sampler read (a host's own GPU) is not the step's.
            mock = any(record.node and node in record.node for node in mock_nodes)
            why = SWEPT if record.step in swept else poll.telemetry_missing.get(record.step, "telemetry not read")
            live = LiveReading(telemetry, "" if telemetry is not None else why, rate, rate_why, mock)
            view = step_view(record, phase, now, live)
            sweep = next((w for w in poll.sweeps if w.step == record.step), None)
            if sweep is not None:
                # A swept step's id is its first array's: the row shows the sweep, not one element.
                states = ", ".join(f"{word} {n}" for word, n in sweep.states)
                view = dataclasses.replace(view, phase=sweep.phase, native_state=f"sweep: {states}")
            steps.append(view)
        node_views = [self._node_view(node, poll, now, context.idle) for node in poll.nodes]
        estimate = None
        if context.shape is not None and poll.nodes:
            recent = [
                j.started_at - j.submitted_at
                for j in poll.queue
                if j.started_at is not None and j.submitted_at is not None and now - j.started_at <= RECENT_S
            ]
            estimate = estimate_wait(
                name,
                context.shape,
                node_views,
                [j.gpus for j in poll.queue if j.state == "pending" and not j.preemptible],
                [RunningJob(j.expected_end, j.gpus or 0, j.preemptible) for j in poll.queue if j.state == "running"],
                recent,
                now,
            )
        notes = tuple(e for e in (poll.node_error, poll.queue_error) if e)
        # The nodes the steps ran on say whether their GPUs were mock; before any ran, every node.
        ran_on = {s.node for s in poll.steps if s.node}
        return EnvironmentView(
            name=name,
            kind=self.kind,
            platform=f"{scheduler.label} over SSH{self.where} (every {source.interval_s:g} s)",
            steps=tuple(steps),
            nodes=tuple(node_views),
            polled_at=poll.at,
            source=f"{outputs.login}: "
            + " ; ".join(c if len(c) < 160 else c[:157] + "..." for c in poll.commands[:1])
            + " ; one node/queue/telemetry script",
            estimate=estimate,
            notes=notes,
            provenance=outputs.label(mock_gpu_nodes(poll.nodes, ran_on)),
            sweeps=poll.sweeps,
        )

    def _node_view(self, node: HpcNode, poll: HpcPoll, now: float, idle: IdleTracker) -> NodeView:
        util, source = node.gpu_util_percent, node.util_source
        idle_since: float | None = None
        on_node = [s for s in poll.steps if s.node == node.name and s.step in poll.telemetry]
        series = [poll.telemetry[s.step] for s in on_node]
        measured = [t for t in series if finite(t.gpu_util_percent)]
        mock = node.gpu_fact
        if mock is not None:
            # No GPU is behind a mock one: whatever a sampler or index read was not its use.
            util, source, measured = None, f"not measured: {mock.what}", []
        elif measured:
            # The sampler's own readings of the GPUs the steps hold beat any scheduler index.
            util = sum(finite(t.gpu_util_percent)[-1] for t in measured) / len(measured)
            source = "the sampler (NVML / nvidia-smi) of the steps on this node"
            idle_since = _idle_since(measured, idle.idle_percent)
        tracked = idle.track(self.name, node.name, util, node.gpus_allocated, now)
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
            site=f"{self.outputs.host}:{self.outputs.port}",
            provenance=self.outputs.label(mock),
        )


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
