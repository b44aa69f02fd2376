"""What every bench shares: the run order (ABBA), paired ratios with a bootstrap interval, and
where each writes its raw JSON (bench/results/, read by bench/readme_table.py; what each file
records of its commit, machine and command line, and how it is written: bench/provenance.py)."""

from __future__ import annotations

import datetime as dt
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def abba_order(sides: Sequence[str], rounds: int) -> list[list[str]]:
    """One list of sides per round: forward on even rounds, reversed on odd ones (ABBA, and for
    more than two sides ABC CBA), so drift over the run weighs on every side alike."""
    return [list(sides) if r % 2 == 0 else list(reversed(sides)) for r in range(rounds)]


def percentile_interval(ordered: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The central `level` interval of sorted values: as many values below its low end as above
    its high end, (1 - level) / 2 of them on each side, rounded down (10000 values at 95 %: the
    251st and the 9750th)."""
    if not ordered:
        raise ValueError("no values to take an interval of")
    if not 0 < level < 1:
        raise ValueError(f"level {level} is not between 0 and 1")
    # 1e-9: (1 - 0.95) / 2 * 10000 is 250.00000000000023 in binary, which must still read 250.
    outside = math.floor((1 - level) / 2 * len(ordered) + 1e-9)
    return ordered[outside], ordered[len(ordered) - 1 - outside]


def bootstrap_ci(values: Sequence[float], rounds: int = 10000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the median, by resampling the values (fixed seed: the file is re-checkable)."""
    if not values:
        raise ValueError("no values to resample")
    if rounds < 1:
        raise ValueError(f"rounds is {rounds}; resample at least once")
    rng = random.Random(seed)  # noqa: S311 - resampling, not secrecy
    medians = sorted(statistics.median(rng.choices(list(values), k=len(values))) for _ in range(rounds))
    return percentile_interval(medians)


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, Any]:
    """Median of the per-round ratios a/b, with its 95 % interval and the rounds it rests on."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerators but {len(denominators)} denominators: the rounds must pair")
    zero = next((i for i, b in enumerate(denominators) if b == 0), None)
    if zero is not None:
        raise ValueError(f"round {zero}'s denominator is 0: no ratio")
    pairs = [a / b for a, b in zip(numerators, denominators, strict=True)]
    low, high = bootstrap_ci(pairs)
    return {
        "median": round(statistics.median(pairs), 4),
        "ci95": [round(low, 4), round(high, 4)],
        "rounds": len(pairs),
        "pairs": [round(p, 4) for p in pairs],
    }


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
