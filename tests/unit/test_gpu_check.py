"""bench/gpu_check.py's pure parts: the truth for an interval, and which intervals count."""

from __future__ import annotations

import pytest

from bench.gpu_check import (
    PERIODS_S,
    Phase,
    busy_share,
    cycle_starts,
    intervals_in_phases,
    shifted,
    summarise,
)


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


# -- cycles equal to the interval (1 s) and not dividing it (0.7 s), judged on each phase's mean ------


@pytest.mark.parametrize(
    ("period", "phase_seconds", "cycles"),
    [(0.1, 12.0, 120), (0.7, 12.0, 17), (1.0, 12.0, 12), (2.5, 12.0, 4), (0.7, 0.5, 0)],
)
def test_a_phase_runs_whole_cycles(period: float, phase_seconds: float, cycles: int) -> None:
    starts = cycle_starts(100.0, period, phase_seconds)
    assert len(starts) == cycles
    assert starts == pytest.approx([100.0 + k * period for k in range(cycles)])


def test_the_check_covers_cycles_equal_to_and_not_dividing_a_1_s_interval() -> None:
    assert {0.7, 1.0} <= set(PERIODS_S)
    assert any(1.0 % p > 1e-9 and p % 1.0 > 1e-9 for p in PERIODS_S)  # one that does not divide the interval


def _phase_load(period: float, fraction: float, start: float = 10.0, seconds: float = 12.0) -> tuple[Phase, list]:
    starts = cycle_starts(start, period, seconds)
    busy = [(c, c + fraction * period) for c in starts]
    return Phase("p", period, fraction, start, start + len(starts) * period), busy


def _read(times: list[float], value) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    return [{"t": t, "utilization_percent": value(t), "method": "m", "samples": 5} for t in times]


@pytest.mark.parametrize("period", [0.1, 0.7, 1.0, 2.5])
@pytest.mark.parametrize("fraction", [0.27, 0.55, 0.84])
def test_a_reader_of_each_intervals_busy_share_meets_the_goal_at_every_period(period: float, fraction: float) -> None:
    phase, busy = _phase_load(period, fraction)
    times = [10.3 + k for k in range(13)]
    found = summarise(intervals_in_phases(_read(times, lambda t: 100 * busy_share(t - 1, t, busy)), [phase], busy))
    assert found["p"]["goal_met"] is True and found["p"]["mean_error_points"] == pytest.approx(0.0, abs=1e-9)
    assert found["p"]["intervals"] >= 8  # 10 s (2.5 s cycles) to 12 s of whole intervals, the first left out


def test_in_07_s_cycles_single_intervals_differ_so_only_the_phases_mean_is_judged() -> None:
    phase, busy = _phase_load(0.7, 0.55)
    times = [10.3 + k for k in range(13)]
    rows = intervals_in_phases(_read(times, lambda t: 55.0), [phase], busy)
    truths = sorted(round(r.truth_percent) for r in rows)
    assert truths[0] < 50 < truths[-1]  # one or two busy stretches in an interval: far from 55 % either way
    summary = summarise(rows)["p"]
    assert summary["interval_abs_error_max_points"] > 10  # single intervals miss by far ...
    assert abs(summary["mean_error_points"]) < 5  # ... their mean is judged, not each of them


def test_an_instant_reading_in_1_s_cycles_sees_the_same_point_of_every_cycle_and_misses() -> None:
    phase, busy = _phase_load(1.0, 0.55)
    times = [10.3 + k for k in range(13)]  # each reading 0.3 s into a cycle: always inside its busy part

    def instant(t: float) -> float:
        return 100.0 if any(a <= t - 0.1 < b for a, b in busy) else 0.0

    aliased = summarise(intervals_in_phases(_read(times, instant), [phase], busy))["p"]
    assert aliased["mean_reading_percent"] == 100.0 and aliased["mean_truth_percent"] == pytest.approx(55.0)
    assert aliased["goal_met"] is False


def test_shifted_reads_a_recorded_check_again_with_the_truth_taken_earlier() -> None:
    """A reader trailing the host clock by 0.15 s (NVML's sample period): single intervals of long
    cycles miss by far; with the truth taken 0.15 s earlier they do not."""
    phase, busy = _phase_load(2.5, 0.55)
    times = [10.3 + k for k in range(11)]
    readings = _read(times, lambda t: 100 * busy_share(t - 1.15, t - 0.15, busy))
    rows = intervals_in_phases(readings, [phase], busy)
    recorded = {"busy_stretches": busy, "goal_points": 2.0,
                "sampler": {"intervals": [r.__dict__ for r in rows]}}  # fmt: skip
    as_run = summarise(rows)["p"]
    again = shifted(recorded, 0.15)["p"]
    assert as_run["interval_abs_error_max_points"] > 10
    assert again["interval_abs_error_max_points"] == pytest.approx(0.0, abs=1e-9)
    assert shifted(recorded, 0.0)["p"] == as_run
