"""The monitor's live cells and its queue-wait estimate's nodes (issue 34, item 4).

- which nodes a pod may run on (node selector, GPU product, required affinity, tolerations against
  taints), table by table against Kubernetes' own rules;
- why each live cell (it/s, CPU, memory, GPU use) is empty, table by table;
- the Kubernetes side's reads through the run's monitor (the API server's service proxy): what is
  asked, how often, and what each refusal reads as;
- a Kubernetes view of a running step on the real node beside a KWOK GPU node: its cells filled
  from the monitor, the estimate counting the real node only; every view shows each reason.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any

import pytest

from infra.hpc.scheduler import Phase
from infra.kinds import read_stack_outputs
from infra.kubeapi import KubeRequestError
from infra.monitor.build import Monitor
from infra.monitor.estimate import JobShape
from infra.monitor.kube import KubeCache
from infra.monitor.kube_live import NO_MONITOR, NO_SERVICE, KubeLive
from infra.monitor.kube_view import KubeSource
from infra.monitor.model import CellReasons, LiveReading, LogTail, StepTelemetry
from infra.monitor.placement import (
    Placement,
    Requirement,
    Toleration,
    eligibility,
    placement_of_pod_spec,
    placement_of_selector,
    why_not,
)
from infra.monitor.reasons import (
    ENDED,
    MOCK_GPU,
    NO_LOG_RECORDS,
    NO_TRAINING_LOG,
    NOT_STARTED,
    ONE_LOG_RECORD,
    SAMPLER_EMPTY,
    SAMPLER_NOT_STARTED,
    STALE_LOG,
    SWEPT,
    iteration_rate,
    not_the_logging_step,
    telemetry_cells,
)
from infra.monitor.render import html_page, terminal_view, to_dict
from infra.outputs import KubernetesOutputs

V100 = "Tesla-V100-SXM2-32GB"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None, gpus: int = 4,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


# --- tolerations against taints: Kubernetes' ToleratesTaint --------------------------------------


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), GPU_TAINT, True),
        (Toleration("nvidia.com/gpu", "Exists", "", ""), GPU_TAINT, True),  # no effect: every effect
        (Toleration("nvidia.com/gpu", "Exists", "", "NoExecute"), GPU_TAINT, False),
        (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), GPU_TAINT, True),
        (Toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule"), GPU_TAINT, False),
        (Toleration("nvidia.com/gpu", "", "present", ""), GPU_TAINT, True),  # no operator: Equal
        (Toleration("", "Exists", "", ""), KWOK_TAINT, True),  # no key with Exists: every taint
        (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), KWOK_TAINT, False),
        (Toleration("kwok.x-k8s.io/node", "Exists", "", "NoSchedule"), KWOK_TAINT, True),
        (Toleration("kwok.x-k8s.io/node", "Gt", "fake", "NoSchedule"), KWOK_TAINT, False),  # no such operator
    ],
)
def test_a_toleration_tolerates_a_taint_as_kubernetes_decides(
    toleration: Toleration, taint: dict[str, str], tolerated: bool
) -> None:
    assert toleration.tolerates(taint) is tolerated


@pytest.mark.parametrize(
    ("requirement", "labels", "matches"),
    [
        (Requirement("zone", "In", ("a", "b")), {"zone": "b"}, True),
        (Requirement("zone", "In", ("a", "b")), {"zone": "c"}, False),
        (Requirement("zone", "In", ("a",)), {}, False),
        (Requirement("zone", "NotIn", ("a",)), {"zone": "b"}, True),
        (Requirement("zone", "NotIn", ("a",)), {}, True),
        (Requirement("zone", "NotIn", ("a",)), {"zone": "a"}, False),
        (Requirement("gpu", "Exists"), {"gpu": ""}, True),
        (Requirement("gpu", "Exists"), {}, False),
        (Requirement("gpu", "DoesNotExist"), {}, True),
        (Requirement("gpu", "DoesNotExist"), {"gpu": "x"}, False),
        (Requirement("nvidia.com/gpu.memory", "Gt", ("40000",)), {"nvidia.com/gpu.memory": "81920"}, True),
        (Requirement("nvidia.com/gpu.memory", "Gt", ("40000",)), {"nvidia.com/gpu.memory": "32768"}, False),
        (Requirement("nvidia.com/gpu.memory", "Lt", ("40000",)), {"nvidia.com/gpu.memory": "32768"}, True),
        (Requirement("nvidia.com/gpu.memory", "Gt", ("40000",)), {"nvidia.com/gpu.memory": "big"}, False),
    ],
)
def test_a_node_affinity_requirement_matches_labels_as_kubernetes_decides(
    requirement: Requirement, labels: dict[str, str], matches: bool
) -> None:
    assert requirement.matches(labels) is matches


# --- which nodes a step's pod may run on ----------------------------------------------------------

REAL = node("atlas-node", {"atlas.dev/node-kind": "kubelet", "nvidia.com/gpu.product": V100,
                           "atlas.dev/gpu-mock": "true"}, [GPU_TAINT])
KWOK = node("kwok-gpu-0", {"type": "kwok", "nvidia.com/gpu.product": V100}, [KWOK_TAINT, GPU_TAINT],
            annotations={"kwok.x-k8s.io/node": "fake"})
A100 = node("a100-0", {"atlas.dev/node-kind": "kubelet", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
            [GPU_TAINT])
SOFT = node("soft-0", {"atlas.dev/node-kind": "kubelet", "nvidia.com/gpu.product": V100},
            [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}])
# The local stack's GPU step, as step_jobs.py renders it (tests/unit/test_monitor_live.py checks
# below that the outputs' record of it is the same).
LOCAL_STEP = {
    "nodeSelector": {"atlas.dev/node-kind": "kubelet", "nvidia.com/gpu.product": V100},
    "tolerations": [GPU_TOLERATION],
}


@pytest.mark.parametrize(
    ("spec", "target", "reason"),
    [
        (LOCAL_STEP, REAL, ""),
        (LOCAL_STEP, KWOK, "node selector atlas.dev/node-kind=kubelet: the node has no such label"),
        (LOCAL_STEP, A100, f"GPU product NVIDIA-A100-SXM4-40GB, the step asks for {V100}"),
        (LOCAL_STEP, SOFT, ""),  # PreferNoSchedule keeps no pod off
        ({"nodeSelector": {"nvidia.com/gpu.product": V100}, "tolerations": [GPU_TOLERATION]}, KWOK,
         "taint kwok.x-k8s.io/node=fake:NoSchedule not tolerated"),
        ({"nodeSelector": {"nvidia.com/gpu.product": V100}}, REAL,
         "taint nvidia.com/gpu=present:NoSchedule not tolerated"),
        ({"nodeSelector": {"type": "kwok"}, "tolerations": [GPU_TOLERATION, {"key": "kwok.x-k8s.io/node",
                                                                              "operator": "Exists"}]}, KWOK, ""),
        ({"tolerations": [{"operator": "Exists"}]}, KWOK, ""),  # tolerates everything, selects nothing
        ({"nodeSelector": {"nvidia.com/gpu.product": V100}, "tolerations": [GPU_TOLERATION]},
         node("bare", {}, []), "GPU product not labelled, the step asks for " + V100),
        ({"tolerations": [GPU_TOLERATION], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                       "values": ["NVIDIA-A100-SXM4-40GB"]}]}]}}}},
         REAL, "required node affinity: nvidia.com/gpu.product In (NVIDIA-A100-SXM4-40GB) does not hold"),
        ({"tolerations": [GPU_TOLERATION], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["x"]}]},
                {"matchExpressions": [{"key": "atlas.dev/node-kind", "operator": "Exists"}]}]}}}},
         REAL, ""),  # terms are alternatives: the second holds
    ],
)
def test_why_a_pod_may_not_run_on_a_node(spec: dict[str, Any], target: dict[str, Any], reason: str) -> None:
    assert why_not(target, placement_of_pod_spec(spec)) == reason


def test_eligibility_lists_the_admitted_nodes_and_groups_the_others_by_reason() -> None:
    others = [node(f"kwok-gpu-{i}", {"type": "kwok"}, [KWOK_TAINT]) for i in range(1, 5)]
    fits = eligibility([REAL, KWOK, A100, *others], placement_of_pod_spec(LOCAL_STEP))
    assert fits.admitted == ("atlas-node",)
    assert fits.summary() == (
        f"left out a100-0 (GPU product NVIDIA-A100-SXM4-40GB, the step asks for {V100}); "
        "kwok-gpu-0, kwok-gpu-1, kwok-gpu-2 +2 (node selector atlas.dev/node-kind=kubelet: the node has no such label)"
    )
    assert eligibility([REAL], Placement()).left_out == ((  "atlas-node", "taint nvidia.com/gpu=present:NoSchedule "
                                                           "not tolerated"),)


def test_the_outputs_record_the_gpu_steps_placement_as_the_job_renders_it() -> None:
    from infra.openshift.manifests import step_jobs
    from infra.openshift.manifests.pods import gpu_placement
    from infra.openshift.settings_parser import parse_openshift_settings
    from infra.workload.render import render_step
    from tests.unit.openshift_fixtures import KEY, biggan, example_raw
    from tests.unit.test_openshift_manifests import context

    raw = {**example_raw(), "placement": {
        "node_selector": {"atlas.dev/node-kind": "kubelet"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                        GPU_TOLERATION],
    }}
    settings = parse_openshift_settings(raw, KEY)
    placed = settings.placement
    pods = dataclasses.replace(
        context(), node_selector=dict(placed.node_selector), tolerations=placed.toleration_list()
    )
    workload = biggan()
    job = step_jobs.step_job(render_step(workload, "train", "openshift"), workload, settings, pods)
    spec = job["spec"]["template"]["spec"]
    selector, tolerations = gpu_placement(
        dict(settings.placement.node_selector), settings.placement.toleration_list(), settings.gpu.product
    )
    assert (selector, tolerations) == (spec["nodeSelector"], spec["tolerations"])
    assert selector == {"atlas.dev/node-kind": "kubelet", "nvidia.com/gpu.product": V100}
    assert len(tolerations) == 2  # the GPU toleration the stack already gives is not repeated
    recorded = placement_of_selector(selector, tolerations, "outputs")
    assert dataclasses.replace(recorded, source="") == dataclasses.replace(placement_of_pod_spec(spec), source="")


def test_before_up_the_stack_file_s_placement_is_what_the_estimate_reads() -> None:
    from infra.kinds.kubernetes import KubernetesKind

    config = {"atlas:openshift": {
        "namespace": "atlas-local",
        "placement": {"node_selector": {"atlas.dev/node-kind": "kubelet"},
                      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }}
    (outputs,) = KubernetesKind().outputs_before_up(config, "local").values()
    assert outputs.gpu_placement is not None
    # No product written: the model's default, as `pulumi up` would render it.
    assert dict(outputs.gpu_placement.node_selector) == {"atlas.dev/node-kind": "kubelet",
                                                        "nvidia.com/gpu.product": V100}
    assert [dict(t) for t in outputs.gpu_placement.tolerations] == [GPU_TOLERATION]
    # and it survives the outputs' round trip
    again = read_stack_outputs({"environments": {"openshift": outputs.to_dict()}}).environments["openshift"]
    assert again == outputs


# --- why a live cell is empty --------------------------------------------------------------------

LOG = LogTail(12.5, 1000.0, 2)


@pytest.mark.parametrize(
    ("step", "phase", "started", "log", "training_log", "swept", "expected"),
    [
        ("train", Phase.RUNNING, 900.0, LOG, True, False, (12.5, "")),
        ("train", Phase.PENDING, None, LOG, True, False, (None, NOT_STARTED)),
        ("train", Phase.SUCCEEDED, 900.0, LOG, True, False, (None, ENDED)),
        ("train", Phase.FAILED, 900.0, LOG, True, False, (None, ENDED)),
        ("train", Phase.SUSPENDED, 900.0, LOG, True, False, (None, "step suspended")),
        ("train", Phase.RUNNING, 900.0, LOG, False, False, (None, NO_TRAINING_LOG)),
        ("make-hdf5", Phase.RUNNING, 900.0, LOG, True, False, (None, not_the_logging_step("train"))),
        ("train", Phase.RUNNING, 900.0, LOG, True, True, (None, SWEPT)),
        ("train", Phase.RUNNING, 900.0, LogTail(), True, False, (None, NO_LOG_RECORDS)),
        ("train", Phase.RUNNING, 900.0, LogTail(None, 950.0, 1), True, False, (None, ONE_LOG_RECORD)),
        ("train", Phase.RUNNING, 1200.0, LOG, True, False, (None, STALE_LOG)),  # an earlier run's log
        ("train", Phase.RUNNING, 900.0, LogTail(unread="may not read the run's monitor (403)"), True, False,
         (None, "may not read the run's monitor (403)")),
    ],
)
def test_iterations_per_second_or_why_not(
    step: str, phase: Phase, started: float | None, log: LogTail, training_log: bool, swept: bool,
    expected: tuple[float | None, str],
) -> None:
    assert iteration_rate(step, phase, started, log, "train", training_log, swept) == expected


NAN = float("nan")
SAMPLES = StepTelemetry((1.0, 2.0), (90.0, 97.0), (5e7, 5.6e7), (NAN, NAN), (("gpu", "NVML: no driver"),))
MEASURED = dataclasses.replace(SAMPLES, gpu_util_percent=(40.0, 55.0), not_measured=())


@pytest.mark.parametrize(
    ("phase", "live", "values", "reasons"),
    [
        (Phase.RUNNING, LiveReading(MEASURED), (97.0, 5.6e7, 55.0), ("", "", "")),
        (Phase.RUNNING, LiveReading(SAMPLES), (97.0, 5.6e7, None), ("", "", "not measured: NVML: no driver")),
        # A mock GPU's reading is never the step's, whatever the sampler read on the host.
        (Phase.RUNNING, LiveReading(MEASURED, gpu_mock=True), (97.0, 5.6e7, None), ("", "", MOCK_GPU)),
        (Phase.RUNNING, LiveReading(None, SAMPLER_NOT_STARTED), (None, None, None), (SAMPLER_NOT_STARTED,) * 3),
        (Phase.RUNNING, LiveReading(None, NO_MONITOR), (None, None, None), (NO_MONITOR,) * 3),
        (Phase.RUNNING, LiveReading(None), (None, None, None), ("telemetry not read",) * 3),
        (Phase.RUNNING, LiveReading(dataclasses.replace(SAMPLES, t=())), (None, None, None), (SAMPLER_EMPTY,) * 3),
        (Phase.PENDING, LiveReading(None, SAMPLER_NOT_STARTED), (None, None, None), (NOT_STARTED,) * 3),
        (Phase.SUCCEEDED, LiveReading(None, "whatever"), (None, None, None), (ENDED,) * 3),
        (Phase.UNKNOWN, LiveReading(None), (None, None, None), ("state unknown",) * 3),
        (Phase.RUNNING, LiveReading(dataclasses.replace(SAMPLES, cpu_percent=(NAN, NAN),
                                                        not_measured=(("cpu", "no /proc"), ("gpu", "x")))),
         (None, 5.6e7, None), ("not measured: no /proc", "", "not measured: x")),
    ],
)
def test_cpu_memory_and_gpu_or_why_not(
    phase: Phase, live: LiveReading, values: tuple[float | None, ...], reasons: tuple[str, ...]
) -> None:
    cpu, memory, gpu, why = telemetry_cells(phase, live)
    assert (cpu, memory, gpu) == values
    assert (why.cpu_percent, why.memory_bytes, why.gpu_util_percent) == reasons


# --- reads through the run's monitor --------------------------------------------------------------

NS = "atlas-local"
NOW = 1_000_010.0
SERVICES = f"/api/v1/namespaces/{NS}/services?labelSelector=app.kubernetes.io/component%3Dmonitor%2Catlas.dev/run%3D1"
PROXY = f"/api/v1/namespaces/{NS}/services/openshift-monitor-service-1:http/proxy"
# A sample as the sampler writes it (tests/unit/data/compare/lsf_telemetry_train.jsonl's second line).
SAMPLE = {"type": "sample", "t": 1000.0,
          "cpu": {"measured": True, "tree_percent": 97.0, "tree_processes": 1, "host_percent": 99.6, "host_cpus": 2},
          "memory": {"measured": True, "tree_rss_bytes": 56_000_000, "host_used_bytes": 1436930048,
                     "host_total_bytes": 25275973632},
          "gpu": {"measured": False, "reason": "no NVIDIA driver: libnvidia-ml.so.1 not found"}}


def refusal(path: str, status: int, body: Any) -> KubeRequestError:
    return KubeRequestError("GET", path, status, json.dumps(body) if not isinstance(body, str) else body)


class FakeApi:
    """The API server in front of the run's monitor: each path answered as recorded here; every GET counted."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.asked = answers, []

    def get(self, path: str) -> Any:
        self.asked.append(path)
        answer = self.answers.get(path, refusal(path, 404, "the server could not find the requested resource"))
        if isinstance(answer, Exception):
            raise answer
        return copy.deepcopy(answer)


