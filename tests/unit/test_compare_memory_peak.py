"""The report's memory peak: the cgroup's where the sampler recorded one, else the RSS sum, saying which."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from infra.compare import cost_files, metrics, performance, render, telemetry
from infra.compare.records import CGROUP_PEAK
from infra.telemetry.columns import ColumnWriter, columns_path
from tests.unit.test_compare import hpc_records, kube_records

DATA = Path(__file__).parent / "data"
MIB = 1 << 20


@pytest.mark.parametrize(
    ("recording", "value", "basis", "why"),
    [
        # 4 forked children sharing the parent's 200 MiB: RSS sum 1,036 MiB, the cgroup 219 MiB.
        ("sampler_cgroup_v1.jsonl", 229707776, performance.CGROUP_BASIS, None),
        # A sampler from before cgroup peaks: the RSS sum, and why.
        ("sampler_h200.jsonl", None, performance.RSS_BASIS, "not recorded (a sampler from before cgroup peaks)"),
        ("compare/lsf_telemetry_train.jsonl", 56664064, performance.RSS_BASIS, "not recorded"),
    ],
)
def test_memory_peak_prefers_the_cgroup_and_says_which(
    recording: str, value: int | None, basis: str, why: str | None
) -> None:
    columns = telemetry.load_sampler_jsonl(DATA / recording, "recorded")
    peak, said = performance.memory_peak(columns)
    assert said.startswith(basis) and peak.note.startswith(basis)
    expected = value if value is not None else float(np.nanmax(columns.tree_rss_bytes))
    assert peak.value == expected and peak.unit == "bytes" and peak.source == "recorded"
    if why is None:
        assert CGROUP_PEAK not in dict(columns.not_measured)
        assert peak.value is not None and peak.value < np.nanmax(columns.tree_rss_bytes) / 4
    else:
        assert why in dict(columns.not_measured)[CGROUP_PEAK] and why in said


def test_a_peak_the_sampler_could_not_read_keeps_its_reason_through_the_column_file(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in (DATA / "sampler_cgroup_v1.jsonl").read_text().splitlines()]
    reason = "/sys/fs/cgroup/job/memory.peak absent (a kernel before 5.19)"
    for record in lines[1:3]:
        record["memory"] = {**record["memory"], "cgroup_peak_bytes": None, "cgroup_peak_reason": reason}
    jsonl = tmp_path / "train.jsonl"
    writer = ColumnWriter.open(columns_path(str(jsonl)), 0)
    offset = 0
    with jsonl.open("w") as out:
        for record in lines:
            line = json.dumps(record, separators=(",", ":")) + "\n"
            out.write(line)
            if record["type"] == "sample":
                writer.append(record, offset)
            offset += len(line)
    writer.close()
    fast = telemetry.load_sampler_telemetry(jsonl, "x", columns_path(str(jsonl)))
    assert dict(fast.not_measured)[CGROUP_PEAK] == reason
    assert math.isnan(fast.cgroup_peak_bytes[0]) and fast.cgroup_peak_bytes[2] == 229707776
    peak, basis = performance.memory_peak(fast)
    assert peak.value == 229707776 and basis == performance.CGROUP_BASIS  # the samples that have one


def test_nothing_recorded_is_not_measured_never_zero() -> None:
    columns = telemetry.load_sampler_jsonl(
        b'{"type":"sample","t":1.0,"memory":{"measured":false,"reason":"PermissionError: /proc/1/stat"}}\n', "x"
    )
    peak, basis = performance.memory_peak(columns)
    assert peak.value is None and peak.kind == "not-measured"
    assert basis == "not measured: PermissionError: /proc/1/stat"


def test_the_report_shows_the_peak_and_what_it_was_read_from(tmp_path: Path) -> None:
    report = metrics.build_report(
        [kube_records(), hpc_records(tmp_path)], cost_files.load_cost_profiles(), cost_files.load_rate_table(), {}
    )
    markdown = render.render_markdown(report, (), {})
    row = next(line for line in markdown.splitlines() if line.startswith("|   read from |"))
    assert "RSS sum of the step's processes" in row and "no cgroup peak: not recorded" in row
    peak = next(line for line in markdown.splitlines() if line.startswith("| memory, the step (peak) |"))
    assert "54 MiB [" in peak  # the larger of the two samples, 56,664,064 bytes
