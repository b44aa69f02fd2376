"""A swept step as one SweepJob: element states run-length encoded, the schedulers' array answers
read table by table, submission that adopts what an interrupted `up` submitted, delete that
cancels every unfinished array, and the pipeline's dependencies on every chunk's array."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pulumi
import pytest
import yaml

from infra.hpc import arrays
from infra.hpc.job_script import SubmissionKey, sweep_scripts
from infra.hpc.pipeline import staged_file_entries, sweep_files, sweep_tables
from infra.hpc.providers import PROVIDER_VERSION
from infra.hpc.providers import sweep_job as sweep_module
from infra.hpc.providers.sweep_job import SweepJobProvider
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import ArrayRequest, JobState, Phase
from infra.hpc.ssh.files import sha256_hex
from infra.index_ranges import index_ranges, parse_index_ranges
from infra.toolchain.pins import REPO_ROOT
from infra.workload.load import load_workload
from infra.workload.parse import parse_workload
from tests.unit.pulumi_mocks import ResourceMocks

PROBE_SWEEP = load_workload(REPO_ROOT / "workloads" / "probe" / "sweep.yaml")
RUN = SubmissionKey("atlas", "unit", "satori", "1", "atlas-runs/unit/satori/probe-sweep")


def ok(stdout: str = "", stderr: str = "", exit_code: int = 0) -> RemoteResult:
    return RemoteResult("", exit_code, stdout, stderr)


# --- element states in compact form -----------------------------------------------------------


@pytest.mark.parametrize(
    ("letters", "encoded"),
    [
        ("", ""),
        ("D", "D1"),
        ("D" * 998 + "FF", "D998F2"),
        ("PPRRDDK?C", "P2R2D2K1?1C1"),
        ("DFDF", "D1F1D1F1"),
    ],
)
def test_element_states_round_trip_run_length_encoded(letters: str, encoded: str) -> None:
    assert arrays.encode(letters) == encoded
    assert arrays.decode(encoded) == letters


def test_state_does_not_grow_with_the_points_when_they_agree() -> None:
    assert len(arrays.encode("D" * 10)) == 3
    assert len(arrays.encode("D" * 1000)) == 5
    assert len(arrays.encode("D" * 10_000)) == 6


@pytest.mark.parametrize("bad", ["X3", "D", "3D", "D1 F1"])
def test_decode_refuses_what_encode_did_not_write(bad: str) -> None:
    with pytest.raises(ValueError, match="run-length"):
        arrays.decode(bad)


def test_encode_refuses_a_letter_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="element states"):
        arrays.encode("DX")


@pytest.mark.parametrize(
    ("phase", "letter"),
    [
        (Phase.PENDING, "P"),
        (Phase.RUNNING, "R"),
        (Phase.SUSPENDED, "R"),
        (Phase.SUCCEEDED, "D"),
        (Phase.FAILED, "F"),
        (Phase.CANCELLED, "K"),  # Atlas cancels only on delete: a cancel seen on refresh was someone else's
        (Phase.UNKNOWN, "?"),
    ],
)
def test_letter_of_each_phase(phase: Phase, letter: str) -> None:
    assert arrays.letter_of(JobState("1", phase, "X")) == letter


def test_merge_keeps_finished_elements_the_scheduler_forgot_and_marks_unfinished_ones_unknown() -> None:
    assert arrays.merge("DRFP", {1: "D"}, 4) == "DDF?"
    # Nothing known before (a first read, or another size): what was not seen is unknown.
    assert arrays.merge("", {0: "R"}, 3) == "R??"
    assert arrays.merge("DD", {}, 3) == "???"


@pytest.mark.parametrize(
    ("letters", "phase"),
    [
        ("DDR", Phase.RUNNING),
        ("DPF", Phase.PENDING),
        ("DDD", Phase.SUCCEEDED),
        ("DD?", Phase.UNKNOWN),
        ("DFK", Phase.FAILED),
        ("DKC", Phase.CANCELLED),
        ("", Phase.UNKNOWN),
    ],
)
def test_summary_of_a_sweep(letters: str, phase: Phase) -> None:
    assert arrays.summary(letters) is phase


def test_counts_by_word_in_letter_order() -> None:
    assert arrays.counts("DFDDK") == {"done": 3, "failed": 1, "killed outside Atlas": 1}


# --- Slurm: squeue -r and sacct of one array ----------------------------------------------------

SLURM = scheduler_for("slurm")
LSF = scheduler_for("lsf")


def test_slurm_array_queries_name_the_array_once() -> None:
    assert SLURM.array_elements_query("41").command == "squeue -h -r -t all -j 41 -o '%F|%K|%T|%r'"
    history = SLURM.array_history_query("41")
    assert history is not None and history.command == "sacct -n -P -X -o JobID,State,ExitCode -j 41"
    lookup = SLURM.array_lookup_query("atlas-train-0123456789")
    assert lookup.command.startswith('squeue -h -t all -u "$(id -un)" --name=atlas-train-0123456789 ')
    assert LSF.array_elements_query("41").command == (
        "bjobs -a -o 'jobid job_name stat exit_code exit_reason' -json 41"
    )
    with pytest.raises(Exception, match="job ids must be numbers"):
        SLURM.array_elements_query("41; rm -rf ~")


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        # Every element on its own line (-r), the throttled ones pending on JobArrayTaskLimit.
        (
            "41|0|COMPLETED|None\n41|1|RUNNING|None\n41|2|PENDING|JobArrayTaskLimit\n",
            {"0": Phase.SUCCEEDED, "1": Phase.RUNNING, "2": Phase.PENDING},
        ),
        # A Slurm that keeps pending elements on one line, with the throttle.
        ("41|3-5%2|PENDING|JobArrayTaskLimit\n", {"3": Phase.PENDING, "4": Phase.PENDING, "5": Phase.PENDING}),
        ("41|[0,2-3]|PENDING|Dependency\n", {"0": Phase.PENDING, "2": Phase.PENDING, "3": Phase.PENDING}),
        ("41|4|CANCELLED|None\n41|5|FAILED|NonZeroExitCode\n", {"4": Phase.CANCELLED, "5": Phase.FAILED}),
        # A job that is not an array has no index: nothing of the array.
        ("41|N/A|RUNNING|None\n", {}),
        # An array cancelled while every element was pending: one line for them all.
        ("41|N/A|CANCELLED|None\n", {"*": Phase.CANCELLED}),
        ("", {}),
    ],
)
def test_slurm_squeue_of_an_array(stdout: str, expected: dict[str, Phase]) -> None:
    states = SLURM.array_elements_query("41").parse(ok(stdout))
    assert {index: state.phase for index, state in states.items()} == expected


def test_slurm_squeue_of_a_forgotten_array_is_no_elements_and_garbage_is_refused() -> None:
    parse = SLURM.array_elements_query("41").parse
    assert parse(ok(stderr="slurm_load_jobs error: Invalid job id specified", exit_code=1)) == {}
    with pytest.raises(Exception, match="printed nothing Atlas can read"):
        parse(ok("Unable to contact slurm controller\n"))
    with pytest.raises(Exception, match="controller"):
        parse(ok(stderr="slurm_load_jobs error: Unable to contact slurm controller", exit_code=1))


def test_slurm_sacct_of_an_array_expands_ranges_and_reads_outside_kills() -> None:
    history = SLURM.array_history_query("41")
    assert history is not None
    stdout = "41_0|COMPLETED|0:0\n41_1|FAILED|3:0\n41_2|CANCELLED by 1000|0:15\n41_[3-4%2]|PENDING|0:0\n"
    states = history.parse(ok(stdout))
    assert {i: s.phase for i, s in states.items()} == {
        "0": Phase.SUCCEEDED,
        "1": Phase.FAILED,
        "2": Phase.CANCELLED,
        "3": Phase.PENDING,
        "4": Phase.PENDING,
    }
    assert states["1"].exit_code == 3 and arrays.letter_of(states["2"]) == "K"
    # No accounting storage: no elements, not an error.
    assert history.parse(ok(stderr="Slurm accounting storage is disabled", exit_code=1)) == {}


def test_slurm_lookup_keys_arrays_by_their_id() -> None:
    parse = SLURM.array_lookup_query("atlas-train-0123456789").parse
    states = parse(ok("41|0-5%2|PENDING|JobArrayTaskLimit\n43|1|RUNNING|None\n43|0|COMPLETED|None\n"))
    assert sorted(states) == ["41", "43"]


# --- LSF: bjobs of one array ---------------------------------------------------------------------


def bjobs_json(*records: dict[str, str]) -> str:
    return json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": list(records)}).replace("/", "\\/")


def element(index: int, stat: str, exit_code: str = "", reason: str = "") -> dict[str, str]:
    return {
        "JOBID": "77",
        "JOB_NAME": f"atlas-train-0123456789[{index}]",
        "STAT": stat,
        "EXIT_CODE": exit_code,
        "EXIT_REASON": reason,
    }


def test_lsf_bjobs_of_an_array_by_element_index() -> None:
    parse = LSF.array_elements_query("77").parse
    stdout = bjobs_json(
        element(1, "DONE"),
        element(2, "EXIT", "1"),
        element(3, "EXIT", "130", "TERM_OWNER: job killed by owner"),
        element(4, "RUN"),
        element(5, "PEND"),
        element(6, "EXIT", "", ""),  # killed while pending: no exit code
    )
    states = parse(ok(stdout))
    assert "".join(arrays.letter_of(states[str(i)]) for i in range(1, 7)) == "DFKRPK"


def test_lsf_bjobs_of_a_forgotten_array_is_no_elements() -> None:
    parse = LSF.array_elements_query("77").parse
    not_found = json.dumps(
        {"COMMAND": "bjobs", "JOBS": 1, "RECORDS": [{"JOBID": "77", "ERROR": "Job <77> is not found"}]}
    )
    assert parse(ok(not_found)) == {}
    assert parse(ok(stderr="Job <77> is not found")) == {}
    with pytest.raises(Exception, match="LSF is down"):
        parse(ok(stderr="LSF is down. Please wait ...", exit_code=255, stdout="LSF is down"))


def test_lsf_lookup_keys_arrays_by_their_id() -> None:
    parse = LSF.array_lookup_query("atlas-train-0123456789").parse
    assert sorted(parse(ok(bjobs_json(element(1, "DONE"), element(2, "RUN"))))) == ["77"]


# --- the provider against a scripted login node ---------------------------------------------------


class LoginNode:
    """What the provider runs over SSH, answered from a script of Slurm's behaviour."""

    def __init__(self, arrays_by_name: dict[str, str] | None = None, elements: dict[str, str] | None = None) -> None:
        self.commands: list[str] = []
        self.arrays_by_name = dict(arrays_by_name or {})  # name -> array id already in the queue
        self.elements = dict(elements or {})  # array id -> squeue -r answer
        self.next_id = 100
        self.staged: dict[str, str | None] = {}
        self.retired = "55 atlas-other-name\n"
        self.predecessors = "RUNNING"

    def run(self, _conn: Any, command: str, **_: Any) -> RemoteResult:
        self.commands.append(command)
        if command.startswith("cat -- "):
            return ok(self.retired)
        if "--name=" in command:
            name = command.split("--name=")[1].split()[0]
            array_id = self.arrays_by_name.get(name)
            return ok(f"{array_id}|0-2|PENDING|None\n" if array_id else "")
        if "sbatch" in command:
            self.next_id += 1
            return ok(f"{self.next_id}\n")
        if command.startswith("squeue -h -t all -j ") and " -O " in command:
            # The predecessors' states (the dependency check): a job per asked-for id.
            ids = command.split(" -j ")[1].split()[0].split(",")
            return ok("".join(f"{i}|{self.predecessors}|normal|n|None|0|t|t|t|\n" for i in ids))
        if command.startswith("squeue -h -r"):
            array_id = command.split(" -j ")[1].split()[0]
            return ok(self.elements.get(array_id, ""))
        if command.startswith("sacct"):
            return ok("", "accounting disabled", 1)
        return ok()

    def sha256(self, _conn: Any, paths: list[str]) -> dict[str, str | None]:
        return {path: self.staged.get(path) for path in paths}


