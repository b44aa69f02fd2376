"""Load the sampler's JSONL (infra/telemetry/sampler.py) into columns, fast and in bounded memory.

A month of 5-second samples is half a million lines; `infra.telemetry.parsers` builds a frozen
dataclass per sample, which is right for tests and small files and far too slow for that. Here
lines are decoded a chunk at a time by msgspec into a typed struct that names only the fields
the comparison reads (the rest is skipped in C), and appended to typed arrays: memory is the
columns plus one chunk, whatever the file's size.
"""

from __future__ import annotations

import io
import math
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from pathlib import Path

import msgspec
import numpy as np

from infra.compare.records import CGROUP_PEAK, FloatArray, TelemetryColumns
from infra.telemetry import columns as column_file

CHUNK_BYTES = 8 << 20
PARALLEL_BYTES = 64 << 20
NEWLINE, COMMA = ord("\n"), ord(",")
NAN = math.nan


class _Cpu(msgspec.Struct, gc=False):
    measured: bool = False
    tree_percent: float | None = None
    host_percent: float | None = None
    reason: str | None = None


class _Memory(msgspec.Struct, gc=False):
    measured: bool = False
    tree_rss_bytes: float | None = None
    host_used_bytes: float | None = None
    host_total_bytes: float | None = None
    reason: str | None = None
    cgroup_peak_bytes: float | None = None
    cgroup_peak_reason: str | None = None  # the sampler writes one with every null peak


class _Device(msgspec.Struct, gc=False):
    utilization_percent: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None


class _Gpu(msgspec.Struct, gc=False):
    measured: bool = False
    devices: list[_Device] = []
    reason: str | None = None


class _Disk(msgspec.Struct, gc=False):
    measured: bool = False
    tree_read_bytes: float | None = None
    host_read_bytes: float | None = None
    reason: str | None = None


class _Record(msgspec.Struct, gc=False):
    type: str = ""
    t: float = NAN
    # Blocks default to "not measured" (a foreign record may lack one): no None checks per row.
    cpu: _Cpu = msgspec.field(default_factory=_Cpu)
    memory: _Memory = msgspec.field(default_factory=_Memory)
    gpu: _Gpu = msgspec.field(default_factory=_Gpu)
    disk: _Disk = msgspec.field(default_factory=_Disk)
    step: str | None = None
    argv: list[str] = []
    interval_s: float | None = None
    exit_code: int | None = None


_DECODE_MANY = msgspec.json.Decoder(list[_Record])
_DECODE_ONE = msgspec.json.Decoder(_Record)


def _cgroup_peak_reason(record: _Record) -> str:
    """Why a sample has no cgroup peak (the same words as infra.telemetry.parsers)."""
    if not record.memory.measured:
        return f"memory not measured: {record.memory.reason or 'absent from the sample'}"
    return record.memory.cgroup_peak_reason or "not recorded (a sampler from before cgroup peaks)"


# (name in not_measured, the column that is NaN exactly where it was not measured, the reason in that record)
BLOCK_KEYS: tuple[tuple[str, str, Callable[[_Record], str | None]], ...] = (
    ("cpu", "tree_cpu_percent", attrgetter("cpu.reason")),
    ("memory", "tree_rss_bytes", attrgetter("memory.reason")),
    ("gpu", "gpu_count", attrgetter("gpu.reason")),
    ("disk", "host_read_bytes", attrgetter("disk.reason")),
    (CGROUP_PEAK, "cgroup_peak_bytes", _cgroup_peak_reason),
)
# The report's columns: the column file's, less the line offset it keeps for itself.
COLUMNS = column_file.COLUMNS[:-1]


