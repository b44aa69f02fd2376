"""Pure parts of bench/sweep_arrays.py (a sweep as one job array against the hand-made one and
submitit): the swept workload it stands up, how it judges the issue's goal, and its rows in the
results table."""

from __future__ import annotations

from typing import Any

import pytest

from bench import readme_table, sweep_arrays, sweep_kube
from infra.hpc.registry import scheduler_for
from infra.workload.parse import parse_workload
from infra.workload.sweep import point_count, split_points


@pytest.mark.parametrize("points", [10, 50, 1000])
@pytest.mark.parametrize("scheduler", ["lsf", "slurm"])
def test_the_bench_workload_sweeps_its_points_as_one_array(points: int, scheduler: str) -> None:
    workload = parse_workload(sweep_arrays.workload_definition(points))
    (step,) = workload.steps
    assert step.sweep is not None and point_count(step.sweep) == points
    # One array at the site's default limit: the hand-made side submits one script.
    assert len(split_points(points, scheduler_for(scheduler).array_size_limit, step.sweep.parallel)) == 1


def _samples(seconds: dict[str, list[float]]) -> list[dict[str, Any]]:
    return [
        {"round": r, "side": side, "seconds": value, "logins": 1}
        for side, values in seconds.items()
        for r, value in enumerate(values)
    ]


def test_the_goal_is_judged_on_the_interval_of_the_paired_ratio() -> None:
    rounds = 6
    seconds = {
        "atlas-up": [5.0] * rounds,  # 10x the array: not within 1.2x, behind submitit
        "atlas-create": [0.55, 0.56, 0.54, 0.55, 0.57, 0.55],  # 1.1x: within, ahead of submitit
        "array": [0.5] * rounds,
        "submitit": [0.8] * rounds,
    }
    result = sweep_arrays.summarise(_samples(seconds), "slurm", 50, rounds)
    assert result["goal"]["atlas-up"] == {
        "within_1.2x_of_array": "no",
        "atlas_over_array_median": 10.0,
        "ahead_of_submitit": "no",
    }
    assert result["goal"]["atlas-create"]["within_1.2x_of_array"] == "yes"
    assert result["goal"]["atlas-create"]["ahead_of_submitit"] == "yes"
    assert result["baseline_over_atlas"]["atlas-up"]["array"]["median"] == pytest.approx(0.1)


def test_lsf_has_no_submitit_side_and_says_why() -> None:
    rounds = 4
    seconds = {"atlas-up": [5.0] * rounds, "atlas-create": [1.25] * rounds, "array": [0.5] * rounds}
    result = sweep_arrays.summarise(_samples(seconds), "lsf", 1000, rounds)
    assert result["sides"] == ["atlas-up", "atlas-create", "array"]
    assert "submitit" not in result["baseline_over_atlas"]["atlas-up"]
    assert "ahead_of_submitit" not in result["goal"]["atlas-create"]
    ((what, figure, how),) = readme_table.sweep_arrays_rows(result, "f.json")
    assert what.startswith("1000-point sweep as one job array on the local Satori, LSF's command set (stand-in)")
    assert "submitit's `map_array` (one `ssh`): not measured: submitit has no LSF executor" in figure
    assert figure.count("**Atlas slower**") == 2
    assert "goal (within 1.2x of the hand-made array): `pulumi up` no (10.00x), the providers no (2.50x)" in figure
    assert how == "`bench/sweep_arrays.py`, `f.json`"


def test_preview_row_sets_the_large_sweep_against_the_small() -> None:
    data = {
        "scheduler": "slurm",
        "points": [10, 1000],
        "preview_median_s": {"10": 2.0, "1000": 2.2},
        "preview_large_over_small": {"median": 1.1, "ci95": [1.05, 1.15], "rounds": 6, "pairs": [1.1] * 6},
        "state": {
            "10": {"bytes": 20_000, "resources": 5, "bytes_by_type": {"SweepJob": 5000, "StagedFiles": 9000}},
            "1000": {"bytes": 40_000, "resources": 5, "bytes_by_type": {"SweepJob": 6000, "StagedFiles": 28000}},
        },
        "state_large_over_small": 2.0,
    }
    ((what, figure, _),) = readme_table.sweep_preview_rows(data, "f.json")
    assert "sweeps 1000 points against 10" in what
    assert figure.startswith("preview **2.20 s** against 2.00 s: ratio 1.10 (95 % CI 1.05 to 1.15, 6 rounds)")
    assert "state **40.0 kB** against 20.0 kB (2.00x)" in figure
    assert figure.endswith("StagedFiles 28.0 kB, SweepJob 6.0 kB")


def test_the_kubernetes_sides_share_one_pod_template_and_differ_in_how_the_index_comes() -> None:
    config_map, indexed = sweep_kube.manifests(1000, "ns")
    assert config_map["data"]["points"].count("\n") >= 999  # one line per point
    spec = indexed["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 1000, 1000)
    single = sweep_kube.one_job(indexed, 7)
    assert single["metadata"]["name"] == "sweep-train-7" and "completionMode" not in single["spec"]
    assert (single["spec"]["completions"], single["spec"]["parallelism"]) == (1, 1)
    env = {e["name"]: e.get("value") for e in single["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ATLAS_SWEEP_INDEX"] == env["JOB_COMPLETION_INDEX"] == "7"
    # Everything but the index is the Indexed Job's pod.
    same = single["spec"]["template"]["spec"]["containers"][0]["args"]
    assert same == spec["template"]["spec"]["containers"][0]["args"]
    assert indexed["spec"]["completionMode"] == "Indexed"  # the original is left as it was
