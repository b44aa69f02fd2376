"""infra.hpc.registry: the one list of schedulers; an unknown name is an error wherever it is asked,
and every scheduler it lists does everything its callers ask of one.

The completeness test below runs, for every scheduler of the registry, each operation the
providers (render, submit, status, lookup, cancel), the report (record queries and their history),
the monitor (status, nodes, queue) and backfill use, on that scheduler's recorded output. A
scheduler added without one of them fails here: its class cannot be instantiated (an abstract
method left out) or it has no recordings in RECORDED.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra.errors import AtlasConfigError
from infra.hpc.job_script import render_job_script
from infra.hpc.lsf import LsfScheduler
from infra.hpc.polling import lookup_by_name, query_states
from infra.hpc.registry import SCHEDULER_CLASSES, SCHEDULER_NAMES, UnknownSchedulerError, scheduler_class, scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    BACKFILL_QUEUE,
    CancelOutcome,
    JobSpec,
    Phase,
    Scheduler,
    SchedulerError,
    StepRequest,
    SubmittedStep,
)
from infra.hpc.slurm import SlurmScheduler
from infra.hpc.target import HpcConfigError
from infra.monitor.hpc import HpcSource
from infra.nodes.settings import BackfillSettings, check_backfill_targets
from tests.support import hpc_outputs

ROOT = Path(__file__).resolve().parents[2]
HPC = ROOT / "infra" / "hpc"
REC = Path(__file__).parent / "data" / "compare"
OUTPUTS = json.loads((REC / "stack_outputs.json").read_text())["environments"]


def test_the_registry_names_lsf_and_slurm() -> None:
    assert SCHEDULER_NAMES == ("lsf", "slurm")
    assert {"lsf": LsfScheduler, "slurm": SlurmScheduler} == SCHEDULER_CLASSES
    assert isinstance(scheduler_for("slurm"), SlurmScheduler)
    lsf = scheduler_for("lsf", {"memory_unit": "GB"})
    assert isinstance(lsf, LsfScheduler) and lsf.memory_unit == "GB"
    assert scheduler_class("lsf").label == "LSF" and scheduler_class("slurm").label == "Slurm"


@pytest.mark.parametrize("name", ["pbs", "", "SLURM", None, 3, ["slurm"]])
def test_an_unknown_name_is_an_error_never_slurm(name: Any) -> None:
    with pytest.raises(UnknownSchedulerError, match=r"unknown scheduler .*; use lsf or slurm"):
        scheduler_for(name)
    with pytest.raises(SchedulerError):  # what callers that talk to a scheduler already catch
        scheduler_class(name)


def test_scheduler_py_imports_no_scheduler_of_its_own() -> None:
    """No import circle: the base knows no subclass; registry.py imports them all."""
    tree = ast.parse((HPC / "scheduler.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not {m for m in imported if m.startswith(("infra.hpc.lsf", "infra.hpc.slurm", "infra.hpc.registry"))}


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return found


def test_infra_hpc_imports_neither_the_report_nor_the_monitor_nor_nodes() -> None:
    """Dependencies run one way: compare, monitor and nodes use infra/hpc, never the reverse."""
    consumers = ("infra.compare", "infra.monitor", "infra.nodes")
    wrong = {
        path.relative_to(ROOT).as_posix(): sorted(m for m in _imported(path) if m.startswith(consumers))
        for path in sorted(HPC.rglob("*.py"))
    }
    assert not {k: v for k, v in wrong.items() if v}


def test_only_the_registry_and_the_schedulers_own_packages_name_a_scheduler_class() -> None:
    """Every caller asks the registry: no `LsfScheduler()` or `from infra.hpc.slurm import ...` elsewhere."""
    allowed = {HPC / "registry.py"} | {p for name in SCHEDULER_NAMES for p in (HPC / name).rglob("*.py")}
    packages = tuple(f"infra.hpc.{name}" for name in SCHEDULER_NAMES)
    classes = {cls.__name__ for cls in SCHEDULER_CLASSES.values()}
    offenders = []
    for path in sorted(p for top in ("infra", "stacks", "bench") for p in (ROOT / top).rglob("*.py")):
        if path in allowed:
            continue
        tree = ast.parse(path.read_text())
        if any(m == p or m.startswith(f"{p}.") for m in _imported(path) for p in packages):
            offenders.append(f"{path.relative_to(ROOT)} imports a scheduler's package")
        named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
        }
        if named & classes:
            offenders.append(f"{path.relative_to(ROOT)} names {sorted(named & classes)}")
    assert not offenders


def test_every_registered_scheduler_has_the_monitors_reads() -> None:
    for scheduler in (cls() for cls in SCHEDULER_CLASSES.values()):
        assert scheduler.monitor_sections() and all(name and command for name, command in scheduler.monitor_sections())
    source = HpcSource("site", hpc_outputs({"scheduler": "pbs", "steps": []}), lambda _c: RemoteResult("", 0, "", ""))
    with pytest.raises(UnknownSchedulerError):
        source.scheduler_of()


def test_the_monitor_reports_an_unknown_scheduler_without_asking_anything() -> None:
    commands: list[str] = []

    def runner(command: str) -> Any:
        commands.append(command)
        raise AssertionError("no command may run for an unknown scheduler")

    source = HpcSource("site", hpc_outputs({"scheduler": "pbs", "steps": [{"name": "train", "job_id": "1"}]}), runner)
    with pytest.raises(UnknownSchedulerError, match="'pbs'"):
        source.poll()
    assert commands == []


def test_backfill_refuses_an_lsf_side_saying_why() -> None:
    settings = BackfillSettings(workload=None, environments=("satori",))
    with pytest.raises(AtlasConfigError, match=r"'satori' cannot take backfill \(LSF environment: preemption"):
        check_backfill_targets(settings, False, {"satori": "lsf", "satori-slurm": "slurm"})
    slurm_only = BackfillSettings(workload=None, environments=("satori-slurm",))
    check_backfill_targets(slurm_only, False, {"satori-slurm": "slurm"})


def test_a_scheduler_without_one_of_the_operations_cannot_be_made() -> None:
    # Slurm's class less three operations, as a new scheduler that forgot them would be.
    forgotten = {"read_queue", "step_records", "backfill_jobs_query"}
    body = {k: v for k, v in vars(SlurmScheduler).items() if not k.startswith("_") and k not in forgotten}
    incomplete = type("Incomplete", (Scheduler,), body)
    with pytest.raises(TypeError, match="abstract"):
        incomplete()
    complete = type("Complete", (Scheduler,), {k: v for k, v in vars(SlurmScheduler).items() if not k.startswith("_")})
    assert isinstance(complete(), Scheduler)


# --- every scheduler, every operation, on recorded output ----------------------------------------


@dataclass(frozen=True)
class Recorded:
    """What one scheduler printed for each operation its callers use (command -> answer)."""

    outputs: Mapping[str, Any]  # the stack outputs of an environment under it (its steps' job ids)
    submitted: str  # a submission's stdout, of job `submitted_id`
    submitted_id: str
    status: str  # its first status query's answer, for `status_id` in `status_phase`
    status_id: str
    status_phase: Phase
    accounting: str  # its first accounting query's answer, for `status_id` (finished)
    lookup: str  # the name lookup's answer, with a job named `lookup_name`
    lookup_name: str
    cancelled: RemoteResult  # bkill/scancel's answer for a running job
    records: RemoteResult  # the report's record query, for the outputs' steps
    history: str  # the history's answer where the record query forgot every job
    sections: Mapping[str, tuple[int, str]]  # the monitor's nodes' and queue's sections
    backfill_jobs: str | None  # the backfill listing; None where backfill is declined
    queues: str  # the pre-flight check's queue probe's answer, listing the queue `normal`
    request: str  # its request probe's answer for a one-GPU `train` step that fits


def ok(stdout: str, code: int = 0, stderr: str = "") -> RemoteResult:
    return RemoteResult("recorded", code, stdout, stderr)


LSLOAD_GPU = (
    "HOST_NAME       status  ngpus  gpu_shared_avg_mut  gpu_shared_avg_ut  ngpus_physical\n"
    "vm                  ok      4                 12%                37%               4\n"
)
LSLOAD_GPULOAD = (
    "HOST_NAME       gpuid   gpu_model   gpu_mode  gpu_temp   gpu_ecc  gpu_ut  gpu_mut gpu_mtotal "
    "gpu_mused   gpu_pstate   gpu_status   gpu_error\n"
    "vm                  0 TeslaV100_SXM2_32GB  0.0  -  0.0     70%      20%        32G       4G 0 busy -\n"
    "                    1 TeslaV100_SXM2_32GB  0.0  -  0.0      0%       0%        32G       0M 0 ok -\n"
)
BHIST_DONE = (
    "Job <18>, Job Name <atlas-train-1>, User <atlas>, Command <>\n"
    "Wed Dec  2 15:56:51: Submitted from host <vm>, to Queue <normal>, CWD </home/atlas>;\n"
    "Wed Dec  2 15:57:03: Done successfully. The CPU time used is unknown.\n"
)

RECORDED: dict[str, Recorded] = {
    "lsf": Recorded(
        outputs=OUTPUTS["satori"],
        submitted="LSF is processing your request. Please wait ...\nJob <7> is submitted to queue <normal>.\n",
        submitted_id="7",
        status=(REC / "bjobs.json").read_text(),
        status_id="18",
        status_phase=Phase.SUCCEEDED,
        accounting=BHIST_DONE,
        lookup=json.dumps(
            {
                "COMMAND": "bjobs",
                "JOBS": 1,
                "RECORDS": [{"JOBID": "7", "STAT": "RUN", "QUEUE": "normal", "JOB_NAME": "atlas-train-1"}],
            }
        ),
        lookup_name="atlas-train-1",
        cancelled=ok("Job <7> is being terminated\n"),
        records=ok((REC / "bjobs.json").read_text()),
        history=(REC / "bhist.txt").read_text(),
        sections={
            "lsload-gpu": (0, LSLOAD_GPU),
            "lsload-gpuload": (0, LSLOAD_GPULOAD),
            "bhosts": (0, "HOST_NAME STATUS JL/U MAX NJOBS RUN SSUSP USUSP RSV\nvm ok - 4 1 1 0 0 0\n"),
            "queue": (0, "11^RUN^Dec  2 15:00:00^Dec  2 15:00:04^normal\n12^PEND^Dec  2 15:01:00^-^normal\n"),
        },
        backfill_jobs=None,
        queues="QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP\n"
        "normal           30 Open:Active       -    -    -    -     0     0     0     0\n",
        request=LSLOAD_GPU,
    ),
    "slurm": Recorded(
        outputs=OUTPUTS["satori-slurm"],
        submitted="41;atlas17000\n",
        submitted_id="41",
        # `squeue -h -t all -j 1,2,3 -O STATUS_FORMAT`: the same jobs, the status query's fields only.
        status=(
            "1|COMPLETED|normal|atlas-make-hdf5-0951b8f262|None|0|2026-12-04T12:01:16|2026-12-04T12:01:16|"
            "2026-12-04T12:01:18|\n"
            "3|COMPLETED|normal|atlas-train-8ee107b1f2|None|0|2026-12-04T12:01:16|2026-12-04T12:01:22|"
            "2026-12-04T12:01:32|\n"
        ),
        status_id="3",
        status_phase=Phase.SUCCEEDED,
        accounting=(REC / "sacct_c.txt").read_text(),
        lookup="5|PENDING|normal|atlas-train-1|Dependency\n",
        lookup_name="atlas-train-1",
        cancelled=ok(""),  # scancel is silent
        records=ok((REC / "squeue_fields.txt").read_text()),
        history=(REC / "sacct_c.txt").read_text(),
        sections={
            "sinfo": (0, "vm|mixed|3/5/0/8|gpu:v100:4|gpu:v100:1(IDX:0)\n"),
            "queue": (0, "7|RUNNING|2026-12-02T15:00:00|2026-12-02T15:00:10|2026-12-02T15:30:10|gres/gpu:1|normal\n"),
        },
        backfill_jobs="61|RUNNING|None|atlas-backfill-0-0a1b2c3d\n62|PENDING|Resources|atlas-backfill-1-0a1b2c3d\n",
        queues="normal*|up\nbackfill|up\n",
        request="@@atlas-step train\nsbatch: Job 9 to start at 2026-12-05T10:00:00 using 1 processors on nodes vm in "
        "partition normal\n@@atlas-exit 0\n",
    ),
}


@pytest.fixture(params=SCHEDULER_NAMES)
def scheduler_and_output(request: pytest.FixtureRequest) -> tuple[Scheduler, Recorded]:
    name = request.param
    assert name in RECORDED, f"no recorded output for {name!r}: add its answers to RECORDED"
    return scheduler_for(name), RECORDED[name]


def test_every_scheduler_renders_and_submits(scheduler_and_output: tuple[Scheduler, Recorded]) -> None:
    scheduler, recorded = scheduler_and_output
    spec = JobSpec(
        "atlas-train-1",
        "train",
        "runs/x",
        "logs",
        ("python3", "main.py"),
        gpus_per_node=1,
        memory_mib=2048,
        walltime_seconds=600,
        queue="normal",
    )
    script = render_job_script(scheduler, spec)
    assert script.startswith("#!/bin/bash\n") and f"{scheduler.directive_prefix} " in script
    assert "atlas-train-1" in script and script.rstrip().endswith("python3 main.py")
    command = scheduler.submit_command("runs/x", f".atlas/jobs/train{scheduler.script_suffix}", ["5"])
    assert command.startswith("cd -- runs/x && ") and "5" in command
    assert scheduler.parse_submission(ok(recorded.submitted)) == recorded.submitted_id
    with pytest.raises(SchedulerError, match=f"{scheduler.submit_program} refused the job"):
        scheduler.parse_submission(ok("", 1, "no such queue"))


def test_every_scheduler_reads_status_history_lookup_and_cancel(
    scheduler_and_output: tuple[Scheduler, Recorded],
) -> None:
    scheduler, recorded = scheduler_and_output
    live = query_states(scheduler, lambda _c: ok(recorded.status), [recorded.status_id])
    assert live.states[recorded.status_id].phase is recorded.status_phase
    (accounting, *_) = scheduler.accounting_queries([recorded.status_id])
    assert accounting.parse(ok(recorded.accounting))[recorded.status_id].phase.finished
    found = lookup_by_name(scheduler, lambda _c: ok(recorded.lookup), recorded.lookup_name)
    assert [s.name for s in found] == [recorded.lookup_name]
    assert scheduler.cancel_command("7").startswith(f"{scheduler.cancel_program} ")
    assert scheduler.parse_cancel("7", recorded.cancelled) is CancelOutcome.CANCELLED


def test_every_scheduler_gives_the_reports_records_with_their_history(
    scheduler_and_output: tuple[Scheduler, Recorded],
) -> None:
    scheduler, recorded = scheduler_and_output
    steps = SubmittedStep.all_of(hpc_outputs(recorded.outputs))
    ids = [s.job_id for s in steps]
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        return recorded.records

    records = scheduler.collect_step_records(runner, steps, "login", {})
    assert commands == [scheduler.record_query(ids)]  # the live query knew every job
    assert [r.step for r in records] == [s.step for s in steps]
    assert all(r.requested_at and r.started_at and r.finished_at and "login" in r.source for r in records)
    assert scheduler.record_query_answered(recorded.records)

    forgot = ok("", 1, "Invalid job id specified / No job found")

    def forgetful(command: str) -> RemoteResult:
        commands.append(command)
        return forgot if command == scheduler.record_query(ids) else ok(recorded.history)

    commands.clear()
    from_history = scheduler.collect_step_records(forgetful, steps, "login", {})
    assert scheduler.records_forgotten(forgot, ids) == ids
    assert commands == [scheduler.record_query(ids), scheduler.history_queries(ids)[0]]
    assert [r.step for r in from_history] == [s.step for s in steps]  # every step, so `all` below is not vacuous
    assert all(r.started_at and r.finished_at and r.state != "UNKNOWN" for r in from_history)


def test_every_scheduler_gives_the_monitors_steps_nodes_and_queue(
    scheduler_and_output: tuple[Scheduler, Recorded],
) -> None:
    scheduler, recorded = scheduler_and_output
    steps = SubmittedStep.all_of(hpc_outputs(recorded.outputs))
    command = scheduler.record_query([s.job_id for s in steps])
    assert len(scheduler.live_step_records(steps, command, recorded.records, "login")) == len(steps)
    with pytest.raises(SchedulerError, match="controller down"):
        scheduler.live_step_records(steps, command, ok("", 255, "controller down"), "login")
    assert {name for name, _ in scheduler.monitor_sections()} == set(recorded.sections)
    nodes, error = scheduler.read_nodes(recorded.sections)
    assert not error and nodes and all(n.gpus_total > 0 for n in nodes)
    queue, error = scheduler.read_queue(recorded.sections, 2026)
    assert not error and queue and {j.state for j in queue} <= {"pending", "running", "finished"}
    missing, error = scheduler.read_nodes({})
    assert missing == [] and error  # a section that did not answer says so, never "no nodes"


def test_every_scheduler_takes_backfill_or_says_why_not(scheduler_and_output: tuple[Scheduler, Recorded]) -> None:
    scheduler, recorded = scheduler_and_output
    if recorded.backfill_jobs is None:
        assert scheduler.backfill_unsupported
        for call in (
            lambda: scheduler.backfill_submit_command("runs/x", "s"),
            lambda: scheduler.backfill_jobs_query(BACKFILL_QUEUE, True),
            lambda: scheduler.parse_backfill_jobs(ok("")),
        ):
            with pytest.raises(SchedulerError, match=scheduler.backfill_unsupported[:20]):
                call()
        return
    assert not scheduler.backfill_unsupported
    assert scheduler.backfill_submit_command("runs/x", "s").startswith("cd -- runs/x && ")
    assert BACKFILL_QUEUE in scheduler.backfill_jobs_query(BACKFILL_QUEUE, False)
    jobs = scheduler.parse_backfill_jobs(ok(recorded.backfill_jobs))
    assert [(j.job_id, j.state) for j in jobs] == [("61", "RUNNING"), ("62", "PENDING")]


def test_every_scheduler_reads_its_own_options_and_refuses_others(
    scheduler_and_output: tuple[Scheduler, Recorded],
) -> None:
    scheduler, _recorded = scheduler_and_output
    cls = type(scheduler)
    defaults = cls.parse_options(None, "atlas:hpc.site")
    assert cls.parse_options({}, "atlas:hpc.site") == defaults == cls.parse_options(defaults, "atlas:hpc.site")
    assert type(cls.from_options(defaults)) is cls
    with pytest.raises(HpcConfigError, match=r"^atlas:hpc\.site\.scheduler_options\.walltime_unit: is not an option"):
        cls.parse_options({"walltime_unit": "s"}, "atlas:hpc.site")


def test_every_scheduler_answers_the_pre_flight_checks(scheduler_and_output: tuple[Scheduler, Recorded]) -> None:
    scheduler, recorded = scheduler_and_output
    assert scheduler.programs and {scheduler.submit_program, scheduler.cancel_program} <= set(scheduler.programs)
    queue = scheduler.queue_probe("normal", "atlas:hpc.site")
    assert queue.judge(ok(recorded.queues)).status.value == "ok"
    missing = scheduler.queue_probe("nosuch", "atlas:hpc.site").judge(ok(recorded.queues))
    assert missing.status.value == "fail" and missing.fix.startswith("set atlas:hpc.site.queue")
    spec = JobSpec("atlas-train-1", "train", "runs/x", "logs", ("python3", "main.py"), gpus_per_node=1, queue="normal")
    probe = scheduler.request_probe([StepRequest(spec, render_job_script(scheduler, spec))], "atlas:hpc.site", "site")
    assert probe is not None and probe.command
    assert probe.judge(ok(recorded.request)).status.value == "ok"
    assert probe.judge(ok("", 255, "the login node lost")).status.value == "fail"

