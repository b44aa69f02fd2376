"""Live sources -> one Snapshot (model.py). Renderers only read the result.

`Monitor` holds one source per environment of the stack outputs, whatever its kind (made by
`infra.kinds.monitor_sources`): a watch cache for a Kubernetes side, rate-limited polls over
SSH for a batch side, the outputs alone for AWS instances that ran nothing. Taking a snapshot
asks each source for its view; none makes a request of its own sooner than its interval, and
one environment that fails is shown with why, never blanking the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from infra.compare.contract import contract_from_report
from infra.monitor.estimate import JobShape
from infra.monitor.model import IDLE_PERCENT, Snapshot
from infra.monitor.sources import EnvironmentSource, IdleTracker, ViewContext, error_view
from infra.outputs import RunOutputs


@dataclass
class Monitor:
    run: RunOutputs
    sources: Mapping[str, EnvironmentSource]
    shape: JobShape | None
    interval_s: float = 30.0
    idle_percent: float = IDLE_PERCENT
    wall: Callable[[], float] = time.time
    idle: IdleTracker = field(init=False)

    def __post_init__(self) -> None:
        self.idle = IdleTracker(self.idle_percent)

    def snapshot(self) -> Snapshot:
        now = self.wall()
        contract = contract_from_report(self.run.report)
        context = ViewContext(self.shape, self.idle, contract.step, contract.training_log)
        views = []
        for name, source in sorted(self.sources.items()):
            try:
                views.append(source.view(now, context))
            except Exception as error:  # noqa: BLE001 (one environment's failure must not blank the others)
                views.append(
                    error_view(name, getattr(source, "kind", ""), "", f"{type(error).__name__}: {error}")
                )
        return Snapshot(
            taken_at=now,
            stack=self.run.stack,
            workload=self.run.workload,
            run_id=self.run.run_id,
            interval_s=self.interval_s,
            environments=tuple(views),
        )

    def start(self, watch: bool) -> None:
        for source in self.sources.values():
            source.start(watch)

    def close(self) -> None:
        for source in self.sources.values():
            source.close()
