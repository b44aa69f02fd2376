"""The local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, run as plain processes from the toolchain's binaries.

The API server runs with RBAC and service accounts; the controller manager gives Jobs,
ResourceQuota and garbage collection (pulumi-kubernetes deletes in the foreground); the
real scheduler places pods on KWOK's simulated GPU nodes, honouring taints, selectors
and extended resources (`nvidia.com/gpu`).
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.toolchain.pins import REPO_ROOT, load_pins, toolchain_dir
from localenv import crds, kwok, records, recycler
from localenv.layout import LOOPBACK, Layout
from localenv.pki import admin_api, ensure_pki
from localenv.pki_files import Pki, kubeconfig_yaml
from localenv.procs import Daemon, LocalEnvError, port_open, require_free_ports, wait_for

SERVICE_CIDR = "10.96.0.0/12"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


@dataclass(frozen=True)
class KubeSettings:
    """What `localenv up` can be told about the simulated cluster."""

    pod_run_seconds: float = 5.0
    gpu_nodes: int = 4
    cpu_nodes: int = 2


def kwok_stage_crd(kwok_module_dir: Path) -> kwok.Manifest:
    """KWOK's Stage CRD, only needed to run kwok with `--enable-crds=Stage` (Stages read from the
    API server) instead of `--config`. `kwok_module_dir` is `go list -m -f '{{.Dir}}'
    sigs.k8s.io/kwok`, e.g. ~/go/pkg/mod/sigs.k8s.io/kwok@v0.8.0."""
    path = kwok_module_dir / "kustomize" / "crd" / "bases" / "kwok.x-k8s.io_stages.yaml"
    crd = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path} does not hold a CustomResourceDefinition")
    return crd


def bin_dir() -> Path:
    path = toolchain_dir(load_pins()) / "bin"
    missing = [c for c in (*COMPONENTS, "kubectl") if not (path / c).exists()]
    if missing:
        raise LocalEnvError(f"missing toolchain binaries {', '.join(missing)} in {path}: run scripts/bootstrap")
    return path


def daemons(layout: Layout) -> dict[str, Daemon]:
    return {name: Daemon(name, layout.pids_dir, layout.logs_dir) for name in COMPONENTS}


def api_get(layout: Layout, path: str, timeout: float = 2.0) -> Any:
    """GET a path on the API server as the admin user: JSON decoded, or text (`/readyz`); an
    HTTP error is urllib's HTTPError."""
    return admin_api(layout, timeout).get_json_or_text(path)


def _readyz(layout: Layout) -> bool:
    try:
        return bool(api_get(layout, "/readyz") == "ok")
    except (OSError, urllib.error.URLError, ssl.SSLError, ValueError):
        return False


def kubectl(layout: Layout, *args: str, stdin: str | None = None) -> str:
    cmd = [str(bin_dir() / "kubectl"), "--kubeconfig", str(layout.kubeconfig), *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LocalEnvError(
            f"kubectl {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return proc.stdout


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def component_args(layout: Layout, pki: Pki, settings: KubeSettings) -> dict[str, list[str]]:
    p = layout.ports
    kd = layout.kube_dir
    etcd_url = f"http://{LOOPBACK}:{p.etcd_client}"
    peer_url = f"http://{LOOPBACK}:{p.etcd_peer}"
    return {
        "etcd": [
            "--name=atlas", f"--data-dir={kd / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=atlas={peer_url}",
            # A throwaway local cluster: durability is not worth an fsync per write.
            "--unsafe-no-fsync", "--quota-backend-bytes=2147483648", "--log-level=warn",
        ],
        "kube-apiserver": [
            f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}", f"--secure-port={p.apiserver}",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki.server_cert}", f"--tls-private-key-file={pki.server_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The real node's kubelet API (logs, exec, the service proxy's endpoints).
            f"--kubelet-client-certificate={pki.client_cert('apiserver-kubelet')}",
            f"--kubelet-client-key={pki.client_key('apiserver-kubelet')}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--allow-privileged=true",
            "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,"
            "ResourceQuota,Priority,DefaultTolerationSeconds,NodeRestriction",
        ],
        "kube-controller-manager": [
            f"--kubeconfig={kd / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={kd / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={kd / 'controller-manager.kubeconfig'}",
            f"--bind-address={LOOPBACK}", f"--secure-port={p.controller_manager}",
            f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_cert}",
            "--use-service-account-credentials=true", "--leader-elect=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # KWOK nodes have no kubelet to route or sign for.
            "--controllers=*,-nodeipam,-csrsigning,-csrapproving,-bootstrapsigner,-tokencleaner",
            "--concurrent-gc-syncs=5",
        ],
        "kube-scheduler": [
            f"--kubeconfig={kd / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={kd / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={kd / 'scheduler.kubeconfig'}",
            f"--bind-address={LOOPBACK}", f"--secure-port={p.scheduler}", "--leader-elect=false",
        ],
        "kwok": [
            f"--kubeconfig={kd / 'kwok.kubeconfig'}",
            f"--config={kd / 'kwok-stages.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address={LOOPBACK}:{p.kwok}",
            "--node-lease-duration-seconds=40",
        ],
    }


def _ports_of(layout: Layout) -> dict[str, int]:
    p = layout.ports
    return {
        "etcd": p.etcd_client, "etcd (peer)": p.etcd_peer, "kube-apiserver": p.apiserver,
        "kube-controller-manager": p.controller_manager, "kube-scheduler": p.scheduler, "kwok": p.kwok,
    }


def _component_port(name: str, layout: Layout) -> int:
    return _ports_of(layout)[name]


