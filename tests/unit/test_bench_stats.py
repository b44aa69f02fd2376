"""bench/stats.py's statistics, against values worked out apart from the code: the ABBA order
written out, the percentile interval's positions counted by hand, the bootstrap against the exact
distribution of a resampled median (binomial sums, no resampling), paired ratios of known pairs."""

from __future__ import annotations

import datetime as dt
from math import comb

import pytest

from bench.stats import abba_order, bootstrap_ci, now_utc, paired_ratio, percentile_interval


@pytest.mark.parametrize(
    ("sides", "rounds", "expected"),
    [
        (["a", "b"], 4, [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]),  # A B B A A B B A
        (["a", "b"], 1, [["a", "b"]]),
        (["a", "b"], 3, [["a", "b"], ["b", "a"], ["a", "b"]]),
        (["a", "b", "c"], 2, [["a", "b", "c"], ["c", "b", "a"]]),  # ABC CBA
        (["a"], 2, [["a"], ["a"]]),
        (["a", "b"], 0, []),
    ],
)
def test_abba_order(sides: list[str], rounds: int, expected: list[list[str]]) -> None:
    assert abba_order(sides, rounds) == expected


def test_abba_order_puts_every_side_first_equally_often_over_whole_pairs_of_rounds() -> None:
    """Drift over the run weighs on every side alike: over an even number of rounds each side
    holds each position as often as any other."""
    sides = ["x", "y", "z", "w"]
    order = abba_order(sides, 6)
    for side in sides:
        positions = [rnd.index(side) for rnd in order]
        assert sum(positions) == 6 * (len(sides) - 1) / 2, (side, positions)


@pytest.mark.parametrize(
    ("count", "level", "low_index", "high_index"),
    [
        (10000, 0.95, 250, 9749),  # 250 values below, 250 above (what every bench uses)
        (1000, 0.95, 25, 974),
        (100, 0.95, 2, 97),  # 2.5 rounds down: 2 below, 2 above
        (40, 0.95, 1, 38),
        (39, 0.95, 0, 38),
        (10, 0.95, 0, 9),
        (1, 0.95, 0, 0),
        (100, 0.90, 5, 94),
        (200, 0.50, 50, 149),
    ],
)
def test_percentile_interval_leaves_as_many_values_below_as_above(
    count: int, level: float, low_index: int, high_index: int
) -> None:
    ordered = [float(i) for i in range(count)]  # each value is its own index
    assert percentile_interval(ordered, level) == (low_index, high_index)
    assert low_index == count - 1 - high_index


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.1])
def test_percentile_interval_refuses_a_level_outside_0_to_1(level: float) -> None:
    with pytest.raises(ValueError, match="not between 0 and 1"):
        percentile_interval([1.0, 2.0], level)


def test_percentile_interval_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile_interval([])


def exact_median_quantile(n: int, q: float) -> int:
    """The q-quantile of the median of n draws (with replacement) from 1..n, n odd, from its exact
    distribution: P(median <= j) = P(at least (n+1)/2 draws are <= j), a binomial sum."""
    need = (n + 1) // 2
    for j in range(1, n + 1):
        p = j / n
        if sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(need, n + 1)) >= q:
            return j
    return n


@pytest.mark.parametrize("n", [3, 5, 11, 21])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_bootstrap_ci_matches_the_exact_distribution_of_the_resampled_median(n: int, seed: int) -> None:
    # 1..n: 3 -> (1, 3), 5 -> (1, 5), 11 -> (3, 9), 21 -> (7, 15); the exact CDF is at least 4
    # standard errors of a 10000-round estimate away from 2.5 % and 97.5 % at each of these ends.
    expected = (exact_median_quantile(n, 0.025), exact_median_quantile(n, 0.975))
    assert bootstrap_ci([float(v) for v in range(1, n + 1)], seed=seed) == expected


def test_the_exact_quantiles_the_bootstrap_is_held_to() -> None:
    """The reference itself, at the values worked out by hand: for 1..5, the median is 1 when at
    least 3 of 5 draws are 1: 10(.2^3)(.8^2) + 5(.2^4)(.8) + .2^5 = 0.05792 >= 0.025."""
    assert (exact_median_quantile(5, 0.025), exact_median_quantile(5, 0.975)) == (1, 5)
    assert (exact_median_quantile(11, 0.025), exact_median_quantile(11, 0.975)) == (3, 9)
    assert (exact_median_quantile(21, 0.025), exact_median_quantile(21, 0.975)) == (7, 15)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([4.2], (4.2, 4.2)),  # one value: every resample is it
        ([3.0] * 9, (3.0, 3.0)),
        # an outlier among 40: the median moves only if 20 of 40 draws are the outlier (p < 1e-9)
        ([10.0] * 39 + [1000.0], (10.0, 10.0)),
    ],
)
def test_bootstrap_ci_of_values_whose_median_cannot_move(values: list[float], expected: tuple[float, float]) -> None:
    assert bootstrap_ci(values) == expected


def test_bootstrap_ci_is_reproducible_by_its_seed() -> None:
    values = [1.0, 2.5, 2.7, 3.1, 8.0, 9.5]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    low, high = bootstrap_ci(values)
    assert min(values) <= low <= high <= max(values)


@pytest.mark.parametrize(("values", "rounds", "message"), [([], 100, "no values"), ([1.0], 0, "resample at least")])
def test_bootstrap_ci_refuses_what_it_cannot_resample(values: list[float], rounds: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(values, rounds=rounds)


@pytest.mark.parametrize(
    ("numerators", "denominators", "median", "ci95", "pairs"),
    [
        ([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], 2.0, [2.0, 2.0], [2.0, 2.0, 2.0]),
        # per-round ratios 1..5: median 3, interval the exact one of 1..5 above
        ([1.0, 2.0, 3.0, 4.0, 5.0], [1.0] * 5, 3.0, [1.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0]),
        # paired, not a ratio of medians: medians 2 and 2 would say 1.0
        ([1.0, 2.0, 3.0], [3.0, 2.0, 1.0], 1.0, [0.3333, 3.0], [0.3333, 1.0, 3.0]),
        ([1.0, 1.0], [3.0, 3.0], 0.3333, [0.3333, 0.3333], [0.3333, 0.3333]),  # rounded to 4 places
    ],
)
def test_paired_ratio_of_known_pairs(
    numerators: list[float], denominators: list[float], median: float, ci95: list[float], pairs: list[float]
) -> None:
    assert paired_ratio(numerators, denominators) == {
        "median": median, "ci95": ci95, "rounds": len(numerators), "pairs": pairs,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("numerators", "denominators", "message"),
    [
        ([1.0, 2.0], [1.0], "2 numerators but 1 denominators"),
        ([1.0, 2.0], [1.0, 0.0], "round 1's denominator is 0"),
        ([], [], "no values"),
    ],
)
def test_paired_ratio_refuses_rounds_that_do_not_pair(
    numerators: list[float], denominators: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        paired_ratio(numerators, denominators)


def test_now_utc_is_an_iso_time_in_utc_to_the_second() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = dt.datetime.fromisoformat(now_utc())
    assert stamp.utcoffset() == dt.timedelta(0)
    assert stamp.microsecond == 0
    assert before <= stamp <= dt.datetime.now(dt.UTC)
