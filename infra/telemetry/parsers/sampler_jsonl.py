"""The sampler's JSONL (infra/telemetry/sampler.py) read into samples: start, sample, signal and end records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str | None
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True)
class SamplerSample:
    t: float
    tree_cpu_percent: float | None  # of one core
    host_cpu_percent: float | None  # of all cores
    tree_rss_bytes: int | None
    host_memory_used_bytes: int | None
    host_memory_total_bytes: int | None
    gpus: tuple[GpuDevice, ...] | None  # None: not measured (see gpu_reason)
    gpu_reason: str | None
    disk_read_bytes: int | None  # host, cumulative
    disk_write_bytes: int | None
    network_rx_bytes: int | None  # cumulative
    network_tx_bytes: int | None
    sampler_cpu_s: float | None
    not_measured: tuple[tuple[str, str], ...]  # (block, reason) for every block not measured
    # The memory cgroup's high-water mark (v1 memory.max_usage_in_bytes, v2 memory.peak): every
    # page charged to the step's cgroup counted once, where the RSS sum counts shared pages per process.
    cgroup_peak_bytes: int | None = None
    cgroup_peak_reason: str | None = None  # why cgroup_peak_bytes is None


@dataclass(frozen=True)
class SamplerRun:
    step: str | None
    argv: tuple[str, ...]
    start_t: float | None
    interval_s: float | None
    samples: tuple[SamplerSample, ...]
    signals: tuple[tuple[float, str], ...]
    exit_code: int | None  # None: no end record (the sampler was killed, or still runs)
    end_t: float | None
    skipped_lines: int  # lines that were not complete JSON (a write cut short by a kill)
    memory_cgroup: str | None = None  # "v1 /kubepods/...", the cgroup the peaks are of; None: see reason
    memory_cgroup_reason: str | None = None
    cgroup_peak_at_start_bytes: int | None = None  # before the step's command started
    # Whether the sampler judged the cgroup the step's own (procfs.judge_memory_cgroup); None: a
    # sampler from before that check recorded no verdict.
    memory_cgroup_own: bool | None = None
    # The start record's memory_figure: "cgroup_peak" or "tree_rss", and why; None: not recorded.
    memory_source: str | None = None
    memory_source_why: str | None = None


def _block(record: dict[str, Any], name: str) -> dict[str, Any] | None:
    block = record.get(name)
    if not isinstance(block, dict) or not block.get("measured", False):
        return None
    return block


def _reason(record: dict[str, Any], name: str) -> str | None:
    block = record.get(name)
    if isinstance(block, dict) and not block.get("measured", False):
        return str(block.get("reason", "not measured"))
    return None if isinstance(block, dict) else "absent"


def _parse_sample(record: dict[str, Any]) -> SamplerSample:
    cpu, memory = _block(record, "cpu"), _block(record, "memory")
    gpu, disk, network = _block(record, "gpu"), _block(record, "disk"), _block(record, "network")
    gpus = None
    if gpu is not None:
        gpus = tuple(
            GpuDevice(
                index=int(d["index"]),
                name=d.get("name"),
                utilization_percent=d.get("utilization_percent"),
                memory_used_bytes=d.get("memory_used_bytes"),
                memory_total_bytes=d.get("memory_total_bytes"),
            )
            for d in gpu.get("devices", [])
        )
    missing = tuple(
        (name, reason)
        for name in ("cpu", "memory", "gpu", "disk", "network")
        if (reason := _reason(record, name)) is not None
    )
    sampler = record.get("sampler") or {}
    peak, peak_reason = _cgroup_peak(memory, _reason(record, "memory"))
    return SamplerSample(
        t=float(record["t"]),
        tree_cpu_percent=cpu.get("tree_percent") if cpu else None,
        host_cpu_percent=cpu.get("host_percent") if cpu else None,
        tree_rss_bytes=memory.get("tree_rss_bytes") if memory else None,
        host_memory_used_bytes=memory.get("host_used_bytes") if memory else None,
        host_memory_total_bytes=memory.get("host_total_bytes") if memory else None,
        gpus=gpus,
        gpu_reason=_reason(record, "gpu"),
        disk_read_bytes=disk.get("host_read_bytes") if disk else None,
        disk_write_bytes=disk.get("host_write_bytes") if disk else None,
        network_rx_bytes=network.get("rx_bytes") if network else None,
        network_tx_bytes=network.get("tx_bytes") if network else None,
        sampler_cpu_s=sampler.get("cpu_s"),
        not_measured=missing,
        cgroup_peak_bytes=peak,
        cgroup_peak_reason=peak_reason,
    )


def _cgroup_peak(memory: dict[str, Any] | None, memory_reason: str | None) -> tuple[int | None, str | None]:
    """(peak, None) or (None, why): the block not measured, a sampler from before cgroup peaks, or its reason."""
    if memory is None:
        return None, f"memory not measured: {memory_reason}"
    if "cgroup_peak_bytes" not in memory:
        return None, "not recorded (a sampler from before cgroup peaks)"
    peak = memory["cgroup_peak_bytes"]
    if isinstance(peak, bool) or not isinstance(peak, int):
        return None, str(memory.get("cgroup_peak_reason", "not measured"))
    return peak, None


def _memory_cgroup(start: dict[str, Any]) -> tuple[str | None, str | None, int | None, bool | None]:
    """(which cgroup, why none or why not the step's, its peak before the step, whether it is the
    step's own) from the start record."""
    block = start.get("memory_cgroup")
    if not isinstance(block, dict):
        return None, "not recorded (a sampler from before cgroup peaks)" if start else "no start record", None, None
    own = block.get("own")
    own = own if isinstance(own, bool) else None
    if "cgroup" not in block:
        return None, str(block.get("reason", "not measured")), None, own
    name = f"v{block.get('version')} {block['cgroup']}"
    at_start = block.get("peak_at_start_bytes")
    return name, block.get("reason"), at_start if isinstance(at_start, int) else None, own


def _memory_figure(start: dict[str, Any]) -> tuple[str | None, str | None]:
    block = start.get("memory_figure")
    if not isinstance(block, dict):
        return None, None
    return str(block.get("source")), str(block.get("why", ""))


def parse_sampler_jsonl(text: str) -> SamplerRun:
    """The sampler's records; a last line cut short by a kill is skipped and counted."""
    start: dict[str, Any] = {}
    end: dict[str, Any] = {}
    samples: list[SamplerSample] = []
    signals: list[tuple[float, str]] = []
    skipped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        kind = record.get("type")
        if kind == "start":
            start = record
        elif kind == "sample":
            samples.append(_parse_sample(record))
        elif kind == "signal":
            signals.append((float(record["t"]), str(record["signal"])))
        elif kind == "end":
            end = record
    cgroup, cgroup_reason, peak_at_start, own = _memory_cgroup(start)
    source, source_why = _memory_figure(start)
    return SamplerRun(
        step=start.get("step"),
        argv=tuple(start.get("argv", ())),
        start_t=start.get("t"),
        interval_s=start.get("interval_s"),
        samples=tuple(samples),
        signals=tuple(signals),
        exit_code=end.get("exit_code"),
        end_t=end.get("t"),
        skipped_lines=skipped,
        memory_cgroup=cgroup,
        memory_cgroup_reason=cgroup_reason,
        cgroup_peak_at_start_bytes=peak_at_start,
        memory_cgroup_own=own,
        memory_source=source,
        memory_source_why=source_why,
    )
