"""bench/hpc_sweep.py's pure parts: which sides each scheduler has, the submitit side's commands and
output, the summary (a side not measured is named with its reason and is in no figure), and the shell
that installs submitit for the login user, run here against stand-in pythons."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from bench import hpc_sweep
from infra.hpc.registry import scheduler_for
from localenv import satori


@pytest.mark.parametrize(
    ("scheduler", "sides", "not_measured"),
    [
        ("slurm", ("atlas", "ssh-mux", "array", "submitit", "ssh-fresh"), {}),
        ("lsf", ("atlas", "ssh-mux", "array", "ssh-fresh"), {"submitit": "submitit has no LSF executor"}),
    ],
)
def test_each_scheduler_has_its_sides(scheduler: str, sides: tuple[str, ...], not_measured: dict[str, str]) -> None:
    assert hpc_sweep.sides_for(scheduler) == sides
    assert hpc_sweep.NOT_MEASURED[scheduler] == not_measured


@pytest.mark.parametrize(
    ("stdout", "ids"),
    [
        ("submitit 1.5.4\n12_0\n12_1\n12_2\n", ["12_0", "12_1", "12_2"]),
        # --wait's `ok` lines and submitit's warnings are not ids.
        ("submitit 1.5.4\n7_0\n7_1\nok 7_0\nok 7_1\n", ["7_0", "7_1"]),
        ("submitit WARNING - Bypassing sacct error\n3_0\n", ["3_0"]),
        ("  9_10  \n", ["9_10"]),
        # A plain job id or an LSF-style array index is not what map_array prints.
        ("12\n12[1]\n", []),
        ("", []),
    ],
)
def test_submitit_ids_are_read_from_the_drivers_output(stdout: str, ids: list[str]) -> None:
    assert hpc_sweep.parse_submitit_ids(stdout) == ids


@pytest.mark.parametrize(
    ("jobs", "wait", "expected"),
    [
        (
            50,
            False,
            'cd -- atlas-bench/sweep && "$HOME"/.venvs/atlas-bench-submitit/bin/python submitit_sweep.py '
            "--jobs=50 --script=.atlas/jobs/sweep.sbatch --name=atlas-bench-sweep",
        ),
        (
            2,
            True,
            'cd -- atlas-bench/sweep && "$HOME"/.venvs/atlas-bench-submitit/bin/python submitit_sweep.py '
            "--jobs=2 --script=.atlas/jobs/sweep.sbatch --name=atlas-bench-sweep --wait",
        ),
    ],
)
def test_the_submitit_side_runs_the_staged_script_the_other_sides_submit(jobs: int, wait: bool, expected: str) -> None:
    command = hpc_sweep.submitit_command(scheduler_for("slurm"), jobs, wait)
    assert command == expected
    assert hpc_sweep.script_path(scheduler_for("slurm")) in command


def _samples(seconds: dict[str, list[float]]) -> list[dict[str, object]]:
    return [
        {"round": r, "side": side, "seconds": s, "logins": 1}
        for side, values in seconds.items()
        for r, s in enumerate(values)
    ]


def test_the_lsf_summary_names_submitit_as_not_measured_and_gives_it_no_figure() -> None:
    seconds = {"atlas": [2.0, 2.0], "ssh-mux": [1.0, 3.0], "array": [0.5, 0.5], "ssh-fresh": [8.0, 6.0]}
    summary = hpc_sweep.summarise(_samples(seconds), "lsf", jobs=50, rounds=2)
    assert summary["not_measured"] == {"submitit": "not measured: submitit has no LSF executor"}
    assert summary["sides"] == ["atlas", "ssh-mux", "array", "ssh-fresh"]
    for key in ("median_s", "per_job_median_ms", "logins_per_sweep", "baseline_over_atlas"):
        assert "submitit" not in summary[key], key
    assert summary["baseline_over_atlas"]["ssh-fresh"]["pairs"] == [4.0, 3.0]


def test_the_slurm_summary_pairs_submitit_with_atlas_round_by_round() -> None:
    seconds = {
        "atlas": [1.0, 2.0, 1.0],
        "ssh-mux": [1.0, 1.0, 1.0],
        "array": [0.2, 0.2, 0.2],
        "submitit": [0.5, 0.5, 2.0],
        "ssh-fresh": [10.0, 10.0, 10.0],
    }
    summary = hpc_sweep.summarise(_samples(seconds), "slurm", jobs=50, rounds=3)
    assert summary["not_measured"] == {}
    assert summary["baseline_over_atlas"]["submitit"]["pairs"] == [0.5, 0.25, 2.0]
    assert summary["baseline_over_atlas"]["submitit"]["median"] == 0.5
    assert summary["median_s"]["submitit"] == 0.5
    assert summary["per_job_median_ms"]["submitit"] == 10.0
    assert "atlas" not in summary["baseline_over_atlas"]


def test_the_login_node_requirements_pin_every_file_by_version_and_hash() -> None:
    text = hpc_sweep.SUBMITIT_REQUIREMENTS.read_text()
    requirements = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})$", text, re.M)
    names = {name for name, _, _ in requirements}
    assert {"submitit", "cloudpickle", "typing-extensions"} <= names
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 2 * len(requirements), "every requirement line is `name==version \\` plus its hash"


# --- the setup shell, with stand-ins for the system python and pip --------------------------------

STAND_IN_PYTHON = """#!/bin/bash
# Stands in for {system} -m venv DIR: writes DIR/bin/python, which logs pip calls and answers the probe.
log={log}
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin"
    cat > "$3/bin/python" <<'INNER'
