"""The Kubernetes side's own records, through its API: Jobs, pods, events, nodes; and, where
the steps ran in containers, the sampler's telemetry and the training logs from the run's PVCs.

Requests go through the caller's `get` (an API GET, e.g. `infra.kubeapi.KubeApi.get`: a small
REST client over a kubeconfig; the `kubernetes` package is not a dependency). The answers are
read by `infra.compare.kube_records` (pure), the files by `infra.compare.run_files`.
"""

from __future__ import annotations

import dataclasses
import functools
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.compare.kube_records import records_from_api
from infra.compare.records import DEFAULT_CONTRACT, EnvironmentRecords, Missing, ReportContract
from infra.compare.remote_files import MONITOR_SELECTOR, ApiGet, RemoteFiles
from infra.compare.run_files import collect_logs, collect_telemetry
from infra.compare.sweep_records import PodLog, ResultsVolume, collect_kube_sweeps, with_sweep_steps
from infra.kubeapi import KubeForbiddenError
from infra.outputs import KubernetesOutputs

MonitorFilesFor = Callable[[str, str], RemoteFiles]  # (namespace, monitor Service) -> its files


def collect_kubernetes(
    name: str,
    outputs: KubernetesOutputs,
    get: ApiGet,
    monitor_files: MonitorFilesFor | None = None,
    raw_dir: Path | None = None,
    contract: ReportContract = DEFAULT_CONTRACT,
    pod_log: PodLog | None = None,
) -> EnvironmentRecords:
    """Read the namespace's Jobs, pods and events and the pods' nodes through `get` (an API GET;
    nodes the identity may not read are left out, and the records say so); with `monitor_files`,
    the sampler's telemetry and the training log from the results and logs PVCs, through the run's
    monitor (nothing to read on simulated nodes: no container ran). A swept step's elements are its
    Indexed Job's pods among those read; its metric is read from each element's log (`pod_log`, a
    plain-text GET) or from the file each point writes on the results PVC (through the monitor)."""
    namespace = urllib.parse.quote(outputs.namespace)
    jobs = get(f"/apis/batch/v1/namespaces/{namespace}/jobs")
    pods = get(f"/api/v1/namespaces/{namespace}/pods")
    events = get(f"/api/v1/namespaces/{namespace}/events")
    node_names = sorted({str(n) for p in pods.get("items", []) if (n := (p.get("spec") or {}).get("nodeName"))})
    nodes, nodes_unread = read_nodes(get, node_names)
    records = records_from_api(name, outputs, jobs, pods, events, nodes, nodes_unread)
    simulated = frozenset(n.name for n in records.nodes if n.simulated)

    @functools.cache
    def monitor() -> RemoteFiles | None:
        # Looked up once, and only when something is read through it.
        if monitor_files is None or raw_dir is None:
            return None
        selector = urllib.parse.quote(MONITOR_SELECTOR.format(run=outputs.run_id))
        services = get(f"/api/v1/namespaces/{namespace}/services?labelSelector={selector}").get("items", [])
        return monitor_files(outputs.namespace, services[0]["metadata"]["name"]) if services else None

    results = None if raw_dir is None else ResultsVolume(monitor, raw_dir / "sweeps")
    sweeps = collect_kube_sweeps(
        outputs, jobs, pods, simulated, dict(contract.sweeps), pod_log, contract.definition_note, results
    )
    records = dataclasses.replace(
        records, measured_step=contract.step, sweeps=sweeps, steps=with_sweep_steps(records.steps, sweeps)
    )
    if raw_dir is None or isinstance(records.steps, Missing) or any(s.simulated for s in records.steps):
        return records
    files = monitor()
    if files is None:
        return records
    where = f"on the PVCs of {outputs.namespace} (through the monitor, API service proxy)"
    telemetry, argv = collect_telemetry([s.step for s in records.steps], "telemetry", files, raw_dir, where)
    training, throughput = collect_logs(contract, "logs", files, raw_dir, where, argv)
    return dataclasses.replace(records, telemetry=telemetry, training=training, throughput=throughput)


def read_nodes(get: ApiGet, names: Sequence[str]) -> tuple[list[Mapping[str, Any]], str]:
    """The named nodes, and why none was read where the identity may not get nodes (a user with a
    project's rights only, as on a shared OpenShift cluster): the report then says so."""
    nodes = []
    for node in names:
        try:
            nodes.append(get(f"/api/v1/nodes/{urllib.parse.quote(node)}"))
        except KubeForbiddenError:
            return [], "the identity may not get nodes (403)"
    return nodes, ""
