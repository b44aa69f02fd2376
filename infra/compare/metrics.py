"""Compute every metric from the collected records, into the Report dataclasses: the renderers only format.

Each number is a `Value` with its unit and its source; a value that could not be measured
carries `None` and the reason; values from KWOK-simulated nodes are flagged `simulated`;
cost parameters that are assumptions and scaling projections say so (`kind`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from infra.compare.costs import CostProfile, RateTable
from infra.compare.records import CGROUP_PEAK, EnvironmentRecords, Missing, StepRecord, TelemetryColumns, TrainingLog
from infra.compare.report_model import (
    MOCK_GPU,
    ArgumentDifference,
    Comparability,
    CostParameter,
    DataAccess,
    Economics,
    Elasticity,
    EnvironmentMetrics,
    Performance,
    Report,
    Scalability,
    Series,
    StepMetrics,
    Value,
    missing,
)
from infra.workload.options import split_options

MAX_CHART_POINTS = 1000  # a series is reduced to at most this many (mean per bin) before charting
PROJECTION_GPUS = (1, 2, 4, 8, 16, 32, 64)


CGROUP_BASIS = "the memory cgroup's peak (the kernel's high-water mark: every page once, page cache included)"
RSS_BASIS = "the RSS sum of the step's processes, highest sample (a page shared by forked workers counts in each)"


def memory_peak(columns: TelemetryColumns) -> tuple[Value, str]:
    """The step's memory peak and what it was read from: the cgroup's high-water mark where the
    sampler recorded one (it counts pages shared between processes once, and sees between samples),
    else the largest RSS sum over the samples, saying why there was no cgroup peak."""
    src = columns.source
    cgroup = _stat(columns.cgroup_peak_bytes, "max", "bytes", src, _reason(columns, CGROUP_PEAK))
    if cgroup.measured:
        return replace(cgroup, note=f"{CGROUP_BASIS}; {cgroup.note}"), CGROUP_BASIS
    rss = _stat(columns.tree_rss_bytes, "max", "bytes", src, _reason(columns, "memory"))
    if not rss.measured:
        return rss, rss.note
    why = cgroup.note.removeprefix("not measured: ")
    basis = f"{RSS_BASIS}; no cgroup peak: {why}"
    return replace(rss, note=f"{basis}; {rss.note}"), basis


# ------------------------------------------------------------------------------------------------
# steps and elasticity


def _at(epoch: float | None, source: str, simulated: bool, what: str) -> Value:
    if epoch is None:
        return missing("Unix s", f"not recorded: the source gave no {what}", source)
    return Value(epoch, "Unix s", source, simulated=simulated)


def _between(a: float | None, b: float | None, source: str, simulated: bool, what: str) -> Value:
    if a is None or b is None:
        return missing(
            "s", f"not measured: {what} needs both times, the source gave {'neither' if a is b else 'one'}", source
        )
    return Value(b - a, "s", source, kind="computed", simulated=simulated)


def step_metrics(record: StepRecord, asked_gpus: int | None) -> StepMetrics:
    source, simulated = record.source, record.simulated
    if record.gpus_requested is not None:
        requested = Value(float(record.gpus_requested), "GPUs", source, simulated=simulated)
    elif asked_gpus is not None:
        requested = Value(
            float(asked_gpus),
            "GPUs",
            "stack outputs (`gpus`: what Atlas asked the scheduler for)",
            "the scheduler's record does not show GPUs",
            kind="computed",
        )
    else:
        requested = missing("GPUs", "not recorded by the scheduler", source)
    allocated = (
        Value(float(record.gpus_allocated), "GPUs", source, simulated=simulated)
        if record.gpus_allocated is not None
        else missing("GPUs", "not recorded: the scheduler's record shows no GPU allocation (no gres/TRES)", source)
    )
    return StepMetrics(
        step=record.step,
        job=record.job,
        state=record.state,
        exit_code=record.exit_code,
        requested_at=_at(record.requested_at, source, simulated, "request time"),
        scheduled_at=_at(record.scheduled_at, source, simulated, "scheduling time"),
        started_at=_at(record.started_at, source, simulated, "start time"),
        finished_at=_at(record.finished_at, source, simulated, "finish time"),
        queue_wait=_between(record.requested_at, record.started_at, source, simulated, "queue wait"),
        duration=_between(record.started_at, record.finished_at, source, simulated, "duration"),
        gpus_requested=requested,
        gpus_allocated=allocated,
        pending_reason=record.pending_reason,
        node=record.node,
        simulated=simulated,
    )


def _gpu_step(steps: Sequence[StepMetrics], measured_step: str = "train") -> StepMetrics | None:
    return next((s for s in steps if (s.gpus_requested.value or 0) > 0), None) or next(
        (s for s in steps if s.step == measured_step), None
    )


def elasticity(steps: Sequence[StepMetrics], reason: str, measured_step: str = "train") -> Elasticity:
    if not steps:
        nothing = missing("s", reason)
        return Elasticity(nothing, nothing, nothing, nothing, ())
    gpu = _gpu_step(steps, measured_step)
    first = min((s.requested_at.value for s in steps if s.requested_at.value is not None), default=None)
    simulated = any(s.simulated for s in steps)
    if gpu is None:
        request_to_gpus = missing("s", "no step asked for GPUs")
        add = missing("s", "no step asked for GPUs")
        gpu_wait = missing("s", "no step asked for GPUs")
    else:
        request_to_gpus = _between(
            first, gpu.started_at.value, gpu.started_at.source, simulated, "request to GPUs running"
        )
        gpu_wait = gpu.queue_wait
        # GPUs were wanted once the GPU step could run: its request, or the end of the step before it
        # (the schedulers hold a dependent job until then), whichever came later.
        index = list(steps).index(gpu)
        before = steps[index - 1].finished_at.value if index > 0 else None
        wanted = (
            max(v for v in (gpu.requested_at.value, before) if v is not None)
            if (gpu.requested_at.value is not None or before is not None)
            else None
        )
        add = _between(
            wanted,
            gpu.started_at.value,
            gpu.started_at.source,
            simulated,
            "time to add GPUs (GPU step eligible to started)",
        )
        if add.value is not None and add.value < 0:
            add = Value(
                0.0,
                "s",
                add.source,
                "started before the previous step's recorded end (1 s clock)",
                "computed",
                simulated,
            )
    waits = [s.queue_wait.value for s in steps if s.queue_wait.value is not None]
    total = (
        Value(
            float(sum(waits)),
            "s",
            steps[0].queue_wait.source,
            "sum over steps; includes waiting on the step before (dependencies)",
            "computed",
            simulated,
        )
        if waits
        else missing("s", "no queue waits")
    )
    reasons = tuple(sorted({f"{s.step}: {s.pending_reason}" for s in steps if s.pending_reason}))
    return Elasticity(request_to_gpus, gpu_wait, add, total, reasons)


# ------------------------------------------------------------------------------------------------
# performance


def downsample(x: np.ndarray, y: np.ndarray, points: int = MAX_CHART_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Means over equal-count bins (NaN-aware): a chart never gets more than `points` points."""
    keep = ~np.isnan(y)
    x, y = x[keep], y[keep]
    if x.size <= points:
        return x, y
    edges = np.linspace(0, x.size, points + 1).astype(np.int64)
    counts = np.diff(edges)
    return np.add.reduceat(x, edges[:-1]) / counts, np.add.reduceat(y, edges[:-1]) / counts


