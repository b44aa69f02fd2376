"""A step's sweep: its expansion (a stable order), its refusals (each naming the key and the fix), the split
at a site's array limit, and its renderings: the LSF and Slurm array scripts and the Kubernetes Indexed
Job, pinned by golden files (tests/unit/golden/) and run here by the shell for every element.

Regenerate the golden files after an intended change:
ATLAS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_sweep.py, and review the diff like code.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.hpc.job_script import SubmissionKey, render_array_script, sweep_scripts, table_path
from infra.hpc.registry import SCHEDULER_NAMES, scheduler_for
from infra.hpc.scheduler import JobSpec
from infra.openshift.manifests.sweep_jobs import indexed_step_job, point_program
from infra.toolchain.pins import REPO_ROOT
from infra.workload.load import load_workload
from infra.workload.model import Sweep, WorkloadError
from infra.workload.parse import parse_workload
from infra.workload.render import render_step
from infra.workload.sweep import (
    MAX_SWEEP_POINTS,
    ArrayChunk,
    expand_sweep,
    point_args,
    point_at,
    point_env,
    points_table,
    split_points,
    value_text,
)
from infra.workload_check import kubernetes_context
from infra.workload_check import main as workload_check

GOLDEN = Path(__file__).parent / "golden"
PROBE_SWEEP = load_workload(REPO_ROOT / "workloads" / "probe" / "sweep.yaml")
RUN = SubmissionKey("atlas", "local", "satori", "1", "atlas-runs/satori/probe")


def definition(sweep: Any, **step: Any) -> dict[str, Any]:
    """A two-step definition whose second step (`train`, steps[1]) declares `sweep`."""
    resources = {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "1Gi", "walltime": "00:10:00"}
    return {
        "version": 1,
        "name": "demo",
        "source": {"folder": "."},
        "data": {"outputs": [{"name": "packed", "path": "data/packed.txt"}]},
        "steps": [
            {"name": "pack", "command": ["sh", "pack.sh"], "outputs": ["packed"], "resources": resources},
            {
                "name": "train",
                "command": ["sh", "train.sh"],
                "args": ["--epochs", 3],
                "inputs": ["packed"],
                "resources": resources,
                "sweep": sweep,
                **step,
            },
        ],
        "logs": {"root": "logs"},
        "telemetry": {"root": "telemetry"},
    }


def swept(sweep: Any, **step: Any) -> Sweep:
    result = parse_workload(definition(sweep, **step)).step("train").sweep
    assert result is not None
    return result


# --- expansion: a stable order ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        # grid: the first name varies slowest, the last fastest (nested loops, top to bottom)
        ({"grid": {"lr": ["a", "b"], "seed": [1, 2]}}, [("a", 1), ("a", 2), ("b", 1), ("b", 2)]),
        ({"grid": {"seed": [1, 2], "lr": ["a", "b"]}}, [(1, "a"), (1, "b"), (2, "a"), (2, "b")]),
        ({"grid": {"x": [3, 1, 2]}}, [(3,), (1,), (2,)]),
        ({"grid": {"a": [0, 1], "b": [0, 1, 2], "c": [7]}},
         [(0, 0, 7), (0, 1, 7), (0, 2, 7), (1, 0, 7), (1, 1, 7), (1, 2, 7)]),
        # zip: the i-th of each
        ({"zip": {"lr": ["a", "b", "c"], "seed": [1, 2, 3]}}, [("a", 1), ("b", 2), ("c", 3)]),
        # points: as written, in the first point's name order
        ({"points": [{"lr": "a", "seed": 9}, {"seed": 1, "lr": "b"}]}, [("a", 9), ("b", 1)]),
    ],
)  # fmt: skip
def test_points_expand_in_a_stable_order(section: dict[str, Any], expected: list[tuple[Any, ...]]) -> None:
    sweep = swept(section)
    points = expand_sweep(sweep)
    assert [tuple(v for _, v in p.values) for p in points] == expected
    assert [p.index for p in points] == list(range(len(expected)))
    # point_at computes any one directly (no expansion), the same point.
    assert [point_at(sweep, i) for i in range(len(expected))] == list(points)
    with pytest.raises(IndexError):
        point_at(sweep, len(expected))


def test_a_grid_of_ten_thousand_points_is_expanded_in_order() -> None:
    sweep = swept({"grid": {"a": list(range(100)), "b": list(range(100))}})
    points = expand_sweep(sweep)
    assert len(points) == MAX_SWEEP_POINTS
    assert points[0].values == (("a", 0), ("b", 0)) and points[-1].values == (("a", 99), ("b", 99))
    assert point_at(sweep, 4321) == points[4321] and points[4321].values == (("a", 43), ("b", 21))


@pytest.mark.parametrize(
    ("value", "text"),
    [("1e-4", "1e-4"), (0.001, "0.001"), (1.0e-5, "1e-05"), (3, "3"), (True, "true"), (False, "false"), ("a b", "a b")],
)
def test_each_value_reaches_the_program_as_this_text(value: Any, text: str) -> None:
    assert value_text(value) == text


def test_a_point_gets_its_options_index_folder_and_variables() -> None:
    sweep = swept({"grid": {"lr": ["1e-4", "2e-4"], "seed": [0, 1]}, "parallel": 2})
    point = expand_sweep(sweep)[3]
    assert point_args(sweep, point) == ("--lr", "2e-4", "--seed", "1")
    assert dict(point_env(sweep, point)) == {
        "ATLAS_SWEEP_INDEX": "3",
        "ATLAS_SWEEP_SIZE": "4",
        "ATLAS_SWEEP_DIR": "results/train/point-3",
        "ATLAS_SWEEP_LR": "2e-4",
        "ATLAS_SWEEP_SEED": "1",
    }
    assert sweep.parallel == 2 and sweep.results == "results/train"


def test_an_args_template_places_the_values_and_the_points_own() -> None:
    sweep = swept(
        {
            "zip": {"lr": ["1e-4", "2e-4"]},
            "args": ["--lr={lr}", "--out", "{dir}/model.pt", "--tag", "{index}of{size}", "{{x}}"],
            "results": "sweeps/lr",
        }
    )
    assert point_args(sweep, expand_sweep(sweep)[1]) == (
        "--lr=2e-4",
        "--out",
        "sweeps/lr/point-1/model.pt",
        "--tag",
        "1of2",
        "{x}",
    )


def test_the_table_holds_one_line_of_shell_assignments_per_point() -> None:
    sweep = swept({"points": [{"name": "it's", "n": 1}, {"name": "a b", "n": 2}]})
    assert (
        points_table(sweep) == "ATLAS_SWEEP_NAME='it'\"'\"'s' ATLAS_SWEEP_N=1\nATLAS_SWEEP_NAME='a b' ATLAS_SWEEP_N=2\n"
    )


# --- refusals: each names the key and the fix -------------------------------------------------------


@pytest.mark.parametrize(
    ("sweep", "step", "key", "fix"),
    [
        ({}, {}, "steps[1].sweep", "choose one: grid"),
        ({"grid": {}}, {}, "steps[1].sweep.grid", "at least one"),
        ({"grid": {"lr": []}}, {}, "steps[1].sweep.grid.lr", "write lr: [value, ...]"),
        ({"points": []}, {}, "steps[1].sweep.points", "one `{name: value, ...}` per point"),
        ({"grid": {"lr": [1]}, "zip": {"lr": [1]}}, {}, "steps[1].sweep", "choose one"),
        ({"grid": {"lr": [[1, 2]]}}, {}, "steps[1].sweep.grid.lr[0]", "one value per item"),
        ({"grid": {"lr": [{"a": 1}]}}, {}, "steps[1].sweep.grid.lr[0]", "one value per item"),
        ({"grid": {"lr": [None]}}, {}, "steps[1].sweep.grid.lr[0]", "one value per item"),
        ({"grid": {"lr": [float("nan")]}}, {}, "steps[1].sweep.grid.lr[0]", "finite number"),
        ({"grid": {"lr": ["$HOME"]}}, {}, "steps[1].sweep.grid.lr[0]", "write the value out"),
        ({"grid": {"lr": ["a\nb"]}}, {}, "steps[1].sweep.grid.lr[0]", "keep it on one line"),
        ({"grid": {"lr": [1, 2, 1]}}, {}, "steps[1].sweep.grid.lr[2]", "list each value once"),
        ({"points": [{"a": 1}, {"a": 1}]}, {}, "steps[1].sweep.points[1]", "list each point once"),
        ({"zip": {"lr": [1, 2, 3], "seed": [1, 2]}}, {}, "steps[1].sweep.zip.seed", "the same length"),
        ({"points": [{"a": 1}, {"b": 2}]}, {}, "steps[1].sweep.points[1]", "the same names"),
        ({"grid": {"learning-rate": [1]}}, {}, "steps[1].sweep.grid.learning-rate", "a letter, then"),
        ({"grid": {"1x": [1]}}, {}, "steps[1].sweep.grid.1x", "a letter, then"),
        ({"grid": {"index": [1]}}, {}, "steps[1].sweep.grid.index", "rename it"),
        ({"grid": {"lr": [1], "LR": [2]}}, {}, "steps[1].sweep.grid.LR", "not only a different case"),
        # a clash with the step's own arguments or environment names both
        ({"grid": {"epochs": [1, 2]}}, {}, "steps[1].sweep.grid.epochs", "remove --epochs from steps[1].args"),
        ({"zip": {"epochs": [1, 2]}}, {}, "steps[1].sweep.zip.epochs", "steps[1].args[0]"),
        ({"grid": {"lr": [1]}, "args": ["--epochs={lr}"]}, {}, "steps[1].sweep.args[0]", "remove --epochs"),
        ({"grid": {"lr": [1]}}, {"env": {"ATLAS_SWEEP_LR": "x"}}, "steps[1].env.ATLAS_SWEEP_LR", "rename the variable"),
        ({"grid": {"a": list(range(101)), "b": list(range(100))}}, {}, "steps[1].sweep", "10,100 points (101 x 100)"),
        ({"grid": {"lr": [1]}, "parallel": 0}, {}, "steps[1].sweep.parallel", "a number >= 1"),
        ({"grid": {"lr": [1]}, "parallel": True}, {}, "steps[1].sweep.parallel", "write a number"),
        ({"grid": {"lr": [1]}, "metric": {"pattern": "loss [0-9.]+", "goal": "min"}}, {},
         "steps[1].sweep.metric.pattern", "capture the number once"),
        ({"grid": {"lr": [1]}, "metric": {"pattern": "(a) (b)", "goal": "min"}}, {},
         "steps[1].sweep.metric.pattern", "capture the number once"),
        ({"grid": {"lr": [1]}, "metric": {"pattern": "(", "goal": "min"}}, {},
         "steps[1].sweep.metric.pattern", "fix it"),
        ({"grid": {"lr": [1]}, "metric": {"pattern": "(x)", "goal": "best"}}, {}, "steps[1].sweep.metric.goal", "min"),
        ({"grid": {"lr": [1]}, "metric": {"goal": "min"}}, {}, "steps[1].sweep.metric", "choose one"),
        ({"grid": {"lr": [1]}, "metric": {"file": "/abs", "goal": "max"}}, {},
         "steps[1].sweep.metric.file", "relative"),
        ({"grid": {"lr": [1]}, "args": ["{nope}"]}, {}, "steps[1].sweep.args[0]", "use one of {lr}"),
        ({"grid": {"lr": [1]}, "args": ["{lr:.2f}"]}, {}, "steps[1].sweep.args[0]", "write {lr} alone"),
        ({"grid": {"lr": [1]}, "args": ["{lr"]}, {}, "steps[1].sweep.args[0]", "{{ or }}"),
        ({"grid": {"lr": [1]}, "results": "../out"}, {}, "steps[1].sweep.results", "stays inside its root"),
        ({"grid": {"lr": [1]}, "surprise": 1}, {}, "steps[1].sweep", "remove them or use one of"),
        ({"points": [{"t": "x" * 400 + str(i)} for i in range(1400)]}, {}, "steps[1].sweep",
         "use shorter values or fewer points"),
    ],
)  # fmt: skip
def test_every_refusal_names_the_key_and_the_fix(sweep: Any, step: dict[str, Any], key: str, fix: str) -> None:
    with pytest.raises(WorkloadError) as error:
        parse_workload(definition(sweep, **step))
    message = str(error.value)
    assert message.startswith(f"{key}:"), message
    assert fix in message, message


def test_a_swept_steps_output_is_its_whole_results_folder() -> None:
    """Later steps wait for the whole sweep: a swept step's output is its sweep's folder, never one
    file every point would write (nor one point's folder, which a later step could not wait on alone)."""
    raw = definition({"grid": {"lr": [1, 2]}})
    raw["data"]["outputs"].append({"name": "model", "path": "results/model.pt"})
    raw["steps"][1]["outputs"] = ["model"]
    with pytest.raises(WorkloadError, match=r"^steps\[1\]\.outputs\[0\]: 'model' \(results/model.pt\) is one path"):
        parse_workload(raw)
    raw["data"]["outputs"][1]["path"] = "results/train"
    assert parse_workload(raw).step("train").outputs == ("model",)


def test_an_environments_override_may_not_set_what_each_point_sets() -> None:
    raw = definition({"grid": {"lr": [1, 2]}})
    raw["overrides"] = {"openshift": {"train": {"reason": "r", "args": {"set": {"--lr": 3}}}}}
    with pytest.raises(WorkloadError, match=r"^overrides\.openshift\.train\.args\.set\.--lr: .*leave it to the sweep"):
        parse_workload(raw)
    raw["overrides"] = {"openshift": {"train": {"reason": "r", "env": {"ATLAS_SWEEP_X": "1"}}}}
    with pytest.raises(WorkloadError, match=r"^overrides\.openshift\.train\.env\.ATLAS_SWEEP_X: "):
        parse_workload(raw)


# --- the split at a site's array limit --------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "limit", "parallel", "expected"),
    [
        (6, 1000, 2, [(0, 6, 2, None)]),
        (6, 1000, None, [(0, 6, None, None)]),
        (6, 1000, 6, [(0, 6, None, None)]),  # as many as there are points: no throttle
        (1000, 1000, None, [(0, 1000, None, None)]),
        (1001, 1001, None, [(0, 1001, None, None)]),  # Slurm's default: indices 0 to 1000
        (1001, 1000, None, [(0, 1000, None, None), (1000, 1, None, None)]),
        (2500, 1000, 10, [(0, 1000, 4, None), (1000, 1000, 4, None), (2000, 500, 2, None)]),
        (2001, 1000, 3, [(0, 1000, 1, None), (1000, 1000, 1, None), (2000, 1, 1, None)]),
        # fewer than one per chunk: one at a time in each chunk, chunks in lanes
        (2500, 1000, 2, [(0, 1000, 1, None), (1000, 1000, 1, None), (2000, 500, 1, 0)]),
        (4000, 1000, 1, [(0, 1000, 1, None), (1000, 1000, 1, 0), (2000, 1000, 1, 1), (3000, 1000, 1, 2)]),
    ],
)  # fmt: skip
def test_a_sweep_is_split_at_the_sites_array_limit(
    size: int, limit: int, parallel: int | None, expected: list[tuple[int, int, int | None, int | None]]
) -> None:
    chunks = split_points(size, limit, parallel)
    assert [(c.offset, c.count, c.parallel, c.after) for c in chunks] == expected
    assert [c.number for c in chunks] == list(range(len(chunks)))


