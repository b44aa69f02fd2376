"""infra.hpc.registry: the one list of schedulers; an unknown name is an error wherever it is asked."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from infra.errors import AtlasConfigError
from infra.hpc.lsf import LsfScheduler
from infra.hpc.registry import SCHEDULER_CLASSES, SCHEDULER_NAMES, UnknownSchedulerError, scheduler_class, scheduler_for
from infra.hpc.scheduler import SchedulerError
from infra.hpc.slurm import SlurmScheduler
from infra.monitor.hpc import HpcSource
from infra.monitor.hpc_reads import SCHEDULER_READS, reads_for
from infra.nodes.settings import BackfillSettings, check_backfill_targets

HPC = Path(__file__).resolve().parents[2] / "infra" / "hpc"


def test_the_registry_names_lsf_and_slurm() -> None:
    assert SCHEDULER_NAMES == ("lsf", "slurm")
    assert {"lsf": LsfScheduler, "slurm": SlurmScheduler} == SCHEDULER_CLASSES
    assert isinstance(scheduler_for("slurm"), SlurmScheduler)
    lsf = scheduler_for("lsf", "GB")
    assert isinstance(lsf, LsfScheduler) and lsf.memory_unit == "GB"
    assert scheduler_class("lsf").label == "LSF" and scheduler_class("slurm").label == "Slurm"


@pytest.mark.parametrize("name", ["pbs", "", "SLURM", None, 3, ["slurm"]])
def test_an_unknown_name_is_an_error_never_slurm(name: Any) -> None:
    with pytest.raises(UnknownSchedulerError, match=r"unknown scheduler .*; use lsf or slurm"):
        scheduler_for(name)
    with pytest.raises(SchedulerError):  # what callers that talk to a scheduler already catch
        scheduler_class(name)


def test_scheduler_py_imports_no_scheduler_of_its_own() -> None:
    """No import circle: the base knows no subclass; registry.py imports them all."""
    tree = ast.parse((HPC / "scheduler.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not imported & {"infra.hpc.lsf", "infra.hpc.slurm", "infra.hpc.registry"}


def test_every_registered_scheduler_has_the_monitors_reads() -> None:
    assert set(SCHEDULER_READS) == set(SCHEDULER_CLASSES.values())
    with pytest.raises(UnknownSchedulerError):
        reads_for("pbs")


def test_the_monitor_reports_an_unknown_scheduler_without_asking_anything() -> None:
    commands: list[str] = []

    def runner(command: str) -> Any:
        commands.append(command)
        raise AssertionError("no command may run for an unknown scheduler")

    source = HpcSource("site", {"scheduler": "pbs", "steps": [{"name": "train", "job_id": "1"}]}, runner)
    with pytest.raises(UnknownSchedulerError, match="'pbs'"):
        source.poll()
    assert commands == []


def test_backfill_refuses_an_lsf_side_saying_why() -> None:
    settings = BackfillSettings(workload=None, environments=("satori",))
    with pytest.raises(AtlasConfigError, match=r"'satori' cannot take backfill \(LSF environment: preemption"):
        check_backfill_targets(settings, False, {"satori": "lsf", "satori-slurm": "slurm"})
    slurm_only = BackfillSettings(workload=None, environments=("satori-slurm",))
    check_backfill_targets(slurm_only, False, {"satori-slurm": "slurm"})
