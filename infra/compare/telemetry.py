"""Load the sampler's JSONL (infra/telemetry/sampler.py) into columns, fast and in bounded memory.

A month of 5-second samples is half a million lines; `infra.telemetry.parsers.sampler_jsonl`
builds a frozen dataclass per sample, which is right for tests and small files and far too slow
for that. Here the file is read a chunk at a time (large files in byte ranges, by several
processes) and each chunk decoded into typed arrays by `infra.compare.sampler_decode`: memory is
the columns plus one chunk, whatever the file's size.
"""

from __future__ import annotations

import io
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import msgspec
import numpy as np

from infra.compare.records import TelemetryColumns
from infra.compare.sampler_decode import BLOCK_KEYS, COLUMNS, DECODE_ONE, Partial, Record, add_chunk, assemble
from infra.telemetry import columns as column_file

CHUNK_BYTES = 8 << 20
PARALLEL_BYTES = 64 << 20


def _chunks(stream: io.BufferedIOBase, chunk_bytes: int, limit: int) -> Iterator[tuple[bytearray, int]]:
    """Whole lines, about `chunk_bytes` at a time, from the stream's position up to `limit` bytes.

    Each chunk is a buffer `[` + lines, and the index of its last newline: `decode_chunk` turns it
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


def _read_range(path: str | None, data: bytes | None, begin: int, stop: int, chunk_bytes: int) -> Partial:
    stream: io.BufferedIOBase = io.BytesIO(data) if data is not None else open(path or "", "rb")  # noqa: SIM115
    with stream:
        stream.seek(begin)
        partial = Partial([], {}, None, None, 0)
        for buffer, last_newline in _chunks(stream, chunk_bytes, stop - begin):
            add_chunk(partial, buffer, last_newline)
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
    return assemble(partials, source)


def _line_at(path: str, offset: int) -> Record | None:
    with open(path, "rb") as f:
        f.seek(offset)
        line = f.readline()
    try:
        return DECODE_ONE.decode(line)
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
    middle = Partial([{name: table[:, i] for i, name in enumerate(COLUMNS)}], {}, None, None, 0)
    for block, key, why in BLOCK_KEYS:
        missing = np.isnan(middle.columns[0][key])
        if missing.any():
            record = _line_at(path, int(table[int(missing.argmax()), -1]))
            reason = why(record) if record is not None else None
            middle.not_measured[block] = reason or "absent from the sample"
    return assemble([head, middle, tail], source)