def monitor_api(**overrides: Any) -> FakeApi:
    answers: dict[str, Any] = {
        SERVICES: {"items": [{"metadata": {"name": "openshift-monitor-service-1"}}]},
        f"{PROXY}/telemetry/train?tail=3": {"records": [{"type": "start", "t": 990.0}, SAMPLE]},
        f"{PROXY}/log?tail=2": {"records": [{"itr": 100, "_stamp": NOW - 20}, {"itr": 300, "_stamp": NOW - 10}]},
    }
    answers.update(overrides)
    return FakeApi(answers)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_running_step_is_read_through_the_monitor_at_most_once_an_interval() -> None:
    api, clock = monitor_api(), Clock()
    live = KubeLive(api.get, NS, "1", True, 30.0, clock)
    first = live.read(["train"], want_log=True)
    assert first.telemetry["train"].cpu_percent[-1] == 97.0 and first.telemetry["train"].rss_bytes[-1] == 56e6
    assert first.log == LogTail(20.0, NOW - 10, 2) and not first.missing and not first.note
    assert api.asked == [SERVICES, f"{PROXY}/telemetry/train?tail=3", f"{PROXY}/log?tail=2"]
    for _ in range(20):  # a live view redrawing each second
        clock.now += 1.0
        assert live.read(["train"], want_log=True) is first
    assert len(api.asked) == 3
    clock.now = 30.0
    live.read(["train"], want_log=True)
    # Asked again after the interval; the Service is looked up once.
    assert api.asked[3:] == [f"{PROXY}/telemetry/train?tail=3", f"{PROXY}/log?tail=2"]
    clock.now = 31.0
    live.read(["train", "eval"], want_log=True)  # another step started: its files are read at once
    assert api.asked[5:] == [f"{PROXY}/telemetry/eval?tail=3", f"{PROXY}/telemetry/train?tail=3", f"{PROXY}/log?tail=2"]


