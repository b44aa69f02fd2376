"""The sampler's JSONL records (infra/telemetry/sampler.py) decoded into columns. Pure: bytes in,
NumPy arrays out; `infra.compare.telemetry` reads the files, a chunk or a byte range at a time.

Lines are decoded a chunk at a time by msgspec into a typed struct that names only the fields
the comparison reads (the rest is skipped in C), and appended to typed arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import msgspec
import numpy as np

from infra.compare.records import CGROUP_PEAK, FloatArray, TelemetryColumns
from infra.telemetry import columns as column_file
from infra.telemetry.procfs import judge_memory_cgroup

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


class _MemoryCgroup(msgspec.Struct, gc=False):
    """The start record's memory cgroup: which, and whether the sampler judged it the step's own."""

    version: int | None = None
    cgroup: str | None = None
    own: bool | None = None  # None: a sampler from before the check
    reason: str | None = None  # why not the step's own (or why no peak could be read)
    why: str | None = None  # why it is the step's own


class Record(msgspec.Struct, gc=False):
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
    memory_cgroup: _MemoryCgroup | None = None


_DECODE_MANY = msgspec.json.Decoder(list[Record])
DECODE_ONE = msgspec.json.Decoder(Record)


def _cgroup_peak_reason(record: Record) -> str:
    """Why a sample has no cgroup peak (the same words as infra.telemetry.parsers.sampler_jsonl)."""
    if not record.memory.measured:
        return f"memory not measured: {record.memory.reason or 'absent from the sample'}"
    return record.memory.cgroup_peak_reason or "not recorded (a sampler from before cgroup peaks)"


# (name in not_measured, the column that is NaN exactly where it was not measured, the reason in that record)
BLOCK_KEYS: tuple[tuple[str, str, Callable[[Record], str | None]], ...] = (
    ("cpu", "tree_cpu_percent", attrgetter("cpu.reason")),
    ("memory", "tree_rss_bytes", attrgetter("memory.reason")),
    ("gpu", "gpu_count", attrgetter("gpu.reason")),
    ("disk", "host_read_bytes", attrgetter("disk.reason")),
    (CGROUP_PEAK, "cgroup_peak_bytes", _cgroup_peak_reason),
)
# The report's columns: the column file's, less the line offset it keeps for itself.
COLUMNS = column_file.COLUMNS[:-1]


def decode_chunk(buffer: bytearray, last_newline: int) -> tuple[list[Record], int]:
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
            records.append(DECODE_ONE.decode(line))
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


def _chunk_columns(samples: list[Record]) -> dict[str, FloatArray]:
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
class Partial:
    """What one reader of a byte range found (picklable, so ranges can be read in parallel)."""

    columns: list[dict[str, FloatArray]]
    not_measured: dict[str, str]
    start: tuple[str | None, tuple[str, ...], float, float | None] | None
    end: tuple[float, int | None] | None
    skipped: int
    # The start record's memory cgroup judged (see judge_start_cgroup): (the step's own?, why); None: none named.
    cgroup_verdict: tuple[bool, str] | None = None


def judge_start_cgroup(block: _MemoryCgroup | None) -> tuple[bool, str] | None:
    """Whether the start record's memory cgroup is the step's own, and why; None where it names none.
    The sampler's verdict where it recorded one; for a sampler from before that check, the same rule
    (infra.telemetry.procfs.judge_memory_cgroup) on the cgroup's path alone, so an old record of a
    cgroup shared with slurmd or a session does not pass its peak off as the step's."""
    if block is None or block.cgroup is None:
        return None
    if block.own is not None:
        return block.own, (block.why if block.own else block.reason) or f"v{block.version} cgroup {block.cgroup}"
    verdict = judge_memory_cgroup(block.version or 0, block.cgroup, None)
    judged = "judged from the cgroup's path: a sampler from before that check recorded no verdict"
    return verdict.own, f"{verdict.reason} ({judged})"


def add_chunk(partial: Partial, buffer: bytearray, last_newline: int) -> None:
    """Decode one chunk of whole lines (see `decode_chunk`) into `partial`: its samples as
    columns, its start and end records, the first reason each block was not measured."""
    records, bad = decode_chunk(buffer, last_newline)
    partial.skipped += bad
    samples = [r for r in records if r.type == "sample"]
    if len(samples) != len(records):
        for record in records:
            if record.type == "start":
                partial.start = (record.step, tuple(record.argv), record.t, record.interval_s)
                partial.cgroup_verdict = judge_start_cgroup(record.memory_cgroup)
            elif record.type == "end":
                partial.end = (record.t, record.exit_code)
    if not samples:
        return
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


def assemble(partials: list[Partial], source: str) -> TelemetryColumns:
    """One TelemetryColumns from the partials of consecutive ranges, in file order."""
    not_measured: dict[str, str] = {}
    for partial in partials:
        for block, reason in partial.not_measured.items():
            not_measured.setdefault(block, reason)
    start_partial = next((p for p in partials if p.start is not None), None)
    start = start_partial.start if start_partial is not None else None
    end = next((p.end for p in reversed(partials) if p.end is not None), None)
    chunks = [c for p in partials for c in p.columns]
    arrays = {
        name: np.concatenate([c[name] for c in chunks]) if chunks else np.empty(0, dtype=np.float64) for name in COLUMNS
    }
    verdict = start_partial.cgroup_verdict if start_partial is not None else None
    if verdict is not None and not verdict[0]:
        # The peaks are a cgroup's the step shares (recorded by a sampler before the check): not the step's.
        arrays["cgroup_peak_bytes"] = np.full(arrays["cgroup_peak_bytes"].size, NAN)
        not_measured[CGROUP_PEAK] = verdict[1]
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
        memory_cgroup_why=verdict[1] if verdict is not None and verdict[0] else "",
        **arrays,
    )
