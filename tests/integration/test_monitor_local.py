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
from infra.kinds import read_stack_outputs
from infra.monitor.build import Monitor
from infra.monitor.estimate import JobShape
from infra.monitor.hpc import HpcSource
from infra.monitor.hpc_view import HpcEnvironmentSource
from infra.monitor.kube import KubeCache, KubeClient
from infra.monitor.kube_view import KubeSource
from infra.monitor.model import Snapshot
from infra.monitor.serve import make_server, serve_in_thread
from infra.monitor.sources import EnvironmentSource
from infra.nodes.idle import find_underused
from infra.outputs import HpcOutputs, KubernetesOutputs
from localenv import kube, kwok, satori
from localenv.layout import Layout
from tests.support import wait_until

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
        (step,) = envs["satori-slurm"]["steps"]
        assert (
            cells[("satori-slurm", "step-0", "job")] == job and cells[("satori-slurm", "step-0", "phase")] == "running"
        )
        assert cells[("satori-slurm", "step-0", "queue_wait_s")] == str(step["queue_wait_s"])
        for node, (total, held) in slurm_gpu_allocation(run).items():
            assert cells[("satori-slurm", node, "gpus_free")] == str(total - held)
    finally:
        run(f"scancel {job}")


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
