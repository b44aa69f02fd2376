"""The running local environment both sides of bench/local_vs_script.py use, and the Atlas side's moves.

Pointing the stack at a fresh namespace and remote folder, `pulumi up` timed, cleanup, and the
capture of what Atlas created (its Kubernetes objects, its job scripts) for the script to be given.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from localenv import recycler, satori
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift

STACK = "local"
HPC_ENV = "satori"  # LSF: the script is `ssh bsub`
POLL_S = 2.0  # the stack's poll_interval_seconds: the script polls as often as Atlas does
KUBE_COMPLETION = "pulumi-python:dynamic/openshift:JobCompletion"


def say(text: str) -> None:
    print(f"bench: {text}", flush=True)


def run(
    argv: Sequence[str], env: Mapping[str, str] | None = None, stdin: str | None = None, timeout: float = 600
) -> str:
    """One command; its exit status, stdout and stderr in the error when it fails."""
    proc = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


class Env:
    """The running local environment, and the tools both sides use pointed at it."""

    def __init__(self, layout: Layout, proj: PulumiProject) -> None:
        self.layout = layout
        self.proj = proj
        status = satori.status(layout)
        self.info: dict[str, Any] = status["ssh"]
        self.sshd_log = Path(status["daemons"]["sshd"]["log"])

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 600) -> str:
        return run(["kubectl", "--kubeconfig", str(self.layout.kubeconfig), *args], self.proj.env, stdin, timeout)

    def kubectl_argv(self, *args: str) -> list[str]:
        return ["kubectl", "--kubeconfig", str(self.layout.kubeconfig), *args]

    def ssh(self, command: str) -> str:
        """A fresh connection: cleanup and capture only, never inside a timing."""
        return run(satori.ssh_client_argv(self.info, command))

    def logins(self) -> int:
        return self.sshd_log.read_text(errors="replace").count("Accepted publickey")


def configure(env: Env, tag: str) -> tuple[str, str]:
    """Point the stack at a fresh namespace and remote folder; return both."""
    ns = remote = f"atlas-bench-{tag}"
    config = env.proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], env.layout, ns)
    for name, hpc in list(config["atlas:hpc"].items()):
        config["atlas:hpc"][name] = {
            **hpc,
            "port": env.info["port"],
            "known_hosts_file": env.info["known_hosts_file"],
            "private_key_file": env.info["key_file"],
            "remote_work_dir": remote,
            "enabled": name == HPC_ENV,
        }
    env.proj.set_stack_config(STACK, config)
    return ns, remote


def atlas_up(env: Env) -> float:
    start = time.perf_counter()
    env.proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    return time.perf_counter() - start


def atlas_clean(env: Env, ns: str, remote: str) -> None:
    env.proj.run("destroy", "--yes", "-s", STACK)
    namespace_gone(env, ns)
    env.ssh(f"rm -rf ~/{remote}")


def namespace_gone(env: Env, ns: str) -> None:
    with contextlib.suppress(RuntimeError):
        env.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=180s")
    # The pool's volumes are Retain: hand the released ones back now (the recycler daemon would on
    # its own round), so the next side's claims never wait for a volume.
    recycler.recycle_once(env.layout)


def remove_leftovers(env: Env) -> None:
    """Namespaces, folders and jobs of an earlier, interrupted run of this bench."""
    for item in env.kubectl("get", "namespaces", "-o", "name").split():
        name = item.split("/", 1)[1]
        if name.startswith(("atlas-bench-", "script-bench-")):
            namespace_gone(env, name)
    env.ssh("rm -rf ~/atlas-bench-* ~/script-bench-*")


def steps_ended(env: Env, ns: str, timeout_s: int = 900) -> None:
    """Until every Job in `ns` has completed and the login user has no unfinished LSF job."""
    env.kubectl("wait", "--for=condition=complete", "job", "--all", "-n", ns, f"--timeout={timeout_s}s",
                timeout=timeout_s + 30)  # fmt: skip
    deadline = time.monotonic() + timeout_s
    # bjobs without a job id lists the user's unfinished jobs ("No unfinished job found" on stderr).
    while env.ssh("bjobs -noheader -o stat 2>/dev/null || true").split():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up's LSF jobs did not end in {timeout_s} s")
        time.sleep(POLL_S)


def capture(env: Env, ns: str) -> tuple[list[tuple[str, dict[str, Any]]], set[str]]:
    """Every Kubernetes object the warm-up `pulumi up` created, as the cluster has it, with its
    URN, in the state's order; and the names of the Jobs Atlas awaited."""
    resources = json.loads(env.proj.run("stack", "export", "-s", STACK).stdout)["deployment"]["resources"]
    awaited = {str((r.get("outputs") or {}).get("job_name")) for r in resources if r["type"] == KUBE_COMPLETION}
    objects = []
    for r in resources:
        if not r["type"].startswith("kubernetes:") or r["type"].startswith("pulumi:providers:"):
            continue
        out = r.get("outputs") or {}
        kind, api = out.get("kind"), out.get("apiVersion", "")
        name = (out.get("metadata") or {}).get("name")
        if not kind or not name:
            continue
        group, _, version = api.rpartition("/")
        resource = f"{kind}.{version}.{group}" if group else kind
        args = ["get", resource, name, "-o", "json"] + ([] if kind == "Namespace" else ["-n", ns])
        objects.append((str(r["urn"]), json.loads(env.kubectl(*args))))
    return objects, awaited


def capture_hpc_tree(env: Env, remote: str, into: Path) -> None:
    """What Atlas staged (job scripts, the probe's and the sampler's Python), as files here."""
    run_dir = f"{remote}/{STACK}/{HPC_ENV}/probe"
    into.mkdir(parents=True)
    tar = subprocess.run(
        satori.ssh_client_argv(env.info, f"cd ~/{run_dir} && tar cf - .atlas/jobs .atlas/python"),
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    subprocess.run(["tar", "xf", "-", "-C", str(into)], input=tar, check=True)
