"""Pure parsers: the sampler's JSONL, BigGAN-PyTorch's logs, and the seed's `sar` and `nvidia-smi` text.

Every parser takes text and returns frozen dataclasses; none opens a file (callers read),
so each is tested on recorded samples under tests/unit/data/. A value a tool printed as
unavailable (`[N/A]`, `[Not Supported]`) or a block the sampler marked not measured comes
back as None with the reason where there is one, never as 0.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20
KIB = 1 << 10


class ParseError(ValueError):
    """Text that is not in the format the parser reads; the message says where."""


# ---------------------------------------------------------------------------------------------
# The sampler's JSONL


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


def _memory_cgroup(start: dict[str, Any]) -> tuple[str | None, str | None, int | None]:
    """(which cgroup, why none, its peak before the step) from the start record."""
    block = start.get("memory_cgroup")
    if not isinstance(block, dict):
        return None, "not recorded (a sampler from before cgroup peaks)" if start else "no start record", None
    if "cgroup" not in block:
        return None, str(block.get("reason", "not measured")), None
    name = f"v{block.get('version')} {block['cgroup']}"
    at_start = block.get("peak_at_start_bytes")
    return name, block.get("reason"), at_start if isinstance(at_start, int) else None


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
    cgroup, cgroup_reason, peak_at_start = _memory_cgroup(start)
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
    )


# ---------------------------------------------------------------------------------------------
# BigGAN-PyTorch's logs (and the probe's, which writes the same formats)


@dataclass(frozen=True)
class EvaluationRecord:
    itr: int
    is_mean: float | None
    is_std: float | None
    fid: float | None
    stamp: float


def parse_biggan_jsonl(text: str) -> tuple[EvaluationRecord, ...]:
    """`logs/<exp>_log.jsonl`: one object per test; IS or FID may be absent in older runs."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            records.append(
                EvaluationRecord(
                    itr=int(raw["itr"]),
                    is_mean=_finite(raw.get("IS_mean")),
                    is_std=_finite(raw.get("IS_std")),
                    fid=_finite(raw.get("FID")),
                    stamp=float(raw["_stamp"]),
                )
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ParseError(f"line {number}: not a BigGAN metrics record ({error}): {line[:120]!r}") from None
    return tuple(records)


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


LOSS_LINE = re.compile(r"^(?P<itr>\d+): (?P<value>\S+)$")


def parse_loss_log(text: str) -> tuple[tuple[int, float], ...]:
    """`logs/<exp>/G_loss.log` and the like: `"%d: %3.3e"` per iteration."""
    points = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = LOSS_LINE.match(line.strip())
        if not match:
            raise ParseError(f"line {number}: expected 'ITR: VALUE', found {line[:80]!r}")
        points.append((int(match["itr"]), float(match["value"])))
    return tuple(points)


def parse_metalog(text: str) -> dict[str, str]:
    """`metalog.txt`: `datetime:`, `config:` and `state:` lines (config and state as printed dicts)."""
    result = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("datetime", "config", "state"):
            result[key] = value
    return result


# ---------------------------------------------------------------------------------------------
# sysstat's sar (the seed's `sar -u 5` and `sar -r 5`)

SAR_HEADER = re.compile(
    r"^Linux (?P<kernel>\S+) \((?P<host>[^)]+)\)\s+(?P<date>\d{2}/\d{2}/\d{2,4}|\d{4}-\d{2}-\d{2})\s+"
    r"_(?P<arch>\S+)_\s+\((?P<cpus>\d+) CPU\)"
)
SAR_TIME = re.compile(r"^(?P<time>\d{2}:\d{2}:\d{2})(?:\s+(?P<ampm>AM|PM))?\s+")


@dataclass(frozen=True)
class SarHeader:
    kernel: str
    host: str
    date: dt.date
    arch: str
    cpus: int


@dataclass(frozen=True)
class SarRow:
    time: dt.datetime  # the header's date plus the row's clock time, rolled over midnight
    values: tuple[tuple[str, str], ...]  # column -> text as printed ("all", "12.34")

    def number(self, column: str) -> float | None:
        text = dict(self.values).get(column)
        return None if text is None else float(text)


