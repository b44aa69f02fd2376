"""What KWOK (v0.8.0) needs to simulate the cluster: Stage objects, Node objects, storage.

Pure functions returning plain dicts. The Stages go to `kwok --config=<file>` (a multi-document
YAML file): given there, they must not also be enabled as CRDs (`--enable-crds=Stage`, which
makes KWOK read Stage objects from the API server instead; kwok refuses both at once).

Pod lifecycle simulated by `kwok_stages`:
- every pod on a KWOK node becomes Running and Ready at once (`pod-ready`);
- a pod owned by a Job finishes after `pod_run_seconds` (per pod: annotation
  `atlas.dev/kwok-run-seconds`, "90" or a Go duration such as "1m30s"), Succeeded with exit
  code 0 (`pod-complete`), or Failed (`pod-fail`) when annotated with
  `atlas.dev/kwok-exit-code: "<1..255>"` or `atlas.dev/kwok-fail: "true"` (exit code 1);
  the Job controller then marks the Job Complete or retries up to backoffLimit and fails it;
- a pod of anything else (Deployment, StatefulSet, bare pod) stays Running until deleted;
- a deleted pod is removed at once (`pod-delete`).
The annotations go on the pod, i.e. on a Job's `spec.template.metadata.annotations`.

The stages are adapted from KWOK's own `kustomize/stage/{node,pod}/...` (module
sigs.k8s.io/kwok@v0.8.0); the templates are copied rather than read from the Go module cache so
that `localenv up` does not depend on where that cache is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

Manifest = dict[str, Any]

STAGE_API_VERSION = "kwok.x-k8s.io/v1alpha1"
# The annotation kwokctl and KWOK's docs use for nodes KWOK manages; run kwok with
# `--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake`.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"

RUN_SECONDS_ANNOTATION = "atlas.dev/kwok-run-seconds"
FAIL_ANNOTATION = "atlas.dev/kwok-fail"
EXIT_CODE_ANNOTATION = "atlas.dev/kwok-exit-code"

# A non-zero exit code a container can report (1..255), as one anchored regular expression that
# both gojq (stage selectors) and sprig's regexMatch (Go templates) read the same way. No
# backslashes, so it survives YAML, jq and Go string quoting unchanged.
_NONZERO_EXIT_CODE = "^([1-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])$"

# jq over the pod: true when the pod must end Failed. Used as `In ["true"]` by pod-fail and
# `In ["false"]` by pod-complete, so exactly one of the two matches a finishing Job pod (KWOK
# picks randomly, by weight, among stages that match at once).
POD_FAILS_JQ = (
    "(.metadata.annotations // {}) as $a"
    f' | (($a["{EXIT_CODE_ANNOTATION}"] // "") | test("{_NONZERO_EXIT_CODE}"))'
    f' or ($a["{FAIL_ANNOTATION}"] == "true")'
)
# jq giving the run time as a Go duration string: KWOK parses a string result with
# time.ParseDuration, so plain seconds ("90") get an "s"; no output means the stage's default
# delay, and so does a value ParseDuration refuses.
RUN_DURATION_JQ = (
    f'.metadata.annotations["{RUN_SECONDS_ANNOTATION}"] // empty'
    ' | if test("^[0-9]+([.][0-9]+)?$") then . + "s" else . end'
)
# jq selecting pods a Job owns: the same expression as KWOK's shipped pod-complete stage.
JOB_OWNED_JQ = ".metadata.ownerReferences.[].kind"


def _jq(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    selector: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        selector["values"] = values
    return {"jq": selector}


_NOT_DELETING = _jq(".metadata.deletionTimestamp", "DoesNotExist")
_JOB_OWNED = _jq(JOB_OWNED_JQ, "In", ["Job"])
_RUNNING = _jq(".status.phase", "In", ["Running"])


def _stage(name: str, kind: str, match: list[dict[str, Any]], template: str | None = None,
           *, delay: dict[str, Any] | None = None, delete: bool = False,
           immediate_next: bool = False) -> Manifest:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": match},
    }
    if delay is not None:
        spec["delay"] = delay
    steps: list[dict[str, Any]] = []
    if template is not None:
        steps.append({"patch": {"subresource": "status", "root": "status", "template": template}})
    if delete:
        steps.append({"delete": True})
    spec["steps"] = steps
    if immediate_next:
        spec["immediateNextStage"] = True
    return {"apiVersion": STAGE_API_VERSION, "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _milliseconds(seconds: float, what: str) -> int:
    if seconds < 0:
        raise ValueError(f"{what} must be >= 0 seconds, got {seconds}")
    return round(seconds * 1000)


# --- Node stages: kustomize/stage/node/fast/node-initialize.yaml and
# node/heartbeat{,-with-lease}/, unchanged apart from the selector syntax.

_NODE_CONDITIONS = """\
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

