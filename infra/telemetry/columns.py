"""The sampler's binary column file: one fixed-width row per sample, beside the JSONL.

The JSONL stays the record (readable, self-describing, the reference for tests). Decoding a
month of it (a million 700-byte lines) costs seconds; this file holds the few numbers the
comparison reads, 8 bytes each, so the same million samples load in one read. Each row also
carries the byte offset of its line in the JSONL: a reader checks rows against their lines,
finds the line behind any row (e.g. the reason a block was not measured), and reads any lines
written after the last row from the JSONL itself. Stdlib only: it runs wherever the sampler does.

Layout: b"ATLASCOL", uint32 version, uint32 n = length of the JSON header, the header
({"columns": [...]}, space-padded so rows start 8-byte aligned), then rows of float64,
little-endian, in the header's column order. NaN: not measured.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any, BinaryIO

MAGIC = b"ATLASCOL"
VERSION = 1
SUFFIX = ".columns"
NAN = math.nan

# The comparison's columns (infra/compare/records.py TelemetryColumns), then the line's offset.
COLUMNS = (
    "t",
    "tree_cpu_percent",
    "host_cpu_percent",
    "tree_rss_bytes",
    "host_memory_used_bytes",
    "host_memory_total_bytes",
    "gpu_count",
    "gpu_utilization_percent",
    "gpu_memory_used_bytes",
    "gpu_memory_total_bytes",
    "tree_read_bytes",
    "host_read_bytes",
    "cgroup_peak_bytes",
    "jsonl_offset",
)
_ROW = struct.Struct("<" + "d" * len(COLUMNS))
ROW_BYTES = _ROW.size


def columns_path(jsonl_path: str) -> str:
    """`telemetry/train.jsonl` -> `telemetry/train.columns`."""
    stem = jsonl_path[: -len(".jsonl")] if jsonl_path.endswith(".jsonl") else jsonl_path
    return stem + SUFFIX


def header() -> bytes:
    body = json.dumps({"columns": list(COLUMNS)}).encode()
    fixed = len(MAGIC) + 8
    body += b" " * (-(fixed + len(body)) % 8)
    return MAGIC + struct.pack("<II", VERSION, len(body)) + body


def read_header(prefix: bytes) -> tuple[tuple[str, ...], int] | None:
    """(column names, offset of the first row) from the file's first bytes, or None if not ours."""
    fixed = len(MAGIC) + 8
    if len(prefix) < fixed or not prefix.startswith(MAGIC):
        return None
    version, length = struct.unpack_from("<II", prefix, len(MAGIC))
    if version != VERSION or len(prefix) < fixed + length:
        return None
    try:
        names = json.loads(prefix[fixed : fixed + length])["columns"]
    except (ValueError, KeyError, TypeError):
        return None
    return tuple(str(n) for n in names), fixed + length


def _number(block: Any, field: str) -> float:
    value = block.get(field) if isinstance(block, Mapping) else None
    # A tuple, not `int | float`: the sampler runs under Python 3.8 too.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return NAN
    return float(value)


def sample_row(record: Mapping[str, Any], jsonl_offset: int) -> tuple[float, ...]:
    """The row for one sample record: what the JSONL reader computes from the same line."""
    cpu, memory, disk = record.get("cpu"), record.get("memory"), record.get("disk")
    gpu = record.get("gpu") if isinstance(record.get("gpu"), Mapping) else {}
    assert isinstance(gpu, Mapping)
    devices = gpu.get("devices") or []
    if not gpu.get("measured") or not isinstance(devices, list):
        count = utilization = used = total = NAN
    else:
        count = float(len(devices))
        if devices:
            utilization = sum(_number(d, "utilization_percent") for d in devices) / len(devices)
            used = sum(_number(d, "memory_used_bytes") for d in devices)
            total = sum(_number(d, "memory_total_bytes") for d in devices)
        else:
            utilization = used = total = NAN
    return (
        _number(record, "t"),
        _number(cpu, "tree_percent"),
        _number(cpu, "host_percent"),
        _number(memory, "tree_rss_bytes"),
        _number(memory, "host_used_bytes"),
        _number(memory, "host_total_bytes"),
        count,
        utilization,
        used,
        total,
        _number(disk, "tree_read_bytes"),
        _number(disk, "host_read_bytes"),
        _number(memory, "cgroup_peak_bytes"),
        float(jsonl_offset),
    )


class ColumnWriter:
    """Appends one row per sample; a row is one write() of ROW_BYTES, so a reader sees whole rows
    (a row cut short by a crash is ignored: readers take size // ROW_BYTES rows)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    @classmethod
    def open(cls, path: str, jsonl_size: int) -> ColumnWriter:
        """The column file for a JSONL of `jsonl_size` bytes, ready to append.

        A fresh JSONL gets a fresh column file (one left from a run whose JSONL was moved aside
        must not index the new one); a JSONL appended to keeps its rows, less any cut-short row,
        so new rows stay aligned. A file of another version starts over: its samples are still
        in the JSONL, which readers use for whatever lies before the first row.
        """
        out = open(path, "r+b" if jsonl_size > 0 else "w+b")  # noqa: SIM115 (owned by the writer)
        try:
            parsed = read_header(out.read(4096))
            if parsed is None or parsed[0] != COLUMNS:
                out.seek(0)
                out.truncate()
                out.write(header())
            else:
                size = out.seek(0, 2)
                rows_end = parsed[1] + (size - parsed[1]) // ROW_BYTES * ROW_BYTES
                out.truncate(rows_end)
                out.seek(rows_end)
        except OSError:
            out.close()
            raise
        return cls(out)

    def append(self, record: Mapping[str, Any], jsonl_offset: int) -> None:
        self.out.write(_ROW.pack(*sample_row(record, jsonl_offset)))
        self.out.flush()

    def close(self) -> None:
        self.out.close()