@dataclass(frozen=True)
class SarReport:
    header: SarHeader
    columns: tuple[str, ...]
    rows: tuple[SarRow, ...]
    average: tuple[tuple[str, str], ...] | None


def _sar_date(text: str) -> dt.date:
    if "-" in text:
        return dt.date.fromisoformat(text)
    month, day, year = (int(p) for p in text.split("/"))
    return dt.date(year + 2000 if year < 100 else year, month, day)


def parse_sar(text: str) -> SarReport:
    """Text from `sar -u N` or `sar -r N` (any sysstat version; columns come from the header).

    Clock times are read in the 12-hour (AM/PM, the C/en_US locale's) or 24-hour form; a time
    earlier than the row before means midnight passed.
    """
    lines = text.splitlines()
    header = None
    for line in lines:
        match = SAR_HEADER.match(line)
        if match:
            header = SarHeader(
                kernel=match["kernel"],
                host=match["host"],
                date=_sar_date(match["date"]),
                arch=match["arch"],
                cpus=int(match["cpus"]),
            )
            break
    if header is None:
        raise ParseError("no sar header line ('Linux <kernel> (<host>)  <date>  _<arch>_  (<n> CPU)')")
    columns: tuple[str, ...] = ()
    rows: list[SarRow] = []
    average = None
    day = header.date
    previous: dt.time | None = None
    for number, line in enumerate(lines, start=1):
        if line.startswith("Average:"):
            fields = line.split()[1:]
            if columns and len(fields) == len(columns):
                average = tuple(zip(columns, fields, strict=True))
            continue
        match = SAR_TIME.match(line)
        if not match:
            continue
        fields = line[match.end() :].split()
        if not fields:
            continue
        if any(f.startswith("%") or f.startswith("kb") or f == "CPU" for f in fields):
            columns = tuple(fields)  # a (possibly repeated) column header
            continue
        if "RESTART" in line:
            continue
        if not columns or len(fields) != len(columns):
            raise ParseError(f"line {number}: {len(fields)} values under {len(columns)} columns: {line!r}")
        clock = dt.datetime.strptime(
            match["time"] + (" " + match["ampm"] if match["ampm"] else ""),
            "%I:%M:%S %p" if match["ampm"] else "%H:%M:%S",
        ).time()
        if previous is not None and clock < previous:
            day += dt.timedelta(days=1)
        previous = clock
        rows.append(SarRow(time=dt.datetime.combine(day, clock), values=tuple(zip(columns, fields, strict=True))))
    return SarReport(header=header, columns=columns, rows=tuple(rows), average=average)


@dataclass(frozen=True)
class SarCpu:
    time: dt.datetime
    busy_percent: float  # 100 - %idle: every core of the host
    user_percent: float
    system_percent: float
    iowait_percent: float


def sar_cpu(report: SarReport) -> tuple[SarCpu, ...]:
    """`sar -u` rows for CPU 'all'."""
    if "%idle" not in report.columns:
        raise ParseError(f"not `sar -u` output: columns {report.columns}")
    result = []
    for row in report.rows:
        if dict(row.values).get("CPU", "all") != "all":
            continue
        result.append(
            SarCpu(
                time=row.time,
                busy_percent=round(100 - (row.number("%idle") or 0.0), 2),
                user_percent=row.number("%user") or 0.0,
                system_percent=row.number("%system") or 0.0,
                iowait_percent=row.number("%iowait") or 0.0,
            )
        )
    return tuple(result)


@dataclass(frozen=True)
class SarMemory:
    time: dt.datetime
    used_bytes: int  # without buffers and page cache
    total_bytes: int
    used_with_cache_bytes: int  # what sysstat before 11.5 printed as kbmemused (and %memused)


