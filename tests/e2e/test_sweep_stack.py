"""A sweep through `pulumi up`, end to end on the local Satori: LSF (the command set) and Slurm.

The probe's sweep (workloads/probe/sweep.yaml), cut to two short points whose second reads its
data from a folder that is not there yet (`--data_root data-late`), and a step after the sweep
that lists the points' folders. `atlas:sweep.max_attempts` is 2. Then, as a user would:

1. `pulumi up`: each side submits the sweep as one array; the step after it waits for it.
2. The first point succeeds, the second fails (its data is missing); `pulumi refresh` reads it
   failed (one query per array, into the checkpoint), and the step after it still waits.
3. The user fixes the cause (the folder, a link to the data) and runs `pulumi up --refresh`: one
   new array of just the failed point per side, the step after the sweep resubmitted to wait for
   it; the point succeeds, then the step after it runs.
4. `pulumi destroy` leaves nothing in the queue.

Checked against the schedulers' own answers (squeue, bjobs) over the user's own OpenSSH client.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.hpc import arrays
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_hpc_sections, run_bare
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.support import wait_until

pytestmark = pytest.mark.e2e
STACK = "local"
HPC = ("satori", "satori-slurm")
WORKLOAD = "workloads/probe/sweep-e2e.yaml"


def short_sweep(project: Path) -> None:
    """The probe's sweep as two short points, the second's data late, and a step after it."""
    doc = yaml.safe_load((project / "workloads" / "probe" / "sweep.yaml").read_text())
    train = next(s for s in doc["steps"] if s["name"] == "train")
    args = [str(a) for a in train["args"]]
    i = args.index("--data_root")
    del args[i : i + 2]  # the sweep sets it per point
    args[args.index("--total_iters") + 1] = "20"
    args[args.index("--test_every") + 1] = "10"
    args[args.index("--log_every") + 1] = "10"
    train["args"] = args
    train["sweep"] = {
        "zip": {"G_lr": ["2e-4", "4e-4"], "data_root": ["data", "data-late"]},
        "results": "results/train",
        "args": ["--G_lr", "{G_lr}", "--data_root", "{data_root}", "--logs_root", "{dir}", "--weights_root", "{dir}"],
        "metric": train["sweep"]["metric"],
    }
    doc["data"]["outputs"].append({"name": "points-listed", "path": "results/points.txt"})
    doc["steps"].append(
        {
            "name": "list-points",
            "description": "list the sweep's points that wrote a training log",
            "command": ["sh", "-c", "ls results/train/*/*.jsonl > results/points.txt"],
            "inputs": ["train-sweep"],
            "outputs": ["points-listed"],
            "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "256Mi",
                          "walltime": "00:05:00"},
        }
    )
    (project / WORKLOAD).write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture
def deployed(tmp_path: Path, satori_env: Layout) -> Iterator[tuple[PulumiProject, str]]:
    proj = PulumiProject.create(tmp_path)
    remote = f"atlas-sweep-{uuid.uuid4().hex[:6]}"
    short_sweep(proj.root)
    config = proj.stack_config(STACK)
    config.pop("atlas:openshift", None)
    config["atlas:workload"] = WORKLOAD
    config["atlas:sweep"] = {"max_attempts": 2}
    local_hpc_sections(config, satori_env, HPC, remote)
    run_bare(config, HPC)  # no OpenShift side: the steps run on the login node's software
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    yield proj, remote
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/{remote}")


def step_of(outputs: dict[str, Any], side: str, name: str) -> dict[str, Any]:
    return next(s for s in outputs["environments"][side]["steps"] if s["name"] == name)


def sweep_state(proj: PulumiProject, side: str) -> dict[str, Any]:
    """The side's SweepJob as the checkpoint holds it (what `pulumi refresh` read: a refresh does
    not run the program, so the stack's outputs change only with the next `up`)."""
    export = json.loads(proj.run("stack", "export", "-s", STACK).stdout)
    (found,) = [
        r["outputs"] for r in export["deployment"]["resources"]
        if r["type"].endswith(":SweepJob") and r["urn"].endswith(f"::{side}-train")
    ]
    return dict(found)


