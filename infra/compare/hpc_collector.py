"""An HPC side's own records over SSH: the scheduler's job times and the files the jobs wrote.

The commands run through the caller's `runner` (one SSH connection) and the files come through
`RemoteFiles` (SFTP) into the report's raw/ folder, so the report keeps what it was computed
from. The scheduler's output is read by `infra.compare.hpc_records` (pure), the files by
`infra.compare.run_files`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.compare.hpc_records import (
    BHIST_QUERY,
    BJOBS_QUERY,
    SACCT_JOBCOMP_QUERY,
    SACCT_QUERY,
    SQUEUE_QUERY,
    Argv,
    bjobs_forgot,
    lsf_steps,
    slurm_steps,
    squeue_forgot,
)
from infra.compare.records import DEFAULT_CONTRACT, EnvironmentRecords, Missing, ReportContract, StepRecord
from infra.compare.remote_files import RemoteFiles
from infra.compare.run_files import collect_logs, collect_telemetry, staged_files
from infra.hpc.lsf import LsfScheduler
from infra.hpc.registry import scheduler_class
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import Scheduler
from infra.hpc.slurm import SlurmScheduler
from infra.hpc.target import PROVENANCE_NOT_STATED

Runner = Callable[[str], RemoteResult]


def query_lsf(runner: Runner, outputs: Mapping[str, Any], ids: Sequence[str], argv: Argv) -> tuple[StepRecord, ...]:
    """One bjobs for every job; bhist only for the jobs bjobs has forgotten (past CLEAN_PERIOD)."""
    quoted = " ".join(shlex.quote(i) for i in ids)
    bjobs = runner(f"{BJOBS_QUERY} {quoted}")
    bhist = runner(f"{BHIST_QUERY} {quoted}") if bjobs_forgot(bjobs, ids) else None
    return lsf_steps(outputs, bjobs, bhist, argv)


def query_slurm(runner: Runner, outputs: Mapping[str, Any], ids: Sequence[str], argv: Argv) -> tuple[StepRecord, ...]:
    """One squeue for every job; sacct only when squeue has forgotten one (past MinJobAge)."""
    joined = ",".join(ids)
    squeue = runner(f"{SQUEUE_QUERY} {joined}")
    sacct = None
    if squeue_forgot(squeue, ids):
        sacct = runner(f"{SACCT_QUERY} {joined}")
        if sacct.exit_code != 0:  # no slurmdbd: the jobcomp file still has finished jobs
            sacct = runner(f"{SACCT_JOBCOMP_QUERY} {joined}")
    return slurm_steps(outputs, squeue, sacct, argv)


StepQuery = Callable[[Runner, Mapping[str, Any], Sequence[str], Argv], tuple[StepRecord, ...]]
# How the comparison asks each scheduler of infra.hpc.registry for its records.
STEP_QUERIES: dict[type[Scheduler], StepQuery] = {LsfScheduler: query_lsf, SlurmScheduler: query_slurm}


def collect_hpc(
    name: str,
    outputs: Mapping[str, Any],
    runner: Runner,
    files: RemoteFiles,
    raw_dir: Path,
    contract: ReportContract = DEFAULT_CONTRACT,
) -> EnvironmentRecords:
    """The scheduler's records, the sampler's telemetry and the training logs of one HPC side.
    A `scheduler` that infra.hpc does not drive raises UnknownSchedulerError (a ValueError)."""
    scheduler = scheduler_class(outputs.get("scheduler", ""))
    ids = [str(s["job_id"]) for s in outputs.get("steps", [])]
    host = f"{outputs.get('user')}@{outputs.get('host')}:{outputs.get('port')}"
    where = f"on {host} (SFTP)"
    raw_dir.mkdir(parents=True, exist_ok=True)

    telemetry, argv = collect_telemetry(
        [str(s["name"]) for s in outputs.get("steps", [])],
        outputs.get("telemetry", {}).get("path", ""),
        files,
        raw_dir,
        where,
    )

    query = STEP_QUERIES.get(scheduler)
    if not ids:
        steps: tuple[StepRecord, ...] | Missing = Missing("the stack outputs list no steps")
    elif query is None:
        steps = Missing(f"not collected: the comparison has no query for {scheduler.label}'s records")
    else:
        steps = query(runner, outputs, ids, argv)
    logs_dir = outputs.get("logs", {}).get("path", "")
    training, throughput = collect_logs(contract, logs_dir, files, raw_dir, where, argv)

    return EnvironmentRecords(
        name=name,
        kind="hpc",
        platform=f"{scheduler.label} over SSH",
        gpus=outputs.get("gpus"),
        gpu_product=None,
        steps=steps,
        telemetry=telemetry,
        training=training,
        throughput=throughput,
        measured_step=contract.step,
        staging=staged_files(outputs.get("run_dir", ""), files, host),
        cost_profile="satori",
        # Stack outputs from before Atlas recorded it say nothing: never taken for real.
        provenance=str(outputs.get("provenance") or PROVENANCE_NOT_STATED),
    )
