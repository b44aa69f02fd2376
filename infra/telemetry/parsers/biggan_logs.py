"""BigGAN-PyTorch's logs (and the probe's, which writes the same formats): metrics JSONL, loss logs, metalog."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from infra.telemetry.parsers import ParseError


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