def _chunks(stream: io.BufferedIOBase, chunk_bytes: int, limit: int) -> Iterator[tuple[bytearray, int]]:
    """Whole lines, about `chunk_bytes` at a time, from the stream's position up to `limit` bytes.

    Each chunk is a buffer `[` + lines, and the index of its last newline: `_decode` turns it
    into one JSON array in place (newlines to commas, the last to `]`). Reading into the buffer
    that gets decoded saves the five copies that slicing, stripping and joining bytes would make.
    """
    carry = b""
    left = limit
    while True:
        want = min(chunk_bytes, left)
        buffer = bytearray(1 + len(carry) + want)
        buffer[0] = ord("[")
        buffer[1 : 1 + len(carry)] = carry
        got = stream.readinto(memoryview(buffer)[1 + len(carry) :]) if want > 0 else 0
        left -= got
        end = 1 + len(carry) + got
        if got == 0:
            if carry.strip():
                buffer[end:end] = b"\n"  # a last line without its newline (cut short, or not yet flushed)
                yield buffer, end
            return
        cut = buffer.rfind(b"\n", 0, end)
        if cut < 0:
            carry = bytes(buffer[1:end])
            continue
        carry = bytes(buffer[cut + 1 : end])
        yield buffer, cut


def _decode(buffer: bytearray, last_newline: int) -> tuple[list[_Record], int]:
    """All the chunk's records; a line that is not complete JSON (a write cut short) is counted."""
    view = np.frombuffer(buffer, dtype=np.uint8, count=last_newline)
    newlines = np.flatnonzero(view == NEWLINE)
    view[newlines] = COMMA
    buffer[last_newline] = ord("]")
    try:
        return _DECODE_MANY.decode(memoryview(buffer)[: last_newline + 1]), 0
    except msgspec.DecodeError:
        pass  # a blank or broken line somewhere: go line by line for this chunk only
    view[newlines] = NEWLINE
    records, skipped = [], 0
    for line in bytes(buffer[1:last_newline]).splitlines():
        if not line.strip():
            continue
        try:
            records.append(_DECODE_ONE.decode(line))
        except msgspec.DecodeError:
            skipped += 1
    return records, skipped


def _floats(values: list[float | None]) -> FloatArray:
    # NumPy turns None into NaN for a float array: "not measured" stays distinguishable from 0.
    return np.array(values, dtype=np.float64)


_SCALAR_FIELDS = (
    ("t", attrgetter("t")),
    ("tree_cpu_percent", attrgetter("cpu.tree_percent")),
    ("host_cpu_percent", attrgetter("cpu.host_percent")),
    ("tree_rss_bytes", attrgetter("memory.tree_rss_bytes")),
    ("host_memory_used_bytes", attrgetter("memory.host_used_bytes")),
    ("host_memory_total_bytes", attrgetter("memory.host_total_bytes")),
    ("tree_read_bytes", attrgetter("disk.tree_read_bytes")),
    ("host_read_bytes", attrgetter("disk.host_read_bytes")),
    ("cgroup_peak_bytes", attrgetter("memory.cgroup_peak_bytes")),
)
_GPU = attrgetter("gpu")
_MEASURED = attrgetter("measured")
_DEVICES = attrgetter("devices")
_DEVICE_FIELDS = (
    ("gpu_utilization_percent", attrgetter("utilization_percent")),
    ("gpu_memory_used_bytes", attrgetter("memory_used_bytes")),
    ("gpu_memory_total_bytes", attrgetter("memory_total_bytes")),
)


def _chunk_columns(samples: list[_Record]) -> dict[str, FloatArray]:
    # map(attrgetter) over the records: the cheapest way CPython has to pull one field from each.
    columns = {name: _floats(list(map(getter, samples))) for name, getter in _SCALAR_FIELDS}
    columns.update(_gpu_columns(list(map(_GPU, samples))))
    return columns


def _gpu_columns(gpus: list[_Gpu]) -> dict[str, FloatArray]:
    """Per sample: device count, mean utilization, summed memory (NaN where GPUs were not measured)."""
    measured = np.array(list(map(_MEASURED, gpus)), dtype=bool)
    device_lists = list(map(_DEVICES, gpus))
    counts = np.fromiter(map(len, device_lists), dtype=np.int64, count=len(gpus))
    result = {"gpu_count": np.where(measured, counts.astype(np.float64), NAN)}
    with_devices = measured & (counts > 0)
    for name in ("gpu_utilization_percent", "gpu_memory_used_bytes", "gpu_memory_total_bytes"):
        result[name] = np.full(len(gpus), NAN)
    if not with_devices.any():
        return result
    devices = list(chain.from_iterable(device_lists))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[with_devices]
    for name, getter in _DEVICE_FIELDS:
        totals = np.add.reduceat(_floats(list(map(getter, devices))), starts)
        result[name][with_devices] = totals / counts[with_devices] if name == "gpu_utilization_percent" else totals
    return result