def queue_holds(satori_env: Layout, side: str, job_ids: list[str]) -> list[str]:
    """What the side's scheduler still lists pending or running of these jobs or arrays."""
    if side == "satori":
        found = json.loads(ssh(satori_env, f"bjobs -a -o 'jobid stat' -json {' '.join(job_ids)}"))["RECORDS"]
        return [r["STAT"] for r in found if r.get("STAT") in ("PEND", "RUN", "PSUSP", "USUSP", "SSUSP")]
    return ssh(satori_env, f"squeue -h -r -t PD,R,S -o %T -j {','.join(job_ids)}").split()


def wait_for_sweeps(satori_env: Layout, outputs: dict[str, Any], what: str) -> None:
    def ended() -> bool:
        for side in HPC:
            sweep = step_of(outputs, side, "train")["sweep"]
            ids = [a["job_id"] for a in sweep["arrays"]]
            if queue_holds(satori_env, side, ids):
                return False
        return True

    wait_until(ended, what, 300, pause=2)


def test_a_failed_point_runs_again_after_the_user_fixes_it_and_the_next_step_then_runs(
    deployed: tuple[PulumiProject, str], satori_env: Layout
) -> None:
    proj, _remote = deployed
    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    outputs = proj.outputs(STACK)
    for side in HPC:
        sweep = step_of(outputs, side, "train")["sweep"]
        assert sweep["points"] == 2 and len(sweep["arrays"]) == 1 and sweep["max_attempts"] == 2, sweep
    wait_for_sweeps(satori_env, outputs, "each side's first attempt to end")

    proj.run("refresh", "--yes", "--skip-preview", "-s", STACK)
    refreshed = proj.outputs(STACK)
    for side in HPC:
        state = sweep_state(proj, side)
        assert arrays.decode(state["elements"]) == "DF", (side, state["elements"], state["counts"])
        assert state["state"] == "failed" and state["retries"] == []
        # The step after the sweep waits: its array has a failed element.
        after = step_of(refreshed, side, "list-points")
        assert queue_holds(satori_env, side, [after["job_id"]]), (side, after)

    # The user finds the cause (the data folder the second point names) and fixes it.
    for side in HPC:
        run_dir = refreshed["environments"][side]["run_dir"]
        ssh(satori_env, f"ln -s data {run_dir}/data-late")
    first_after = {side: step_of(refreshed, side, "list-points")["job_id"] for side in HPC}
    proj.run("up", "--yes", "--skip-preview", "--refresh", "-s", STACK)
    retried = proj.outputs(STACK)
    for side in HPC:
        sweep = step_of(retried, side, "train")["sweep"]
        first, again = sweep["arrays"]
        assert again["points"] == [1] and again["job_id"] != first["job_id"], (side, sweep)
        # The step after the sweep is a new job, waiting for the retry; the old one is gone.
        assert step_of(retried, side, "list-points")["job_id"] != first_after[side]
        assert not queue_holds(satori_env, side, [first_after[side]])
    wait_for_sweeps(satori_env, retried, "each side's retry to end")

    def listed(side: str) -> bool:
        run_dir = retried["environments"][side]["run_dir"]
        return bool(ssh(satori_env, f"cat {run_dir}/results/points.txt 2>/dev/null || true").strip())

    for side in HPC:
        wait_until(lambda side=side: listed(side), f"{side}: the step after the sweep to run", 180, pause=2)
        text = ssh(satori_env, f"cat {retried['environments'][side]['run_dir']}/results/points.txt")
        assert "point-0/" in text and "point-1/" in text, (side, text)
    # Another `up --refresh` sees every point done: nothing runs again, and the outputs say so.
    again = proj.run("up", "--yes", "--skip-preview", "--refresh", "-s", STACK).stdout
    assert "-r3" not in again and "runs points" not in again, again
    final = proj.outputs(STACK)
    for side in HPC:
        sweep = step_of(final, side, "train")["sweep"]
        assert arrays.decode(sweep["elements"]) == "DD" and len(sweep["arrays"]) == 2, (side, sweep)

    proj.run("destroy", "--yes", "-s", STACK)
    for side in HPC:
        ids = [a["job_id"] for a in step_of(final, side, "train")["sweep"]["arrays"]]
        assert not queue_holds(satori_env, side, ids), side
