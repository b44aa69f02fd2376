"""The language-runtime launcher passes upstream's executor arguments and environment."""

from __future__ import annotations

import json

from pulumi.runtime.proto import language_pb2

from infra.toolchain import language_host


def _request(**overrides) -> language_pb2.RunRequest:  # type: ignore[no-untyped-def]
    fields = {
        "project": "atlas", "stack": "local", "pwd": "/srv/atlas", "program": "stacks/",
        "config": {"atlas:workload": "probe"}, "configSecretKeys": ["atlas:sshKey"],
        "dryRun": True, "parallel": 16, "monitor_address": "127.0.0.1:4001", "organization": "",
        "info": language_pb2.ProgramInfo(root_directory="/srv/atlas", program_directory="/srv/atlas/stacks",
                                         entry_point="."),
    }
    fields.update(overrides)
    return language_pb2.RunRequest(**fields)


def test_executor_command_matches_upstream(monkeypatch):
    monkeypatch.setattr(language_host, "executor_path", lambda: "/bin/pulumi-language-python-exec")
    cmd = language_host.executor_command(_request(), "127.0.0.1:4002")
    assert cmd[1:5] == ["-u", "-m", "infra.toolchain.program_exec", "/bin/pulumi-language-python-exec"]
    flags = dict(zip(cmd[5:-1:2], cmd[6:-1:2], strict=True))
    assert flags == {
        "--monitor": "127.0.0.1:4001", "--engine": "127.0.0.1:4002", "--project": "atlas",
        "--root_directory": "/srv/atlas", "--stack": "local", "--pwd": "/srv/atlas", "--dry_run": "true",
        "--parallel": "16", "--organization": "organization",
    }
    assert cmd[-1] == "/srv/atlas/stacks/."


def test_config_and_secret_keys_travel_in_the_environment():
    env = language_host.executor_environment(_request())
    assert json.loads(env["PULUMI_CONFIG"]) == {"atlas:workload": "probe"}
    assert json.loads(env["PULUMI_CONFIG_SECRET_KEYS"]) == ["atlas:sshKey"]


def test_run_reports_exit_codes(monkeypatch):
    host = language_host.LanguageHost("127.0.0.1:1")
    monkeypatch.setattr(language_host, "executor_command", lambda req, eng: ["x"])
    cases = ((0, ("", False)), (32, ("", True)), (1, ("Program exited with non-zero exit code: 1", False)))
    for code, expected in cases:
        monkeypatch.setattr(language_host.subprocess, "call", lambda *a, code=code, **k: code)
        response = host.Run(_request(), None)
        assert (response.error, response.bail) == expected


def test_the_launcher_stops_when_its_engine_is_gone(monkeypatch):
    import threading

    parents = iter([100, 100, 1])
    monkeypatch.setattr(language_host.os, "getppid", lambda: next(parents, 1))
    stop = threading.Event()
    language_host._exit_with_parent(100, stop, interval_s=0.01)
    assert stop.is_set()


def test_the_program_runner_keeps_the_executors_exit_code_and_output(tmp_path):
    """program_exec runs a script as __main__ with its own argv and exits with its code, output
    flushed and atexit handlers run, though it skips the interpreter's teardown."""
    import subprocess
    import sys

    script = tmp_path / "executor"
    script.write_text(
        "import atexit, sys\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "print('name', __name__, 'argv', sys.argv[1:])\n"
        "sys.stdout.write('unflushed')\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    for code in (0, 32, 3):
        proc = subprocess.run(
            [sys.executable, "-m", "infra.toolchain.program_exec", str(script), str(code), "--x"],
            capture_output=True, text=True, check=False,
        )
        assert proc.returncode == code
        assert proc.stdout.splitlines() == [f"name __main__ argv ['{code}', '--x']", "unflushedatexit ran"]
