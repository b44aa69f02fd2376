"""A sweep in the report: each scheduler's element records (one query per array), the Indexed
Job's pods, the metric read per point, the figures (states, median and p95, makespan, best point)
and the Markdown section (golden), HTML and JSON.

Fixtures are written in the formats the schedulers document (Slurm 22.05's `sacct -P` and
`squeue -O`, LSF 10.1's `bjobs -o ... -json` and `bhist -l`, the Kubernetes API's Pod), each with
a failed and a killed element. The Markdown section's golden file is rewritten by running this
module with ATLAS_UPDATE_GOLDEN=1 (then review the difference).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from infra.compare import cost_files, metrics, render
from infra.compare.collect import unfinished_steps
from infra.compare.hpc_collector import collect_hpc
from infra.compare.records import (
    DEFAULT_CONTRACT,
    ElementRecord,
    MetricReading,
    Missing,
    ReportContract,
    SweepRecord,
    without_records,
)
from infra.compare.remote_files import LocalFiles
from infra.compare.sweep_records import NO_METRIC, kube_sweep_elements, read_metric
from infra.compare.sweeps import nearest_rank, sweep_metrics
from infra.hpc.lsf.records import lsf_array_records
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import UnsupportedOutput, array_points
from infra.hpc.slurm.records import slurm_array_records
from infra.monitor.hpc import HpcSource
from infra.monitor.hpc_reads import EXIT, SECTION
from infra.monitor.hpc_view import HpcEnvironmentSource
from infra.monitor.kube_view import KubeSource
from infra.monitor.model import EnvironmentView, Snapshot
from infra.monitor.render import html_page, terminal_view
from infra.monitor.sources import IdleTracker, ViewContext
from infra.outputs import KubernetesOutputs, SweepArray, SweepOutputs, read_environment
from infra.timeparse import iso_utc
from infra.workload.model import Sweep, SweepMetric
from tests.support import hpc_outputs

GOLDEN = Path(__file__).parent / "golden"
T0 = iso_utc("2026-12-05T10:00:00") or 0.0


def answer(stdout: str, code: int = 0, stderr: str = "") -> RemoteResult:
    return RemoteResult("recorded", code, stdout, stderr)


def grid(metric: SweepMetric | None = None) -> Sweep:
    """Six points: lr (3) x seed (2), the last name fastest."""
    return Sweep(
        kind="grid",
        names=("lr", "seed"),
        axes=(("lr", ("1e-4", "2e-4", "4e-4")), ("seed", (0, 1))),
        metric=metric,
        results="results/train",
    )


# --- Slurm: sacct -X -P of the array, squeue -r for what accounting does not hold -------------------

SACCT = """\
41_0|atlas-train-c0|normal|COMPLETED|0:0|2026-12-05T10:00:00|2026-12-05T10:00:02|2026-12-05T10:00:12
41_1|atlas-train-c0|normal|FAILED|3:0|2026-12-05T10:00:00|2026-12-05T10:00:02|2026-12-05T10:00:05
41_2|atlas-train-c0|normal|CANCELLED by 1001|0:15|2026-12-05T10:00:00|2026-12-05T10:00:12|2026-12-05T10:00:20
41_3|atlas-train-c0|normal|RUNNING|0:0|2026-12-05T10:00:00|2026-12-05T10:00:20|Unknown
41_[4-5%2]|atlas-train-c0|normal|PENDING|0:0|2026-12-05T10:00:00|Unknown|Unknown
"""
SQUEUE_R = """\
41|0|41_0|COMPLETED|normal|atlas-train-c0|None|0|2026-12-05T10:00:00|2026-12-05T10:00:02|2026-12-05T10:00:12|vm|
41|1|41_1|FAILED|normal|atlas-train-c0|NonZeroExitCode|768|2026-12-05T10:00:00|2026-12-05T10:00:02|2026-12-05T10:00:05|vm|
41|2|41_2|CANCELLED|normal|atlas-train-c0|None|15|2026-12-05T10:00:00|2026-12-05T10:00:12|2026-12-05T10:00:20|vm|
41|3|41_3|PENDING|normal|atlas-train-c0|JobArrayTaskLimit|0|2026-12-05T10:00:00|2026-12-05T10:09:00|N/A|(null)|
"""
SLURM = scheduler_for("slurm")
SACCT_QUERY, SQUEUE_QUERY, JOBCOMP_QUERY = SLURM.array_record_queries("41")


@pytest.mark.parametrize(
    ("command", "stdout", "expected"),
    [
        (
            SACCT_QUERY,
            SACCT,
            {
                0: ("COMPLETED", "succeeded", 0, 2.0, 12.0),
                1: ("FAILED", "failed", 3, 2.0, 5.0),
                2: ("CANCELLED", "cancelled", 143, 12.0, 20.0),
                3: ("RUNNING", "running", None, 20.0, None),
                4: ("PENDING", "pending", None, None, None),
                5: ("PENDING", "pending", None, None, None),
            },
        ),
        (
            SQUEUE_QUERY,
            SQUEUE_R,
            {
                0: ("COMPLETED", "succeeded", 0, 2.0, 12.0),
                1: ("FAILED", "failed", 3, 2.0, 5.0),
                2: ("CANCELLED", "cancelled", 143, 12.0, 20.0),
                # A pending element's StartTime is squeue's forecast, not a start.
                3: ("PENDING", "pending", None, None, None),
            },
        ),
    ],
    ids=["sacct", "squeue-r"],
)
def test_slurm_reads_every_element_of_an_array_from_one_answer(
    command: str, stdout: str, expected: dict[int, tuple[Any, ...]]
) -> None:
    records = slurm_array_records("41", answer(stdout), command, "login")
    assert {
        index: (r.state, r.phase, r.exit_code, _since(r.started_at), _since(r.finished_at))
        for index, r in records.items()
    } == expected
    assert all(r.requested_at == T0 for r in records.values())
    assert all(r.source == f"Slurm: `{command}` on login" for r in records.values())
    assert records[0].job == "41_0"


def test_slurm_without_accounting_is_no_answer_and_another_arrays_lines_are_not_its_own() -> None:
    with pytest.raises(UnsupportedOutput, match="accounting storage is disabled"):
        slurm_array_records("41", answer("", 1, "Slurm accounting storage is disabled"), SACCT_QUERY, "login")
    other = SACCT.replace("41_", "42_")
    assert slurm_array_records("41", answer(other), SACCT_QUERY, "login") == {}
    assert SACCT_QUERY.startswith("TZ=UTC sacct -n -P -X -o JobID,") and SACCT_QUERY.endswith(" -j 41")
    assert " -r " in SQUEUE_QUERY and JOBCOMP_QUERY.startswith("TZ=UTC sacct -c ")


def _since(value: float | None) -> float | None:
    return None if value is None else value - T0


# --- LSF: bjobs of the array, bhist -l for the elements bjobs forgot ---------------------------------

BJOBS_ARRAY: dict[str, Any] = {
    "COMMAND": "bjobs",
    "JOBS": 4,
    "RECORDS": [
        {"JOBID": "77", "STAT": "DONE", "QUEUE": "normal", "EXIT_CODE": "", "JOB_NAME": "atlas-train-c0[1]",
         "SUBMIT_TIME": "Dec  5 10:00:00", "START_TIME": "Dec  5 10:00:03", "FINISH_TIME": "Dec  5 10:00:13 L",
         "EXIT_REASON": "", "PEND_REASON": "", "EXEC_HOST": "vm"},
        {"JOBID": "77", "STAT": "EXIT", "QUEUE": "normal", "EXIT_CODE": "3", "JOB_NAME": "atlas-train-c0[2]",
         "SUBMIT_TIME": "Dec  5 10:00:00", "START_TIME": "Dec  5 10:00:03", "FINISH_TIME": "Dec  5 10:00:04 L",
         "EXIT_REASON": "", "PEND_REASON": "", "EXEC_HOST": "vm"},
        {"JOBID": "77", "STAT": "EXIT", "QUEUE": "normal", "EXIT_CODE": "143", "JOB_NAME": "atlas-train-c0[3]",
         "SUBMIT_TIME": "Dec  5 10:00:00", "START_TIME": "Dec  5 10:00:13", "FINISH_TIME": "Dec  5 10:00:30 L",
         "EXIT_REASON": "TERM_OWNER: job killed by owner", "PEND_REASON": "", "EXEC_HOST": "vm"},
        {"JOBID": "424242", "ERROR": "Job <424242> is not found"},
    ],
}  # fmt: skip
BJOBS_ARRAY_RECORDS: list[dict[str, str]] = BJOBS_ARRAY["RECORDS"]
BHIST_ARRAY = """\
Job <77[4]>, Job Name <atlas-train-c0[4]>, User <atlas>, Project <default>, Command <#!/bin/bash;
                     #BSUB -J atlas-train-c0[1-4]%2>