def _stat(values: np.ndarray, how: str, unit: str, source: str, reason: str, simulated: bool = False) -> Value:
    finite = values[~np.isnan(values)]
    if finite.size == 0:
        return missing(unit, reason, source)
    number = float(finite.mean() if how == "mean" else finite.max())
    return Value(number, unit, source, f"{how} of {finite.size} samples", "computed", simulated)


def _reason(columns: TelemetryColumns, block: str) -> str:
    reasons = dict(columns.not_measured)
    return f"not measured: {reasons.get(block, 'the sampler recorded no value')}"


def _telemetry_series(columns: TelemetryColumns) -> tuple[Series, ...]:
    if columns.rows == 0:
        return ()
    x = columns.t - (columns.start_t if columns.start_t is not None else columns.t[0])
    result = []
    for name, values, unit, scale in (
        ("CPU (the step's processes)", columns.tree_cpu_percent, "% of one core", 1.0),
        ("CPU (host)", columns.host_cpu_percent, "% of all cores", 1.0),
        ("memory RSS (the step's processes)", columns.tree_rss_bytes, "GiB", 1 / (1 << 30)),
        ("memory used (host)", columns.host_memory_used_bytes, "GiB", 1 / (1 << 30)),
        ("GPU utilization", columns.gpu_utilization_percent, "%", 1.0),
        ("GPU memory used", columns.gpu_memory_used_bytes, "GiB", 1 / (1 << 30)),
    ):
        bx, by = downsample(x, values * scale)
        if by.size:
            result.append(
                Series(name, unit, tuple(bx.tolist()), tuple(by.tolist()), "s since the step started", columns.source)
            )
    return tuple(result)