def sweep_props(limit: int = 4) -> tuple[dict[str, Any], dict[str, str]]:
    """A SweepJob's props for the probe's sweep split at `limit` (6 points: chunks of 4 and 2),
    and what StagedFiles would have put where."""
    sweep = sweep_scripts(PROBE_SWEEP, SLURM, RUN, None, array_limit=limit)["train"]
    from infra.hpc.pipeline import _chunk_entries

    props = {
        "provider_version": PROVIDER_VERSION,
        "ssh": {"host": "127.0.0.1", "port": 16022, "user": "atlas", "known_hosts": "k", "private_key_file": "/k"},
        "ssh_secret": {"private_key": None, "passphrase": None},
        "scheduler": "slurm",
        "scheduler_options": {},
        "step": "train",
        "run_dir": RUN.run_dir,
        "table_path": sweep.table_path,
        "table_sha256": sha256_hex(sweep.table.encode()),
        "chunks": _chunk_entries(sweep),
        "log_pattern": "logs/train.%A_%a",
        "after_job_ids": ["12", "13"],
        "after_definitions": [],
        "poll_interval_s": 60.0,
    }
    staged = {f"{RUN.run_dir}/{s.path}": s.sha256 for s in sweep_files({"train": sweep}).values()}
    staged[f"{RUN.run_dir}/{sweep.table_path}"] = sha256_hex(sweep.table.encode())
    return props, staged


