"""Scheduler output parsers, on output recorded from the local Satori (LSF command set on Slurm
22.05.8) and from LSF's documentation (IBM Spectrum LSF 10.1)."""

from __future__ import annotations

import json
import shlex

import pytest

from infra.hpc.lsf import LsfScheduler
from infra.hpc.polling import lookup_by_name, query_states
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    CancelOutcome,
    Phase,
    SchedulerError,
    StatusQuery,
    UnsupportedOutput,
)
from infra.hpc.slurm import SlurmScheduler
from infra.hpc.slurm.jobs import STATUS_FORMAT

LSF = LsfScheduler()
SLURM = SlurmScheduler()


def res(stdout: str = "", stderr: str = "", rc: int = 0, command: str = "x") -> RemoteResult:
    return RemoteResult(command, rc, stdout, stderr)


# --- submission ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdout", "job_id"),
    [
        ("Job <2329803> is submitted to queue <normal>.\n", "2329803"),
        ("Job <12> is submitted to default queue <normal>.\n", "12"),
        ("LSF is processing your request. Please wait ...\nJob <7> is submitted to queue <debug>.\n", "7"),
        ("Cannot connect to LSF. Please wait ...\nJob <8> is submitted to queue <normal>.\n", "8"),
    ],
)
def test_bsub_success(stdout: str, job_id: str) -> None:
    assert LSF.parse_submission(res(stdout)) == job_id


@pytest.mark.parametrize(
    "stderr",
    [
        "nosuch: No such queue. Job not submitted.\n",
        "Too many processors requested. Job not submitted.\n",
        'Error near "select" : duplicate section. Job not submitted.\n',
        "424242: No matching job found. Job not submitted.\n",
        "Request from non-LSF host rejected\n",
    ],
)
def test_bsub_refusals_quote_lsf(stderr: str) -> None:
    with pytest.raises(
        SchedulerError, match="bsub refused the job \\(exit 255\\): " + stderr.strip()[:20].replace("(", "\\(")
    ):
        LSF.parse_submission(res(stderr=stderr, rc=255))


@pytest.mark.parametrize(
    ("stdout", "job_id"), [("2\n", "2"), ("2;atlas17000\n", "2"), ("Submitted batch job 41\n", "41")]
)
def test_sbatch_success(stdout: str, job_id: str) -> None:
    assert SLURM.parse_submission(res(stdout)) == job_id


@pytest.mark.parametrize(
    ("stderr", "rc"),
    [
        (
            "sbatch: error: invalid partition specified: nosuch\n"
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
            1,
        ),
        ("sbatch: error: Batch job submission failed: Requested node configuration is not available\n", 1),
        ("sbatch: error: Invalid --time specification\n", 255),
    ],
)
def test_sbatch_refusals(stderr: str, rc: int) -> None:
    with pytest.raises(SchedulerError, match=f"sbatch refused the job \\(exit {rc}\\)"):
        SLURM.parse_submission(res(stderr=stderr, rc=rc))


# --- status ------------------------------------------------------------------------------------

BJOBS_JSON = """{
  "COMMAND":"bjobs",
  "JOBS":4,
  "RECORDS":[
    {"JOBID":"3","STAT":"EXIT","QUEUE":"normal","EXIT_CODE":"1","JOB_NAME":"atlas-smoke-lsf",
     "SUBMIT_TIME":"Dec  2 15:05","START_TIME":"Dec  2 15:05","FINISH_TIME":"Dec  2 15:05 L","EXIT_REASON":""},
    {"JOBID":"4","STAT":"EXIT","QUEUE":"normal","EXIT_CODE":"","JOB_NAME":"atlas-smoke-lsf",
     "SUBMIT_TIME":"Dec  2 15:05","START_TIME":"","FINISH_TIME":"Dec  2 15:05 L",
     "EXIT_REASON":"TERM_OWNER: job killed by owner"},
    {"JOBID":"22005","STAT":"DONE","QUEUE":"normal","EXIT_CODE":"","JOB_NAME":"a\\/b",
     "SUBMIT_TIME":"Dec 28 19:56","START_TIME":"Dec 28 19:56","FINISH_TIME":"Dec 28 19:56 L","EXIT_REASON":""},
    {"JOBID":"424242","ERROR":"Job <424242> is not found"}
  ]
}"""