@dataclass
class _Partial:
    """What one reader of a byte range found (picklable, so ranges can be read in parallel)."""

    columns: list[dict[str, FloatArray]]
    not_measured: dict[str, str]
    start: tuple[str | None, tuple[str, ...], float, float | None] | None
    end: tuple[float, int | None] | None
    skipped: int


def _read_range(path: str | None, data: bytes | None, begin: int, stop: int, chunk_bytes: int) -> _Partial:
    stream: io.BufferedIOBase = io.BytesIO(data) if data is not None else open(path or "", "rb")  # noqa: SIM115
    with stream:
        stream.seek(begin)
        partial = _Partial([], {}, None, None, 0)
        for buffer, last_newline in _chunks(stream, chunk_bytes, stop - begin):
            records, bad = _decode(buffer, last_newline)
            partial.skipped += bad
            samples = [r for r in records if r.type == "sample"]
            if len(samples) != len(records):
                for record in records:
                    if record.type == "start":
                        partial.start = (record.step, tuple(record.argv), record.t, record.interval_s)
                    elif record.type == "end":
                        partial.end = (record.t, record.exit_code)
            if not samples:
                continue
            columns = _chunk_columns(samples)
            partial.columns.append(columns)
            # A block's key column is NaN exactly where the block was not measured: find the
            # first such sample with NumPy instead of looking at every record.
            for block, key, why in BLOCK_KEYS:
                if block not in partial.not_measured:
                    missing = np.isnan(columns[key])
                    if missing.any():
                        reason = why(samples[int(missing.argmax())])
                        partial.not_measured[block] = reason or "absent from the sample"
    return partial


