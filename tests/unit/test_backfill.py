"""Backfill that yields: the objects and job scripts it declares, `atlas:backfill` validation, and
the `atlas:nodes:Backfill` component under Pulumi mocks (children, parents, what destroy removes)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.errors import AtlasConfigError
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.target import HpcTarget
from infra.nodes import backfill, backfill_apply
from infra.nodes.component import TYPE_TOKEN, Backfill, BackfillArgs, HpcBackfillTarget
from infra.nodes.settings import BackfillSettings, parse_backfill_settings
from infra.openshift.target import KubernetesTarget
from infra.workload.load import load_workload
from infra.workload.render import render_step
from tests.support import REPO_ROOT
from tests.unit.openshift_fixtures import RecordingMonitor, install_mocks

REPO = Path(__file__).resolve().parents[2]
PROBE = load_workload(REPO / "workloads" / "probe" / "workload.yaml")
SLURM = scheduler_for("slurm")


def work() -> backfill.BackfillWork:
    return backfill.work_for(PROBE, "openshift", "quay.io/atlas/probe:local", "Tesla-V100-SXM2-32GB")


def test_backfill_runs_the_workload_s_gpu_step_as_its_own_experiment() -> None:
    w = work()
    assert w.argv[:4] == ("python3", "-m", "workloads.probe", "train")
    # argparse keeps the last value: backfill never writes into the real run's experiment.
    assert w.argv[-2:] == ("--experiment_name", "probe-digits-backfill")
    assert (w.cpus, w.memory_mib, w.gpu_product) == (1, 2048, "Tesla-V100-SXM2-32GB")


def test_backfill_appends_the_step_s_resume_args_and_the_pipeline_does_not() -> None:
    w = work()
    resume = PROBE.step("train").resume_args
    assert resume[0] == "--resume" and "--save_every" in resume
    pipeline = render_step(PROBE, "train", "openshift").argv
    assert "--resume" not in pipeline
    assert w.argv == (*pipeline, *resume, "--experiment_name", "probe-digits-backfill")


def test_a_workload_without_resume_args_gets_none() -> None:
    # BigGAN-PyTorch's --resume fails where there are no weights yet: its train step declares none.
    biggan = load_workload(REPO / "workloads" / "biggan" / "workload.yaml")
    assert biggan.step("train").resume_args == ()
    w = backfill.work_for(biggan, "openshift")
    assert "--resume" not in w.argv
    assert w.argv == (*render_step(biggan, "train", "openshift").argv, "--experiment_name", w.experiment_name)


def test_each_slurm_copy_resumes_its_own_experiment() -> None:
    # The copies share a run folder: one checkpoint (and log) per copy, or a requeued one resumes another's.
    scripts = backfill.backfill_scripts(SLURM, work(), "satori-slurm", "runs/x", 3)
    for index, (_, script) in enumerate(scripts):
        (line,) = [line for line in script.splitlines() if "workloads.probe train" in line]
        argv = shlex.split(line[line.index("python3") :])
        assert argv[argv.index("--resume") :].count("--experiment_name") == 1
        assert argv[-2:] == ["--experiment_name", f"probe-digits-backfill-{index}"]
    # A command without an experiment name is left as it is.
    plain = backfill.BackfillWork(workload="w", argv=("sleep", "900"))
    assert backfill.slot_argv(plain, 1) == ("sleep", "900")


def test_the_priority_class_is_below_every_real_pod_and_never_preempts() -> None:
    pc = backfill.priority_class()
    assert pc["value"] < 0 and pc["preemptionPolicy"] == "Never" and pc["globalDefault"] is False


def test_backfill_pods_ask_one_gpu_each_at_low_priority_on_gpu_nodes() -> None:
    deployment = backfill.backfill_deployment(work(), 3)
    assert deployment["metadata"]["namespace"] == backfill.NAMESPACE and deployment["spec"]["replicas"] == 3
    spec = deployment["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == backfill.PRIORITY_CLASS
    (container,) = spec["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # The probe makes its own data: each copy runs the preparation steps first, then trains.
    assert container["command"][:2] == ["/bin/sh", "-c"]
    chain = container["command"][2]
    assert chain.index("workloads.probe make-hdf5") < chain.index("workloads.probe inception-moments")
    assert chain.index("workloads.probe inception-moments") < chain.index("exec python3 -m workloads.probe train")
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}


def test_a_workload_that_reads_outside_data_runs_its_gpu_step_alone() -> None:
    biggan = load_workload(REPO / "workloads" / "biggan" / "workload.yaml")
    work = backfill.work_for(biggan, "openshift", "img")
    assert work.prepare == ()
    (container,) = backfill.backfill_pod_spec(work)["containers"]
    assert container["command"] == ["python"] and container["args"][0] == "main.py"


def test_backfill_follows_the_runs_placement() -> None:
    placed = dataclasses.replace(work(), node_selector=(("atlas.dev/node-kind", "kubelet"),),
                                 tolerations=((("key", "x"), ("operator", "Exists")),))
    spec = backfill.backfill_pod_spec(placed)
    assert spec["nodeSelector"] == {"atlas.dev/node-kind": "kubelet", "nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}
    assert {"key": "x", "operator": "Exists"} in spec["tolerations"]


def test_slurm_backfill_scripts_go_to_the_preemptible_partition_one_gpu_each() -> None:
    scripts = backfill.backfill_scripts(SLURM, work(), "satori-slurm", "runs/local/satori-slurm/probe", 2)
    assert len(scripts) == 2 and len({name for name, _ in scripts}) == 2
    for name, script in scripts:
        assert f"#SBATCH --job-name={name}" in script
        assert "#SBATCH --partition=backfill" in script and "#SBATCH --gres=gpu:1" in script
        assert "--experiment_name probe-digits-backfill" in script


def test_submit_writes_each_script_and_submits_it_requeueable() -> None:
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        out = str(40 + len(commands)) if "sbatch --parsable" in command else ""
        return RemoteResult(command, 0, out, "")

    ids = backfill_apply.submit_backfill(
        SLURM, runner, "runs/x", backfill.backfill_scripts(SLURM, work(), "s", "runs/x", 2)
    )
    assert len(ids) == 2
    submits = [c for c in commands if "sbatch --parsable" in c]
    assert len(submits) == 2 and all("sbatch --parsable --requeue" in c for c in submits)
    writes = [c for c in commands if "<<'ATLAS_BACKFILL_EOF'" in c]
    assert len(writes) == 2 and all("#SBATCH --partition=backfill" in c for c in writes)


def test_stop_cancels_the_user_s_unfinished_backfill_jobs_through_the_scheduler() -> None:
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        listing = "61|RUNNING|None|atlas-backfill-0-x\n62|PENDING|Resources|atlas-backfill-1-x\n"
        return RemoteResult(command, 0, listing if command.startswith("squeue") else "", "")

    assert backfill_apply.stop_backfill(SLURM, runner) == ["61", "62"]
    assert commands[0].startswith('squeue -h -u "$USER" -p backfill ') and " -t all" not in commands[0]
    assert commands[1] == "scancel 61 62"
    listed = backfill_apply.backfill_jobs(SLURM, runner)
    assert [(j.job_id, j.state, j.reason) for j in listed] == [
        ("61", "RUNNING", "None"),
        ("62", "PENDING", "Resources"),
    ]
    assert " -t all " in commands[-1]


def test_a_scheduler_without_backfill_is_refused_saying_why() -> None:
    lsf = scheduler_for("lsf")
    with pytest.raises(backfill.BackfillError, match=r"no backfill on LSF: preemption is a queue the site defines"):
        backfill.backfill_scripts(lsf, work(), "satori", "runs/x", 1)
    with pytest.raises(backfill.BackfillError, match="no backfill on LSF"):
        backfill_apply.submit_backfill(lsf, lambda c: RemoteResult(c, 0, "", ""), "runs/x", [("n", "s")])


# --- atlas:backfill ------------------------------------------------------------------------------


def test_backfill_settings_defaults_and_disabled() -> None:
    assert parse_backfill_settings(None) is None
    assert parse_backfill_settings({"enabled": "false"}) is None
    assert parse_backfill_settings({}) == BackfillSettings(workload=None)
    parsed = parse_backfill_settings({"gpus": "2", "priority": -100, "environments": ["openshift"]})
    assert parsed is not None and (parsed.gpus, parsed.priority, parsed.environments) == (2, -100, ("openshift",))


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"gpu": 2}, "atlas:backfill: unknown key(s) gpu"),
        ({"gpus": 0}, "atlas:backfill.gpus"),
        ({"priority": 5}, "atlas:backfill.priority"),  # must stay below real pods (0)
        ({"namespace": "Not_A_Name"}, "atlas:backfill.namespace"),
        ({"environments": "openshift"}, "atlas:backfill.environments"),
        ("yes", "atlas:backfill: expected an object"),
    ],
)
def test_bad_backfill_settings_name_the_key(raw: Any, key: str) -> None:
    with pytest.raises(AtlasConfigError) as error:
        parse_backfill_settings(raw)
    assert str(error.value).startswith(key)


# --- the component -------------------------------------------------------------------------------


@pytest.fixture
def mocks() -> RecordingMonitor:
    return install_mocks()


def slurm_target(tmp_path: Path) -> HpcTarget:
    hosts = tmp_path / "known_hosts"
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIJQd0Xc8l5w6QxGZl7c0m3p9dZ5c1b8v3H0o7m6q2r8s"
    hosts.write_text(f"[127.0.0.1]:16022 ssh-ed25519 {key}\n")
    return HpcTarget(
        host="127.0.0.1",
        port=16022,
        user="atlas",
        scheduler="slurm",
        queue="normal",
        known_hosts=None,
        known_hosts_file=hosts,
        private_key_file=tmp_path / "id",
        remote_work_dir="atlas",
        poll_interval_s=2.0,
    )


@pulumi.runtime.test
def test_the_component_declares_priority_namespace_deployment_and_slurm_jobs_as_its_children(
    mocks: RecordingMonitor, tmp_path: Path, unit_kubeconfig: Path
) -> pulumi.Output[Any]:
    settings = BackfillSettings(workload="probe", gpus=2, namespace="atlas-backfill", priority=-20)
    target = KubernetesTarget("kubernetes", "atlas-local", unit_kubeconfig, None)
    component = Backfill(
        "backfill",
        BackfillArgs(
            settings,
            work(),
            "unit",
            kubernetes=target,
            hpc=(HpcBackfillTarget("satori-slurm", slurm_target(tmp_path)),),
        ),
    )

    def check(_: Any) -> None:
        names = {r.name: r for r in mocks.registered}
        assert names["backfill"].typ == TYPE_TOKEN
        for child in (
            "backfill-provider",
            "backfill-priority",
            "backfill-namespace",
            "backfill-deployment",
            "backfill-satori-slurm-scripts",
            "backfill-satori-slurm-0",
            "backfill-satori-slurm-1",
        ):
            assert f"{TYPE_TOKEN}$" in names[child].urn, f"{child} is not a child of the component"
        priority = names["backfill-priority"].inputs
        assert (priority["value"], priority["preemptionPolicy"]) == (-20, "Never")
        assert names["backfill-namespace"].inputs["metadata"]["name"] == "atlas-backfill"
        deployment = names["backfill-deployment"].inputs
        assert deployment["spec"]["replicas"] == 2
        assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "backfill-priority-0a1b2c3d"
        assert deployment["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
        job = names["backfill-satori-slurm-0"].inputs
        assert job["requested_queue"] == "backfill" and "#SBATCH --partition=backfill" in job["script"]
        assert job["run_dir"] == "atlas/unit/satori-slurm/backfill"

    ids = [i for job_ids in component.hpc_job_ids.values() for i in job_ids]
    return pulumi.Output.all(component.namespace, component.priority_class, component.deployment.metadata, *ids).apply(
        check
    )


# --- atlas:backfill in the stack's configuration -------------------------------------------------

STACK = {
    "workload": "probe",
    "openshift": {
        "flavour": "kubernetes",
        "namespace": "atlas-local",
        "kubeconfig": ".state/kubeconfig",
        "image": {"reference": "quay.io/atlas/probe:1"},
    },
}


def test_the_stack_config_carries_backfill_settings() -> None:
    from infra.config import parse_stack_config

    config = parse_stack_config("local", {**STACK, "backfill": {"gpus": 2}}, REPO_ROOT)
    assert config.backfill == BackfillSettings(workload=None, gpus=2)
    assert parse_stack_config("local", STACK, REPO_ROOT).backfill is None


@pytest.mark.parametrize(
    ("backfill_raw", "message"),
    [
        ({"workload": "resnet"}, "atlas:backfill.workload: 'resnet' is not a workload"),
        ({"environments": ["satori"]}, "atlas:backfill.environments: 'satori' cannot take backfill"),
        ({"gpu": 1}, "atlas:backfill: unknown key(s) gpu"),
    ],
)
def test_bad_backfill_config_stops_before_any_resource(backfill_raw: dict[str, Any], message: str) -> None:
    from infra.config import parse_stack_config

    with pytest.raises(AtlasConfigError) as error:
        parse_stack_config("local", {**STACK, "backfill": backfill_raw}, REPO_ROOT)
    assert str(error.value).startswith(message)