@pytest.mark.parametrize(
    ("overrides", "enabled", "missing", "log_unread", "note"),
    [
        ({}, False, "no monitor serves the telemetry", None, NO_MONITOR),
        ({SERVICES: {"items": []}}, True, NO_SERVICE, NO_SERVICE,
         f"{NO_SERVICE} (label app.kubernetes.io/component=monitor,atlas.dev/run=1)"),
        ({f"{PROXY}/telemetry/train?tail=3": refusal("", 404, {"error": "no telemetry for step 'train' yet"}),
          f"{PROXY}/log?tail=2": refusal("", 404, {"error": "no evaluation log yet (written every --test_every)"})},
         True, SAMPLER_NOT_STARTED, NO_LOG_RECORDS, ""),
        ({f"{PROXY}/log?tail=2": refusal("", 404, {"error": "the workload writes no training log Atlas reads"})},
         True, None, "the workload writes no training log Atlas reads", ""),
        ({f"{PROXY}/telemetry/train?tail=3": refusal("", 503, "no endpoints available for service \"x\""),
          f"{PROXY}/log?tail=2": refusal("", 503, "no endpoints available for service \"x\"")},
         True, "the run's monitor is not ready (503)", "the run's monitor is not ready (503)",
         "the run's monitor is not ready: no endpoints available for service \"x\""),
        ({SERVICES: refusal(SERVICES, 403, "services is forbidden")}, True, "may not read the run's monitor (403)",
         "may not read the run's monitor (403)", "GET "),
        ({SERVICES: ConnectionRefusedError(111, "Connection refused")}, True, "not read: ConnectionRefusedError",
         "not read: ConnectionRefusedError", "the run's monitor Service not looked up: [Errno 111] Connection refused"),
        ({f"{PROXY}/telemetry/train?tail=3": {"records": [{"type": "start", "t": 990.0}]}}, True, SAMPLER_EMPTY,
         "", ""),
    ],
)
def test_what_cannot_be_read_through_the_monitor_says_why(
    overrides: dict[str, Any], enabled: bool, missing: str | None, log_unread: str | None, note: str
) -> None:
    api = monitor_api(**overrides)
    read = KubeLive(api.get, NS, "1", enabled, 30.0, Clock()).read(["train"], want_log=True)
    assert read.missing.get("train") == missing
    assert ("train" in read.telemetry) is (missing is None)
    # None: the log was not asked for (no monitor); "": read.
    assert (read.log.unread if read.log is not None else None) == log_unread
    assert read.note.startswith(note) if note else read.note == ""
    if not enabled:
        assert api.asked == []  # nothing is asked of a monitor that is not there