def _line_boundaries(path: str, size: int, parts: int) -> list[int]:
    """Offsets that split the file into `parts` ranges at line starts."""
    offsets = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            f.seek(size * k // parts)
            f.readline()
            offsets.append(max(f.tell(), offsets[-1]))
    offsets.append(size)
    return offsets


def load_sampler_jsonl(
    source_data: str | Path | bytes,
    source: str,
    chunk_bytes: int = CHUNK_BYTES,
    workers: int | None = None,
) -> TelemetryColumns:
    """The sampler's records from a file path (or its bytes) as columns; `source` names where they came from.

    A file larger than PARALLEL_BYTES is read in `workers` byte ranges by as many processes
    (default: the CPUs this process may use, at most 4); each returns arrays, not records.
    """
    if isinstance(source_data, bytes):
        partials = [_read_range(None, source_data, 0, len(source_data), chunk_bytes)]
    else:
        path = str(source_data)
        size = os.path.getsize(path)
        count = workers or min(len(os.sched_getaffinity(0)), 4)
        if size < PARALLEL_BYTES or count <= 1:
            partials = [_read_range(path, None, 0, size, chunk_bytes)]
        else:
            bounds = _line_boundaries(path, size, count)
            context = multiprocessing.get_context("fork")  # the child needs nothing but this module
            with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
                partials = list(
                    pool.map(
                        _read_range,
                        [path] * count,
                        [None] * count,
                        bounds[:-1],
                        bounds[1:],
                        [chunk_bytes] * count,
                    )
                )
    return _assemble(partials, source)


def _assemble(partials: list[_Partial], source: str) -> TelemetryColumns:
    """One TelemetryColumns from the partials of consecutive ranges, in file order."""
    not_measured: dict[str, str] = {}
    for partial in partials:
        for block, reason in partial.not_measured.items():
            not_measured.setdefault(block, reason)
    start = next((p.start for p in partials if p.start is not None), None)
    end = next((p.end for p in reversed(partials) if p.end is not None), None)
    chunks = [c for p in partials for c in p.columns]
    arrays = {
        name: np.concatenate([c[name] for c in chunks]) if chunks else np.empty(0, dtype=np.float64) for name in COLUMNS
    }
    return TelemetryColumns(
        step=start[0] if start else None,
        source=source,
        argv=start[1] if start else (),
        start_t=start[2] if start and not math.isnan(start[2]) else None,
        end_t=end[0] if end and not math.isnan(end[0]) else None,
        exit_code=end[1] if end else None,
        interval_s=start[3] if start else None,
        not_measured=tuple(sorted(not_measured.items())),
        skipped_lines=sum(p.skipped for p in partials),
        **arrays,
    )


def _line_at(path: str, offset: int) -> _Record | None:
    with open(path, "rb") as f:
        f.seek(offset)
        line = f.readline()
    try:
        return _DECODE_ONE.decode(line)
    except msgspec.DecodeError:
        return None


def _rows_from_column_file(jsonl: str, columns_file: str) -> tuple[np.ndarray, int] | None:
    """The column file's rows, and the JSONL offset where the lines after the last row begin;
    None where the file is not the sampler's or does not match the JSONL (then the JSONL is read)."""
    with open(columns_file, "rb") as f:
        parsed = column_file.read_header(f.read(4096))
        if parsed is None or parsed[0] != column_file.COLUMNS:
            return None
        rows = (f.seek(0, os.SEEK_END) - parsed[1]) // column_file.ROW_BYTES
        f.seek(parsed[1])
        data = np.fromfile(f, dtype="<f8", count=rows * len(column_file.COLUMNS))
    table = data.reshape(rows, len(column_file.COLUMNS))
    if rows == 0:
        return table, 0
    offsets = table[:, -1]
    jsonl_size = os.path.getsize(jsonl)
    if not (np.all(np.diff(offsets) > 0) and offsets[0] >= 0 and offsets[-1] < jsonl_size):
        return None
    # Rows and lines must agree: the first, the middle and the last row are checked against their lines.
    for index in sorted({0, rows // 2, rows - 1}):
        record = _line_at(jsonl, int(offsets[index]))
        if record is None or record.type != "sample" or record.t != table[index, 0]:
            return None
    with open(jsonl, "rb") as f:
        f.seek(int(offsets[-1]))
        f.readline()
        after_last = f.tell()
    return table, after_last


def load_sampler_telemetry(jsonl: str | Path, source: str, columns_file: str | Path | None = None) -> TelemetryColumns:
    """The sampler's telemetry, from its column file where one matches the JSONL, else from the JSONL.

    With a column file, the JSONL is read only before the first row (the start record) and after
    the last (samples written after it, the end record); lines behind rows are read one at a time
    where needed (the reason a block was not measured). The columns are the same either way
    (tests/unit/test_telemetry_columns.py); `skipped_lines` then counts only the lines read.
    """
    path = str(jsonl)
    if columns_file is None or not os.path.isfile(columns_file):
        return load_sampler_jsonl(path, source)
    found = _rows_from_column_file(path, str(columns_file))
    if found is None:
        return load_sampler_jsonl(path, source)
    table, after_last = found
    if table.shape[0] == 0:
        return load_sampler_jsonl(path, source)
    size = os.path.getsize(path)
    head = _read_range(path, None, 0, int(table[0, -1]), CHUNK_BYTES)
    tail = _read_range(path, None, after_last, size, CHUNK_BYTES)
    middle = _Partial([{name: table[:, i] for i, name in enumerate(column_file.COLUMNS[:-1])}], {}, None, None, 0)
    for block, key, why in BLOCK_KEYS:
        missing = np.isnan(middle.columns[0][key])
        if missing.any():
            record = _line_at(path, int(table[int(missing.argmax()), -1]))
            reason = why(record) if record is not None else None
            middle.not_measured[block] = reason or "absent from the sample"
    return _assemble([head, middle, tail], source)
