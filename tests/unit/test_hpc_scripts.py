"""Job scripts rendered for LSF and Slurm, pinned by golden files (tests/unit/golden/).

Regenerate after an intended change: ATLAS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_hpc_scripts.py
and review the diff like code.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.hpc.job_script import render_job_script
from infra.hpc.lsf import LsfScheduler
from infra.hpc.registry import SCHEDULER_CLASSES, scheduler_for
from infra.hpc.scheduler import NO_SITE_DIRECTIVES, JobSpec, SiteDirectives, directive_value
from infra.hpc.slurm import SlurmScheduler
from infra.hpc.target_parser import parse_hpc_target
from infra.toolchain.pins import REPO_ROOT
from infra.workload.load import load_workload
from infra.workload.render import render_step

GOLDEN = Path(__file__).parent / "golden"
BIGGAN = load_workload(REPO_ROOT / "workloads" / "biggan" / "workload.yaml")


def spec_for(
    step: str, environment: str, queue: str | None = "normal", site: SiteDirectives = NO_SITE_DIRECTIVES
) -> JobSpec:
    rendered = render_step(BIGGAN, step, environment)
    return JobSpec(
        job_name=f"atlas-{step}-0123456789",
        step=step,
        workdir="atlas-runs/satori/biggan",
        log_dir=BIGGAN.logs.root,
        command=rendered.argv,
        env=rendered.env,
        nodes=rendered.resources.nodes,
        gpus_per_node=rendered.resources.gpus_per_node,
        cpus_per_task=rendered.resources.cpus_per_task,
        memory_mib=rendered.resources.memory_mib,
        walltime_seconds=rendered.resources.walltime_seconds,
        queue=queue,
        telemetry_out=f"{BIGGAN.telemetry.root}/{step}.jsonl",
        telemetry_interval_s=BIGGAN.telemetry.interval_seconds,
        python_path=".atlas/python",
        description=BIGGAN.step(step).description,
        site=site,
    )


CASES = [
    ("biggan-train", "lsf", "satori", "train"),
    ("biggan-make-hdf5", "lsf", "satori", "make-hdf5"),
    ("biggan-train", "slurm", "satori-slurm", "train"),
    ("biggan-inception-moments", "slurm", "satori-slurm", "inception-moments"),
]


@pytest.mark.parametrize(("golden", "scheduler", "environment", "step"), CASES)
def test_scripts_match_golden_files(golden: str, scheduler: str, environment: str, step: str) -> None:
    sched = scheduler_for(scheduler)
    script = render_job_script(sched, spec_for(step, environment))
    path = GOLDEN / f"{golden}{sched.script_suffix}"
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        path.write_text(script)
    assert script == path.read_text(), f"{path} differs; if intended, regenerate (see module docstring)"


def test_lsf_script_reads_as_satori_wrote_it() -> None:
    script = render_job_script(LsfScheduler(), spec_for("train", "satori"))
    lines = script.splitlines()
    directives = [line for line in lines if line.startswith("#BSUB")]
    assert directives == sorted(directives)
    for expected in (
        "#BSUB -L /bin/bash",
        "#BSUB -J atlas-train-0123456789",
        "#BSUB -o logs/train.%J",
        "#BSUB -n 1",
        '#BSUB -gpu "num=2"',
        "#BSUB -q normal",
        "#BSUB -W 24:00",
    ):
        assert expected in directives
    assert '#BSUB -R "rusage[mem=131072] span[ptile=1]"' in directives
    # Satori's override reaches the job, quoted.
    assert "export NCCL_SOCKET_IFNAME=ib" in lines and "export PAMI_IBV_ADAPTER_AFFINITY=0" in lines


def test_slurm_script_directives() -> None:
    script = render_job_script(SlurmScheduler(), spec_for("train", "satori-slurm", queue="debug"))
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == sorted(directives)
    assert "#SBATCH --gres=gpu:2" in directives and "#SBATCH --partition=debug" in directives
    assert "#SBATCH --time=1-00:00:00" in directives  # 24 h, in Slurm's days-hours form
    assert "#SBATCH --ntasks-per-node=1" in directives and "#SBATCH --cpus-per-task=16" in directives


def test_hostile_arguments_reach_the_job_as_plain_words(tmp_path: Path) -> None:
    """Every token is quoted: bash, running the script, sees the exact words, expands nothing."""
    hostile = ("$(touch pwned)", "`touch pwned2`", "a; rm -rf ~", "it's", 'say "hi"', "*", "$HOME", "\\n")
    spec = JobSpec(
        job_name="atlas-x-0123456789",
        step="x",
        workdir=str(tmp_path),
        log_dir="logs",
        command=("printf", "%s\\n", *hostile),
        env=(("X", "$(touch pwned3)"),),
    )
    for sched in (LsfScheduler(), SlurmScheduler()):
        script = render_job_script(sched, spec)
        result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
        assert result.stdout.splitlines() == list(hostile)
        assert not list(tmp_path.glob("pwned*"))


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("normal", "normal"),
        ("span[ptile=1]", '"span[ptile=1]"'),
        ("num=2", '"num=2"'),
        ("logs/train.%J", "logs/train.%J"),
        ("a b", '"a b"'),
        ("$(x)", "'$(x)'"),
        ('say "hi"', "'say \"hi\"'"),
    ],
)
def test_directive_values_are_quoted_like_hand_written_ones(value: str, written: str) -> None:
    assert directive_value(value) == written
    assert shlex.split(written) == [value]


def test_relative_run_directories_are_under_home_and_absolute_ones_are_kept() -> None:
    base = JobSpec(job_name="atlas-x-0123456789", step="x", workdir="runs/a", log_dir="logs", command=("true",))
    assert 'cd -- "$HOME"/runs/a || exit 1' in render_job_script(SlurmScheduler(), base)
    absolute = JobSpec(
        job_name="atlas-x-0123456789", step="x", workdir="/scratch/a b", log_dir="logs", command=("true",)
    )
    assert "cd -- '/scratch/a b' || exit 1" in render_job_script(SlurmScheduler(), absolute)


def test_lsf_memory_follows_the_clusters_unit() -> None:
    spec = JobSpec(
        job_name="atlas-x-0123456789", step="x", workdir="r", log_dir="logs", command=("true",), memory_mib=2048
    )
    assert "#BSUB -M 2048" in render_job_script(LsfScheduler("MB"), spec)
    assert "#BSUB -M 2097152" in render_job_script(LsfScheduler("KB"), spec)
    assert "#BSUB -M 2" in render_job_script(LsfScheduler("GB"), spec)


def test_telemetry_wraps_the_command() -> None:
    script = render_job_script(SlurmScheduler(), spec_for("train", "satori-slurm"))
    last = shlex.split(script.splitlines()[-1])
    assert last[:9] == [
        "python3",
        "-m",
        "infra.telemetry.sampler",
        "--out",
        "telemetry/train.jsonl",
        "--interval",
        "5",
        "--step",
        "train",
    ]
    assert last[9] == "--" and last[10:12] == ["python", "main.py"]
    assert 'export PYTHONPATH="$PWD"/.atlas/python"${PYTHONPATH:+:$PYTHONPATH}"' in script


KNOWN_HOSTS = "login ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=\n"
# What a site writes in its `atlas:hpc.<name>` section, per scheduler: the values travel from
# config through HpcTarget.directives into the rendered script.
SITE_CONFIG = {
    "lsf": {
        "account": "mit-satori-ml",
        "extra_directives": ['-R "select[gpu_model0==TeslaV100_SXM2_32GB]"', "-x", "-app gpu_app"],
        "skip_directives": ["-L"],
    },
    "slurm": {
        "account": "ml-lab",
        "extra_directives": ["--qos=high", '--constraint="v100|a100"', "--exclusive"],
        "skip_directives": ["--ntasks", "--mem"],
    },
}
SITE_CASES = [
    ("biggan-train-site", "lsf", "satori", "train"),
    ("biggan-train-site", "slurm", "satori-slurm", "train"),
]


def site_directives(scheduler: str) -> SiteDirectives:
    raw = {"host": "login", "user": "alex", "scheduler": scheduler, "known_hosts": KNOWN_HOSTS, "private_key_file": "k"}
    return parse_hpc_target({**raw, **SITE_CONFIG[scheduler]}, "atlas:hpc.site").directives


@pytest.mark.parametrize(("golden", "scheduler", "environment", "step"), SITE_CASES)
def test_a_sites_account_and_directives_reach_the_script(
    golden: str, scheduler: str, environment: str, step: str
) -> None:
    sched = scheduler_for(scheduler)
    script = render_job_script(sched, spec_for(step, environment, site=site_directives(scheduler)))
    path = GOLDEN / f"{golden}{sched.script_suffix}"
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        path.write_text(script)
    assert script == path.read_text(), f"{path} differs; if intended, regenerate (see module docstring)"


def test_site_directives_come_after_atlas_own_and_skips_leave_out_only_atlas_own() -> None:
    site = SiteDirectives(account="ml", extra=("--mem=10G", "--qos=high"), skip=("--mem",))
    lines = render_job_script(SlurmScheduler(), spec_for("train", "satori-slurm", site=site)).splitlines()
    directives = [line for line in lines if line.startswith("#SBATCH")]
    own = directives[:-2]
    assert own == sorted(own) and "#SBATCH --account=ml" in own
    assert not any(line.startswith("#SBATCH --mem=") for line in own)  # skipped
    assert directives[-2:] == ["#SBATCH --mem=10G", "#SBATCH --qos=high"]  # extras are never skipped
    # Directives end before the first command: sbatch and bsub stop reading them there.
    assert lines.index(directives[-1]) < min(i for i, line in enumerate(lines) if line.startswith("cd -- "))


def test_without_site_directives_the_script_is_unchanged() -> None:
    plain = render_job_script(LsfScheduler(), spec_for("train", "satori"))
    assert plain == render_job_script(LsfScheduler(), spec_for("train", "satori", site=SiteDirectives()))
    assert "-P" not in {line.split()[1] for line in plain.splitlines() if line.startswith("#BSUB")}


@pytest.mark.parametrize("scheduler", sorted(SCHEDULER_CLASSES))
def test_rendered_options_name_every_option_a_scheduler_writes(scheduler: str) -> None:
    """Skip entries are checked against `rendered_options`: it must list every option rendered."""
    cls = SCHEDULER_CLASSES[scheduler]
    spec = spec_for("train", "satori", site=SiteDirectives(account="ml"))
    written = {line.split()[1].split("=")[0] for line in cls().directive_lines(spec)}
    assert written == set(cls.rendered_options)
    assert cls.account_option in cls.rendered_options


@pulumi.runtime.test
def test_a_targets_directives_reach_the_staged_and_submitted_scripts() -> Any:
    """Config -> HpcTarget -> HpcEnvironment -> step_scripts -> the script StagedFiles and BatchJob carry."""
    from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs
    from tests.unit.test_hpc_providers import Mocks

    mocks = Mocks()
    pulumi.runtime.set_mocks(mocks, preview=False)
    raw = {"host": "login", "user": "alex", "scheduler": "slurm", "known_hosts": KNOWN_HOSTS, "private_key_file": "k"}
    target = parse_hpc_target({**raw, **SITE_CONFIG["slurm"]}, "atlas:hpc.site")
    probe = load_workload(REPO_ROOT / "workloads" / "probe" / "workload.yaml")
    env = HpcEnvironment("site", HpcEnvironmentArgs(target=target, workload=probe, environment="site", stack="unit"))

    def check(_: Any) -> None:
        jobs = [r for r in mocks.resources if r.typ.endswith("BatchJob")]
        staged = next(r for r in mocks.resources if r.typ.endswith("StagedFiles"))
        scripts = [f["content"] for f in staged.inputs["files"] if f["path"].endswith(".sbatch")]
        assert jobs and sorted(j.inputs["script"] for j in jobs) == sorted(scripts)
        for script in scripts:
            lines = script.splitlines()
            assert "#SBATCH --account=ml-lab" in lines
            assert [line for line in lines if line.startswith("#SBATCH")][-3:] == [
                "#SBATCH --qos=high",
                '#SBATCH --constraint="v100|a100"',
                "#SBATCH --exclusive",
            ]
            assert not any(line.startswith(("#SBATCH --mem", "#SBATCH --ntasks")) for line in lines)

    return env.outputs.apply(check)


def test_an_unchecked_extra_directive_with_a_line_break_is_refused_when_rendering() -> None:
    site = SiteDirectives(extra=("--qos=high\ntouch pwned",))
    with pytest.raises(ValueError, match="one printable line"):
        render_job_script(SlurmScheduler(), spec_for("train", "satori-slurm", site=site))