@pytest.mark.parametrize("size", [1, 7, 999, 1000, 1001, 2999, 10_000])
@pytest.mark.parametrize("limit", [1, 10, 1000, 1001])
@pytest.mark.parametrize("parallel", [None, 1, 3, 50, 9999])
def test_every_split_covers_each_point_once_within_the_throttle(size: int, limit: int, parallel: int | None) -> None:
    chunks = split_points(size, limit, parallel)
    covered = [i for c in chunks for i in range(c.offset, c.offset + c.count)]
    assert covered == list(range(size))
    assert all(1 <= c.count <= limit for c in chunks)
    if parallel is not None and parallel < size:
        # At once: the chunks that wait for none, each at its throttle.
        assert sum(c.parallel or c.count for c in chunks if c.after is None) <= parallel
        assert all(c.parallel is not None and 1 <= c.parallel <= c.count for c in chunks)


def test_a_split_refuses_what_cannot_be_split() -> None:
    for args in ((0, 10, None), (5, 0, None), (5, 10, 0)):
        with pytest.raises(ValueError):
            split_points(*args)


# --- rendering: golden files, and every element run by the shell ------------------------------------


@pytest.mark.parametrize("scheduler", SCHEDULER_NAMES)
def test_array_scripts_match_golden_files(scheduler: str) -> None:
    sched = scheduler_for(scheduler)
    scripts = sweep_scripts(PROBE_SWEEP, sched, RUN, "normal")["train"]
    assert len(scripts.scripts) == 1 and scripts.table == points_table(PROBE_SWEEP.step("train").sweep)  # type: ignore[arg-type]
    path = GOLDEN / f"probe-sweep-train{sched.script_suffix}"
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        path.write_text(scripts.scripts[0].script)
    assert scripts.scripts[0].script == path.read_text(), f"{path} differs; if intended, regenerate (module docstring)"