@pytest.fixture
def login(monkeypatch: pytest.MonkeyPatch) -> LoginNode:
    node = LoginNode()
    conn = SimpleNamespace(endpoint=SimpleNamespace(address="atlas@127.0.0.1:16022"))
    monkeypatch.setattr(sweep_module.ssh, "connection", lambda endpoint: conn)
    monkeypatch.setattr(sweep_module.ssh, "run_remote", node.run)
    monkeypatch.setattr(sweep_module.ssh, "remote_sha256", node.sha256)
    return node


def test_create_submits_each_chunk_as_one_array_after_every_predecessor(login: LoginNode) -> None:
    props, login.staged = sweep_props()
    login.elements = {"101": "101|0-3%2|PENDING|Dependency\n", "102": "102|0-1|PENDING|Dependency\n"}
    result = SweepJobProvider().create(props)
    submissions = [c for c in login.commands if "sbatch" in c]
    assert len(submissions) == 2
    assert all("--dependency=afterok:12:13" in c for c in submissions)
    assert submissions[0].endswith(".atlas/jobs/train.sbatch") and submissions[1].endswith("train.c1.sbatch")
    assert result.id == "101,102"
    assert result.outs["job_ids"] == ["101", "102"] and result.outs["job_id"] == "101"
    assert result.outs["elements"] == "P6" and result.outs["state"] == "pending"
    assert result.outs["counts"] == {"pending": 6}


def test_create_adopts_the_arrays_an_interrupted_up_submitted(login: LoginNode) -> None:
    props, login.staged = sweep_props()
    first = props["chunks"][0]["job_name"]
    login.arrays_by_name = {first: "90"}
    login.elements = {"90": "90|0|RUNNING|None\n90|1|COMPLETED|None\n90|2-3|PENDING|JobArrayTaskLimit\n"}
    result = SweepJobProvider().create(props)
    submissions = [c for c in login.commands if "sbatch" in c]
    # Only the chunk that was not in the queue yet is submitted.
    assert len(submissions) == 1 and submissions[0].endswith("train.c1.sbatch")
    assert result.outs["job_ids"] == ["90", "101"]
    assert arrays.decode(result.outs["elements"]) == "RDPP??"


