"""Providers' check and diff (with preview's unknowns), the status board, and HpcEnvironment under mocks."""

from __future__ import annotations

import threading
from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc

from infra.hpc import polling
from infra.hpc.job_script import job_name_for
from infra.hpc.provider_inputs import JobInputs
from infra.hpc.providers import PROVIDER_VERSION, BatchJobProvider, StagedFilesProvider
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import JobState, Phase
from infra.hpc.ssh.files import sha256_hex
from infra.outputs import OUTPUTS_VERSION
from tests.unit.pulumi_mocks import ResourceMocks

UNKNOWN = rpc.UNKNOWN
SCRIPT = "#!/bin/bash\n#SBATCH --job-name=atlas-train-0123456789\npython main.py\n"
SSH = {
    "host": "127.0.0.1",
    "port": 16022,
    "user": "atlas",
    "known_hosts": "k",
    "known_hosts_source": "f",
    "private_key_file": None,
}


def job_inputs(**changes: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "provider_version": PROVIDER_VERSION,
        "ssh": SSH,
        "ssh_secret": {"private_key": "-----BEGIN OPENSSH PRIVATE KEY-----", "passphrase": None},
        "scheduler": "slurm",
        "step": "train",
        "job_name": "atlas-train-0123456789",
        "run_dir": "atlas-runs/local/probe",
        "script_path": ".atlas/jobs/train.sbatch",
        "script": SCRIPT,
        "script_sha256": sha256_hex(SCRIPT.encode()),
        "log_pattern": "logs/train.%j",
        "requested_queue": "normal",
        "after_job_ids": ["12"],
        "wait": False,
        "poll_interval_s": 60.0,
    }
    props.update(changes)
    return props


def failures(props: dict[str, Any]) -> dict[str, str]:
    return {f.property: f.reason for f in BatchJobProvider().check({}, props).failures}


def test_check_accepts_good_inputs_and_unknowns() -> None:
    assert failures(job_inputs()) == {}
    assert failures(job_inputs(after_job_ids=UNKNOWN)) == {}
    assert failures(job_inputs(after_job_ids=["12", UNKNOWN])) == {}
    assert failures(job_inputs(after_job_ids=[pulumi.output.Unknown()])) == {}  # as the engine nests it
    assert failures(job_inputs(ssh=UNKNOWN, ssh_secret=UNKNOWN, script=UNKNOWN)) == {}


@pytest.mark.parametrize(
    ("changes", "prop"),
    [
        ({"job_name": "atlas; bkill 0"}, "job_name"),
        ({"job_name": "x" * 80}, "job_name"),
        ({"step": "Train Step"}, "step"),
        ({"scheduler": "pbs"}, "scheduler"),
        ({"requested_queue": "normal -x"}, "requested_queue"),
        ({"run_dir": "../etc"}, "run_dir"),
        ({"run_dir": "a\nb"}, "run_dir"),
        ({"script_path": "/etc/passwd"}, "script_path"),
        ({"script_path": "a/../../b"}, "script_path"),
        ({"log_pattern": "logs/$(id)"}, "log_pattern"),
        ({"script_sha256": "0" * 64}, "script_sha256"),
        ({"after_job_ids": ["12; rm -rf ~"]}, "after_job_ids[0]"),
        ({"ssh_secret": {}}, "ssh_secret.private_key"),
    ],
)
def test_check_names_the_bad_input(changes: dict[str, Any], prop: str) -> None:
    assert prop in failures(job_inputs(**changes))


def outputs(**changes: Any) -> dict[str, Any]:
    return {**job_inputs(), "job_id": "41", "state": "running", "exit_code": None, "queue": "normal", **changes}


def test_diff_no_change() -> None:
    result = BatchJobProvider().diff("41", outputs(), job_inputs())
    assert (result.changes, result.replaces) == (False, [])


def test_diff_a_changed_script_replaces_the_job() -> None:
    script = SCRIPT.replace("main.py", "main.py --seed 1")
    news = job_inputs(script=script, script_sha256=sha256_hex(script.encode()))
    result = BatchJobProvider().diff("41", outputs(), news)
    assert result.changes and set(result.replaces or []) == {"script", "script_sha256"}
    assert result.delete_before_replace