def performance(records: EnvironmentRecords, steps: Sequence[StepMetrics], steps_reason: str) -> Performance:
    simulated = any(s.simulated for s in steps)
    firsts = [s.requested_at.value for s in steps if s.requested_at.value is not None]
    lasts = [s.finished_at.value for s in steps if s.finished_at.value is not None]
    source = steps[0].requested_at.source if steps else ""
    wall = (
        Value(max(lasts) - min(firsts), "s", source, "first request to last finish", "computed", simulated)
        if firsts and lasts
        else missing("s", steps_reason or "no step times")
    )
    measured = records.measured_step
    train = next((s for s in steps if s.step == measured), None)
    train_duration = train.duration if train else missing("s", steps_reason or f"no {measured} step")

    training = records.training
    iterations, it_per_s, img_per_s, loss = _throughput(training)
    telemetry = records.telemetry.get(measured)
    if isinstance(telemetry, TelemetryColumns) and telemetry.rows:
        c = telemetry
        src = c.source
        cpu_tree = _stat(c.tree_cpu_percent, "mean", "% of one core", src, _reason(c, "cpu"))
        cpu_host = _stat(c.host_cpu_percent, "mean", "% of all cores", src, _reason(c, "cpu"))
        rss = _stat(c.tree_rss_bytes, "max", "bytes", src, _reason(c, "memory"))
        peak, peak_basis = memory_peak(c)
        host_memory = _stat(c.host_memory_used_bytes, "max", "bytes", src, _reason(c, "memory"))
        gpu_util = _stat(c.gpu_utilization_percent, "mean", "%", src, _reason(c, "gpu"))
        gpu_memory: Value = _stat(
            c.gpu_memory_used_bytes,
            "max",
            "bytes",
            src,
            _reason(c, "gpu memory") if "gpu memory" in dict(c.not_measured) else _reason(c, "gpu"),
        )
        samples = Value(float(c.rows), "samples", src, f"every {c.interval_s:g} s" if c.interval_s else "")
        series = _telemetry_series(c)
    else:
        reason = telemetry.reason if isinstance(telemetry, Missing) else "not measured: the sampler wrote no sample"
        cpu_tree = cpu_host = missing("%", reason)
        rss = host_memory = gpu_memory = peak = missing("bytes", reason)
        peak_basis = reason
        gpu_util = missing("%", reason)
        samples = missing("samples", reason)
        series = ()
    if records.gpu_mock:
        # Whatever a sampler could read, no GPU was behind the devices the steps were given.
        gpu_util = missing("%", MOCK_GPU)
        gpu_memory = missing("bytes", MOCK_GPU)
    return Performance(
        wall,
        train_duration,
        iterations,
        it_per_s,
        img_per_s,
        cpu_tree,
        cpu_host,
        rss,
        host_memory,
        gpu_util,
        gpu_memory,
        samples,
        series,
        loss,
        peak,
        peak_basis,
        measured,
        workload_throughput(records),
    )


def workload_throughput(records: EnvironmentRecords) -> Value:
    """The workload's own throughput line (report.throughput), as the step logged it."""
    reading = records.throughput
    if isinstance(reading, Missing):
        return missing("", reading.reason)
    return Value(reading.value, reading.unit, reading.source, f"as the step logged it: {reading.line!r}", "measured")


