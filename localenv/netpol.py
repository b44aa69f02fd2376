"""The local node's NetworkPolicy engine: kube-router's network-policy controller, a real one.

The bridge CNI (localenv/node_config.py) passes every pod's traffic through iptables
(bridge-nf-call-iptables) but enforces no NetworkPolicy itself. kube-router's controller does:
run with `--run-firewall=true --run-router=false --run-service-proxy=false` it only watches
pods, namespaces and NetworkPolicies and writes iptables chains (KUBE-ROUTER-*, KUBE-NWPLCY-*,
KUBE-POD-FW-*) and ipsets (KUBE-SRC-*, KUBE-DST-*) for the pods of its node (those whose host IP
is the node's), beside any CNI. It is built from its Go module by `scripts/bootstrap`
(infra/toolchain/tools.py). OpenShift enforces the same objects with OVN-Kubernetes.

kube-network-policies (the issue's first choice) cannot run on this machine's kernel: it needs
nftables' queue expression, and CONFIG_NFT_QUEUE is unset here (its rules are refused with ENOENT).

Its chains and ipsets are per machine, as kube-proxy's: one environment at a time runs it (the
first that starts; `/run/atlas/kube-router.owner` names it), and the others' pods run without
enforcement, which `up` and `status` say. `kube-router --cleanup-config` does not remove them in
v2.1.0 (it calls the controller's Cleanup on an empty controller, whose iptables and ipset
handlers are nil, so it lists nothing), and it would also flush every IPVS service on the machine;
so `cleanup` removes exactly the chains and sets named by kube-router's prefixes, in one
`iptables-restore --noflush` transaction (`cleanup_restore_input`, pure).

The pure parts (its command line, its RBAC, the cleanup's input) are tested table-driven in
tests/unit/test_localenv_netpol.py; tests/integration/test_network_policy_local.py shows a pod of
another namespace refused and the allowed path open on the real node.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from localenv import kube
from localenv.layout import Layout, Ports
from localenv.pki_files import NODE_NAME, Pki, kubeconfig_yaml
from localenv.procs import Daemon, LocalEnvError, wait_for

DAEMON = "kube-router"
BINARY = "kube-router"
OWNER_FILE = Path("/run/atlas/kube-router.owner")
# The client identity (localenv/pki_files.py CLIENTS) and the ClusterRole it is bound to.
USER = "atlas-kube-router"
ROLE = "atlas-kube-router"
# What it writes (pkg/controllers/netpol/network_policy_controller.go, v2.1.0).
CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-")
PACKAGES = ("ipset", "iptables")
READY_TIMEOUT_S = 60


def command(binary: Path, layout: Layout) -> list[str]:
    """kube-router as the node's policy engine only: no routes, no BGP, no service proxy
    (kube-proxy serves Services). No health or metrics port: its health server would listen on
    every interface, and it answers 200 from the start, before any sync (`hooked` is the check)."""
    return [
        str(binary),
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        f"--kubeconfig={kubeconfig_path(layout)}",
        f"--hostname-override={NODE_NAME}",
        "--health-port=0",
        "--metrics-port=0",
        "--v=1",
    ]


def kubeconfig_path(layout: Layout) -> Path:
    return layout.kube_dir / "kube-router.kubeconfig"


def rbac_objects() -> list[dict[str, Any]]:
    """Read-only access to what its informers list and watch (it starts the Services, Endpoints
    and EndpointSlices informers too, whichever controllers run, and waits for their caches)."""
    read = ["get", "list", "watch"]
    meta = {"name": ROLE, "labels": {"app.kubernetes.io/managed-by": "atlas-localenv"}}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                 "verbs": read},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]


def _is_ours(chain: str) -> bool:
    return chain.startswith(CHAIN_PREFIXES)


def cleanup_restore_input(filter_table: str) -> str:
    """`iptables-restore --noflush` input that removes kube-router's chains from `iptables-save
    -t filter`'s text and nothing else: the jumps to them from other chains deleted, then every
    one of them declared (which flushes it) and deleted. Empty when there is none."""
    chains: list[str] = []
    jumps: list[str] = []
    for line in filter_table.splitlines():
        if line.startswith(":"):
            name = line[1:].split()[0]
            if _is_ours(name):
                chains.append(name)
        elif line.startswith("-A "):
            words = shlex.split(line)
            owner = words[1]
            target = _target(words)
            if not _is_ours(owner) and target is not None and _is_ours(target):
                jumps.append("-D" + line[2:])
    if not chains and not jumps:
        return ""
    lines = ["*filter", *jumps, *(f":{c} - [0:0]" for c in chains), *(f"-X {c}" for c in chains), "COMMIT"]
    return "\n".join(lines) + "\n"


def _target(words: Sequence[str]) -> str | None:
    for flag in ("-j", "--jump", "-g", "--goto"):
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return None


def ipsets_to_destroy(names: Iterable[str]) -> list[str]:
    """The sets of `ipset list -n` that kube-router's controller made."""
    return [n for n in names if n.startswith(IPSET_PREFIXES)]


def _run(argv: Sequence[str], stdin: str | None = None) -> str:
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LocalEnvError(f"`{shlex.join(argv)}` exited {proc.returncode}; stdout: {proc.stdout.strip()!r}; "
                            f"stderr: {proc.stderr.strip()!r}")
    return proc.stdout


def filter_table() -> str:
    """This machine's iptables filter table as `iptables-save` writes it."""
    return _run(["iptables-save", "-t", "filter"])


def cleanup() -> int:
    """Remove kube-router's chains and ipsets from this machine, and its owner file; how many
    chains and sets there were. Chains first: a set still used by a rule cannot be destroyed."""
    restore = cleanup_restore_input(filter_table())
    if restore:
        _run(["iptables-restore", "--noflush"], stdin=restore)
    sets = ipsets_to_destroy(_run(["ipset", "list", "-n"]).split())
    for name in sets:
        _run(["ipset", "destroy", name])
    OWNER_FILE.unlink(missing_ok=True)
    return restore.count("\n-X ") + len(sets)


def daemon(layout: Layout) -> Daemon:
    return Daemon(DAEMON, layout.pids_dir, layout.logs_dir)


def owner() -> Path | None:
    """The state folder of the environment whose kube-router runs, if one does."""
    named = owner_named()
    if named is not None and daemon(Layout(named, Ports(0))).running():
        return named
    return None


def owner_named() -> Path | None:
    """The state folder the owner file names, whether or not its kube-router still runs."""
    try:
        return Path(OWNER_FILE.read_text().strip())
    except OSError:
        return None


def hooked(filter_table: str) -> bool:
    """Whether `iptables-save -t filter`'s text sends INPUT, FORWARD and OUTPUT through
    kube-router's chains: what each of its full syncs ensures first, the first one at its start."""
    jumps = set()
    for line in filter_table.splitlines():
        if line.startswith("-A "):
            words = shlex.split(line)
            target = _target(words)
            if target == f"KUBE-ROUTER-{words[1]}":
                jumps.add(words[1])
    return jumps == {"INPUT", "FORWARD", "OUTPUT"}


def start(layout: Layout, bins: Path, pki: Pki, say: Callable[[str], None], env: Mapping[str, str]) -> None:
    """Start kube-router's policy controller for this node (after the node registered: it reads its
    Node object for the node's IP), unless another environment runs this machine's."""
    process = daemon(layout)
    if process.running():
        return
    binary = bins / BINARY
    if not binary.exists():
        raise LocalEnvError(f"missing toolchain binary {BINARY} in {bins} (the node's NetworkPolicy engine): "
                            "run scripts/bootstrap")
    running_owner = owner()
    if running_owner is not None and running_owner != layout.state_dir:
        say(f"node: kube-router not started: the environment in {running_owner} runs this machine's (its "
            "iptables chains are per machine); NetworkPolicy is enforced there, not on this node's pods")
        return
    named = owner_named()
    if named is not None and named != layout.state_dir:
        removed = cleanup()  # its environment is gone (its kube-router does not run): its chains stay
        say(f"node: removed {removed} iptables chain(s) and ipset(s) of kube-router left by {named}")
    kubeconfig = kubeconfig_path(layout)
    kubeconfig.write_text(kubeconfig_yaml(layout.api_url, pki, "kube-router"))
    kube.kubectl(layout, "apply", "--server-side", "--force-conflicts", "--field-manager=atlas-localenv",
                 "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in rbac_objects()))
    say("node: starting kube-router's network-policy controller (NetworkPolicy enforcement)")
    OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)
    OWNER_FILE.write_text(f"{layout.state_dir}\n")
    process.start(command(binary, layout), env=env)
    wait_for(lambda: hooked(filter_table()),
             "kube-router's chains in INPUT, FORWARD and OUTPUT (its first policy sync)", READY_TIMEOUT_S, process)


def stop(layout: Layout, say: Callable[[str], None]) -> None:
    """Stop this environment's kube-router and remove its chains and sets (also when it died
    without `down`: the owner file still names this environment)."""
    if daemon(layout).stop():
        cleanup()
        say("node: stopped kube-router (its iptables chains and ipsets removed)")
    elif owner_named() == layout.state_dir:
        cleanup()
        say("node: removed the iptables chains and ipsets of this environment's kube-router (it had stopped "
            "without `down`)")


def status(layout: Layout) -> str:
    running_owner = owner()
    if running_owner == layout.state_dir:
        return "enforced by kube-router (this environment)"
    if running_owner is not None:
        return f"not enforced on this node's pods: the environment in {running_owner} runs this machine's kube-router"
    return "not enforced: kube-router is not running"