Fri Dec  5 10:00:00: Submitted from host <vm>, to Queue <normal>, CWD <$HOME/run>;
Fri Dec  5 10:00:30: Dispatched 1 Task(s) on Host(s) <vm>;
Fri Dec  5 10:00:31: Starting (Pid 4242);
Fri Dec  5 10:00:41: Done successfully. The CPU time used is 1.0 seconds;

Summary of time in seconds spent in various states by  Fri Dec  5 10:00:41
  PEND     PSUSP    RUN      USUSP    SSUSP    UNKWN    TOTAL
  30       0        11       0        0        0        41
------------------------------------------------------------------------------

Job <78[1]>, Job Name <another[1]>, User <atlas>, Project <default>, Command <true>
Fri Dec  5 10:00:00: Submitted from host <vm>, to Queue <normal>, CWD <$HOME>;
"""
LSF = scheduler_for("lsf")
BJOBS_QUERY, BHIST_QUERY = LSF.array_record_queries("77")


def test_lsf_reads_each_element_by_its_name_index_with_the_submission_year() -> None:
    records = lsf_array_records("77", answer(json.dumps(BJOBS_ARRAY)), BJOBS_QUERY, "login", 2026)
    assert {i: (r.job, r.state, r.phase, r.exit_code) for i, r in records.items()} == {
        1: ("77[1]", "DONE", "succeeded", 0),
        2: ("77[2]", "EXIT", "failed", 3),
        3: ("77[3]", "EXIT", "cancelled", 143),  # TERM_OWNER: killed, not failed
    }
    assert (_since(records[3].requested_at), _since(records[3].started_at), _since(records[3].finished_at)) == (
        0.0,
        13.0,
        30.0,
    )
    assert records[1].node == "vm" and BJOBS_QUERY.startswith("TZ=UTC bjobs -a -hms -o ")


def test_lsf_bhist_gives_the_elements_bjobs_forgot_and_no_other_arrays() -> None:
    records = lsf_array_records("77", answer(BHIST_ARRAY), BHIST_QUERY, "login", 2026)
    assert list(records) == [4]
    element = records[4]
    assert (element.job, element.state, element.phase, element.exit_code) == ("77[4]", "DONE", "succeeded", 0)
    # bhist prints no year for this year's events: the current one.
    assert element.started_at is not None and element.finished_at is not None
    assert element.finished_at - element.started_at == 10.0
    assert element.started_at - (element.requested_at or 0.0) == 31.0


# --- one query per array, the next only for what it did not know; the last attempt is the record -----


def test_every_point_is_read_with_one_query_per_array_and_a_retry_is_the_points_record() -> None:
    asked: list[str] = []
    answers = {
        "41": {SACCT_QUERY: answer(SACCT)},
        "51": {},
        "61": {},
    }
    # A retry keeps its chunk's indices: point 1 of the chunk at offset 0 is element 1.
    retry_sacct = "51_1|atlas-train-r1|normal|COMPLETED|0:0|2026-12-05T10:01:00|2026-12-05T10:01:05|2026-12-05T10:01:09"
    chunk_sacct = "61_0|atlas-train-c1|normal|COMPLETED|0:0|2026-12-05T10:00:00|2026-12-05T10:00:40|2026-12-05T10:00:50"

    def runner(command: str) -> RemoteResult:
        asked.append(command)
        if command.endswith(" 41"):
            return answers["41"].get(command, answer("", 1, "unexpected"))
        if command.endswith(" 51"):
            return answer(retry_sacct) if "sacct -n -P -X" in command else answer("", 1, "unexpected")
        return answer(chunk_sacct) if "sacct -n -P -X" in command else answer("", 1, "unexpected")

    sweep = SweepOutputs(
        points=7,
        arrays=(
            SweepArray("41", 0, 6),
            SweepArray("61", 6, 1),
            SweepArray("51", 0, 1, points=(1,)),  # a retry of point 1
        ),
        elements="D1F1K1R1P2D1",
        results="results/train",
    )
    records, notes = SLURM.collect_sweep_records(runner, sweep, "login", 2026)
    # Accounting answered for every element: one query per array.
    assert asked == [SACCT_QUERY, SACCT_QUERY.replace(" 41", " 61"), SACCT_QUERY.replace(" 41", " 51")]
    assert notes == ()
    assert [r.point for r in records] == list(range(7))
    retried = records[1]
    assert (retried.job, retried.phase, retried.attempt, retried.array, retried.index) == (
        "51_1",
        "succeeded",
        2,
        "51",
        1,
    )
    assert (records[6].job, records[6].array, records[6].index) == ("61_0", "61", 0)


@pytest.mark.parametrize(
    ("array", "points"),
    [
        (SweepArray("41", 0, 3), {0: 0, 1: 1, 2: 2}),
        (SweepArray("61", 1000, 2), {0: 1000, 1: 1001}),
        (SweepArray("51", 1000, 2, points=(1003, 1017)), {3: 1003, 17: 1017}),
    ],
    ids=["chunk", "second chunk", "retry keeps its chunk's indices"],
)
def test_an_arrays_elements_map_to_points_through_its_offset_or_its_retried_points(
    array: SweepArray, points: dict[int, int]
) -> None:
    assert array_points(array) == points


def test_without_accounting_the_live_query_answers_and_an_element_nobody_knows_is_unknown() -> None:
    asked: list[str] = []

    def runner(command: str) -> RemoteResult:
        asked.append(command)
        if command == SQUEUE_QUERY:
            return answer(SQUEUE_R)
        return answer("", 1, "Slurm accounting storage is disabled")

    sweep = SweepOutputs(points=5, arrays=(SweepArray("41", 0, 5),), elements="?5", results="r")
    records, notes = SLURM.collect_sweep_records(runner, sweep, "login", 2026)
    assert asked == [SACCT_QUERY, SQUEUE_QUERY, JOBCOMP_QUERY]
    assert notes == ()
    assert [r.phase for r in records] == ["succeeded", "failed", "cancelled", "pending", "unknown"]
    assert records[4].source == "no query of array 41 knows the element" and records[4].job == "41 element 4"

    # Past MinJobAge without slurmdbd: Slurm 22.05's `sacct -c` (recorded on the local Satori)
    # prints one line under the array's id, naming no element: every point unknown, and why.
    jobcomp = answer(
        "41|atlas-train-c0|normal|FAILED|3:0|2026-12-05T11:32:49|2026-12-05T11:32:49|2026-12-05T11:32:49\n",
        0,
        "sacct: error: Unknown type ArrayJobId: 41\nsacct: error: Unknown type ArrayTaskId: 1\n",
    )

    def forgotten(command: str) -> RemoteResult:
        if command == JOBCOMP_QUERY:
            return jobcomp
        if command == SQUEUE_QUERY:
            return answer("", 1, "slurm_load_jobs error: Invalid job id specified")
        return answer("", 1, "Slurm accounting storage is disabled")

    records, notes = SLURM.collect_sweep_records(forgotten, sweep, "login", 2026)
    assert {r.phase for r in records} == {"unknown"}
    assert len(notes) == 1 and "sacct printed nothing Atlas can read (first line: '41|atlas-train-c0|" in notes[0]

    def silent(command: str) -> RemoteResult:
        return answer("", 1, "slurm_load_jobs error: Unable to contact slurm controller")

    records, notes = SLURM.collect_sweep_records(silent, sweep, "login", 2026)
    assert {r.phase for r in records} == {"unknown"}
    assert len(notes) == 1 and notes[0].startswith("array 41: no query answered (")


# --- Kubernetes: the Indexed Job's pods -------------------------------------------------------------


def pod(name: str, index: int, created: str, phase: str, exit_code: int | None = None, **times: str) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "startedAt": times["start"], "finishedAt": times["end"]}}
    elif "start" in times:
        state = {"running": {"startedAt": times["start"]}}
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": {"batch.kubernetes.io/job-name": "train-sweep", "job-name": "train-sweep"},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {"nodeName": "node-1"},
        "status": {"phase": phase, "containerStatuses": [{"state": state}] if state else []},
    }


def test_the_indexed_jobs_pods_are_its_elements_and_the_last_pod_of_an_index_its_record() -> None:
    job = {
        "metadata": {"name": "train-sweep", "creationTimestamp": "2026-12-05T10:00:00Z"},
        "status": {"completedIndexes": "0-1", "failedIndexes": "2"},
    }
    pods = [
        pod("p0", 0, "2026-12-05T10:00:01Z", "Succeeded", 0, start="2026-12-05T10:00:04Z", end="2026-12-05T10:00:14Z"),
        pod("p1a", 1, "2026-12-05T10:00:01Z", "Failed", 1, start="2026-12-05T10:00:04Z", end="2026-12-05T10:00:06Z"),
        pod("p1b", 1, "2026-12-05T10:00:07Z", "Succeeded", 0, start="2026-12-05T10:00:09Z", end="2026-12-05T10:00:19Z"),
        pod("p2", 2, "2026-12-05T10:00:01Z", "Failed", 143, start="2026-12-05T10:00:04Z", end="2026-12-05T10:00:08Z"),
        pod("p3", 3, "2026-12-05T10:00:01Z", "Running", start="2026-12-05T10:00:05Z"),
    ]
    sweep = SweepOutputs(points=5, arrays=(SweepArray("train-sweep", 0, 5),), elements="?5", results="r")
    records, notes = kube_sweep_elements(sweep, {"train-sweep": job}, pods, frozenset(), "the API")
    assert notes == ()
    assert [(r.job, r.phase, r.exit_code) for r in records] == [
        ("p0", "succeeded", 0),
        ("p1b", "succeeded", 0),  # the retried pod, not the failed first one
        ("p2", "cancelled", 143),  # SIGTERM: killed
        ("p3", "running", None),
        ("train-sweep index 4", "unknown", None),
    ]
    assert all(r.requested_at == T0 for r in records)  # the Job's creation is every element's request
    assert (_since(records[1].started_at), _since(records[1].finished_at)) == (9.0, 19.0)
    # The Job's own account beats its last pod's: a failed pod whose index is in neither
    # completedIndexes nor failedIndexes while the Job runs is a retry to come; once the Job ended,
    # an index that never ran was ended with it.
    running = {**job, "status": {"completedIndexes": "0-1"}}
    retrying = [
        pod("p2", 2, "2026-12-05T10:00:01Z", "Failed", 1, start="2026-12-05T10:00:04Z", end="2026-12-05T10:00:08Z")
    ]
    records, _ = kube_sweep_elements(sweep, {"train-sweep": running}, retrying, frozenset(), "the API")
    assert [r.phase for r in records] == ["succeeded", "succeeded", "pending", "unknown", "unknown"]
    assert records[2].state == "Failed, retry to come"
    ended = {
        **job,
        "status": {
            "completedIndexes": "0-1",
            "failedIndexes": "2",
            "conditions": [{"type": "Failed", "status": "True"}],
        },
    }
    records, _ = kube_sweep_elements(sweep, {"train-sweep": ended}, retrying, frozenset(), "the API")
    assert [r.phase for r in records] == ["succeeded", "succeeded", "failed", "cancelled", "cancelled"]
    assert records[3].state == "no pod: the Job ended before this index ran (deleted, suspended, a deadline)"
    assert records[0].state == "no pod: the Job's completedIndexes holds it; its pod is gone"
    gone, gone_notes = kube_sweep_elements(sweep, {}, [], frozenset(), "the API")
    assert gone_notes == ("Indexed Job train-sweep: not found in the API (deleted, or never created)",)
    assert {r.phase for r in gone} == {"unknown"}


# --- the metric ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "text", "value", "source"),
    [
        (SweepMetric("min", pattern=r"loss ([0-9.]+)"), "loss 0.9\nloss 0.5\ndone\n", 0.5, "log: loss 0.5"),
        (SweepMetric("min", pattern=r"loss ([0-9.]+)"), "started\n", None, "not measured: no line of log matches"),
        (SweepMetric("max", file="score.txt"), " 0.75\n", 0.75, "log"),
        (SweepMetric("max", file="score.txt"), "NaN?\n", None, "not measured: log holds 'NaN?', not a number"),
    ],
    ids=["pattern-last-match", "pattern-no-match", "file", "file-not-a-number"],
)
def test_the_metric_is_the_last_match_or_the_files_number(
    metric: SweepMetric, text: str, value: float | None, source: str
) -> None:
    reading = read_metric(3, text, metric, "log")
    assert reading.point == 3 and reading.value == value
    assert reading.source.startswith(source)


# --- the figures -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "p95"),
    [
        ([5.0], 5.0),
        ([3.0, 1.0, 2.0], 3.0),
        ([float(i) for i in range(1, 21)], 19.0),
        ([float(i) for i in range(1, 101)], 95.0),
    ],
    ids=["one", "three: the largest", "twenty: the 19th", "hundred: the 95th"],
)
def test_p95_is_the_nearest_rank(values: list[float], p95: float) -> None:
    assert nearest_rank(values, 95) == p95


def element(point: int, phase: str, start: float | None, end: float | None, requested: float = 0.0) -> ElementRecord:
    return ElementRecord(
        point=point,
        job=f"41_{point}",
        state=phase.upper(),
        phase=phase,
        requested_at=T0 + requested,
        started_at=None if start is None else T0 + start,
        finished_at=None if end is None else T0 + end,
        exit_code=None,
        node="vm",
        source="Slurm: `sacct -j 41` on login",
    )


FINISHED = (
    element(0, "succeeded", 2.0, 12.0),  # ran 10 s, waited 2 s
    element(1, "failed", 2.0, 5.0),  # ran 3 s
    element(2, "cancelled", 12.0, 20.0),  # killed after 8 s
    element(3, "succeeded", 12.0, 30.0),  # ran 18 s, waited 12 s
    element(4, "succeeded", 20.0, 26.0),
    element(5, "succeeded", 26.0, 40.0),  # the last end: the makespan is 40 s
)
READINGS = (
    MetricReading(0, 0.5, "logs/train.41_0: loss 0.5"),
    MetricReading(1, 0.1, "logs/train.41_1: loss 0.1"),  # lowest, but the element failed
    MetricReading(2, None, "not measured: no line of logs/train.41_2 matches sweep.metric.pattern"),
    MetricReading(3, 0.3, "logs/train.41_3: loss 0.3"),
    MetricReading(4, None, "not measured: no logs/train.41_4"),
    MetricReading(5, 0.3, "logs/train.41_5: loss 0.3"),  # a tie with point 3: the lower index wins
)


def test_a_finished_sweeps_figures() -> None:
    record = SweepRecord("train", 6, FINISHED, ("41",), (), READINGS, grid(SweepMetric("min", pattern="loss (.*)")))
    figures = sweep_metrics(record)
    assert figures.states == (("succeeded", 4), ("failed", 1), ("killed or cancelled", 1))
    assert figures.run_time_median.value == 9.0 and figures.run_time_p95.value == 18.0
    assert figures.run_time_p95.note == "over 6 of 6 element(s) (nearest rank: the largest, under 20 elements)"
    assert figures.queue_wait_median.value == 12.0 and figures.queue_wait_p95.value == 26.0
    assert figures.makespan.value == 40.0 and figures.makespan.kind == "computed"
    assert figures.best_point.value == 3.0 and figures.best_metric.value == 0.3
    assert figures.best_values == "lr=2e-4, seed=1"
    assert figures.best_metric.source == "logs/train.41_3: loss 0.3"
    assert figures.metric_read.startswith("3 of 6 point(s) (pattern 'loss (.*)' in each element's log, goal min)")
    assert "not read at 2: point 2: not measured: no line of logs/train.41_2" in figures.metric_read
    maximum = sweep_metrics(
        SweepRecord("train", 6, FINISHED, ("41",), (), READINGS, grid(SweepMetric("max", pattern="loss (.*)")))
    )
    assert maximum.best_point.value == 0.0 and maximum.best_values == "lr=1e-4, seed=0"


def test_an_unfinished_sweep_has_no_makespan_and_no_figure_is_a_zero() -> None:
    running = (element(0, "succeeded", 2.0, 12.0), element(1, "running", 3.0, None), element(2, "pending", None, None))
    figures = sweep_metrics(SweepRecord("train", 4, running, ("41",), (), Missing(NO_METRIC), grid()))
    assert figures.states == (("succeeded", 1), ("running", 1), ("pending", 1), ("unknown", 1))
    assert figures.makespan.value is None and "point(s) have no element record" in figures.makespan.note
    assert figures.run_time_median.value == 10.0 and figures.run_time_median.note == "over 1 of 4 element(s)"
    assert figures.queue_wait_p95.value == 3.0  # the running element started too
    assert figures.best_point.value is None and figures.best_point.note == NO_METRIC
    none_ran = sweep_metrics(SweepRecord("train", 1, (element(0, "pending", None, None),), ("41",), (), (), grid()))
    assert none_ran.run_time_median.value is None and none_ran.run_time_median.kind == "not-measured"
    assert none_ran.makespan.note == "not measured: 1 element(s) not finished (or not known)"


# --- collected from an HPC side, then rendered ---------------------------------------------------------


def test_an_hpc_sides_sweep_is_collected_with_its_metric_from_each_elements_log(tmp_path: Path) -> None:
    home = tmp_path / "home"
    logs = home / "run" / "logs"
    logs.mkdir(parents=True)
    for index, text in ((0, "loss 0.5\n"), (1, "crashed\n"), (3, "loss 0.25\n")):
        (logs / f"train.41_{index}").write_text(text)
    outputs = hpc_outputs(
        {
            "scheduler": "slurm",
            "host": "login",
            "run_dir": "run",
            "logs": {"path": "run/logs"},
            "steps": [
                {
                    "name": "train",
                    "job_id": "41",
                    "submitted_at": "2026-12-05T10:00:00Z",
                    "sweep": {
                        "points": 6,
                        "arrays": [{"job_id": "41", "offset": 0, "count": 6}],
                        "elements": "D1F1K1R1P2",
                        "results": "results/train",
                    },
                }
            ],
        }
    )
    sweep = grid(SweepMetric("min", pattern=r"loss ([0-9.]+)"))
    contract = ReportContract(sweeps=(("train", sweep),))

    def runner(command: str) -> RemoteResult:
        if command == SACCT_QUERY:
            return answer(SACCT)
        return answer("", 1, "no such command in this test")

    records = collect_hpc("satori-slurm", outputs, runner, LocalFiles(home), tmp_path / "raw", contract)
    (swept,) = records.sweeps
    assert swept.step == "train" and swept.arrays == ("41",) and swept.definition == sweep
    assert isinstance(swept.metric, tuple)
    assert [(r.point, r.value) for r in swept.metric] == [
        (0, 0.5),
        (1, None),
        (2, None),
        (3, 0.25),
        (4, None),
        (5, None),
    ]
    assert swept.metric[1].source.startswith("not measured: no line of run/logs/train.41_1 on @login:22 (SFTP)")
    assert swept.metric[2].source == "not measured: no run/logs/train.41_2 on @login:22 (SFTP)"
    figures = sweep_metrics(swept)
    # Point 3's element is still running: only succeeded points are ranked.
    assert figures.best_point.value == 0.0 and figures.best_values == "lr=1e-4, seed=0"
    # The swept step's own record is the sweep's: the first request and start, no end while any
    # element has not ended (so `compare --wait` waits for the whole sweep).
    assert not isinstance(records.steps, Missing)
    (step,) = records.steps
    assert (step.job, step.requested_at, _since(step.started_at), step.finished_at) == ("41", T0, 2.0, None)
    assert step.state == "sweep: cancelled 1, failed 1, pending 2, running 1, succeeded 1"
    assert unfinished_steps([records]) == [
        "satori-slurm/train (sweep: cancelled 1, failed 1, pending 2, running 1, succeeded 1)"
    ]
    without = collect_hpc("satori-slurm", outputs, runner, LocalFiles(home), tmp_path / "raw2", DEFAULT_CONTRACT)
    assert isinstance(without.sweeps[0].metric, Missing)
    assert without.sweeps[0].metric.reason.startswith("not measured: the workload's definition was not loaded")


def sides() -> list[Any]:
    """Two sides of one sweep, LSF and Slurm, as collected (their steps not read: the sections
    need only the sweeps)."""
    lsf = [
        ElementRecord(**{**vars(e), "job": f"77[{e.point + 1}]", "source": "LSF: `bjobs ... 77` on login"})
        for e in FINISHED
    ]
    slurm = [*FINISHED[:4], element(4, "succeeded", 30.0, 36.0), element(5, "unknown", None, None)]
    definition = grid(SweepMetric("min", pattern="loss (.*)"))
    records = []
    for name, scheduler, elements, arrays, notes in (
        ("satori", "lsf", tuple(lsf), ("77",), ()),
        ("satori-slurm", "slurm", tuple(slurm), ("41",), ("array 41: no query answered for element 5",)),
    ):
        base = without_records(name, "hpc", f"{scheduler} over SSH", "steps not read in this test", ())
        record = SweepRecord("train", 6, elements, arrays, notes, READINGS, definition)
        records.append(base.__class__(**{**vars(base), "sweeps": (record,), "provenance": "local stand-in"}))
    return records


def test_the_markdown_section_of_a_sweep_matches_its_golden_file() -> None:
    report = metrics.build_report(sides(), cost_files.load_cost_profiles(), cost_files.load_rate_table(), {})
    markdown = render.render_markdown(report, (), {})
    section = markdown[markdown.index("## Sweep: train") :]
    section = section[: section.index("\n## ", 1) + 1]
    golden = GOLDEN / "sweep-report-section.md"
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        golden.write_text(section)
    assert section == golden.read_text(), f"{golden} differs; if intended, rerun with ATLAS_UPDATE_GOLDEN=1"
    page = render.render_html(report, ())
    assert "<h2>Sweep: train</h2>" in page and "makespan (first request to the last element&#x27;s end)" in page
    data = json.loads(render.render_json(report))
    (lsf_sweep,) = data["environments"][0]["sweeps"]
    assert lsf_sweep["makespan"]["value"] == 40.0 and lsf_sweep["states"] == [
        ["succeeded", 4],
        ["failed", 1],
        ["killed or cancelled", 1],
    ]
    slurm_sweep = data["environments"][1]["sweeps"][0]
    assert slurm_sweep["makespan"]["value"] is None and slurm_sweep["makespan"]["kind"] == "not-measured"


# --- the monitor: a sweep's elements by state per side ------------------------------------------------


def swept_outputs(scheduler: str, arrays: list[dict[str, Any]], points: int) -> dict[str, Any]:
    return {
        "scheduler": scheduler,
        "host": "login",
        "user": "atlas",
        "run_dir": "run",
        "logs": {"path": "run/logs"},
        "steps": [
            {
                "name": "train",
                "job_id": arrays[0]["job_id"],
                "sweep": {"points": points, "arrays": arrays, "elements": f"P{points}", "results": "results/train"},
            }
        ],
    }


def sections_answer(script: str, answers: dict[str, tuple[int, str]]) -> str:
    """What the poll script prints for its `sweep <id>` sections (the others answer nothing)."""
    out = []
    for name, (code, text) in answers.items():
        if f"'{name}'" in script or f" {name};" in script:
            out += [f"{SECTION} {name}", text, f"{EXIT} {code}"]
    return "\n".join(out) + "\n"


def test_the_monitor_reads_a_sweeps_arrays_in_its_poll_script_and_counts_elements_by_state() -> None:
    arrays = [
        {"job_id": "41", "offset": 0, "count": 4},
        {"job_id": "61", "offset": 4, "count": 2},
        {"job_id": "51", "offset": 0, "count": 1, "points": [1]},  # point 1 retried, now running
    ]
    answers = {
        "sweep 41": (0, "41|0|COMPLETED|None\n41|1|FAILED|NonZeroExitCode\n41|2|CANCELLED|None\n41|3|RUNNING|None"),
        "sweep 61": (0, "61|0|PENDING|JobArrayTaskLimit\n61|1|PENDING|JobArrayTaskLimit"),
        "sweep 51": (0, "51|1|RUNNING|None"),  # a retry keeps its chunk's indices
    }
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        return answer(sections_answer(command, answers) if SECTION in command else "")

    source = HpcSource("satori-slurm", hpc_outputs(swept_outputs("slurm", arrays, 6)), runner, 30.0)
    poll = source.poll()
    assert source.calls == 2  # the status query and one script, whatever the number of arrays
    assert commands[1].count("squeue -h -r -t all -j ") == 3
    (view,) = poll.sweeps
    assert (view.step, view.points, view.note) == ("train", 6, "")
    assert view.states == (("succeeded", 1), ("killed or cancelled", 1), ("running", 2), ("pending", 2))
    assert view.source.startswith("atlas@login:22: one query per array (squeue -h -r -t all -j 41 ")
    # The swept step's row is its sweep's (its id alone is its first array's).
    typed = hpc_outputs(swept_outputs("slurm", arrays, 6))
    environment = HpcEnvironmentSource("satori-slurm", typed, HpcSource("satori-slurm", typed, runner, 30.0))
    (row,) = environment.view(T0, ViewContext(None, IdleTracker(5.0))).steps
    assert (row.name, row.phase) == ("train", "running")
    assert row.native_state == "sweep: succeeded 1, killed or cancelled 1, running 2, pending 2"

    answers["sweep 61"] = (1, "slurm_load_jobs error: Unable to contact slurm controller")
    failing = HpcSource("satori-slurm", hpc_outputs(swept_outputs("slurm", arrays, 6)), runner, 30.0)
    (view,) = failing.poll().sweeps
    assert view.states == (("succeeded", 1), ("killed or cancelled", 1), ("running", 2), ("unknown", 2))
    assert view.note.startswith("array 61: ") and "Unable to contact slurm controller" in view.note
    snapshot = Snapshot(0.0, "local", "probe", "1", 30.0, (EnvironmentView(
        "satori-slurm", "hpc", "Slurm over SSH", (), (), 0.0, "test", sweeps=(view,)),))  # fmt: skip
    page = html_page(snapshot)
    assert 'data-field="elements_running" data-value="2">running 2</td>' in page
    console = Console(record=True, width=160)
    console.print(terminal_view(snapshot))
    assert "running 2, unknown 2" in console.export_text()


def test_the_monitor_counts_an_lsf_sweeps_elements_by_their_name_index() -> None:
    arrays = [{"job_id": "77", "offset": 0, "count": 3}]
    answers = {"sweep 77": (0, json.dumps({**BJOBS_ARRAY, "RECORDS": BJOBS_ARRAY_RECORDS[:3]}))}

    def runner(command: str) -> RemoteResult:
        return answer(sections_answer(command, answers) if SECTION in command else '{"RECORDS": []}')

    source = HpcSource("satori", hpc_outputs(swept_outputs("lsf", arrays, 3)), runner, 30.0)
    (view,) = source.poll().sweeps
    assert view.states == (("succeeded", 1), ("failed", 1), ("killed or cancelled", 1))


class CacheOf:
    """What KubeSource reads of its watch cache, from fixed lists."""

    def __init__(self, **items: list[dict[str, Any]]) -> None:
        self.lists: dict[str, list[dict[str, Any]]] = items
        self.notes: list[str] = []

    def items(self, name: str) -> list[dict[str, Any]]:
        return self.lists.get(name, [])

    def error(self, name: str) -> str:
        return ""

    def synced_at(self) -> float:
        return T0


def test_the_monitor_counts_the_indexed_jobs_pods_by_state() -> None:
    outputs = read_environment(
        KubernetesOutputs,
        {
            "gpus_requested": 0,
            "flavour": "openshift",
            "namespace": "atlas",
            "telemetry": {"path": "telemetry", "pvc": "results"},
            "logs": {"path": "logs", "pvc": "logs"},
            "steps": [
                {
                    "name": "train",
                    "job": "train-sweep",
                    "sweep": {
                        "points": 3,
                        "arrays": [{"job_id": "train-sweep", "offset": 0, "count": 3}],
                        "elements": "P3",
                        "results": "results/train",
                    },
                }
            ],
        },
        "openshift",
    )
    job = {
        "metadata": {"name": "train-sweep", "namespace": "atlas", "creationTimestamp": "2026-12-05T10:00:00Z"},
        "status": {"completedIndexes": "0", "failedIndexes": "1"},
    }
    pods = [
        pod("p0", 0, "2026-12-05T10:00:01Z", "Succeeded", 0, start="2026-12-05T10:00:04Z", end="2026-12-05T10:00:14Z"),
        pod("p1", 1, "2026-12-05T10:00:01Z", "Failed", 2, start="2026-12-05T10:00:04Z", end="2026-12-05T10:00:06Z"),
    ]
    for p in pods:
        p["metadata"]["namespace"] = "atlas"
    source = KubeSource("openshift", outputs, CacheOf(jobs=[job], pods=pods))  # type: ignore[arg-type]
    view = source.view(T0 + 60, ViewContext(None, IdleTracker(5.0)))
    (sweep,) = view.sweeps
    assert sweep.states == (("succeeded", 1), ("failed", 1), ("unknown", 1))
    assert sweep.source == "the watch cache's Indexed Job(s) train-sweep and their pods"
