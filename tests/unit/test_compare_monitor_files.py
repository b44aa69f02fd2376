"""The Kubernetes side's telemetry and training log on a real cluster: read from the results and
logs PVCs through the run's monitor (`/files`), via the API server's service proxy.

The monitor here is the real monitor_app over HTTP on loopback, serving recorded files; the API
server's proxy is a path prefix (the local cluster's pods are KWOK's, so no monitor pod runs there,
and the API server refuses to proxy to loopback addresses).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from infra.compare.kube_collector import collect_kubernetes
from infra.compare.kube_records import KWOK_NODE_ANNOTATION
from infra.compare.records import Missing, TelemetryColumns, TrainingLog
from infra.compare.remote_files import MonitorFiles
from infra.compare.sweep_records import ResultsVolume, collect_kube_sweeps
from infra.openshift import monitor_app
from infra.openshift.monitor_app import MonitorConfig
from infra.outputs import KubernetesOutputs, KubeStep, SweepArray, SweepOutputs, read_environment
from infra.workload.model import Sweep, SweepMetric

REC = Path(__file__).parent / "data" / "compare"
ENV = read_environment(
    KubernetesOutputs, json.loads((REC / "stack_outputs.json").read_text())["environments"]["openshift"], "openshift"
)
NAMESPACE, SERVICE = ENV.namespace, "openshift-monitor-service-1a2b3c"
PROXY = f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}:http/proxy"


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[str]:
    """The monitor app serving a run's results and logs volumes, as mounted in its pod."""
    telemetry, logs = tmp_path / "results" / "telemetry", tmp_path / "logs" / "logs"
    (logs / "probe-digits").mkdir(parents=True)
    telemetry.mkdir(parents=True)
    shutil.copy(REC / "lsf_telemetry_train.jsonl", telemetry / "train.jsonl")
    shutil.copy(REC / "lsf_probe-digits_log.jsonl", logs / "probe-digits_log.jsonl")
    shutil.copy(REC / "lsf_G_loss.log", logs / "probe-digits" / "G_loss.log")
    shutil.copy(REC / "lsf_metalog.txt", logs / "probe-digits" / "metalog.txt")
    (tmp_path / "secret.txt").write_text("not for the monitor")
    (telemetry / "escape").symlink_to(tmp_path / "secret.txt")
    config = MonitorConfig(telemetry, logs, "probe-digits", "1")
    server = ThreadingHTTPServer(("127.0.0.1", 0), monitor_app.make_handler(config))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def through_proxy(monitor: str) -> tuple[Any, Any]:
    """GET and download as the API server's service proxy forwards them (the prefix removed)."""

    def url(path: str) -> str:
        assert path.startswith(PROXY + "/files/"), path
        return monitor + path.removeprefix(PROXY)

    def get(path: str) -> Any:
        with urllib.request.urlopen(url(path), timeout=5) as response:  # noqa: S310 (loopback test server)
            return json.loads(response.read())

    def download(path: str, local: Path) -> bool:
        try:
            with urllib.request.urlopen(url(path), timeout=5) as response:  # noqa: S310
                local.write_bytes(response.read())
        except urllib.error.HTTPError as error:
            assert error.code == 404
            return False
        return True

    return get, download


def test_files_are_listed_and_served_inside_their_area_only(monitor: str) -> None:
    with urllib.request.urlopen(monitor + "/files/telemetry/train.jsonl") as response:  # noqa: S310
        assert response.read() == (REC / "lsf_telemetry_train.jsonl").read_bytes()
        assert response.headers["Content-Type"] == "application/octet-stream"
    with urllib.request.urlopen(monitor + "/files/logs") as response:  # noqa: S310
        entries = {e["name"]: e for e in json.loads(response.read())["entries"]}
    assert entries["probe-digits"]["directory"] and entries["probe-digits_log.jsonl"]["bytes"] > 0
    for refused in ("/files/telemetry/../../secret.txt", "/files/telemetry/escape", "/files/results/x",
                    "/files/telemetry/%2e%2e/%2e%2e/secret.txt"):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(monitor + refused)  # noqa: S310
        assert caught.value.code == 404, refused


def test_a_real_cluster_run_brings_telemetry_and_the_training_log_through_the_monitor(
    monitor: str, tmp_path: Path
) -> None:
    nodes = json.loads((REC / "k8s_nodes.json").read_text())["items"]
    recorded: dict[str, Any] = {
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs": json.loads((REC / "k8s_jobs.json").read_text()),
        f"/api/v1/namespaces/{NAMESPACE}/pods": json.loads((REC / "k8s_pods.json").read_text()),
        f"/api/v1/namespaces/{NAMESPACE}/events": json.loads((REC / "k8s_events.json").read_text()),
        f"/api/v1/namespaces/{NAMESPACE}/services?labelSelector=app.kubernetes.io/component%3Dmonitor%2C"
        f"atlas.dev/run%3D{ENV.run_id}": {"items": [{"metadata": {"name": SERVICE}}]},
    }
    for node in nodes:  # real nodes: not KWOK's
        node["metadata"].get("annotations", {}).pop(KWOK_NODE_ANNOTATION, None)
        node["metadata"].get("labels", {}).pop("type", None)
        recorded[f"/api/v1/nodes/{node['metadata']['name']}"] = node
    get, download = through_proxy(monitor)

    def api_get(path: str) -> Any:
        return get(path) if path.startswith(PROXY) else recorded[path]

    # A cluster's API elsewhere (the recorded run's was on loopback, which is never real).
    env = dataclasses.replace(ENV, api_url="https://api.cluster.example:6443")
    records = collect_kubernetes(
        "openshift", env, api_get, lambda ns, svc: MonitorFiles(api_get, download, ns, svc), tmp_path / "raw"
    )
    assert not isinstance(records.steps, Missing) and not any(s.simulated for s in records.steps)
    assert records.provenance == "real"  # its pods ran on nodes that are neither KWOK's nor mock-GPU ones
    train = records.telemetry["train"]
    assert isinstance(train, TelemetryColumns) and train.rows == 2 and train.exit_code == 0
    assert "through the monitor" in train.source
    assert records.telemetry["make-hdf5"] == Missing(
        f"not measured: no telemetry/make-hdf5.jsonl on the PVCs of {NAMESPACE} (through the monitor, API service "
        "proxy) (the job did not start the sampler)"
    )
    assert isinstance(records.training, TrainingLog) and records.training.experiment == "probe-digits"
    assert records.training.batch_size is not None and records.training.iterations
    assert (tmp_path / "raw" / "telemetry-train.jsonl").read_bytes() == (REC / "lsf_telemetry_train.jsonl").read_bytes()