def test_a_404_from_the_api_server_is_a_service_gone_not_a_sampler_not_started() -> None:
    api = monitor_api(**{f"{PROXY}/telemetry/train?tail=3": refusal("", 404, "services \"x\" not found")})
    clock = Clock()
    live = KubeLive(api.get, NS, "1", True, 30.0, clock)
    read = live.read(["train"], want_log=False)
    assert read.missing["train"] == "the run's monitor answered 404" and "services \"x\" not found" in read.note
    clock.now = 31.0
    live.read(["train"], want_log=False)
    assert api.asked.count(SERVICES) == 2  # looked up again


# --- a Kubernetes view: the real node's running step, the KWOK node beside it ---------------------

def iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name: str, step_spec: dict[str, Any], gpus: int, state: str = "running") -> dict[str, Any]:
    status: dict[str, Any] = {"startTime": iso(NOW - 60), "active": 1}
    if state == "done":
        status = {"startTime": iso(NOW - 600), "completionTime": iso(NOW - 300), "succeeded": 1,
                  "conditions": [{"type": "Complete", "status": "True"}]}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": iso(NOW - 61)},
        "spec": {"template": {"spec": {
            **step_spec, "containers": [{"name": "step", "resources": {"limits": limits}}],
        }}},
        "status": status,
    }


