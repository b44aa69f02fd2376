"""scripts/bootstrap's bookkeeping: a step is trusted only when it finished whole."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from infra.toolchain import bootstrap
from infra.toolchain.pins import load_pins


def _step(build) -> bootstrap.Step:  # type: ignore[no-untyped-def]
    return bootstrap.Step("demo", ("tool-a", "tool-b"), "two demo binaries", build)


def test_a_finished_step_is_stamped_and_skipped(tmp_path: Path):
    pins = load_pins()

    def build(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        for name in ("tool-a", "tool-b"):
            (out / name).write_text("#!/bin/sh\n")

    step = _step(build)
    assert not bootstrap.step_done(step, pins, tmp_path / "bin")
    bootstrap.run_step(step, pins, tmp_path, bootstrap.Progress(1))
    assert bootstrap.step_done(step, pins, tmp_path / "bin")
    # A binary removed by hand makes the step undone again.
    (tmp_path / "bin" / "tool-b").unlink()
    assert not bootstrap.step_done(step, pins, tmp_path / "bin")


def test_a_failed_step_leaves_nothing_trusted(tmp_path: Path):
    pins = load_pins()

    def build(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        (out / "tool-a").write_text("half")
        raise bootstrap.StepFailed("compiler exploded")

    with pytest.raises(bootstrap.StepFailed):
        bootstrap.run_step(_step(build), pins, tmp_path, bootstrap.Progress(1))
    assert not (tmp_path / "bin" / "tool-a").exists()
    assert not bootstrap.step_done(_step(build), pins, tmp_path / "bin")
    assert list((tmp_path / "work").iterdir()) == []


def test_a_step_missing_an_output_fails(tmp_path: Path):
    def build(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        (out / "tool-a").write_text("only one")

    with pytest.raises(bootstrap.StepFailed, match="did not produce tool-b"):
        bootstrap.run_step(_step(build), load_pins(), tmp_path, bootstrap.Progress(1))
    assert not (tmp_path / "bin" / "tool-a").exists()


def test_run_raises_with_command_exit_code_and_errors():
    with pytest.raises(bootstrap.StepFailed) as err:
        bootstrap.run(["sh", "-c", "echo compiling; echo 'x.go:3:1: undefined: y' >&2; exit 3"])
    text = str(err.value)
    assert "exit 3" in text and "sh -c" in text
    assert "x.go:3:1: undefined: y" in text


def test_heartbeat_reports_long_commands(monkeypatch):
    lines: list[str] = []
    progress = bootstrap.Progress(1)
    monkeypatch.setattr(progress, "say", lines.append)
    monkeypatch.setattr(bootstrap, "HEARTBEAT_S", 0.05)
    start = time.monotonic()
    bootstrap.run(["sleep", "0.3"], progress=progress, label="sleeper")
    assert time.monotonic() - start >= 0.3
    assert any("sleeper: still running" in line for line in lines)


def test_wrapper_go_mod_pins_requires_and_replaces(tmp_path: Path):
    bootstrap.write_wrapper(tmp_path, "t", {"example.com/b": "v1.0.0", "example.com/a": "v2.0.0"},
                            {"example.com/c": "./stubs/example.com/c"})
    text = (tmp_path / "go.mod").read_text()
    assert text.index("example.com/a v2.0.0") < text.index("example.com/b v1.0.0")
    assert "replace example.com/c => ./stubs/example.com/c" in text
