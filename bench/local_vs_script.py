"""`pulumi up` of the `local` stack against a hand-written script doing the same work.

Both sides, in the same run, alternating (the order flips every round), median of N each:
- atlas: `pulumi up --yes --skip-preview -s local` with the OpenShift side on the local cluster
  (KWOK) and Satori through LSF (`satori-slurm` disabled: the script is `kubectl apply` plus
  `ssh bsub`, like for like); everything Atlas does is inside the timing (program start,
  plugins, diff, SFTP staging checked by sha256, job submission, the awaited steps);
- script: what a person writes without Atlas, given the same objects and job scripts:
  Kubernetes and HPC halves run concurrently, as Atlas runs them.
  - Kubernetes: one `kubectl apply` of the namespace-level objects (namespace, quota, limits,
    service account, PVCs, monitor), then each Job in Atlas's order, `kubectl apply` and, for the
    Jobs Atlas awaits (those with a JobCompletion), `kubectl wait --for=condition=complete`
    before the next one: the way to wait for a Job that kubectl and its docs give. Atlas's
    completion ends on the pod's success instead, a second before the job controller posts
    Complete (infra/openshift/completion.py): that is Atlas's doing, and counted for it;
  - HPC: `ssh mkdir -p`, one `scp -r` of the job scripts and the staged Python, then one
    `ssh host 'cd dir && bsub [-w "done(id)"] < script'` per step, then `ssh bjobs` every 2 s
    (Atlas's poll interval on this stack) until the preparation steps are DONE.
  The objects are the ones Atlas created in an untimed warm-up run (`kubectl get -o json`,
  status, uids, resourceVersions, controller labels and selectors stripped, re-namespaced);
  the job scripts are the ones Atlas staged, with the run folder and job names changed.

Cleanup after every run, outside the timing: `pulumi destroy`, or `kubectl delete namespace`,
`bkill` of the training job and `rm -rf` of the remote folder.

Runs against the local environment of ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE (starting
what is not running and stopping it after), with its own Pulumi home and backend and its own
namespaces and remote folders; or, with --port-base, a fresh one in a temporary folder. As root:

    ATLAS_LOCALENV_DIR=$PWD/.state/test-localenv ATLAS_LOCALENV_PORT_BASE=18000 \
        .venv/bin/python bench/local_vs_script.py [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.localenv import kube, recycler, satori
from infra.localenv.layout import Layout, Ports, default_layout
from tests.e2e.pulumi_cli import PulumiProject

STACK = "local"
POLL_S = 2.0
KUBE_COMPLETION = "pulumi-python:dynamic/openshift:JobCompletion"
DROP_ANNOTATIONS = re.compile(r"^(kubectl\.kubernetes\.io/last-applied-configuration|pv\.kubernetes\.io/|"
                              r"volume\.beta\.kubernetes\.io/|volume\.kubernetes\.io/)")
DROP_LABELS = {"controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"}


def say(text: str) -> None:
    print(f"bench: {text}", flush=True)


def run(argv: list[str], env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


class Env:
    """The local environment the bench runs against, and the two sides' tools pointed at it."""

    def __init__(self, layout: Layout, proj: PulumiProject) -> None:
        self.layout = layout
        self.proj = proj
        self.info = satori.status(layout)["ssh"]

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return run(["kubectl", "--kubeconfig", str(self.layout.kubeconfig), *args], self.proj.env, stdin)

    def ssh(self, command: str) -> str:
        return run(satori.ssh_client_argv(self.info, command))

    def scp(self, local: Path, remote: str) -> None:
        info = self.info
        run(["scp", "-q", "-r", "-i", str(info["key_file"]), "-P", str(info["port"]),
             "-o", f"UserKnownHostsFile={info['known_hosts_file']}", "-o", "StrictHostKeyChecking=yes",
             "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", str(local),
             f"{info['user']}@{info['host']}:{remote}"])


# --- atlas -------------------------------------------------------------------------------------


