"""The snapshot as a terminal view (rich), a web page (HTML) and JSON: all read the same dataclasses.

Nothing is computed here beyond formatting. The web page marks every number with
`data-env`, `data-row` and `data-field` attributes and its raw value in `data-value`, so a
test (or a script) reads the numbers off the page without parsing the formatting.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import json
from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from infra.monitor.model import EnvironmentView, Snapshot, StepView, SweepView, WaitEstimate

PHASE_STYLE = {
    "running": "bold green",
    "pending": "yellow",
    "succeeded": "green",
    "failed": "bold red",
    "cancelled": "red",
    "suspended": "magenta",
    "unknown": "dim",
}


def to_dict(snapshot: Snapshot) -> dict[str, Any]:
    data = dataclasses.asdict(snapshot)
    # The derived number renderers show, so a script reading the JSON needs no arithmetic.
    for env, env_data in zip(snapshot.environments, data["environments"], strict=True):
        for node, node_data in zip(env.nodes, env_data["nodes"], strict=True):
            node_data["gpus_free"] = node.gpus_free
    return data


def to_json(snapshot: Snapshot) -> str:
    return json.dumps(to_dict(snapshot), indent=2, sort_keys=True)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def number(value: float | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}{unit}"


def size(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def clock(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%H:%M:%S UTC")


def estimate_text(estimate: WaitEstimate | None) -> str:
    if estimate is None:
        return "queue-wait estimate: - (workload shape unknown)"
    if estimate.seconds is None:
        return f"queue-wait estimate for a {estimate.gpus}-GPU job: cannot estimate ({estimate.basis})"
    return f"queue-wait estimate for a {estimate.gpus}-GPU job: ~{duration(estimate.seconds)} ({estimate.basis})"


# --- terminal ------------------------------------------------------------------------------------


def steps_table(env: EnvironmentView) -> Table:
    table = Table(expand=False, show_edge=False, pad_edge=False)
    for column, justify in (
        ("step", "left"),
        ("job", "left"),
        ("state", "left"),
        ("node", "left"),
        ("elapsed", "right"),
        ("queue wait", "right"),
        ("it/s", "right"),
        ("CPU", "right"),
        ("mem", "right"),
        ("GPU use", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for step in env.steps:
        table.add_row(
            step.name,
            step.job,
            Text(f"{step.phase} ({step.native_state})", style=PHASE_STYLE.get(step.phase, "")),
            step.node or "-",
            duration(step.elapsed_s),
            duration(step.queue_wait_s),
            *live_cells(step),
        )
    return table


def or_reason(text: str, value: float | None, reason: str) -> str:
    """A reading, or `- (<why>)` where there is none."""
    return text if value is not None else f"- ({reason or 'no reason given'})"


def live_cells(step: StepView) -> tuple[str, str, str, str]:
    """it/s, CPU, memory and GPU use as every view shows them: the reading, or why there is none."""
    why = step.reasons
    return (
        or_reason(number(step.iterations_per_s), step.iterations_per_s, why.iterations_per_s),
        or_reason(number(step.cpu_percent, " %", 0), step.cpu_percent, why.cpu_percent),
        or_reason(size(step.memory_bytes), step.memory_bytes, why.memory_bytes),
        or_reason(number(step.gpu_util_percent, " %", 0), step.gpu_util_percent, why.gpu_util_percent),
    )


def nodes_table(env: EnvironmentView) -> Table:
    table = Table(expand=False, show_edge=False, pad_edge=False)
    for column, justify in (
        ("node", "left"),
        ("state", "left"),
        ("GPUs alloc/total", "right"),
        ("free", "right"),
        ("GPU use", "right"),
        ("use from", "left"),
        ("held by", "left"),
        ("what it is", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for node in env.nodes:
        if not node.gpus_total:
            continue
        table.add_row(
            node.name,
            node.state,
            f"{node.gpus_allocated}/{node.gpus_total}",
            Text(str(node.gpus_free), style="bold yellow" if node.gpus_free else ""),
            number(node.gpu_util_percent, " %", 0),
            node.util_source,
            ", ".join(node.workloads[:2]) + (f" +{len(node.workloads) - 2}" if len(node.workloads) > 2 else ""),
            node.provenance,
        )
    return table


def sweep_states(sweep: SweepView) -> str:
    return ", ".join(f"{word} {n}" for word, n in sweep.states) or "no elements"


def sweeps_table(env: EnvironmentView) -> Table:
    """Each swept step's elements by state."""
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("sweep", "points", "elements by state", "not read"):
        table.add_column(column, overflow="fold")
    for sweep in env.sweeps:
        table.add_row(sweep.step, str(sweep.points), sweep_states(sweep), sweep.note or "-")
    return table