def test_create_refuses_to_wait_for_a_predecessor_that_failed(login: LoginNode) -> None:
    props, login.staged = sweep_props()
    login.predecessors = "FAILED"
    with pytest.raises(sweep_module.HpcProviderError, match=r"^step 'train' depends on job 12, which ended FAILED"):
        SweepJobProvider().create(props)
    assert not any("sbatch" in c for c in login.commands)


def test_create_never_adopts_an_array_atlas_retired(login: LoginNode) -> None:
    props, login.staged = sweep_props()
    first = props["chunks"][0]["job_name"]
    # Array 55 of this name was deleted by Atlas (destroy, or a replacement): submitted afresh.
    login.arrays_by_name = {first: "55"}
    login.retired = f"55 {first}\n"
    result = SweepJobProvider().create(props)
    assert result.outs["job_ids"] == ["101", "102"]


def test_create_refuses_a_table_or_script_that_is_not_the_one_previewed(login: LoginNode) -> None:
    props, staged = sweep_props()
    table = f"{RUN.run_dir}/{props['table_path']}"
    login.staged = {**staged, table: None}
    with pytest.raises(sweep_module.HpcProviderError, match=r"points on .* is missing; .*StagedFiles"):
        SweepJobProvider().create(props)
    assert not any("sbatch" in c for c in login.commands)


def test_read_shows_an_element_killed_outside_and_keeps_finished_ones_slurm_forgot(login: LoginNode) -> None:
    props, _ = sweep_props()
    props.update(job_ids=["101", "102"], elements="D2R2P2", submitted_at="2026-12-05T08:00:00Z")
    login.elements = {"101": "101|2|COMPLETED|None\n101|3|CANCELLED|None\n", "102": "102|0-1|RUNNING|None\n"}
    result = SweepJobProvider().read("101,102", props)
    assert result.outs is not None
    assert arrays.decode(result.outs["elements"]) == "DDDKRR"
    assert result.outs["state"] == "running" and result.outs["counts"]["killed outside Atlas"] == 1
    # One query per array.
    assert sum(c.startswith("squeue -h -r") for c in login.commands) == 2


def test_delete_cancels_every_array_with_unfinished_elements_and_retires_all(login: LoginNode) -> None:
    props, _ = sweep_props()
    props.update(job_ids=["101", "102"], elements="D4R2")
    login.elements = {"101": "101|0-3|COMPLETED|None\n", "102": "102|0|RUNNING|None\n102|1|PENDING|None\n"}
    SweepJobProvider().delete("101,102", props)
    cancels = [c for c in login.commands if c.startswith("scancel")]
    assert cancels == ["scancel 102"]  # the finished array is not cancelled
    retire = login.commands[-1]
    assert "101 " in retire and "102 " in retire and retire.endswith(".atlas/retired-jobs")


def test_check_and_diff(login: LoginNode) -> None:
    props, _ = sweep_props()
    provider = SweepJobProvider()
    assert provider.check({}, props).failures == []
    bad = {**props, "chunks": [{**props["chunks"][0], "job_name": "Bad Name"}, {**props["chunks"][1], "after": 5}]}
    reasons = {f.property for f in provider.check({}, bad).failures}
    assert reasons == {"chunks[0].job_name", "chunks[1].after"}
    outs = {**props, "job_ids": ["101", "102"], "elements": "D6"}
    assert not provider.diff("101,102", outs, props).changes
    other = {**props, "table_sha256": "0" * 64}
    assert provider.diff("101,102", outs, other).replaces == ["table_sha256"]
    assert provider.diff("101,102", outs, {**props, "after_job_ids": ["12", "14"]}).replaces == ["after_job_ids"]
    newer = provider.diff("101,102", outs, {**props, "provider_version": "other"})
    assert newer.changes and not newer.replaces


# --- the pipeline: one SweepJob, and what comes after waits for every array ------------------------