def pod(name: str, job_name: str, node_name: str | None, gpus: int, phase: str = "Running",
        namespace: str = NS, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    conditions = [{"type": "PodScheduled", "status": "True" if node_name else "False",
                   "lastTransitionTime": iso(NOW - 59)}]
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": iso(NOW - 60),
                     "labels": {"job-name": job_name, "batch.kubernetes.io/job-name": job_name}},
        "spec": {**(spec or {}), **({"nodeName": node_name} if node_name else {}),
                 "containers": [{"name": "step", "resources": {"limits": limits}}]},
        "status": {"phase": phase, "startTime": iso(NOW - 58) if node_name else None, "conditions": conditions,
                   "containerStatuses": [{"name": "step", "state": {"running": {"startedAt": iso(NOW - 58)}}}]
                   if node_name and phase == "Running" else []},
    }


class ClusterApi:
    """The watch cache's lists (nodes, pods, the run's Jobs) and the run's monitor behind the proxy."""

    server = "https://cluster.test"

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], jobs: list[dict[str, Any]],
                 monitor: FakeApi) -> None:
        self.monitor = monitor
        self.lists = {
            "/api/v1/nodes": {"items": nodes},
            "/api/v1/pods": {"items": pods},
            f"/apis/batch/v1/namespaces/{NS}/jobs": {"items": jobs},
        }

    def get(self, path: str) -> Any:
        if path in self.lists:
            return {**copy.deepcopy(self.lists[path]), "metadata": {"resourceVersion": "1"}}
        return self.monitor.get(path)