def _throughput(training: TrainingLog | Missing) -> tuple[Value, Value, Value, Series | None]:
    if isinstance(training, Missing):
        gone = missing("it/s", training.reason)
        return missing("iterations", training.reason), gone, missing("images/s", training.reason), None
    iterations = (
        Value(float(training.iterations), "iterations", training.source)
        if training.iterations is not None
        else missing("iterations", "the log holds no iteration")
    )
    marks = training.iteration_marks
    if len(marks) >= 2 and marks[-1][1] > marks[0][1]:
        # Timed per iteration: first to last logged iteration, saves and evaluations included.
        rate = (marks[-1][0] - marks[0][0]) / (marks[-1][1] - marks[0][1])
        source = training.marks_source or training.source
        note = f"(itr {marks[-1][0]} - {marks[0][0]}) / time between their log lines, saves and evaluations included"
        it_per_s = Value(rate, "it/s", source, note, "computed")
        per_iteration = training.images_per_iteration or training.batch_size
        basis = training.images_basis if training.images_per_iteration else f"batch size {training.batch_size}"
        images = (
            Value(rate * per_iteration, "images/s", source, f"it/s x {per_iteration} images ({basis})", "computed")
            if per_iteration
            else missing("images/s", "not measured: no batch size in metalog or argv")
        )
    elif len(training.eval_itr) >= 2 and training.eval_stamp[-1] > training.eval_stamp[0]:
        # Between the first and last evaluation: both stamps are time.time() after the same kind of work.
        rate = (training.eval_itr[-1] - training.eval_itr[0]) / (training.eval_stamp[-1] - training.eval_stamp[0])
        note = f"(itr {training.eval_itr[-1]} - {training.eval_itr[0]}) / (_stamp difference), evaluation time included"
        it_per_s = Value(rate, "it/s", training.source, note, "computed")
        images = (
            Value(
                rate * training.batch_size,
                "images/s",
                training.source,
                f"it/s x batch size {training.batch_size}",
                "computed",
            )
            if training.batch_size
            else missing("images/s", "not measured: no batch size in metalog or argv")
        )
    else:
        it_per_s = missing("it/s", "not measured: fewer than two evaluations with timestamps in the log")
        images = missing("images/s", it_per_s.note)
    loss = None
    if training.loss_itr:
        x, y = downsample(np.array(training.loss_itr, dtype=np.float64), np.array(training.g_loss, dtype=np.float64))
        loss = Series("G loss", "", tuple(x.tolist()), tuple(y.tolist()), "iteration", training.source)
    return iterations, it_per_s, images, loss


# ------------------------------------------------------------------------------------------------
# economics, data access, scalability


def economics(
    profile: CostProfile | None,
    steps: Sequence[StepMetrics],
    iterations: Value,
    rates: RateTable,
    cloud_rate: str = "",
    steps_reason: str = "",
) -> Economics:
    gpu_seconds = 0.0
    counted = False
    for step in steps:
        gpus = step.gpus_allocated.value if step.gpus_allocated.value is not None else step.gpus_requested.value
        if gpus and step.duration.value is not None:
            gpu_seconds += gpus * step.duration.value
            counted = True
    source = "GPUs x step duration, from the step records"
    simulated = any(s.simulated for s in steps)
    gpu_hours = (
        Value(gpu_seconds / 3600, "GPU-h", source, "", "computed", simulated)
        if counted
        else missing("GPU-h", steps_reason or "not measured: no step with both GPUs and a duration")
    )

    def per_1000(cost: Value) -> Value:
        if cost.value is None or not iterations.value:
            return missing("USD", "not measured: needs the run's cost and its iteration count")
        return Value(
            cost.value / iterations.value * 1000,
            "USD",
            cost.source + "; iterations: " + iterations.source,
            "cost / iterations x 1,000",
            "computed",
            cost.simulated,
        )

    rented = next((r for r in rates.rates if r.name == cloud_rate), None) if cloud_rate else None
    if profile is None and rented is not None:
        # Rented capacity is priced by its dated rate, not by the on-premises model.
        rate = Value(
            rented.per_gpu_hour,
            "USD/GPU-h",
            f"{rates.path} ({rented.source}, read {rented.read_on}; table dated {rates.date})",
            rented.assumption or "",
            "assumption" if rented.assumption else "measured",
        )
        run_cost = (
            Value(rented.per_gpu_hour * gpu_hours.value, "USD", f"{rate.source} x GPU-h", "", rate.kind, simulated)
            if gpu_hours.value is not None
            else missing("USD", gpu_hours.note)
        )
    elif profile is None:
        reason = f"no rate {cloud_rate!r} in {rates.path}" if cloud_rate else "no cost profile for this environment"
        rate = missing("USD/GPU-h", reason)
        run_cost = missing("USD", rate.note)
    else:
        rate = Value(
            profile.usd_per_gpu_hour(),
            "USD/GPU-h",
            f"on-premises cost model, profile {profile.name!r}",
            "annual cost / GPU-hours a year",
            "computed",
        )
        run_cost = (
            Value(rate.value * gpu_hours.value, "USD", f"{rate.source} x GPU-h", "", "computed", simulated)
            if gpu_hours.value is not None and rate.value is not None
            else missing("USD", gpu_hours.note)
        )
    chargeback = []
    for item in rates.rates:
        source = f"{rates.path} ({item.source}, read {item.read_on}; table dated {rates.date})"
        cost = (
            Value(
                item.per_gpu_hour * gpu_hours.value,
                "USD",
                source,
                item.assumption or "",
                "assumption" if item.assumption else "computed",
                simulated,
            )
            if gpu_hours.value is not None
            else missing("USD", gpu_hours.note)
        )
        chargeback.append((item.name, cost, per_1000(cost)))
    label = profile.name if profile else (f"cloud rate {cloud_rate}" if rented is not None else "")
    return Economics(label, rate, gpu_hours, run_cost, per_1000(run_cost), tuple(chargeback))


