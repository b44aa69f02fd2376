"""Collects every environment a stack's outputs name (and imported past runs) into records.

The I/O half of scripts/compare: each environment is reached the way its kind says (the
Kubernetes API, SSH and SFTP for an HPC or AWS side, a local folder for an imported run) and
read by its collector; one that cannot be reached is kept, with why, so the report says so.
"""

from __future__ import annotations

import functools
import json
import time
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.compare import aws_collector
from infra.compare.access import Access
from infra.compare.contract import report_contract
from infra.compare.device_run import import_device_run, is_device_run
from infra.compare.hpc_collector import collect_hpc
from infra.compare.kube_collector import collect_kubernetes
from infra.compare.records import EnvironmentRecords, Missing, ReportContract, without_records
from infra.compare.remote_files import MonitorFiles, SftpFiles
from infra.compare.seed_import import import_seed_logs
from infra.hpc import ssh
from infra.kubeapi import KubeApi


def _hpc(
    name: str, outputs: Mapping[str, Any], access: Access, raw_dir: Path, contract: ReportContract
) -> EnvironmentRecords:
    key, hosts = access.ssh_keys.get(name), access.known_hosts.get(name)
    # An AWS instance's host key is public and in the outputs (Atlas generated it at launch).
    inline_hosts = str(outputs["known_hosts"]) + "\n" if outputs.get("known_hosts") and hosts is None else None
    if key is None or (hosts is None and inline_hosts is None):
        raise LookupError(
            f"no SSH key or known_hosts for {name!r}: pass --ssh-key {name}=PATH "
            f"--known-hosts {name}=PATH, or a stack file that names them"
        )
    endpoint = ssh.SshEndpoint(
        host=str(outputs["host"]),
        port=int(outputs["port"]),
        user=str(outputs["user"]),
        known_hosts=inline_hosts if inline_hosts is not None else hosts.read_text(),  # type: ignore[union-attr]
        known_hosts_source="the stack outputs' known_hosts" if inline_hosts is not None else f"file {hosts}",
        private_key_file=str(key),
    )
    connection = ssh.connection(endpoint)

    def runner(command: str) -> ssh.RemoteResult:
        return ssh.run_remote(connection, command, check=False, safe_to_retry=True, timeout=60)

    return collect_hpc(name, outputs, runner, SftpFiles(connection.sftp()), raw_dir, contract)


def _unreachable(name: str, outputs: Mapping[str, Any], error: Exception) -> EnvironmentRecords:
    reason = f"not collected: {type(error).__name__}: {error}"
    return without_records(
        name,
        str(outputs.get("kind", "")),
        str(outputs.get("scheduler") or outputs.get("flavour")),
        reason,
        outputs,
        notes=(reason,),
        cost_profile={"hpc": "satori", "aws": ""}.get(str(outputs.get("kind")), "moc"),
        cloud_rate=aws_collector.cloud_rate_name(outputs) if outputs.get("kind") == "aws" else "",
    )


def collect_environments(
    outputs: Mapping[str, Any],
    access: Access,
    raw_dir: Path,
    kube_get: Callable[[str], Any] | None = None,
) -> list[EnvironmentRecords]:
    """Each environment of the stack outputs, from its own records; one that cannot be reached says why."""
    contract = report_contract(outputs)
    result = []
    for name, env in sorted((outputs.get("environments") or {}).items()):
        try:
            if env.get("kind") == "kubernetes":
                if kube_get is not None:
                    result.append(collect_kubernetes(name, env, kube_get, contract=contract))
                    continue
                if access.kubeconfig is None:
                    raise LookupError("no kubeconfig: pass --kubeconfig or a stack file naming one")
                api = KubeApi(access.kubeconfig, timeout_s=60.0)
                result.append(
                    collect_kubernetes(
                        name,
                        env,
                        api.get,
                        functools.partial(MonitorFiles, api.get, api.download),
                        raw_dir / name,
                        contract,
                    )
                )
            elif env.get("kind") == "hpc":
                result.append(_hpc(name, env, access, raw_dir / name, contract))
            elif env.get("kind") == "aws" and not env.get("executed"):
                result.append(aws_collector.not_executed(name, env))
            elif env.get("kind") == "aws":
                result.append(aws_collector.as_aws(_hpc(name, env, access, raw_dir / name, contract), env))
            else:
                result.append(_unreachable(name, env, ValueError(f"unknown kind {env.get('kind')!r}")))
        except (OSError, LookupError, ValueError, urllib.error.URLError, ssh.SshError) as error:
            result.append(_unreachable(name, env, error))
    return result


def unfinished_steps(environments: Sequence[EnvironmentRecords]) -> list[str]:
    """`env/step (state)` for every step whose record has no finish time yet."""
    waiting = []
    for env in environments:
        if isinstance(env.steps, Missing):
            continue
        waiting += [f"{env.name}/{s.step} ({s.state})" for s in env.steps if s.finished_at is None]
    return waiting


def wait_until_finished(
    outputs: Mapping[str, Any], access: Access, raw_dir: Path, timeout_s: float, interval_s: float = 5.0
) -> list[str]:
    """`pulumi up` waits for the preparation steps only: poll every environment's own records
    (batched, at most every `interval_s`) until every step has finished or `timeout_s` passed.
    Returns the steps still unfinished (empty when all finished)."""
    start = time.monotonic()
    while True:
        waiting = unfinished_steps(collect_environments(outputs, access, raw_dir))
        elapsed = time.monotonic() - start
        if not waiting or elapsed >= timeout_s:
            return waiting
        print(f"compare {elapsed:5.0f}s waiting for {len(waiting)} step(s): {', '.join(waiting)}", flush=True)
        time.sleep(interval_s)


def import_folder(folder: Path, name: str, gpus: int | None = None) -> EnvironmentRecords:
    """A past run from a folder: a device run (bench/biggan_h200.py, found by its atlas-run.json),
    else the seed's sar and nvidia-smi logs."""
    if is_device_run(folder):
        from infra.workload.load import load_workload

        # The differences from the full run are the workload's own overrides (workloads/<name>/).
        manifest = json.loads((folder / "atlas-run.json").read_text())
        definition = Path(__file__).resolve().parents[2] / "workloads" / str(manifest.get("workload")) / "workload.yaml"
        return import_device_run(folder, name, load_workload(definition) if definition.is_file() else None)
    return import_seed_logs(folder, name, gpus=gpus)