def configure(env: Env, tag: str) -> tuple[str, str]:
    """Point the stack at a fresh namespace and remote folder; return both."""
    ns, remote = f"atlas-bench-{tag}", f"atlas-bench-{tag}"
    config = env.proj.stack_config(STACK)
    config["atlas:openshift"] = {**config["atlas:openshift"], "namespace": ns,
                                 "kubeconfig": str(env.layout.kubeconfig)}
    for name, hpc in list(config["atlas:hpc"].items()):
        config["atlas:hpc"][name] = {
            **hpc, "port": env.info["port"], "known_hosts_file": env.info["known_hosts_file"],
            "private_key_file": env.info["key_file"], "remote_work_dir": remote,
            "enabled": name == "satori",  # LSF only: the script is `ssh bsub`
        }
    env.proj.set_stack_config(STACK, config)
    return ns, remote


def atlas_up(env: Env) -> float:
    start = time.perf_counter()
    env.proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    return time.perf_counter() - start


def atlas_clean(env: Env, ns: str, remote: str) -> None:
    env.proj.run("destroy", "--yes", "-s", STACK)
    wait_namespace_gone(env, ns)
    env.ssh(f"rm -rf ~/{remote}")


def wait_namespace_gone(env: Env, ns: str) -> None:
    with contextlib.suppress(RuntimeError):
        env.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=120s")
    # The pool's volumes are Retain: hand the released ones back now (the recycler daemon would, on
    # its own round), or the next claim may wait for a volume.
    recycler.recycle_once(env.layout)


def remove_leftovers(env: Env) -> None:
    """Namespaces and folders of an earlier, interrupted bench run."""
    for ns in env.kubectl("get", "namespaces", "-o", "name").split():
        name = ns.split("/", 1)[1]
        if name.startswith(("atlas-bench-", "script-bench-")):
            wait_namespace_gone(env, name)
    env.ssh("rm -rf ~/atlas-bench-* ~/script-bench-*")


# --- what the script is given: Atlas's own objects and job scripts ------------------------------


def _clean_object(obj: dict[str, Any], ns: str) -> dict[str, Any]:
    obj.pop("status", None)
    md = obj["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink",
                "finalizers", "ownerReferences"):
        md.pop(key, None)
    md["annotations"] = {k: v for k, v in (md.get("annotations") or {}).items() if not DROP_ANNOTATIONS.match(k)}
    md["labels"] = {k: v for k, v in (md.get("labels") or {}).items() if k not in DROP_LABELS}
    kind, spec = obj["kind"], obj.get("spec") or {}
    if kind == "Namespace":
        md["name"] = ns
        obj.pop("spec", None)
    else:
        md["namespace"] = ns
    if kind == "Job":
        spec.pop("selector", None)
        tmd = spec["template"].setdefault("metadata", {})
        tmd["labels"] = {k: v for k, v in (tmd.get("labels") or {}).items() if k not in DROP_LABELS}
    elif kind == "PersistentVolumeClaim":
        spec.pop("volumeName", None)
    elif kind == "ServiceAccount":
        obj.pop("secrets", None)
    elif kind == "Service":
        for key in ("clusterIP", "clusterIPs"):
            spec.pop(key, None)
    return obj


def capture_objects(env: Env, ns: str) -> tuple[list[dict[str, Any]], set[str]]:
    """Every Kubernetes object the warm-up `pulumi up` created, as the cluster has it, and the
    names of the Jobs Atlas awaited."""
    resources = json.loads(env.proj.run("stack", "export", "-s", STACK).stdout)["deployment"]["resources"]
    awaited = {str((r.get("outputs") or {}).get("job_name")) for r in resources if r["type"] == KUBE_COMPLETION}
    objects = []
    for r in resources:
        if not r["type"].startswith("kubernetes:") or r.get("custom") is False or "providers" in r["type"]:
            continue
        out = r.get("outputs") or {}
        kind, api = out.get("kind"), out.get("apiVersion", "")
        name = (out.get("metadata") or {}).get("name")
        if not kind or not name:
            continue
        group, _, version = api.rpartition("/")
        resource = f"{kind}.{version}.{group}" if group else kind
        args = ["get", resource, name, "-o", "json"] + ([] if kind == "Namespace" else ["-n", ns])
        objects.append(json.loads(env.kubectl(*args)))
    objects.sort(key=lambda o: (o["kind"] != "Namespace", o["metadata"]["creationTimestamp"]))
    return objects, awaited


