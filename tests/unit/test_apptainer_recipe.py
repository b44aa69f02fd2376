"""The Apptainer step: optional (a plain bootstrap does not build it), keyed by its own pin, and
its source made acceptable to mconfig (a VERSION file, the scripts' exec bits)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from infra.toolchain import apptainer, bootstrap
from infra.toolchain.go import BuildStepFailed
from infra.toolchain.pins import BUILT_SECTIONS, load_pins
from infra.toolchain.progress import Progress
from infra.toolchain.tools import BINARY_STEPS, OPTIONAL_STEPS


def test_apptainer_is_pinned_and_optional():
    pins = load_pins()
    assert pins.apptainer == "1.4.0"
    assert [s.name for s in OPTIONAL_STEPS] == ["apptainer"]
    assert "apptainer" not in {s.name for s in BINARY_STEPS}
    # Its pin moves its own step only, not every tool's bin/ folder.
    assert "apptainer" not in BUILT_SECTIONS
    assert OPTIONAL_STEPS[0].sections == ("apptainer",)


def test_the_prefix_is_in_the_cache_and_keyed_by_the_pin(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("ATLAS_CACHE", str(tmp_path))
    prefix = apptainer.apptainer_prefix(load_pins())
    assert prefix.parent == tmp_path / "toolchain" / "apptainer"
    assert prefix.name.startswith("1.4.0-")


def test_the_module_source_is_made_buildable(tmp_path: Path):
    module = tmp_path / "module"
    (module / "scripts").mkdir(parents=True)
    (module / "mconfig").write_text("#!/bin/sh\necho hi\n")
    (module / "scripts" / "get-version").write_text("#!/bin/sh\n")
    (module / "go.mod").write_text("module github.com/apptainer/apptainer\n")
    for path in (module / "mconfig", module / "scripts" / "get-version", module / "go.mod"):
        path.chmod(0o444)  # as in the read-only module cache, without exec bits
    (module / "scripts").chmod(0o555)
    tree = apptainer.prepare_source(module, tmp_path / "src", "1.4.0")
    assert (tree / "VERSION").read_text() == "1.4.0\n"
    assert os.access(tree / "mconfig", os.X_OK)
    assert os.access(tree / "scripts" / "get-version", os.X_OK)
    assert not (tree / "go.mod").stat().st_mode & stat.S_IXUSR
    assert os.access(tree / "go.mod", os.W_OK)
    (module / "scripts").chmod(0o755)


def test_missing_packages_without_root_name_the_install_command(monkeypatch):
    monkeypatch.setattr(apptainer, "missing_packages", lambda packages: ["libseccomp-dev"])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(BuildStepFailed, match="sudo apt-get install -y --no-install-recommends libseccomp-dev"):
        apptainer.ensure_packages(("libseccomp-dev", "gcc"), Progress(1))


def test_nothing_to_install_touches_no_apt(monkeypatch):
    monkeypatch.setattr(apptainer, "missing_packages", lambda packages: [])

    def no_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("apt-get must not run")

    monkeypatch.setattr(apptainer, "run", no_run)
    assert apptainer.ensure_packages(apptainer.BUILD_PACKAGES, Progress(1)) == []


def _steps_built(monkeypatch, tmp_path: Path, argv: list[str]) -> list[str]:
    """The steps `scripts/bootstrap <argv>` would build into an empty cache (nothing is built)."""
    monkeypatch.setenv("ATLAS_CACHE", str(tmp_path))
    monkeypatch.delenv("ATLAS_BOOTSTRAP_WITH", raising=False)
    built: list[str] = []
    monkeypatch.setattr(bootstrap, "build_steps", lambda steps, *a, **k: built.extend(s.name for s in steps))
    monkeypatch.setattr(bootstrap, "check_go", lambda: "go version go1.26.8")
    for name in ("build_venv", "compile_project_bytecode", "link_program_venv"):
        monkeypatch.setattr(bootstrap, name, lambda *a, **k: None)
    assert bootstrap.main(argv) == 0
    return built


def test_a_plain_bootstrap_leaves_apptainer_out_and_with_builds_it(monkeypatch, tmp_path: Path):
    assert _steps_built(monkeypatch, tmp_path, []) == [s.name for s in BINARY_STEPS]
    assert _steps_built(monkeypatch, tmp_path, ["--only", "kwok", "--with", "apptainer"]) == ["kwok", "apptainer"]
    assert _steps_built(monkeypatch, tmp_path, ["--only", "apptainer"]) == ["apptainer"]


def test_an_unknown_optional_step_is_refused(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        bootstrap.main(["--with", "singularity"])
    assert "unknown optional step" in capsys.readouterr().err


def test_the_build_has_cgo_and_a_go_build_cache_of_its_own(tmp_path: Path):
    # Apptainer's Makefile runs `go clean -cache`: it must not empty the shared cache.
    env = apptainer.build_env(tmp_path)
    assert env["CGO_ENABLED"] == "1"
    assert env["GOCACHE"] == str(tmp_path / "gocache")
    assert "-mod=mod" not in env["GOFLAGS"]
