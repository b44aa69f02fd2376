"""Stand-up: `pulumi up` of the `local` stack against the script a competent user writes instead.

Both sides stand up the same run on the same local environment (the OpenShift side on the real
local node: kubelet, containerd and runc, mock GPUs, the image built by the BuildConfig runner
stand-in into the local registry; Satori through the LSF command set (stand-in) over a real Slurm,
reached over real OpenSSH), one after the other, ABBA order (each round the reverse of the one
before), `--rounds` rounds. Each timing starts with nothing of the run in place and ends when
the preparation steps have succeeded on both sides and the training step is submitted:

- atlas: `pulumi up --yes --skip-preview -s local` (`satori-slurm` disabled: the script drives
  LSF only). Inside the timing: the CLI, language host, program, plugins and diff; on the
  OpenShift side the namespace, quota, limits, service account, claims, ConfigMaps, ImageStream
  and BuildConfig (the runner builds from Git with buildah, layers cached, and pushes), the wait
  for the ImageStream's tag, the volume-preparation Job, the monitor (Deployment and Service,
  awaited until available), and the step Jobs, each awaited one until its pod Succeeded; on
  Satori one SSH login (paramiko), SFTP staging checked by sha256, one `bsub` per step chained by
  `-w "done(id)"`, and `bjobs` every 2 s until the preparation steps are DONE.
- script: what a person writes without Atlas, given Atlas's own objects and job scripts (taken
  from an untimed warm-up `pulumi up`; status, uids, resourceVersions, controller labels and
  selectors stripped, moved to the script's namespace). Its Kubernetes and HPC halves run
  concurrently, as Atlas's do:
  - Kubernetes: one `kubectl apply` of every object that is not a Job or the Deployment (in
    Atlas's creation order); `kubectl wait` on the ImageStream for the same jsonpath Atlas awaits
    (so the script builds its image the same way, through the same BuildConfig runner and the
    same layer cache, and uses the digest its own build pushed: it is not handed Atlas's image);
    then each staging Job applied and, where Atlas awaits it, followed with
    `kubectl get pods -l job-name=<job> -w` until its pod's phase is Succeeded (what Atlas's
    JobCompletion waits for; not `kubectl wait --for=condition=complete`, which the job
    controller answers about a second later); then the monitor's Deployment applied and
    `kubectl rollout status` in the background; then the step Jobs likewise; then the rollout.
  - HPC: one OpenSSH ControlMaster connection (ControlPersist) for every `ssh` and `scp` call of
    the run: `ssh mkdir -p`, one `scp -r` of the job scripts and the staged Python, one
    `ssh 'cd dir && bsub [-w "done(id)"] < script'` per step, then `ssh bjobs` every 2 s (Atlas's
    poll interval on this stack) until the preparation steps are DONE. The master's login is
    inside the timing; closing it (`ssh -O exit`) is not. Job scripts are Atlas's, with the run
    folder and job names changed, written to disk before the timing starts.

SSH logins are counted by the server (the "Accepted publickey" lines in the local sshd's log
during each timing), as bench/hpc_sweep.py does. Cleanup after every timing, outside it:
`pulumi destroy`, or `kubectl delete namespace`, `bkill` and `rm -rf` of the remote folder; the
released volumes are handed back to the pool before the next side starts. The JSON holds every
sample and the paired ratio script/atlas per round with a 95 % bootstrap interval (above 1:
Atlas stood the run up faster). The warm-up also times no-change `pulumi up`s, Atlas's fixed
cost per invocation: three while its train steps still run on this machine's cores (a pod and an
LSF job), then three once they have ended (on a real site the steps run on other machines).

Runs against the running local environment of ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE
(`scripts/localenv up` first: the Kubernetes side, the node and Satori), with its own Pulumi home
and backend and its own namespaces and remote folders; heavy, so under the shared lock:

    flock /tmp/atlas-heavy.lock .venv/bin/python -m bench.local_vs_script [--rounds 10] [--until HH:MM]
        [--out FILE]

Writes bench/results/local-vs-script-<date>.json (or --out); with --until (UTC), no round starts that
would end after that time by the last round's length, and the JSON says how many ran of how many.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import RESULTS, abba_order, machine, now_utc, paired_ratio, write_result
from localenv import kube, recycler, satori
from localenv.layout import Layout, default_layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift

STACK = "local"
HPC_ENV = "satori"  # LSF: the script is `ssh bsub`
SIDES = ("atlas", "script")
POLL_S = 2.0  # the stack's poll_interval_seconds: the script polls as often as Atlas does
STEP_TIMEOUT_S = 600
MONITOR_TIMEOUT_S = 180  # infra/openshift/manifests/monitor.py MONITOR_AWAIT_S
CONTROL_PERSIST_S = 600
KUBE_COMPLETION = "pulumi-python:dynamic/openshift:JobCompletion"
STAGING_PARENT = "atlas:openshift:DataStaging$"
MONITOR_PARENT = "atlas:openshift:RunMonitor$"
# The script's image reference is not known until its own build has pushed.
IMAGE_PLACEHOLDER = "@@SCRIPT-IMAGE@@"
DROP_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
    "finalizers",
    "ownerReferences",
)
DROP_ANNOTATIONS = re.compile(
    r"^(kubectl\.kubernetes\.io/last-applied-configuration|pv\.kubernetes\.io/|"
    r"volume\.beta\.kubernetes\.io/|volume\.kubernetes\.io/|"
    r"deployment\.kubernetes\.io/revision)"
)
# Set by the job controller on a Job and its pods; applying them again would be refused.
DROP_LABELS = frozenset(
    {"controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"}
)


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


# --- pure helpers (tests/unit/test_local_vs_script.py) -------------------------------------------


def mux_ssh_options(info: Mapping[str, Any], control_path: Path, persist_s: int = CONTROL_PERSIST_S) -> list[str]:
    """OpenSSH options for the local Satori's login node through one shared connection.

    Given as `-o` options only (port and user included), so `ssh` and `scp` take the same list:
    `ssh -p` and `scp -P` differ. The first call opens the master (one login); later calls ride
    on it until `ssh -O exit` or `persist_s` idle seconds."""
    options = {
        "IdentityFile": str(info["key_file"]),
        "Port": str(info["port"]),
        "User": str(info["user"]),
        "UserKnownHostsFile": str(info["known_hosts_file"]),
        "StrictHostKeyChecking": "yes",
        "BatchMode": "yes",
        "IdentitiesOnly": "yes",
        "ConnectTimeout": "10",
        "ControlMaster": "auto",
        "ControlPath": str(control_path),
        "ControlPersist": str(persist_s),
    }
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


def clean_object(
    obj: Mapping[str, Any],
    old_namespace: str,
    new_namespace: str,
    image: str | None = None,
    placeholder: str = IMAGE_PLACEHOLDER,
) -> dict[str, Any]:
    """A live object as `kubectl get -o json` returned it, made fit to apply anew in another
    namespace: what the server or a controller set (status, uid, versions, the controller's
    labels and selector, a claim's bound volume, a Service's addresses) is dropped, the old
    namespace's name is replaced wherever it appears, and `image` (Atlas's build) by `placeholder`
    (the script's own build, filled in once it pushed). The argument is left unchanged."""
    out: dict[str, Any] = copy.deepcopy(dict(obj))
    out.pop("status", None)
    md = out["metadata"]
    for key in DROP_METADATA:
        md.pop(key, None)
    md["annotations"] = {k: v for k, v in (md.get("annotations") or {}).items() if not DROP_ANNOTATIONS.match(k)}
    md["labels"] = {k: v for k, v in (md.get("labels") or {}).items() if k not in DROP_LABELS}
    kind, spec = out["kind"], out.get("spec") or {}
    if kind == "Namespace":
        out.pop("spec", None)  # only the finalizers the server sets
    if kind == "Job":
        spec.pop("selector", None)
        template_md = spec["template"].setdefault("metadata", {})
        template_md["labels"] = {k: v for k, v in (template_md.get("labels") or {}).items() if k not in DROP_LABELS}
    elif kind == "PersistentVolumeClaim":
        spec.pop("volumeName", None)
    elif kind == "ServiceAccount":
        out.pop("secrets", None)
    elif kind == "Service":
        for key in ("clusterIP", "clusterIPs"):
            spec.pop(key, None)
    text = json.dumps(out)
    if image:
        text = text.replace(json.dumps(image)[1:-1], placeholder)
    # As a JSON string's contents: the name is plain ASCII, so no escaping differs.
    text = re.sub(rf"(?<![A-Za-z0-9-]){re.escape(old_namespace)}(?![A-Za-z0-9-])", new_namespace, text)
    return dict(json.loads(text))


def with_image(obj: Mapping[str, Any], image: str, placeholder: str = IMAGE_PLACEHOLDER) -> dict[str, Any]:
    """`obj` with the script's own image wherever clean_object left the placeholder."""
    return dict(json.loads(json.dumps(obj).replace(placeholder, json.dumps(image)[1:-1])))


def script_job_text(text: str, atlas_run_dir: str, run_dir: str, job_name: str) -> str:
    """Atlas's LSF job script for the script's own run folder, under a job name of its own."""
    text = text.replace(atlas_run_dir, run_dir)
    return re.sub(r"^#BSUB -J \S+$", f"#BSUB -J {job_name}", text, flags=re.MULTILINE)


def build_cache(log_text: str) -> dict[str, int]:
    """How many of a buildah build's steps came from the layer cache, from its log: a commit to the
    build context between rounds (this working tree is shared) rebuilds the layers after it."""
    lines = log_text.splitlines()
    return {
        "steps": sum(1 for line in lines if re.match(r"STEP \d+/\d+:", line)),
        "cached": sum(1 for line in lines if line.startswith("--> Using cache ")),
    }


def pod_phase_verdict(line: str) -> str | None:
    """One line of `kubectl get pods -w -o jsonpath='{.metadata.name} {.status.phase}'`:
    'Succeeded' or 'Failed' when the pod ended so, None while it has not."""
    parts = line.split()
    if len(parts) == 2 and parts[1] in ("Succeeded", "Failed"):
        return parts[1]
    return None


def image_stream_tag(build_config: Mapping[str, Any]) -> tuple[str, str]:
    """The ImageStream and tag a BuildConfig pushes to (`spec.output.to.name`, `stream:tag`)."""
    to = build_config["spec"]["output"]["to"]
    if to.get("kind") != "ImageStreamTag":
        raise ValueError(
            f"BuildConfig {build_config['metadata']['name']}: output to {to.get('kind')}, not an ImageStreamTag"
        )
    stream, _, tag = str(to["name"]).partition(":")
    return stream, tag or "latest"


def pushed_reference(image_stream: Mapping[str, Any], tag: str) -> str | None:
    """The digest reference the newest push to `tag` recorded in an ImageStream's status."""
    for entry in (image_stream.get("status") or {}).get("tags") or []:
        if entry.get("tag") == tag and entry.get("items"):
            return str(entry["items"][0]["dockerImageReference"])
    return None


@dataclass(frozen=True)
class ScriptPlan:
    """What the script applies, in order, given Atlas's objects (already cleaned)."""

    base: list[dict[str, Any]]  # one `kubectl apply`: namespace, quota, ..., ImageStream, BuildConfig
    staging: list[dict[str, Any]]  # Jobs before the pipeline
    monitor: list[dict[str, Any]]  # the Deployment (its Service and ConfigMap are in base)
    pipeline: list[dict[str, Any]]  # the step Jobs
    awaited: frozenset[str]  # Job names Atlas follows with a JobCompletion


def plan(objects: Iterable[tuple[str, dict[str, Any]]], awaited: Iterable[str]) -> ScriptPlan:
    """Split (URN, object) pairs, in Atlas's creation order, into the script's phases."""
    base: list[dict[str, Any]] = []
    staging: list[dict[str, Any]] = []
    monitor: list[dict[str, Any]] = []
    pipeline: list[dict[str, Any]] = []
    for urn, obj in objects:
        kind = obj["kind"]
        if kind == "Job":
            (staging if STAGING_PARENT in urn else pipeline).append(obj)
        elif kind == "Deployment" and MONITOR_PARENT in urn:
            monitor.append(obj)
        else:
            base.append(obj)
    base.sort(key=lambda o: o["kind"] != "Namespace")  # stable: otherwise Atlas's order
    return ScriptPlan(base, staging, monitor, pipeline, frozenset(awaited))


def summarise(samples: Sequence[Mapping[str, Any]], rounds: int) -> dict[str, Any]:
    seconds = {side: [float(s["seconds"]) for s in samples if s["side"] == side] for side in SIDES}
    logins = {side: sorted({int(s["logins"]) for s in samples if s["side"] == side}) for side in SIDES}
    return {
        "rounds": rounds,
        "order": "ABBA (each round the reverse of the one before)",
        "median_s": {side: round(statistics.median(v), 2) for side, v in seconds.items()},
        "logins_per_run": logins,
        # Above 1: Atlas stood the run up in less time than the script.
        "script_over_atlas": paired_ratio(seconds["script"], seconds["atlas"]),
        "samples": list(samples),
    }


# --- the environment and the two sides ----------------------------------------------------------


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


class Mux:
    """The script's one SSH connection: a ControlMaster every ssh and scp call rides on."""

    def __init__(self, info: Mapping[str, Any], control_path: Path) -> None:
        self.host = str(info["host"])
        self.options = mux_ssh_options(info, control_path)

    def ssh(self, command: str) -> str:
        # A login shell, as for any interactive user: the LSF profile puts bsub on PATH.
        return run(["ssh", *self.options, self.host, f"bash -lc {shlex.quote(command)}"])

    def scp(self, local: Path, remote: str) -> None:
        run(["scp", "-q", "-r", *self.options, str(local), f"{self.host}:{remote}"])

    def close(self) -> None:
        subprocess.run(["ssh", *self.options, "-O", "exit", self.host], capture_output=True, timeout=30, check=False)


@dataclass
class ScriptRun:
    ns: str
    remote: str
    seconds: float = 0.0
    kube_s: float = 0.0
    hpc_s: float = 0.0
    job_ids: list[str] = field(default_factory=list)


class Script:
    def __init__(
        self,
        env: Env,
        objects: list[tuple[str, dict[str, Any]]],
        awaited: set[str],
        tree: Path,
        atlas_ns: str,
        atlas_remote: str,
    ) -> None:
        self.env = env
        self.objects = objects
        self.awaited = awaited
        self.tree = tree
        self.atlas_ns = atlas_ns
        self.atlas_run_dir = f"{atlas_remote}/{STACK}/{HPC_ENV}/probe"
        self.templates = {p.stem: p.read_text() for p in sorted((tree / ".atlas" / "jobs").glob("*.lsf"))}
        build_configs = [o for _, o in objects if o["kind"] == "BuildConfig"]
        streams = {o["metadata"]["name"]: o for _, o in objects if o["kind"] == "ImageStream"}
        if len(build_configs) != 1:
            raise SystemExit(f"expected one BuildConfig among Atlas's objects, found {len(build_configs)}")
        self.stream, self.tag = image_stream_tag(build_configs[0])
        atlas_image = pushed_reference(streams[self.stream], self.tag)
        if atlas_image is None:
            raise SystemExit(f"the warm-up's ImageStream {self.stream} has no image pushed to {self.tag}")
        self.atlas_image = atlas_image
        self.wait_for = str(streams[self.stream]["metadata"]["annotations"]["pulumi.com/waitFor"])

    def plan(self, ns: str) -> ScriptPlan:
        return plan(
            ((urn, clean_object(o, self.atlas_ns, ns, self.atlas_image)) for urn, o in self.objects), self.awaited
        )

    # The Kubernetes half.

    def wait_pod_succeeded(self, ns: str, job: str) -> None:
        """Follow the Job's pod with one watch until its phase is Succeeded (Failed: raise)."""
        argv = self.env.kubectl_argv(
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            f"job-name={job}",
            "-w",
            "-o",
            'jsonpath={.metadata.name} {.status.phase}{"\\n"}',
        )
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env.proj.env)
        timer = threading.Timer(STEP_TIMEOUT_S, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                verdict = pod_phase_verdict(line)
                if verdict == "Succeeded":
                    return
                if verdict == "Failed":
                    raise RuntimeError(f"job {job}: pod failed ({line.strip()})")
            raise RuntimeError(
                f"job {job}: the watch ended before its pod succeeded ({proc.stderr.read() if proc.stderr else ''})"
            )
        finally:
            timer.cancel()
            proc.kill()
            proc.wait()

    def apply_jobs(self, ns: str, jobs: list[dict[str, Any]], awaited: frozenset[str]) -> None:
        for job in jobs:
            self.env.kubectl("apply", "-f", "-", stdin=json.dumps(job))
            if job["metadata"]["name"] in awaited:
                self.wait_pod_succeeded(ns, job["metadata"]["name"])

    def kube_side(self, steps: ScriptPlan, ns: str) -> None:
        self.env.kubectl(
            "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": steps.base})
        )
        # The build the BuildConfig started: wait for the tag, as Atlas does, and take its digest.
        stream = json.loads(
            self.env.kubectl(
                "wait", "-n", ns, f"imagestream/{self.stream}", f"--for={self.wait_for}", "--timeout=900s", "-o", "json"
            )
        )
        image = pushed_reference(stream, self.tag)
        if image is None:
            raise RuntimeError(f"imagestream/{self.stream}: no image pushed to {self.tag}")
        self.apply_jobs(ns, [with_image(j, image) for j in steps.staging], steps.awaited)
        rollouts: list[subprocess.Popen[str]] = []
        for deployment in steps.monitor:
            self.env.kubectl("apply", "-f", "-", stdin=json.dumps(with_image(deployment, image)))
            rollouts.append(
                subprocess.Popen(
                    self.env.kubectl_argv(
                        "rollout",
                        "status",
                        "-n",
                        ns,
                        f"deployment/{deployment['metadata']['name']}",
                        f"--timeout={MONITOR_TIMEOUT_S}s",
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=self.env.proj.env,
                )
            )
        self.apply_jobs(ns, [with_image(j, image) for j in steps.pipeline], steps.awaited)
        for rollout in rollouts:
            out, err = rollout.communicate(timeout=MONITOR_TIMEOUT_S + 30)
            if rollout.returncode != 0:
                raise RuntimeError(f"monitor rollout: exit {rollout.returncode}: {out}{err}")

    # The HPC half.

    def write_job_scripts(self, local: Path, run_dir: str, tag: str) -> None:
        subprocess.run(["cp", "-a", str(self.tree / ".atlas"), str(local / ".atlas")], check=True)
        for step, text in self.templates.items():
            job_name = f"script-{step}-{tag}"
            (local / ".atlas" / "jobs" / f"{step}.lsf").write_text(
                script_job_text(text, self.atlas_run_dir, run_dir, job_name)
            )

    def hpc_side(self, mux: Mux, run_dir: str, local: Path, ids: list[str]) -> None:
        mux.ssh(f"mkdir -p ~/{run_dir}/logs ~/{run_dir}/telemetry")
        mux.scp(local / ".atlas", f"{run_dir}/")
        for step in ("make-hdf5", "inception-moments", "train"):
            dep = f" -w {shlex.quote(f'done({ids[-1]})')}" if ids else ""
            out = mux.ssh(f"cd ~/{run_dir} && bsub{dep} < .atlas/jobs/{step}.lsf")
            found = re.search(r"Job <(\d+)>", out)
            if found is None:
                raise RuntimeError(f"bsub of {step}: no job id in {out!r}")
            ids.append(found.group(1))
        prep = ids[:2]
        while True:
            states = mux.ssh(f"bjobs -noheader -o stat {' '.join(prep)}").split()
            if "EXIT" in states:
                raise RuntimeError(f"a preparation job failed: {prep} {states}")
            if states == ["DONE", "DONE"]:
                return
            time.sleep(POLL_S)

    def up(self, tag: str, scratch: Path, control_dir: Path) -> ScriptRun:
        result = ScriptRun(ns=f"script-bench-{tag}", remote=f"script-bench-{tag}")
        run_dir = f"{result.remote}/{STACK}/{HPC_ENV}/probe"
        local = scratch / tag
        local.mkdir(parents=True)
        self.write_job_scripts(local, run_dir, tag)
        steps = self.plan(result.ns)
        mux = Mux(self.env.info, control_dir / f"cm-{tag}")
        errors: list[BaseException] = []
        start = time.perf_counter()

        def kube_half() -> None:
            try:
                self.kube_side(steps, result.ns)
            except BaseException as error:  # noqa: BLE001 - raised again below
                errors.append(error)
            result.kube_s = time.perf_counter() - start

        thread = threading.Thread(target=kube_half)
        thread.start()
        try:
            self.hpc_side(mux, run_dir, local, result.job_ids)
            result.hpc_s = time.perf_counter() - start
        finally:
            thread.join()
            result.seconds = time.perf_counter() - start
            mux.close()
        if errors:
            raise errors[0]
        return result

    def clean(self, done: ScriptRun) -> None:
        namespace_gone(self.env, done.ns)
        if done.job_ids:
            self.env.ssh(f"bkill {' '.join(done.job_ids)} >/dev/null 2>&1 || true")
        self.env.ssh(f"rm -rf ~/{done.remote}")


# --- main ------------------------------------------------------------------------------------------


def check_environment(layout: Layout) -> str | None:
    """Why the environment cannot carry the bench, or None."""
    if not kube.status(layout)["ready"]:
        return "the local Kubernetes side is not running"
    if not satori.status(layout)["ssh"].get("running", False):
        return "the local Satori is not running"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, help="default: bench/results/local-vs-script-<date>.json")
    parser.add_argument(
        "--until",
        type=until_time,
        help="UTC time (HH:MM, today): start no round that the last one's length says would end after it",
    )
    args = parser.parse_args()
    layout = default_layout()
    problem = check_environment(layout)
    if problem:
        print(
            f"bench: {problem} in {layout.state_dir}: start it with `scripts/localenv up` "
            "(same ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE)",
            file=sys.stderr,
        )
        return 1
    say(f"local environment {layout.state_dir}, ports {layout.ports.base}+; {args.rounds} rounds")
    date = now_utc()
    # Short: ControlPath sockets must fit in 108 bytes.
    with tempfile.TemporaryDirectory(prefix="avs-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        result = bench(layout, tmp, args.rounds, args.until)
    result = {
        "bench": "local_vs_script",
        "date": date,
        "machine": machine(),
        "provenance": "local environment: OpenShift side on the real local node (kubelet, containerd, runc; mock "
        "GPUs; image built by the BuildConfig runner stand-in into the local registry); Satori: LSF's command "
        "set (stand-in) over a real Slurm, over real OpenSSH; the probe workload",
        "what": "stand-up: `pulumi up -s local` (OpenShift side + Satori LSF, preparation steps awaited) vs a "
        "script of kubectl apply/wait/watch + ssh/scp/bsub/bjobs over one ControlMaster connection",
        **result,
    }
    med = result["median_s"]
    ratio = result["script_over_atlas"]
    low, high = ratio["ci95"]
    verdict = "Atlas faster" if low > 1 else "Atlas slower" if high < 1 else "no clear winner"
    say(
        f"medians: atlas {med['atlas']:.2f} s, script {med['script']:.2f} s; script/atlas {ratio['median']:.3f} "
        f"(95 % CI {low:.3f} to {high:.3f}, {ratio['rounds']} rounds): {verdict}"
    )
    out = args.out or RESULTS / f"local-vs-script-{date[:10]}.json"
    write_result(result, out)
    say(f"wrote {out}")
    return 0


def until_time(text: str) -> dt.datetime:
    """`--until HH:MM`, today in UTC."""
    hour, _, minute = text.partition(":")
    return dt.datetime.now(dt.UTC).replace(hour=int(hour), minute=int(minute or 0), second=0, microsecond=0)


def bench(layout: Layout, tmp: Path, rounds: int, until: dt.datetime | None = None) -> dict[str, Any]:
    proj = PulumiProject.create(tmp / "pulumi")
    env = Env(layout, proj)
    remove_leftovers(env)
    try:
        return _bench(env, tmp, rounds, until)
    except BaseException:
        with contextlib.suppress(Exception):
            proj.run("destroy", "--yes", "-s", STACK, check=False)
            remove_leftovers(env)
        raise


def _bench(env: Env, tmp: Path, rounds: int, until: dt.datetime | None) -> dict[str, Any]:
    proj = env.proj
    started = time.perf_counter()

    def progress(text: str) -> None:
        elapsed = int(time.perf_counter() - started)
        say(f"[{elapsed // 60:02d}m{elapsed % 60:02d}s] {text}")

    warm_ns, warm_remote = configure(env, "warmup")
    proj.run("stack", "init", STACK)
    progress("warm-up pulumi up (untimed): the objects and job scripts the script is given")
    warm = atlas_up(env)
    objects, awaited = capture(env, warm_ns)
    capture_hpc_tree(env, warm_remote, tmp / "tree")
    script = Script(env, objects, awaited, tmp / "tree", warm_ns, warm_remote)
    kinds = sorted({o["kind"] for _, o in objects})
    progress(
        f"warm-up {warm:.1f} s; {len(objects)} Kubernetes objects ({', '.join(kinds)}), {len(awaited)} "
        f"awaited Jobs, {len(script.templates)} job scripts; Atlas's image {script.atlas_image}"
    )
    # This machine runs the workload too: right after the warm-up its train steps (one pod, one
    # LSF job) hold the cores Pulumi needs. Timed both ways; on a real site they run elsewhere.
    noop_during_steps = [atlas_up(env) for _ in range(3)]
    progress(f"no-change pulumi up, the warm-up's steps running: {', '.join(f'{t:.2f} s' for t in noop_during_steps)}")
    progress("waiting for the warm-up's steps to end (its Jobs complete, no unfinished LSF job)")
    steps_ended(env, warm_ns)
    noop = [atlas_up(env) for _ in range(3)]
    progress(f"no-change pulumi up, nothing else running: {', '.join(f'{t:.2f} s' for t in noop)}")
    atlas_clean(env, warm_ns, warm_remote)

    samples: list[dict[str, Any]] = []
    control_dir = tmp / "cm"
    control_dir.mkdir()
    sides: dict[str, Callable[[str], dict[str, Any]]] = {}

    def image_builds(ns: str, since: float) -> list[dict[str, int]]:
        """The BuildConfig runner's logs of this side's builds (kept in the state folder)."""
        folder = env.layout.state_dir / "builds" / ns
        logs = sorted(p for p in folder.glob("*.log") if p.stat().st_mtime >= since) if folder.is_dir() else []
        return [build_cache(p.read_text(errors="replace")) for p in logs]

    def atlas_side(tag: str) -> dict[str, Any]:
        ns, remote = configure(env, tag)
        since = time.time()
        elapsed = atlas_up(env)
        return {
            "seconds": elapsed,
            "image_builds": image_builds(ns, since),
            "_clean": lambda: atlas_clean(env, ns, remote),
        }

    def script_side(tag: str) -> dict[str, Any]:
        since = time.time()
        done = script.up(tag, tmp / "scratch", control_dir)
        return {
            "seconds": done.seconds,
            "kube_s": round(done.kube_s, 3),
            "hpc_s": round(done.hpc_s, 3),
            "image_builds": image_builds(done.ns, since),
            "_clean": lambda: script.clean(done),
        }

    sides = {"atlas": atlas_side, "script": script_side}
    done = 0
    last_round_s = 0.0
    stopped = None
    for index, order in enumerate(abba_order(SIDES, rounds)):
        round_started = time.perf_counter()
        if until is not None and index and dt.datetime.now(dt.UTC) + dt.timedelta(seconds=last_round_s) > until:
            stopped = f"stopped after {index} of {rounds} rounds: another would end after {until.isoformat()}"
            progress(stopped)
            break
        for side in order:
            progress(f"round {index + 1}/{rounds} {side}: starting")
            before = env.logins()
            sample = sides[side](f"{side[0]}{index}")
            logins = env.logins() - before
            clean = sample.pop("_clean")
            clean()
            sample = {"round": index, "side": side, **sample, "seconds": round(sample["seconds"], 3), "logins": logins}
            samples.append(sample)
            extra = (
                f" (kube half {sample['kube_s']:.2f} s, HPC half {sample['hpc_s']:.2f} s)" if side == "script" else ""
            )
            progress(f"round {index + 1}/{rounds} {side}: {sample['seconds']:.2f} s, {logins} login(s){extra}")
        last_round_s = time.perf_counter() - round_started
        done = index + 1
    proj.run("stack", "rm", "--yes", "--preserve-config", "-s", STACK)
    return {
        **summarise(samples, done),
        "rounds_planned": rounds,
        **({"stopped_early": stopped} if stopped else {}),
        "atlas_warmup_up_s": round(warm, 3),
        "atlas_noop_up_s": [round(t, 3) for t in noop],
        "atlas_noop_up_median_s": round(statistics.median(noop), 3),
        "atlas_noop_up_during_steps_s": [round(t, 3) for t in noop_during_steps],
        "kubernetes_objects": sorted(f"{o['kind']}/{o['metadata']['name']}" for _, o in objects),
        "awaited_jobs": sorted(awaited),
        "hpc_scheduler": "lsf (command-set stand-in over Slurm)",
    }


if __name__ == "__main__":
    raise SystemExit(main())