# Pieces both node templates use, as KWOK's own files spell them.
_NODE_IP_ADDRESS = """\
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
"""
_NODE_NAME_ADDRESS = """\
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
"""
_NODE_DAEMON_ENDPOINTS = """\
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
"""


def _node_resources(field: str) -> str:
    """The node's own `allocatable` or `capacity` (a GPU node's GPUs), else KWOK's defaults."""
    return f"""{field}:
{{{{ with .status.{field} }}}}
{{{{ YAML . 1 }}}}
{{{{ else }}}}
  cpu: 1k
  memory: 1Ti
  pods: 1M
{{{{ end }}}}
"""


_NODE_INITIALIZE = _NODE_CONDITIONS + """
{{ $hasInternalIP := false }}
{{ $hasHostname := false }}
{{ range .status.addresses }}
  {{ if eq .type "InternalIP" }}
    {{ $hasInternalIP = true }}
  {{ end }}
  {{ if eq .type "Hostname" }}
    {{ $hasHostname = true }}
  {{ end }}
{{ end }}
{{ if or (not $hasInternalIP) (not $hasHostname) }}
addresses:
{{ end }}
{{ if not $hasInternalIP }}
""" + _NODE_IP_ADDRESS + """{{ end }}
{{ if not $hasHostname }}
""" + _NODE_NAME_ADDRESS + """{{ end }}

""" + _NODE_DAEMON_ENDPOINTS + """
""" + _node_resources("allocatable") + _node_resources("capacity") + """
{{ $nodeInfo := .status.nodeInfo }}
{{ $kwokVersion := printf "kwok-%s" Version }}
nodeInfo:
  architecture: {{ or $nodeInfo.architecture "amd64" }}
  bootID: {{ or $nodeInfo.bootID `""` }}
  containerRuntimeVersion: {{ or $nodeInfo.containerRuntimeVersion $kwokVersion }}
  kernelVersion: {{ or $nodeInfo.kernelVersion $kwokVersion }}
  kubeProxyVersion: {{ or $nodeInfo.kubeProxyVersion $kwokVersion }}
  kubeletVersion: {{ or $nodeInfo.kubeletVersion $kwokVersion }}
  machineID: {{ or $nodeInfo.machineID `""` }}
  operatingSystem: {{ or $nodeInfo.operatingSystem "linux" }}
  osImage: {{ or $nodeInfo.osImage `""` }}
  systemUUID: {{ or $nodeInfo.systemUUID `""` }}
phase: Running
"""

_NODE_HEARTBEAT_WITH_LEASE = _NODE_CONDITIONS + """
addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
""" + _NODE_IP_ADDRESS + _NODE_NAME_ADDRESS + """{{ end }}

""" + _NODE_DAEMON_ENDPOINTS

_NODE_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'


def node_stages(*, node_lease: bool = True) -> list[Manifest]:
    """Initialise KWOK nodes to Ready, then keep them Ready.

    With node leases (kwok's default, `--node-lease-duration-seconds=40`) liveness is the Lease
    KWOK renews, so the status heartbeat is rare (10 min, as KWOK ships it); without leases the
    node lifecycle controller reads the Ready condition's heartbeat, every 20 to 25 seconds.
    """
    initialize = _stage("node-initialize", "Node", [_jq(_NODE_READY, "NotIn", ["True"])], _NODE_INITIALIZE)
    ready = [_jq(".status.phase", "In", ["Running"]), _jq(_NODE_READY, "In", ["True"])]
    if node_lease:
        heartbeat = _stage("node-heartbeat-with-lease", "Node", ready, _NODE_HEARTBEAT_WITH_LEASE,
                           delay={"durationMilliseconds": 600_000, "jitterDurationMilliseconds": 610_000},
                           immediate_next=True)
    else:
        heartbeat = _stage("node-heartbeat", "Node", ready, _NODE_CONDITIONS,
                           delay={"durationMilliseconds": 20_000, "jitterDurationMilliseconds": 25_000},
                           immediate_next=True)
    return [initialize, heartbeat]