def capture_hpc_tree(env: Env, remote: str, into: Path) -> None:
    """What Atlas staged (job scripts, the probe's and the sampler's Python), as files here."""
    run_dir = f"{remote}/{STACK}/satori/probe"
    into.mkdir(parents=True)
    tar = subprocess.run(satori.ssh_client_argv(env.info, f"cd ~/{run_dir} && tar cf - .atlas/jobs .atlas/python"),
                         capture_output=True, timeout=60, check=True).stdout
    subprocess.run(["tar", "xf", "-", "-C", str(into)], input=tar, check=True)


# --- the hand-written script --------------------------------------------------------------------


class Script:
    def __init__(
        self, env: Env, objects: list[dict[str, Any]], awaited: set[str], tree: Path, atlas_remote: str
    ) -> None:
        self.env = env
        self.objects = objects
        self.awaited = awaited
        self.tree = tree
        self.atlas_run_dir = f"{atlas_remote}/{STACK}/satori/probe"
        scripts = sorted((tree / ".atlas" / "jobs").glob("*.lsf"))
        self.templates = {p.stem: p.read_text() for p in scripts}

    def kube_side(self, ns: str) -> None:
        objs = [_clean_object(json.loads(json.dumps(o)), ns) for o in self.objects]
        base = [o for o in objs if o["kind"] != "Job"]
        jobs = [o for o in objs if o["kind"] == "Job"]
        self.env.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": base}))
        for job in jobs:
            self.env.kubectl("apply", "-f", "-", stdin=json.dumps(job))
            if job["metadata"]["name"] in self.awaited:
                self.env.kubectl("wait", "-n", ns, "--for=condition=complete", "--timeout=600s",
                                 f"job/{job['metadata']['name']}")

    def hpc_side(self, remote: str, tag: str, local: Path) -> list[str]:
        run_dir = f"{remote}/{STACK}/satori/probe"
        # The job scripts for this folder, under names of their own.
        jobs_dir = local / ".atlas" / "jobs"
        for step, text in self.templates.items():
            text = text.replace(self.atlas_run_dir, run_dir)
            text = re.sub(r"^#BSUB -J \S+$", f"#BSUB -J script-{step}-{tag}", text, flags=re.M)
            (jobs_dir / f"{step}.lsf").write_text(text)
        self.env.ssh(f"mkdir -p ~/{run_dir}/logs ~/{run_dir}/telemetry")
        self.env.scp(local / ".atlas", f"{run_dir}/")
        ids: list[str] = []
        for step in ("make-hdf5", "inception-moments", "train"):
            dep = f" -w {shlex.quote(f'done({ids[-1]})')}" if ids else ""
            out = self.env.ssh(f"cd ~/{run_dir} && bsub{dep} < .atlas/jobs/{step}.lsf")
            ids.append(re.search(r"Job <(\d+)>", out).group(1))  # type: ignore[union-attr]
        prep = ids[:2]
        while True:
            stats = self.env.ssh(f"bjobs -noheader -o stat {' '.join(prep)}").split()
            if any(s == "EXIT" for s in stats):
                raise RuntimeError(f"a preparation job failed: {prep} {stats}")
            if stats == ["DONE", "DONE"]:
                return ids
            time.sleep(POLL_S)

    def up(self, tag: str, scratch: Path) -> tuple[float, str, str, list[str]]:
        ns, remote = f"script-bench-{tag}", f"script-bench-{tag}"
        local = scratch / tag
        (local / ".atlas").parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(self.tree / ".atlas"), str(local / ".atlas")], check=True)
        errors: list[BaseException] = []
        ids: list[str] = []

        def kube() -> None:
            try:
                self.kube_side(ns)
            except BaseException as error:  # noqa: BLE001 (reported below)
                errors.append(error)

        start = time.perf_counter()
        thread = threading.Thread(target=kube)
        thread.start()
        try:
            ids = self.hpc_side(remote, tag, local)
        finally:
            thread.join()
        elapsed = time.perf_counter() - start
        if errors:
            raise errors[0]
        return elapsed, ns, remote, ids

    def clean(self, ns: str, remote: str, ids: list[str]) -> None:
        wait_namespace_gone(self.env, ns)
        if ids:
            self.env.ssh(f"bkill {' '.join(ids)} >/dev/null 2>&1 || true")
        self.env.ssh(f"rm -rf ~/{remote}")