#!/bin/bash
if [ "$1" = -m ] && [ "$2" = pip ]; then echo "pip $*" >> {log}; exit ${{PIP_EXIT:-0}}; fi
echo "1.5.4 3.11.2"
INNER
    chmod +x "$3/bin/python"
    echo "venv $3" >> "$log"
fi
"""


def _run_setup(home: Path, system_python: Path, sha: str, pip_exit: int = 0) -> subprocess.CompletedProcess[str]:
    command = hpc_sweep.submitit_setup_command(sha)
    return subprocess.run(
        ["bash", "-c", command],
        cwd=home,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "PIP_EXIT": str(pip_exit)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def login_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "calls.log"
    system = tmp_path / "python3"
    system.write_text(STAND_IN_PYTHON.format(system=system, log=log))
    system.chmod(0o755)
    monkeypatch.setattr(satori, "SYSTEM_PYTHON", str(system))
    return home, system, log


@pytest.mark.parametrize(
    ("stamp", "pip_exit", "rc", "builds", "stamp_after"),
    [
        # First run: no venv yet; it is built, pip installs the hashed requirements, the stamp is written.
        (None, 0, 0, True, "new"),
        # Built from these requirements before: nothing is installed again.
        ("new", 0, 0, False, "new"),
        # Built from other requirements: rebuilt.
        ("old", 0, 0, True, "new"),
        # pip fails (a hash mismatch, no network): the setup fails and leaves no stamp to trust.
        (None, 1, 1, True, None),
    ],
)
def test_the_setup_installs_submitit_only_when_the_requirements_changed(
    login_home: tuple[Path, Path, Path],
    stamp: str | None,
    pip_exit: int,
    rc: int,
    builds: bool,
    stamp_after: str | None,
) -> None:
    home, system, log = login_home
    sha = {name: hashlib.sha256(name.encode()).hexdigest() for name in ("new", "old")}
    venv = home / hpc_sweep.SUBMITIT_VENV
    stamp_file = venv / ".atlas-requirements-sha256"
    if stamp is not None:
        subprocess.run([str(system), "-m", "venv", str(venv)], check=True, timeout=30)
        log.unlink()
        stamp_file.write_text(sha[stamp] + "\n")
    result = _run_setup(home, system, sha["new"], pip_exit)
    assert result.returncode == rc, result.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    if builds:
        assert calls[0] == f"venv {venv}"
        assert calls[1] == (
            "pip -m pip install --disable-pip-version-check -q --require-hashes "
            "-r atlas-bench/sweep/requirements-login-node.txt"
        )
    else:
        assert calls == []
    if stamp_after is None:
        assert not stamp_file.exists()
    else:
        assert stamp_file.read_text().strip() == sha[stamp_after]
        assert result.stdout.strip().splitlines()[-1] == "1.5.4 3.11.2"