def test_indexed_job_matches_its_golden_file() -> None:
    settings, context = kubernetes_context(PROBE_SWEEP, ())
    sweep = PROBE_SWEEP.step("train").sweep
    assert sweep is not None
    job = indexed_step_job(
        render_step(PROBE_SWEEP, "train", "openshift"), sweep, PROBE_SWEEP, settings, context, "points"
    )
    text = yaml.safe_dump(job, sort_keys=False, width=120)
    path = GOLDEN / "probe-sweep-train-indexed-job.yaml"
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; if intended, regenerate (module docstring)"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 6, 2)
    # One attempt a point unless the stack says more (atlas:sweep.max_attempts): backoffLimitPerIndex is one less.
    assert spec["backoffLimitPerIndex"] == 0 and "backoffLimit" not in spec
    assert "activeDeadlineSeconds" not in spec and spec["template"]["spec"]["activeDeadlineSeconds"] == 1800
    rendered = render_step(PROBE_SWEEP, "train", "openshift")
    again = indexed_step_job(rendered, sweep, PROBE_SWEEP, settings, context, "points", max_attempts=3)
    assert again["spec"]["backoffLimitPerIndex"] == 2
    assert {**again["spec"], "backoffLimitPerIndex": 0} == spec
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        indexed_step_job(rendered, sweep, PROBE_SWEEP, settings, context, "points", max_attempts=0)