def test_diff_unknown_dependency_during_preview_replaces() -> None:
    result = BatchJobProvider().diff("41", outputs(), job_inputs(after_job_ids=UNKNOWN))
    assert result.changes and result.replaces == ["after_job_ids"]


# --- preview, where a job being updated has no id yet: its definition says whether it is replaced ---

DEFINITION = "1:" + "a" * 64


def test_diff_a_predecessor_updated_in_place_keeps_the_job() -> None:
    # A new provider version updates every job at once; in preview their ids are unknown.
    olds = outputs(after_definitions=[DEFINITION])
    result = BatchJobProvider().diff("41", olds, job_inputs(after_job_ids=UNKNOWN, after_definitions=[DEFINITION]))
    assert result.replaces == [] and not result.changes
    nested = job_inputs(after_job_ids=[pulumi.output.Unknown()], after_definitions=[DEFINITION])
    assert BatchJobProvider().diff("41", olds, nested).replaces == []


def test_diff_a_predecessor_replaced_replaces_the_job_in_preview() -> None:
    olds = outputs(after_definitions=[DEFINITION])
    news = job_inputs(after_job_ids=UNKNOWN, after_definitions=["1:" + "b" * 64])
    result = BatchJobProvider().diff("41", olds, news)
    assert result.changes and result.replaces == ["after_job_ids"]


def test_diff_known_ids_decide_whatever_the_definitions_say() -> None:
    olds = outputs(after_definitions=[DEFINITION])
    result = BatchJobProvider().diff("41", olds, job_inputs(after_job_ids=["13"], after_definitions=[DEFINITION]))
    assert result.replaces == ["after_job_ids"]


def test_diff_state_from_before_the_definitions_is_not_replaced_in_preview() -> None:
    # State written before `after_definitions` (303f827 and earlier), first previewed by this code:
    # the ids are unknown because every job is being updated to the new provider version.
    olds = {k: v for k, v in outputs(provider_version="1+old").items() if k != "after_definitions"}
    result = BatchJobProvider().diff("41", olds, job_inputs(after_job_ids=UNKNOWN, after_definitions=[DEFINITION]))
    assert result.changes and result.replaces == []
    other_formula = outputs(after_definitions=["0:" + "c" * 64])
    news = job_inputs(after_job_ids=UNKNOWN, after_definitions=[DEFINITION])
    assert BatchJobProvider().diff("41", other_formula, news).replaces == []


def test_job_definition_names_what_defines_the_job() -> None:
    from infra.hpc.providers.batch_job import job_definition

    base = {
        "scheduler": "slurm", "scheduler_options": {}, "step": "train", "job_name": "atlas-train-0123456789",
        "run_dir": "atlas-runs/local/probe", "script_path": ".atlas/jobs/train.sbatch",
        "script_sha256": sha256_hex(SCRIPT.encode()), "after_definitions": [DEFINITION],
    }
    first = job_definition(**base)
    assert first == job_definition(**base) and first.startswith("1:")
    for key, value in (("script_sha256", "0" * 64), ("after_definitions", ["1:" + "b" * 64]),
                       ("scheduler_options", {"memory_unit": "GB"}), ("job_name", "atlas-train-1")):
        assert job_definition(**{**base, key: value}) != first, key


def test_completion_diff_follows_its_job_in_preview() -> None:
    from infra.hpc.providers import BatchJobCompletionProvider

    olds = {**outputs(), "job_id": "41", "job_definition": DEFINITION, "state": "succeeded"}
    news = {**job_inputs(), "job_id": UNKNOWN, "job_definition": DEFINITION, "provider_version": "1+new"}
    updated = BatchJobCompletionProvider().diff("41-done", olds, news)
    assert updated.changes and updated.replaces == []
    replaced = BatchJobCompletionProvider().diff("41-done", olds, {**news, "job_definition": "1:" + "b" * 64})
    assert replaced.replaces == ["job_id"]
    assert BatchJobCompletionProvider().diff("41-done", olds, {**news, "job_id": "42"}).replaces == ["job_id"]
    # State from before the definitions: updated in place; a program that gives none: replaced, as before.
    before = {k: v for k, v in olds.items() if k != "job_definition"}
    assert BatchJobCompletionProvider().diff("41-done", before, news).replaces == []
    bare = {k: v for k, v in news.items() if k != "job_definition"}
    assert BatchJobCompletionProvider().diff("41-done", olds, bare).replaces == ["job_id"]


