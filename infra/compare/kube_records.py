"""The Kubernetes side's records from its API's JSON: Jobs, pods, events, nodes. Pure: tests
feed recorded responses (`infra.compare.kube_collector` makes the requests)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from infra.compare.records import (
    EnvironmentRecords,
    EventRecord,
    Missing,
    NodeRecord,
    StagingRecord,
    StepRecord,
    step_record,
)
from infra.compare.runtimes import kube_runtime
from infra.outputs import KubernetesOutputs, KubeStep
from infra.provenance import (
    LOCAL_STAND_IN,
    MOCK_GPUS,
    REAL,
    SIMULATED,
    Fact,
    label,
    loopback_url_fact,
)
from infra.provenance import (
    NOT_EXECUTED as NOT_EXECUTED_CLASS,
)
from infra.timeparse import rfc3339

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
GPU_MOCK_LABEL = "atlas.dev/gpu-mock"
# What Atlas's local environment labels its real node with (localenv/node.py): a local stand-in.
LOCAL_NODE_LABEL = "atlas.dev/node-kind"
NOT_EXECUTED = "not executed: no step's pod ran on a node"
NODES_UNREAD = "nodes not readable: what ran the steps is not known"
GPU_RESOURCE = "nvidia.com/gpu"
STAGING_COMPONENTS = ("staging", "prepare-volumes")
SIMULATED_TELEMETRY = "not measured: simulated node, no container ran"


def _limits(container: Mapping[str, Any]) -> Mapping[str, Any]:
    resources = container.get("resources") or {}
    return dict(resources.get("requests") or {}) | dict(resources.get("limits") or {})


def _condition(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions or () if c.get("type") == kind), None)


def node_record(node: Mapping[str, Any]) -> NodeRecord:
    meta = node.get("metadata", {})
    labels = meta.get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return NodeRecord(
        name=meta.get("name", ""),
        simulated=(meta.get("annotations") or {}).get(KWOK_NODE_ANNOTATION) == "fake" or labels.get("type") == "kwok",
        gpu_product=labels.get("nvidia.com/gpu.product"),
        gpus_allocatable=int(allocatable[GPU_RESOURCE]) if GPU_RESOURCE in allocatable else None,
        labels=tuple(sorted(labels.items())),
        gpu_mock=labels.get(GPU_MOCK_LABEL) == "true",
        container_runtime=str(info.get("containerRuntimeVersion") or ""),
        architecture=str(info.get("architecture") or ""),
    )


def _pod_pending_reason(pod: Mapping[str, Any], events: Sequence[EventRecord]) -> str:
    scheduled = _condition((pod.get("status") or {}).get("conditions"), "PodScheduled")
    if scheduled and scheduled.get("status") != "True":
        return f"{scheduled.get('reason', '')}: {scheduled.get('message', '')}".strip(": ")
    name = pod.get("metadata", {}).get("name", "")
    failed = [e for e in events if e.object == f"Pod/{name}" and e.reason == "FailedScheduling"]
    return f"FailedScheduling (before it was scheduled): {failed[-1].message}" if failed else ""


def _step_record(
    step: KubeStep,
    job: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, NodeRecord],
    events: Sequence[EventRecord],
    source: str,
) -> StepRecord:
    if job is None:
        return step_record(
            step.name,
            step.job,
            "NotFound",
            source,
            pending_reason="the Job is gone from the API (deleted, or the namespace was destroyed)",
        )
    status = job.get("status") or {}
    complete = _condition(status.get("conditions"), "Complete")
    failed = _condition(status.get("conditions"), "Failed")
    state = (
        "Complete"
        if complete and complete.get("status") == "True"
        else (
            "Failed" if failed and failed.get("status") == "True" else "Active" if status.get("active") else "Pending"
        )
    )
    # The pod that ran last is the one whose times describe the step (earlier ones failed and were retried).
    pod = max(pods, key=lambda p: p.get("metadata", {}).get("creationTimestamp", ""), default=None)
    scheduled_at = started_at = finished_at = None
    exit_code: int | None = None
    node_name = ""
    gpus_requested: int | None = None
    argv: tuple[str, ...] | None = None
    reason = ""
    if pod is not None:
        pod_status = pod.get("status") or {}
        condition = _condition(pod_status.get("conditions"), "PodScheduled")
        if condition and condition.get("status") == "True":
            scheduled_at = rfc3339(condition.get("lastTransitionTime"))
        for container in pod_status.get("containerStatuses") or ():
            state_block = container.get("state") or {}
            terminated, running = state_block.get("terminated"), state_block.get("running")
            if terminated:
                started_at = rfc3339(terminated.get("startedAt"))
                finished_at = rfc3339(terminated.get("finishedAt"))
                exit_code = terminated.get("exitCode")
            elif running:
                started_at = rfc3339(running.get("startedAt"))
        node_name = (pod.get("spec") or {}).get("nodeName", "") or ""
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        gpu_text = _limits(containers[0]).get(GPU_RESOURCE)
        gpus_requested = int(gpu_text) if gpu_text is not None else 0
        argv = tuple(containers[0].get("command") or ()) + tuple(containers[0].get("args") or ())
        reason = _pod_pending_reason(pod, events)
    node = nodes.get(node_name)
    return step_record(
        step.name,
        job.get("metadata", {}).get("name", ""),
        state,
        source,
        requested_at=rfc3339(job.get("metadata", {}).get("creationTimestamp")),
        scheduled_at=scheduled_at,
        started_at=started_at,
        finished_at=finished_at,
        exit_code=exit_code,
        pending_reason=reason,
        # Given: what the scheduler bound the pod with, on a node that has that many GPUs.
        gpus_allocated=gpus_requested if node_name and gpus_requested is not None else None,
        gpus_requested=gpus_requested,
        node=node_name,
        simulated=node.simulated if node else False,
        argv=_workload_argv(argv),
    )


def node_facts(node: NodeRecord) -> tuple[Fact, ...]:
    """What a node's own object says it is (infra.provenance): KWOK's, Atlas's local node, mock GPUs."""
    labels = dict(node.labels)
    facts = []
    if node.simulated:
        facts.append(Fact(SIMULATED, f"KWOK nodes ({KWOK_NODE_ANNOTATION}=fake): no container ran"))
    if LOCAL_NODE_LABEL in labels:
        facts.append(Fact(LOCAL_STAND_IN, f"a node of Atlas's local environment (label {LOCAL_NODE_LABEL}="
                                          f"{labels[LOCAL_NODE_LABEL]})"))
    if node.gpu_mock:
        facts.append(Fact(MOCK_GPUS, f"mock GPUs (node label {GPU_MOCK_LABEL}=true)"))
    return tuple(facts)


