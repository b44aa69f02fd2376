"""bench/telemetry_overhead.py's pure parts: reading a zombie's totals, and pairing runs by round."""

from __future__ import annotations

import pytest

from bench.telemetry_overhead import Run, batches_for, parse_stat_and_schedstat, per_sample_cost, summarise

# A python3 child read here after it exited and before it was reaped (state Z): utime 20, stime 1,
# cutime 0, cstime 0 ticks; 220.33 ms on a CPU by schedstat.
ZOMBIE_STAT = (
    "9094 (python3) Z 9052 9049 22244 0 -1 4227084 1932 0 0 0 20 1 0 0 20 0 1 0 2654125 0 0 "
    "18446744073709551615 0 0 0 0 0 0 0 16781312 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
)


@pytest.mark.parametrize(
    ("stat", "expected"),
    [
        (ZOMBIE_STAT, (20, 1, 0, 0)),
        # A command name with spaces and a parenthesis: fields are counted after the last ')'.
        (ZOMBIE_STAT.replace("(python3)", "(a) b (c)"), (20, 1, 0, 0)),
    ],
)
def test_zombie_totals(stat: str, expected: tuple[int, int, int, int]) -> None:
    found = parse_stat_and_schedstat(stat, "220331812 293198815 305\n")
    assert (found.utime_ticks, found.stime_ticks, found.cutime_ticks, found.cstime_ticks) == expected
    assert found.on_cpu_ns == 220331812


def _run(side: str, number: int, wall: float, share: float | None = None, samples: int = 10,
         per_sample_ms: float = 5.0) -> Run:  # fmt: skip
    sampled = side != "bare"
    return Run(
        side, number, wall + 0.1, wall, 20.0, 19, 20.0 + (0.2 if sampled else 0.0),
        0.2 if sampled else None, 0.2 if sampled else None, 0.0 if sampled else None, share,
        samples if sampled else None, 0.1 if sampled else None, per_sample_ms if sampled else None,
        per_sample_ms * (samples - 1) / 1000 if sampled else None,
    )  # fmt: skip


def test_ratios_pair_each_sampler_run_with_the_bare_run_of_its_round() -> None:
    runs = []
    for k in range(10):
        bare = 10.0 + k  # drift over the rounds: pairing by round cancels it
        runs += [_run("bare", k, bare), _run("sampler-5s", k, bare * 1.01, 1.5)]
        runs.append(_run("sampler-1s", k, bare * 1.02, 2.5))
    summary = summarise(runs, 10)
    assert summary["sampler-5s"]["workload_wall_ratio"]["median"] == 1.01
    assert summary["sampler-5s"]["workload_wall_ratio"]["ci95"] == [1.01, 1.01]
    assert summary["sampler-1s"]["workload_wall_ratio"]["median"] == 1.02
    assert summary["sampler-1s"]["sampler_percent_of_a_core"]["median"] == 2.5
    assert summary["sampler-5s"]["long_step_percent_of_a_core"] == 0.1  # 5 ms a sample every 5 s
    assert summary["sampler-1s"]["long_step_percent_of_a_core"] == 0.5
    assert summary["sampler-5s"]["cpu_per_sample"]["runs_counted"] == 10
    assert summary["sampler-5s"]["cpu_per_sample"]["sample_intervals"] == 90


@pytest.mark.parametrize(
    ("runs", "counted", "fewer", "intervals", "median", "pooled"),
    [
        # Runs that took one or two samples (2026-12-03's 5 s side) are counted, not used.
        ([(1, None), (2, 3.1), (9, 6.0), (9, 5.0), (17, 5.5)], 3, 2, 8 + 8 + 16, 5.5, (48 + 40 + 88) / 32),
        ([(8, 4.0)], 1, 0, 7, 4.0, 4.0),  # exactly the minimum counts
        ([(1, None), (7, 9.0)], 0, 2, 0, None, None),  # none with enough: not measured, never 0
    ],
)
def test_per_sample_cost_rests_only_on_runs_with_enough_samples(
    runs: list[tuple[int, float | None]], counted: int, fewer: int, intervals: int, median: float | None,
    pooled: float | None,
) -> None:
    made = [_run("sampler-5s", k, 10.0, samples=n, per_sample_ms=ms or 0.0) for k, (n, ms) in enumerate(runs)]
    made = [r if ms is not None else Run(**{**r.__dict__, "cpu_per_sample_ms": None, "cpu_between_samples_s": None})
            for r, (_, ms) in zip(made, runs, strict=True)]  # fmt: skip
    cost = per_sample_cost(made, 8)
    found = (cost["runs_counted"], cost["runs_with_fewer_samples"], cost["sample_intervals"])
    assert found == (counted, fewer, intervals)
    if median is None:
        assert cost["per_run_ms"] is None and cost["pooled_ms"] is None
        assert cost["reason"] == "not measured: no run took 8 samples"
    else:
        assert cost["per_run_ms"]["median"] == pytest.approx(median)
        assert cost["pooled_ms"] == pytest.approx(pooled, abs=1e-3)


@pytest.mark.parametrize(
    ("wall", "batches", "samples", "expected"),
    [
        (8.4, 1500, 8, 9643),  # 9 x 5 s x 1.2 = 54 s at 1500 batches in 8.4 s
        (8.4, 1500, 1, 2143),
        (100.0, 1500, 8, 1500),  # never shorter than the warm-up
    ],
)
def test_batches_for_a_run_long_enough_for_the_samples(wall: float, batches: int, samples: int, expected: int) -> None:
    assert batches_for(wall, batches, samples) == expected
