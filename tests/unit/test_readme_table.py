"""The table of measured figures in docs/results.md (the README's, before issue 31) and the README's
build times are exactly what bench/readme_table.py renders from the raw JSON in bench/results/: a
figure there can always be traced to the samples it rests on. The renderers are pure: fed a bench's
JSON, they say who won only where the interval says so."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import readme_table


def test_the_readme_table_is_the_one_rendered_from_bench_results() -> None:
    rendered = readme_table.render()
    assert rendered.count("\n") >= 3, "bench/results/ should give rows"
    in_results = readme_table.readme_block(readme_table.RESULTS_DOC.read_text())
    assert in_results == rendered, (
        "docs/results.md is out of step with bench/results/: run `python -m bench.readme_table --write`"
    )


def test_the_readme_build_times_are_the_ones_rendered_from_bench_results() -> None:
    """The README's first screen says what the two commands cost: figures from the CI records only."""
    in_readme = readme_table.readme_block(
        readme_table.README.read_text(), readme_table.TIMES_START, readme_table.TIMES_END
    )
    assert in_readme == readme_table.build_times(), (
        "README.md's build times are out of step with bench/results/: run `python -m bench.readme_table --write`"
    )
    assert "`bench/results/cold-ci-" in in_readme and "`bench/results/warm-ci-" in in_readme


def test_every_row_names_the_file_it_came_from() -> None:
    for line in readme_table.render().splitlines()[2:]:
        assert "`bench/results/" in line, line


def test_the_measured_section_has_no_table_but_the_generated_one() -> None:
    """A hand-written table row is a figure without a raw file (issue 17, item 5)."""
    text = readme_table.RESULTS_DOC.read_text()
    section = text[text.index("## Measured") : text.index("\n## ", text.index("## Measured") + 1)]
    outside = section[: section.index(readme_table.START)] + section[section.index(readme_table.END) :]
    assert [line for line in outside.splitlines() if line.lstrip().startswith("|")] == []


@pytest.mark.parametrize(
    ("ci95", "expected"),
    [
        ([1.02, 1.30], "Atlas faster"),
        ([0.49, 0.92], "**Atlas slower**"),
        ([0.93, 1.04], "no clear winner"),
        ([1.00, 1.10], "no clear winner"),  # touching 1 is not a win
        ([0.90, 1.00], "no clear winner"),
    ],
)
def test_verdict_only_where_the_interval_excludes_one(ci95: list[float], expected: str) -> None:
    assert readme_table.verdict(ci95) == expected


def _ratio(median: float, low: float, high: float, rounds: int = 12) -> dict[str, Any]:
    return {"median": median, "ci95": [low, high], "rounds": rounds, "pairs": [median] * rounds}


LOCAL_VS_SCRIPT = {
    "order": "ABBA",
    "rounds": 12,
    "rounds_planned": 12,
    "median_s": {"atlas": 19.07, "script": 15.57},
    "logins_per_run": {"atlas": [1], "script": [1]},
    "script_over_atlas": _ratio(0.79, 0.49, 0.92),
    "samples": [
        {"side": "atlas", "seconds": 14.8},
        {"side": "atlas", "seconds": 31.7},
        {"side": "script", "seconds": 15.0},
    ],
    "atlas_noop_up_s": [6.049, 4.438, 3.667],
    "machine": {"cpus": 2},
}


@pytest.mark.parametrize(
    ("changes", "present", "absent"),
    [
        (
            {},
            [
                "Atlas **19.07 s** vs script **15.57 s**",
                "**Atlas slower**",
                "14.8 to 31.7 s",
                "no-change `pulumi up` 4.44 s (median of 3: 6.05, 4.44, 3.67 s)",
            ],
            ["rounds planned"],
        ),
        ({"rounds": 7}, ["7 of 12 rounds planned"], []),
        ({"atlas_noop_up_s": []}, ["no-change `pulumi up`: not measured"], ["median of 0"]),
        (
            {"atlas_noop_up_during_steps_s": [7.64, 7.5, 7.09]},
            [
                "4.44 s (median of 3",
                "7.50 s while they still trained on the same 2 cores (median of 3: 7.64, 7.50, 7.09 s)",
            ],
            [],
        ),
        ({"script_over_atlas": _ratio(1.2, 1.1, 1.3)}, ["Atlas faster"], ["Atlas slower"]),
    ],
)
def test_local_vs_script_row(changes: dict[str, Any], present: list[str], absent: list[str]) -> None:
    ((_what, figure, how),) = readme_table.local_vs_script_rows({**LOCAL_VS_SCRIPT, **changes}, "bench/results/x.json")
    for text in present:
        assert text in figure
    for text in absent:
        assert text not in figure
    assert how == "`bench/local_vs_script.py`, `bench/results/x.json`"