def test_simulated_nodes_are_not_read(tmp_path: Path) -> None:
    def api_get(path: str) -> Any:
        if path.startswith(PROXY) or "services" in path:
            raise AssertionError(f"nothing to read on KWOK's nodes: {path}")
        name = path.rsplit("/", 1)[-1]
        files = {"jobs": "k8s_jobs.json", "pods": "k8s_pods.json", "events": "k8s_events.json"}
        if name in files:
            return json.loads((REC / files[name]).read_text())
        return next(n for n in json.loads((REC / "k8s_nodes.json").read_text())["items"]
                    if n["metadata"]["name"] == name)

    records = collect_kubernetes("openshift", ENV, api_get, lambda ns, svc: MonitorFiles(api_get, api_get, ns, svc),
                                 tmp_path)
    assert records.telemetry  # one reading per step, each missing for its reason (never vacuously all)
    assert all(isinstance(t, Missing) and "simulated" in t.reason for t in records.telemetry.values())


def sweep_pod(index: int) -> dict[str, Any]:
    times = {"startedAt": f"2026-12-05T10:00:0{index + 2}Z", "finishedAt": f"2026-12-05T10:00:1{index}Z"}
    return {
        "metadata": {
            "name": f"train-sweep-{index}-x",
            "creationTimestamp": "2026-12-05T10:00:01Z",
            "labels": {"batch.kubernetes.io/job-name": "train-sweep"},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"exitCode": 0, **times}}}]},
    }


def test_a_sweep_ranked_by_a_file_is_read_from_the_results_pvc_through_the_monitor(tmp_path: Path) -> None:
    """The monitor serves area `results` (given --results-dir, as its Deployment does for such a
    sweep); the report reads each point's file there: a number, a missing file, a point not run."""
    results = tmp_path / "results"
    for point, text in ((0, "0.42\n"), (1, " 0.17 ")):
        (results / "results" / "train" / f"point-{point}").mkdir(parents=True)
        (results / "results" / "train" / f"point-{point}" / "score.txt").write_text(text)
    (tmp_path / "logs").mkdir()
    config = MonitorConfig(results / "telemetry", tmp_path / "logs", None, "1", results_dir=results)
    server = ThreadingHTTPServer(("127.0.0.1", 0), monitor_app.make_handler(config))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        get, download = through_proxy(f"http://127.0.0.1:{server.server_address[1]}")
        sweep = SweepOutputs(
            points=3, arrays=(SweepArray("train-sweep", 0, 3),), elements="?3", results="results/train"
        )
        outputs = dataclasses.replace(ENV, steps=(KubeStep("train", "train-sweep", sweep=sweep),))
        job = {"metadata": {"name": "train-sweep", "creationTimestamp": "2026-12-05T10:00:00Z"},
               "status": {"completedIndexes": "0-2"}}
        definition = Sweep(kind="points", names=("G_lr",), points=((1.0,), (2.0,), (3.0,)), results="results/train",
                           metric=SweepMetric("min", file="score.txt"))

        def monitor() -> MonitorFiles:
            return MonitorFiles(get, download, NAMESPACE, SERVICE)

        (record,) = collect_kube_sweeps(
            outputs, {"items": [job]}, {"items": [sweep_pod(i) for i in range(3)]}, frozenset(),
            {"train": definition}, None, results=ResultsVolume(monitor, tmp_path / "raw"),
        )
    finally:
        server.shutdown()
        server.server_close()
    assert isinstance(record.metric, tuple)
    assert [r.value for r in record.metric] == [0.42, 0.17, None]
    assert record.metric[1].source == (
        "results/train/point-1/score.txt on the results PVC (through the monitor, API service proxy)"
    )
    assert record.metric[2].source.startswith("not measured: no results/train/point-2/score.txt on the results PVC")
    assert (tmp_path / "raw" / "train" / "point-0.metric").read_text() == "0.42\n"

    # Without the run's monitor, every point says why, and none is a zero.
    (unread,) = collect_kube_sweeps(
        outputs, {"items": [job]}, {"items": [sweep_pod(0)]}, frozenset(), {"train": definition}, None,
        results=ResultsVolume(lambda: None, tmp_path / "raw2"),
    )
    assert isinstance(unread.metric, tuple) and {r.value for r in unread.metric} == {None}
    assert "no monitor Service of the run was found" in unread.metric[0].source
