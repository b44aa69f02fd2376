"""The `local` stack end to end with the real CLI: the OpenShift side on the local cluster
and Satori over SSH with LSF and with Slurm, in one `pulumi up` and one `pulumi destroy`.

Checked through the Kubernetes API and through the schedulers themselves (bjobs, squeue
over SSH), not through Pulumi's own view.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import uuid

import pytest

from infra.outputs import OUTPUTS_VERSION
from infra.toolchain.pins import REPO_ROOT
from localenv import kube, satori
from localenv.layout import Layout
from localenv.pki_files import NODE_NAME
from tests.e2e.pulumi_cli import PulumiProject, local_openshift
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.support import wait_until

pytestmark = pytest.mark.e2e
STACK = "local"
HPC_ENVIRONMENTS = ("satori", "satori-slurm")



def api(layout: Layout, path: str) -> dict | None:
    try:
        return kube.api_get(layout, path)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


@pytest.fixture
def stack(tmp_path, kube_env, satori_env):
    proj = PulumiProject.create(tmp_path)
    run = uuid.uuid4().hex[:6]
    ns = f"atlas-e2e-{run}"
    info = satori.status(satori_env)["ssh"]
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, ns)
    for name in HPC_ENVIRONMENTS:
        config["atlas:hpc"][name] = {
            **config["atlas:hpc"][name], "port": info["port"], "known_hosts_file": info["known_hosts_file"],
            "private_key_file": info["key_file"], "remote_work_dir": f"atlas-e2e-{run}",
        }
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    yield proj, ns, f"atlas-e2e-{run}"
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/atlas-e2e-{run}")


def sif_cache(proj: PulumiProject, *args: str) -> str:
    """`atlas sif-cache -s local ARGS` as a user runs it from the project's folder."""
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "sif-cache", "-s", STACK, *args], cwd=proj.root,
        env={**proj.env, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_one_up_one_destroy_for_every_side(stack, kube_env, satori_env):
    proj, ns, remote = stack

    preview = proj.run("preview", "--diff", "-s", STACK).stdout
    # Preview shows what will run: the job scripts themselves, for both schedulers.
    assert "#BSUB -J atlas-make-hdf5-" in preview
    assert "#SBATCH --job-name=atlas-train-" in preview
    assert "kubernetes:batch/v1:Job" in preview
    # The HPC steps run in the OpenShift side's image: each script's command is `apptainer exec`
    # (Pulumi prints each script line as a JSON string, the quotes escaped, cut after 150
    # characters: the command is on a line of its own, as in a bare script).
    exec_line = 'apptainer exec --nv --bind \\"$PWD\\" --pwd \\"$PWD\\" .atlas/image.sif \\"${atlas_command[@]}\\"'
    assert exec_line in preview
    assert "atlas_command=(python3 -m infra.telemetry.sampler --out telemetry/train.jsonl" in preview
    assert api(kube_env, f"/api/v1/namespaces/{ns}") is None

    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    outputs = proj.outputs(STACK)
    envs = outputs["environments"]
    assert set(envs) == {"openshift", *HPC_ENVIRONMENTS}
    assert outputs["atlas"] == {
        "version": OUTPUTS_VERSION,
        "stack": STACK,
        "workload": "probe",
        "definition": str(proj.root / "workloads" / "probe" / "workload.yaml"),
        "run_id": "1",
        "report": {"step": "train", "training_log": True, "throughput": None},
    }

    # OpenShift side: the namespace, and every step's Job on the cluster.
    assert envs["openshift"]["namespace"] == ns
    jobs = api(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    job_names = {j["metadata"]["name"] for j in jobs}
    for step in envs["openshift"]["steps"]:
        assert step["job"] in job_names
    # `up` returns once each preparation step's pod has succeeded (Atlas's JobCompletion); the Job
    # controller marks the Job Complete a moment later: the pods first, then that event.
    preparation = [j["metadata"]["name"] for j in jobs
                   if j["metadata"]["labels"].get("atlas.dev/step") in ("make-hdf5", "inception-moments")]
    assert len(preparation) == 2
    for name in preparation:
        pods = api(kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name={name}")["items"]
        assert [p["status"]["phase"] for p in pods] == ["Succeeded"], name

    def complete(name: str) -> bool:
        job = api(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs/{name}") or {}
        return any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"].get("conditions", []))

    for name in preparation:
        wait_until(lambda name=name: complete(name), f"the Job controller to mark {name} Complete", 60)

    # The training Job's pods run on the simulated V100 nodes, and only there.
    pods = api(kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector=atlas.dev/step=train")["items"]
    assert pods
    for pod in pods:
        node = api(kube_env, f"/api/v1/nodes/{pod['spec']['nodeName']}")
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-32GB"
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1"

    # One image on every side: the digest the build pushed is the one the pods ran and the one
    # both HPC environments converted (once: one SIF, one conversion record) and ran under Apptainer.
    image = envs["openshift"]["image"]
    assert "@sha256:" in image, image
    digest = image.split("@", 1)[1]
    # The containers that ran, on the real node: KWOK's simulated pods run nothing, so their
    # statuses carry no imageID (the training pods above are theirs).
    ran = [p for p in api(kube_env, f"/api/v1/namespaces/{ns}/pods")["items"]
           if p["spec"].get("nodeName") == NODE_NAME]
    assert ran, "no pod of the run ran on the real node"
    image_ids = {
        status["imageID"].rsplit("@", 1)[-1]
        for p in ran
        for status in p["status"].get("containerStatuses") or []
    }
    assert image_ids == {digest}, image_ids
    runtimes = {name: envs[name]["runtime"] for name in HPC_ENVIRONMENTS}
    for name, runtime in runtimes.items():
        assert (runtime["name"], runtime["digest"], runtime["image"]) == ("apptainer", digest, image), name
        assert runtime["version"] == "1.4.0" and runtime["arch"] == "amd64", runtime
        assert runtime["sif"].endswith(f"/.atlas/sif/sha256-{digest.removeprefix('sha256:')}.sif"), runtime
        assert runtime["conversion"]["seconds"] > 0, runtime
    assert runtimes["satori"]["sif"] == runtimes["satori-slurm"]["sif"]
    assert runtimes["satori"]["conversion"]["converted_at"] == runtimes["satori-slurm"]["conversion"]["converted_at"]
    assert [r["conversion"]["converted_now"] for r in runtimes.values()].count(True) <= 1
    script = ssh(satori_env, f"cat ~/{remote}/local/satori-slurm/probe/.atlas/jobs/train.sbatch")
    assert script.splitlines()[-1].startswith("apptainer exec "), script
    linked = ssh(satori_env, f"readlink -f ~/{remote}/local/satori/probe/.atlas/image.sif").strip()
    assert linked == runtimes["satori"]["sif"]
    # The cache as `scripts/sif-cache` shows it: this SIF, in use by this run's folders.
    sif_name = runtimes["satori"]["sif"].rsplit("/", 1)[1]
    listing = sif_cache(proj)
    line = next(line for line in listing.splitlines() if sif_name in line)
    assert line.rstrip().endswith("  in use") and "converted in" in line, listing

    # HPC sides: the schedulers know every job Atlas reports, and the preparation steps ran.
    lsf_ids = [s["job_id"] for s in envs["satori"]["steps"]]
    bjobs = json.loads(ssh(satori_env, "bjobs -a -o 'jobid stat exit_code job_name' -json " + " ".join(lsf_ids)))
    states = {r["JOBID"]: r["STAT"] for r in bjobs["RECORDS"]}
    assert states[lsf_ids[0]] == "DONE" and states[lsf_ids[1]] == "DONE"
    slurm_ids = [s["job_id"] for s in envs["satori-slurm"]["steps"]]
    squeue = ssh(satori_env, "squeue -h -t all -o '%i|%T' -j " + ",".join(slurm_ids))
    slurm_states = dict(line.split("|") for line in squeue.split())
    assert slurm_states[slurm_ids[0]] == "COMPLETED" and slurm_states[slurm_ids[1]] == "COMPLETED"
    # The probe really ran on the login node: its HDF5 exists in the LSF environment's run folder.
    listing = ssh(satori_env, f"find ~/{remote} -maxdepth 6")
    assert "data/digits/digits-8.hdf5" in listing, listing

    # A second up changes nothing and submits nothing.
    proj.run("preview", "--expect-no-changes", "-s", STACK)
    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    assert proj.outputs(STACK)["environments"]["satori"]["steps"] == envs["satori"]["steps"]
    count_after = len(ssh(satori_env, "squeue -h -t all -o %i").split())

    # Outside changes: the training Job deleted on the cluster, seen by refresh and recreated by up.
    train_job = next(s["job"] for s in envs["openshift"]["steps"] if s["name"] == "train")
    kube.kubectl(kube_env, "delete", "job", "-n", ns, train_job, "--wait=true")
    refresh = proj.run("refresh", "--yes", "-s", STACK).stdout
    assert "deleted" in refresh
    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    # Recreated (auto-named, so under a new name), and only the training Job.
    steps_now = {s["name"]: s["job"] for s in proj.outputs(STACK)["environments"]["openshift"]["steps"]}
    assert api(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs/{steps_now['train']}") is not None
    assert steps_now == {**{s["name"]: s["job"] for s in envs["openshift"]["steps"]}, "train": steps_now["train"]}
    proj.run("preview", "--expect-no-changes", "-s", STACK)
    assert len(ssh(satori_env, "squeue -h -t all -o %i").split()) == count_after, "nothing resubmitted"

    # New training arguments: only the training step is replaced, on every side.
    definition = proj.root / "workloads" / "probe" / "workload.yaml"
    text = definition.read_text()
    assert "--total_iters, 2000" in text
    definition.write_text(text.replace("--total_iters, 2000", "--total_iters, 1500"))
    before = proj.outputs(STACK)["environments"]
    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    after = proj.outputs(STACK)["environments"]
    for side, key in (("openshift", "job"), ("satori", "job_id"), ("satori-slurm", "job_id")):
        old_steps = {s["name"]: s[key] for s in before[side]["steps"]}
        new_steps = {s["name"]: s[key] for s in after[side]["steps"]}
        assert new_steps["train"] != old_steps["train"], side
        assert {k: v for k, v in new_steps.items() if k != "train"} == {
            k: v for k, v in old_steps.items() if k != "train"
        }, side

    proj.run("destroy", "--yes", "-s", STACK)
    wait_until(lambda: api(kube_env, f"/api/v1/namespaces/{ns}") is None, f"namespace {ns} to go after destroy", 60)
    # What was staged is gone; no job of this run is still pending or running.
    assert ssh(satori_env, f"ls ~/{remote}/local/satori/probe/.atlas/jobs 2>/dev/null | wc -l").strip() == "0"
    assert ssh(satori_env, "squeue -h -t pending,running -o %i").strip() == ""
    # Destroy removed the run directories' links to the SIF, not the SIF: a cache, not a resource.
    assert ssh(satori_env, f"test -L ~/{remote}/local/satori/probe/.atlas/image.sif || echo gone").strip() == "gone"
    assert ssh(satori_env, f"test -s {runtimes['satori']['sif']} && echo kept").strip() == "kept"
    # Pruning would remove it now that no run folder links to it (a dry run: other tests reuse it).
    pruned = sif_cache(proj, "prune", "--dry-run")
    assert "would remove:" in pruned and sif_name in pruned.split("would remove:", 1)[1], pruned