def test_bjobs_json_with_an_unknown_id_exits_255_but_is_complete() -> None:
    states = LSF.parse_bjobs_json(res(BJOBS_JSON, rc=255))
    assert sorted(states) == ["22005", "3", "4"]
    assert (states["3"].phase, states["3"].exit_code) == (Phase.FAILED, 1)
    assert (states["4"].phase, states["4"].exit_code) == (Phase.CANCELLED, None)  # bkill while pending
    assert (states["22005"].phase, states["22005"].exit_code, states["22005"].name) == (Phase.SUCCEEDED, 0, "a/b")


@pytest.mark.parametrize(
    ("stat", "exit_code", "reason", "phase"),
    [
        ("PEND", "", "", Phase.PENDING),
        ("WAIT", "", "", Phase.PENDING),
        ("RUN", "", "", Phase.RUNNING),
        ("PSUSP", "", "", Phase.SUSPENDED),
        ("USUSP", "", "", Phase.SUSPENDED),
        ("SSUSP", "", "", Phase.SUSPENDED),
        ("DONE", "", "", Phase.SUCCEEDED),
        ("PDONE", "", "", Phase.SUCCEEDED),
        ("EXIT", "3", "", Phase.FAILED),
        ("EXIT", "143", "TERM_OWNER: job killed by owner", Phase.CANCELLED),
        ("EXIT", "140", "TERM_RUNLIMIT: job killed after reaching LSF run time limit", Phase.FAILED),
        ("EXIT", "", "", Phase.CANCELLED),
        ("ZOMBI", "", "", Phase.CANCELLED),
        ("UNKWN", "", "", Phase.UNKNOWN),
    ],
)
def test_lsf_states(stat: str, exit_code: str, reason: str, phase: Phase) -> None:
    record = {"JOBID": "1", "STAT": stat, "QUEUE": "normal", "EXIT_CODE": exit_code, "EXIT_REASON": reason}
    doc = json.dumps({"COMMAND": "bjobs", "JOBS": 1, "RECORDS": [record]})
    assert LSF.parse_bjobs_json(res(doc))["1"].phase is phase


def test_bjobs_text_fallback() -> None:
    out = "3^EXIT^normal^1^atlas-smoke-lsf\n4^EXIT^normal^-^atlas-smoke-lsf\n7^RUN^debug^-^atlas-smoke-lsf\n"
    states = LSF.parse_bjobs_text(res(out))
    assert [(s.job_id, s.phase, s.exit_code, s.queue) for s in states.values()] == [
        ("3", Phase.FAILED, 1, "normal"),
        ("4", Phase.CANCELLED, None, "normal"),
        ("7", Phase.RUNNING, None, "debug"),
    ]


def test_bjobs_json_on_an_old_lsf_falls_back_to_text() -> None:
    answers = {
        "json": res(stderr="-json: Illegal option\n", rc=255),
        "text": res("5^DONE^normal^-^n\n"),
    }

    def runner(command: str) -> RemoteResult:
        return answers["json" if "-json" in command else "text"]

    outcome = query_states(LSF, runner, ["5"])
    assert outcome.states["5"].phase is Phase.SUCCEEDED
    assert len(outcome.commands) == 2
    assert shlex.split(outcome.commands[1])[3] == "jobid stat queue exit_code job_name delimiter='^'"


BHIST_LONG = """Job <3>, Job Name <atlas-smoke-lsf>, User <atlas>, Command <>
Wed Dec  2 15:05:05: Submitted from host <vm>, to Queue <normal>, CWD </home/atlas/smoke>;
Wed Dec  2 15:05:06: Dispatched 1 Task(s) on Host(s) <vm>;
Wed Dec  2 15:05:06: Starting (Pid unknown);
Wed Dec  2 15:05:06: Exited with exit code 1. The CPU time used is unknown.

Summary of time in seconds spent in various states by  Wed Dec  2 15:05:41
  PEND     PSUSP    RUN      USUSP    SSUSP    UNKWN    TOTAL
  1        0        0        0        0        0        1
------------------------------------------------------------------------------

Job <4>, Job Name <atlas-smoke-lsf>, User <atlas>, Command <>
Wed Dec  2 15:05:05: Submitted from host <vm>, to Queue <normal>, CWD </home/atlas/smoke>;
Wed Dec  2 15:05:09: Exited; job has been forced to exit.

Job <5>, Job Name <ok>, User <atlas>, Command <>
Wed Dec  2 15:05:05: Submitted from host <vm>, to Queue <debug>, CWD </home/atlas/smoke>;
Wed Dec  2 15:05:09: Done successfully. The CPU time used is unknown.

Job <6>, Job Name <killed-running>, User <atlas>, Command <>
Wed Dec  2 15:05:05: Submitted from host <vm>, to Queue <normal>, CWD </home/atlas/smoke>;
Wed Dec  2 15:05:06: Dispatched 1 Task(s) on Host(s) <vm>;
Wed Dec  2 15:05:06: Starting (Pid 4242);
Wed Dec  2 15:05:09: Exited; job has been forced to exit with exit code 130. The CPU time used is unknown.
"""