# --- Pod stages: kustomize/stage/pod/fast/ (ready, delete) and general/pod-complete.yaml, plus
# a failing variant modelled on pod/chaos/pod-container-running-failed.yaml.

def _ip_list(variable: str, key: str) -> str:
    """`hostIP`/`hostIPs` or `podIP`/`podIPs` from a template variable holding the addresses."""
    return f"""{{{{ with {variable} }}}}
{key}: {{{{ index . 0 | Quote }}}}
{key}s:
{{{{ range . }}}}
- ip: {{{{ . | Quote }}}}
{{{{ end }}}}
{{{{ end }}}}
"""


_POD_READY = """\
{{ $now := Now }}

conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}

containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}

initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  {{ if eq .restartPolicy "Always" }}
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
  {{ else }}
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
  {{ end }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
""" + _ip_list("$hostIPs", "hostIP") + """{{ $hostNetwork := or .spec.hostNetwork false }}
{{ $uid := or .metadata.uid "" }}
{{ $name := or .metadata.name "" }}
{{ $namespace := or .metadata.namespace "" }}
{{ $podIPs := PodIPsWith .spec.nodeName $hostNetwork $uid $name $namespace }}
""" + _ip_list("$podIPs", "podIP") + """phase: Running
startTime: {{ $now | Quote }}
"""


