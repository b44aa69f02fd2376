"""The sampler's column file: rows equal to what the JSONL reader computes, checked against their lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra.compare import telemetry
from infra.compare.records import TelemetryColumns
from infra.telemetry import columns as column_file
from infra.telemetry.columns import ColumnWriter, columns_path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
RECORDED = DATA / "compare" / "lsf_telemetry_train.jsonl"


def write_with_rows(jsonl: Path, records: list[dict[str, Any]], rows_for: int | None = None) -> Path:
    """The JSONL and its column file as the sampler writes them; rows only for the first `rows_for` samples."""
    columns = Path(columns_path(str(jsonl)))
    writer = ColumnWriter.open(str(columns), 0)
    offset, samples = 0, 0
    with jsonl.open("w") as out:
        for record in records:
            line = json.dumps(record, separators=(",", ":")) + "\n"
            out.write(line)
            if record.get("type") == "sample" and (rows_for is None or samples < rows_for):
                writer.append(record, offset)
                samples += 1
            offset += len(line)
    writer.close()
    return columns


def assert_same(a: TelemetryColumns, b: TelemetryColumns) -> None:
    for name in telemetry.COLUMNS:
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    for field in ("step", "argv", "start_t", "end_t", "exit_code", "interval_s", "not_measured"):
        assert getattr(a, field) == getattr(b, field), field


def h200_records(copies: int) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (DATA / "sampler_h200.jsonl").read_text().splitlines()]
    start, samples, end = lines[0], [r for r in lines if r["type"] == "sample"], lines[-1]
    out = [start]
    for k in range(copies):
        for i, sample in enumerate(samples):
            out.append({**sample, "t": sample["t"] + 1000 * k + i * 0.001})
    return [*out, end]


@pytest.mark.parametrize(
    "records",
    [
        [json.loads(line) for line in RECORDED.read_text().splitlines()],  # CPU only: GPU not measured
        h200_records(5),  # one H200, every block measured
    ],
    ids=["login-node-no-gpu", "h200"],
)
def test_rows_load_to_the_same_columns_as_the_jsonl(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    jsonl = tmp_path / "train.jsonl"
    columns = write_with_rows(jsonl, records)
    assert columns.stat().st_size > 0
    fast = telemetry.load_sampler_telemetry(jsonl, "x", columns)
    assert_same(fast, telemetry.load_sampler_jsonl(jsonl, "x"))
    assert fast.rows == sum(r["type"] == "sample" for r in records)


def test_lines_after_the_last_row_come_from_the_jsonl(tmp_path: Path) -> None:
    # The sampler died between a line and its row, and lines came after: they are read from the JSONL.
    jsonl = tmp_path / "train.jsonl"
    records = h200_records(3)
    columns = write_with_rows(jsonl, records, rows_for=10)
    fast = telemetry.load_sampler_telemetry(jsonl, "x", columns)
    assert fast.rows == sum(r["type"] == "sample" for r in records) > 10
    assert_same(fast, telemetry.load_sampler_jsonl(jsonl, "x"))


def test_a_block_not_measured_in_the_rows_gets_the_reason_from_its_line(tmp_path: Path) -> None:
    records = h200_records(2)
    records[7] = {**records[7], "gpu": {"measured": False, "reason": "NVML: driver reloaded"}}
    jsonl = tmp_path / "train.jsonl"
    fast = telemetry.load_sampler_telemetry(jsonl, "x", write_with_rows(jsonl, records))
    assert dict(fast.not_measured)["gpu"] == "NVML: driver reloaded"
    assert np.isnan(fast.gpu_utilization_percent[6]) and not np.isnan(fast.gpu_utilization_percent[5])


def test_a_column_file_of_another_jsonl_is_not_trusted(tmp_path: Path) -> None:
    jsonl = tmp_path / "train.jsonl"
    columns = write_with_rows(jsonl, h200_records(2))
    other = h200_records(2)
    for record in other:
        record["t"] = record.get("t", 0) + 7.0  # same shape, other times: rows no longer match lines
    write_with_rows(tmp_path / "other.jsonl", other)
    jsonl.write_text((tmp_path / "other.jsonl").read_text())
    fast = telemetry.load_sampler_telemetry(jsonl, "x", columns)
    assert_same(fast, telemetry.load_sampler_jsonl(jsonl, "x"))
    assert fast.t[0] == other[1]["t"]


def test_a_row_cut_short_is_ignored_and_the_writer_realigns(tmp_path: Path) -> None:
    jsonl = tmp_path / "train.jsonl"
    records = h200_records(1)
    columns = write_with_rows(jsonl, records)
    with columns.open("ab") as f:
        f.write(b"\x00" * (column_file.ROW_BYTES // 2))  # a crash mid-row
    assert telemetry.load_sampler_telemetry(jsonl, "x", columns).rows == len(records) - 2
    # Appending to the same JSONL: the half row is dropped first, so new rows stay aligned.
    size = jsonl.stat().st_size
    extra = {**records[1], "t": records[1]["t"] + 99}
    line = json.dumps(extra, separators=(",", ":")) + "\n"
    with jsonl.open("a") as out:
        out.write(line)
    writer = ColumnWriter.open(str(columns), size)
    writer.append(extra, size)
    writer.close()
    assert (columns.stat().st_size - len(column_file.header())) % column_file.ROW_BYTES == 0
    fast = telemetry.load_sampler_telemetry(jsonl, "x", columns)
    assert fast.rows == len(records) - 1 and fast.t[-1] == extra["t"]


def test_a_fresh_jsonl_starts_a_fresh_column_file(tmp_path: Path) -> None:
    jsonl = tmp_path / "train.jsonl"
    columns = write_with_rows(jsonl, h200_records(3))
    os.replace(jsonl, tmp_path / "train.jsonl.1700000000")  # the job script's `mv` before a rerun
    ColumnWriter.open(str(columns), 0).close()
    assert columns.read_bytes() == column_file.header()


def test_the_live_sampler_writes_rows_that_match_its_lines(tmp_path: Path) -> None:
    out = tmp_path / "telemetry" / "train.jsonl"
    subprocess.run(
        [sys.executable, "-m", "infra.telemetry.sampler", "--out", str(out), "--interval", "0.1", "--step", "train",
         "--", sys.executable, "-c", "import time; time.sleep(1.2)"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True,
    )
    columns = out.with_suffix(".columns")
    found = telemetry._rows_from_column_file(str(out), str(columns))
    assert found is not None and found[0].shape[0] >= 5
    fast = telemetry.load_sampler_telemetry(out, "x", columns)
    assert_same(fast, telemetry.load_sampler_jsonl(out, "x"))
    assert fast.exit_code == 0 and fast.step == "train"
