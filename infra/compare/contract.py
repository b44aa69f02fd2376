"""Reading what a workload asks the report to measure: the stack's `atlas.report` output into a
`ReportContract`, and a log's text into the workload's own throughput reading; its swept steps'
sweeps from the workload's definition (the one file read here)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.compare.records import Missing, ReportContract, ThroughputReading, ThroughputSpec
from infra.outputs import RunOutputs


def report_contract(outputs: Mapping[str, Any] | None) -> ReportContract:
    """`outputs["atlas"]["report"]`; stacks from before Atlas exported it get the defaults (BigGAN's)."""
    return contract_from_report(((outputs or {}).get("atlas") or {}).get("report"))


def contract_from_report(raw: Any) -> ReportContract:
    """The `atlas.report` output itself (infra.outputs.RunOutputs.report) as a ReportContract."""
    if not isinstance(raw, Mapping) or not raw:
        return ReportContract()
    spec = raw.get("throughput")
    throughput = None
    if isinstance(spec, Mapping) and all(isinstance(spec.get(k), str) for k in ("file", "pattern", "unit")):
        throughput = ThroughputSpec(str(spec["file"]), str(spec["pattern"]), str(spec["unit"]))
    return ReportContract(
        step=str(raw.get("step") or "train"), training_log=bool(raw.get("training_log", True)), throughput=throughput
    )


def read_throughput(text: str, spec: ThroughputSpec, source: str) -> ThroughputReading | Missing:
    """The last line of `text` that `spec.pattern` matches, its `value` group as a number."""
    pattern = re.compile(spec.pattern)
    for line in reversed(text.splitlines()):
        match = pattern.search(line)
        if match is None:
            continue
        try:
            value = float(match.group("value"))
        except (IndexError, ValueError):
            return Missing(f"not measured: {source}: `value` of {line.strip()!r} is not a number")
        return ThroughputReading(value, spec.unit, source, line.strip())
    return Missing(f"not measured: no line of {source} matches report.throughput.pattern {spec.pattern!r}")


# Where a shipped workload's definition is, when the stack outputs name no file.
WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"


def with_sweep_definitions(contract: ReportContract, run: RunOutputs, workloads: Path = WORKLOADS) -> ReportContract:
    """The contract with the swept steps' sweeps of the workload the run ran: the definition the
    stack outputs name (`atlas.definition`), else the shipped workload of that name, as the
    monitor and `nodes` load it. One that cannot be read leaves them out, saying why."""
    path = Path(run.definition) if run.definition else workloads / run.workload / "workload.yaml"
    if not path.is_file():
        return dataclasses.replace(contract, definition_note=f"the workload's definition {path} is not there")
    from infra.workload.load import load_workload
    from infra.workload.model import WorkloadError

    try:
        workload = load_workload(path)
    except WorkloadError as error:
        return dataclasses.replace(contract, definition_note=f"the workload's definition does not load: {error}")
    sweeps = tuple((step.name, step.sweep) for step in workload.steps if step.sweep is not None)
    return dataclasses.replace(contract, sweeps=sweeps)
