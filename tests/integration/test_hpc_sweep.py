"""A swept step as one SweepJob against the local Satori over real SSH: LSF (the command set) and Slurm.

Starts its own Satori (ports from base 17500, state in a temporary directory), as test_hpc.py
does, and drives the SweepJob provider's create/read/delete the way the Pulumi engine calls
them: every element of a split sweep run and its point's folder written, the step after it
waiting for every array, an interrupted `up` adopting its arrays, an element killed outside Atlas
seen by refresh, destroy cancelling every running element, and failed points run again as new
arrays (atlas:sweep.max_attempts) with the step after the sweep resubmitted to wait for them.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterator
from typing import Any

import pytest

from infra.hpc import arrays, providers, ssh
from infra.hpc.job_script import SubmissionKey, render_job_script
from infra.hpc.providers import BatchJobProvider, StagedFilesProvider
from infra.hpc.providers.sweep_job import SweepJobProvider
from infra.hpc.registry import scheduler_for
from infra.hpc.scheduler import JobSpec
from infra.workload.parse import parse_workload
from localenv.layout import Layout
from tests.integration.satori_fixtures import POLL_S, run, satori_layout, satori_target, staged_sweep
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

# A base none of whose ports is one of the test run's own environment (scripts/test: 18000) or another
# module's: 17600 put slurmd on 18418, which the run's environment holds.
PORT_BASE = int(os.environ.get("ATLAS_TEST_HPC_SWEEP_PORT_BASE", "17500"))
SCHEDULERS = ("lsf", "slurm")
RESOURCES = {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "256Mi", "walltime": "00:10:00"}


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    with satori_layout(PORT_BASE, "atlas-sweep-test-") as lay:
        yield lay


@pytest.fixture(scope="module")
def target(layout: Layout) -> dict[str, Any]:
    return satori_target(layout)


@pytest.fixture(scope="module", autouse=True)
def clean_remote_runs(target: dict[str, Any]) -> None:
    run(target, "rm -rf -- atlas-it-sweep")


_counter = iter(range(10_000))


def sweep_workload(values: list[Any], parallel: int | None) -> Any:
    """A one-step workload whose step is swept over `lr`: `sh point.sh --lr <value>` per point
    (a definition may not hold `$`: the body is a staged file)."""
    sweep: dict[str, Any] = {"grid": {"lr": values}, "results": "results/train"}
    if parallel is not None:
        sweep["parallel"] = parallel
    return parse_workload(
        {
            "version": 1,
            "name": "sweep-it",
            "source": {"folder": "."},
            "data": {"outputs": [{"name": "points", "path": "results/train"}]},
            "steps": [
                {
                    "name": "train",
                    "command": ["sh", "point.sh"],
                    "outputs": ["points"],
                    "resources": RESOURCES,
                    "sweep": sweep,
                }
            ],
            "logs": {"root": "logs"},
            "telemetry": {"root": "telemetry"},
        }
    )


def make_sweep(
    target: dict[str, Any], scheduler: str, body: str, values: list[Any], limit: int, parallel: int | None = None
) -> dict[str, Any]:
    """Stage the sweep's table and chunk scripts (as StagedFiles does in a stack) and return its
    SweepJob inputs."""
    n = next(_counter)
    run_dir = f"atlas-it-sweep/{scheduler}/{n}-{int(time.time())}"
    key = SubmissionKey("atlas", "it", scheduler, str(n), run_dir)
    return staged_sweep(target, scheduler, sweep_workload(values, parallel), key, body, limit)


def read_until(props: dict[str, Any], job_id: str, done: Any, what: str, timeout: float = 90) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        seen.clear()
        seen.update(SweepJobProvider().read(job_id, props).outs or {})
        return dict(seen) if done(arrays.decode(seen["elements"])) else None

    return wait_until(reached, what, timeout, pause=POLL_S, detail=lambda: f"last read: {seen.get('elements')}")


def after_sweep_job(
    target: dict[str, Any], scheduler: str, run_dir: str, array_ids: list[str], ended_ids: list[str] | None = None
) -> dict[str, Any]:
    """A BatchJob after the sweep, counting the points that wrote their out.txt, as the pipeline
    chains one (`after_array_ids` to succeed, `after_ended_ids` to end)."""
    sched = scheduler_for(scheduler)
    name = f"atlas-it-after-{next(_counter)}-{int(time.time())}"
    command = ("sh", "-c", "ls results/train/point-*/out.txt | wc -l > results/count.txt")
    spec = JobSpec(job_name=name, step="rank", workdir=run_dir, log_dir="logs", command=command, queue="normal")
    script = render_job_script(sched, spec)
    path = f".atlas/jobs/rank{sched.script_suffix}"
    digest = ssh.sha256_hex(script.encode())
    StagedFilesProvider().create(
        {**target, "run_dir": run_dir, "files": [{"path": path, "content": script, "sha256": digest}]}
    )
    return {
        **target,
        "provider_version": providers.PROVIDER_VERSION,
        "scheduler": scheduler,
        "step": "rank",
        "job_name": name,
        "run_dir": run_dir,
        "script_path": path,
        "script": script,
        "script_sha256": digest,
        "log_pattern": f"logs/rank.{sched.log_placeholder}",
        "requested_queue": "normal",
        "after_job_ids": [],
        "after_array_ids": array_ids,
        "after_ended_ids": list(ended_ids or []),
        "wait": False,
        "poll_interval_s": POLL_S,
    }


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_sweep_split_by_a_small_array_limit_runs_every_point_then_the_next_step(
    target: dict[str, Any], scheduler: str
) -> None:
    # Five points, at most two per array: three arrays (2, 2, 1); parallel 2 below three arrays makes
    # two lanes of one element at a time, the third array after the first.
    body = 'sleep 2; echo "lr=$ATLAS_SWEEP_LR index=$ATLAS_SWEEP_INDEX args=$*" > "$ATLAS_SWEEP_DIR/out.txt"'
    props = make_sweep(target, scheduler, body, [0.1, 0.2, "x y", "a'b;c", 5], limit=2, parallel=2)
    assert [c["count"] for c in props["chunks"]] == [2, 2, 1]
    created = SweepJobProvider().create(props)
    assert created.outs is not None
    job_ids = created.outs["job_ids"]
    assert len(job_ids) == 3 and len(set(job_ids)) == 3, job_ids
    outs = {**props, **created.outs}
    # The step after the sweep waits for every element of every array.
    after = after_sweep_job(target, scheduler, props["run_dir"], job_ids)
    rank = BatchJobProvider().create(after)
    final = read_until(outs, str(created.id), lambda s: set(s) == {"D"}, "every element done")
    assert final["state"] == "succeeded" and final["elements"] == "D5" and final["counts"] == {"done": 5}
    for index, value in enumerate(["0.1", "0.2", "x y", "a'b;c", "5"]):
        text = run(target, f"cat -- {props['run_dir']}/results/train/point-{index}/out.txt").stdout
        assert text == f"lr={value} index={index} args=--lr {value}\n", (index, text)
    # Each element its own log, named by its array's id and its index.
    logs = run(target, f"ls -- {props['run_dir']}/logs").stdout.split()
    base = scheduler_for(scheduler).array_index_base
    for chunk, array_id in zip(props["chunks"], job_ids, strict=True):
        for index in range(chunk["count"]):
            assert f"train.{array_id}_{index + base}" in logs, (array_id, index, logs)

    def rank_done() -> bool:
        state = BatchJobProvider().read(str(rank.id), after).outs or {}
        return state.get("state") == "succeeded"

    wait_until(rank_done, "the step after the sweep to succeed", 60, pause=POLL_S)
    assert run(target, f"cat -- {props['run_dir']}/results/count.txt").stdout.strip() == "5"


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_an_interrupted_up_adopts_the_arrays_it_submitted(target: dict[str, Any], scheduler: str) -> None:
    props = make_sweep(target, scheduler, "sleep 60", [1, 2, 3], limit=2)
    first = SweepJobProvider().create(props)
    assert first.outs is not None
    # The engine never recorded the first create (SIGINT, a dropped connection): `up` creates again.
    again = SweepJobProvider().create(props)
    assert again.outs is not None and again.outs["job_ids"] == first.outs["job_ids"]
    SweepJobProvider().delete(str(first.id), {**props, **first.outs})
    # Deleted: a later create (destroy, then up) submits afresh rather than adopting retired arrays.
    fresh = SweepJobProvider().create(props)
    assert fresh.outs is not None and not set(fresh.outs["job_ids"]) & set(first.outs["job_ids"])
    SweepJobProvider().delete(str(fresh.id), {**props, **fresh.outs})


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_refresh_sees_an_element_killed_outside_and_destroy_cancels_every_running_one(
    target: dict[str, Any], scheduler: str
) -> None:
    props = make_sweep(target, scheduler, "sleep 300", [1, 2, 3], limit=10)
    created = SweepJobProvider().create(props)
    assert created.outs is not None
    (array_id,) = created.outs["job_ids"]
    outs = {**props, **created.outs}
    read_until(outs, array_id, lambda s: s.count("R") == 3, "every element running", timeout=60)
    # Someone kills point 1 by hand: Slurm's `<id>_<index>`, LSF's `<id>[<index>]`.
    kill = f"scancel {array_id}_1" if scheduler == "slurm" else f"bkill {shlex.quote(f'{array_id}[2]')}"
    assert run(target, kill).exit_code == 0
    seen = read_until(outs, array_id, lambda s: s == "RKR", "the killed element to show as killed")
    assert seen["counts"] == {"running": 2, "killed outside Atlas": 1}
    SweepJobProvider().delete(array_id, {**outs, **seen})
    gone = read_until(outs, array_id, lambda s: "R" not in s and "P" not in s, "every element cancelled")
    assert arrays.decode(gone["elements"]) == "KKK"  # as anyone but Atlas would see them after destroy
    retired = run(target, f"cat -- {props['run_dir']}/.atlas/retired-jobs").stdout
    assert f"{array_id} {props['chunks'][0]['job_name']}" in retired


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_failed_points_run_again_as_one_array_per_chunk_and_the_next_step_then_runs(
    target: dict[str, Any], scheduler: str
) -> None:
    # Points 1 and 2 (one in each chunk of two) fail their first attempt and succeed the next.
    body = (
        'case "$ATLAS_SWEEP_INDEX" in 1|2) [ -e "$ATLAS_SWEEP_DIR/tried" ] || { touch "$ATLAS_SWEEP_DIR/tried"; '
        'exit 3; } ;; esac\necho "attempt ok" > "$ATLAS_SWEEP_DIR/out.txt"\n'
    )
    props = make_sweep(target, scheduler, body, [1, 2, 3, 4], limit=2)
    provider = SweepJobProvider()
    created = provider.create({**props, "max_attempts": 2})
    assert created.outs is not None
    outs = {**props, "max_attempts": 2, **created.outs}
    assert outs["final_ids"] == outs["job_ids"] and outs["ended_ids"] == []
    after = after_sweep_job(target, scheduler, props["run_dir"], outs["final_ids"], outs["ended_ids"])
    rank = BatchJobProvider().create(after)
    first = read_until(outs, str(created.id), lambda s: not set(s) & {"P", "R", "?"}, "every first attempt to end")
    assert arrays.decode(first["elements"]) == "DFFD" and first["state"] == "failed"
    # Without a retry setting nothing runs again; with max_attempts 2 the update does.
    assert not provider.diff(str(created.id), {**first, "max_attempts": 1}, {**props, "max_attempts": 1}).changes
    diff = provider.diff(str(created.id), first, {**props, "max_attempts": 2})
    assert diff.changes and not diff.replaces
    updated = provider.update(str(created.id), first, {**props, "max_attempts": 2})
    assert updated.outs is not None
    retries = updated.outs["retries"]
    assert [(r["chunk"], r["points"]) for r in retries] == [(0, "1"), (1, "2")]
    assert [r["job_name"] for r in retries] == [f"{c['job_name']}-r2" for c in props["chunks"]]
    # Each first array's failed point runs again and its other point is done: they need only end,
    # the retries succeed.
    assert updated.outs["final_ids"] == [r["job_id"] for r in retries]
    assert updated.outs["ended_ids"] == outs["job_ids"]
    # The step after the sweep, replaced as the engine does when its arrays change: it waits for the retries.
    BatchJobProvider().delete(str(rank.id), {**after, **(rank.outs or {})})
    after = after_sweep_job(target, scheduler, props["run_dir"], updated.outs["final_ids"], updated.outs["ended_ids"])
    rank = BatchJobProvider().create(after)
    done = read_until({**outs, **updated.outs}, str(created.id), lambda s: s == "DDDD", "every point done")
    assert done["state"] == "succeeded"
    # A point's last attempt is its state; its earlier one left its log beside the new one.
    logs = run(target, f"ls -- {props['run_dir']}/logs").stdout.split()
    for retry in retries:
        assert any(name.startswith(f"train.{retry['job_id']}_") for name in logs), (retry, logs)
    # Attempts used up for nobody: no further retry is asked for.
    assert not provider.diff(str(created.id), done, {**props, "max_attempts": 2}).changes

    def rank_done() -> bool:
        state = BatchJobProvider().read(str(rank.id), after).outs or {}
        return state.get("state") == "succeeded"

    wait_until(rank_done, "the step after the sweep to succeed", 60, pause=POLL_S)
    assert run(target, f"cat -- {props['run_dir']}/results/count.txt").stdout.strip() == "4"