COST_NEW = {"min_samples": 8, "runs_counted": 10, "runs_with_fewer_samples": 0, "sample_intervals": 95,
            "pooled_ms": 3.01}  # fmt: skip


def _overhead_side(
    interval: float, wall: dict[str, Any], per_sample: dict[str, Any] | None, share: float,
    cost: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    side = {
        "interval_s": interval,
        "workload_wall_ratio": wall,
        "sampler_percent_of_a_core": {"median": share, "ci95": [share - 0.01, share + 0.01], "n": 12},
        "startup_cpu_s": {"median": 0.105, "ci95": [0.1, 0.11], "n": 12},
        "cpu_per_sample_ms": per_sample,
        "long_step_percent_of_a_core": 0.0594 if per_sample else None,
    }
    return {**side, "cpu_per_sample": cost} if cost is not None else side


@pytest.mark.parametrize(
    ("wall", "per_sample", "share", "cost", "present", "absent"),
    [
        (
            _ratio(1.001, 0.99, 1.01), {"median": 2.97, "n": 10}, 0.061, COST_NEW,
            ["**0.061 %** of a core", "no measurable slowdown",
             "2.97 ms a sample (median of 10 runs of at least 8 samples, 95 sample intervals in all; pooled 3.01 ms), "
             "so a projected 0.059 % on a step long enough for start-up not to count"],
            ["over the goal", "took 2 samples"],
        ),
        (_ratio(1.05, 1.02, 1.08), {"median": 2.97, "n": 10}, 0.061, COST_NEW, ["**slows the step**"],
         ["no measurable"]),
        (   # no run long enough: not measured, and why
            _ratio(1.0, 0.99, 1.01), None, 0.061,
            {**COST_NEW, "runs_counted": 0, "reason": "not measured: no run took 8 samples"},
            ["CPU per sample no run took 8 samples (not measured)"], ["long enough", "0.00 ms"],
        ),
        (   # 2026-12-03's file: the per-sample cost rested on 3 of 10 runs, and the row says so
            _ratio(1.0, 0.99, 1.01), {"median": 5.8, "n": 3}, 1.265, None,
            ["**1.265 %**", "**over the goal**; start-up alone is 1.24 % of a core over a run of 8.5 s",
             "5.80 ms a sample (median of the 3 of 2 runs that took 2 samples or more)"],
            [],
        ),
    ],
)  # fmt: skip
def test_telemetry_overhead_row(
    wall: dict[str, Any], per_sample: dict[str, Any] | None, share: float, cost: dict[str, Any] | None,
    present: list[str], absent: list[str],
) -> None:  # fmt: skip
    data = {
        "workload": {"processes": 19},
        "order": "ABBA",
        "goal_percent_of_a_core": 1.0,
        "summary": {"sampler-5s": _overhead_side(5.0, wall, per_sample, share, cost)},
        "runs": [{"side": "bare", "workload_wall_s": 8.0}, {"side": "bare", "workload_wall_s": 9.0}],
    }
    ((what, figure, _how),) = readme_table.telemetry_overhead_rows(data, "f.json")
    assert "19 processes" in what and "no GPU" in what and "runs of 8.5 s" in what
    assert "goal ≤ 1 % of a core" in figure and "start-up 0.10 s of CPU" in figure
    for text in present:
        assert text in figure
    for text in absent:
        assert text not in figure


def _compare_side(total: float, memory: float, met: bool) -> dict[str, Any]:
    return {
        "median": {"total_s": total, "import_s": 0.69, "collect_and_load_s": 0.27, "metrics_s": 0.1, "render_s": 0.63},
        "memory_bound_mb": memory,
        "goal_met": met,
        "runs": 10,
    }


@pytest.mark.parametrize(("met", "verdict"), [(True, "500 MB: met"), (False, "500 MB: **not met**")])
def test_compare_rows_row(met: bool, verdict: str) -> None:
    data = {
        "rows": 1_000_000,
        "goal": {"total_s": 2.0, "memory_mb": 500.0},
        "sides": {"columns": _compare_side(1.71, 425.0, met), "jsonl-only": _compare_side(4.41, 600.0, False)},
        "jsonl_only_over_columns": _ratio(2.58, 2.4, 2.7, 10),
    }
    ((what, figure, _how),) = readme_table.compare_rows_rows(data, "f.json")
    assert "1,000,000 telemetry rows" in what
    assert figure.startswith("**1.71 s**, 425 MB peak (medians of 10")
    assert verdict in figure and "JSONL alone" in figure and "4.41 s" in figure


def test_warm_bootstrap_rows_say_not_measured_instead_of_zero() -> None:
    missing = {"path": None, "bytes": None, "reason": "not measured: `go env` gave no folder"}
    data = {
        "median_s": 0.2,
        "samples": [{"seconds": 0.18}, {"seconds": 0.2}, {"seconds": 0.25}],
        "disk": {
            "toolchain_bin_links_followed": {"bytes": 681_000_000},
            "toolchain_steps": {"bytes": 2e9},
            "go_module_cache": missing,
            "go_build_cache": {"bytes": 9.4e9},
            "venv": {"bytes": 5.97e8},
        },
    }
    (_, second, _), (_, disk, _) = readme_table.warm_bootstrap_rows(data, "f.json")
    assert second == "**0.20 s** median of 3 (0.18 to 0.25 s)"
    assert "**0.68 GB**" in disk and "Go module cache not measured: `go env` gave no folder" in disk
    assert "0.00 GB" not in disk


def test_language_host_row_names_the_peer_it_could_not_run() -> None:
    data = {
        "rounds": 12,
        "median_s": {"launcher": 0.23, "full-sdk": 0.39},
        "full_sdk_over_launcher": _ratio(1.7, 1.6, 1.8),
        "not_measured": {"upstream pulumi-language-python": "not measured: its Go module cannot be fetched here"},
    }
    ((_, figure, _),) = readme_table.language_host_rows(data, "f.json")
    assert figure.startswith("**0.23 s** (median of 12)")
    assert "upstream's Go plugin not measured: its Go module cannot be fetched here" in figure


def test_sweep_row_says_which_peer_was_not_measured() -> None:
    sides = ("ssh-mux", "array", "ssh-fresh")
    data = {
        "jobs": 50,
        "scheduler": "lsf",
        "median_s": {"atlas": 4.7, **dict.fromkeys(sides, 1.0)},
        "per_job_median_ms": {"atlas": 94.6, **dict.fromkeys(sides, 20.0)},
        "logins_per_sweep": {"atlas": [1], **{s: [1] for s in sides}},
        "baseline_over_atlas": {s: _ratio(0.5, 0.4, 0.6, 10) for s in sides},
        "not_measured": {"submitit": "not measured: submitit has no LSF executor"},
    }
    ((_, figure, _),) = readme_table.hpc_sweep_rows(data, "f.json")
    assert (
        "`map_array` (one job array, submitted from the login node in one `ssh`): not measured: submitit has no"
        in figure
    )
    assert figure.count("**Atlas slower**") == 3


def test_warm_ci_row_says_it_ran_on_warm_caches() -> None:
    data = {
        "total_s": 2084.4,
        "returncode": 0,
        "pytest_result": "930 passed",
        "pytest_s": 1500.0,
        "commit": "abc1234def",
    }
    ((what, figure, how),) = readme_table.warm_ci_rows(data, "bench/results/warm-ci-2026-12-03.json")
    assert "warm caches" in what
    assert figure == "**34 min 44 s**, exit 0: pytest 930 passed in 25 min 0 s"  # the commit: its own column
    assert how == "`bench/cold_ci.py --warm`, `bench/results/warm-ci-2026-12-03.json`"


COLD_CI = {
    "bootstrap_phases_s": {"venv": 38.0, "pulumi compile": 180.0, "total": 930.0},
    "bootstrap_s": 935,
    "goals_s": {"bootstrap": 1200, "total": 3600},
    "total_s": 2940.0,
    "returncode": 0,
    "pytest_result": "1519 passed",
    "pytest_s": 1980.0,
    "commit": "2e07b4e0123",
}


@pytest.mark.parametrize(
    ("apt", "says"),
    [
        ({"asked_for": ["chromium", "slurmctld"], "packages_with_dependencies": 212},
         "installed by the run with apt-get too (chromium, slurmctld: 212 packages with their dependencies)"),
        ({"asked_for": [], "packages_with_dependencies": 0}, "were already on the machine"),
        ("not recorded: apt's history not read", "apt-get: not recorded: apt's history not read"),
        (None, "were already on the machine"),
    ],
)
def test_cold_ci_row_says_whether_the_run_installed_the_debian_packages(apt: Any, says: str) -> None:
    data = dict(COLD_CI, apt_installed_by_run=apt) if apt is not None else COLD_CI
    _, (what, figure, _) = readme_table.cold_ci_rows(data, "bench/results/cold-ci-2026-12-05.json")
    assert says in what
    assert figure.startswith(
        "**49 min 0 s** (goal ≤ 60 min 0 s), exit 0: pytest 1519 passed in 33 min 0 s"
    )


# -- where each row ran: commit and machine (issue 34, item 1) ------------------------------------

MACHINE = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpus": 2, "memory_bytes": 25276203008,
           "kernel": "6.18.44-fc-v1252", "host_id": "026cc04052275a41", "boot_id": "f6841de51fca8452"}  # fmt: skip
