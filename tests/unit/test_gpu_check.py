"""bench/gpu_check.py's pure parts: the truth for an interval, and which intervals count."""

from __future__ import annotations

import pytest

from bench.gpu_check import Phase, busy_share, intervals_in_phases, summarise


@pytest.mark.parametrize(
    ("start", "end", "busy", "expected"),
    [
        (0.0, 1.0, [], 0.0),
        (0.0, 1.0, [(0.0, 1.0)], 1.0),
        (0.0, 1.0, [(0.1, 0.2), (0.5, 0.8)], 0.4),
        (0.0, 1.0, [(-0.5, 0.25), (0.9, 1.5)], 0.35),  # stretches cut at the interval's edges
        (2.0, 4.0, [(0.0, 1.0), (5.0, 6.0)], 0.0),  # outside
    ],
)
def test_busy_share(start: float, end: float, busy: list[tuple[float, float]], expected: float) -> None:
    assert busy_share(start, end, busy) == pytest.approx(expected)


PHASES = [Phase("a", 0.1, 0.5, start=10.0, end=15.0), Phase("b", 2.5, 0.5, start=16.0, end=21.0)]
BUSY = [(t, t + 0.05) for t in [10.0 + 0.1 * k for k in range(50)]] + [(16.0, 17.25), (18.5, 19.75)]


def readings(times: list[float], value: float = 50.0) -> list[dict[str, object]]:
    return [{"t": t, "utilization_percent": value, "method": "nvml-samples", "samples": 6} for t in times]


def test_only_intervals_wholly_inside_a_phase_count_and_the_first_is_left_out() -> None:
    times = [9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5, 16.5, 17.5, 18.5, 19.5, 20.5, 21.5]
    got = intervals_in_phases(readings(times), PHASES, BUSY)
    # a: 10.5-11.5 is its first (left out), then 11.5-12.5, 12.5-13.5, 13.5-14.5; 14.5-15.5 crosses the end.
    assert [(i.phase, i.start) for i in got] == [
        ("a", 11.5),
        ("a", 12.5),
        ("a", 13.5),
        ("b", 17.5),
        ("b", 18.5),
        ("b", 19.5),
    ]
    assert [round(i.truth_percent) for i in got] == [50, 50, 50, 0, 100, 25]


def test_summary_compares_phase_means_with_the_goal() -> None:
    times = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    close = summarise(intervals_in_phases(readings(times, 51.5), PHASES, BUSY))
    far = summarise(intervals_in_phases(readings(times, 47.0), PHASES, BUSY))
    assert close["a"]["mean_error_points"] == pytest.approx(1.5)
    assert close["a"]["goal_met"] is True
    assert far["a"]["mean_error_points"] == pytest.approx(-3.0)
    assert far["a"]["goal_met"] is False


def test_a_reading_that_aliases_misses_the_goal() -> None:
    # A long-cycle load read at instants that always fall in its idle half: 0 % for a 50 % load.
    times = [16.0, 17.0, 18.0, 19.0, 20.0, 21.0]
    aliased = summarise(intervals_in_phases(readings(times, 0.0), PHASES, BUSY, skip_first=0))
    assert aliased["b"]["mean_truth_percent"] > 40
    assert aliased["b"]["goal_met"] is False