def kube_outputs(monitor_url: str = "http://openshift-monitor-service-1.atlas-local.svc/") -> dict[str, Any]:
    return {
        "kind": "kubernetes", "version": 2, "flavour": "kubernetes", "namespace": NS, "run_id": "1",
        "gpus_requested": 1, "gpu_product": V100, "monitor_url": monitor_url,
        "steps": [{"name": "make-hdf5", "job": "make-hdf5-1"}, {"name": "train", "job": "train-1"}],
        "telemetry": {"path": "telemetry/", "pvc": "logs"}, "logs": {"path": "logs/", "pvc": "logs"},
        "gpu_placement": {"node_selector": LOCAL_STEP["nodeSelector"], "tolerations": LOCAL_STEP["tolerations"]},
    }


def kube_view(monitor: FakeApi, outputs: dict[str, Any] | None = None, extra_pods: list[dict[str, Any]] = (),
              jobs: list[dict[str, Any]] | None = None, real: dict[str, Any] = REAL) -> Any:
    jobs = jobs if jobs is not None else [job("make-hdf5-1", {"tolerations": [GPU_TOLERATION]}, 0, "done"),
                                          job("train-1", LOCAL_STEP, 1)]
    pods = [
        pod("make-hdf5-1-a", "make-hdf5-1", "atlas-node", 0, "Succeeded"),
        pod("train-1-a", "train-1", "atlas-node", 1),
        *extra_pods,
    ]
    api = ClusterApi([real, KWOK], pods, jobs, monitor)
    cache = KubeCache(api, NS)  # type: ignore[arg-type]
    cache.list_all()
    typed = read_stack_outputs({"atlas": {"stack": "local", "workload": "probe", "run_id": "1",
                                          "report": {"step": "train", "training_log": True}},
                                "environments": {"openshift": outputs or kube_outputs()}})
    kubernetes = typed.environments["openshift"]
    assert isinstance(kubernetes, KubernetesOutputs)
    live = KubeLive(api.get, NS, "1", bool(kubernetes.monitor_url), 30.0, Clock())
    source = KubeSource("openshift", kubernetes, cache, live)
    return Monitor(typed.run, {"openshift": source}, JobShape("probe", 1), 30.0, wall=lambda: NOW).snapshot()


def test_the_kubernetes_side_shows_the_running_step_s_own_readings_and_why_where_it_has_none() -> None:
    snapshot = kube_view(monitor_api())
    (env,) = snapshot.environments
    steps = {s.name: s for s in env.steps}
    train = steps["train"]
    assert train.phase == "running" and train.node == "atlas-node"
    assert (train.iterations_per_s, train.cpu_percent, train.memory_bytes) == (20.0, 97.0, 56e6)
    # The node's GPUs are mock: the sampler's reading is never the step's.
    assert train.gpu_util_percent is None and train.reasons == CellReasons(gpu_util_percent=MOCK_GPU)
    assert steps["make-hdf5"].reasons == CellReasons(ENDED, ENDED, ENDED, ENDED)


def test_on_a_node_with_real_gpus_the_step_s_reading_is_its_own_and_the_node_s() -> None:
    labels = {k: v for k, v in REAL["metadata"]["labels"].items() if k != "atlas.dev/gpu-mock"}
    real = {**REAL, "metadata": {**REAL["metadata"], "labels": labels}}
    gpu = {**SAMPLE, "gpu": {"measured": True, "devices": [{"index": 0, "utilization_percent": 55.0}]}}
    api = monitor_api(**{f"{PROXY}/telemetry/train?tail=3": {"records": [gpu]}})
    (env,) = kube_view(api, real=real).environments
    train = next(s for s in env.steps if s.name == "train")
    assert train.gpu_util_percent == 55.0 and train.reasons == CellReasons()
    atlas_node = next(n for n in env.nodes if n.name == "atlas-node")
    assert atlas_node.gpu_util_percent == 55.0 and atlas_node.util_source.startswith("the sampler")