def _pod_finished_template(*, failed: bool) -> str:
    """Status of a finished pod, as the kubelet reports it: every container terminated, the pod
    no longer Ready (reason PodCompleted/PodFailed), startedAt kept from when it started."""
    if failed:
        exit_code = (
            "{{ $annotations := or .metadata.annotations dict }}\n"
            f'{{{{ $raw := index $annotations "{EXIT_CODE_ANNOTATION}" | default "" }}}}\n'
            "{{ $code := 1 }}\n"
            f'{{{{ if regexMatch "{_NONZERO_EXIT_CODE}" $raw }}}}{{{{ $code = atoi $raw }}}}{{{{ end }}}}\n'
        )
        code, reason, condition_reason, phase = "{{ $code }}", "Error", "PodFailed", "Failed"
    else:
        exit_code = ""
        code, reason, condition_reason, phase = "0", "Completed", "PodCompleted", "Succeeded"
    return (
        "{{ $now := Now }}\n"
        "{{ $started := or .status.startTime $now }}\n"
        + exit_code
        + f"""conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: {condition_reason}
  status: "False"
  type: Ready
- lastTransitionTime: {{{{ $now | Quote }}}}
  reason: {condition_reason}
  status: "False"
  type: ContainersReady
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {code}
      finishedAt: {{{{ $now | Quote }}}}
      reason: {reason}
      startedAt: {{{{ $started | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""
    )


def pod_stages(pod_run_seconds: float, *, pod_start_seconds: float = 0.0) -> list[Manifest]:
    """Pods become Running; Job pods finish (Succeeded, or Failed on request); deleted pods go."""
    start_ms = _milliseconds(pod_start_seconds, "pod_start_seconds")
    start_delay = {"durationMilliseconds": start_ms} if start_ms else None
    run_delay = {
        "durationMilliseconds": _milliseconds(pod_run_seconds, "pod_run_seconds"),
        # No jitter: KWOK uses the jitter as the delay whenever it is below the duration, which
        # would silently cap the per-pod run time.
        "durationFrom": {"jq": {"expression": RUN_DURATION_JQ}},
    }
    finishing_job_pod = [_NOT_DELETING, _RUNNING, _JOB_OWNED]
    ready = _stage("pod-ready", "Pod", [
        _NOT_DELETING,
        _jq(".status.phase", "In", ["Pending"]),
        _jq('.status.conditions.[] | select( .type == "Ready" ) | .status', "NotIn", ["True"]),
    ], _POD_READY, delay=start_delay)
    complete = _stage("pod-complete", "Pod", [*finishing_job_pod, _jq(POD_FAILS_JQ, "In", ["false"])],
                      _pod_finished_template(failed=False), delay=run_delay)
    fail = _stage("pod-fail", "Pod", [*finishing_job_pod, _jq(POD_FAILS_JQ, "In", ["true"])],
                  _pod_finished_template(failed=True), delay=run_delay)
    # Deleted at once (grace period 0): there is no process to stop. Finalizers (the Job
    # controller's batch.kubernetes.io/job-tracking) still hold the object until removed.
    delete = _stage("pod-delete", "Pod", [_jq(".metadata.deletionTimestamp", "Exists")], delete=True)
    return [ready, complete, fail, delete]


def kwok_stages(pod_run_seconds: float = 5.0, *, pod_start_seconds: float = 0.0,
                node_lease: bool = True) -> list[Manifest]:
    """All Stage objects for `kwok --config`: node initialise and heartbeat, pod lifecycle."""
    pods = pod_stages(pod_run_seconds, pod_start_seconds=pod_start_seconds)
    return [*node_stages(node_lease=node_lease), *pods]


# --- Nodes


@dataclass(frozen=True)
class GpuModel:
    """What the NVIDIA GPU operator's feature discovery reports about a node's GPUs."""

    product: str = "Tesla-V100-SXM2-32GB"
    family: str = "volta"
    memory_mib: int = 32768
    compute_capability: tuple[int, int] = (7, 0)
    driver_version: str = "550.90.07"
    cuda_version: tuple[int, int] = (12, 4)
    mig_capable: bool = False


V100_SXM2_32GB = GpuModel()


@dataclass(frozen=True)
class NodeShape:
    cpu: str
    memory: str
    pods: int = 110
    ephemeral_storage: str = "500Gi"
    gpus: int = 0


def _resources(shape: NodeShape) -> dict[str, str]:
    resources = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": str(shape.pods),
        "ephemeral-storage": shape.ephemeral_storage,
    }
    if shape.gpus:
        resources["nvidia.com/gpu"] = str(shape.gpus)
    return resources


def gpu_labels(model: GpuModel, count: int) -> dict[str, str]:
    """Labels of NVIDIA's GPU feature discovery and the operator, and NFD's PCI vendor label."""
    driver = model.driver_version.split(".")
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": model.product,
        "nvidia.com/gpu.family": model.family,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.compute.major": str(model.compute_capability[0]),
        "nvidia.com/gpu.compute.minor": str(model.compute_capability[1]),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1] if len(driver) > 1 else "0",
        "nvidia.com/cuda.driver.rev": driver[2] if len(driver) > 2 else "",
        "nvidia.com/cuda.runtime.major": str(model.cuda_version[0]),
        "nvidia.com/cuda.runtime.minor": str(model.cuda_version[1]),
        "nvidia.com/mig.capable": str(model.mig_capable).lower(),
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }


# The taint GPU nodes commonly carry so that only pods asking for GPUs land there. Its key is
# the extended resource's name on purpose: the ExtendedResourceToleration admission plugin
# adds the matching toleration to every pod that requests nvidia.com/gpu.
GPU_TAINT: Manifest = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
# What a pod spec adds to run on the simulated nodes (the tests that need many nodes).
SIMULATED_PLACEMENT: Manifest = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"key": KWOK_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
}


def on_simulated_nodes(pod_spec: Manifest) -> Manifest:
    """`pod_spec` placed on KWOK's nodes: their label selected, their taint tolerated."""
    return {
        **pod_spec,
        "nodeSelector": {**(pod_spec.get("nodeSelector") or {}), **SIMULATED_PLACEMENT["nodeSelector"]},
        "tolerations": [*(pod_spec.get("tolerations") or []), *SIMULATED_PLACEMENT["tolerations"]],
    }


def kwok_node(name: str, shape: NodeShape, *, labels: Mapping[str, str] | None = None,
              taints: list[Manifest] | None = None) -> Manifest:
    """A Node that KWOK manages. Its status is only taken on create (the API server ignores
    status in later updates): delete the node to change its shape."""
    resources = _resources(shape)
    node: Manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node-role.kubernetes.io/worker": "",
                "type": "kwok",
                **(labels or {}),
            },
        },
        # KWOK's own taint, as its documentation recommends: the local cluster also has a real node,
        # and a pod lands on a simulated one only when it asks to (SIMULATED_PLACEMENT), so nothing
        # that should run is silently "run" by the simulator.
        "spec": {"taints": [dict(KWOK_TAINT), *(taints or [])]},
        "status": {
            "capacity": dict(resources),
            # Equal to capacity: no system reservation, so scheduling arithmetic stays obvious.
            "allocatable": dict(resources),
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        },
    }
    return node