def up(layout: Layout, settings: KubeSettings, say: Callable[[str], None]) -> None:
    records.write_record(layout, REPO_ROOT)  # before any daemon: findable even if its folder goes
    bins = bin_dir()
    ds = daemons(layout)
    stages_file = layout.kube_dir / "kwok-stages.yaml"
    stages_text = yaml.safe_dump_all(kwok.kwok_stages(pod_run_seconds=settings.pod_run_seconds), sort_keys=False)
    if ds["kwok"].running() and (not stages_file.exists() or stages_file.read_text() != stages_text):
        # KWOK reads its stages at start: a new pod run time needs a restart.
        say("kubernetes: restarting kwok for the new pod run time")
        ds["kwok"].stop()
    stopped = [n for n, d in ds.items() if not d.running()]
    if not stopped and _readyz(layout):
        _start_recycler(layout, say)
        say("kubernetes: already running")
        return
    # Only ports of components we are about to start must be free.
    require_free_ports(
        {n: port for n, port in _ports_of(layout).items() if n.split(" ")[0] in stopped}
    )
    kd = layout.kube_dir
    pki = ensure_pki(kd / "pki")
    _write(layout.kubeconfig, kubeconfig_yaml(layout.api_url, pki, "admin"))
    for who in ("controller-manager", "scheduler", "kwok"):
        _write(kd / f"{who}.kubeconfig", kubeconfig_yaml(layout.api_url, pki, who))
    _write(stages_file, stages_text)
    args = component_args(layout, pki, settings)

    for name in COMPONENTS:
        daemon = ds[name]
        if daemon.running():
            continue
        say(f"kubernetes: starting {name}")
        env = None
        if name == "kwok":
            # KWOK also reads $KWOK_WORKDIR/kwok.yaml: keep a user's own file out of our cluster.
            env = {**os.environ, "KWOK_WORKDIR": str(kd / "kwok-workdir")}
        daemon.start([str(bins / name), *args[name]], env=env)
        if name == "etcd":
            wait_for(lambda: port_open(layout.ports.etcd_client), "etcd to listen", 30, daemon)
        elif name == "kube-apiserver":
            wait_for(lambda: _readyz(layout), "kube-apiserver /readyz", 90, daemon)
            _apply_cluster_objects(layout, settings, say)
        else:
            port = _component_port(name, layout)
            wait_for(lambda port=port: port_open(port), f"{name} to listen", 30, daemon)  # type: ignore[misc]
    _wait_nodes_ready(layout, settings, say)
    _start_recycler(layout, say)


def recycler_daemon(layout: Layout) -> Daemon:
    return Daemon("pv-recycler", layout.pids_dir, layout.logs_dir)


def _start_recycler(layout: Layout, say: Callable[[str], None]) -> None:
    # One round now, so volumes released while the cluster was down are free when `up` returns.
    recycled = recycler.recycle_once(layout)
    if recycled:
        say(f"kubernetes: {len(recycled)} released volume(s) made available again")
    daemon = recycler_daemon(layout)
    if not daemon.running():
        say("kubernetes: starting the volume recycler")
        daemon.start([sys.executable, "-m", "localenv.recycler", str(layout.state_dir),
                      str(layout.ports.apiserver)], cwd=REPO_ROOT)


def _apply_cluster_objects(layout: Layout, settings: KubeSettings, say: Callable[[str], None]) -> None:
    """CRDs, storage and nodes: server-side apply, so a second `up` changes nothing."""
    say("kubernetes: applying OpenShift CRDs, storage and KWOK nodes")
    objects: list[dict[str, Any]] = []
    objects += crds.openshift_crds()
    storage = kwok.storage_objects(layout.kube_dir / "volumes", rwo=16, rwx=8)
    for volume in storage:
        if volume["kind"] == "PersistentVolume":
            # Made here, not by the kubelet (root, 0755): pods run as an arbitrary non-root user in
            # group 0, as on OpenShift, so the group must be able to write.
            folder = Path(volume["spec"]["hostPath"]["path"])
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o775)
    objects += storage
    objects += kwok.gpu_nodes(settings.gpu_nodes) + kwok.cpu_nodes(settings.cpu_nodes)
    manifest = yaml.safe_dump_all(objects, sort_keys=False)
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "--field-manager=atlas-localenv",
            "-f", "-", stdin=manifest)


def _wait_nodes_ready(layout: Layout, settings: KubeSettings, say: Callable[[str], None]) -> None:
    want = settings.gpu_nodes + settings.cpu_nodes

    def ready() -> bool:
        try:
            nodes = api_get(layout, "/api/v1/nodes")["items"]
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
            for n in nodes
        ) >= want

    wait_for(ready, f"{want} KWOK nodes to be Ready", 60, daemons(layout)["kwok"])
    say(f"kubernetes: {want} nodes Ready ({settings.gpu_nodes} GPU, {settings.cpu_nodes} CPU)")


def down(layout: Layout, say: Callable[[str], None]) -> None:
    if recycler_daemon(layout).stop():
        say("kubernetes: stopped the volume recycler")
    for name in reversed(COMPONENTS):
        if daemons(layout)[name].stop():
            say(f"kubernetes: stopped {name}")


def reset(layout: Layout) -> None:
    """Forget the cluster's data (etcd) and what its pool volumes held (the volumes are made anew,
    Available, by the next `up`); certificates are kept."""
    shutil.rmtree(layout.kube_dir / "etcd", ignore_errors=True)
    shutil.rmtree(layout.kube_dir / "volumes", ignore_errors=True)


def status(layout: Layout) -> dict[str, Any]:
    ds = daemons(layout)
    running = {n: d.running() for n, d in ds.items()}
    running["pv-recycler"] = recycler_daemon(layout).running()
    return {
        "kubeconfig": str(layout.kubeconfig),
        "api_url": layout.api_url,
        "ready": all(running.values()) and _readyz(layout),
        "components": running,
    }