def data_access(records: EnvironmentRecords) -> DataAccess:
    staging = records.staging
    if isinstance(staging, Missing) or not staging:
        reason = staging.reason if isinstance(staging, Missing) else "nothing was staged"
        staging_time = missing("s", reason)
        staged = missing("bytes", reason)
    else:
        starts = [s.started_at for s in staging if s.started_at is not None]
        ends = [s.finished_at for s in staging if s.finished_at is not None]
        simulated = any(s.simulated for s in staging)
        sources = "; ".join(s.source for s in staging)
        staging_time = (
            Value(max(ends) - min(starts), "s", sources, "", "computed", simulated)
            if starts and ends
            else missing("s", "no staging times recorded", sources)
        )
        sizes = [s.bytes_moved for s in staging if s.bytes_moved is not None]
        staged = (
            Value(float(sum(sizes)), "bytes", sources, "", "measured", simulated)
            if sizes
            else missing(
                "bytes",
                "not measured: simulated node, no container ran" if simulated else "the staging records carry no sizes",
                sources,
            )
        )
    read = missing("bytes", f"not measured: no telemetry for the {records.measured_step} step")
    throughput = missing("bytes/s", read.note)
    telemetry = records.telemetry.get(records.measured_step)
    if isinstance(telemetry, Missing):
        read = missing("bytes", telemetry.reason)
        throughput = missing("bytes/s", telemetry.reason)
    elif telemetry is not None and telemetry.rows >= 2:
        values = telemetry.tree_read_bytes[~np.isnan(telemetry.tree_read_bytes)]
        times = telemetry.t[~np.isnan(telemetry.tree_read_bytes)]
        if values.size >= 2 and times[-1] > times[0]:
            moved = float(values[-1] - values[0])
            read = Value(
                moved,
                "bytes",
                telemetry.source,
                "the step's processes, /proc/<pid>/io read_bytes (storage reads; page-cache hits are not counted)",
                "computed",
            )
            throughput = Value(
                moved / float(times[-1] - times[0]),
                "bytes/s",
                telemetry.source,
                "bytes read / time between first and last sample",
                "computed",
            )
    return DataAccess(staging_time, staged, read, throughput)


def scalability(gpus: int | None, images_per_s: Value) -> Scalability:
    if not gpus or images_per_s.value is None:
        reason = images_per_s.note if images_per_s.value is None else "the run's GPU count is unknown"
        return Scalability((), tuple((n, missing("images/s", reason)) for n in PROJECTION_GPUS))
    per_gpu = images_per_s.value / gpus
    projection = tuple(
        (
            n,
            Value(
                per_gpu * n,
                "images/s",
                f"projection from the measured {images_per_s.value:.4g} images/s on {gpus} GPU(s)",
                "linear scaling assumed (no measured efficiency loss): an upper bound",
                "projection",
                images_per_s.simulated,
            ),
        )
        for n in PROJECTION_GPUS
    )
    return Scalability(((gpus, images_per_s),), projection)


# ------------------------------------------------------------------------------------------------
# comparability


def _options(argv: Sequence[str]) -> dict[str, str]:
    """Each option's value as the program reads it (a repeated option: the last, as argparse does;
    a bare flag: "(flag)"); the words before the program's first long option keyed '(command)'."""
    uses = split_options(argv)
    # The interpreter's own short options (`python3 -m workloads.probe train`) name the program: they
    # belong to the command, not to the arguments being compared.
    first_long = next((i for i, use in enumerate(uses) if use.option.startswith("--")), len(uses))
    result = {"(command)": " ".join(token for use in uses[:first_long] for token in use.tokens)}
    for use in uses[first_long:]:
        result[use.option] = " ".join(use.values) if use.values else "(flag)"
    return result