def gpu_nodes(count: int = 4, *, gpus_per_node: int = 4, cpu: str = "40", memory: str = "512Gi",
              model: GpuModel = V100_SXM2_32GB, taint: bool = True,
              name_prefix: str = "kwok-gpu") -> list[Manifest]:
    """GPU workers shaped like the Mass Open Cloud's OpenShift V100 nodes (4 x V100-SXM2-32GB)."""
    shape = NodeShape(cpu=cpu, memory=memory, gpus=gpus_per_node)
    return [
        kwok_node(f"{name_prefix}-{i}", shape, labels=gpu_labels(model, gpus_per_node),
                  taints=[dict(GPU_TAINT)] if taint else None)
        for i in range(count)
    ]


def cpu_nodes(count: int = 2, *, cpu: str = "16", memory: str = "64Gi",
              name_prefix: str = "kwok-cpu") -> list[Manifest]:
    """CPU-only workers: no GPUs, no taint."""
    shape = NodeShape(cpu=cpu, memory=memory)
    return [kwok_node(f"{name_prefix}-{i}", shape) for i in range(count)]


# --- Storage

STORAGE_CLASS = "atlas-local"


def storage_class(name: str = STORAGE_CLASS) -> Manifest:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": name,
            # Default, so PVCs without storageClassName (most charts, the stacks) bind too.
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        # No provisioner: claims bind to the pre-created pool below, through the controller
        # manager's PV binder. Immediate binding, so a PVC is Bound before any pod uses it
        # (pulumi-kubernetes waits for Bound).
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
        "reclaimPolicy": "Retain",
    }


def hostpath_pv(name: str, path: PurePosixPath | Path, size: str, access_mode: str,
                storage_class_name: str = STORAGE_CLASS) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"atlas.dev/pv-pool": access_mode}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": [access_mode],
            "storageClassName": storage_class_name,
            "volumeMode": "Filesystem",
            # Retain: the controller manager can delete hostPath volumes only with its test-only
            # hostpath provisioner, and Recycle needs a scrubber pod to run. A released volume is
            # made Available again by removing its spec.claimRef.
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
        },
    }


def storage_objects(pool_dir: Path, rwo: int = 8, rwx: int = 4, *, rwo_size: str = "50Gi",
                    rwx_size: str = "500Gi") -> list[Manifest]:
    """The default StorageClass and a pool of hostPath PVs (RWO and RWX) for PVCs to bind to.

    A claim binds to the smallest Available PV whose access modes include the claim's and whose
    size is at least the request: a claim larger than the pool's volumes stays Pending.
    """
    if not pool_dir.is_absolute():
        raise ValueError(f"pool_dir must be absolute (a hostPath), got {pool_dir}")
    volumes = [
        hostpath_pv(f"atlas-rwo-{i:02d}", pool_dir / f"rwo-{i:02d}", rwo_size, "ReadWriteOnce")
        for i in range(rwo)
    ] + [
        hostpath_pv(f"atlas-rwx-{i:02d}", pool_dir / f"rwx-{i:02d}", rwx_size, "ReadWriteMany")
        for i in range(rwx)
    ]
    return [storage_class(), *volumes]