def environment_panel(env: EnvironmentView, now: float) -> Panel:
    title = f"[bold]{env.name}[/bold]  {env.platform}  ({env.provenance})"
    if env.error:
        return Panel(Text(f"cannot read: {env.error}", style="red"), title=title, title_align="left")
    parts: list[RenderableType] = [steps_table(env)] if env.steps else [Text("no steps in the outputs", style="dim")]
    if env.sweeps:
        parts += [Text(""), sweeps_table(env)]
    if any(n.gpus_total for n in env.nodes):
        parts += [Text(""), nodes_table(env)]
    parts.append(Text(estimate_text(env.estimate), style="cyan"))
    age = f"{max(0.0, now - env.polled_at):.0f} s ago" if env.polled_at is not None else "never"
    parts.append(Text(f"answered {age}; {env.source}", style="dim"))
    parts += [Text(note, style="dim italic") for note in env.notes]
    return Panel(Group(*parts), title=title, title_align="left")


def terminal_view(snapshot: Snapshot) -> Group:
    header = Text(
        f"Atlas monitor: stack {snapshot.stack or '-'}, workload {snapshot.workload or '-'}, "
        f"run {snapshot.run_id or '-'}"
        f"  |  {clock(snapshot.taken_at)}  |  schedulers polled every {snapshot.interval_s:g} s, Kubernetes watched",
        style="bold",
    )
    return Group(header, *(environment_panel(env, snapshot.taken_at) for env in snapshot.environments))


# --- HTML ----------------------------------------------------------------------------------------


def _cell(env: str, row: str, field: str, value: float | int | str | None, text: str, reason: str = "") -> str:
    raw = "" if value is None else str(value)
    why = f' data-reason="{html.escape(reason)}"' if value is None and reason else ""
    return (
        f'<td data-env="{html.escape(env)}" data-row="{html.escape(row)}" data-field="{field}" '
        f'data-value="{html.escape(raw)}"{why}>{html.escape(text)}</td>'
    )


def _live_cells(env: str, step: StepView) -> str:
    fields = ("iterations_per_s", "cpu_percent", "memory_bytes", "gpu_util_percent")
    return "".join(
        _cell(env, step.name, field, getattr(step, field), text, getattr(step.reasons, field))
        for field, text in zip(fields, live_cells(step), strict=True)
    )


def _rows(items: Iterable[str]) -> str:
    return "\n".join(items)


