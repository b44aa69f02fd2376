"""A step's console output in CRI's format, and BigGAN's per-iteration lines in it (pure parsers)."""

from __future__ import annotations

import pytest

from infra.telemetry.parsers import ParseError
from infra.telemetry.parsers.console_log import (
    IterationMark,
    biggan_iterations,
    biggan_training_start,
    cri_time,
    format_cri_line,
    iteration_rate,
    parse_cri_log,
    rate_from_start,
)

# What main.py prints with --pbar mine: the progress bar ends with " " (no newline), the metrics line
# follows on the same line; "\r" starts each bar.
BAR = "\r{n}/7 ( 42.86%) (TE/ETA: 0:01 / 0:02) itr: {n}, G_loss : {g}, D_loss_real : +0.517, D_loss_fake : +0.298"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-03T11:00:00Z", 1796295600.0),
        ("2026-12-03T11:00:00.5Z", 1796295600.5),
        ("2026-12-03T11:00:00.123456789Z", 1796295600.123456789),
    ],
)
def test_cri_time(text: str, expected: float) -> None:
    assert cri_time(text) == pytest.approx(expected, abs=1e-6)


def test_format_and_parse_round_trip_keep_carriage_returns_inside_a_line() -> None:
    line = format_cri_line(1796295600.25, "stdout", BAR.format(n=3, g="+1.234"))
    assert line.startswith("2026-12-03T11:00:00.250000Z stdout F \r3/7")
    ((t, stream, text),) = parse_cri_log(line + "\n")
    assert (t, stream) == (pytest.approx(1796295600.25), "stdout") and text == BAR.format(n=3, g="+1.234")


def test_a_line_not_in_the_format_is_refused_with_its_number() -> None:
    with pytest.raises(ParseError, match="line 2"):
        parse_cri_log("2026-12-03T11:00:00Z stdout F ok\nplain text\n")


@pytest.mark.parametrize(
    ("text", "marks"),
    [
        (BAR.format(n=12, g="+0.123"), [(12, 0.123)]),
        (BAR.format(n=13, g="-1.5e-03"), [(13, -0.0015)]),
        (BAR.format(n=14, g="nan"), [(14, None)]),
        ("Switchin G to eval mode...", []),
        ("Itr 100: PYTORCH UNOFFICIAL Inception Score is nan +/- nan, PYTORCH UNOFFICIAL FID is 3.0", []),
    ],
)
def test_biggan_iterations(text: str, marks: list[tuple[int, float | None]]) -> None:
    found = biggan_iterations(((1.0, "stdout", text),))
    assert [(m.itr, m.g_loss) for m in found] == [(i, pytest.approx(g) if g is not None else None) for i, g in marks]


def marks(times: dict[int, float]) -> tuple[IterationMark, ...]:
    return tuple(IterationMark(i, t, 1.0) for i, t in sorted(times.items()))


def test_iteration_rate_leaves_out_warm_up_and_the_iterations_after_saves() -> None:
    # 0.5 s an iteration, except the first 10 (slow warm-up) and after itr 20 (a 10-second save).
    times = {}
    t = 0.0
    for i in range(1, 31):
        t += 3.0 if i <= 10 else (10.0 if i == 21 else 0.5)
        times[i] = t
    rate = iteration_rate(marks(times), warmup=10, every=(20,))
    assert rate.steady_median_s == pytest.approx(0.5)
    assert rate.slow == ()  # the 10-second save was left out, not counted as slow
    assert 21 in rate.skipped and all(i in rate.skipped for i in range(2, 11))
    assert rate.steady_intervals == 30 - 1 - 9 - 1
    assert rate.overall_it_per_s == pytest.approx(29 / (times[30] - times[1]))


@pytest.mark.parametrize(
    ("times", "median"),
    [
        ({}, None),
        ({1: 5.0}, None),
        ({11: 0.0, 12: 1.0, 13: 3.0}, 1.5),  # even count: the mean of the middle two
        ({11: 0.0, 12: 1.0, 13: 3.0, 15: 4.0}, 1.5),  # a gap in the numbering is not an interval
    ],
)
def test_iteration_rate_edge_cases(times: dict[int, float], median: float | None) -> None:
    rate = iteration_rate(marks(times), warmup=10)
    assert rate.steady_median_s == (pytest.approx(median) if median is not None else None)
    if len(times) < 2:
        assert rate.overall_it_per_s is None


def test_pauses_the_median_hides_are_listed_as_slow() -> None:
    # 7 iterations an epoch: each epoch's first waits 20 s for the loader's first batches.
    times, t = {}, 0.0
    for i in range(1, 36):
        t += 20.0 if i % 7 == 1 else 0.5
        times[i] = t
    rate = iteration_rate(marks(times), warmup=0)
    assert rate.steady_median_s == pytest.approx(0.5)
    assert [itr for itr, _ in rate.slow] == [8, 15, 22, 29]
    assert all(seconds == pytest.approx(20.0) for _, seconds in rate.slow)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([(1.0, "Experiment name is x"), (2.5, "Beginning training at epoch 0..."),
          (3.0, "Beginning training at epoch 1...")], (2.5, "Beginning training at epoch 0...")),  # the first one
        ([(1.0, "Beginning training at epoch 12...")], (1.0, "Beginning training at epoch 12...")),  # resumed
        ([(1.0, "print('Beginning training at epoch 0')")], None),  # only at the start of a line
        ([(1.0, "itr: 1, G_loss : +1.0")], None),
    ],
)  # fmt: skip
def test_biggan_training_start(lines: list[tuple[float, str]], expected: tuple[float, str] | None) -> None:
    assert biggan_training_start(tuple((t, "stdout", text) for t, text in lines)) == expected


@pytest.mark.parametrize(
    ("start", "times", "expected"),
    [
        # The 2026-12-03 H200 run's shape: 35.7 s from the start to itr 1, then 153 iterations in 121.3 s.
        ((0.0, "Beginning training at epoch 0..."), {1: 35.7, 154: 157.0}, (154, 157.0, 35.7)),
        # A resumed run logs from its saved itr + 1: 10 iterations since the start.
        ((0.0, "Beginning training at epoch 3..."), {101: 5.0, 110: 10.0}, (10, 10.0, 5.0)),
        (None, {1: 1.0, 2: 2.0}, None),  # no start line: not measured, never the logged window instead
        ((5.0, "Beginning training at epoch 0..."), {}, None),
        ((5.0, "Beginning training at epoch 0..."), {1: 4.0}, None),  # a start after the last iteration
    ],
)
def test_rate_from_start(
    start: tuple[float, str] | None, times: dict[int, float], expected: tuple[int, float, float] | None
) -> None:
    found = rate_from_start(start, marks(times))
    if expected is None:
        assert found is None
        return
    assert found is not None
    iterations, window, first = expected
    assert (found.iterations, found.window_s, found.first_iteration_after_s) == (
        iterations, pytest.approx(window), pytest.approx(first)
    )  # fmt: skip
    assert found.it_per_s == pytest.approx(iterations / window)