def test_bhist_long_accounting() -> None:
    states = LSF.parse_bhist_long(res(BHIST_LONG))
    assert [(s.job_id, s.phase, s.exit_code, s.queue) for s in states.values()] == [
        ("3", Phase.FAILED, 1, "normal"),
        ("4", Phase.CANCELLED, None, "normal"),
        ("5", Phase.SUCCEEDED, 0, "debug"),
        ("6", Phase.CANCELLED, 130, "normal"),
    ]


def test_squeue_with_only_unknown_ids() -> None:
    err = "slurm_load_jobs error: Invalid job id specified\n"
    assert SLURM.parse_squeue_fields(res(stderr=err, rc=1)) == {}
    assert SLURM.parse_squeue_text(res(stderr=err, rc=1)) == {}


def test_squeue_text() -> None:
    out = (
        "5|PENDING|normal|atlas-a-1|Dependency\n"
        "6|RUNNING|debug|atlas-b-2|None\n"
        "7|PENDING|normal|c|DependencyNeverSatisfied\n"
    )
    states = SLURM.parse_squeue_text(res(out))
    assert [(s.job_id, s.phase, s.queue, s.reason) for s in states.values()] == [
        ("5", Phase.PENDING, "normal", "Dependency"),
        ("6", Phase.RUNNING, "debug", ""),
        ("7", Phase.PENDING, "normal", "DependencyNeverSatisfied"),
    ]


SACCT = (
    "5|atlas-smoke-slurm|normal|FAILED|1:0|2026-12-02T15:05:12|2026-12-02T15:05:12|2026-12-02T15:05:12\n"
    "5.batch|batch||FAILED|1:0|2026-12-02T15:05:12|2026-12-02T15:05:12|2026-12-02T15:05:12\n"
    "6|atlas-smoke-slurm|normal|CANCELLED by 1001|0:15|2026-12-02T15:05:15|2026-12-02T15:05:15|2026-12-02T15:05:15\n"
    "7|ok|debug|COMPLETED|0:0|2026-12-02T15:05:15|2026-12-02T15:05:15|2026-12-02T15:05:16\n"
    "8|t|debug|TIMEOUT|0:0|2026-12-02T15:05:15|2026-12-02T15:05:15|2026-12-02T15:05:16\n"
)


def test_sacct() -> None:
    states = SLURM.parse_sacct(res(SACCT))
    assert [(s.job_id, s.phase, s.native_state, s.exit_code) for s in states.values()] == [
        ("5", Phase.FAILED, "FAILED", 1),
        ("6", Phase.CANCELLED, "CANCELLED", 143),
        ("7", Phase.SUCCEEDED, "COMPLETED", 0),
        ("8", Phase.FAILED, "TIMEOUT", 0),
    ]


# `squeue -h -t all -j 7765,7766,7767 -O STATUS_FORMAT` on the local Satori (Slurm 22.05.8): `exit 3`,
# a job killed by signal 9, one held; the exit column is the raw wait status.
SQUEUE_FIELDS = (
    "7765|FAILED|normal|wrap|NonZeroExitCode|768|2026-12-04T06:22:26|2026-12-04T06:22:27|2026-12-04T06:22:27|\n"
    "7766|FAILED|normal|wrap|JobLaunchFailure|9|2026-12-04T06:22:26|2026-12-04T06:22:27|2026-12-04T06:22:27|\n"
    "7767|PENDING|normal|atlas-train-0123456789|JobHeldUser|0|2026-12-04T06:22:26|N/A|N/A|\n"
)


