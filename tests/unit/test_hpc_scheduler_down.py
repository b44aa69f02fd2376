"""Found by the fault tests (tests/e2e/test_faults.py): a scheduler that cannot be asked is not a
scheduler that does not know the jobs, and one login node may serve two schedulers."""

from __future__ import annotations

import pytest

from infra.hpc import polling
from infra.hpc.lsf import LsfScheduler
from infra.hpc.polling import query_states
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import SchedulerError, UnsupportedOutput
from infra.hpc.slurm import SlurmScheduler

CONNECT_FAILURE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"


def test_slurm_controller_down_raises_instead_of_reporting_jobs_gone() -> None:
    def runner(command: str) -> RemoteResult:
        if command.startswith("squeue"):
            return RemoteResult(command, 1, "", CONNECT_FAILURE)
        raise AssertionError(f"accounting must not be asked to stand in for a live query: {command}")

    with pytest.raises(SchedulerError, match="Unable to contact slurm controller"):
        query_states(SlurmScheduler(), runner, ["61"])


def test_lsf_down_raises_instead_of_reporting_jobs_gone() -> None:
    down = "Cannot connect to LSF. Please wait ... (squeue: Unspecified error)\n"

    def runner(command: str) -> RemoteResult:
        if command.startswith("bjobs"):
            return RemoteResult(command, 1, "", down)
        raise AssertionError(command)

    with pytest.raises(SchedulerError, match="Cannot connect to LSF"):
        query_states(LsfScheduler(), runner, ["62"])


def test_unknown_jobs_are_still_just_unknown() -> None:
    def runner(command: str) -> RemoteResult:
        if command.startswith("squeue"):
            return RemoteResult(command, 0, "", "")  # no line: none of the ids is in the controller
        return RemoteResult(command, 1, "", "Slurm accounting storage is disabled\n")

    assert query_states(SlurmScheduler(), runner, ["5"]).states == {}


def test_one_status_board_per_scheduler_on_a_shared_login_node() -> None:
    polling.reset_boards()
    host = ("127.0.0.1", 22, "atlas")
    lsf, slurm = polling.board_for(host, 2.0, "lsf"), polling.board_for(host, 2.0, "slurm")
    assert lsf is not slurm
    assert polling.board_for(host, 1.0, "lsf") is lsf
    polling.reset_boards()


def test_bjobs_text_exit_255_reads_as_unknown_only_when_every_complaint_is_not_found() -> None:
    lsf = LsfScheduler()
    not_found = RemoteResult("bjobs", 255, "", "Job <5> is not found\nJob <6> is not found\n")
    assert lsf.parse_bjobs_text(not_found) == {}
    down = RemoteResult("bjobs", 255, "", "Cannot connect to LSF. Please wait ...\n")
    with pytest.raises(UnsupportedOutput):
        lsf.parse_bjobs_text(down)
