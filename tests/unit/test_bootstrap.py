"""scripts/bootstrap's bookkeeping: a step is trusted only when it finished whole, a changed
pin rebuilds only the steps built from it, and downloads run ahead of compiles."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from infra.toolchain import bootstrap, go
from infra.toolchain.pins import REPO_ROOT, load_pins
from infra.toolchain.progress import Progress
from infra.toolchain.store import BuildStep, Toolchain
from infra.toolchain.tools import BINARY_STEPS


def _step(fetch, compile=None, name: str = "demo", sections=("kwok",)) -> BuildStep:  # type: ignore[no-untyped-def]
    return BuildStep(name, ("tool-a", "tool-b"), "two demo binaries", sections, fetch, compile)


def _writes_both(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
    for name in ("tool-a", "tool-b"):
        (out / name).write_text("#!/bin/sh\n")


def _nothing(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
    pass


def test_a_finished_step_is_stamped_linked_and_skipped(tmp_path: Path):
    toolchain = Toolchain(tmp_path, load_pins())
    step = _step(_nothing, _writes_both)
    assert not bootstrap.step_done(step, toolchain)
    bootstrap.run_step(step, toolchain, Progress(1))
    assert bootstrap.step_done(step, toolchain)
    assert (toolchain.bin / "tool-a").resolve() == toolchain.store(step) / "tool-a"
    assert (toolchain.bin / "tool-a").read_text() == "#!/bin/sh\n"
    # A binary removed by hand makes the step undone again.
    (toolchain.store(step) / "tool-b").unlink()
    assert not bootstrap.step_done(step, toolchain)


def test_a_failed_step_leaves_nothing_trusted(tmp_path: Path):
    toolchain = Toolchain(tmp_path, load_pins())

    def compile_half(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        (out / "tool-a").write_text("half")
        raise go.BuildStepFailed("compiler exploded")

    step = _step(_nothing, compile_half)
    with pytest.raises(go.BuildStepFailed, match="compiler exploded"):
        bootstrap.run_step(step, toolchain, Progress(1))
    assert not toolchain.store(step).exists()
    assert not (toolchain.bin / "tool-a").exists()
    assert not bootstrap.step_done(step, toolchain)
    assert list((tmp_path / "work").iterdir()) == []


def test_a_failed_fetch_fails_its_step_and_no_later_one_is_built(tmp_path: Path):
    toolchain = Toolchain(tmp_path, load_pins())

    def fetch_fails(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        raise go.BuildStepFailed("proxy said 403")

    first = _step(fetch_fails, _writes_both, name="first")
    second = _step(_nothing, _writes_both, name="second")
    with pytest.raises(go.BuildStepFailed, match="403"):
        bootstrap.build_steps([first, second], toolchain, Progress(2))
    assert not bootstrap.step_done(first, toolchain)
    assert not bootstrap.step_done(second, toolchain)
    assert list((tmp_path / "work").iterdir()) == []


def test_a_step_missing_an_output_fails(tmp_path: Path):
    def only_one(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        (out / "tool-a").write_text("only one")

    toolchain = Toolchain(tmp_path, load_pins())
    with pytest.raises(go.BuildStepFailed, match="did not produce tool-b"):
        bootstrap.run_step(_step(_nothing, only_one), toolchain, Progress(1))
    assert not (toolchain.bin / "tool-a").exists()


def test_the_next_steps_download_runs_while_this_one_compiles(tmp_path: Path):
    """The fetch stage of step 2 starts before step 1's compile has finished: step 1's compile
    waits for that event (and would fail after 10 s without it)."""
    toolchain = Toolchain(tmp_path, load_pins())
    second_fetching = threading.Event()

    def compile_first(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        assert second_fetching.wait(10), "step 2 was not fetched while step 1 compiled"
        _writes_both(pins, scratch, out, progress)

    def fetch_second(pins, scratch, out, progress):  # type: ignore[no-untyped-def]
        second_fetching.set()

    first = _step(_nothing, compile_first, name="first")
    second = _step(fetch_second, _writes_both, name="second")
    bootstrap.build_steps([first, second], toolchain, Progress(2))
    assert bootstrap.step_done(first, toolchain) and bootstrap.step_done(second, toolchain)


def test_a_changed_pin_rebuilds_only_the_steps_built_from_it(tmp_path: Path):
    text = (REPO_ROOT / "toolchain" / "pins.toml").read_text()
    other = tmp_path / "pins.toml"
    other.write_text(text.replace('version = "1.36.3"', 'version = "1.36.1"') + "\n# a comment\n")
    old, new = load_pins(), load_pins(other)
    keys = {s.name: (s.key(old), s.key(new)) for s in BINARY_STEPS}
    changed = {name for name, (a, b) in keys.items() if a != b}
    assert changed == {"kubernetes", "pause"}  # pause.c comes from the Kubernetes module
    # The toolchain's bin/ is a new folder, the unchanged steps' builds are shared.
    assert Toolchain(tmp_path, old).bin != Toolchain(tmp_path, new).bin
    etcd = next(s for s in BINARY_STEPS if s.name == "etcd")
    assert Toolchain(tmp_path, old).store(etcd) == Toolchain(tmp_path, new).store(etcd)


def test_run_raises_with_command_exit_code_and_errors():
    with pytest.raises(go.BuildStepFailed) as err:
        go.run(["sh", "-c", "echo compiling; echo 'x.go:3:1: undefined: y' >&2; exit 3"])
    text = str(err.value)
    assert "exit 3" in text and "sh -c" in text
    assert "x.go:3:1: undefined: y" in text


def test_heartbeat_reports_long_commands(monkeypatch):
    lines: list[str] = []
    progress = Progress(1)
    monkeypatch.setattr(progress, "say", lines.append)
    monkeypatch.setattr(go, "HEARTBEAT_S", 0.05)
    start = time.monotonic()
    go.run(["sleep", "0.3"], progress=progress, label="sleeper")
    assert time.monotonic() - start >= 0.3
    assert any("sleeper: still running" in line for line in lines)


def test_wrapper_go_mod_pins_requires_and_replaces(tmp_path: Path):
    go.write_wrapper(tmp_path, "t", {"example.com/b": "v1.0.0", "example.com/a": "v2.0.0"},
                     {"example.com/c": "./stubs/example.com/c"})
    text = (tmp_path / "go.mod").read_text()
    assert text.index("example.com/a v2.0.0") < text.index("example.com/b v1.0.0")
    assert "replace example.com/c => ./stubs/example.com/c" in text