def sar_memory(report: SarReport) -> tuple[SarMemory, ...]:
    """`sar -r` rows. sysstat before 11.5 counted buffers and cache inside kbmemused; from 11.5
    kbmemused leaves them out and kbavail appears. Both are turned into the same fields."""
    columns = set(report.columns)
    if not {"kbmemfree", "kbmemused"} <= columns:
        raise ParseError(f"not `sar -r` output: columns {report.columns}")
    result = []
    for row in report.rows:
        free = int(row.number("kbmemfree") or 0)
        used = int(row.number("kbmemused") or 0)
        buffers = int(row.number("kbbuffers") or 0)
        cached = int(row.number("kbcached") or 0)
        if "kbavail" in columns:  # sysstat >= 11.5: used already excludes buffers and cache
            total = free + used + buffers + cached
            plain_used = used
        else:
            total = free + used
            plain_used = used - buffers - cached
        result.append(
            SarMemory(
                time=row.time,
                used_bytes=plain_used * KIB,
                total_bytes=total * KIB,
                used_with_cache_bytes=(plain_used + buffers + cached) * KIB,
            )
        )
    return tuple(result)


# ---------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv [-l N]


@dataclass(frozen=True)
class NvidiaSmiRow:
    timestamp: dt.datetime | None
    index: int | None
    name: str | None
    pstate: str | None
    utilization_gpu_percent: float | None
    # The memory controller's busy time: what the seed mislabelled "GPU memory usage".
    utilization_memory_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


_SMI_FIELD = {
    "timestamp": "timestamp",
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "pstate": "pstate",
    "utilization.gpu": "utilization_gpu_percent",
    "utilization.memory": "utilization_memory_percent",
    "memory.used": "memory_used_bytes",
    "memory.total": "memory_total_bytes",
}
_UNAVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[GPU is lost]")


def _smi_value(field: str, text: str) -> Any:
    text = text.strip()
    if text in _UNAVAILABLE:
        return None
    if field == "timestamp":
        return dt.datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f")
    if field == "index":
        return int(text)
    if field in ("name", "pstate"):
        return text
    number = text.split()[0]  # "100 %", "1234 MiB"
    if field in ("memory_used_bytes", "memory_total_bytes"):
        unit = text.split()[1] if len(text.split()) > 1 else "MiB"  # nounits: MiB
        factor = {"MiB": MIB, "GiB": 1 << 30, "KiB": KIB, "B": 1}.get(unit)
        if factor is None:
            raise ParseError(f"unknown memory unit {unit!r}")
        return int(float(number) * factor)
    return float(number)


def parse_nvidia_smi_csv(text: str, columns: tuple[str, ...] | None = None) -> tuple[NvidiaSmiRow, ...]:
    """CSV from `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] [-l N]`.

    With a header, the columns come from it (`utilization.gpu [%]`); with `noheader`, pass
    the query's field names as `columns`. A repeated header line is skipped.
    """
    fields: list[str] | None = None
    if columns is not None:
        fields = [_SMI_FIELD[c] for c in columns]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        names = [p.split(" [")[0].strip() for p in parts]
        if all(n in _SMI_FIELD for n in names) and not any(ch.isdigit() for ch in "".join(names).replace(".", "")):
            fields = [_SMI_FIELD[n] for n in names]
            continue
        if fields is None:
            raise ParseError(f"line {number}: no header yet and no columns given")
        if len(parts) != len(fields):
            raise ParseError(f"line {number}: {len(parts)} values for {len(fields)} columns: {line!r}")
        try:
            values = {f: _smi_value(f, p) for f, p in zip(fields, parts, strict=True)}
        except ValueError as error:
            raise ParseError(f"line {number}: {error}") from None
        rows.append(NvidiaSmiRow(**{f: values.get(f) for f in NvidiaSmiRow.__dataclass_fields__}))
    return tuple(rows)


# ---------------------------------------------------------------------------------------------
# A step's console output as the container runtime keeps it, and BigGAN's progress lines in it

# CRI's log format (what kubelet writes and `kubectl logs --timestamps` shows): RFC 3339 time,
# stream, P(artial) or F(ull), then the line. The device-run driver writes the same.
CRI_LINE = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z) (?P<stream>stdout|stderr) [PF] (?P<text>.*)$"
)
# main.py prints, after its progress bar and on the same line: `itr: 12, G_loss : +0.123, D_loss_real : ...`.
BIGGAN_ITERATION = re.compile(r"itr: (?P<itr>\d+), G_loss : (?P<g>[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?|[-+]?nan|[-+]?inf)")


