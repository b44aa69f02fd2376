"""The `atlas` command: one console script whose subcommands hand their arguments, untouched, to
today's entry points; `--help` at both levels; a missing extra named in one line."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import types

import pytest

from infra import cli
from infra.toolchain.pins import REPO_ROOT


@pytest.fixture(autouse=True)
def _own_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["atlas"])  # main() names the command in argv[0]


def test_the_console_script_is_the_dispatcher() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"atlas": "infra.cli:main"}


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    listing = capsys.readouterr().out
    for name in ("compare", "monitor", "nodes", "doctor", "sif-cache", "workload"):
        # argparse puts a long name's summary on the next line.
        assert re.search(rf"^    {name}\s", listing, re.M), name
    assert set(cli.SUBCOMMANDS) == {"compare", "monitor", "nodes", "doctor", "sif-cache", "workload"}


@pytest.mark.parametrize(("name", "usage"), [
    ("compare", "usage: atlas compare"), ("monitor", "usage: atlas monitor"), ("nodes", "usage: atlas nodes"),
    ("doctor", "usage: atlas doctor"), ("workload", "usage: atlas workload"), ("sif-cache", "usage: atlas sif-cache"),
])
def test_a_subcommands_help_is_its_own(name: str, usage: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(usage)


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_each_subcommand_hands_its_arguments_to_its_module(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    fake = types.SimpleNamespace(main=lambda argv: seen.append(list(argv)) or 7)
    monkeypatch.setitem(sys.modules, cli.SUBCOMMANDS[name].module, fake)
    assert cli.main([name, "-s", "local", "--", "--help"]) == 7
    assert seen == [["-s", "local", "--", "--help"]]


@pytest.mark.parametrize("argv", [[], ["bogus"], ["--bogus"]])
def test_no_or_an_unknown_command_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2
    assert "usage: atlas" in capsys.readouterr().err


def test_a_workload_check_runs_through_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["workload", "check", str(REPO_ROOT / "workloads" / "wordfreq"), "--quiet"]) == 0
    assert "workload 'wordfreq': 3 steps" in capsys.readouterr().out


def test_a_missing_extra_is_named_in_one_line() -> None:
    # None in sys.modules makes `import rich` fail as if it were not installed.
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['rich'] = None\nfrom infra.cli import main\n"
         "sys.exit(main(['monitor', '--help']))"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "atlas: atlas monitor needs the `report` extra (rich is not installed): pip install 'atlas-infra[report]'"
    )


def test_the_scripts_call_the_atlas_command() -> None:
    for name in ("compare", "monitor", "nodes", "workload"):
        assert f"-m infra.cli {name} \"$@\"" in (REPO_ROOT / "scripts" / name).read_text()