def comparability(environments: Sequence[EnvironmentRecords]) -> Comparability:
    argvs: dict[str, dict[str, tuple[str, ...]]] = {}
    unknown = []
    for env in environments:
        if isinstance(env.steps, Missing):
            found = {step: c.argv for step, c in env.telemetry.items() if isinstance(c, TelemetryColumns) and c.argv}
        else:
            found = {s.step: s.argv for s in env.steps if s.argv}
        if found:
            argvs[env.name] = found
        else:
            unknown.append(env.name)
    differences = []
    steps = sorted({step for found in argvs.values() for step in found})
    for step in steps:
        have = {name: _options(found[step]) for name, found in argvs.items() if step in found}
        if len(have) < 2:
            continue
        for option in sorted({o for opts in have.values() for o in opts}):
            values = {name: opts.get(option) for name, opts in have.items()}
            if len(set(values.values())) > 1:
                differences.append(ArgumentDifference(step, option, tuple(sorted(values.items()))))
    return Comparability(not differences, tuple(differences), tuple(unknown))


# ------------------------------------------------------------------------------------------------
# the whole report


def environment_metrics(
    records: EnvironmentRecords, profiles: Mapping[str, CostProfile], rates: RateTable
) -> EnvironmentMetrics:
    if isinstance(records.steps, Missing):
        steps: tuple[StepMetrics, ...] = ()
        steps_reason = records.steps.reason
    else:
        steps = tuple(
            step_metrics(s, records.gpus if s.step == records.measured_step else None) for s in records.steps
        )
        steps_reason = ""
    perf = performance(records, steps, steps_reason)
    simulated = any(s.simulated for s in steps) or any(n.simulated for n in records.nodes)
    return EnvironmentMetrics(
        name=records.name,
        kind=records.kind,
        platform=records.platform,
        simulated=simulated,
        provenance=records.provenance,
        steps=steps,
        steps_reason=steps_reason,
        elasticity=elasticity(steps, steps_reason, records.measured_step),
        performance=perf,
        economics=economics(
            profiles.get(records.cost_profile), steps, perf.iterations, rates, records.cloud_rate, steps_reason
        ),
        data_access=data_access(records),
        scalability=scalability(records.gpus, perf.images_per_s),
        notes=records.notes,
    )


def cost_parameters(profiles: Mapping[str, CostProfile], used: Sequence[str]) -> tuple[CostParameter, ...]:
    result = []
    skip = {"name", "description", "assumptions", "overridden"}
    for name in used:
        profile = profiles.get(name)
        if profile is None:
            continue
        assumptions = dict(profile.assumptions)
        for key, value in vars(profile).items():
            if key in skip:
                continue
            origin = "overridden" if key in profile.overridden else assumptions.get(key, "the seed's cost table")
            result.append(CostParameter(name, key, value, origin))
    return tuple(result)


def build_report(
    environments: Sequence[EnvironmentRecords],
    profiles: Mapping[str, CostProfile],
    rates: RateTable,
    run: Mapping[str, str],
    now: dt.datetime | None = None,
) -> Report:
    metrics = tuple(environment_metrics(e, profiles, rates) for e in environments)
    used = sorted({e.cost_profile for e in environments if e.cost_profile})
    per_hour = tuple(
        (
            name,
            Value(
                profiles[name].usd_per_gpu_hour(),
                "USD/GPU-h",
                f"on-premises cost model, profile {name!r}",
                "annual cost / GPU-hours a year",
                "computed",
            ),
        )
        for name in used
        if name in profiles
    )
    notes = [
        f"{m.name}: {m.steps_reason}; no figure of a run is given for it."
        for m in metrics
        if m.steps_reason.startswith("not executed")
    ]
    if any(m.simulated for m in metrics):
        notes.append(
            "Figures marked (simulated) come from KWOK-simulated nodes: no container ran there; the times "
            "are the API's and the simulator's, not a workload's."
        )
    stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")
    title = f"Atlas comparison: {run.get('workload', 'workload')} on {', '.join(m.name for m in metrics)}"
    return Report(
        title,
        stamp,
        dict(run),
        metrics,
        comparability(environments),
        cost_parameters(profiles, used),
        per_hour,
        rates,
        tuple(notes),
    )


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
