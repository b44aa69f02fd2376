"""Performance: wall time, the workload's throughput from its log, and the sampler's CPU, memory and GPU readings.

Also the series the charts draw, each reduced to at most MAX_CHART_POINTS points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from infra.compare.records import CGROUP_PEAK, EnvironmentRecords, Missing, TelemetryColumns, TrainingLog
from infra.compare.report_model import MOCK_GPU, Performance, Series, StepMetrics, Value, missing

MAX_CHART_POINTS = 1000  # a series is reduced to at most this many (mean per bin) before charting


CGROUP_BASIS = "the step's own memory cgroup's peak (the kernel's high-water mark: each page once, page cache included)"
RSS_BASIS = "the RSS sum of the step's processes, highest sample (a page shared by forked workers counts in each)"


def memory_peak(columns: TelemetryColumns) -> tuple[Value, str]:
    """The step's memory peak and what it was read from: the high-water mark of the step's own cgroup
    where the sampler recorded one (it counts pages shared between processes once, and sees between
    samples), saying whose; else the largest RSS sum over the samples, saying why there was no cgroup
    peak (none, or a cgroup the step shares: infra.telemetry.procfs.judge_memory_cgroup)."""
    src = columns.source
    cgroup = _stat(columns.cgroup_peak_bytes, "max", "bytes", src, _reason(columns, CGROUP_PEAK))
    if cgroup.measured:
        basis = f"{CGROUP_BASIS}: {columns.memory_cgroup_why}" if columns.memory_cgroup_why else CGROUP_BASIS
        return replace(cgroup, note=f"{basis}; {cgroup.note}"), basis
    rss = _stat(columns.tree_rss_bytes, "max", "bytes", src, _reason(columns, "memory"))
    if not rss.measured:
        return rss, rss.note
    why = cgroup.note.removeprefix("not measured: ")
    basis = f"{RSS_BASIS}; no cgroup peak: {why}"
    return replace(rss, note=f"{basis}; {rss.note}"), basis


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
