"""sysstat's sar: the seed's `sar -u 5` and `sar -r 5` text, any sysstat version, into rows."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from infra.telemetry.parsers import KIB, ParseError

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