class Mocks(ResourceMocks):
    def outputs(self, args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
        if args.typ.endswith("BatchJob"):
            return {"job_id": str(100 + len(self.resources)), "queue": "normal", "submitted_at": "t"}
        if args.typ.endswith("SweepJob"):
            ids = [str(200 + i) for i in range(len(args.inputs["chunks"]))]
            return {"job_ids": ids, "job_id": ids[0], "submitted_at": "t", "elements": "P6", "state": "pending",
                    "retries": [], "final_ids": ids, "ended_ids": []}
        return {}


@pytest.fixture
def mocks() -> Mocks:
    return Mocks().install()


def sweep_then_report() -> Any:
    raw = yaml.safe_load((REPO_ROOT / "workloads" / "probe" / "sweep.yaml").read_text())
    raw["steps"].append(
        {
            "name": "rank",
            "command": ["python3", "-m", "workloads.probe", "rank"],
            "inputs": ["train-sweep"],
            "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "1Gi", "walltime": "00:05:00"},
        }
    )
    return parse_workload(raw)


@pulumi.runtime.test
def test_a_swept_step_is_one_sweep_job_and_the_next_step_waits_for_every_array(mocks: Mocks) -> Any:
    from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs
    from infra.hpc.target_parser import parse_hpc_target

    target = parse_hpc_target(
        {
            "host": "127.0.0.1",
            "user": "atlas",
            "scheduler": "slurm",
            "known_hosts": "[127.0.0.1]:22 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxr\n",
            "private_key_file": "/dev/null",
        },
        "atlas:satori-slurm",
    )
    workload = sweep_then_report()
    env = HpcEnvironment("s", HpcEnvironmentArgs(target=target, workload=workload, environment="s", stack="unit"))

    def check(out: dict[str, Any]) -> None:
        by_name = {r.name: r for r in mocks.resources}
        sweep = by_name["s-train"]
        assert sweep.typ.endswith("SweepJob") and len(sweep.inputs["chunks"]) == 1
        assert sweep.inputs["chunks"][0]["count"] == 6 and sweep.inputs["table_path"].endswith(".points")
        assert len(sweep.inputs["after_job_ids"]) == 2  # make-hdf5's and inception-moments' jobs
        rank = by_name["s-rank"]
        assert rank.typ.endswith("BatchJob")
        assert rank.inputs["after_job_ids"] == [] and rank.inputs["after_array_ids"] == ["200"]
        assert rank.inputs["after_definitions"] == [env.sweeps["train"].job_definition]
        staged = {f["path"] for f in by_name["s-staged-files"].inputs["files"]}
        assert sweep.inputs["table_path"] in staged and ".atlas/jobs/train.sbatch" in staged
        # A step before any sweep keeps the inputs it always had.
        assert "after_array_ids" not in by_name["s-inception-moments"].inputs
        assert rank.inputs["after_ended_ids"] == []  # no point of the sweep ran again
        assert [s["job_id"] for s in out["steps"]][2] == "200"
        assert out["steps"][2]["sweep"] == {
            "points": 6,
            "arrays": [{"job_id": "200", "offset": 0, "count": 6, "points": []}],
            "elements": "P6",
            "results": workload.steps[2].sweep.results,
            "max_attempts": 1,
        }

    return env.outputs.apply(check)


def test_waiting_for_a_swept_step_is_refused_naming_the_key() -> None:
    from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs
    from infra.hpc.target import HpcConfigError
    from infra.hpc.target_parser import parse_hpc_target

    target = parse_hpc_target(
        {"host": "h", "user": "u", "scheduler": "lsf", "known_hosts": "h ssh-ed25519 AAAA\n", "private_key_file": "/k"},
        "atlas:satori",
    )
    args = HpcEnvironmentArgs(
        target=target, workload=PROBE_SWEEP, environment="s", stack="unit", wait_for_steps=("train",)
    )
    with pytest.raises(HpcConfigError, match=r"^wait_for_steps: train is a swept step"):
        HpcEnvironment("s", args)


def test_a_split_sweep_stages_one_script_per_chunk_and_its_table_once(tmp_path: Path) -> None:
    sweep = sweep_scripts(PROBE_SWEEP, LSF, RUN, None, array_limit=4)["train"]
    files = sweep_files({"train": sweep})
    assert sorted(files) == ["train#c0", "train#c1"]
    assert files["train#c1"].path == ".atlas/jobs/train.c1.lsf" and files["train#c1"].job_name.endswith("-c1")
    assert replace(files["train#c0"], job_name="x").sha256 == files["train#c0"].sha256
    (table,) = sweep_tables({"train": sweep}, tmp_path)
    assert table.path == sweep.table_path and table.source.read_text().count("\n") == 6


def test_a_table_is_staged_from_a_file_named_by_its_digest_so_state_holds_no_table(tmp_path: Path) -> None:
    sweep = sweep_scripts(PROBE_SWEEP, LSF, RUN, None)["train"]
    (table,) = sweep_tables({"train": sweep}, tmp_path)
    digest = sha256_hex(sweep.table.encode())
    assert table.source == tmp_path / f"{digest}.tsv" and table.source.read_text() == sweep.table
    (entry,) = staged_file_entries({}, (table,), False, RuntimeError)
    assert entry == {"path": sweep.table_path, "source": str(table.source), "sha256": digest, "mode": 0o644}
    assert "content" not in entry
    # A file left damaged under its digest's name (a disk filled half way) is written again whole.
    table.source.write_text("1\tbroken\n")
    (again,) = sweep_tables({"train": sweep}, tmp_path)
    assert again.source.read_text() == sweep.table and sorted(p.name for p in tmp_path.iterdir()) == [f"{digest}.tsv"]


@pulumi.runtime.test
def test_a_swept_step_before_the_last_is_not_awaited_by_default(mocks: Mocks) -> Any:
    from infra.hpc.target_parser import parse_hpc_target
    from infra.kinds.hpc import HpcKind

    target = parse_hpc_target(
        {
            "host": "h",
            "user": "u",
            "scheduler": "slurm",
            "known_hosts": "h ssh-ed25519 AAAA\n",
            "private_key_file": "/",
        },
        "atlas:hpc.satori",
    )
    hpc = SimpleNamespace(name="satori", target=target, wait_for=None, provenance="")
    config = SimpleNamespace(hpc=[hpc], stack="unit", run_id="1", sweep_max_attempts=1)
    # make-hdf5 and inception-moments are awaited; train, a sweep before `rank`, is not (nor refused).
    built = HpcKind().build(SimpleNamespace(config=config, workload=sweep_then_report(), source_files=(), image=None))

    def check(_: Any) -> None:
        done = sorted(r.name for r in mocks.resources if r.typ.endswith("JobCompletion"))
        assert done == ["satori-inception-moments-done", "satori-make-hdf5-done"]

    return built["satori"].outputs.apply(check)


# --- a site's own array limit -----------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["lsf", "slurm"])
def test_a_sites_array_limit_is_an_option_of_its_scheduler(scheduler: str) -> None:
    cls = type(scheduler_for(scheduler))
    given = cls.parse_options({"max_array_size": 500}, "atlas:hpc.satori")
    assert given["max_array_size"] == "500" and cls.array_limit_of(given) == 500
    # Absent: the scheduler's default, and the options a target always had (no new key in state).
    default = cls.parse_options(None, "atlas:hpc.satori")
    assert "max_array_size" not in default and cls.array_limit_of(default) == cls.array_size_limit


@pytest.mark.parametrize("bad", [0, -3, "many", 2.5, True, 5_000_000])
def test_a_bad_array_limit_is_refused_naming_its_key(bad: Any) -> None:
    from infra.hpc.target import HpcConfigError

    with pytest.raises(HpcConfigError, match=r"^atlas:hpc\.satori\.scheduler_options\.max_array_size: .*MaxArraySize"):
        type(SLURM).parse_options({"max_array_size": bad}, "atlas:hpc.satori")


@pulumi.runtime.test
def test_a_sites_array_limit_splits_the_sweep(mocks: Mocks) -> Any:
    from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs
    from infra.hpc.target_parser import parse_hpc_target

    target = parse_hpc_target(
        {
            "host": "h",
            "user": "u",
            "scheduler": "lsf",
            "known_hosts": "h ssh-ed25519 AAAA\n",
            "private_key_file": "/",
            "scheduler_options": {"max_array_size": 4},
        },
        "atlas:hpc.satori",
    )
    env = HpcEnvironment("s", HpcEnvironmentArgs(target=target, workload=PROBE_SWEEP, environment="s", stack="u"))

    def check(_: Any) -> None:
        sweep = next(r for r in mocks.resources if r.name == "s-train")
        assert [(c["offset"], c["count"]) for c in sweep.inputs["chunks"]] == [(0, 4), (4, 2)]
        assert sweep.inputs["scheduler_options"] == {"memory_unit": "MB", "max_array_size": "4"}

    return env.outputs.apply(check)


def test_a_sites_array_limit_added_later_replaces_no_batch_job() -> None:
    from infra.hpc.providers import BatchJobProvider
    from infra.hpc.providers.batch_job import job_definition

    job = {
        "provider_version": PROVIDER_VERSION,
        "ssh": {"host": "h", "port": 22, "user": "u", "known_hosts": "k", "private_key_file": "/k"},
        "scheduler": "lsf",
        "scheduler_options": {"memory_unit": "MB"},
        "step": "train",
        "job_name": "atlas-train-0123456789",
        "run_dir": "r",
        "script_path": "s.lsf",
        "script": "x",
        "script_sha256": sha256_hex(b"x"),
        "after_job_ids": [],
        "job_id": "5",
    }
    limited = {**job, "scheduler_options": {"memory_unit": "MB", "max_array_size": "500"}}
    assert not BatchJobProvider().diff("5", job, limited).replaces
    assert BatchJobProvider().diff("5", job, {**job, "scheduler_options": {"memory_unit": "GB"}}).replaces

    def definition(options: dict[str, str]) -> str:
        return job_definition(
            scheduler="lsf",
            scheduler_options=options,
            step="train",
            job_name="n",
            run_dir="r",
            script_path="s",
            script_sha256="0",
            after_definitions=[],
        )

    assert definition({"memory_unit": "MB"}) == definition({"memory_unit": "MB", "max_array_size": "500"})


# --- retries: failed or killed points run again as one new array per chunk -------------------------


@pytest.mark.parametrize(
    ("indices", "text"),
    [
        ([0], "0"),
        ([3, 4, 5, 17], "3-5,17"),
        ([17, 3, 5, 4, 4], "3-5,17"),
        ([1, 3, 5], "1,3,5"),
        (range(0, 1000), "0-999"),
    ],
)
def test_index_ranges_round_trip(indices: Any, text: str) -> None:
    assert index_ranges(indices) == text
    assert parse_index_ranges(text) == tuple(sorted(set(indices)))


@pytest.mark.parametrize("bad", ["", "3-", "5-3", "a", "1,,2", "-1"])
def test_parse_index_ranges_refuses_what_it_did_not_write(bad: str) -> None:
    with pytest.raises(ValueError, match="is not an index list"):
        parse_index_ranges(bad)


def test_a_retry_submits_some_elements_of_the_chunk_script_under_its_own_name() -> None:
    request = ArrayRequest("atlas-train-0123456789-r2", (3, 17, 18, 19), 2)
    slurm = SLURM.submit_command("/run", ".atlas/jobs/train.sbatch", [], array=request)
    assert slurm == ("cd -- /run && sbatch --parsable --array=3,17-19%2 --job-name=atlas-train-0123456789-r2 "
                     ".atlas/jobs/train.sbatch")
    lsf = LSF.submit_command("/run", ".atlas/jobs/train.lsf", [], array=replace(request, parallel=None))
    assert lsf == "cd -- /run && bsub -J 'atlas-train-0123456789-r2[3,17-19]' < .atlas/jobs/train.lsf"
    with pytest.raises(Exception, match="job names must be"):
        SLURM.submit_command("/run", "s", [], array=replace(request, job_name="Bad Name"))


def test_waiting_for_some_jobs_to_succeed_and_others_to_end() -> None:
    slurm = SLURM.submit_command("/run", "s", ["7", "8"], after_ended=["5"])
    assert " --dependency=afterok:7:8,afterany:5 " in slurm
    assert "--dependency=afterany:5 " in SLURM.submit_command("/run", "s", [], after_ended=["5"]) + " "
    lsf = LSF.submit_command("/run", "s", ["7"], after_ended=["5", "6"])
    assert "-w 'done(7) && ended(5) && ended(6)'" in lsf


def test_which_points_run_again() -> None:
    letters = "DFKRP?CF"
    assert sweep_module.retry_points(letters, [1] * 8, 1) == []  # no retry setting: none
    assert sweep_module.retry_points(letters, [1] * 8, 2) == [1, 2, 7]  # failed and killed only
    assert sweep_module.retry_points(letters, [1, 2, 1, 1, 1, 1, 1, 1], 2) == [2, 7]  # no attempts left for 1


def test_a_points_last_array_says_what_the_steps_after_wait_for() -> None:
    chunks = [
        sweep_module.Chunk("a", "a.sbatch", "x", 0, 4, None),
        sweep_module.Chunk("b", "b.sbatch", "x", 4, 2, None),
    ]
    retries = [sweep_module.Retry(0, "103", "a-r2", (1, 3)), sweep_module.Retry(0, "104", "a-r3", (3,))]
    found = sweep_module.sweep_arrays(chunks, ["101", "102"], retries)
    assert [(a.job_id, a.points) for a in found] == [
        ("101", (0, 1, 2, 3)), ("102", (4, 5)), ("103", (1, 3)), ("104", (3,))
    ]
    assert sweep_module.attempts_of(6, retries) == [1, 2, 1, 3, 1, 1]
    # 101's points 1 and 3 and 103's point 3 ran again: those arrays need only end. Of their own
    # points' latest attempts, 101's point 2 still runs: its element must succeed (Slurm's 101_2);
    # point 0 is done already; 103's point 1 failed for good (a retry keeps its chunk's element
    # indices: element 1), so it blocks as a failed step would.
    assert sweep_module.dependency_ids(found, "DFRPDD", base=0) == (
        ["101_2", "102", "103_1", "104"], ["101", "103"]
    )
    # LSF counts elements from 1.
    assert sweep_module.dependency_ids(found, "DFRPDD", base=1)[0] == ["101_3", "102", "103_2", "104"]
    # Nothing ran again: every array must succeed whole.
    untouched = sweep_module.sweep_arrays(chunks, ["101", "102"], [])
    assert sweep_module.dependency_ids(untouched, "DFRPDD", base=0) == (["101", "102"], [])


def test_dependencies_on_array_elements_as_each_scheduler_spells_them() -> None:
    slurm = SLURM.submit_command("/r", "s", ["7", "101_2"], after_ended=["101"])
    assert "--dependency=afterok:7:101_2,afterany:101 " in slurm
    lsf = LSF.submit_command("/r", "s", ["7", "101_3"], after_ended=["101"])
    assert "-w 'done(7) && done(101[3]) && ended(101)'" in lsf
    with pytest.raises(Exception, match="dependencies must be job ids or array elements"):
        SLURM.submit_command("/r", "s", ["101[3]"])


def retried_login(login: LoginNode) -> dict[str, Any]:
    props, login.staged = sweep_props()
    props.update(job_ids=["101", "102"], elements="D4R2", submitted_at="t", retries=[], max_attempts=2)
    login.next_id = 150
    # Point 1 failed, point 3 was killed by its owner; chunk 1's two points failed.
    login.elements = {
        "101": "101|0|COMPLETED|None\n101|1|FAILED|NonZeroExitCode\n101|2|COMPLETED|None\n101|3|CANCELLED|None\n",
        "102": "102|0-1|FAILED|NonZeroExitCode\n",
    }
    return props


def test_up_after_a_refresh_runs_failed_and_killed_points_again_as_one_array_per_chunk(login: LoginNode) -> None:
    props = retried_login(login)
    provider = SweepJobProvider()
    olds = {**props, "elements": arrays.encode("DFDKFF")}  # what the refresh read
    assert not provider.diff("101,102", {**olds, "max_attempts": 1}, {**props, "max_attempts": 1}).changes
    diff = provider.diff("101,102", olds, props)
    assert diff.changes and not diff.replaces
    result = provider.update("101,102", olds, props)
    submissions = [c for c in login.commands if "sbatch" in c]
    first, second = (c["job_name"] for c in props["chunks"])
    assert submissions == [
        f"cd -- {RUN.run_dir} && sbatch --parsable --array=1,3%1 --job-name={first}-r2 .atlas/jobs/train.sbatch",
        f"cd -- {RUN.run_dir} && sbatch --parsable --array=0-1%1 --job-name={second}-r2 .atlas/jobs/train.c1.sbatch",
    ]
    outs = result.outs
    assert outs["job_ids"] == ["101", "102"]  # the chunks' arrays stay what they were
    assert [(r["chunk"], r["points"]) for r in outs["retries"]] == [(0, "1,3"), (1, "4-5")]
    # The new arrays answer nothing yet: their points are unknown until the next read, never the
    # failure they had before.
    retried_ids = [r["job_id"] for r in outs["retries"]]
    assert retried_ids == ["151", "152"]
    assert arrays.decode(outs["elements"]) == "D?D???"
    # 101's points 0 and 2 are done and its 1 and 3 run again, 102's both: those need only end.
    assert outs["final_ids"] == retried_ids and outs["ended_ids"] == ["101", "102"]
    # Attempts used up: the next up runs nothing again.
    assert not provider.diff("101,102", {**outs, "elements": arrays.encode("DFDFFF")}, props).changes


def test_an_interrupted_retry_is_adopted_not_submitted_twice(login: LoginNode) -> None:
    props = retried_login(login)
    first = props["chunks"][0]["job_name"]
    login.arrays_by_name = {f"{first}-r2": "140"}
    result = SweepJobProvider().update("101,102", {**props, "elements": arrays.encode("DFDKFF")}, props)
    submissions = [c for c in login.commands if "sbatch" in c]
    assert len(submissions) == 1 and "-r2 .atlas/jobs/train.c1.sbatch" in submissions[0]
    assert [r["job_id"] for r in result.outs["retries"]] == ["140", "151"]


def test_delete_cancels_unfinished_retries_too(login: LoginNode) -> None:
    props = retried_login(login)
    first = props["chunks"][0]["job_name"]
    retry = {"chunk": 0, "job_id": "140", "job_name": f"{first}-r2", "points": "1,3"}
    props.update(elements=arrays.encode("DRDRFF"), retries=[retry])
    login.elements["140"] = "140|1|RUNNING|None\n140|3|PENDING|None\n"
    SweepJobProvider().delete("101,102", props)
    # 101's own elements are finished (its points 1 and 3 run in 140); 102's failed: only 140 runs.
    assert [c for c in login.commands if c.startswith("scancel")] == ["scancel 140"]
    assert f"140 {first}-r2" in login.commands[-1]


def test_lsf_history_of_an_array_by_element_index() -> None:
    query = LSF.array_history_query("77")
    assert query is not None and query.command == "bhist -l 77"
    blocks = [
        "Job <77[1]>, Job Name <atlas-train-0123456789[1]>, User <atlas>, Command <...>\n"
        "Thu Dec  3 17:57:56: Submitted from host <vm>, to Queue <normal>, CWD <$HOME/run>;\n"
        "Thu Dec  3 17:57:58: Dispatched 1 Task(s) on Host(s) <vm>;\n"
        "Thu Dec  3 17:58:01: Done successfully. The CPU time used is 1.0 seconds;\n",
        "Job <77[2]>, Job Name <atlas-train-0123456789[2]>, User <atlas>, Command <...>\n"
        "Thu Dec  3 17:57:56: Submitted from host <vm>, to Queue <normal>, CWD <$HOME/run>;\n"
        "Thu Dec  3 17:57:58: Dispatched 1 Task(s) on Host(s) <vm>;\n"
        "Thu Dec  3 17:58:01: Exited with exit code 3. The CPU time used is 1.0 seconds;\n",
        "Job <77[3]>, Job Name <atlas-train-0123456789[3]>, User <atlas>, Command <...>\n"
        "Thu Dec  3 17:57:56: Submitted from host <vm>, to Queue <normal>, CWD <$HOME/run>;\n"
        "Thu Dec  3 17:58:00: Exited; job has been forced to exit with exit code 130.\n",
    ]
    states = query.parse(ok(("\n" + "-" * 78 + "\n\n").join(blocks)))
    assert "".join(arrays.letter_of(states[str(i)]) for i in (1, 2, 3)) == "DFK"
    assert query.parse(ok(stderr="77: No matching job found", exit_code=255)) == {}


def test_an_array_cancelled_while_every_element_was_pending_reads_killed(login: LoginNode) -> None:
    props, _ = sweep_props()
    props.update(job_ids=["101", "102"], elements="D4P2", submitted_at="t")
    # Chunk 1 cancelled by hand while both its elements waited: Slurm keeps one line, no index.
    login.elements = {"101": "101|0-3|COMPLETED|None\n", "102": "102|N/A|CANCELLED|None\n"}
    result = SweepJobProvider().read("101,102", props)
    assert result.outs is not None and arrays.decode(result.outs["elements"]) == "DDDDKK"


def test_the_monitor_reads_an_array_cancelled_while_pending_as_the_provider_does() -> None:
    from infra.outputs import SweepArray, SweepOutputs

    sweep = SweepOutputs(points=3, arrays=(SweepArray("41", 0, 3),), elements="P3", results="results/train")
    seen = {"41": SLURM.array_elements_query("41").parse(ok("41|N/A|CANCELLED|None\n"))}
    assert arrays.sweep_letters(sweep, seen, base=0) == "KKK"