HOSTILE = {"points": [{"name": "it's", "n": 1}, {"name": "x; touch pwned \\\\n", "n": 2},
                      {"name": 'say "hi"; a b', "n": 3}, {"name": "*", "n": 4}, {"name": "-x", "n": 5}]}  # fmt: skip


def _stub_program(tmp_path: Path) -> Path:
    """A `sh` stand-in for the step's program: prints its arguments and the point's variables, one a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / "train"
    program.write_text(
        '#!/bin/sh\nfor a in "$@"; do printf "arg %s\\n" "$a"; done\n'
        'env | grep ^ATLAS_SWEEP_ | sort | sed "s/^/env /"\n'
    )
    program.chmod(0o755)
    return bin_dir


def _expected(sweep: Sweep, index: int) -> list[str]:
    point = point_at(sweep, index)
    args = [f"arg {a}" for a in ("--epochs", "3", *point_args(sweep, point))]
    return args + [f"env {name}={value}" for name, value in point_env(sweep, point)]


@pytest.mark.parametrize("scheduler", SCHEDULER_NAMES)
def test_every_element_of_every_array_runs_its_own_point(scheduler: str, tmp_path: Path) -> None:
    """The rendered scripts, split into chunks of two, run by bash for each element as the scheduler
    would number it: each runs its point's arguments, variables and folder, quoted as written."""
    raw = definition(HOSTILE, args=["--epochs", 3], command=["train"])
    workload = parse_workload(raw)
    sweep = workload.step("train").sweep
    assert sweep is not None
    sched = scheduler_for(scheduler)
    run = SubmissionKey("atlas", "t", "satori", "1", str(tmp_path))
    arrays = sweep_scripts(workload, sched, run, None, telemetry=False, array_limit=2)["train"]
    assert [(c.offset, c.count) for c in arrays.chunks] == [(0, 2), (2, 2), (4, 1)]
    (tmp_path / arrays.table_path).parent.mkdir(parents=True)
    (tmp_path / arrays.table_path).write_text(arrays.table)
    path = os.environ["PATH"]
    for chunk, script in zip(arrays.chunks, arrays.scripts, strict=True):
        for element in range(chunk.count):
            index = chunk.offset + element
            env = {"PATH": f"{_stub_program(tmp_path)}:{path}", "HOME": str(tmp_path),
                   sched.array_task_variable: str(element + sched.array_index_base)}  # fmt: skip
            result = subprocess.run(["bash", "-c", script.script], capture_output=True, text=True, env=env, check=True)
            lines = result.stdout.splitlines()
            assert lines[0].startswith(f"atlas: sweep point {index} of 5: ")
            assert lines[1:] == _expected(sweep, index)
            assert (tmp_path / f"results/train/point-{index}").is_dir()
    assert not list(tmp_path.rglob("pwned"))