def test_diff_a_job_cancelled_outside_is_replaced() -> None:
    result = BatchJobProvider().diff("41", outputs(state="cancelled"), job_inputs())
    assert result.changes and result.replaces == ["state"]
    failed = BatchJobProvider().diff("41", outputs(state="failed", exit_code=3), job_inputs())
    assert (failed.changes, failed.replaces) == (False, [])  # a failure is reported, not retried blindly


def test_diff_code_or_credential_changes_update_in_place() -> None:
    for changes in ({"provider_version": "0+old"}, {"ssh_secret": {"private_key": "other"}}, {"poll_interval_s": 5.0}):
        result = BatchJobProvider().diff("41", outputs(**changes), job_inputs())
        assert result.changes and result.replaces == [], changes


# --- scheduler_options: state written with `lsf_memory_unit` reads as the same options -------------


def lsf_job(**changes: Any) -> dict[str, Any]:
    return job_inputs(scheduler="lsf", script_path=".atlas/jobs/train.lsf", log_pattern="logs/train.%J", **changes)


def test_old_props_read_back_as_the_same_scheduler_options() -> None:
    old = JobInputs.of({**lsf_job(), "lsf_memory_unit": "GB"})
    new = JobInputs.of(lsf_job(scheduler_options={"memory_unit": "GB"}))
    assert old.scheduler_options == new.scheduler_options == {"memory_unit": "GB"}
    # A Slurm job's state carried the LSF default too; Slurm takes no options.
    assert JobInputs.of(job_inputs(lsf_memory_unit="MB")).scheduler_options == {}


def test_diff_old_lsf_memory_unit_against_the_same_scheduler_options_keeps_the_job() -> None:
    olds = {**lsf_job(), "lsf_memory_unit": "MB", "job_id": "41", "state": "running"}
    same = BatchJobProvider().diff("41", olds, lsf_job(scheduler_options={"memory_unit": "MB"}))
    assert (same.changes, same.replaces) == (False, [])  # a running training job is not resubmitted
    slurm = BatchJobProvider().diff("41", outputs(lsf_memory_unit="MB"), job_inputs(scheduler_options={}))
    assert (slurm.changes, slurm.replaces) == (False, [])


def test_diff_a_really_changed_memory_unit_replaces_the_job() -> None:
    olds = {**lsf_job(), "lsf_memory_unit": "MB", "job_id": "41", "state": "running"}
    changed = BatchJobProvider().diff("41", olds, lsf_job(scheduler_options={"memory_unit": "GB"}))
    assert changed.changes and changed.replaces == ["scheduler_options"]
    new_olds = {**lsf_job(scheduler_options={"memory_unit": "GB"}), "job_id": "41", "state": "running"}
    back = BatchJobProvider().diff("41", new_olds, lsf_job(scheduler_options={"memory_unit": "KB"}))
    assert back.changes and back.replaces == ["scheduler_options"]


def test_check_refuses_options_the_scheduler_does_not_take() -> None:
    assert failures(lsf_job(scheduler_options={"memory_unit": "MB"})) == {}
    assert "memory_unit" in failures(lsf_job(scheduler_options={"memory_unit": "TB"}))["scheduler_options"]
    slurm = failures(job_inputs(scheduler_options={"memory_unit": "MB"}))
    assert "not an option of Slurm" in slurm["scheduler_options"]


