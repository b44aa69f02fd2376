"""Renders scripts/nodes' views: the node findings and wait-estimate tables, and the estimate file's record.

Pure: the monitor's snapshot and the findings in, rich Tables and a JSON-ready dict out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from infra.monitor.model import Snapshot, WaitEstimate
from infra.monitor.render import duration
from infra.nodes.idle import NodeFinding


def estimates_record(snapshot: Snapshot) -> dict[str, Any]:
    """What scripts/compare reads back: each environment's estimate and when it was made."""
    return {
        "version": 1,
        "stack": snapshot.stack,
        "workload": snapshot.workload,
        "run_id": snapshot.run_id,
        "taken_at": snapshot.taken_at,
        "environments": {
            env.name: dataclasses.asdict(env.estimate) for env in snapshot.environments if env.estimate is not None
        },
    }


def environment_label(finding: NodeFinding) -> str:
    """The environment and what its node is, real included: "openshift (simulated nodes: ...)"."""
    return f"{finding.environment} ({finding.provenance})"


def findings_table(findings: Sequence[NodeFinding]) -> Table:
    table = Table(title="GPU nodes, judged by use", title_justify="left")
    for column, justify in (
        ("environment", "left"),
        ("node", "left"),
        ("GPUs alloc/total", "right"),
        ("free", "right"),
        ("idle", "right"),
        ("GPU use", "right"),
        ("suggestion", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for f in findings:
        use = f"{f.gpu_util_percent:.0f} %" if f.gpu_util_percent is not None else "not readable"
        table.add_row(
            environment_label(f),
            f.node,
            f"{f.gpus_allocated}/{f.gpus_total}",
            str(f.gpus_free),
            str(f.gpus_idle),
            use,
            f.suggestion,
            style="yellow" if f.underused else "",
        )
    return table


def estimates_table(estimates: Sequence[WaitEstimate], labels: Mapping[str, str] | None = None) -> Table:
    """`labels`: what each environment is (its snapshot's provenance), shown beside its name."""
    table = Table(title="Queue-wait estimate for a job of the workload's shape, now", title_justify="left")
    for column, justify in (
        ("environment", "left"),
        ("GPUs", "right"),
        ("estimate", "right"),
        ("free GPUs", "right"),
        ("pending ahead", "right"),
        ("basis", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for e in estimates:
        what = (labels or {}).get(e.environment)
        table.add_row(
            f"{e.environment} ({what})" if what else e.environment,
            str(e.gpus),
            duration(e.seconds) if e.seconds is not None else "cannot estimate",
            str(e.free_gpus),
            str(e.pending_ahead),
            e.basis,
        )
    return table