def cri_time(text: str) -> float:
    """RFC 3339 `2026-12-03T11:00:00.123456789Z` to Unix seconds (nanoseconds cut to microseconds)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    stamp = dt.datetime.fromisoformat(whole).replace(tzinfo=dt.UTC).timestamp()
    return stamp + (float(f"0.{fraction}") if fraction else 0.0)


def format_cri_line(t: float, stream: str, text: str) -> str:
    """One line in CRI's format (full line, `F`), time to the microsecond."""
    moment = dt.datetime.fromtimestamp(t, dt.UTC)
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z {stream} F {text}"


def parse_cri_log(text: str) -> tuple[tuple[float, str, str], ...]:
    """(Unix time, stream, line) per line; a line not in the format is a ParseError."""
    lines = []
    # "\n" only: a progress bar's "\r" is inside a line (splitlines would cut there).
    for number, line in enumerate(text.split("\n"), start=1):
        if not line:
            continue
        match = CRI_LINE.match(line)
        if not match:
            raise ParseError(f"line {number}: not '<RFC 3339 time> stdout|stderr F <text>': {line[:80]!r}")
        lines.append((cri_time(match["time"]), match["stream"], match["text"]))
    return tuple(lines)


@dataclass(frozen=True)
class IterationMark:
    itr: int
    t: float  # when the line reached the log (Unix s): the iteration had ended by then
    g_loss: float | None


def biggan_iterations(lines: tuple[tuple[float, str, str], ...]) -> tuple[IterationMark, ...]:
    """Every `itr: N, G_loss : x` that main.py printed, with the time its line was logged."""
    marks = []
    for t, _, text in lines:
        for match in BIGGAN_ITERATION.finditer(text):
            loss = float(match["g"])
            marks.append(IterationMark(int(match["itr"]), t, loss if math.isfinite(loss) else None))
    return tuple(marks)


@dataclass(frozen=True)
class IterationRate:
    """Training speed read off the logged iterations."""

    iterations: int  # logged iterations in the window
    window_s: float  # first to last logged iteration
    overall_it_per_s: float | None  # (last - first itr) / window: saves and evaluations included
    steady_median_s: float | None  # median time between consecutive iterations, skipped ones left out
    steady_intervals: int
    skipped: tuple[int, ...]  # iterations whose interval held a save or an evaluation, or the warm-up
    # Kept intervals over SLOW_FACTOR x the median, as (itr that ended it, seconds): pauses the median
    # hides, such as each epoch's start while the DataLoader's workers fill their first batches.
    slow: tuple[tuple[int, float], ...] = ()


SLOW_FACTOR = 5.0


def iteration_rate(marks: tuple[IterationMark, ...], warmup: int = 10, every: tuple[int, ...] = ()) -> IterationRate:
    """Overall and steady-state speed. The steady state leaves out the first `warmup` iterations
    (cuDNN autotuning, first allocations) and every interval that ends an iteration after which
    main.py saved or evaluated (itr divisible by a number in `every`: --save_every, --test_every)."""
    if len(marks) < 2 or marks[-1].t <= marks[0].t:
        return IterationRate(len(marks), 0.0, None, None, 0, ())
    window = marks[-1].t - marks[0].t
    overall = (marks[-1].itr - marks[0].itr) / window
    intervals: list[tuple[int, float]] = []
    skipped = []
    for before, after in itertools.pairwise(marks):
        held = any(e > 0 and before.itr % e == 0 for e in every)
        if after.itr <= warmup or held or after.itr != before.itr + 1:
            skipped.append(after.itr)
            continue
        intervals.append((after.itr, after.t - before.t))
    ordered = sorted(seconds for _, seconds in intervals)
    median = ordered[len(ordered) // 2] if ordered else None
    if ordered and len(ordered) % 2 == 0:
        median = (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
    slow = tuple((itr, s) for itr, s in intervals if median and s > SLOW_FACTOR * median)
    return IterationRate(len(marks), window, overall, median, len(intervals), tuple(skipped), slow)
