"""scripts/monitor and scripts/nodes against the local environment: the real Kubernetes API (KWOK
GPU nodes, the real scheduler) and the local Satori (real sshd and Slurm, the LSF command set).

- the monitor's snapshot matches the API and the scheduler, job by job and node by node;
- idle GPU capacity is found on every side, with a suggestion;
- the web view, loaded in headless Chromium, shows the snapshot's numbers;
- under a 200-job run the monitor asks the scheduler no more than twice per interval.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from infra.hpc import ssh
from infra.hpc.registry import scheduler_for
from infra.image_check import LOCAL_BASE_IMAGE
from infra.kinds import read_stack_outputs
from infra.monitor.build import Monitor
from infra.monitor.estimate import JobShape
from infra.monitor.hpc import HpcSource
from infra.monitor.hpc_view import HpcEnvironmentSource
from infra.monitor.kube import KubeCache, KubeClient
from infra.monitor.kube_live import KubeLive
from infra.monitor.kube_view import KubeSource
from infra.monitor.model import Snapshot
from infra.monitor.reasons import SIMULATED
from infra.monitor.serve import make_server, serve_in_thread
from infra.monitor.sources import EnvironmentSource
from infra.nodes.idle import find_underused
from infra.outputs import HpcOutputs, KubernetesOutputs
from localenv import images, kube, kube_user, kwok, satori
from localenv.layout import Layout
from localenv.node import NODE_KIND_LABEL
from localenv.pki_files import NODE_NAME
from tests.support import REPO_ROOT, wait_until

# The Slurm side's status query, less its job ids (the scheduler's record query, as the report asks).
SQUEUE_QUERY = scheduler_for("slurm").record_query(["1"]).removesuffix(" 1")

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
Runner = Callable[[str], ssh.RemoteResult]


@pytest.fixture(scope="module")
def login(satori_env: Layout) -> Iterator[tuple[dict[str, Any], Runner]]:
    info = satori.status(satori_env)["ssh"]
    endpoint = ssh.SshEndpoint(
        host=info["host"],
        port=info["port"],
        user=info["user"],
        known_hosts=open(info["known_hosts_file"]).read(),  # noqa: SIM115 (read once)
        known_hosts_source=f"file {info['known_hosts_file']}",
        private_key_file=info["key_file"],
    )
    connection = ssh.connection(endpoint)

    def run(command: str) -> ssh.RemoteResult:
        return ssh.run_remote(connection, command, check=False, safe_to_retry=True, timeout=120)

    yield info, run
    ssh.close_all()


def hpc_env(info: dict[str, Any], scheduler: str, job_ids: list[str], run_dir: str = "h10-monitor") -> dict[str, Any]:
    return {
        "kind": "hpc",
        "scheduler": scheduler,
        "host": info["host"],
        "port": info["port"],
        "user": info["user"],
        "run_dir": run_dir,
        "steps": [{"name": f"step-{i}", "job_id": j} for i, j in enumerate(job_ids)],
        "telemetry": {"path": f"{run_dir}/telemetry"},
        "logs": {"path": f"{run_dir}/logs"},
        "gpus": 1,
    }


def kube_env_outputs(namespace: str, api_url: str = "", steps: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "kind": "kubernetes",
        "flavour": "kubernetes",
        "namespace": namespace,
        "api_url": api_url,
        "steps": steps or [],
        "telemetry": {"path": "telemetry/"},
        "logs": {"path": "logs/"},
    }


def monitor_of(
    outputs: dict[str, Any], cache: KubeCache | None, run: Runner, interval: float, shape: JobShape | None
) -> tuple[Monitor, dict[str, HpcSource]]:
    """The monitor as infra.kinds makes it, with this test's cache and SSH runner: a watch-cache
    source for the Kubernetes side, a polled source for each batch side (and the pollers)."""
    typed = read_stack_outputs(outputs)
    sources: dict[str, EnvironmentSource] = {}
    pollers: dict[str, HpcSource] = {}
    for name, env in typed.environments.items():
        if isinstance(env, KubernetesOutputs):
            assert cache is not None
            sources[name] = KubeSource(name, env, cache)
        else:
            assert isinstance(env, HpcOutputs)
            pollers[name] = HpcSource(name, env, run, interval)
            sources[name] = HpcEnvironmentSource(name, env, pollers[name])
    return Monitor(typed.run, sources, shape, interval), pollers


def sbatch(run: Runner, options: str, command: str) -> str:
    result = run(
        f"mkdir -p ~/h10-monitor && cd ~/h10-monitor && sbatch --parsable {options} --wrap {shlex.quote(command)}"
    )
    assert result.exit_code == 0, result
    return result.stdout.strip().split(";")[0]


def apply(layout: Layout, manifest: dict[str, Any]) -> None:
    kube.kubectl(layout, "apply", "--server-side", "--field-manager=atlas-test", "-f", "-", stdin=json.dumps(manifest))


def gpu_job(name: str, namespace: str, run_seconds: int, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"atlas.dev/kwok-run-seconds": str(run_seconds)}},
                "spec": kwok.on_simulated_nodes({
                    "restartPolicy": "Never",
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}},
                        }
                    ],
                }),
            },
        },
    }


@pytest.fixture
def namespace(kube_env: Layout) -> Iterator[str]:
    name = f"h10-{uuid.uuid4().hex[:8]}"
    apply(kube_env, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    # Waited for: a Job in a namespace being deleted can still start a pod, which would move
    # the next test's numbers under it.
    kube.kubectl(kube_env, "delete", "namespace", name, "--wait=true", "--timeout=120s")


def api_gpu_allocation(layout: Layout) -> dict[str, tuple[int, int]]:
    """Per GPU node straight from the API: (GPUs, GPUs held by active pods bound to it)."""
    nodes = kube.api_get(layout, "/api/v1/nodes")["items"]
    pods = kube.api_get(layout, "/api/v1/pods")["items"]
    result = {}
    for node in nodes:
        total = int(node["status"]["allocatable"].get(GPU, 0))
        if not total:
            continue
        held = sum(
            int(c.get("resources", {}).get("limits", {}).get(GPU, 0))
            for p in pods
            if p["spec"].get("nodeName") == node["metadata"]["name"]
            and p["status"].get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
            for c in p["spec"]["containers"]
        )
        result[node["metadata"]["name"]] = (total, held)
    return result


def slurm_gpu_allocation(run: Runner) -> dict[str, tuple[int, int]]:
    """Per node from `scontrol -d show node`: (Gres GPUs, GresUsed GPUs)."""
    text = run("scontrol -d show node -o").stdout
    result = {}
    for line in text.splitlines():
        name = re.search(r"NodeName=(\S+)", line)
        total = re.search(r"Gres=gpu(?::\w+)?:(\d+)", line)
        alloc = re.search(r"GresUsed=gpu(?::\w+)?:(\d+)", line)
        if name and total:
            result[name.group(1)] = (int(total.group(1)), int(alloc.group(1)) if alloc else 0)
    return result


def squeue_states(run: Runner, ids: list[str]) -> dict[str, str]:
    text = run(f"squeue -h -t all -j {','.join(ids)} -o '%i|%T'").stdout
    return dict(line.split("|") for line in text.split())


# --- the snapshot matches the API and the scheduler ----------------------------------------------


def test_the_snapshot_matches_the_api_and_the_scheduler(
    kube_env: Layout, login: tuple[dict[str, Any], Runner], namespace: str
) -> None:
    info, run = login
    apply(kube_env, gpu_job("train", namespace, run_seconds=120, gpus=2))
    running = sbatch(run, "-p normal --gres=gpu:1 -t 5", "sleep 60")
    waiting = sbatch(run, f"-p normal --dependency=afterok:{running} -t 5", "true")
    ids = [running, waiting]
    try:
        outputs = {
            "atlas": {"stack": "h10", "workload": "probe", "run_id": "1"},
            "environments": {
                "openshift": kube_env_outputs(namespace, kube_env.api_url, [{"name": "train", "job": "train"}]),
                "satori-slurm": hpc_env(info, "slurm", ids),
                "satori": hpc_env(info, "lsf", ids),  # the LSF command set shows the same jobs
            },
        }
        cache = KubeCache(KubeClient(kube_env.kubeconfig), namespace)
        cache.start()
        monitor, _ = monitor_of(outputs, cache, run, 2.0, JobShape("probe", 1))

        def settled() -> Snapshot | None:
            snap = monitor.snapshot()
            envs = {e.name: e for e in snap.environments}
            k8s_ok = envs["openshift"].steps and envs["openshift"].steps[0].phase == "running"
            # Each side answers at its own pace (every 2 s here): wait for both to see the job run.
            slurm_ok = all(
                [s.phase for s in envs[name].steps] == ["running", "pending"] for name in ("satori", "satori-slurm")
            )
            return snap if k8s_ok and slurm_ok else None

        snapshot = wait_until(settled, "the GPU pod and the Slurm job to run", 60)
        cache.stop()
        envs = {e.name: e for e in snapshot.environments}

        # Kubernetes: the step and every GPU node, against the API.
        (train,) = envs["openshift"].steps
        pods = kube.api_get(kube_env, f"/api/v1/namespaces/{namespace}/pods")["items"]
        (pod,) = pods
        assert train.node == pod["spec"]["nodeName"] and train.gpus == 2 and train.native_state == "Active"
        api = api_gpu_allocation(kube_env)
        seen = {n.name: (n.gpus_total, n.gpus_allocated) for n in envs["openshift"].nodes if n.gpus_total}
        assert seen == api and api[train.node][1] >= 2

        # Slurm and LSF: each job's state, and the node's GPUs, against the scheduler.
        truth = squeue_states(run, ids)
        slurm_steps = {s.job: s for s in envs["satori-slurm"].steps}
        assert {j: s.native_state for j, s in slurm_steps.items()} == truth
        assert slurm_steps[waiting].reason == "Dependency" and slurm_steps[waiting].queue_wait_s is not None
        lsf = {s.job: s.native_state for s in envs["satori"].steps}
        assert lsf == {running: "RUN", waiting: "PEND"}
        allocation = slurm_gpu_allocation(run)
        for env_name in ("satori-slurm", "satori"):
            nodes = {n.name: (n.gpus_total, n.gpus_allocated) for n in envs[env_name].nodes}
            assert nodes == allocation, env_name
        assert envs["satori-slurm"].estimate is not None and envs["satori-slurm"].estimate.seconds is not None
    finally:
        run(f"scancel {' '.join(ids)}")


# --- idle GPU nodes ------------------------------------------------------------------------------


def test_idle_gpu_nodes_are_found_on_every_side(kube_env: Layout, login: tuple[dict[str, Any], Runner]) -> None:
    info, run = login
    outputs = {
        "atlas": {"stack": "h10", "workload": "probe", "run_id": "1"},
        "environments": {
            "openshift": kube_env_outputs("default"),
            "satori-slurm": hpc_env(info, "slurm", []),
        },
    }
    cache = KubeCache(KubeClient(kube_env.kubeconfig), "default")
    cache.list_all()
    monitor, _ = monitor_of(outputs, cache, run, 2.0, JobShape("probe", 1))
    findings = find_underused(monitor.snapshot())
    api = api_gpu_allocation(kube_env)
    slurm = slurm_gpu_allocation(run)
    by_node = {(f.environment, f.node): f for f in findings}
    for name, (total, held) in api.items():
        finding = by_node[("openshift", name)]
        assert finding.gpus_free == total - held
        # KWOK's nodes are simulated; the real node is not, and its GPUs' use is never a reading.
        assert finding.simulated == name.startswith("kwok-")
        if not finding.simulated:
            assert finding.gpu_util_percent is None and "mock GPU" in finding.util_source
        assert finding.underused == (total > held)
    for name, (total, held) in slurm.items():
        finding = by_node[("satori-slurm", name)]
        assert finding.gpus_free == total - held
    assert any(f.underused and "backfill" in f.suggestion for f in findings)


# --- the web view in headless Chromium -----------------------------------------------------------


def test_the_web_view_shows_the_snapshot_s_numbers_in_chromium(
    kube_env: Layout, login: tuple[dict[str, Any], Runner], namespace: str
) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (scripts/test installs it)"
    info, run = login
    apply(kube_env, gpu_job("web", namespace, run_seconds=120))
    job = sbatch(run, "-p normal --gres=gpu:1 -t 5", "sleep 60")
    try:
        outputs = {
            "atlas": {"stack": "h10", "workload": "probe", "run_id": "1"},
            "environments": {
                "openshift": kube_env_outputs(namespace, steps=[{"name": "web", "job": "web"}]),
                "satori-slurm": hpc_env(info, "slurm", [job]),
            },
        }
        cache = KubeCache(KubeClient(kube_env.kubeconfig), namespace)
        cache.start()
        monitor, pollers = monitor_of(outputs, cache, run, 30.0, JobShape("probe", 1))
        source = pollers["satori-slurm"]
        wait_until(lambda: monitor.snapshot().environments[0].steps[0].phase == "running", "the pod to run", 60)
        wait_until(lambda: source.poll(force=True).steps[0].started_at is not None, "the Slurm job to start", 60)

        def watched_allocation() -> dict[str, tuple[int, int]]:
            nodes = monitor.snapshot().environments[0].nodes
            return {n.name: (n.gpus_total, n.gpus_allocated) for n in nodes if n.gpus_total}

        # Earlier tests' namespaces may still be going away: start from a cluster the watch has caught up with.
        wait_until(lambda: watched_allocation() == api_gpu_allocation(kube_env), "the watch to match the API", 60)
        api_before = api_gpu_allocation(kube_env)
        server = make_server(monitor.snapshot, "127.0.0.1", 0)
        serve_in_thread(server)
        port = server.server_address[1]
        try:
            dom = subprocess.run(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--dump-dom",
                    f"http://127.0.0.1:{port}/",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot.json", timeout=10) as response:
                data = json.loads(response.read())
        finally:
            server.shutdown()
            cache.stop()
        cells = {
            (m["env"], m["row"], m["field"]): m["value"]
            for m in re.finditer(
                r'data-env="(?P<env>[^"]*)" data-row="(?P<row>[^"]*)" data-field="(?P<field>[^"]*)" '
                r'data-value="(?P<value>[^"]*)"',
                dom,
            )
        }
        assert cells, dom[:2000]
        envs = {e["name"]: e for e in data["environments"]}
        # Node numbers: the page (rendered by Chromium), the JSON behind it, and the API agree.
        api = api_gpu_allocation(kube_env)
        assert api == api_before, "the cluster changed during the check; nothing to compare against"
        for node in envs["openshift"]["nodes"]:
            if node["gpus_total"]:
                total, held = api[node["name"]]
                assert cells[("openshift", node["name"], "gpus_total")] == str(total)
                assert cells[("openshift", node["name"], "gpus_free")] == str(total - held)
                assert cells[("openshift", node["name"], "gpus_allocated")] == str(node["gpus_allocated"])
        assert cells[("openshift", "web", "phase")] == "running"
        # An empty live cell says why on the page too: the pod runs on a KWOK node, no container ran.
        reasons = {
            (m["row"], m["field"]): m["reason"]
            for m in re.finditer(
                r'data-env="openshift" data-row="(?P<row>[^"]*)" data-field="(?P<field>[^"]*)" '
                r'data-value="" data-reason="(?P<reason>[^"]*)">',
                dom,
            )
        }
        for field in ("iterations_per_s", "cpu_percent", "memory_bytes", "gpu_util_percent"):
            assert reasons[("web", field)] == SIMULATED, (field, reasons)
        (step,) = envs["satori-slurm"]["steps"]
        assert (
            cells[("satori-slurm", "step-0", "job")] == job and cells[("satori-slurm", "step-0", "phase")] == "running"
        )
        assert cells[("satori-slurm", "step-0", "queue_wait_s")] == str(step["queue_wait_s"])
        for node, (total, held) in slurm_gpu_allocation(run).items():
            assert cells[("satori-slurm", node, "gpus_free")] == str(total - held)
    finally:
        run(f"scancel {job}")


# --- the Kubernetes side's live readings, as a project's user reads them ---------------------------

# A step's program: the training log's records (BigGAN's `itr`, `_stamp`) every second, with some CPU
# work between them, for ten minutes at most (the namespace is deleted long before).
STEP_PROGRAM = """
import json, os, time
os.makedirs('/files/logs', exist_ok=True)
for i in range(600):
    end = time.time() + 0.3
    while time.time() < end:
        pass
    with open('/files/logs/live_log.jsonl', 'a') as log:
        log.write(json.dumps({'itr': 10 * i, '_stamp': time.time()}) + '\\n')
    time.sleep(0.7)
