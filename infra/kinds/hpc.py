"""The HPC kind (LSF, Slurm over SSH): `HpcEnvironment`, its records from the scheduler, its polled
monitor, backfill in a preemptible partition.

Everything the rest of Atlas asks of a batch-scheduler environment, in the order of
`EnvironmentKind` (base.py). What differs between schedulers is not chosen here: it is asked
of the scheduler's class through infra/hpc/registry.py.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.kinds.base import BackfillRequest, BuildContext, Built, DoctorContext, EnvironmentKind, backfill_work
from infra.outputs import PROVENANCE_NOT_STATED, FilesAt, HpcOutputs
from infra.validation import switched_off

if TYPE_CHECKING:
    from infra.compare.access import Access
    from infra.compare.records import EnvironmentRecords, ReportContract
    from infra.doctor import EnvironmentChecks
    from infra.hpc import ssh
    from infra.hpc.remote import SshEndpoint
    from infra.hpc.target import HpcTarget
    from infra.monitor.sources import EnvironmentSource
    from infra.stack_config import StackConfig
    from infra.workload.model import Workload

SECTION = "atlas:hpc"


class HpcKind(EnvironmentKind[HpcOutputs]):
    name = HpcOutputs.kind
    outputs_type = HpcOutputs

    def stages_source(self, config: StackConfig, workload: Workload) -> bool:
        return bool(config.hpc)

    def build(self, context: BuildContext) -> dict[str, Built]:
        from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs

        config, workload = context.config, context.workload
        # A swept step is never awaited by default (`pulumi up` waits for no sweep yet).
        preparation_steps = tuple(step.name for step in workload.steps[:-1] if step.sweep is None)
        built = {}
        for hpc_config in config.hpc:
            environment = HpcEnvironment(
                hpc_config.name,
                HpcEnvironmentArgs(
                    target=hpc_config.target,
                    workload=workload,
                    environment=hpc_config.name,
                    stack=config.stack,
                    run_id=config.run_id,
                    wait_for_steps=hpc_config.wait_for if hpc_config.wait_for is not None else preparation_steps,
                    extra_files=context.source_files,
                    provenance=hpc_config.provenance,
                    sweep_max_attempts=config.sweep_max_attempts,
                    image=context.image,
                ),
            )
            built[hpc_config.name] = Built(environment, environment.outputs)
        return built

    def outputs_before_up(self, config: Mapping[str, Any], stack: str) -> dict[str, HpcOutputs]:
        found = {}
        for name, env in (config.get(SECTION) or {}).items():
            if isinstance(env, dict) and not switched_off(env):
                found[str(name)] = HpcOutputs(
                    gpus_requested=0,
                    run_id=str(config.get("atlas:runId", "1")),
                    scheduler=str(env.get("scheduler", "")),
                    host=str(env.get("host", "")),
                    port=int(env.get("port", 22)),
                    user=str(env.get("user", "")),
                    run_dir="",
                    steps=(),
                    telemetry=FilesAt(""),
                    logs=FilesAt(""),
                    provenance=str(env.get("provenance") or PROVENANCE_NOT_STATED),
                )
        return found

    def collect(
        self, name: str, outputs: HpcOutputs, access: Access, raw_dir: Path, contract: ReportContract
    ) -> EnvironmentRecords:
        from infra.compare.hpc_collector import collect_hpc
        from infra.compare.remote_files import SftpFiles
        from infra.hpc import ssh

        connection = connect(name, outputs, access)

        def runner(command: str) -> ssh.RemoteResult:
            return ssh.run_remote(connection, command, check=False, safe_to_retry=True, timeout=60)

        return collect_hpc(name, outputs, runner, SftpFiles(connection.sftp()), raw_dir, contract)

    def unreachable(self, name: str, outputs: HpcOutputs, reason: str) -> EnvironmentRecords:
        from infra.compare.records import without_records
        from infra.compare.runtimes import hpc_runtime

        return without_records(
            name,
            outputs.kind,
            outputs.scheduler,
            reason,
            notes=(reason,),
            gpus=outputs.gpus_requested,
            cost_profile="satori",
            runtime=hpc_runtime(name, outputs),  # what `up` recorded: the site need not answer
            provenance=outputs.label(),
        )

    def monitor_source(self, name: str, outputs: HpcOutputs, access: Access, interval_s: float) -> EnvironmentSource:
        return polled_source(name, outputs, access, interval_s)

    def polls_scheduler(self, outputs: HpcOutputs) -> bool:
        return True

    def backfill(self, request: BackfillRequest, outputs: HpcOutputs, echo: Callable[[str], None]) -> None:
        from infra.hpc.registry import scheduler_for
        from infra.monitor.hpc_view import HpcEnvironmentSource
        from infra.nodes import backfill, backfill_apply

        scheduler = scheduler_for(outputs.scheduler)
        if scheduler.backfill_unsupported:
            echo(
                f"{request.environment}: no backfill: {scheduler.label}: {scheduler.backfill_unsupported}; "
                "the local LSF command set has none"
            )
            return
        source = request.source
        if not isinstance(source, HpcEnvironmentSource):
            raise backfill.BackfillError("no SSH access (key or known_hosts missing)")
        runner = source.poller.runner
        if request.stop:
            ids = backfill_apply.stop_backfill(scheduler, runner, request.partition)
            echo(f"{request.environment}: cancelled backfill job(s) {', '.join(ids) or '(none)'}")
            return
        work = backfill_work(request)
        run_dir = outputs.run_dir
        if work.workload != request.run_workload:
            run_dir = posixpath.join(posixpath.dirname(run_dir), work.workload)
        scripts = backfill.backfill_scripts(
            scheduler, work, request.environment, run_dir, request.slots, request.partition, telemetry=True
        )
        ids = backfill_apply.submit_backfill(scheduler, runner, run_dir, scripts)
        echo(
            f"{request.environment}: {len(ids)} one-GPU backfill job(s) in partition {request.partition} "
            f"({', '.join(ids) or 'none: no free GPU'}); real jobs preempt them and Slurm requeues them"
        )

    def doctor(self, context: DoctorContext) -> dict[str, EnvironmentChecks]:
        from infra.doctor import EnvironmentChecks
        from infra.hpc.doctor import hpc_checks

        stack = context.config.stack
        return {
            hpc.name: EnvironmentChecks(hpc.name, self.name, hpc_checks(hpc.name, hpc.target, context.workload, stack))
            for hpc in context.config.hpc
        }


def connect(name: str, outputs: HpcOutputs, access: Access) -> ssh.PooledConnection:
    """The pooled SSH connection to an HPC side's login node, reached as the stack reached it,
    through the user's ssh config (a Host alias, jump hosts, the agent, a master connection:
    infra/hpc/ssh/resolve.py), host keys always checked. Where the stack's config names the
    environment (`Access.hpc`), its parsed target: its host keys, its key file or the key it holds
    as a Pulumi secret (`target_endpoint`; the stack's preview has checked the route); otherwise
    (outputs alone, an AWS side) the outputs' host, port and user with the key and known_hosts the
    command line gave, the outputs' own host keys (an instance Atlas launched and keyed), else the
    ssh config's known_hosts files and the agent's keys, checked before connecting (no DNS). What cannot
    work raises LookupError naming the fix."""
    from infra.hpc import ssh
    from infra.hpc.ssh.resolve import check_endpoint
    from infra.hpc.target import HpcConfigError, HpcTarget

    key, hosts = access.ssh_keys.get(name), access.known_hosts.get(name)
    target = access.hpc.get(name)
    if target is not None:
        return ssh.connection(target_endpoint(target, f"{SECTION}.{name}", key, hosts))
    inline = outputs.known_hosts + "\n" if outputs.known_hosts and hosts is None else None
    from_outputs = HpcTarget(
        host=outputs.host,
        user=outputs.user or None,
        scheduler=outputs.scheduler,
        port=outputs.port,
        known_hosts=inline,
        known_hosts_file=hosts,
        private_key_file=key,
    )
    try:
        # Built before anything connects (the monitor's sources): no DNS here, the connection tells.
        endpoint = check_endpoint(from_outputs, f"{SECTION}.{name}", dns=False)
    except HpcConfigError as error:
        raise LookupError(
            f"{error}; or give -s STACK (its config names them, a key held as a Pulumi secret included), or "
            f"--ssh-key {name}=PATH --known-hosts {name}=PATH"
        ) from None
    if inline is not None:
        endpoint = dataclasses.replace(endpoint, known_hosts_source="the stack outputs' known_hosts")
    return ssh.connection(endpoint)


def target_endpoint(
    target: HpcTarget, key: str, key_file: Path | None = None, known_hosts_file: Path | None = None
) -> SshEndpoint:
    """The login node of a parsed target, as the stack's providers log in to it (resolved through
    the user's ssh config as `HpcEnvironment` resolves it): its host, port and user, its host keys,
    its key file or the key it holds as a Pulumi secret. `key_file` and `known_hosts_file`
    (--ssh-key, --known-hosts) take the place of the target's. `key` names the target's config
    key in every error."""
    from infra.hpc.ssh.resolve import resolve_endpoint

    if key_file is not None:
        target = dataclasses.replace(target, private_key_file=key_file, private_key=None, private_key_passphrase=None)
    if known_hosts_file is not None:
        target = dataclasses.replace(target, known_hosts=None, known_hosts_file=known_hosts_file)
    return resolve_endpoint(target, key)


def polled_source(
    name: str, outputs: HpcOutputs, access: Access, interval_s: float, kind: str = HpcOutputs.kind, where: str = ""
) -> EnvironmentSource:
    """The monitor's source for a batch side: its scheduler polled over SSH at most every
    `interval_s`; an environment it cannot reach is a source that says why."""
    from infra.hpc import ssh
    from infra.monitor.hpc import HpcSource
    from infra.monitor.hpc_view import HpcEnvironmentSource
    from infra.monitor.sources import ErrorSource

    try:
        connection = connect(name, outputs, access)
    except (LookupError, OSError, ValueError) as error:
        return ErrorSource(name, kind, outputs.scheduler, str(error))

    def runner(command: str) -> ssh.RemoteResult:
        return ssh.run_remote(connection, command, check=False, safe_to_retry=True, timeout=60)

    poller = HpcSource(name, outputs, runner, interval_s)
    return HpcEnvironmentSource(name, outputs, poller, kind, where)
