"""A Pulumi program of your own that runs one workload on a Slurm cluster and on Kubernetes with
Atlas's components, built by hand from `pip install atlas-infra` (no Atlas stack configuration).

Configuration (`pulumi config set ...`, see README.md): loginHost, loginUser, knownHosts,
privateKey (secret), image; optional namespace, kubeconfig, context.
"""

from pathlib import Path

import pulumi

from infra.hpc import HpcEnvironment, HpcEnvironmentArgs, HpcTarget, workload_source_files
from infra.openshift import KubernetesTarget, OpenShiftEnvironment, OpenShiftEnvironmentArgs, openshift_settings
from infra.workload.load import load_workload

HERE = Path(__file__).resolve().parent
config = pulumi.Config()
stack = pulumi.get_stack()

workload = load_workload(HERE / "workload.yaml")
code = workload_source_files(workload, HERE)  # the files beside workload.yaml, staged on both sides

cluster = HpcEnvironment(
    "cluster",
    HpcEnvironmentArgs(
        target=HpcTarget(
            host=config.require("loginHost"),
            user=config.require("loginUser"),
            scheduler="slurm",
            # The login node's host key, checked (`ssh-keyscan -t ed25519 HOST`): never trusted on first use.
            known_hosts=config.require("knownHosts"),
        ),
        private_key=config.require_secret("privateKey"),
        workload=workload,
        environment="cluster",
        stack=stack,
        wait_for_steps=("make",),
        extra_files=code,
    ),
)

kubeconfig = config.get("kubeconfig")
kubernetes = OpenShiftEnvironment(
    "kubernetes",
    OpenShiftEnvironmentArgs(
        target=KubernetesTarget(
            flavour="kubernetes",
            namespace=config.get("namespace") or "atlas-example",
            kubeconfig_path=Path(kubeconfig) if kubeconfig else None,
            context=config.get("context"),
        ),
        stack=stack,
        workload=workload.name,
        definition=workload,
        # The keys of Atlas's `atlas:openshift`, with their defaults: Atlas's runtime image
        # (workloads/runtime/Containerfile) runs the staged code; no monitor for this small run.
        settings=openshift_settings(
            "kubernetes", image={"reference": config.require("image")}, monitor={"enabled": False}
        ),
        source_files=code,
    ),
)

pulumi.export("cluster", cluster.outputs)
pulumi.export("kubernetes", kubernetes.outputs)