# --- main ------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port-base", type=int, default=None,
                        help="a fresh environment in a temporary folder on these ports; default: the "
                        "environment of ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="atlas-bench-vs-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)  # the login user reaches slurm.conf and the munge socket in here
        if args.port_base is None:
            # The environment of ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE: what is not running
            # is started here and stopped after, as the tests' fixtures do.
            layout = default_layout()
        else:
            layout = Layout(state_dir=tmp / "localenv", ports=Ports(args.port_base))
        say(f"local environment {layout.state_dir}, ports {layout.ports.base}+")
        started_kube = not kube.status(layout)["ready"]
        if started_kube:
            kube.up(layout, kube.KubeSettings(pod_run_seconds=3.0), lambda _line: None)
        started_satori = not satori.status(layout)["ssh"].get("running", False)
        try:
            if started_satori:
                satori.up(layout)
            result = bench(layout, tmp, args.rounds)
        finally:
            if started_satori:
                with contextlib.suppress(Exception):
                    satori.down(layout)
            if started_kube:
                kube.down(layout, lambda _line: None)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def bench(layout: Layout, tmp: Path, rounds: int) -> dict[str, Any]:
    proj = PulumiProject.create(tmp / "pulumi")
    env = Env(layout, proj)
    remove_leftovers(env)
    try:
        return _bench(env, tmp, rounds)
    except BaseException:
        with contextlib.suppress(Exception):
            proj.run("destroy", "--yes", "-s", STACK, check=False)
            remove_leftovers(env)
        raise


def _bench(env: Env, tmp: Path, rounds: int) -> dict[str, Any]:
    proj = env.proj
    configure(env, "warmup")
    proj.run("stack", "init", STACK)
    say("warm-up pulumi up (untimed): the objects and job scripts the script is given")
    warm = atlas_up(env)
    objects, awaited = capture_objects(env, "atlas-bench-warmup")
    capture_hpc_tree(env, "atlas-bench-warmup", tmp / "tree")
    script = Script(env, objects, awaited, tmp / "tree", "atlas-bench-warmup")
    say(f"warm-up {warm:.1f}s; {len(awaited)} awaited Jobs; {len(objects)} Kubernetes objects "
        f"({', '.join(sorted({o['kind'] for o in objects}))}), {len(script.templates)} job scripts")
    # Pulumi's fixed cost per invocation (CLI, language host, program, plugins, diff): a no-change up.
    noop = [atlas_up(env) for _ in range(3)]
    say(f"no-change pulumi up: {', '.join(f'{t:.2f}s' for t in noop)}")
    atlas_clean(env, "atlas-bench-warmup", "atlas-bench-warmup")

    times: dict[str, list[float]] = {"atlas": [], "script": []}
    for i in range(rounds):
        order = ("script", "atlas") if i % 2 == 0 else ("atlas", "script")
        for side in order:
            tag = f"{side[0]}{i}"
            if side == "atlas":
                ns, remote = configure(env, tag)
                elapsed = atlas_up(env)
                atlas_clean(env, ns, remote)
            else:
                elapsed, ns, remote, ids = script.up(tag, tmp / "scratch")
                script.clean(ns, remote, ids)
            times[side].append(elapsed)
            say(f"round {i + 1} {side}: {elapsed:.2f}s")
    proj.run("stack", "rm", "--yes", "-s", STACK)
    atlas_med, script_med = statistics.median(times["atlas"]), statistics.median(times["script"])
    return {
        "what": "pulumi up -s local (OpenShift on KWOK + Satori LSF, prep steps awaited) vs kubectl apply + ssh bsub",
        "rounds": rounds,
        "atlas_runs_s": [round(t, 2) for t in times["atlas"]],
        "script_runs_s": [round(t, 2) for t in times["script"]],
        "atlas_median_s": round(atlas_med, 2),
        "script_median_s": round(script_med, 2),
        "ratio_atlas_over_script": round(atlas_med / script_med, 3),
        "goal": "ratio <= 1.0",
        "atlas_noop_up_median_s": round(statistics.median(noop), 2),
        "atlas_minus_noop_over_script": round((atlas_med - statistics.median(noop)) / script_med, 3),
        "kubernetes_objects": len(objects),
    }


if __name__ == "__main__":
    raise SystemExit(main())
