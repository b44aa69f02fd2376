"""Each scheduler's step records for the report, on recorded output: the record query and its
history fallback (LSF bjobs then bhist, Slurm squeue then sacct), read into times, states, pending
reasons, nodes and GPUs. Moved here from test_compare.py with the code it tests (infra/hpc/lsf/,
infra/hpc/slurm/).

The recordings in tests/unit/data/compare/ are the comparison's: LSF's `bjobs -a -hms -o ... -json`
and `bhist -l` from one `pulumi up -s local`, the Slurm side's `squeue -O` and `sacct -c` from a later
`scripts/demo` (2026-12-04).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from infra.hpc.lsf import LsfScheduler
from infra.hpc.lsf.jobs import lsf_short
from infra.hpc.lsf.records import LSF_FIELDS
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import SubmittedStep
from infra.hpc.slurm import SlurmScheduler
from infra.hpc.slurm.records import SQUEUE_QUERY
from infra.job_records import StepRecord
from infra.timeparse import rfc3339
from tests.support import hpc_outputs

REC = Path(__file__).parent / "data" / "compare"
ENVS = json.loads((REC / "stack_outputs.json").read_text())["environments"]
LSF = LsfScheduler()
SLURM = SlurmScheduler()


def utc(text: str) -> float:
    return rfc3339(text) or math.nan


def result(name: str, code: int = 0, stderr: str = "") -> RemoteResult:
    return RemoteResult("recorded", code, (REC / name).read_text(), stderr)


def raw(stdout: str) -> RemoteResult:
    return RemoteResult("recorded", 0, stdout, "")


def lsf_steps(
    outputs: Mapping[str, Any], bjobs: RemoteResult, bhist: RemoteResult | None, argv: Mapping[str, tuple[str, ...]]
) -> tuple[StepRecord, ...]:
    return LSF.step_records(SubmittedStep.all_of(hpc_outputs(outputs)), bjobs, bhist, str(outputs.get("host")), argv)


def slurm_steps(
    outputs: Mapping[str, Any], squeue: RemoteResult, sacct: RemoteResult | None, argv: Mapping[str, tuple[str, ...]]
) -> tuple[StepRecord, ...]:
    return SLURM.step_records(SubmittedStep.all_of(hpc_outputs(outputs)), squeue, sacct, str(outputs.get("host")), argv)


def test_the_record_queries_print_times_under_utc_for_every_job_at_once() -> None:
    assert LSF.record_query(["14", "16", "18"]) == "TZ=UTC bjobs -a -hms -o '" + LSF_FIELDS + "' -json 14 16 18"
    assert LSF.history_queries(["14", "16", "18"]) == ["TZ=UTC bhist -l 14 16 18"]
    assert SLURM.record_query(["1", "2", "3"]) == f"{SQUEUE_QUERY} 1,2,3"
    assert [q.split()[:3] for q in SLURM.history_queries(["1", "2", "3"])] == [
        ["TZ=UTC", "sacct", "-n"],
        ["TZ=UTC", "sacct", "-c"],  # no slurmdbd: the jobcomp file
    ]
    # The ids come from the stack outputs: whatever they hold reaches the shell quoted.
    assert LSF.record_query(["1; id"]).endswith(" -json '1; id'")
    assert SLURM.record_query(["1", "$(id)"]).endswith(" -j '1,$(id)'")
    assert all(q.endswith(" -j '1,$(id)'") for q in SLURM.history_queries(["1", "$(id)"]))


# --- LSF ----------------------------------------------------------------------------------------


def test_lsf_times_read_back_with_seconds_and_the_submission_year() -> None:
    assert lsf_short("Dec  2 15:56:43", 2026) == utc("2026-12-02T15:56:43Z")
    assert lsf_short("Dec  2 15:57:03 L", 2026) == utc("2026-12-02T15:57:03Z")
    assert lsf_short("Dec  2 15:57", 2026) == utc("2026-12-02T15:57:00Z")
    assert lsf_short("", 2026) is None


def test_lsf_bjobs_json_gives_submit_start_finish_to_the_second() -> None:
    steps = {s.step: s for s in lsf_steps(ENVS["satori"], result("bjobs.json"), None, {})}
    train = steps["train"]
    assert (train.job, train.state, train.exit_code, train.node) == ("18", "DONE", 0, "vm")
    assert train.requested_at == utc("2026-12-02T15:56:51Z")
    assert train.started_at == utc("2026-12-02T15:56:52Z")
    assert train.finished_at == utc("2026-12-02T15:57:03Z")
    assert "bjobs -a -hms" in train.source


def test_lsf_falls_back_to_bhist_for_jobs_bjobs_forgot() -> None:
    empty = RemoteResult("bjobs", 255, '{"COMMAND":"bjobs","JOBS":0,"RECORDS":[]}', "")
    steps = {s.step: s for s in lsf_steps(ENVS["satori"], empty, result("bhist.txt"), {})}
    assert steps["train"].requested_at is not None  # bhist has no year: today's
    assert steps["train"].finished_at is not None and steps["train"].started_at is not None
    assert steps["train"].finished_at - steps["train"].started_at == 11.0
    assert steps["make-hdf5"].state == "DONE" and steps["make-hdf5"].exit_code == 0


def test_lsf_bhist_events_give_each_lifecycle_time_and_the_state_lsf_py_reads() -> None:
    empty = RemoteResult("bjobs", 255, '{"COMMAND":"bjobs","JOBS":0,"RECORDS":[]}', "")
    train = {s.step: s for s in lsf_steps(ENVS["satori"], empty, result("bhist.txt"), {})}["train"]
    year = dt.datetime.now(dt.UTC).year
    assert (train.job, train.state, train.exit_code) == ("18", "DONE", 0)
    assert (train.requested_at, train.scheduled_at, train.started_at, train.finished_at) == (
        utc(f"{year}-12-02T15:56:51Z"),
        utc(f"{year}-12-02T15:56:52Z"),
        utc(f"{year}-12-02T15:56:52Z"),
        utc(f"{year}-12-02T15:57:03Z"),
    )
    assert train.source == "LSF: `TZ=UTC bhist -l 18` on 127.0.0.1"


def test_lsf_job_neither_bjobs_nor_bhist_knows_is_unknown_with_the_reason() -> None:
    empty = RemoteResult("bjobs", 255, '{"COMMAND":"bjobs","JOBS":0,"RECORDS":[]}', "")
    none = RemoteResult("bhist", 255, "", "No matching job found")
    steps = lsf_steps(ENVS["satori"], empty, none, {})
    assert {(s.state, s.pending_reason, s.started_at) for s in steps} == {
        ("UNKNOWN", "neither bjobs nor bhist knows the job", None)
    }


# --- Slurm ---------------------------------------------------------------------------------------


def test_slurm_squeue_fields_and_sacct_fallback_agree() -> None:
    from_squeue = {s.step: s for s in slurm_steps(ENVS["satori-slurm"], result("squeue_fields.txt"), None, {})}
    train = from_squeue["train"]
    assert (train.job, train.state, train.exit_code, train.node) == ("3", "COMPLETED", 0, "vm")
    assert (train.requested_at, train.started_at, train.finished_at) == (
        utc("2026-12-04T12:01:16Z"), utc("2026-12-04T12:01:22Z"), utc("2026-12-04T12:01:32Z"),
    )  # fmt: skip
    gone = RemoteResult("squeue", 1, "", "slurm_load_jobs error: Invalid job id specified")
    from_sacct = {s.step: s for s in slurm_steps(ENVS["satori-slurm"], gone, result("sacct_c.txt"), {})}
    assert from_sacct["train"].started_at == train.started_at
    assert from_sacct["train"].finished_at == train.finished_at
    assert "sacct" in from_sacct["train"].source


def test_slurm_gpus_asked_for_come_from_the_request_and_given_only_where_gpus_are_accounted() -> None:
    steps = {s.step: s for s in slurm_steps(ENVS["satori-slurm"], result("squeue_fields.txt"), None, {})}
    # `--gres=gpu:1` (tres-per-node) on one node; the other steps asked for none.
    assert {name: s.gpus_requested for name, s in steps.items()} == {"make-hdf5": 0, "inception-moments": 0, "train": 1}
    # The local Slurm has no slurmdbd, so no gres/gpu TRES: what was given is not recorded.
    assert {s.gpus_allocated for s in steps.values()} == {None}
    # A site with AccountingStorageTRES=gres/gpu: the allocation's TRES names the GPUs.
    recorded = result("squeue_fields.txt").stdout
    accounted = recorded.replace("billing=1|N/A|gres:gpu:1", "billing=1,gres/gpu=1|N/A|gres:gpu:1")
    assert accounted != recorded
    given = {s.step: s.gpus_allocated for s in slurm_steps(ENVS["satori-slurm"], raw(accounted), None, {})}
    assert given == {"make-hdf5": None, "inception-moments": None, "train": 1}


@pytest.mark.parametrize(
    ("per_job", "per_node", "per_task", "nodes", "asked"),
    [
        ("N/A", "gres:gpu:2", "N/A", "2", 4),  # --gres=gpu:2 -N 2
        ("N/A", "gres:gpu:v100:1", "N/A", "1", 1),  # a typed gres (22.05)
        ("N/A", "gres/gpu:4", "N/A", "1", 4),  # 23.02+ spelling
        ("gres:gpu:3", "N/A", "N/A", "2", 3),  # --gpus=3: per job, however many nodes
        ("N/A", "N/A", "gres:gpu:1", "1", None),  # per task: depends on the task layout
        ("N/A", "N/A", "N/A", "1", 0),
    ],
)
def test_slurm_gpus_asked_for_in_each_form_of_request(
    per_job: str, per_node: str, per_task: str, nodes: str, asked: int | None
) -> None:
    times = "2026-12-04T12:01:16|2026-12-04T12:01:16|2026-12-04T12:01:18"
    line = f"9|COMPLETED|normal|x|None|0|{times}|cpu=1|{per_job}|{per_node}|{per_task}|N/A|{nodes}|vm|\n"
    outputs = {"host": "h", "steps": [{"name": "s", "job_id": "9"}]}
    assert slurm_steps(outputs, raw(line), None, {})[0].gpus_requested == asked
