"""`atlas doctor`: the stack's config read through pulumi (replaced by recorded answers here), its
workload loaded, every environment checked through the kinds router; exit 0 when every check
passes, 1 when one fails, 2 when the command or the stack cannot be read, in one line naming the
fix; `--json` one object. The checks themselves: test_doctor_*.py; against the local environment:
tests/integration/test_doctor_local.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import paramiko
import pytest

from infra import kinds
from infra.cli import doctor as doctor_cli
from infra.cli import pulumi_cli, stack_files
from infra.compare.access import Access
from infra.doctor import Check, DoctorReport, EnvironmentChecks, Status
from infra.stack_config import StackConfig
from infra.workload.model import Workload
from tests.support import project_with_workloads


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    folder = project_with_workloads(tmp_path / "project")
    (folder / "Pulumi.yaml").write_text("name: atlas\nruntime: python\nmain: stacks/\nstackConfigDir: stacks\n")
    (folder / "stacks").mkdir()
    return folder


def document(hpc: dict[str, Any], workload: str = "probe") -> dict[str, Any]:
    """`pulumi config --show-secrets --json -s site` for a stack with these HPC sides."""
    return {
        "atlas:hpc": {"value": json.dumps(hpc), "objectValue": hpc, "secret": False},
        "atlas:workload": {"value": workload, "secret": False},
    }


SITE = {"scheduler": "slurm", "host": "login.example.org", "user": "alex", "queue": "gpu", "provenance": "real"}


class FakePulumi:
    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, args: Sequence[str], project: Path, timeout_s: float = 0.0) -> str:
        self.calls.append(tuple(args))
        if isinstance(self.answer, Exception):
            raise self.answer
        assert args[0] == "config" and "--show-secrets" in args
        return json.dumps(self.answer)


REPORTS = {
    "ok": DoctorReport("site", (EnvironmentChecks("site", "hpc", (Check("ssh", Status.OK, "logged in"),)),)),
    "fail": DoctorReport(
        "site",
        (
            EnvironmentChecks(
                "site",
                "hpc",
                (Check("ssh", Status.OK, "logged in"), Check("queue", Status.FAIL, "no queue 'gpu'", "set it")),
            ),
        ),
    ),
}


def fake_doctor(report: DoctorReport, seen: list[tuple[StackConfig, Workload, Access]]) -> Any:
    def doctor(config: StackConfig, workload: Workload, access: Access) -> DoctorReport:
        seen.append((config, workload, access))
        return report

    return doctor


@pytest.mark.parametrize(("outcome", "code"), [("ok", 0), ("fail", 1)])
def test_exit_zero_when_every_check_passes_one_when_any_fails(
    outcome: str, code: int, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stack_files, "run_pulumi", FakePulumi(document({"site": SITE})))
    seen: list[tuple[StackConfig, Workload, Access]] = []
    monkeypatch.setattr(kinds, "doctor", fake_doctor(REPORTS[outcome], seen))
    monkeypatch.chdir(project)
    assert doctor_cli.main(["-s", "site", "--context", "p/api:6443/me"]) == code
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "ok   site  ssh: logged in (0.0 s)"
    if outcome == "fail":
        assert "FAIL site  queue: no queue 'gpu' (0.0 s); fix: set it" in out
    ((config, workload, access),) = seen
    assert config.stack == "site" and config.hpc[0].target.host == "login.example.org"
    assert workload.name == "probe"
    assert (access.kube_context, access.kube_context_key) == ("p/api:6443/me", "--context")


def test_json_is_one_object(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(stack_files, "run_pulumi", FakePulumi(document({"site": SITE})))
    monkeypatch.setattr(kinds, "doctor", fake_doctor(REPORTS["fail"], []))
    assert doctor_cli.main(["-s", "site", "-C", str(project), "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] is False and printed["stack"] == "site"
    assert printed["environments"]["site"]["checks"][1] == {
        "name": "queue", "status": "fail", "detail": "no queue 'gpu'", "fix": "set it", "seconds": 0.0
    }


@pytest.mark.parametrize(
    ("argv", "answer", "says"),
    [
        (
            ["-s", "site"],
            pulumi_cli.PulumiError("the Pulumi backend file:///gone cannot be reached (...); create the folder", "x"),
            "doctor: the Pulumi backend file:///gone cannot be reached (...); create the folder",
        ),
        (["-s", "site"], document({"site": {**SITE, "scheduler": "pbs"}}), "doctor: stack site's config: "),
        (["-s", "site"], document({"site": SITE}, workload="missing"), "doctor: stack site's config: atlas:workload"),
        (["-s", "site"], {}, "doctor: stack site declares no environment (no atlas: config)"),
    ],
)
def test_a_stack_that_cannot_be_read_is_one_line_and_exit_two(
    argv: list[str],
    answer: dict[str, Any] | Exception,
    says: str,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(stack_files, "run_pulumi", FakePulumi(answer))
    monkeypatch.setattr(kinds, "doctor", lambda *_a: pytest.fail("nothing is checked when the stack cannot be read"))
    monkeypatch.chdir(project)
    assert doctor_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count("\n") == 1, err


def test_without_a_stack_it_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        doctor_cli.main([])
    assert done.value.code == 2
    assert "give -s STACK (or --stack-file FILE)" in capsys.readouterr().err


def test_a_login_node_that_is_down_fails_the_ssh_check_and_skips_the_rest_through_the_router(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "id_rsa"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(key))
    host_key = paramiko.RSAKey.generate(1024)
    (project / "known_hosts").write_text(f"[127.0.0.1]:9 ssh-rsa {host_key.get_base64()}\n")
    # A port on this machine nothing answers on: a local stand-in, never `real` (infra/provenance.py).
    down = {**SITE, "host": "127.0.0.1", "port": 9, "known_hosts_file": "known_hosts", "private_key_file": str(key),
            "provenance": "local stand-in: nothing listens"}  # fmt: skip
    monkeypatch.setattr(stack_files, "run_pulumi", FakePulumi(document({"site": down})))
    monkeypatch.chdir(project)
    assert doctor_cli.main(["-s", "site"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FAIL site  ssh: cannot reach the login node alex@127.0.0.1:9: Connection refused")
    assert "; fix: check that it is up and reachable from here" in lines[0]
    assert lines[1:5] == [
        "skip site  scheduler: not checked (needs: ssh)",
        "skip site  queue: not checked (needs: scheduler)",
        "skip site  gpu-request: not checked (needs: queue)",
        "skip site  work-dir: not checked (needs: ssh)",
    ]
    assert lines[5].startswith("stack site: 1 environment(s), 0 ok, 1 failed, 4 skipped")
    assert str(key) not in "\n".join(lines[1:]) and "PRIVATE KEY" not in "\n".join(lines)
