"""Render a computed Report: Markdown, a self-contained HTML page, JSON, and the terminal summary's table and lines.

Nothing is computed here: `report_tables` only chooses which `Value`s each table shows, and the
formatters turn a Value into text (unit, a numbered source, simulated / assumption /
projection marks, or "not measured" with the reason).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from rich.table import Table

from infra.compare.charts import Chart
from infra.compare.report_model import EnvironmentMetrics, Report, SweepMetrics, Value

Cell = Value | str


@dataclass(frozen=True)
class TableRow:
    label: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[TableRow, ...]
    charts: tuple[str, ...]  # chart names shown under the table


class Sources:
    """Numbers each distinct source once, in order of first use: cells cite `[n]`."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def cite(self, source: str) -> str:
        if not source:
            return ""
        number = self.numbers.setdefault(source, len(self.numbers) + 1)
        return f"[{number}]"


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _significant(number: float) -> str:
    """Four significant digits, with thousands separators and never in exponent form above 1 (11,040)."""
    if abs(number) >= 1000:
        return f"{round(number, 4 - len(str(int(abs(number))))):,.0f}"
    return f"{number:,.4g}"


def format_value(value: Value, sources: Sources, with_note: bool = True) -> str:
    if value.value is None:
        if not value.note:
            return "not measured"
        return value.note if value.note.startswith(("not ", "no ")) else f"not measured ({value.note})"
    number = value.value
    if value.unit == "Unix s":
        text = dt.datetime.fromtimestamp(number, tz=dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    elif value.unit in ("bytes",):
        text = _bytes(number)
    elif value.unit == "bytes/s":
        text = _bytes(number) + "/s"
    elif value.unit in ("USD", "USD/GPU-h"):
        text = f"${number:,.4g}" + ("" if value.unit == "USD" else "/GPU-h")
    elif value.unit == "point":
        text = f"point {number:.0f}"
    else:
        text = f"{_significant(number)} {value.unit}".rstrip()
    marks = []
    if value.simulated:
        marks.append("simulated")
    if value.kind == "assumption":
        marks.append("rate assumed")
    if value.kind == "projection":
        marks.append("projection")
    if marks:
        text += f" ({', '.join(marks)})"
    citation = sources.cite(value.source)
    return f"{text} {citation}".strip()


def format_cell(cell: Cell, sources: Sources) -> str:
    return cell if isinstance(cell, str) else format_value(cell, sources)


def report_tables(report: Report) -> tuple[Section, ...]:
    envs = report.environments
    step_names = [s for e in envs for s in (x.step for x in e.steps)]
    steps = list(dict.fromkeys(step_names))

    def per_step(what: str, attribute: str) -> list[TableRow]:
        rows = []
        for step in steps:
            cells: list[Cell] = []
            for env in envs:
                found = next((s for s in env.steps if s.step == step), None)
                cells.append(getattr(found, attribute) if found else (env.steps_reason or "no such step"))
            rows.append(TableRow(f"{what}: {step}", tuple(cells)))
        return rows

    def each(label: str, attribute: str) -> TableRow:
        """A row of one metric, `block.name` of each environment's metrics."""
        return TableRow(label, tuple(attrgetter(attribute)(e) for e in envs))

    pending = TableRow(
        "pending reasons (scheduler / API)",
        tuple("; ".join(e.elasticity.pending_reasons) or "none recorded" for e in envs),
    )
    elasticity = (
        each("request to GPUs running", "elasticity.request_to_gpus_running"),
        each("time to add GPUs (GPU step eligible to running)", "elasticity.time_to_add_gpus"),
        each("  estimated before the run", "elasticity.estimated_gpu_step_wait"),
        each("  estimate minus measured", "elasticity.estimate_error"),
        each("queue wait of the GPU step", "elasticity.gpu_step_queue_wait"),
        each("queue wait, all steps", "elasticity.total_queue_wait"),
        *per_step("requested", "requested_at"),
        *per_step("started", "started_at"),
        *per_step("finished", "finished_at"),
        *per_step("queue wait", "queue_wait"),
        *per_step("GPUs asked for", "gpus_requested"),
        *per_step("GPUs given", "gpus_allocated"),
        pending,
    )
    performance = (
        each("wall time (first request to last finish)", "performance.wall_time"),
        *per_step("duration", "duration"),
        each("iterations", "performance.iterations"),
        each("iterations per second", "performance.iterations_per_s"),
        each("images per second", "performance.images_per_s"),
        each("the workload's own throughput (report.throughput)", "performance.workload_throughput"),
        each("measured step (time, CPU, memory, GPU below)", "performance.measured_step"),
        each("CPU, the step's processes (mean)", "performance.cpu_tree_mean"),
        each("CPU, host (mean)", "performance.cpu_host_mean"),
        each("memory, the step (peak)", "performance.memory_peak"),
        each("  read from", "performance.memory_peak_basis"),
        each("memory RSS, the step's processes (peak)", "performance.memory_rss_peak"),
        each("memory used, host (peak)", "performance.memory_host_peak"),
        each("GPU utilization (mean)", "performance.gpu_utilization_mean"),
        each("GPU memory used (peak)", "performance.gpu_memory_peak"),
        each("telemetry samples", "performance.samples"),
    )
    rate_names = list(dict.fromkeys(name for e in envs for name, _, _ in e.economics.chargeback))
    economics = (
        TableRow("cost profile", tuple(e.economics.profile or "none" for e in envs)),
        each("cost per GPU-hour (on-premises model, or the cloud rate)", "economics.usd_per_gpu_hour"),
        each("GPU-hours used", "economics.gpu_hours"),
        each("cost per run (on-premises model, or the cloud rate)", "economics.cost_per_run"),
        each("cost per 1,000 iterations (on-premises model)", "economics.cost_per_1000_iterations"),
        # chargeback rows are (rate, cost per run, cost per 1,000 iterations)
        *(
            TableRow(
                f"{what} at {rate}",
                tuple(next((row[column] for row in e.economics.chargeback if row[0] == rate), "no rate") for e in envs),
            )
            for column, what in ((1, "cost per run"), (2, "cost per 1,000 iterations"))
            for rate in rate_names
        ),
    )
    data = (
        each("staging time", "data_access.staging_time"),
        each("bytes staged", "data_access.bytes_staged"),
        each("bytes read by the training step", "data_access.bytes_read"),
        each("read throughput of the measured step", "data_access.read_throughput"),
    )
    gpu_counts = list(dict.fromkeys(n for e in envs for n, _ in e.scalability.projection))
    scalability = (
        TableRow(
            "measured (GPUs: images/s)",
            tuple(
                "; ".join(f"{n}: " + format_value(v, Sources()) for n, v in e.scalability.measured) or "not measured"
                for e in envs
            ),
        ),
        *(
            TableRow(
                f"projected at {n} GPUs",
                tuple(next((v for m, v in e.scalability.projection if m == n), "n/a") for e in envs),
            )
            for n in gpu_counts
        ),
    )
    return (
        Section("Elasticity", elasticity, ("elasticity-lifecycle", "elasticity")),
        *sweep_sections(report),
        Section("Performance", performance, ("performance",)),
        Section("Economics", economics, ("economics",)),
        Section("Data access", data, ("data-access",)),
        Section("Scalability", scalability, ("scalability",)),
    )


def sweep_sections(report: Report) -> tuple[Section, ...]:
    """One section per swept step, every side that ran it side by side: its elements by state, run
    time and queue wait per element, makespan and best point."""
    envs = report.environments
    steps = list(dict.fromkeys(s.step for e in envs for s in e.sweeps))
    sections = []
    for step in steps:
        found = [next((s for s in e.sweeps if s.step == step), None) for e in envs]
        absent = [e.steps_reason or "no such sweep" for e in envs]

        def row(label: str, cell: Callable[[SweepMetrics], Cell]) -> TableRow:
            return _sweep_row(label, found, absent, cell)  # noqa: B023 - called before the next step

        rows = (
            row("points", lambda s: str(s.points)),
            row("elements by state", lambda s: ", ".join(f"{word} {n}" for word, n in s.states) or "none"),
            row("run time per element (median)", lambda s: s.run_time_median),
            row("run time per element (p95)", lambda s: s.run_time_p95),
            row("  over", lambda s: s.run_time_p95.note if s.run_time_p95.measured else "no element"),
            row("queue wait per element (median)", lambda s: s.queue_wait_median),
            row("queue wait per element (p95)", lambda s: s.queue_wait_p95),
            row("  over", lambda s: s.queue_wait_p95.note if s.queue_wait_p95.measured else "no element"),
            row("makespan (first request to the last element's end)", lambda s: s.makespan),
            row("best point by the metric", lambda s: s.best_point),
            row("  its values", lambda s: s.best_values),
            row("  its metric", lambda s: s.best_metric),
            row("metric read at", lambda s: s.metric_read),
            row("scheduler objects read", lambda s: ", ".join(s.arrays) or "none"),
            row("not read", lambda s: "; ".join(s.notes) or "nothing left out"),
        )
        sections.append(Section(f"Sweep: {step}", rows, ()))
    return tuple(sections)


def _sweep_row(
    label: str, found: Sequence[SweepMetrics | None], absent: Sequence[str], cell: Callable[[SweepMetrics], Cell]
) -> TableRow:
    return TableRow(label, tuple(cell(s) if s else why for s, why in zip(found, absent, strict=True)))


def _column_title(env: EnvironmentMetrics) -> str:
    """The environment, its platform and what it is: "satori (LSF over SSH; local stand-in: ...)"."""
    what = env.provenance or ("simulated" if env.simulated else "")
    return f"{env.name} ({env.platform}{'; ' + what if what and what not in env.platform else ''})"


def _header(report: Report) -> list[str]:
    return ["metric", *(_column_title(e) for e in report.environments)]


def _comparability_lines(report: Report) -> list[str]:
    comparability = report.comparability
    lines = []
    if comparability.comparable:
        lines.append(
            "Comparable: every environment whose records carry the steps' arguments ran them with the same arguments."
        )
    elif comparability.differences:
        lines.append("**Not comparable**: the runs' arguments differ:")
        for d in comparability.differences:
            values = ", ".join(f"{env}: {value if value is not None else '(absent)'}" for env, value in d.values)
            lines.append(f"- step `{d.step}`, argument `{d.argument}`: {values}")
    if comparability.unknown:
        lines.append("Arguments unknown (no record carries them) for: " + ", ".join(comparability.unknown))
    return lines


RUNTIME_HEADER = ("environment", "runtime", "image digest", "architecture", "source")
CONVERSION_HEADER = ("site", "image digest", "environments", "conversion time", "when", "converted by", "in this run")


def runtime_table(report: Report, sources: Sources) -> list[list[str]]:
    """The "what ran where" rows as text: runtime, digest (short: the JSON has it in full), architecture."""
    return [
        [r.environment, r.runtime, r.digest_text, r.arch, sources.cite(r.source)] for r in report.what_ran_where.rows
    ]


def conversion_table(report: Report, sources: Sources) -> list[list[str]]:
    """Each SIF conversion once per (site, digest), apart from the steps' times."""
    return [
        [c.site, c.digest_text, ", ".join(c.environments), format_value(c.seconds, sources), c.converted_at, c.by,
         c.origin]
        for c in report.what_ran_where.conversions
    ]  # fmt: skip


CONVERSIONS_TITLE = "SIF conversions (once per site and image digest, not part of any step's time)"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(_md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(_md_escape(x) for x in row) + " |" for row in rows]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report, charts: Sequence[Chart], chart_files: dict[str, str]) -> str:
    sources = Sources()
    out = [
        f"# {report.title}",
        "",
        f"Generated {report.generated_at}. Run: " + ", ".join(f"{k} `{v}`" for k, v in report.run.items()),
        "",
    ]
    out += [f"> {note}" for note in report.notes] + ([""] if report.notes else [])
    out += ["## Comparability", "", *_comparability_lines(report), ""]
    if report.what_ran_where.rows:
        out += ["## What ran where", "", *_md_table(RUNTIME_HEADER, runtime_table(report, sources)), ""]
        out += [*(f"- {line}" for line in report.what_ran_where.digests), ""]
        if report.what_ran_where.conversions:
            conversions = conversion_table(report, sources)
            out += [f"### {CONVERSIONS_TITLE}", "", *_md_table(CONVERSION_HEADER, conversions), ""]
    titles = {c.name: c.title for c in charts}
    for section in report_tables(report):
        out += [f"## {section.title}", ""]
        header = _header(report)
        out.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
        out.append("|" + "---|" * len(header))
        for row in section.rows:
            cells = [format_cell(c, sources) for c in row.cells]
            out.append("| " + " | ".join(_md_escape(x) for x in [row.label, *cells]) + " |")
        out.append("")
        for name in section.charts:
            if name in chart_files:
                out += [f"![{titles.get(name, name)}]({chart_files[name]})", ""]
    out += ["## Cost model parameters", "", "| profile | parameter | value | origin |", "|---|---|---|---|"]
    out += [f"| {p.profile} | {p.parameter} | {p.value} | {_md_escape(p.origin)} |" for p in report.cost_parameters]
    out += [
        "",
        f"Rates: `{report.rate_table.path}`, dated {report.rate_table.date} ({report.rate_table.currency}).",
        "",
    ]
    for env in report.environments:
        if env.notes:
            out += [f"Notes on {env.name}:", *[f"- {n}" for n in env.notes], ""]
    out += ["## Sources", ""]
    out += [f"{number}. {_md_escape(source)}" for source, number in sources.numbers.items()]
    return "\n".join(out) + "\n"


