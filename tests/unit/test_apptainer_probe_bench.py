"""Pure parts of bench/apptainer_probe.py (the probe under Apptainer against bare and a pod): how
it splits the ABBA rounds into lock holds, how it judges 'within 3 %', its paired summaries, and its
rows in the results table."""

from __future__ import annotations

from typing import Any

import pytest

from bench import apptainer_probe, readme_table
from bench.stats import abba_order


def test_lock_holds_keep_each_abba_pair_together() -> None:
    order = abba_order(["apptainer", "bare", "pod"], 5)
    held = apptainer_probe.blocks(order)
    assert [[r for r, _ in block] for block in held] == [[0, 1], [2, 3], [4]]
    assert held[0][0][1] == ["apptainer", "bare", "pod"] and held[0][1][1] == ["pod", "bare", "apptainer"]


@pytest.mark.parametrize(
    ("ci95", "verdict"),
    [
        ((0.98, 1.02), "yes"),
        ((0.97, 1.03), "yes"),
        ((0.90, 0.96), "no"),
        ((1.04, 1.20), "no"),
        ((0.94, 1.48), "interval too wide to tell"),
        ((0.96, 1.01), "not clear"),  # narrower than the goal but over its edge
    ],
)
def test_within_three_percent_is_judged_on_the_whole_interval(ci95: tuple[float, float], verdict: str) -> None:
    assert apptainer_probe.within(ci95) == verdict


def _train(values: dict[str, list[float]], first: dict[str, list[float]]) -> list[dict[str, Any]]:
    return [
        {"round": r, "side": side, "images_per_s": v, "request_to_first_iteration_s": first[side][r], "train_s": 8.0}
        for side, vs in values.items()
        for r, v in enumerate(vs)
    ]


def test_train_summary_pairs_rounds_and_skips_a_half_round() -> None:
    values = {"apptainer": [990.0, 1000.0, 1010.0, 995.0], "bare": [1000.0] * 3, "pod": [1100.0] * 4}
    first = {"apptainer": [1.5] * 4, "bare": [1.0] * 4, "pod": [2.0] * 4}
    summary = apptainer_probe.summarise_train(_train(values, first), ["apptainer", "bare", "pod"])
    # The stopped run's last round has no bare run: only the three whole rounds are paired.
    assert summary["apptainer_over_bare"]["images_per_s"]["rounds"] == 3
    assert summary["apptainer_over_bare"]["images_per_s"]["median"] == pytest.approx(1.0)
    assert summary["apptainer_over_bare"]["images_per_s"]["within_3_percent"] == "yes"
    assert summary["apptainer_over_bare"]["request_to_first_iteration_s_difference"]["median"] == pytest.approx(0.5)
    assert summary["pod_over_apptainer"]["images_per_s"]["rounds"] == 4
    assert summary["pod_over_apptainer"]["images_per_s"]["within_3_percent"] == "no"
    assert summary["runs"] == {"apptainer": 4, "bare": 3, "pod": 4}


def test_without_the_pod_side_there_is_no_platform_ratio() -> None:
    values = {"apptainer": [1000.0] * 2, "bare": [1000.0] * 2}
    first = {"apptainer": [1.0] * 2, "bare": [1.0] * 2}
    summary = apptainer_probe.summarise_train(_train(values, first), ["apptainer", "bare"])
    assert "pod_over_apptainer" not in summary and "apptainer_over_bare" in summary


def test_startup_and_pull_summaries() -> None:
    startup = [{"round": r, "side": s, "seconds": v} for r in range(4)
               for s, v in (("apptainer", 0.30 + r / 100), ("bare", 0.02))]
    s = apptainer_probe.summarise_startup(startup)
    assert s["apptainer_minus_bare_s"]["median"] == pytest.approx(0.295)
    assert s["bare_median_s"] == pytest.approx(0.02)
    pulls = apptainer_probe.summarise_pull([{"round": r, "seconds": 40.0 + r, "sif_bytes": 5} for r in range(3)])
    assert pulls["median_s"] == 41.0 and pulls["min_s"] == 40.0 and pulls["sif_bytes"] == [5]


def _result(with_pod: bool) -> dict[str, Any]:
    values = {"apptainer": [1000.0, 1010.0], "bare": [1000.0, 990.0], **({"pod": [900.0, 950.0]} if with_pod else {})}
    first = {side: [1.0, 1.2] for side in values}
    sides = list(values)
    return {
        "cpus_each": 2,
        "image": {"digest": "sha256:" + "ab" * 32},
        "apptainer": {"version": "apptainer version 1.4.0"},
        "train": {"summary": apptainer_probe.summarise_train(_train(values, first), sides)},
        "startup": {"summary": apptainer_probe.summarise_startup(
            [{"round": r, "side": s, "seconds": v} for r in range(2) for s, v in (("apptainer", 0.3), ("bare", 0.02))]
        )},
    }


def test_rows_name_the_file_say_the_provenance_and_what_was_not_measured() -> None:
    rows = readme_table.apptainer_probe_rows(_result(with_pod=False), "bench/results/apptainer-probe-x.json")
    assert len(rows) == 3
    assert all(how == "`bench/apptainer_probe.py`, `bench/results/apptainer-probe-x.json`" for _, _, how in rows)
    assert "local stand-in" in rows[0][0] and "within 3 %" in rows[0][1]
    assert rows[1][1].startswith("not measured in this run")
    assert "first conversion: not measured in this run" in rows[2][1]
    with_pod = readme_table.apptainer_probe_rows(_result(with_pod=True), "f.json")
    assert "ratio pod/apptainer" in with_pod[1][1]
