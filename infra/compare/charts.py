"""Charts for the five dimensions, from the computed Report only (matplotlib `Figure`, no pyplot).

Every chart labels simulated figures "(simulated)" and projections "(projection)"; a chart
with nothing measured says so on its face instead of drawing empty axes.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import textwrap
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # files only; never a display

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from infra.compare.report_model import EnvironmentMetrics, Report, Value

DPI = 110
# Provenance ("local stand-in: LSF commands on Slurm, mock GPUs, CPU run") goes under the name in
# lines of this many characters, so the left margin stays a third of a chart at most.
PROVENANCE_WRAP = 34


@dataclass(frozen=True)
class Chart:
    name: str  # file stem
    title: str
    png: bytes


def _label(env: EnvironmentMetrics, suffix: str = "") -> str:
    """The environment's name (and `suffix`), its provenance wrapped below: tick labels stay narrow."""
    if not env.provenance:
        return env.name + suffix
    return f"{env.name}{suffix}\n" + textwrap.fill(f"({env.provenance})", PROVENANCE_WRAP)


def _nothing(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _fixed_layout(
    figure: Figure,
    left_labels: Sequence[str] = (),
    label_points: float = 10.0,
    columns: int = 1,
    row_gap_in: float = 0.8,
    title_lines: int = 1,
) -> None:
    """Margins fixed in inches, the left one sized from the longest y tick label.

    Constrained layout measures every text of a chart on each draw; on a report of six charts
    it took most of the render time. These charts have known shapes (a title above each axes,
    an x label below, tick labels on the left), so fixed margins fit them.
    """
    width_in, height_in = figure.get_size_inches()
    longest = max((len(line) for label in left_labels for line in label.splitlines()), default=5)
    left_in = min(0.55 + longest * label_points * 0.55 / 72, 0.5 * width_in / columns)  # ~0.55 em a character
    top_in, bottom_in, right_in = 0.25 + 0.2 * title_lines, 0.55, 0.3
    rows = max(len(figure.axes) // columns, 1)
    column_gap_in = left_in + 0.3
    axes_width = (width_in - left_in - right_in - (columns - 1) * column_gap_in) / columns
    axes_height = (height_in - top_in - bottom_in - (rows - 1) * row_gap_in) / rows
    figure.subplots_adjust(
        left=left_in / width_in,
        right=1 - right_in / width_in,
        top=1 - top_in / height_in,
        bottom=bottom_in / height_in,
        hspace=row_gap_in / max(axes_height, 0.3),
        wspace=column_gap_in / max(axes_width, 0.3),
    )


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _bars(ax: Axes, labels: Sequence[str], values: Sequence[Value], unit: str, title: str) -> None:
    shown = [(label, v) for label, v in zip(labels, values, strict=True) if v.value is not None]
    ax.set_title(title, fontsize=10)
    if not shown:
        reasons = sorted({v.note for v in values if v.note})
        _nothing(ax, "not measured\n" + "\n".join(r[:90] for r in reasons[:3]))
        return
    names = [label + (" (simulated)" if v.simulated and "(simulated)" not in label else "") for label, v in shown]
    bars = ax.barh(names, [float(v.value or 0.0) for _, v in shown], color="#4C72B0")
    ax.bar_label(bars, fmt="%.3g", fontsize=8, padding=2)
    ax.margins(x=0.12)  # room for the value labels at the bars' ends
    ax.set_xlabel(unit)
    ax.invert_yaxis()


def lifecycle_chart(report: Report) -> Chart:
    """Elasticity: each step's wait (requested to started) and run (started to finished) per environment."""
    envs = [e for e in report.environments if e.steps]
    # A row per step, tall enough for its label's lines (the name, then the wrapped provenance).
    row_in = max(0.45, 0.1 + 0.14 * max((_label(e).count("\n") + 1 for e in envs), default=1))
    figure = Figure(figsize=(9, 1.2 + row_in * max(1, sum(len(e.steps) for e in envs))))
    ax = figure.add_subplot()
    if not envs:
        _nothing(ax, "not measured: no environment recorded step times")
        return Chart("elasticity-lifecycle", "Step lifecycle", _png(figure))
    origin = min(s.requested_at.value for e in envs for s in e.steps if s.requested_at.value is not None)
    rows, labels = 0, []
    for env in envs:
        for step in env.steps:
            requested, started, finished = step.requested_at.value, step.started_at.value, step.finished_at.value
            if requested is not None and started is not None:
                ax.barh(
                    rows,
                    started - requested,
                    left=requested - origin,
                    color="#DD8452",
                    label="waiting (requested to started)" if rows == 0 else None,
                )
            if started is not None and finished is not None:
                ax.barh(
                    rows,
                    max(finished - started, 0.2),
                    left=started - origin,
                    color="#4C72B0",
                    label="running (started to finished)" if rows == 0 else None,
                )
            labels.append(_label(env, f": {step.step}"))
            rows += 1
    ax.set_yticks(range(rows), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first request")
    ax.set_title("Elasticity: each step from request to finish (scheduler and API records)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    _fixed_layout(figure, labels, label_points=8.0)
    return Chart("elasticity-lifecycle", "Step lifecycle: waiting and running", _png(figure))


def elasticity_chart(report: Report) -> Chart:
    figure = Figure(figsize=(9, 3.2))
    labels = [_label(e) for e in report.environments]
    ax1, ax2 = figure.subplots(1, 2)
    _bars(
        ax1, labels, [e.elasticity.request_to_gpus_running for e in report.environments], "s", "Request to GPUs running"
    )
    _bars(
        ax2,
        labels,
        [e.elasticity.time_to_add_gpus for e in report.environments],
        "s",
        "Time to add GPUs\n(GPU step eligible to running)",
    )
    _fixed_layout(figure, labels, columns=2, title_lines=2)
    return Chart("elasticity", "Elasticity", _png(figure))


def performance_chart(report: Report) -> Chart:
    names = ("CPU (host)", "memory used (host)", "GPU utilization")
    figure = Figure(figsize=(9, 8))
    axes = figure.subplots(4, 1)
    for ax, name in zip(axes[:3], names, strict=True):
        drawn = False
        unit = ""
        for env in report.environments:
            series = next((s for s in env.performance.series if s.name == name), None)
            if series is None or not series.y:
                continue
            ax.plot(series.x, series.y, label=_label(env), linewidth=1, marker="." if len(series.y) < 50 else None)
            unit, drawn = series.unit, True
        ax.set_title(f"{name} over the training step (the sampler's telemetry)", fontsize=10)
        if drawn:
            ax.set_ylabel(unit, fontsize=8)
            ax.set_xlabel("s since the step started", fontsize=8)
            # A fixed corner: "best" tests every candidate place against every plotted point.
            ax.legend(fontsize=8, loc="upper right")
        else:
            reasons = sorted({_reason_for(env, name) for env in report.environments})
            _nothing(ax, "not measured\n" + "\n".join(r[:100] for r in reasons[:4]))
    _bars(
        axes[3],
        [_label(e) for e in report.environments],
        [e.performance.images_per_s for e in report.environments],
        "images/s",
        "Throughput (training log: iterations per second x images an iteration; the table says how)",
    )
    _fixed_layout(figure, [_label(e) for e in report.environments])
    return Chart("performance", "Performance", _png(figure))


def _reason_for(env: EnvironmentMetrics, name: str) -> str:
    value = env.performance.gpu_utilization_mean if name.startswith("GPU") else env.performance.cpu_host_mean
    return f"{env.name}: {value.note}" if value.value is None else f"{env.name}: no samples"


def economics_chart(report: Report) -> Chart:
    figure = Figure(figsize=(9, 3.6))
    ax = figure.add_subplot()
    labels, values = [], []
    for env in report.environments:
        labels.append(f"{_label(env)}: on-prem model ({env.economics.profile})")
        values.append(env.economics.cost_per_run)
        for rate, per_run, _ in env.economics.chargeback:
            labels.append(f"{_label(env)}: {rate}" + (" (rate assumed)" if per_run.kind == "assumption" else ""))
            values.append(per_run)
    _bars(ax, labels, values, "USD per run", "Economics: cost of this run (GPU-hours x rate)")
    for tick in ax.get_yticklabels():
        tick.set_fontsize(7)
    _fixed_layout(figure, labels, label_points=7.0)
    return Chart("economics", "Economics", _png(figure))


def data_access_chart(report: Report) -> Chart:
    figure = Figure(figsize=(9, 3.2))
    ax1, ax2 = figure.subplots(1, 2)
    labels = [_label(e) for e in report.environments]
    _bars(ax1, labels, [e.data_access.staging_time for e in report.environments], "s", "Staging time")
    _bars(ax2, labels, [e.data_access.bytes_staged for e in report.environments], "bytes", "Bytes staged")
    _fixed_layout(figure, labels, columns=2)
    return Chart("data-access", "Data access", _png(figure))


def scalability_chart(report: Report) -> Chart:
    figure = Figure(figsize=(9, 3.8))
    ax = figure.add_subplot()
    drawn = False
    for env in report.environments:
        points = [(n, v.value) for n, v in env.scalability.projection if v.value is not None]
        if points:
            line = ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                linestyle="--",
                linewidth=1,
                label=f"{_label(env)} (projection: linear)",
            )
            measured = [(n, v.value) for n, v in env.scalability.measured if v.value is not None]
            ax.plot(
                [m[0] for m in measured],
                [m[1] for m in measured],
                "o",
                color=line[0].get_color(),
                label=f"{_label(env)} (measured)",
            )
            drawn = True
    ax.set_title("Scalability: measured throughput and a linear projection (an upper bound)", fontsize=10)
    if drawn:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # GPU counts as plain numbers at the projected points; decades only on the rate axis
        # (minor-tick labels on a short log range are many texts to lay out, and noise).
        counts = sorted({n for env in report.environments for n, _ in env.scalability.projection})
        ax.xaxis.set_major_locator(FixedLocator(counts))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("GPUs")
        ax.set_ylabel("images/s")
        ax.legend(fontsize=8, loc="upper left")
    else:
        reasons = sorted({f"{e.name}: {e.performance.images_per_s.note}" for e in report.environments})
        _nothing(ax, "not measured\n" + "\n".join(r[:100] for r in reasons[:4]))
    _fixed_layout(figure, ["1e+03"])
    return Chart("scalability", "Scalability", _png(figure))


CHARTS: tuple[Callable[[Report], Chart], ...] = (
    lifecycle_chart,
    elasticity_chart,
    performance_chart,
    economics_chart,
    data_access_chart,
    scalability_chart,
)


def _render(index: int) -> Chart:
    assert _FORKED_REPORT is not None
    return CHARTS[index](_FORKED_REPORT)


_FORKED_REPORT: Report | None = None


def all_charts(report: Report, workers: int | None = None) -> tuple[Chart, ...]:
    """Every chart, drawn by forked processes where there is more than one CPU (drawing is
    CPU-bound Python: each process takes whole charts). The children inherit the report
    through fork, so nothing but the PNG bytes crosses back."""
    count = workers if workers is not None else min(len(os.sched_getaffinity(0)), len(CHARTS))
    if count <= 1:
        return tuple(chart(report) for chart in CHARTS)
    global _FORKED_REPORT
    _FORKED_REPORT = report
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
            return tuple(pool.map(_render, range(len(CHARTS))))
    finally:
        _FORKED_REPORT = None