# What dill wrote into state for each provider before infra/hpc/providers.py became a package
# (`dill.dumps(provider, recurse=True)`, as Pulumi's dynamic providers are serialized): by module
# and class name, `infra.hpc.providers.<Class>`. Refresh and destroy of such state unpickle them.
PICKLED_BEFORE_THE_SPLIT = {
    "BatchJobProvider": "gASVLwAAAAAAAACME2luZnJhLmhwYy5wcm92aWRlcnOUjBBCYXRjaEpvYlByb3ZpZGVylJOUKYGULg==",
    "StagedFilesProvider": "gASVMgAAAAAAAACME2luZnJhLmhwYy5wcm92aWRlcnOUjBNTdGFnZWRGaWxlc1Byb3ZpZGVylJOUKYGULg==",
    "JobCompletionProvider": "gASVNAAAAAAAAACME2luZnJhLmhwYy5wcm92aWRlcnOUjBVKb2JDb21wbGV0aW9uUHJvdmlkZXKUk5QpgZQu",
}


@pytest.mark.parametrize("name", sorted(PICKLED_BEFORE_THE_SPLIT))
def test_providers_pickled_before_the_split_still_unpickle(name: str) -> None:
    import base64

    import dill

    from infra.hpc import providers

    provider = dill.loads(base64.b64decode(PICKLED_BEFORE_THE_SPLIT[name]))  # noqa: S301 (our own bytes, above)
    assert type(provider) is getattr(providers, name)
    # The renamed completion provider answers to its old name too; nothing else changed name.
    expected = "BatchJobCompletionProvider" if name == "JobCompletionProvider" else name
    assert type(provider).__name__ == expected


def test_diff_another_host_replaces() -> None:
    result = BatchJobProvider().diff("41", outputs(), job_inputs(ssh={**SSH, "host": "other"}))
    assert "ssh" in (result.replaces or [])


def staged_inputs(**changes: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "provider_version": PROVIDER_VERSION,
        "ssh": SSH,
        "ssh_secret": {"private_key": "k"},
        "run_dir": "atlas-runs/local/probe",
        "files": [{"path": ".atlas/jobs/train.sbatch", "content": SCRIPT, "sha256": sha256_hex(SCRIPT.encode())}],
        "directories": ["logs"],
    }
    props.update(changes)
    return props


def test_staged_files_check_and_diff() -> None:
    provider = StagedFilesProvider()
    assert provider.check({}, staged_inputs()).failures == []
    assert provider.check({}, staged_inputs(files=UNKNOWN)).failures == []
    bad = provider.check({}, staged_inputs(files=[{"path": "../x", "sha256": "nothex"}], directories=["/etc"]))
    assert {f.property for f in bad.failures} == {"files[0].path", "files[0].sha256", "directories[0]"}
    olds = {**staged_inputs(), "remote_sha256": {".atlas/jobs/train.sbatch": sha256_hex(SCRIPT.encode())}}
    assert provider.diff("id", olds, staged_inputs()).changes is False
    drifted = {**olds, "remote_sha256": {".atlas/jobs/train.sbatch": "missing"}}
    assert provider.diff("id", drifted, staged_inputs()).changes is True  # refresh saw it removed on the cluster
    moved = provider.diff("id", olds, staged_inputs(run_dir="elsewhere"))
    assert moved.replaces == ["run_dir"]


def test_job_names_are_unique_per_resource_and_stable() -> None:
    a = job_name_for("atlas", "local", "satori", "train", "1", "atlas-runs/local/satori/probe")
    assert a == job_name_for("atlas", "local", "satori", "train", "1", "atlas-runs/local/satori/probe")
    others = {
        job_name_for("atlas", s, e, "train", r, d)
        for s, e, r, d in [
            ("dev", "satori", "1", "atlas-runs/local/satori/probe"),
            ("local", "slurm", "1", "atlas-runs/local/satori/probe"),
            ("local", "satori", "2", "atlas-runs/local/satori/probe"),
            ("local", "satori", "1", "elsewhere/local/satori/probe"),
        ]
    }
    assert a not in others and len(others) == 4
    assert a.startswith("atlas-train-") and len(a) <= 63


# --- the status board --------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def squeue(ids: list[str]) -> str:
    """What the status query (`squeue -h -O ...`) prints for running jobs."""
    return "".join(f"{i}|RUNNING|normal|n|None|0|2026-12-04T06:00:00|2026-12-04T06:00:01|N/A|\n" for i in ids)


