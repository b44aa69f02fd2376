"""An HPC side's own records over SSH: the scheduler's job times and the files the jobs wrote.

The commands run through the caller's `runner` (one SSH connection) and the files come through
`RemoteFiles` (SFTP) into the report's raw/ folder, so the report keeps what it was computed
from. Which commands, and how their answers read, is the scheduler's own (infra.hpc.registry
gives it: `collect_step_records`, one live query, and the history only for jobs it forgot; a
sweep's elements `collect_sweep_records`, one query per array, in infra.compare.sweep_records); the
files are read by `infra.compare.run_files`.
"""

from __future__ import annotations

from pathlib import Path

from infra.compare.records import DEFAULT_CONTRACT, EnvironmentRecords, Missing, ReportContract, StepRecord
from infra.compare.remote_files import RemoteFiles
from infra.compare.run_files import collect_logs, collect_telemetry, staged_files
from infra.compare.runtimes import hpc_runtime
from infra.compare.sweep_records import collect_hpc_sweeps, with_sweep_steps
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import Runner
from infra.hpc.scheduler import Scheduler, SubmittedStep
from infra.job_records import mock_gpu_nodes
from infra.outputs import HpcOutputs
from infra.provenance import Fact


def collect_hpc(
    name: str,
    outputs: HpcOutputs,
    runner: Runner,
    files: RemoteFiles,
    raw_dir: Path,
    contract: ReportContract = DEFAULT_CONTRACT,
) -> EnvironmentRecords:
    """The scheduler's records, the sampler's telemetry and the training logs of one HPC side.
    A `scheduler` that infra.hpc does not drive raises UnknownSchedulerError (a ValueError)."""
    scheduler = scheduler_for(outputs.scheduler)
    steps = SubmittedStep.all_of(outputs)
    where = f"on {outputs.login} (SFTP)"
    raw_dir.mkdir(parents=True, exist_ok=True)

    telemetry, argv = collect_telemetry(
        [s.step for s in steps],
        outputs.telemetry.path,
        files,
        raw_dir,
        where,
    )

    records: tuple[StepRecord, ...] | Missing = Missing("the stack outputs list no steps")
    if steps:
        records = scheduler.collect_step_records(runner, steps, outputs.host, argv)
    training, throughput = collect_logs(contract, outputs.logs.path, files, raw_dir, where, argv)
    sweeps = collect_hpc_sweeps(
        scheduler, runner, outputs, files, raw_dir, dict(contract.sweeps), contract.definition_note
    )

    mock, nodes_note = mock_gpus(scheduler, runner, records)
    return EnvironmentRecords(
        name=name,
        kind=outputs.kind,
        platform=f"{scheduler.label} over SSH",
        gpus=outputs.gpus_requested,
        gpu_product=None,
        steps=with_sweep_steps(records, sweeps),
        telemetry=telemetry,
        training=training,
        throughput=throughput,
        measured_step=contract.step,
        staging=staged_files(outputs.run_dir, files, outputs.login),
        cost_profile="satori",
        # What the stack says, narrowed by what was observed (a login route on loopback, mock GPUs).
        provenance=outputs.label(mock),
        gpu_mock=mock is not None,
        sweeps=sweeps,
        runtime=hpc_runtime(name, outputs),
        notes=(nodes_note,) if nodes_note else (),
    )


def mock_gpus(
    scheduler: Scheduler, runner: Runner, records: tuple[StepRecord, ...] | Missing
) -> tuple[Fact | None, str]:
    """Whether the GPUs the steps ran on are mock, as the scheduler's own node listing names their
    type (Slurm's GRES, LSF's gpu_model: infra.provenance), and a note where it could not be read.
    The nodes the steps ran on are those whose names the records carry; every node where none is."""
    sections = {}
    for section, command in scheduler.node_sections():
        result = runner(command)
        sections[section] = (result.exit_code, result.stdout + result.stderr)
    nodes, error = scheduler.read_nodes(sections)
    if error and not nodes:
        return None, f"Nodes not read ({error}): whether the steps' GPUs were mock is not known."
    hosts = [s.node for s in records if s.node] if not isinstance(records, Missing) else []
    ran_on = {n.name for n in nodes if any(n.name in host for host in hosts)}
    return mock_gpu_nodes(nodes, ran_on), ""
