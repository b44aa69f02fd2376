"""A sweep's report against the local Satori over real SSH: LSF (the command set) and Slurm.

Starts its own Satori (ports from base 17800, or ATLAS_TEST_HPC_SWEEP_REPORT_PORT_BASE; state in a
temporary directory), submits a sweep's arrays as the SweepJob provider does (one point failing
on purpose, one killed by hand outside Atlas), collects the side as `atlas compare` does and
checks that every element's record agrees with the scheduler's own answer, that it took one
query per array, that the best point is the one the metric says, and that the monitor counts the
same elements by state.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.compare.hpc_collector import collect_hpc
from infra.compare.records import Missing, ReportContract
from infra.compare.remote_files import SftpFiles
from infra.compare.sweeps import sweep_metrics
from infra.hpc import arrays, providers, ssh
from infra.hpc.job_script import SubmissionKey
from infra.hpc.providers.sweep_job import SweepJobProvider
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.target import PROVENANCE_NOT_STATED
from infra.monitor.hpc import HpcSource
from infra.outputs import HpcOutputs, read_environment
from infra.timeparse import iso_utc
from infra.workload.model import Workload
from infra.workload.parse import parse_workload
from localenv.layout import Layout
from tests.integration.satori_fixtures import POLL_S, run, satori_layout, satori_target, staged_sweep
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

PORT_BASE = int(os.environ.get("ATLAS_TEST_HPC_SWEEP_REPORT_PORT_BASE", "17800"))
RESOURCES = {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "256Mi", "walltime": "00:10:00"}
# Point i prints its loss (its lr); point 1 then fails on purpose, point 4 runs until killed by hand.
LRS = ["0.5", "0.1", "0.3", "0.2", "0.4"]
BODY = (
    'echo "loss $ATLAS_SWEEP_LR"\n'
    'if [ "$ATLAS_SWEEP_INDEX" = 1 ]; then exit 3; fi\n'
    'if [ "$ATLAS_SWEEP_INDEX" = 4 ]; then sleep 300; fi\n'
)


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    with satori_layout(PORT_BASE, "atlas-sweep-report-test-") as lay:
        yield lay


@pytest.fixture(scope="module")
def target(layout: Layout) -> dict[str, Any]:
    return satori_target(layout)


def swept_workload() -> Workload:
    """One step swept over `lr`, ranked by the lowest `loss` its log prints."""
    return parse_workload(
        {
            "version": 1,
            "name": "sweep-report-it",
            "source": {"folder": "."},
            "data": {"outputs": [{"name": "points", "path": "results/train"}]},
            "steps": [
                {
                    "name": "train",
                    "command": ["sh", "point.sh"],
                    "outputs": ["points"],
                    "resources": RESOURCES,
                    "sweep": {
                        "grid": {"lr": LRS},
                        "results": "results/train",
                        "metric": {"pattern": r"loss ([0-9.]+)", "goal": "min"},
                    },
                }
            ],
            "logs": {"root": "logs"},
            "telemetry": {"root": "telemetry"},
        }
    )


def read_until(props: dict[str, Any], job_id: str, done: Any, what: str, timeout: float = 120) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        seen.clear()
        seen.update(SweepJobProvider().read(job_id, props).outs or {})
        return dict(seen) if done(arrays.decode(seen["elements"])) else None

    return dict(wait_until(reached, what, timeout, pause=POLL_S, detail=lambda: f"last read: {seen.get('elements')}"))


def own_answer(
    target: dict[str, Any], scheduler: str, array_id: str
) -> dict[int, tuple[str, float | None, float | None]]:
    """The scheduler's own answer for every element of an array, in another form than Atlas reads:
    Slurm's `squeue -o` text (no slurmdbd here for sacct), LSF's `bjobs -o` text (not -json).
    By the element's index: (state, start, end), times read as the scheduler prints them."""
    found: dict[int, tuple[str, float | None, float | None]] = {}
    if scheduler == "slurm":
        out = run(target, f"TZ=UTC squeue -h -r -t all -j {array_id} -o '%K|%T|%S|%e'").stdout
        for line in out.splitlines():
            index, state, start, end = line.strip().split("|")
            found[int(index)] = (state, iso_utc(start), iso_utc(end) if end not in ("N/A", "Unknown") else None)
        return found
    fields = "job_name stat start_time finish_time delimiter='|'"
    out = run(target, f"TZ=UTC bjobs -a -hms -noheader -o {shlex.quote(fields)} {array_id}").stdout
    year = dt.datetime.now(dt.UTC).year
    for line in out.splitlines():
        name, state, start, end = (part.strip() for part in line.split("|"))
        found[int(name.rsplit("[", 1)[1].rstrip("]"))] = (
            state,
            _lsf_time(start, year),
            _lsf_time(end.removesuffix(" L"), year),
        )
    return found