def test_board_answers_many_readers_with_one_query_and_respects_the_interval() -> None:
    clock = FakeClock()
    board = polling.StatusBoard(min_interval_s=60.0, clock=clock, sleep=clock.sleep)
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        ids = command.split(" -j ")[1].split(" ")[0].split(",")
        return RemoteResult(command, 0, squeue(ids), "")

    slurm = scheduler_for("slurm")
    first = board.states(slurm, runner, ["1", "2", "3"])
    assert {k: v.phase for k, v in first.items() if v} == {"1": Phase.RUNNING, "2": Phase.RUNNING, "3": Phase.RUNNING}
    again = board.states(slurm, runner, ["2"])  # within the interval: served from the board
    assert again["2"] is not None and len(commands) == 1
    clock.now += 61
    board.states(slurm, runner, ["1"])
    assert len(commands) == 2 and " -j 1,2,3 " in commands[1]  # all tracked jobs, one query


def test_board_waits_for_the_interval_before_a_fresh_answer() -> None:
    clock = FakeClock()
    board = polling.StatusBoard(min_interval_s=30.0, clock=clock, sleep=clock.sleep)
    calls: list[float] = []

    def runner(command: str) -> RemoteResult:
        calls.append(clock.now)
        return RemoteResult(command, 0, squeue(["7"]), "")

    slurm = scheduler_for("slurm")
    board.states(slurm, runner, ["7"])
    # fresh_after: the caller insists on a newer answer; the board must still keep the interval.
    board._cond.wait = lambda timeout=None: clock.sleep(timeout or 0) or True  # type: ignore[method-assign]
    board.states(slurm, runner, ["7"], fresh_after=clock.now + 0.001)
    assert len(calls) == 2 and calls[1] - calls[0] >= 30.0


def test_board_keeps_unknown_jobs_as_none() -> None:
    clock = FakeClock()
    board = polling.StatusBoard(min_interval_s=1.0, clock=clock, sleep=clock.sleep)

    def runner(command: str) -> RemoteResult:
        if command.startswith("squeue"):
            return RemoteResult(command, 1, "", "slurm_load_jobs error: Invalid job id specified\n")
        return RemoteResult(command, 1, "", "Slurm accounting storage is disabled\n")

    assert board.states(scheduler_for("slurm"), runner, ["99"]) == {"99": None}


def test_job_state_phase_finished() -> None:
    assert JobState("1", Phase.CANCELLED, "CANCELLED").phase.finished
    assert not Phase.SUSPENDED.finished


# --- HpcEnvironment under mocks ----------------------------------------------------------------