"""


def live_step_objects(namespace: str, image: str) -> list[dict[str, Any]]:
    """A GPU step as Atlas places it on the local stack (the real node, a mock GPU), run under the
    real sampler, and the run's monitor (monitor_app.py, as RunMonitor runs it) beside it on a shared
    volume, behind a Service labelled as RunMonitor labels it. The sampler and the app come from a
    ConfigMap, as Atlas mounts its tools into an image it did not build (infra/telemetry/bundle.py)."""
    from infra.openshift.manifests.monitor import MONITOR_PORT
    from infra.telemetry.bundle import SAMPLER_FILES, sampler_file

    app = REPO_ROOT / "infra" / "openshift" / "monitor_app.py"
    files = [(f"infra/{name}", sampler_file(name)) for name in SAMPLER_FILES] + [("monitor_app.py", app)]
    tools = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tools", "namespace": namespace},
        "data": {f"f{i}": path.read_text() for i, (_, path) in enumerate(files)},
    }
    items = [{"key": f"f{i}", "path": target} for i, (target, _) in enumerate(files)]
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    mounts = [{"name": "tools", "mountPath": "/tools", "readOnly": True}, {"name": "files", "mountPath": "/files"}]
    small = {"cpu": "200m", "memory": "128Mi"}
    step = {
        "name": "step", "image": image, "securityContext": security, "volumeMounts": mounts,
        "env": [{"name": "PYTHONPATH", "value": "/tools"}],
        "command": ["python3", "-m", "infra.telemetry.sampler", "--out", "/files/telemetry/train.jsonl",
                    "--interval", "1", "--step", "train", "--", "python3", "-c", STEP_PROGRAM],
        "resources": {"limits": {**small, GPU: "1"}, "requests": {**small, GPU: "1"}},
    }
    monitor = {
        "name": "monitor", "image": image, "securityContext": security, "volumeMounts": mounts,
        "command": ["python3", "/tools/monitor_app.py", "--port", str(MONITOR_PORT), "--telemetry-dir",
                    "/files/telemetry", "--logs-dir", "/files/logs", "--experiment", "live", "--run", "1"],
        "ports": [{"name": "http", "containerPort": MONITOR_PORT}],
        "resources": {"limits": small, "requests": small},
    }
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train-live", "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"app": "train-live"}},
            "spec": {
                "restartPolicy": "Never",
                # As the local stack renders its GPU step (stacks/Pulumi.local.yaml's placement).
                "nodeSelector": {NODE_KIND_LABEL: "kubelet", "nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"},
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1001, "runAsGroup": 0,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [step, monitor],
                "volumes": [{"name": "tools", "configMap": {"name": "tools", "items": items}},
                            {"name": "files", "emptyDir": {}}],
            },
        }},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "monitor", "namespace": namespace,
                     "labels": {"app.kubernetes.io/component": "monitor", "atlas.dev/run": "1"}},
        "spec": {"selector": {"app": "train-live"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    return [tools, job, service]


def test_a_running_step_s_telemetry_is_read_through_the_run_s_monitor_with_a_project_s_rights_only(
    kube_env: Layout, namespace: str
) -> None:
    user = kube_user.ensure_project_user(kube_env, namespace, "researcher")
    for manifest in live_step_objects(namespace, f"{images.registry_host(kube_env)}/{LOCAL_BASE_IMAGE}"):
        apply(kube_env, manifest)
    outputs = {
        "atlas": {"stack": "h10", "workload": "probe", "run_id": "1",
                  "report": {"step": "train", "training_log": True}},
        "environments": {"openshift": {
            **kube_env_outputs(namespace, kube_env.api_url, [{"name": "train", "job": "train-live"}]),
            "run_id": "1", "monitor_url": f"http://monitor.{namespace}.svc/",
        }},
    }
    typed = read_stack_outputs(outputs)
    env = typed.environments["openshift"]
    assert isinstance(env, KubernetesOutputs)
    # The project's user: its namespace's `admin` role, nothing cluster-wide (no nodes, no other pods).
    client = KubeClient(kube_user.user_api(kube_env, user).resolved)
    cache = KubeCache(client, namespace)
    cache.start()
    live = KubeLive(client.get, namespace, "1", True, 1.0)
    monitor = Monitor(typed.run, {"openshift": KubeSource("openshift", env, cache, live)}, JobShape("probe", 1), 1.0)
    began = time.monotonic()
    try:
        def read() -> Any:
            (view,) = monitor.snapshot().environments
            steps = [s for s in view.steps if s.name == "train"]
            if steps and steps[0].cpu_percent is not None and steps[0].iterations_per_s is not None:
                return view, steps[0]
            return None

        view, train = wait_until(read, "the train step's telemetry and rate through the monitor", 180,
                                 detail=lambda: [s.reasons for s in monitor.snapshot().environments[0].steps])
    finally:
        cache.stop()
    assert not view.error and train.phase == "running" and train.node == NODE_NAME
    # The sampler's own readings of the step (read back through the same path by hand below), and the
    # rate between the training log's last two records: about 10 iterations a second.
    assert train.memory_bytes is not None and train.memory_bytes > 1 << 20
    assert train.iterations_per_s is not None and 5.0 < train.iterations_per_s < 20.0
    # The project's user may not read nodes: the mock GPU is not known, so the sampler's own reason
    # stands (no NVIDIA driver behind the mock device).
    assert train.gpu_util_percent is None and train.reasons.gpu_util_percent.startswith("not measured: ")
    assert train.reasons.cpu_percent == "" and train.reasons.iterations_per_s == ""
    from rich.console import Console

    from infra.monitor.render import terminal_view

    console = Console(record=True, width=220)
    console.print(terminal_view(monitor.snapshot()))  # the view a reader of `pytest -s` sees (docs/monitoring.md)
    proxied = client.get(f"/api/v1/namespaces/{namespace}/services/monitor:http/proxy/telemetry/train?tail=1")
    assert proxied["records"][-1]["type"] == "sample"
    # At most one read a second (the Service lookup once, then the step's file and the log), though
    # the wait above took a snapshot every half second.
    assert live.calls <= 1 + 2 * (int(time.monotonic() - began) + 1), live.calls


def test_the_estimate_counts_only_the_real_node_for_a_step_placed_there(kube_env: Layout, namespace: str) -> None:
    job = live_step_objects(namespace, "unused")[1]
    job["spec"]["suspend"] = True  # only its pod template matters: nothing runs
    apply(kube_env, job)
    outputs = read_stack_outputs({
        "atlas": {"stack": "h10", "workload": "probe", "run_id": "1"},
        "environments": {"openshift": kube_env_outputs(namespace, kube_env.api_url,
                                                       [{"name": "train", "job": "train-live"}])},
    })
    env = outputs.environments["openshift"]
    assert isinstance(env, KubernetesOutputs)
    cache = KubeCache(KubeClient(kube_env.kubeconfig), namespace)
    cache.list_all()
    monitor = Monitor(outputs.run, {"openshift": KubeSource("openshift", env, cache)}, JobShape("probe", 1), 30.0)
    (view,) = monitor.snapshot().environments
    estimate = view.estimate
    assert estimate is not None and estimate.counted_nodes == (NODE_NAME,), estimate
    api = api_gpu_allocation(kube_env)
    total, held = api[NODE_NAME]
    assert estimate.free_gpus == total - held
    # KWOK's GPU nodes are there, with free GPUs, and left out with why.
    kwok_gpu = [name for name in api if name.startswith("kwok-")]
    assert kwok_gpu and sum(t - h for n, (t, h) in api.items() if n in kwok_gpu) > 0
    assert "left out " in estimate.basis and f"{kwok_gpu[0]}" in estimate.basis
    assert "node selector atlas.dev/node-kind=kubelet: the node has no such label" in estimate.basis


# --- polling keeps to its interval under a 200-job run -------------------------------------------


def test_polling_keeps_to_the_interval_under_a_200_job_run(login: tuple[dict[str, Any], Runner]) -> None:
    info, run = login
    # Held: 200 real jobs in the queue without loading the 2-core machine.
    result = run(
        "mkdir -p ~/h10-monitor && cd ~/h10-monitor && "
        "for i in $(seq 200); do sbatch --parsable --hold -p debug -t 1 --wrap true || exit 1; done"
    )
    assert result.exit_code == 0, result
    ids = [line.split(";")[0] for line in result.stdout.split()]
    assert len(ids) == 200
    try:
        sent: list[tuple[float, str]] = []

        def counting(command: str) -> ssh.RemoteResult:
            sent.append((time.monotonic(), command))
            return run(command)

        interval = 2.0
        outputs = {
            "atlas": {"stack": "h10", "workload": "probe", "run_id": "1"},
            "environments": {"satori-slurm": hpc_env(info, "slurm", ids)},
        }
        monitor, _ = monitor_of(outputs, None, counting, interval, JobShape("probe", 1))
        server = make_server(monitor.snapshot, "127.0.0.1", 0)
        serve_in_thread(server)
        port = server.server_address[1]
        stop = time.monotonic() + 7.0
        snapshots: list[Snapshot] = []

        def reader() -> None:  # a live terminal redrawing, and a web page reloading, at once
            while time.monotonic() < stop:
                snapshots.append(monitor.snapshot())
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot.json", timeout=30):
                    pass
                time.sleep(0.05)

        threads = [threading.Thread(target=reader) for _ in range(3)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        server.shutdown()

        status = [t for t, c in sent if c.startswith(SQUEUE_QUERY)]
        polls = int(elapsed // interval) + 1
        assert 2 <= len(status) <= polls, (len(status), elapsed)
        assert len(sent) == 2 * len(status)  # one status query and one node/queue script per poll
        assert all(b - a >= interval for a, b in itertools.pairwise(status))
        # Each status query names every job: one batch, not one query per job.
        assert all(set(c.split(" -j ")[1].split(",")) == set(ids) for _, c in sent if c.startswith(SQUEUE_QUERY))
        last = snapshots[-1].environments[0]
        assert len(last.steps) == 200 and {s.native_state for s in last.steps} == {"PENDING"}
        assert {s.reason for s in last.steps} == {"JobHeldUser"}
        print(f"200 jobs, {elapsed:.1f} s, {len(snapshots)} snapshots: {len(sent)} scheduler commands")
    finally:
        run(f"scancel {' '.join(ids)}")
