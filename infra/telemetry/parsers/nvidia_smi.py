"""nvidia-smi's CSV (`--query-gpu=... --format=csv [-l N]`) into rows; unavailable values read as None."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from infra.telemetry.parsers import KIB, MIB, ParseError


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