def test_the_estimate_counts_only_the_nodes_the_gpu_step_may_run_on() -> None:
    # Someone else's pod waits for a KWOK GPU: it is not ahead of a step that cannot go there.
    waiting = pod("other", "other", None, 4, "Pending", "elsewhere",
                  {"nodeSelector": {"type": "kwok"}, "tolerations": [{"operator": "Exists"}]})
    (env,) = kube_view(monitor_api(), extra_pods=[waiting]).environments
    estimate = env.estimate
    assert estimate is not None and estimate.counted_nodes == ("atlas-node",)
    # 3 of the real node's 4 GPUs are free; KWOK's 4 free GPUs are not counted.
    assert estimate.free_gpus == 3 and estimate.pending_ahead == 0 and estimate.seconds is not None
    assert estimate.basis.startswith("3 GPUs free now on atlas-node, nothing pending ahead")
    assert "Job train-1's pod template" in estimate.basis
    left_out = "left out kwok-gpu-0 (node selector atlas.dev/node-kind=kubelet: the node has no such label)"
    assert left_out in estimate.basis


def test_before_the_jobs_exist_the_outputs_placement_decides_and_without_it_the_product() -> None:
    (env,) = kube_view(monitor_api(), jobs=[]).environments
    assert env.estimate is not None and env.estimate.counted_nodes == ("atlas-node",)
    assert "the stack's placement, as the outputs record it" in env.estimate.basis
    older = {k: v for k, v in kube_outputs().items() if k != "gpu_placement"}
    (env,) = kube_view(monitor_api(), outputs=older, jobs=[]).environments
    # Outputs from before the placement was recorded: the GPU product (and the GPU taint every GPU
    # step tolerates) admits both V100 nodes; KWOK's own taint still keeps its node out.
    assert env.estimate is not None and env.estimate.counted_nodes == ("atlas-node",)
    assert "the outputs' GPU product alone" in env.estimate.basis
    assert "kwok-gpu-0 (taint kwok.x-k8s.io/node=fake:NoSchedule not tolerated)" in env.estimate.basis


def test_every_view_shows_each_empty_cell_s_reason() -> None:
    from rich.console import Console

    api = monitor_api(**{f"{PROXY}/telemetry/train?tail=3": refusal("", 404, {"error": "no telemetry for step"}),
                         f"{PROXY}/log?tail=2": {"records": [{"itr": 100, "_stamp": NOW - 5}]}})
    snapshot = kube_view(api)
    data = to_dict(snapshot)
    train = next(s for s in data["environments"][0]["steps"] if s["name"] == "train")
    assert train["reasons"] == {"iterations_per_s": ONE_LOG_RECORD, "cpu_percent": SAMPLER_NOT_STARTED,
                                "memory_bytes": SAMPLER_NOT_STARTED, "gpu_util_percent": SAMPLER_NOT_STARTED}
    page = html_page(snapshot)
    for field, reason in train["reasons"].items():
        cell = re.search(rf'<td data-env="openshift" data-row="train" data-field="{field}" data-value="" '
                         rf'data-reason="([^"]*)">([^<]*)</td>', page)
        assert cell is not None, field
        assert cell.group(1) == reason.replace("'", "&#x27;") and cell.group(2) == f"- ({cell.group(1)})"
    console = Console(record=True, width=400)
    console.print(terminal_view(snapshot))
    text = console.export_text()
    assert f"- ({SAMPLER_NOT_STARTED})" in text and f"- ({ONE_LOG_RECORD})" in text and f"- ({ENDED})" in text
    # No step's cell is a bare dash: every empty one says why.
    rows = [line for line in text.splitlines() if "train-1 " in line or "make-hdf5-1 " in line]
    assert len(rows) == 2 and not any(re.search(r"│\s+-\s+(│|$)", row) for row in rows), rows


def test_the_monitor_s_gpu_toleration_and_product_label_are_the_manifests_own() -> None:
    from infra.monitor import placement
    from infra.openshift.manifests import pods
    from infra.openshift.settings import GPU_PRODUCT_LABEL

    assert placement.GPU_TOLERATION == pods.GPU_TOLERATION and placement.GPU_PRODUCT_LABEL == GPU_PRODUCT_LABEL


# --- the batch side: the same reasons from its poll's sections -------------------------------------


@pytest.mark.parametrize(
    ("code", "text", "reason"),
    [
        (1, "tail: cannot open 'run/telemetry/train.jsonl' for reading: No such file or directory",
         SAMPLER_NOT_STARTED),
        (404, "no telemetry for step 'train' yet", SAMPLER_NOT_STARTED),
        (0, "", SAMPLER_EMPTY),
        (0, '{"type": "start", "t": 990.0}', SAMPLER_EMPTY),
        (1, "tail: cannot open 'run/telemetry/train.jsonl' for reading: Permission denied",
         "not read: tail: cannot open 'run/telemetry/train.jsonl' for reading: Permission denied"),
        (0, json.dumps(SAMPLE), ""),
    ],
)
def test_a_sampler_file_s_tail_or_why_there_is_none(code: int, text: str, reason: str) -> None:
    from infra.monitor.hpc_reads import telemetry_tail

    telemetry, why = telemetry_tail(code, text, "test")
    assert why == reason and (telemetry is not None) is (reason == "")


