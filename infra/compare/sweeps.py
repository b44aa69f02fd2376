"""A sweep's figures from its records: elements by state, per-element run time and queue wait
(median, p95), the makespan and the best point by the declared metric. Pure.

Every figure is a `Value` citing the commands or API reads it came from; a figure no record gives
is "not measured" with why, never a zero. The p95 is the nearest rank (the smallest time at least
95 % of the elements do not exceed): over fewer than 20 elements that is the largest, and the
note says over how many elements each figure is.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

from infra.compare.records import ElementRecord, Missing, SweepRecord
from infra.compare.report_model import SweepMetrics, Value, missing
from infra.compare.sweep_records import NO_METRIC
from infra.workload.sweep import point_at, value_text

# The elements' states as the report words them, in this order (infra.hpc.scheduler.Phase's values).
STATES = (
    ("succeeded", "succeeded"),
    ("failed", "failed"),
    ("cancelled", "killed or cancelled"),
    ("running", "running"),
    ("pending", "pending"),
    ("unknown", "unknown"),
)
FINISHED = frozenset({"succeeded", "failed", "cancelled"})


def state_counts(phases: Iterable[str], points: int) -> tuple[tuple[str, int], ...]:
    """How many elements are in each state, in the words and order of `STATES` (none left out but
    empty ones); points with no element (`points` beyond the phases given) count as unknown."""
    counts = Counter(phase if phase in dict(STATES) else "unknown" for phase in phases)
    counts["unknown"] += max(0, points - sum(counts.values()))
    return tuple((word, counts[state]) for state, word in STATES if counts[state])


def nearest_rank(values: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile: the ceil(p/100 * n)-th smallest value."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def _sources(elements: Sequence[ElementRecord]) -> str:
    return "; ".join(dict.fromkeys(e.source for e in elements if e.source and not e.source.startswith("no ")))


def _spread(elements: Sequence[ElementRecord], start: str, end: str, what: str, total: int) -> tuple[Value, Value]:
    """The median and p95 of `end - start` over the elements that have both times."""
    pairs = [(e, getattr(e, start), getattr(e, end)) for e in elements]
    times = [b - a for _, a, b in pairs if a is not None and b is not None]
    used = [e for e, a, b in pairs if a is not None and b is not None]
    if not times:
        reason = f"not measured: no element has both times of its {what} ({total} point(s), none finished or read)"
        return missing("s", reason), missing("s", reason)
    source = _sources(used)
    simulated = any(e.simulated for e in used)
    over = f"over {len(times)} of {total} element(s)"
    median = Value(statistics.median(times), "s", source, over, "computed", simulated)
    p95_note = over + (" (nearest rank: the largest, under 20 elements)" if len(times) < 20 else " (nearest rank)")
    p95 = Value(nearest_rank(times, 95), "s", source, p95_note, "computed", simulated)
    return median, p95


def _makespan(elements: Sequence[ElementRecord], points: int) -> Value:
    """The first request to the last element's end, once every point's element has ended."""
    if len(elements) < points:
        return missing("s", f"not measured: {points - len(elements)} point(s) have no element record")
    unfinished = [e for e in elements if e.phase not in FINISHED]
    if unfinished:
        return missing("s", f"not measured: {len(unfinished)} element(s) not finished (or not known)")
    requested = [e.requested_at for e in elements if e.requested_at is not None]
    ends = [e.finished_at for e in elements if e.finished_at is not None]
    if not requested:
        return missing("s", "not measured: the source gave no request time")
    # An element killed before it started has no end: the sweep ended with the last one that has.
    if not ends:
        return missing("s", "not measured: no element has an end time")
    return Value(
        max(ends) - min(requested),
        "s",
        _sources(elements),
        f"first request to the last element's end, over {len(elements)} element(s)",
        "computed",
        any(e.simulated for e in elements),
    )


def _point_text(record: SweepRecord, point: int) -> str:
    if record.definition is None:
        return "not known (the workload's definition was not loaded)"
    try:
        found = point_at(record.definition, point)
    except IndexError:
        return f"not known (the definition has no point {point}: has it changed since the run?)"
    return ", ".join(f"{name}={value_text(value)}" for name, value in found.values)


def _metric_text(record: SweepRecord) -> str:
    metric = record.definition.metric if record.definition is not None else None
    if metric is None:
        return ""
    what = f"pattern {metric.pattern!r} in each element's log" if metric.pattern else f"file {metric.file!r}"
    return f"{what}, goal {metric.goal}"


def sweep_metrics(record: SweepRecord) -> SweepMetrics:
    """One swept step's figures on one side."""
    elements = record.elements
    states = state_counts([e.phase for e in elements], record.points)
    run_median, run_p95 = _spread(elements, "started_at", "finished_at", "run (start and end)", record.points)
    wait_median, wait_p95 = _spread(
        elements, "requested_at", "started_at", "queue wait (request and start)", record.points
    )
    best_point, best_metric, best_values, read = _best(record)
    return SweepMetrics(
        step=record.step,
        points=record.points,
        states=states,
        run_time_median=run_median,
        run_time_p95=run_p95,
        queue_wait_median=wait_median,
        queue_wait_p95=wait_p95,
        makespan=_makespan(elements, record.points),
        best_point=best_point,
        best_metric=best_metric,
        best_values=best_values,
        metric_read=read,
        arrays=record.arrays,
        notes=record.notes,
    )


def _best(record: SweepRecord) -> tuple[Value, Value, str, str]:
    """The best point among the succeeded elements' metric readings, by the metric's goal (a tie:
    the lowest index); what was read, in words."""
    declared = record.definition.metric if record.definition is not None else None
    why = record.metric.reason if isinstance(record.metric, Missing) else NO_METRIC
    if isinstance(record.metric, Missing) or declared is None:
        return missing("point", why), missing("", why), "not known: no best point", why
    goal = declared.goal
    succeeded = {e.point for e in record.elements if e.phase == "succeeded"}
    values = [r for r in record.metric if r.value is not None and r.point in succeeded]
    unread = [r for r in record.metric if r.value is None]
    read = f"{len(values)} of {record.points} point(s) ({_metric_text(record)})"
    if unread:
        read += f"; not read at {len(unread)}: point {unread[0].point}: {unread[0].source}"
    if not values:
        reason = "not measured: no succeeded point has a reading of the metric"
        return missing("point", reason), missing("", reason), "not known: no best point", read
    chosen = sorted(values, key=lambda r: ((r.value if goal == "min" else -(r.value or 0.0)), r.point))[0]
    assert chosen.value is not None
    simulated = any(e.simulated for e in record.elements if e.point == chosen.point)
    note = f"{goal} of {len(values)} succeeded point(s)"
    point = Value(float(chosen.point), "point", chosen.source, note, "computed", simulated)
    metric = Value(chosen.value, "", chosen.source, note, "measured", simulated)
    return point, metric, _point_text(record, chosen.point), read
