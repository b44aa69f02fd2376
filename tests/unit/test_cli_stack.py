"""How `atlas compare`, `monitor` and `nodes` read a real stack: the project found as pulumi finds it,
the config with its secrets through `pulumi config` parsed by the stack program's parsers, paths
relative to where the command runs, pulumi's failures in one line with the fix, and each site's
poll interval (with backoff) for `compare --wait` and the monitor.

pulumi itself is replaced by recorded answers here (its real runs: tests/integration/
test_pulumi_backend.py and test_cli_secret_key.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import paramiko
import pytest

from infra.cli import compare as compare_cli
from infra.cli import monitor as monitor_cli
from infra.cli import pulumi_cli, stack_files
from infra.cli.common import Stack
from infra.compare.access import Access
from infra.compare.records import without_records
from infra.config import AtlasConfigError, config_values
from infra.hpc import ssh
from infra.job_records import StepRecord
from infra.kinds import monitor_sources, poll_intervals, read_stack_outputs
from infra.monitor.hpc_view import HpcEnvironmentSource
from infra.toolchain.pins import REPO_ROOT
from tests.support import project_with_workloads

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90IGEgcmVhbCBrZXkgYXQgYWxs\n-----END OPENSSH PRIVATE KEY-----"
HOST_KEY = "login.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
SITE = {
    "scheduler": "slurm",
    "host": "login.example.org",
    "user": "alex",
    "queue": "gpu",
    "known_hosts_file": "site_known_hosts",
    "poll_interval_seconds": 90,
    "provenance": "real",
}


def config_document(key: str | None = KEY) -> dict[str, Any]:
    """`pulumi config --show-secrets --json -s site`, as pulumi 3.260 prints it for a stack whose
    key was set with `pulumi config set --secret --path atlas:hpc.site.private_key < key`."""
    hpc = {"site": {**SITE, **({"private_key": key} if key is not None else {})}}
    return {
        "atlas:hpc": {"value": json.dumps(hpc), "objectValue": hpc, "secret": key is not None},
        "atlas:runId": {"value": "1", "secret": False},
        "atlas:workload": {"value": "probe", "secret": False},
    }


HPC_OUTPUTS = {
    "kind": "hpc",
    "version": 2,
    "scheduler": "slurm",
    "provenance": "real",
    "host": "login.example.org",
    "port": 22,
    "user": "alex",
    "run_dir": "atlas-runs/site/site/probe",
    "run_id": "1",
    "steps": [{"name": "train", "job_id": "4242"}],
    "gpus_requested": 1,
    "known_hosts": "",
    "telemetry": {"path": "atlas-runs/site/site/probe/telemetry", "pvc": ""},
    "logs": {"path": "atlas-runs/site/site/probe/logs", "pvc": ""},
}
OUTPUTS = {"atlas": {"version": 2, "stack": "site", "workload": "probe", "run_id": "1"},
           "environments": {"site": HPC_OUTPUTS}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    folder = project_with_workloads(tmp_path / "project")
    (folder / "Pulumi.yaml").write_text("name: atlas\nruntime: python\nmain: stacks/\nstackConfigDir: stacks\n")
    (folder / "stacks").mkdir()
    (folder / "site_known_hosts").write_text(HOST_KEY)
    return folder


class FakePulumi:
    """Answers `run_pulumi` as pulumi would for one stack, and records where it was asked."""

    def __init__(self, document: dict[str, Any], outputs: dict[str, Any] | None = None) -> None:
        self.document, self.outputs = document, outputs
        self.calls: list[tuple[tuple[str, ...], Path]] = []

    def __call__(self, args: Sequence[str], project: Path, timeout_s: float = 0.0) -> str:
        self.calls.append((tuple(args), project))
        if tuple(args[:2]) == ("stack", "output"):
            if self.outputs is None:
                raise pulumi_cli.PulumiError("stack site is not in the backend file:///x", "stack")
            return json.dumps(self.outputs)
        if args[0] == "config":
            assert "--show-secrets" in args and "--json" in args
            return json.dumps(self.document)
        raise AssertionError(args)


# --- the project, as pulumi finds it --------------------------------------------------------------


def test_the_project_is_the_flag_else_the_folder_holding_the_cwd_else_the_wrappers(
    project: Path, tmp_path: Path
) -> None:
    inside = project / "stacks"
    assert pulumi_cli.find_project(None, inside, {}) == project
    assert pulumi_cli.find_project(Path("../project"), tmp_path / "elsewhere", {}) == project
    outside = tmp_path / "reports"
    outside.mkdir()
    assert pulumi_cli.find_project(None, outside, {"ATLAS_PROJECT": str(project)}) == project
    assert pulumi_cli.find_project(None, outside, {}) is None
    with pytest.raises(pulumi_cli.ProjectError, match=r"--cwd reports: no Pulumi.yaml in .*reports; name the folder"):
        pulumi_cli.find_project(Path("reports"), tmp_path, {})
    with pytest.raises(pulumi_cli.ProjectError, match="-s STACK needs the Pulumi project: run it in the project's"):
        pulumi_cli.require_project(None, "-s STACK")
    with pytest.raises(stack_files.StackReadError, match=r"-s site needs the Pulumi project: .* or give -C/--cwd DIR"):
        stack_files.read_stack_config(None, "site")
    assert pulumi_cli.stack_file(project, "site") == project / "stacks" / "Pulumi.site.yaml"
    assert pulumi_cli.stack_file(REPO_ROOT, "local") == REPO_ROOT / "stacks" / "Pulumi.local.yaml"


# --- pulumi's failures, in one line with the fix --------------------------------------------------

# pulumi 3.260's own error lines (stderr) for each way reading a stack fails.
RECORDED_FAILURES = [
    ("error: performing HTTP request: Get \"https://127.0.0.1:9/api/user\": dial tcp 127.0.0.1:9: connect: "
     "connection refused", "backend", "cannot be reached"),
    ('error: unable to open state directory "file:///etc/hostname/state": stat /etc/hostname/state: not a directory',
     "backend", "create the folder, or name the right one"),
    ('error: read ".pulumi/meta.yaml": blob (key ".pulumi/meta.yaml") (code=Unknown): operation error S3: '
     "GetObject, exceeded maximum number of attempts, 3, https response error StatusCode: 0",
     "backend", "check it (network, credentials)"),
    ("error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions", "login",
     "not logged in to the backend"),
    ("error: no stack named 'nope' found", "stack", "stack nope is not in the backend"),
    ("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment "
     "variables", "passphrase", "secrets need its passphrase"),
    ("error: incorrect passphrase", "passphrase", "does not open stack nope's secrets"),
    ("error: unable to read PULUMI_CONFIG_PASSPHRASE_FILE: open /tmp/none: no such file or directory",
     "passphrase", "point PULUMI_CONFIG_PASSPHRASE_FILE at the stack's passphrase file"),
]


@pytest.mark.parametrize(("stderr", "cause", "says"), RECORDED_FAILURES)
def test_each_way_pulumi_fails_is_one_line_naming_the_fix(stderr: str, cause: str, says: str) -> None:
    environ = {"PULUMI_BACKEND_URL": "https://alex:hunter2@state.example.org/atlas"}
    found, message = pulumi_cli.explain_failure(["config", "--show-secrets", "--json", "-s", "nope"],
                                                "Logging in using access token\n" + stderr, environ)
    assert (found, "\n" in message) == (cause, False)
    assert says in message and "hunter2" not in message and "--show-secrets" not in message
    if cause in ("backend", "login", "stack"):
        assert "state.example.org" in message and ("PULUMI_BACKEND_URL" in message or "pulumi login" in message)
    else:
        assert "PULUMI_CONFIG_PASSPHRASE" in message


def test_a_pulumi_that_is_not_there_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch, project: Path) -> None:
    monkeypatch.setenv("PATH", str(project))  # no pulumi on it
    with pytest.raises(pulumi_cli.PulumiError, match=r"no `pulumi` command on PATH: `source scripts/activate`") as e:
        pulumi_cli.run_pulumi(["stack", "output", "--json", "-s", "site"], project)
    assert e.value.cause == "cli"


# --- the config, with its secrets, as the stack program parses it ---------------------------------


def test_the_config_with_its_secret_key_is_the_programs(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values, secret_keys = config_values(config_document())
    assert values["hpc"]["site"]["private_key"] == KEY and values["workload"] == "probe" and values["runId"] == "1"
    assert secret_keys == frozenset({"atlas:hpc"})
    pulumi = FakePulumi(config_document())
    monkeypatch.setattr(stack_files, "run_pulumi", pulumi)
    config = stack_files.read_stack_config(project, "site")
    assert config is not None and pulumi.calls == [(("config", "--show-secrets", "--json", "-s", "site"), project)]
    (site,) = config.hpc
    assert site.target.private_key == KEY and site.target.known_hosts_file == project / "site_known_hosts"
    access = stack_files.access_from_stack_config(config, project)
    assert access.hpc["site"] is site.target and access.poll_interval_s("site") == 90.0
    assert "PRIVATE KEY" not in repr(access)  # a key never shows in a repr, a log or a traceback
    # --stack-file reads that file's config through the stack (its secrets need the stack's provider).
    other = project / "elsewhere" / "Pulumi.site.yaml"
    stack_files.read_stack_config(project, "site", other)
    assert pulumi.calls[-1][0][-2:] == ("--config-file", str(other))


def test_a_secret_pulumi_did_not_show_and_a_plain_text_key_are_refused() -> None:
    hidden = {"atlas:hpc": {"secret": True}}  # `pulumi config --json` without --show-secrets
    with pytest.raises(AtlasConfigError, match=r"atlas:hpc: a secret whose value pulumi did not show"):
        config_values(hidden)
    plain = config_document()
    plain["atlas:hpc"]["secret"] = False
    values, secret_keys = config_values(plain)
    from infra.config import stack_config_from_values

    with pytest.raises(AtlasConfigError, match=r"atlas:hpc\.site\.private_key: holds a secret in plain text"):
        stack_config_from_values("site", values, secret_keys, Path("."))


def test_a_stack_not_in_the_backend_is_read_as_written_unless_it_holds_secrets(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_stack(args: Sequence[str], where: Path, timeout_s: float = 0.0) -> str:
        raise pulumi_cli.PulumiError("stack site is not in the backend file:///x: check its name", "stack")

    monkeypatch.setattr(stack_files, "run_pulumi", no_stack)
    file = project / "stacks" / "Pulumi.site.yaml"
    file.write_text(json.dumps({"config": {"atlas:workload": "probe",
                                           "atlas:hpc": {"site": {**SITE, "private_key_file": "id"}}}}))
    config = stack_files.read_stack_config(project, "site")
    assert config is not None and config.hpc[0].target.private_key_file == project / "id"
    assert "reading" in capsys.readouterr().err
    file.write_text(json.dumps({"config": {"atlas:hpc": {"site": {**SITE, "private_key": {"secure": "v1:abc"}}}}}))
    with pytest.raises(stack_files.StackReadError, match="holds secrets only Pulumi can decrypt"):
        stack_files.read_stack_config(project, "site")

    def unreachable(args: Sequence[str], where: Path, timeout_s: float = 0.0) -> str:
        raise pulumi_cli.PulumiError("the Pulumi backend s3://x cannot be reached", "backend")

    monkeypatch.setattr(stack_files, "run_pulumi", unreachable)
    with pytest.raises(stack_files.StackReadError, match="cannot be reached") as error:
        stack_files.read_stack_config(project, "site")  # never read as written: the backend's failure is the answer
    assert error.value.cause == "backend"


# --- the commands: the key held as a secret reaches the login; paths are the user's ---------------


def test_compare_reaches_the_site_with_the_key_held_as_a_secret_from_any_folder(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pulumi = FakePulumi(config_document(), OUTPUTS)
    monkeypatch.setattr(stack_files, "run_pulumi", pulumi)
    tried: list[ssh.SshEndpoint] = []

    def connection(endpoint: ssh.SshEndpoint) -> Any:
        tried.append(endpoint)
        raise OSError("connect to login.example.org port 22: no route (a test)")

    monkeypatch.setattr(ssh, "connection", connection)
    elsewhere = tmp_path / "my-reports"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("ATLAS_PROJECT", raising=False)
    assert compare_cli.main(["-s", "site", "-C", "../project", "--out", "site-report"]) == 0
    assert {call[1] for call in pulumi.calls} == {project}  # pulumi runs in the project
    (endpoint,) = tried
    assert (endpoint.host, endpoint.user, endpoint.private_key, endpoint.private_key_file) == (
        "login.example.org", "alex", KEY, None)
    assert endpoint.known_hosts == HOST_KEY and endpoint.known_hosts_source == f"file {project / 'site_known_hosts'}"
    assert (elsewhere / "site-report" / "report.md").is_file()  # --out is where the command ran
    printed = capsys.readouterr()
    assert "bm90IGEgcmVhbCBrZXkgYXQgYWxs" not in printed.out + printed.err
    report = (elsewhere / "site-report" / "report.json").read_text()
    assert "no route (a test)" in report and "bm90IGEgcmVhbCBrZXkgYXQgYWxs" not in report


def test_the_flags_go_over_the_config(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack_files, "run_pulumi", FakePulumi(config_document(), OUTPUTS))
    tried: list[ssh.SshEndpoint] = []

    def connection(endpoint: ssh.SshEndpoint) -> Any:
        tried.append(endpoint)
        raise OSError("no route (a test)")

    monkeypatch.setattr(ssh, "connection", connection)
    monkeypatch.chdir(project)
    (project / "mine").write_text(HOST_KEY)
    assert compare_cli.main(["-s", "site", "--ssh-key", "site=keys/id", "--known-hosts", "site=mine",
                             "--out", "r"]) == 0
    (endpoint,) = tried
    assert endpoint.private_key_file == str(project / "keys" / "id") and endpoint.private_key is None
    assert endpoint.known_hosts_source == f"file {project / 'mine'}"


def test_outputs_alone_need_the_key_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATLAS_PROJECT", raising=False)
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    assert compare_cli.main(["--outputs", "outputs.json", "--out", "r"]) == 0
    report = (tmp_path / "r" / "report.json").read_text()
    assert "give -s STACK (its config names them, a key held as a Pulumi secret included)" in report


def test_a_stack_whose_backend_fails_ends_the_command_in_one_line(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreachable(args: Sequence[str], where: Path, timeout_s: float = 0.0) -> str:
        raise pulumi_cli.PulumiError("the Pulumi backend s3://x cannot be reached (dial tcp); check it", "backend")

    monkeypatch.setattr(stack_files, "run_pulumi", unreachable)
    monkeypatch.chdir(project)
    for main in (compare_cli.main, monitor_cli.main):
        assert main(["-s", "site", "--once"] if main is monitor_cli.main else ["-s", "site"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot be reached" in err and "Traceback" not in err


# --- the site's pace --------------------------------------------------------------------------------


def test_the_monitor_polls_each_site_at_its_own_interval_unless_told(project: Path) -> None:
    outputs = read_stack_outputs(
        {**OUTPUTS, "environments": {"site": HPC_OUTPUTS, "other": {**HPC_OUTPUTS, "host": "login2.example.org"}}}
    )
    (project / "other_known_hosts").write_text(HOST_KEY.replace("login.", "login2.", 1))
    paramiko.RSAKey.generate(1024).write_private_key_file(str(project / "id"))
    access = Access(project, known_hosts={"other": project / "other_known_hosts"},
                    ssh_keys={"other": project / "id"}, poll_intervals={"site": 90.0})
    assert poll_intervals(outputs, access) == {"other": 60.0, "site": 90.0}  # 60 s where the stack says none
    assert poll_intervals(outputs, access, 5.0) == {"other": 5.0, "site": 5.0}
    sources = monitor_sources(outputs, access)
    other = sources["other"]
    assert isinstance(other, HpcEnvironmentSource) and other.poller.interval_s == 60.0
    monitor = monitor_cli.build_monitor(outputs, access, None, None, watch=False)
    assert monitor.interval_s == 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_compare_waits_at_the_sites_pace_and_backs_off_while_one_fails(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = read_stack_outputs(OUTPUTS)
    rounds = iter(["unreachable", "unreachable", "unreachable", "running", "done"])

    def collect(outputs: Any, access: Access, raw_dir: Path, unreachable: Any = None) -> list[Any]:
        state = next(rounds)
        if state == "unreachable":
            unreachable("site", "not collected: OSError: down")
            return [without_records("site", "hpc", "Slurm", "down", ("down",))]
        step = StepRecord(step="train", job="4242", state=state, requested_at=1.0, scheduled_at=2.0, started_at=2.0,
                          finished_at=100.0 if state == "done" else None, exit_code=None, pending_reason="",
                          gpus_requested=1, gpus_allocated=1, node="n1", simulated=False, argv=None, source="test")
        return [dataclasses.replace(without_records("site", "hpc", "Slurm", "x", ()), steps=(step,))]

    monkeypatch.setattr(compare_cli, "collect_environments", collect)
    clock = Clock()
    access = Access(project, poll_intervals={"site": 90.0})
    left = compare_cli.wait_until_finished(outputs, access, project / "raw", 3600.0, sleep=clock.sleep, clock=clock)
    assert left == [] and clock.sleeps == [90.0, 180.0, 360.0, 90.0]  # the site's pace, doubled while it fails
    rounds = iter(["running"] * 10)
    clock = Clock()
    left = compare_cli.wait_until_finished(outputs, access, project / "raw", 200.0, sleep=clock.sleep, clock=clock)
    assert left == ["site/train (running)"] and clock.sleeps == [90.0, 90.0, 20.0]  # never past --wait
    assert compare_cli.wait_interval(read_stack_outputs({**OUTPUTS, "environments": {}}), access) == 5.0


def test_stack_home_is_the_project_else_where_the_command_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Stack(None, None, Access()).home == tmp_path
    assert Stack(tmp_path / "p", None, Access()).home == tmp_path / "p"