def render_html(report: Report, charts: Sequence[Chart]) -> str:
    sources = Sources()
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{e(report.title)}</title><style>",
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}",
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;"
        "vertical-align:top;text-align:left}th{background:#f3f3f3}td.label{font-weight:600}"
        ".missing{color:#999}.note{background:#fff8e1;padding:.5em 1em;border-left:4px solid #f0b400}"
        "img{max-width:100%;border:1px solid #eee;margin:.5em 0}.bad{color:#b00020;font-weight:700}",
        "</style></head><body>",
        f"<h1>{e(report.title)}</h1>",
        f"<p>Generated {e(report.generated_at)}. Run: "
        + ", ".join(f"{e(k)} <code>{e(v)}</code>" for k, v in report.run.items())
        + "</p>",
    ]
    parts += [f"<p class='note'>{e(n)}</p>" for n in report.notes]
    parts.append("<h2>Comparability</h2>")
    for line in _comparability_lines(report):
        css = " class='bad'" if line.startswith("**") else ""
        parts.append(f"<p{css}>{e(line.replace('**', ''))}</p>")
    if report.what_ran_where.rows:
        parts.append("<h2>What ran where</h2>" + _html_table(RUNTIME_HEADER, runtime_table(report, sources)))
        parts += [f"<p>{e(line)}</p>" for line in report.what_ran_where.digests]
        if report.what_ran_where.conversions:
            parts.append(f"<h3>{e(CONVERSIONS_TITLE)}</h3>")
            parts.append(_html_table(CONVERSION_HEADER, conversion_table(report, sources)))
    by_name = {c.name: c for c in charts}
    for section in report_tables(report):
        parts.append(f"<h2>{e(section.title)}</h2><table><tr>")
        parts += [f"<th>{e(h)}</th>" for h in _header(report)]
        parts.append("</tr>")
        for row in section.rows:
            parts.append(f"<tr><td class='label'>{e(row.label)}</td>")
            for cell in row.cells:
                text = format_cell(cell, sources)
                css = " class='missing'" if text.startswith("not measured") else ""
                parts.append(f"<td{css}>{e(text)}</td>")
            parts.append("</tr>")
        parts.append("</table>")
        for name in section.charts:
            chart = by_name.get(name)
            if chart:
                data = base64.b64encode(chart.png).decode()
                parts.append(
                    f"<figure><img alt='{e(chart.title)}' src='data:image/png;base64,{data}'>"
                    f"<figcaption>{e(chart.title)}</figcaption></figure>"
                )
    parts.append(
        "<h2>Cost model parameters</h2><table><tr><th>profile</th><th>parameter</th><th>value</th><th>origin</th></tr>"
    )
    parts += [
        f"<tr><td>{e(p.profile)}</td><td>{e(p.parameter)}</td><td>{e(str(p.value))}</td><td>{e(p.origin)}</td></tr>"
        for p in report.cost_parameters
    ]
    parts.append(f"</table><p>Rates: <code>{e(report.rate_table.path)}</code>, dated {e(report.rate_table.date)}.</p>")
    for env in report.environments:
        if env.notes:
            parts.append(
                f"<p><b>Notes on {e(env.name)}</b></p><ul>" + "".join(f"<li>{e(n)}</li>" for n in env.notes) + "</ul>"
            )
    parts.append("<h2>Sources</h2><ol>" + "".join(f"<li>{e(s)}</li>" for s in sources.numbers) + "</ol>")
    parts.append("</body></html>")
    return "".join(parts)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    missing = " class='missing'"
    body = "".join(
        "<tr>" + "".join(f"<td{missing if x.startswith('not ') else ''}>{e(x)}</td>" for x in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def render_json(report: Report) -> str:
    return json.dumps({"format": "atlas-compare/1", **_plain(report)}, indent=1, allow_nan=False, default=str)


def summary_table(report: Report) -> Table:
    """The terminal's short table: one row per environment (a pure function of the report)."""
    sources = Sources()
    table = Table(title=report.title, show_lines=False)
    for column in (
        "environment",
        "request → GPUs",
        "GPU step wait",
        "measured step",
        "images/s",
        "own throughput",
        "cost/run (on-prem)",
        "GPU util",
    ):
        table.add_column(column, overflow="fold")
    for env in report.environments:

        def short(value: Value) -> str:
            text = format_value(value, sources)
            return "not measured" if text.startswith("not measured") else text.rsplit(" [", 1)[0]

        measured = env.performance.measured_step
        train = next((s.duration for s in env.steps if s.step == measured), None)
        table.add_row(
            env.label,
            short(env.elasticity.request_to_gpus_running),
            short(env.elasticity.gpu_step_queue_wait),
            f"{measured}: {short(train)}" if train else "not measured",
            short(env.performance.images_per_s),
            short(env.performance.workload_throughput),
            short(env.economics.cost_per_run),
            short(env.performance.gpu_utilization_mean),
        )
    return table


def summary_renderables(report: Report) -> list[Table | str]:
    """What the terminal shows after a report is written, in order: the table, the notes and the
    comparability lines (without Markdown's bold); scripts/compare prints them."""
    lines: list[Table | str] = [summary_table(report), *report.notes, *report.what_ran_where.digests]
    lines += [line.replace("**", "") for line in _comparability_lines(report)]
    return lines
