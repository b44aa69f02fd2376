"""bench/telemetry_overhead.py's pure parts: reading a zombie's totals, and pairing runs by round."""

from __future__ import annotations

import pytest

from bench.telemetry_overhead import Run, parse_stat_and_schedstat, summarise

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


def _run(side: str, number: int, wall: float, share: float | None = None) -> Run:
    sampled = side != "bare"
    return Run(
        side, number, wall + 0.1, wall, 20.0, 19, 20.0 + (0.2 if sampled else 0.0),
        0.2 if sampled else None, 0.2 if sampled else None, 0.0 if sampled else None, share,
        3 if sampled else None, 0.1 if sampled else None, 5.0 if sampled else None,
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