OLD_MACHINE = {"cpus": 2, "kernel": "6.18.44-fc-v1147", "python": "3.11.7"}
HISTORY = {("1111111aaaa", "bench/x.py"): 0, ("2222222bbbb", "bench/x.py"): 3, ("3333333cccc", "bench/x.py"): 1}


def _changes(commit: str, path: str) -> int | None:
    return HISTORY.get((commit, path))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"commit": "1111111aaaa", "tree_dirty": False, "machine": MACHINE},
            "commit 1111111; Intel Xeon Processor, 2 cores, 24 GiB, host 026cc0, boot f6841d",
        ),
        (
            {"commit": "2222222bbbb", "tree_dirty": False, "machine": MACHINE},
            "commit 2222222 (**older than the bench**: `bench/x.py` changed in 3 commits since); Intel Xeon "
            "Processor, 2 cores, 24 GiB, host 026cc0, boot f6841d",
        ),
        (
            {"commit": "3333333cccc", "machine": OLD_MACHINE},
            "commit 3333333 (**older than the bench**: `bench/x.py` changed in 1 commit since); 2 cores, kernel "
            "6.18.44-fc-v1147, CPU model and host id not recorded",
        ),
        (
            {"commit": "05489df0000", "machine": MACHINE},
            "commit 05489df (**not in this repository's history**: whether `bench/x.py` changed since is "
            "unknown); Intel Xeon Processor, 2 cores, 24 GiB, host 026cc0, boot f6841d",
        ),
        (
            {"commit": "1111111aaaa", "tree_dirty": True, "changed_paths": ["bench/x.py", "README.md"],
             "machine": MACHINE},
            "commit 1111111, with uncommitted changes (`bench/x.py` among them); Intel Xeon Processor, 2 cores, "
            "24 GiB, host 026cc0, boot f6841d",
        ),
        (
            {"commit": "1111111aaaa", "tree_dirty": True, "changed_paths": ["README.md"], "machine": MACHINE},
            "commit 1111111, with uncommitted changes to 1 other file; Intel Xeon Processor, 2 cores, 24 GiB, "
            "host 026cc0, boot f6841d",
        ),
        ({"machine": OLD_MACHINE}, "commit not recorded; 2 cores, kernel 6.18.44-fc-v1147, CPU model and host id "
                                   "not recorded"),
        (
            {"commit": None, "commit_source": "not recorded: no git checkout here (git: not found) and no "
             "ATLAS_BENCH_COMMIT_FILE", "machine": MACHINE},
            "commit not recorded (no git checkout here (git: not found) and no ATLAS_BENCH_COMMIT_FILE); Intel "
            "Xeon Processor, 2 cores, 24 GiB, host 026cc0, boot f6841d",
        ),
        ({}, "commit not recorded; machine not recorded"),
    ],
)  # fmt: skip
def test_origin_names_the_commit_flags_a_stale_one_and_names_the_machine(data: dict[str, Any], expected: str) -> None:
    assert readme_table.origin(data, "bench/x.py", _changes) == expected


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_changes_since_counts_the_commits_that_touched_the_bench(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    commits = []
    for n, path in enumerate(["bench/x.py", "bench/y.py", "bench/x.py", "README.md"]):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(f"{n}\n")
        _git(tmp_path, "add", path)
        _git(tmp_path, "commit", "-q", "-m", str(n))
        commits.append(_git(tmp_path, "rev-parse", "HEAD"))
    assert readme_table.git_changes_since(commits[0], "bench/x.py", tmp_path) == 1
    assert readme_table.git_changes_since(commits[0], "bench/y.py", tmp_path) == 1
    assert readme_table.git_changes_since(commits[2], "bench/x.py", tmp_path) == 0
    assert readme_table.git_changes_since(commits[-1], "bench/x.py", tmp_path) == 0
    assert readme_table.git_changes_since("0" * 40, "bench/x.py", tmp_path) is None


GOLDEN_TABLE = Path(__file__).parent / "golden" / "bench-table.md"


def test_the_table_renders_each_kinds_newest_file_with_its_origin(tmp_path: Path) -> None:
    """Golden: the columns, the newest file of a kind chosen, a stale commit flagged, an old file's gaps said.
    Regenerate after an intended change: ATLAS_UPDATE_GOLDEN=1 pytest tests/unit/test_readme_table.py"""
    warm = {"bench": "warm_ci", "total_s": 2084.4, "returncode": 0, "pytest_result": "930 passed", "pytest_s": 1500.0}
    files = {
        "warm-ci-2026-12-05.json": {**warm, "date": "2026-12-05T04:34:04+00:00", "commit": "1111111aaaa",
                                    "tree_dirty": False, "machine": MACHINE},
        "warm-ci-2026-12-05b.json": {**warm, "date": "2026-12-05T16:13:19+00:00", "total_s": 2894.0,
                                     "commit": "2222222bbbb", "tree_dirty": False, "machine": MACHINE},
        "language-host-start-2026-12-03.json": {
            "date": "2026-12-03T18:53:40+00:00", "machine": OLD_MACHINE, "rounds": 12,
            "median_s": {"launcher": 0.13, "full-sdk": 0.2}, "full_sdk_over_launcher": _ratio(1.58, 1.47, 1.74),
        },
    }  # fmt: skip
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    history = {("2222222bbbb", "bench/cold_ci.py"): 2}
    rendered = readme_table.render(tmp_path, lambda commit, path: history.get((commit, path))) + "\n"
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        GOLDEN_TABLE.write_text(rendered)
    assert rendered == GOLDEN_TABLE.read_text()
    assert "2026-12-05b.json" in rendered and "warm-ci-2026-12-05.json" not in rendered


# -- claims only where the file carries them (issue 34, item 2) ----------------------------------

NEW_SPEED = {
    "images_per_iteration": 256, "images_basis": "batch_size 64 x num_D_steps 1 x num_D_accumulations 4",
    "iterations_logged": 154, "overall_window_start": "train.py's 'Beginning training at epoch 0...' line",
    "overall_window_s": 156.99, "overall_iterations": 154, "overall_images_per_s": 251.12,
    "first_iteration_after_start_s": 35.69, "logged_window_images_per_s": 322.9,
    "steady_median_s_per_iteration": 0.581, "steady_intervals": 143, "steady_images_per_s": 440.59,
}  # fmt: skip
OLD_KEYS = ("images_per_iteration", "images_basis", "iterations_logged", "steady_median_s_per_iteration",
            "steady_intervals", "steady_images_per_s")  # fmt: skip
OLD_SPEED = {**{k: NEW_SPEED[k] for k in OLD_KEYS}, "overall_images_per_s": 322.9}
SAMPLER = {"percent_of_a_core": 1.4606, "interval_s": 1.0, "per_sample_ms": 13.75, "samples": 182,
           "percent_of_a_core_at_workload_interval": 0.2751, "workload_interval_s": 5.0}  # fmt: skip


def _biggan(speed: dict[str, Any], sampler: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine": {"gpus": ["NVIDIA H200, 143771 MiB, 580.159.04"]},
        "source": {"commit": "8a6984cfabd1792cd186598372ae6fa6b499ea37", "patch": "biggan-torch2.patch"},
        "sampler_goal_percent_of_a_core": 1.0,
        "train_speed": speed,
        "steps": [{"step": "train", "exit_code": 0, "gpu_utilization_percent_mean": 36.8, "sampler": sampler}],
        "notes": ["Data imagenet-train: 1797 images of 128 px in 10 classes, made at run time.",
                  "Differs from the full run: train arg --G_ch: 96 -> 32."],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("speed", "sampler", "present", "absent"),
    [
        (
            NEW_SPEED, SAMPLER,
            ["**251 images/s overall**, from the start of training (train.py's 'Beginning training at epoch 0...' "
             "line) to the last of 154 iterations, 157.0 s, the first `itr:` line 35.7 s after the start",
             "323 images/s between the first and last logged iteration",
             "sampler **1.46 %** of a core measured at the 1 s interval used (start-up included; **over** the 1 % "
             "goal)",
             "projection, not measured, for the workload's 5 s interval: 0.275 % (13.8 ms a sample over 182 samples"],
            ["first epoch and evaluation included"],
        ),
        (   # a file read before the start of training was: no overall rate claimed from it
            OLD_SPEED, SAMPLER,
            ["323 images/s between the first and last of 154 logged iterations (this file has no start of "
             "training"],
            ["overall**", "251"],
        ),
        (NEW_SPEED, {**SAMPLER, "percent_of_a_core": 0.8}, ["**0.80 %** of a core", "within the 1 % goal"],
         ["**over**"]),
        (NEW_SPEED, {}, ["sampler cost not measured"], ["projection"]),
        (
            NEW_SPEED, {k: v for k, v in SAMPLER.items() if k != "per_sample_ms"},
            ["**1.46 %**"], ["projection"],
        ),
    ],
)  # fmt: skip
def test_biggan_row_says_the_overall_window_and_labels_a_projection(
    speed: dict[str, Any], sampler: dict[str, Any], present: list[str], absent: list[str]
) -> None:
    ((what, figure, _),) = readme_table.biggan_h200_rows(_biggan(speed, sampler), "f.json")
    assert "one NVIDIA H200 (BigGAN-PyTorch 8a6984c with biggan-torch2.patch" in what
    assert "1797 images" in what and "--G_ch 96 -> 32" in what
    assert figure.startswith("**441 images/s** steady (median 0.581 s an iteration over 143 intervals)")
    for text in present:
        assert text in figure
    for text in absent:
        assert text not in figure


def test_sweep_row_claims_a_split_of_atlas_time_only_where_the_file_has_one() -> None:
    data = {
        "jobs": 50, "scheduler": "lsf",
        "median_s": {"atlas": 6.24, "ssh-mux": 6.02}, "per_job_median_ms": {"atlas": 124.9, "ssh-mux": 120.4},
        "logins_per_sweep": {"atlas": [1], "ssh-mux": [1]}, "baseline_over_atlas": {"ssh-mux": _ratio(0.96, 0.9, 1.07)},
        "profile_ms": {"atlas run_remote(submission)": {"median_ms": 109.1, "samples_ms": [1.0] * 30},
                       "openssh over ControlMaster, submission": {"median_ms": 116.5}},
    }  # fmt: skip
    ((_, without, _),) = readme_table.hpc_sweep_rows(data, "f.json")
    assert "one submission alone: Atlas **109.1 ms** vs `ssh` over ControlMaster 116.5 ms (medians of 30)" in without
    assert "does not split Atlas's sweep time" in without
    assert "fixed cost" not in without and "sweep split" not in without
    split = {"login and staging": 0.12, "submissions": 0.43, "status query": 0.23}
    ((_, with_split, _),) = readme_table.hpc_sweep_rows({**data, "atlas_phase_median_s": split}, "f.json")
    assert "Atlas's sweep split (medians): login and staging 0.12 s, submissions 0.43 s, status query 0.23 s" in (
        with_split
    )
    assert "does not split" not in with_split


def _phase(period: float, fraction: float) -> dict[str, Any]:
    return {"name": f"{fraction:.0%} busy, {period:g} s cycles", "period_s": period, "busy_fraction": fraction}


@pytest.mark.parametrize(
    ("phases", "says"),
    [
        ([_phase(p, f) for p in (0.1, 2.5) for f in (0.27, 0.55, 0.84)], "6 phases, busy 27/55/84 % in 0.1 and 2.5 s"),
        ([_phase(p, f) for p in (0.1, 0.7, 1.0, 2.5) for f in (0.27, 0.84)],
         "8 phases, busy 27/84 % in 0.1, 0.7, 1 and 2.5 s cycles"),
        ([_phase(1.0, 0.5)], "1 phases, busy 50 % in 1 s cycles"),
    ],
)  # fmt: skip
def test_gpu_check_row_names_the_phases_the_file_ran(phases: list[dict[str, Any]], says: str) -> None:
    summary = {p["name"]: {"mean_error_points": -0.5, "goal_met": True} for p in phases}
    data = {"interval_s": 1.0, "gpu": "NVIDIA H200", "goal_points": 2.0, "phases": phases,
            "sampler": {"summary": summary}, "instant_nvml": {"summary": summary}}  # fmt: skip
    ((what, figure, _),) = readme_table.gpu_check_rows(data, "f.json")
    assert says in what
    assert f"met in {len(phases)} of {len(phases)}; NVML's" in figure and "missed" not in figure
    summary[phases[0]["name"]] = {"mean_error_points": 2.2, "goal_met": False}
    ((_, figure, _),) = readme_table.gpu_check_rows(data, "f.json")
    assert f"met in {len(phases) - 1} of {len(phases)}; **missed**: {phases[0]['name']} (+2.2); NVML's" in figure


@pytest.mark.parametrize(
    ("phases", "says", "absent"),
    [
        ({"venv": 38.0, "pulumi compile": 180.0, "etcd fetch": 6.0, "total": 930.0},
         "venv 38 s, compiles pulumi 3 min 0 s, the other 1 phases 6 s together", "overlap"),
        ({"venv": 36.0, "pulumi compile": 600.0, "pulumi fetch": 40.0, "kubernetes compile": 300.0, "total": 855.0},
         "the phases overlap (their sum 16 min 16 s exceeds the total)", "downloads run"),
    ],
)  # fmt: skip
def test_cold_bootstrap_row_claims_overlap_only_where_the_phases_show_it(
    phases: dict[str, float], says: str, absent: str
) -> None:
    (_, figure, _), _ = readme_table.cold_ci_rows({**COLD_CI, "bootstrap_phases_s": phases}, "f.json")
    assert says in figure and absent not in figure


def test_biggan_row_shows_the_steady_split_and_a_stopped_step() -> None:
    data = _biggan(NEW_SPEED, SAMPLER)
    data["steps"][0].update(exit_code=143, state="Stopped (the driver's time limit)")
    window = {"window": "steady (epochs from the second, not profiled)", "iterations": 89, "first_itr": 65,
              "last_itr": 153, "share_percent": {"data_s": 0.4, "copy_s": 0.1, "compute_s": 90.0, "after_s": 9.5},
              "gpu_busy_percent_mean": 91.86}  # fmt: skip
    data["iteration_timing"] = {"windows": [{**window, "window": "first epoch"}, window]}
    ((_, figure, _),) = readme_table.biggan_h200_rows(data, "f.json")
    assert "steady state (iterations 65 to 153, from the training process): data wait 0.4 %, compute 90.0 %" in figure
    assert "GPU busy **91.9 %**" in figure and "train exit 143 (stopped at the driver's time limit)" in figure
    window["gpu_busy_percent_mean"] = None
    ((_, figure, _),) = readme_table.biggan_h200_rows(data, "f.json")
    assert "GPU busy not measured (no sampler samples in the window)" in figure
    del data["iteration_timing"]
    ((_, figure, _),) = readme_table.biggan_h200_rows(data, "f.json")
    assert "steady state" not in figure


def test_one_bench_two_scales_each_its_own_row(tmp_path: Path) -> None:
    for name, environment in (("biggan-h200-a.json", "h200"), ("biggan-h200-b-seed.json", "h200-seed")):
        data = {**_biggan(NEW_SPEED, SAMPLER), "environment": environment, "run_id": f"{environment}-20261205T000000Z"}
        (tmp_path / name).write_text(json.dumps(data))
    table = readme_table.render(tmp_path, changes_since=lambda *_: None)
    assert "biggan-h200-a.json" in table
    assert "biggan-h200-b-seed.json" in table


@pytest.mark.parametrize(("bootstrap_date", "figure", "says", "listed"), [
    # A bootstrap alone, newer than the cold CI: its figure, and the fresh run's estimate over the goal.
    ("2026-12-06", "**32 min 30 s**", "(2026-12-06, Apptainer included)", True),
    # Older than the cold CI's own bootstrap: the cold CI's stands, and the file is not cited.
    ("2026-12-01", "**14 min 15 s**", "(2026-12-04)", False),
])
def test_build_times_take_the_newest_cold_bootstrap(
    tmp_path: Path, bootstrap_date: str, figure: str, says: str, listed: bool
) -> None:
    files = {
        "cold-ci-2026-12-04.json": {"date": "2026-12-04T10:00:00Z", "machine": {"cpus": 2},
                                    "bootstrap_phases_s": {"total": 855.0}, "bootstrap_s": 855.0,
                                    "total_s": 2631.0, "pytest_result": "1522 passed"},
        "warm-ci-2026-12-05.json": {"date": "2026-12-05T10:00:00Z", "total_s": 2500.0, "pytest_result": "2515 passed"},
        f"cold-bootstrap-{bootstrap_date}.json": {"date": f"{bootstrap_date}T01:00:00Z", "cold_total_s": 1950.0,
                                                  "phases_s": {"apptainer compile": 330.0, "total": 1950.0}},
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    times = readme_table.build_times(tmp_path)
    assert f"builds the toolchain from source: {figure}" in times and says in times, times
    assert (f"cold-bootstrap-{bootstrap_date}.json" in times) is listed, times
    # 41 min 40 s warm + 32 min 30 s is over an hour; + 14 min 15 s is under.
    assert ("over the one-hour goal" in times) is listed, times


@pytest.mark.parametrize(("total", "over"), [(1950.0, True), (855.0, False)])
def test_cold_bootstrap_row_says_when_it_is_over_its_goal(total: float, over: bool) -> None:
    data = {"phases_s": {"venv": 66.0, "pulumi-resource-kubernetes compile": 551.0, "apptainer compile": 330.0,
                         "etcd fetch": 19.0, "total": total},
            "cold_total_s": total, "goal_s": 1200, "command_line": ["python", "-m", "bench.cold_bootstrap", "--record"]}
    ((what, figure, source),) = readme_table.cold_bootstrap_rows(data, "bench/results/cold-bootstrap-x.json")
    assert "(Apptainer included)" in what and "recorded from its log" in what
    assert f"**{readme_table._minutes(total)}**" in figure
    assert ("**over the goal**" in figure) is over, figure
    assert "pulumi-resource-kubernetes 9 min 11 s" in figure and source.endswith("cold-bootstrap-x.json`")