def test_squeue_fields_give_state_exit_code_and_times_in_one_line_per_job() -> None:
    states = SLURM.parse_squeue_fields(res(SQUEUE_FIELDS))
    assert [(s.job_id, s.phase, s.exit_code, s.reason) for s in states.values()] == [
        ("7765", Phase.FAILED, 3, "NonZeroExitCode"),
        ("7766", Phase.FAILED, 137, "JobLaunchFailure"),
        ("7767", Phase.PENDING, None, "JobHeldUser"),
    ]
    held = states["7767"]
    assert (held.name, held.queue, held.submit_time, held.start_time, held.finish_time) == (
        "atlas-train-0123456789", "normal", "2026-12-04T06:22:26", "", "",
    )  # fmt: skip
    assert states["7765"].finish_time == "2026-12-04T06:22:27"
    # Unknown ids: exit 1 and Slurm's message, not an error.
    assert SLURM.parse_squeue_fields(res(stderr="slurm_load_jobs error: Invalid job id specified\n", rc=1)) == {}
    # A Slurm whose -O lacks a field: the short form is tried next.
    with pytest.raises(UnsupportedOutput):
        SLURM.parse_squeue_fields(res(stderr="Invalid job format specification: exit_code\n", rc=1))


def test_the_status_query_never_asks_for_squeue_json() -> None:
    # squeue --json (through 22.05) ignores -j and -t and prints every job the controller holds.
    commands = [q.command for q in SLURM.status_queries(["5", "6"])]
    assert not [c for c in commands if "--json" in c] and all(" -j 5,6 " in c for c in commands)


def test_slurm_falls_back_to_the_completion_log_when_accounting_is_off() -> None:
    calls: list[str] = []

    def runner(command: str) -> RemoteResult:
        calls.append(command)
        if command.startswith("squeue"):
            return res("")
        if command.startswith("sacct -n"):
            return res(stderr="Slurm accounting storage is disabled\n", rc=1)
        return res(SACCT)

    outcome = query_states(SLURM, runner, ["5", "7"])
    assert {k: v.phase for k, v in outcome.states.items()} == {"5": Phase.FAILED, "7": Phase.SUCCEEDED}
    assert [c.split(" ")[0:2] for c in calls] == [["squeue", "-h"], ["sacct", "-n"], ["sacct", "-c"]]


def test_one_query_for_many_jobs() -> None:
    calls: list[str] = []

    def runner(command: str) -> RemoteResult:
        calls.append(command)
        return res(SQUEUE_FIELDS)

    outcome = query_states(SLURM, runner, ["7765", "7767", "7766"])
    assert calls == [f"squeue -h -t all -j 7765,7766,7767 -O '{STATUS_FORMAT}'"] and len(outcome.states) == 3


def test_lookup_by_name_keeps_only_exact_names() -> None:
    out = "5|PENDING|normal|atlas-a-1|Dependency\n6|RUNNING|normal|atlas-a-12|None\n"
    found = lookup_by_name(SLURM, lambda _c: res(out), "atlas-a-1")
    assert [s.job_id for s in found] == ["5"]
    query = SLURM.lookup_by_name_query("atlas-a-1")
    # The login user's own jobs: squeue lists every user's by default (bjobs only one's own).
    assert query.command == "squeue -h -t all -u \"$(id -un)\" --name=atlas-a-1 -o '%i|%T|%P|%j|%r'"
    assert isinstance(query, StatusQuery)
    assert LSF.lookup_by_name_query("atlas-a-1").command.startswith("bjobs -a -J atlas-a-1 -o ")
    empty = '{\n  "COMMAND":"bjobs",\n  "JOBS":0,\n  "RECORDS":[\n  ]\n}'
    assert lookup_by_name(LSF, lambda _c: res(empty), "atlas-a-1") == []


# --- command lines -----------------------------------------------------------------------------


def test_submit_commands_with_dependencies() -> None:
    assert LSF.submit_command("runs/x", ".atlas/jobs/train.lsf", ["12", "13"]) == (
        "cd -- runs/x && bsub -w 'done(12) && done(13)' < .atlas/jobs/train.lsf"
    )
    assert SLURM.submit_command("runs/x", ".atlas/jobs/train.sbatch", ["12", "13"]) == (
        "cd -- runs/x && sbatch --parsable --dependency=afterok:12:13 .atlas/jobs/train.sbatch"
    )
    assert SLURM.submit_command("/a b", "s", []) == "cd -- '/a b' && sbatch --parsable s"


@pytest.mark.parametrize("bad", ["1; rm -rf ~", "$(x)", "12 13", "", "-1", "1\n2"])
def test_job_ids_are_numbers_before_they_reach_a_command_line(bad: str) -> None:
    for build in (LSF.cancel_command, SLURM.cancel_command):
        with pytest.raises(SchedulerError, match="job ids must be numbers"):
            build(bad)
    with pytest.raises(SchedulerError):
        SLURM.submit_command("r", "s", [bad])
    with pytest.raises(SchedulerError):
        LSF.status_queries([bad])


