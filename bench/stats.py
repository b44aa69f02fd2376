"""What every bench shares: the run order (ABBA), paired ratios with a bootstrap interval, and
where each writes its raw JSON (bench/results/, read by bench/readme_table.py; what each file
records of its commit, machine and command line, and how it is written: bench/provenance.py)."""

from __future__ import annotations

import datetime as dt
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


def bootstrap_ci(values: Sequence[float], rounds: int = 10000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the median, by resampling the values (fixed seed: the file is re-checkable)."""
    rng = random.Random(seed)  # noqa: S311 - resampling, not secrecy
    medians = sorted(statistics.median(rng.choices(list(values), k=len(values))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, Any]:
    """Median of the per-round ratios a/b, with its 95 % interval and the rounds it rests on."""
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