def test_an_element_without_a_point_stops_before_its_program(tmp_path: Path) -> None:
    sweep = swept({"grid": {"lr": [1, 2]}})
    spec = JobSpec(
        job_name="atlas-x-0123456789", step="train", workdir=str(tmp_path), log_dir="logs", command=("train",)
    )
    script = render_array_script(scheduler_for("slurm"), spec, sweep, ArrayChunk(0, 0, 2), "points")
    (tmp_path / "points").write_text(points_table(sweep))
    env = {"PATH": f"{_stub_program(tmp_path)}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "7"}
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == 1 and "atlas: no point 7 in points" in result.stderr and "arg" not in result.stdout


def test_every_index_of_the_indexed_job_runs_its_own_point(tmp_path: Path) -> None:
    """The Indexed Job's program, as Kubernetes hands it to the container (`$$` read as `$`), run by
    sh for each completion index, with the table where the ConfigMap is mounted (here, a copy)."""
    workload = parse_workload(definition(HOSTILE, args=["--epochs", 3], command=["train"]))
    sweep = workload.step("train").sweep
    assert sweep is not None
    program = point_program(render_step(workload, "train", "openshift"), sweep)
    assert program[:2] == ["sh", "-c"] and program[3] == "sh"
    table = tmp_path / "points"
    table.write_text(points_table(sweep))
    script = program[2].replace("$$", "$").replace("/opt/atlas/sweep/points", str(table))
    for index in range(5):
        env = {"PATH": f"{_stub_program(tmp_path)}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": str(index)}
        result = subprocess.run(
            ["sh", "-c", script, "sh"], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
        )
        assert result.stdout.splitlines()[1:] == _expected(sweep, index)
    assert not list(tmp_path.rglob("pwned"))


def test_the_table_is_named_by_its_digest() -> None:
    sweep = PROBE_SWEEP.step("train").sweep
    assert sweep is not None
    other = dataclasses.replace(sweep, parallel=1)  # the same points: the same table
    assert table_path("train", sweep) == table_path("train", other)
    assert table_path("train", sweep) != table_path("train", swept({"grid": {"lr": [1, 2]}}))


def test_workload_check_prints_the_expansion(capsys: pytest.CaptureFixture[str]) -> None:
    assert workload_check(["check", str(REPO_ROOT / "workloads" / "probe" / "sweep.yaml")]) == 0
    out = capsys.readouterr().out
    assert "sweep: step 'train': 6 points (grid of G_lr, seed)" in out
    assert "  first: point 0: G_lr=1e-4 seed=0: appends --G_lr 1e-4 --seed 0 --logs_root results/train/point-0" in out
    assert "  last:  point 5: G_lr=4e-4 seed=1: appends --G_lr 4e-4 --seed 1" in out
    assert "  parallel: 2 at once" in out and "  metric: min of the last match of" in out
    assert "#SBATCH --array=0-5%2" in out and '#BSUB -J "atlas-train-' in out and "[1-6]%2" in out
    assert "===== step train: Kubernetes Indexed Job (environment openshift) =====" in out
    assert "completionMode: Indexed" in out
