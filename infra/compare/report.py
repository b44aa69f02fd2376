"""Write every form of a report into one folder: report.md, report.html, report.json, PNG charts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.compare.charts import all_charts
from infra.compare.render import render_html, render_json, render_markdown
from infra.compare.report_model import Report


@dataclass(frozen=True)
class WrittenReport:
    folder: Path
    markdown: Path
    html: Path
    json: Path
    charts: tuple[Path, ...]


def write_report(report: Report, folder: Path) -> WrittenReport:
    folder.mkdir(parents=True, exist_ok=True)
    charts = all_charts(report)
    chart_paths = []
    files: dict[str, str] = {}
    for chart in charts:
        path = folder / f"{chart.name}.png"
        path.write_bytes(chart.png)
        chart_paths.append(path)
        files[chart.name] = path.name
    markdown = folder / "report.md"
    markdown.write_text(render_markdown(report, charts, files))
    page = folder / "report.html"
    page.write_text(render_html(report, charts))
    data = folder / "report.json"
    data.write_text(render_json(report))
    return WrittenReport(folder, markdown, page, data, tuple(chart_paths))