# --- cancel ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        (res("Job <11> is being terminated\n"), CancelOutcome.CANCELLED),
        (res(stderr="Job <11>: Job has already finished\n", rc=255), CancelOutcome.ALREADY_FINISHED),
        (res(stderr="Job <22>: No matching job found\n", rc=255), CancelOutcome.NOT_FOUND),
    ],
)
def test_bkill(result: RemoteResult, outcome: CancelOutcome) -> None:
    assert LSF.parse_cancel("11", result) is outcome


def test_bkill_other_failures_raise() -> None:
    with pytest.raises(SchedulerError, match="bkill 11 failed \\(exit 255\\): User permission denied"):
        LSF.parse_cancel("11", res(stderr="User permission denied\n", rc=255))


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        (res(), CancelOutcome.CANCELLED),  # scancel is silent for unknown and finished jobs too
        (
            res(stderr="scancel: error: Kill job error on job id 5: Invalid job id specified\n", rc=1),
            CancelOutcome.NOT_FOUND,
        ),
        (
            res(stderr="scancel: error: Kill job error on job id 5: Job/step already completing or completed\n", rc=1),
            CancelOutcome.ALREADY_FINISHED,
        ),
    ],
)
def test_scancel(result: RemoteResult, outcome: CancelOutcome) -> None:
    assert SLURM.parse_cancel("5", result) is outcome


def test_unparseable_status_is_reported_not_guessed() -> None:
    with pytest.raises(UnsupportedOutput):
        LSF.parse_bjobs_json(res("garbage", rc=0))


# What a broken or hostile scheduler may print with exit code 0: never "these jobs are gone".
GARBAGE = [
    "\x00\x01\x02binary\xff",
    "<html><body>502 Bad Gateway</body></html>",
    "Traceback (most recent call last):\n  File \"squeue\", line 1",
    "42",
    "[1, 2, 3]",
    '{"jobs": "all of them"}',
    '{"jobs": [{"name": "no id"}]}',
    '{"RECORDS": "x"}',
    '{"RECORDS": ["JOBID"]}',
    "1|2|3",
    "x" * 5000,
]


@pytest.mark.parametrize("stdout", GARBAGE)
@pytest.mark.parametrize(
    "parse",
    [
        SLURM.parse_squeue_fields,
        SLURM.parse_squeue_text,
        SLURM.parse_sacct,
        LSF.parse_bjobs_json,
        LSF.parse_bjobs_text,
    ],
    ids=["squeue-fields", "squeue-text", "sacct", "bjobs-json", "bjobs-text"],
)
def test_garbage_is_unreadable_not_an_empty_answer(parse, stdout: str) -> None:
    with pytest.raises(UnsupportedOutput) as caught:
        parse(res(stdout))
    assert len(str(caught.value)) < 400  # quoted, not dumped


@pytest.mark.parametrize("scheduler", [SLURM, LSF], ids=["slurm", "lsf"])
def test_live_queries_answering_garbage_stop_with_an_error_instead_of_losing_the_jobs(scheduler) -> None:
    with pytest.raises(SchedulerError, match="did not answer a status query"):
        query_states(scheduler, lambda _c: res("<html>maintenance</html>"), ["5"])


@pytest.mark.parametrize("scheduler", [SLURM, LSF], ids=["slurm", "lsf"])
def test_a_name_lookup_answering_garbage_submits_nothing(scheduler) -> None:
    with pytest.raises(SchedulerError, match=r"could not say whether job atlas-a-1 exists.*nothing was submitted"):
        lookup_by_name(scheduler, lambda _c: res("<html>maintenance</html>"), "atlas-a-1")


def test_empty_answers_are_still_no_jobs() -> None:
    assert SLURM.parse_squeue_text(res("")) == {} and SLURM.parse_sacct(res("\n")) == {}
    assert LSF.parse_bjobs_text(res("")) == {}


@pytest.mark.parametrize(
    ("scheduler", "stdout", "job_id"),
    [
        (SLURM, "Submitted batch job 999\n5\n", "5"),
        (LSF, "Job <999> is submitted to queue <x>.\nJob <5> is submitted to queue <normal>.\n", "5"),
    ],
    ids=["sbatch", "bsub"],
)
def test_the_last_submission_line_is_the_submission(scheduler, stdout: str, job_id: str) -> None:
    # Anything printed before it (a wrapper's chatter) is not the scheduler's answer.
    assert scheduler.parse_submission(res(stdout)) == job_id
