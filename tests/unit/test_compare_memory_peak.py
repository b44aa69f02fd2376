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


NO_OWN_CGROUP = "the step has no cgroup of its own on this site: Slurm job 2600005 runs in slurmd's v1 cgroup"
JOB_CGROUP = "v1 cgroup /slurm_vm/uid_1001/job_2600003/step_batch/task_0 is Slurm job 2600003's own"


@pytest.mark.parametrize(
    ("recording", "value", "basis", "why"),
    [
        # A real local Slurm job with task/cgroup: 4 forked children sharing the parent's 200 MiB,
        # RSS sum 1,028 MiB, the job's own cgroup 217 MiB.
        ("sampler_slurm_job_cgroup_v1.jsonl", 227053568, performance.CGROUP_BASIS, None),
        # The same job without task/cgroup: it stays in slurmd's cgroup, so the RSS sum, and why.
        ("sampler_slurm_no_cgroup_v1.jsonl", None, performance.RSS_BASIS, NO_OWN_CGROUP),
        # A sampler from before the ownership check recorded this cgroup's peaks: judged from its path
        # (a cgroup made by hand for the recording, of no job's or pod's layout), they are dropped.
        (
            "sampler_cgroup_v1.jsonl",
            None,
            performance.RSS_BASIS,
            "the step has no cgroup of its own: v1 cgroup /atlas-record-22244 is a path that names no job or pod "
            "(judged from the cgroup's path: a sampler from before that check recorded no verdict)",
        ),
        # A sampler from before cgroup peaks: the RSS sum, and why.
        ("sampler_h200.jsonl", None, performance.RSS_BASIS, "not recorded (a sampler from before cgroup peaks)"),
        ("compare/lsf_telemetry_train.jsonl", 56664064, performance.RSS_BASIS, "not recorded"),
    ],
)
def test_memory_peak_prefers_the_step_s_own_cgroup_and_says_which(
    recording: str, value: int | None, basis: str, why: str | None
) -> None:
    columns = telemetry.load_sampler_jsonl(DATA / recording, "recorded")
    peak, said = performance.memory_peak(columns)
    assert said.startswith(basis) and peak.note.startswith(basis)
    expected = value if value is not None else float(np.nanmax(columns.tree_rss_bytes))
    assert peak.value == expected and peak.unit == "bytes" and peak.source == "recorded"
    if why is None:
        assert CGROUP_PEAK not in dict(columns.not_measured)
        assert said == f"{basis}: {JOB_CGROUP}"  # whose cgroup it is
        assert peak.value is not None and peak.value < np.nanmax(columns.tree_rss_bytes) / 4
    else:
        assert why in dict(columns.not_measured)[CGROUP_PEAK] and why in said
        assert np.isnan(columns.cgroup_peak_bytes).all()


def test_an_old_record_of_a_job_s_own_cgroup_keeps_its_peak() -> None:
    """The path rule lets through what a sampler from before the check recorded in a job's cgroup."""
    lines = (DATA / "sampler_cgroup_v1.jsonl").read_text().replace("/atlas-record-22244", "/slurm/uid_0/job_9/step_0")
    columns = telemetry.load_sampler_jsonl(lines.encode(), "x")
    peak, basis = performance.memory_peak(columns)
    judged = "(judged from the cgroup's path: a sampler from before that check recorded no verdict)"
    expected = f"{performance.CGROUP_BASIS}: v1 cgroup /slurm/uid_0/job_9/step_0 is Slurm job 9's own {judged}"
    assert (peak.value, basis) == (229707776, expected)


def _with_column_file(tmp_path: Path, lines: list[dict]) -> Path:  # type: ignore[type-arg]
    """The records as the sampler writes them: the JSONL and its column file."""
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
    return jsonl


def test_a_peak_the_sampler_could_not_read_keeps_its_reason_through_the_column_file(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in (DATA / "sampler_slurm_job_cgroup_v1.jsonl").read_text().splitlines()]
    reason = "/sys/fs/cgroup/job/memory.peak absent (a kernel before 5.19)"
    for record in lines[1:3]:
        record["memory"] = {**record["memory"], "cgroup_peak_bytes": None, "cgroup_peak_reason": reason}
    jsonl = _with_column_file(tmp_path, lines)
    fast = telemetry.load_sampler_telemetry(jsonl, "x", columns_path(str(jsonl)))
    assert dict(fast.not_measured)[CGROUP_PEAK] == reason
    assert math.isnan(fast.cgroup_peak_bytes[0]) and fast.cgroup_peak_bytes[2] == 227053568
    peak, basis = performance.memory_peak(fast)
    assert peak.value == 227053568 and basis == f"{performance.CGROUP_BASIS}: {JOB_CGROUP}"  # the samples with one


def test_an_old_record_s_shared_peaks_are_dropped_through_the_column_file_too(tmp_path: Path) -> None:
    """The column file holds the old sampler's peaks; the start record's cgroup, judged, drops them."""
    lines = [json.loads(line) for line in (DATA / "sampler_cgroup_v1.jsonl").read_text().splitlines()]
    jsonl = _with_column_file(tmp_path, lines)
    fast = telemetry.load_sampler_telemetry(jsonl, "x", columns_path(str(jsonl)))
    assert fast.rows == 3 and np.isnan(fast.cgroup_peak_bytes).all()
    assert "v1 cgroup /atlas-record-22244 is a path that names no job or pod" in dict(fast.not_measured)[CGROUP_PEAK]
    peak, basis = performance.memory_peak(fast)
    assert peak.value == float(np.nanmax(fast.tree_rss_bytes)) and basis.startswith(performance.RSS_BASIS)


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