class Mocks(ResourceMocks):
    def outputs(self, args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
        if args.typ.endswith("BatchJob"):
            return {"job_id": str(100 + len(self.resources)), "queue": "normal", "submitted_at": "2026-12-02T15:00:00Z"}
        return {}


@pytest.fixture
def mocks() -> Mocks:
    return Mocks().install()


@pulumi.runtime.test
def test_hpc_environment_children_outputs_and_dependencies(mocks: Mocks) -> Any:
    from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs
    from infra.hpc.target_parser import parse_hpc_target
    from infra.toolchain.pins import REPO_ROOT
    from infra.workload.load import load_workload

    workload = load_workload(REPO_ROOT / "workloads" / "biggan" / "workload.yaml")
    known_hosts = "[127.0.0.1]:16022 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=\n"
    key_text = "-----BEGIN OPENSSH PRIVATE KEY-----\nUNIT-TEST-KEY-MATERIAL\n-----END OPENSSH PRIVATE KEY-----\n"
    target = parse_hpc_target(
        {
            "host": "127.0.0.1",
            "port": 16022,
            "user": "atlas",
            "scheduler": "lsf",
            "queue": "normal",
            "known_hosts": known_hosts,
            "private_key": key_text,
            "poll_interval_seconds": 2,
        },
        "atlas:satori",
    )
    env = HpcEnvironment(
        "satori", HpcEnvironmentArgs(target=target, workload=workload, environment="satori", stack="unit")
    )

    def check(out: dict[str, Any]) -> None:
        names = {r.name for r in mocks.resources}
        assert {"satori-staged-files", "satori-make-hdf5", "satori-inception-moments", "satori-train"} <= names
        assert out["kind"] == "hpc" and out["scheduler"] == "lsf" and out["port"] == 16022
        assert [s["name"] for s in out["steps"]] == ["make-hdf5", "inception-moments", "train"]
        assert all(s["job_id"] and len(s["script_sha256"]) == 64 for s in out["steps"])
        assert out["gpus_requested"] == 2 and out["version"] == OUTPUTS_VERSION
        assert out["telemetry"]["path"] == "atlas-runs/unit/satori/biggan/telemetry"
        assert out["logs"]["path"] == "atlas-runs/unit/satori/biggan/logs"
        assert "UNIT-TEST-KEY-MATERIAL" not in repr(out)
        train = next(r for r in mocks.resources if r.name == "satori-train")
        # train reads make-hdf5's and inception-moments' outputs: both become scheduler dependencies.
        assert len(train.inputs["after_job_ids"]) == 2
        # ...and what preview knows of them, their definitions, in the same order.
        assert len(train.inputs["after_definitions"]) == 2
        assert all(d.startswith("1:") for d in train.inputs["after_definitions"])
        assert train.inputs["script"].startswith("#!/bin/bash\n#BSUB -J atlas-train-")
        assert train.inputs["scheduler_options"] == {"memory_unit": "MB"}  # the target's, defaults filled in

    return env.outputs.apply(check)


@pulumi.runtime.test
def test_the_whole_pipeline_is_submitted_before_the_preparation_steps_are_awaited(mocks: Mocks) -> Any:
    from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs
    from infra.hpc.target_parser import parse_hpc_target
    from infra.toolchain.pins import REPO_ROOT
    from infra.workload.load import load_workload

    workload = load_workload(REPO_ROOT / "workloads" / "probe" / "workload.yaml")
    target = parse_hpc_target(
        {
            "host": "127.0.0.1",
            "user": "atlas",
            "scheduler": "slurm",
            "known_hosts": "[127.0.0.1]:22 ssh-ed25519 "
            "AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=\n",
            "private_key_file": "/dev/null",
            "poll_interval_seconds": 2,
        },
        "atlas:satori-slurm",
    )
    prep = tuple(s.name for s in workload.steps[:-1])
    env = HpcEnvironment(
        "satori-slurm",
        HpcEnvironmentArgs(target=target, workload=workload, environment="satori-slurm", stack="unit",
                           wait_for_steps=prep, wait_timeout_s=120.0),
    )

    def check(_: Any) -> None:
        jobs = {r.name: r for r in mocks.resources if r.typ.endswith("BatchJob")}
        done = {r.name: r for r in mocks.resources if r.typ.endswith("JobCompletion")}
        # No BatchJob waits: each is submitted as soon as the job ids it depends on are known.
        assert all(not j.inputs["wait"] for j in jobs.values())
        assert sorted(done) == sorted(f"satori-slurm-{s}-done" for s in prep)
        for step in prep:
            completion = done[f"satori-slurm-{step}-done"]
            job = jobs[f"satori-slurm-{step}"]
            assert completion.inputs["job_id"] and completion.inputs["step"] == step
            assert completion.inputs["job_name"] == job.inputs["job_name"]
            # The definition the job's successors know it by, for a preview without its id.
            definition = completion.inputs["job_definition"]
            assert any(definition in j.inputs["after_definitions"] for j in jobs.values()), step
            assert completion.inputs["wait_timeout_s"] == 120.0 and completion.inputs["scheduler"] == "slurm"
            assert completion.inputs["job_urn"].endswith(f"::satori-slurm-{step}")
        assert "satori-slurm-train-done" not in done

    # After every completion is registered too: the outputs alone do not wait for them.
    return pulumi.Output.all(env.outputs, *[c.urn for c in env.completions.values()]).apply(check)
