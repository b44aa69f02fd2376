"""The script side of bench/local_vs_script.py: what a competent user writes instead of Atlas.

Given Atlas's own objects and job scripts (made fit for its own namespace and run folder by the
pure helpers here, tests/unit/test_local_vs_script.py), it applies them with kubectl and submits
the jobs over one OpenSSH ControlMaster connection, its Kubernetes and HPC halves at once.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.local_vs_script_env import HPC_ENV, POLL_S, STACK, Env, namespace_gone, run

STEP_TIMEOUT_S = 600
MONITOR_TIMEOUT_S = 180  # infra/openshift/manifests/monitor.py MONITOR_AWAIT_S
CONTROL_PERSIST_S = 600
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


def tag_pushed_condition(tag: str) -> str:
    """`kubectl wait --for=` that holds once a push to `tag` is recorded: what the script waits for
    (the ImageStream's tag, as Atlas did before it waited on the Build itself)."""
    return f'jsonpath={{.status.tags[?(@.tag=="{tag}")].items[0].image}}'


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
        self.wait_for = tag_pushed_condition(self.tag)

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
        # The build the BuildConfig started: wait for the tag and take its digest (Atlas waits on
        # the Build, which ends sooner only where the build fails: not in this bench).
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