def _lsf_time(text: str, year: int) -> float | None:
    if text in ("", "-"):
        return None
    return dt.datetime.strptime(f"{year} {text}", "%Y %b %d %H:%M:%S").replace(tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize("scheduler", ["lsf", "slurm"])
def test_a_sweeps_records_agree_with_the_scheduler_and_the_best_point_is_the_metrics(
    target: dict[str, Any], scheduler: str
) -> None:
    sched = scheduler_for(scheduler)
    run_dir = f"atlas-it-sweep-report/{scheduler}/{int(time.time())}"
    workload = swept_workload()
    key = SubmissionKey("atlas", "it-report", scheduler, "1", run_dir)
    # At most two elements an array: three arrays (2, 2, 1), all running at once.
    props = staged_sweep(target, scheduler, workload, key, BODY, array_limit=2)
    submitted_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    created = SweepJobProvider().create(props)
    assert created.outs is not None
    job_ids = created.outs["job_ids"]
    assert len(job_ids) == 3
    outs = {**props, **created.outs}
    read_until(outs, job_ids[0], lambda s: s[:4] == "DFDD" and s[4] == "R", "points 0-3 ended and 4 running")
    # Point 4 (the third array's only element) is killed by hand, outside Atlas.
    base = sched.array_index_base
    kill = f"scancel {job_ids[2]}_{base}" if scheduler == "slurm" else f"bkill {shlex.quote(f'{job_ids[2]}[{base}]')}"
    assert run(target, kill).exit_code == 0
    final = read_until(outs, job_ids[0], lambda s: s == "DFDDK", "point 4 killed")

    outputs = read_environment(
        HpcOutputs,
        {
            "gpus_requested": 0,
            "scheduler": scheduler,
            "host": target["ssh"]["host"],
            "port": target["ssh"]["port"],
            "user": target["ssh"]["user"],
            "run_dir": run_dir,
            "telemetry": {"path": f"{run_dir}/telemetry"},
            "logs": {"path": f"{run_dir}/logs"},
            "provenance": PROVENANCE_NOT_STATED,
            "steps": [
                {
                    "name": "train",
                    "job_id": job_ids[0],
                    "submitted_at": submitted_at,
                    "sweep": {
                        "points": len(LRS),
                        "arrays": [
                            {"job_id": job_id, "offset": chunk["offset"], "count": chunk["count"]}
                            for job_id, chunk in zip(job_ids, props["chunks"], strict=True)
                        ],
                        "elements": final["elements"],
                        "results": "results/train",
                    },
                }
            ],
        },
        scheduler,
    )
    asked: list[str] = []

    def runner(command: str) -> RemoteResult:
        asked.append(command)
        return run(target, command)

    connection = ssh.connection(providers.endpoint_from(target))
    definition = workload.steps[0].sweep
    assert definition is not None
    contract = ReportContract(step="train", training_log=False, sweeps=(("train", definition),))
    records = collect_hpc(scheduler, outputs, runner, SftpFiles(connection.sftp()), Path(tempfile.mkdtemp()), contract)
    (swept,) = records.sweeps
    assert swept.notes == () and swept.arrays == tuple(job_ids)

    # One query per array (the next of the scheduler's only where one did not know every element),
    # never one per element.
    element_queries = [c for c in asked if any(c.endswith(f" {j}") for j in job_ids)]
    assert len(element_queries) <= len(job_ids) * len(sched.array_record_queries("1")), element_queries
    assert {c.rsplit(" ", 1)[1] for c in element_queries} == set(job_ids)

    # Each record agrees with the scheduler's own answer, element by element.
    assert [e.phase for e in swept.elements] == ["succeeded", "failed", "succeeded", "succeeded", "cancelled"]
    assert swept.elements[1].exit_code == 3
    for element in swept.elements:
        own = own_answer(target, scheduler, element.array)[element.index]
        assert own[0] == element.state, (element, own)
        assert (own[1], own[2]) == (element.started_at, element.finished_at), (element, own)

    # The metric: each point's log prints its lr as its loss; the lowest is point 1's, which failed,
    # so the best is point 3 (0.2), among the succeeded ones.
    assert isinstance(swept.metric, tuple)
    assert [r.value for r in swept.metric] == [0.5, 0.1, 0.3, 0.2, 0.4]
    figures = sweep_metrics(swept)
    assert figures.best_point.value == 3.0 and figures.best_metric.value == 0.2
    assert figures.best_values == "lr=0.2"
    assert figures.states == (("succeeded", 3), ("failed", 1), ("killed or cancelled", 1))
    assert figures.makespan.value is not None and figures.makespan.value > 0
    requested = min(e.requested_at for e in swept.elements if e.requested_at is not None)
    ends = [e.finished_at for e in swept.elements if e.finished_at is not None]
    assert figures.makespan.value == max(ends) - requested
    assert figures.run_time_median.note == f"over {len(ends)} of 5 element(s)"
    # The monitor counts the same elements by state, in its poll's two commands.
    monitor = HpcSource(scheduler, outputs, runner, 30.0)
    (view,) = monitor.poll().sweeps
    assert view.states == figures.states and view.note == "" and monitor.calls == 2
    # The swept step's own record spans the sweep: `compare --wait` and the wall time wait for all of it.
    assert not isinstance(records.steps, Missing)
    (step,) = records.steps
    assert (step.requested_at, step.finished_at) == (requested, max(ends))
