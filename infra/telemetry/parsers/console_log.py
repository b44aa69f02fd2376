"""A step's console output as the container runtime keeps it (CRI's format), and BigGAN's progress lines in it.

From the logged iterations: the training speed, overall and in the steady state.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import re
from dataclasses import dataclass

from infra.telemetry.parsers import ParseError

# CRI's log format (what kubelet writes and `kubectl logs --timestamps` shows): RFC 3339 time,
# stream, P(artial) or F(ull), then the line. The device-run driver writes the same.
CRI_LINE = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z) (?P<stream>stdout|stderr) [PF] (?P<text>.*)$"
)
# main.py prints, after its progress bar and on the same line: `itr: 12, G_loss : +0.123, D_loss_real : ...`.
BIGGAN_ITERATION = re.compile(r"itr: (?P<itr>\d+), G_loss : (?P<g>[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?|[-+]?nan|[-+]?inf)")
# train.py prints this once the models, optimizers and data loader are made, right before its epoch loop.
BIGGAN_TRAINING_START = re.compile(r"^Beginning training at epoch \d+")


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


def biggan_training_start(lines: tuple[tuple[float, str, str], ...]) -> tuple[float, str] | None:
    """When train.py said it began training, and the line it said it with; None if it never did."""
    return next(((t, text) for t, _, text in lines if BIGGAN_TRAINING_START.match(text)), None)


@dataclass(frozen=True)
class RateFromStart:
    """Training speed from the start of training to the last logged iteration: the first epoch's
    wait for the data loader and the first iterations count, as every pause after them does."""

    start_t: float
    start_line: str
    iterations: int  # run between the start and the last logged iteration (the first logged one included)
    window_s: float  # start of training to the last logged iteration
    first_iteration_after_s: float  # start of training to the first logged iteration
    it_per_s: float


def rate_from_start(start: tuple[float, str] | None, marks: tuple[IterationMark, ...]) -> RateFromStart | None:
    if start is None or not marks or marks[-1].t <= start[0]:
        return None
    # A resumed run logs from its saved itr + 1: the iterations since the start are last - first + 1.
    iterations = marks[-1].itr - marks[0].itr + 1
    window = marks[-1].t - start[0]
    return RateFromStart(start[0], start[1], iterations, window, marks[0].t - start[0], iterations / window)


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