def html_page(snapshot: Snapshot, refresh_s: float | None = None) -> str:
    sections = []
    for env in snapshot.environments:
        name = env.name
        if env.error:
            sections.append(
                f'<section data-env="{html.escape(name)}"><h2>{html.escape(name)}</h2>'
                f'<p class="error">cannot read: {html.escape(env.error)}</p></section>'
            )
            continue
        step_rows = _rows(
            "<tr>"
            + _cell(name, s.name, "step", s.name, s.name)
            + _cell(name, s.name, "job", s.job, s.job)
            + _cell(name, s.name, "phase", s.phase, f"{s.phase} ({s.native_state})")
            + _cell(name, s.name, "node", s.node, s.node or "-")
            + _cell(name, s.name, "elapsed_s", s.elapsed_s, duration(s.elapsed_s))
            + _cell(name, s.name, "queue_wait_s", s.queue_wait_s, duration(s.queue_wait_s))
            + _live_cells(name, s)
            + "</tr>"
            for s in env.steps
        )
        node_rows = _rows(
            "<tr>"
            + _cell(name, n.name, "node", n.name, n.name)
            + _cell(name, n.name, "state", n.state, n.state)
            + _cell(name, n.name, "gpus_allocated", n.gpus_allocated, str(n.gpus_allocated))
            + _cell(name, n.name, "gpus_total", n.gpus_total, str(n.gpus_total))
            + _cell(name, n.name, "gpus_free", n.gpus_free, str(n.gpus_free))
            + _cell(name, n.name, "gpu_util_percent", n.gpu_util_percent, number(n.gpu_util_percent, " %", 0))
            + _cell(name, n.name, "util_source", n.util_source, n.util_source)
            + _cell(name, n.name, "provenance", n.provenance, n.provenance)
            + "</tr>"
            for n in env.nodes
            if n.gpus_total
        )
        sweep_rows = _rows(
            "<tr>"
            + _cell(name, w.step, "sweep", w.step, w.step)
            + _cell(name, w.step, "points", w.points, str(w.points))
            + "".join(
                _cell(name, w.step, f"elements_{word.replace(' ', '_')}", n, f"{word} {n}") for word, n in w.states
            )
            + _cell(name, w.step, "not_read", w.note, w.note or "-")
            + "</tr>"
            for w in env.sweeps
        )
        sweeps_html = (
            "<table><thead><tr><th>sweep</th><th>points</th><th colspan='6'>elements by state</th></tr></thead>"
            f"<tbody>{sweep_rows}</tbody></table>"
            if env.sweeps
            else ""
        )
        estimate = env.estimate
        estimate_html = (
            f'<p class="estimate" data-env="{html.escape(name)}" data-field="estimate_s" '
            f'data-value="{"" if estimate is None or estimate.seconds is None else estimate.seconds}">'
            f"{html.escape(estimate_text(estimate))}</p>"
        )
        notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in env.notes)
        sections.append(
            f'<section data-env="{html.escape(name)}"><h2>{html.escape(name)} '
            f"<small>{html.escape(env.platform)} ({html.escape(env.provenance)})</small></h2>"
            "<table><thead><tr><th>step</th><th>job</th><th>state</th><th>node</th><th>elapsed</th>"
            "<th>queue wait</th><th>it/s</th><th>CPU</th><th>mem</th><th>GPU use</th></tr></thead>"
            f"<tbody>{step_rows}</tbody></table>{sweeps_html}"
            "<table><thead><tr><th>node</th><th>state</th><th>GPUs allocated</th><th>GPUs</th><th>free</th>"
            "<th>GPU use</th><th>use from</th><th>what it is</th></tr></thead>"
            f"<tbody>{node_rows}</tbody></table>{estimate_html}"
            f'<p class="source">answered {html.escape(clock(env.polled_at))}; {html.escape(env.source)}</p>'
            f"{notes}</section>"
        )
    refresh = f'<meta http-equiv="refresh" content="{refresh_s:g}">' if refresh_s else ""
    title = f"Atlas monitor: {snapshot.stack}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">{refresh}<title>{html.escape(title)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: .5em 0 1em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: .25em .7em; text-align: left; }}
td[data-field$="_s"], td[data-field$="_percent"], td[data-field^="gpus"] {{ text-align: right; }}
.error {{ color: #b00; }} .note, .source {{ color: #777; font-size: 12px; }} .estimate {{ color: #036; }}
small {{ color: #777; font-weight: normal; }}
</style></head>
<body data-taken-at="{snapshot.taken_at}">
<h1>{html.escape(title)} <small>workload {html.escape(snapshot.workload)}, run {html.escape(snapshot.run_id)},
{html.escape(clock(snapshot.taken_at))}; schedulers polled every {snapshot.interval_s:g} s;
JSON at <a href="snapshot.json">snapshot.json</a></small></h1>
{"".join(sections)}
</body></html>
"""