def kube_provenance(
    api_url: str, used: Collection[str], nodes: Mapping[str, NodeRecord], nodes_unread: str = ""
) -> str:
    """What the environment was, from what Atlas observed of the nodes its steps' pods ran on
    (`used`): "real" only where each is listed and neither KWOK's, nor Atlas's local one, nor one
    with mock GPUs, through an API that is not on this machine's loopback."""
    facts = [loopback_url_fact("Kubernetes API", api_url)]
    facts += [f for name in sorted(used) if name in nodes for f in node_facts(nodes[name])]
    if not used:
        facts.append(Fact(NOT_EXECUTED_CLASS, "no step's pod ran on a node"))
    unlisted = sorted(set(used) - set(nodes))
    if used and nodes_unread:
        stated = NODES_UNREAD
    elif unlisted:
        stated = f"node {', '.join(unlisted)} not listed: what ran the steps is not known"
    else:
        stated = REAL
    return label(stated, facts)


def _workload_argv(argv: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The step's own command: what follows the sampler's `--` when the sampler wraps it."""
    if argv and "infra.telemetry.sampler" in argv and "--" in argv:
        return argv[argv.index("--") + 1 :]
    return argv


def _event(item: Mapping[str, Any]) -> EventRecord:
    involved = item.get("involvedObject") or {}
    when = item.get("lastTimestamp") or item.get("eventTime") or (item.get("metadata") or {}).get("creationTimestamp")
    return EventRecord(
        time=rfc3339(when),
        kind=item.get("type", ""),
        reason=item.get("reason", ""),
        object=f"{involved.get('kind', '')}/{involved.get('name', '')}",
        message=item.get("message", ""),
    )


def records_from_api(
    name: str,
    outputs: KubernetesOutputs,
    jobs: Mapping[str, Any],
    pods: Mapping[str, Any],
    events: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    nodes_unread: str = "",
) -> EnvironmentRecords:
    """Pure: the API's JSON (jobs, pods and events of the namespace; the pods' nodes) to records.
    `nodes_unread`: why the nodes could not be read (what they were is then not known)."""
    namespace = outputs.namespace
    node_records = {n.name: n for n in map(node_record, nodes)}
    event_records = tuple(sorted(map(_event, events.get("items", [])), key=lambda e: e.time or 0.0))
    jobs_by_name = {j["metadata"]["name"]: j for j in jobs.get("items", [])}
    pods_by_job: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods.get("items", []):
        labels = pod.get("metadata", {}).get("labels") or {}
        job_name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if job_name:
            pods_by_job.setdefault(job_name, []).append(pod)
    source = (
        f"Kubernetes API {outputs.api_url}: GET /apis/batch/v1/namespaces/{namespace}/jobs "
        f"(metadata.creationTimestamp), /api/v1/namespaces/{namespace}/pods (PodScheduled condition, "
        "containerStatuses[].state startedAt/finishedAt)"
    )
    steps = tuple(
        _step_record(s, jobs_by_name.get(s.job), pods_by_job.get(s.job, []), node_records, event_records, source)
        for s in outputs.steps
    )
    staging = tuple(
        StagingRecord(
            name=job_name,
            started_at=rfc3339((job.get("status") or {}).get("startTime")),
            finished_at=rfc3339((job.get("status") or {}).get("completionTime")),
            bytes_moved=None,
            simulated=any(
                node_records.get(
                    (p.get("spec") or {}).get("nodeName", ""), NodeRecord("", False, None, None, ())
                ).simulated
                for p in pods_by_job.get(job_name, [])
            ),
            source=f"Kubernetes API: GET /apis/batch/v1/namespaces/{namespace}/jobs/{job_name} "
            "(status.startTime, status.completionTime)",
        )
        for job_name, job in sorted(jobs_by_name.items())
        if (job["metadata"].get("labels") or {}).get("app.kubernetes.io/component") in STAGING_COMPONENTS
    )
    simulated = any(s.simulated for s in steps)
    used = {s.node for s in steps if s.node}
    gpu_mock = any(node_records[n].gpu_mock for n in used if n in node_records)
    telemetry_reason = (
        SIMULATED_TELEMETRY
        if simulated
        else f"not collected: the sampler's files are on the PVC {outputs.telemetry.pvc or '?'}, "
        "read through the run's monitor, which is not running (atlas:openshift.monitor.enabled)"
    )
    training_reason = (
        "not measured: simulated node, no container ran, so no training log was written"
        if simulated
        else f"not collected: the logs are on the PVC {outputs.logs.pvc or '?'}, "
        "read through the run's monitor, which is not running (atlas:openshift.monitor.enabled)"
    )
    return EnvironmentRecords(
        name=name,
        kind="kubernetes",
        platform=f"{outputs.flavour.capitalize()} API"
        + (" (KWOK-simulated nodes)" if simulated else " (local node: kubelet, containerd, runc; mock GPUs)"
           if gpu_mock else ""),
        provenance=kube_provenance(outputs.api_url, used, node_records, nodes_unread),
        gpu_mock=gpu_mock,
        gpus=outputs.gpus_requested,
        gpu_product=outputs.gpu_product,
        steps=steps,
        telemetry={s.step: Missing(telemetry_reason) for s in steps},
        training=Missing(training_reason),
        staging=staging,
        events=event_records,
        nodes=tuple(node_records.values()),
        notes=(
            (
                f"Nodes not read ({nodes_unread}): whether they were simulated, or their GPUs mock, is not known; "
                "ask for `get nodes` (a ClusterRole) to have it in the report.",
            )
            if nodes_unread and used
            else (
                "Simulated: the nodes are KWOK's; pods were bound and marked finished by the simulator, "
                "no container ran. Lifecycle times are the API's, durations are the simulator's.",
            )
            if simulated
            else (
                "Local node: the steps ran in containers (kubelet, containerd, runc) on this one host; its "
                "GPUs are mock (a device plugin with no GPU behind it), so GPU use is not measured.",
            )
            if gpu_mock
            else ()
        ),
        cost_profile="moc",
        runtime=kube_runtime(name, outputs, sorted(used), tuple(node_records.values()), nodes_unread),
    )