SQUEUE_RUNNING = (
    "1|COMPLETED|normal|atlas-make-hdf5-0951b8f262|None|0|2026-12-04T12:01:16|2026-12-04T12:01:16|"
    "2026-12-04T12:01:18|cpu=1,mem=1G,node=1,billing=1|N/A|N/A|N/A|N/A|1|vm|\n"
    "3|RUNNING|normal|atlas-train-8ee107b1f2|None|0|2026-12-04T12:01:16|2026-12-04T12:01:22|"
    "2026-12-04T13:01:22|cpu=1,mem=2G,node=1,billing=1|N/A|gres:gpu:1|N/A|N/A|1|vm|\n"
)
STARTED = 1796385682.0  # 2026-12-04T12:01:22Z


def slurm_view(telemetry: tuple[int, str], log: str) -> Any:
    from infra.hpc.registry import scheduler_for
    from infra.hpc.remote import RemoteResult
    from infra.monitor.hpc import HpcSource
    from infra.monitor.hpc_reads import EXIT, SECTION
    from infra.monitor.hpc_view import HpcEnvironmentSource
    from tests.support import hpc_outputs

    query = scheduler_for("slurm").record_query(["1"]).removesuffix(" 1")

    def run(command: str) -> RemoteResult:
        if command.startswith(query):
            return RemoteResult(command, 0, SQUEUE_RUNNING, "")
        code, text = telemetry
        out = f"\n{SECTION} telemetry train\n{text}\n{EXIT} {code}\n{SECTION} log\n{log}\n{EXIT} 0\n"
        return RemoteResult(command, 0, out, "")

    outputs = hpc_outputs({
        "kind": "hpc", "scheduler": "slurm", "host": "127.0.0.1", "port": 22, "user": "atlas", "run_dir": "run",
        "steps": [{"name": "make-hdf5", "job_id": "1"}, {"name": "train", "job_id": "3"}],
        "telemetry": {"path": "run/telemetry"}, "logs": {"path": "run/logs"},
    })
    source = HpcEnvironmentSource("satori-slurm", outputs, HpcSource("satori-slurm", outputs, run, 30.0))
    run_outputs = read_stack_outputs({"atlas": {"report": {"step": "train", "training_log": True}}}).run
    monitor = Monitor(run_outputs, {"satori-slurm": source}, None, 30.0, wall=lambda: STARTED + 60)
    (env,) = monitor.snapshot().environments
    assert not env.error, env.error
    return {s.name: s for s in env.steps}


def test_the_batch_side_says_why_too() -> None:
    missing = (1, "tail: cannot open 'run/telemetry/train.jsonl' for reading: No such file or directory")
    one = json.dumps({"itr": 50, "_stamp": STARTED + 30})
    steps = slurm_view(missing, one)
    assert steps["train"].reasons == CellReasons(ONE_LOG_RECORD, *(SAMPLER_NOT_STARTED,) * 3)
    assert steps["make-hdf5"].reasons == CellReasons(ENDED, ENDED, ENDED, ENDED)
    two = one + "\n" + json.dumps({"itr": 250, "_stamp": STARTED + 40})
    sample = {**SAMPLE, "t": STARTED + 45}
    steps = slurm_view((0, json.dumps({"type": "start", "t": STARTED}) + "\n" + json.dumps(sample)), two)
    train = steps["train"]
    assert (train.iterations_per_s, train.cpu_percent, train.memory_bytes) == (20.0, 97.0, 56e6)
    assert train.reasons == CellReasons(gpu_util_percent="not measured: no NVIDIA driver: libnvidia-ml.so.1 not found")


def test_without_the_right_to_read_nodes_the_estimate_says_so_rather_than_never() -> None:
    class NoNodes(ClusterApi):
        def get(self, path: str) -> Any:
            if path == "/api/v1/nodes":
                raise KubeRequestError("GET", path, 403, "nodes is forbidden")
            return super().get(path)

    api = NoNodes([], [pod("train-1-a", "train-1", "atlas-node", 1)], [job("train-1", LOCAL_STEP, 1)], monitor_api())
    cache = KubeCache(api, NS)  # type: ignore[arg-type]
    cache.list_all()
    typed = read_stack_outputs({"environments": {"openshift": kube_outputs()}})
    kubernetes = typed.environments["openshift"]
    assert isinstance(kubernetes, KubernetesOutputs)
    source = KubeSource("openshift", kubernetes, cache, KubeLive(api.get, NS, "1", True, 30.0, Clock()))
    monitor = Monitor(typed.run, {"openshift": source}, JobShape("probe", 1), 30.0, wall=lambda: NOW)
    (env,) = monitor.snapshot().environments
    assert env.estimate is not None and env.estimate.seconds is None
    assert env.estimate.basis.startswith("the nodes are not readable: ") and "never" not in env.estimate.basis
    # The step's own readings do not need the nodes.
    train = next(s for s in env.steps if s.name == "train")
    assert train.cpu_percent == 97.0 and train.iterations_per_s == 20.0
