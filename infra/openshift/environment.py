"""OpenShiftEnvironment: the project (or namespace) a workload runs in, and everything in it.

On OpenShift the project comes from a ProjectRequest; on plain Kubernetes (the local
cluster) it is a Namespace; with `project.create: false` it exists already. Inside it:
a ResourceQuota and a LimitRange sized from the workload, a ServiceAccount for the Jobs,
PVCs for data (RWX), results and logs, the image (image.py), the data staging Jobs
(staging.py), one Job per workload step (pipeline.py) and the monitor (monitor.py).

Without `definition` and `settings` only the project is declared (what the first local
stack does); `stacks/__main__.py` passes both for the full OpenShift side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.hpc.pipeline import StagedFile
from infra.openshift.cluster_access import cluster_access, cluster_provider
from infra.openshift.image import WorkloadImage, WorkloadImageArgs
from infra.openshift.manifests.labels import MANAGED_BY, SKIP_AWAIT, RunIdentity, check_label_value
from infra.openshift.manifests.network import network_policies
from infra.openshift.manifests.pods import PodContext, gpu_placement
from infra.openshift.manifests.project import limit_range_spec, project_request, pvc_spec, quota_hard, service_account
from infra.openshift.manifests.sweep_jobs import sweep_widths
from infra.openshift.manifests.volumes import (
    VOLUME_ROLES,
    Claims,
    SourceVolume,
    source_config_map_data,
    tools_config_map_name,
    volume_path,
)
from infra.openshift.monitor import RunMonitor, RunMonitorArgs
from infra.openshift.objects import KubernetesObject
from infra.openshift.pipeline import TrainingPipeline, TrainingPipelineArgs
from infra.openshift.settings import OpenShiftSettings, RequiredQuota
from infra.openshift.settings_parser import check_workload_fits
from infra.openshift.staging import DataStaging, DataStagingArgs
from infra.openshift.sweep_completion import sweep_outputs_from
from infra.openshift.target import KubernetesTarget
from infra.outputs import FilesAt, KubePlacement, KubernetesOutputs, KubeStep
from infra.telemetry.bundle import pod_tools
from infra.workload.model import Workload
from infra.workload.render import RenderedStep, render_steps, requested_gpus

# The key of this side in a workload definition's `overrides`.
ENVIRONMENT = "openshift"
# Off OpenShift, the UID the pods of an image Atlas did not build run as, in group 0 (Atlas's own
# images' USER): OpenShift would give them an arbitrary one; plain Kubernetes none but the image's.
ANY_IMAGE_UID = 1001


@dataclass
class OpenShiftEnvironmentArgs:
    target: KubernetesTarget
    stack: str
    workload: str
    labels: dict[str, str] = field(default_factory=dict)
    # The loaded workload definition (infra.workload.load_workload) and the parsed settings
    # (settings_parser.parse_openshift_settings); both or neither.
    definition: Workload | None = None
    settings: OpenShiftSettings | None = None
    # Labels every object `atlas.dev/run`; keep it stable between `up`s (it is part of every
    # Job's pod template, so a new value re-runs the pipeline). Default: the stack's name.
    run_id: str | None = None
    # The workload's code, for a workload that runs in Atlas's runtime image (no `build`): the files
    # the HPC side stages too (infra/hpc/components.py:workload_source_files), in one ConfigMap.
    source_files: tuple[StagedFile, ...] = ()
    # How many times a point of a sweep may run (the stack's atlas:sweep.max_attempts).
    sweep_max_attempts: int = 1


class OpenShiftEnvironment(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    api_url: pulumi.Output[str]
    # With a workload: its side of the outputs contract (infra.outputs.KubernetesOutputs, as a dict).
    outputs: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: OpenShiftEnvironmentArgs, opts: pulumi.ResourceOptions | None = None):
        target = args.target
        settings = args.settings
        self.staged_source = args.source_files
        self.sweep_max_attempts = args.sweep_max_attempts
        if (args.definition is None) != (settings is None):
            raise ValueError("OpenShiftEnvironmentArgs: pass both definition and settings, or neither")
        if args.sweep_max_attempts < 1:
            raise ValueError(
                f"atlas:sweep.max_attempts: {args.sweep_max_attempts} attempts; a point runs at least once "
                "(use 1 or more)"
            )
        run_id = check_label_value(args.run_id or args.stack, "run_id")
        identity = RunIdentity(
            stack=check_label_value(args.stack, "stack"), run_id=run_id, workload=args.workload
        )
        # Checked before anything is registered (this component included), so bad settings stop
        # `pulumi preview` with the message alone.
        steps: tuple[RenderedStep, ...] = ()
        needed: RequiredQuota | None = None
        if args.definition is not None and settings is not None:
            if settings.flavour != target.flavour:
                raise ValueError(f"settings are for {settings.flavour!r}, the target is {target.flavour!r}")
            steps = render_steps(args.definition, ENVIRONMENT)
            needed = check_workload_fits(
                settings, steps, [d.name for d in args.definition.data], sweep_widths(args.definition)
            )
        # The cluster as kubectl would find it (a context that is not there stops here).
        self.access = cluster_access(target)
        super().__init__("atlas:openshift:OpenShiftEnvironment", name, None, opts)

        labels = {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "atlas.dev/stack": args.stack,
            "atlas.dev/workload": args.workload,
            **({"atlas.dev/run": run_id} if settings is not None else {}),
            **args.labels,
        }
        self.provider = cluster_provider(f"{name}-provider", self.access, self)
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.namespace_resource: pulumi.CustomResource | None = None
        self.namespace = self._project(name, target, settings, labels)
        self.api_url = pulumi.Output.from_input(self.access.api_url)

        if args.definition is not None and settings is not None and needed is not None:
            self.outputs = self._workload(name, args.definition, settings, steps, needed, identity, target, child)
        else:
            # Only the project (no workload): not an environment of the outputs contract.
            self.outputs = pulumi.Output.all(namespace=self.namespace, api_url=self.api_url)
        self.register_outputs({"outputs": self.outputs})

    def _project(
        self, name: str, target: KubernetesTarget, settings: OpenShiftSettings | None, labels: dict[str, str]
    ) -> pulumi.Output[str]:
        if settings is not None and not settings.project.create:
            return pulumi.Output.from_input(target.namespace)
        if target.is_openshift:
            # A ProjectRequest is create-only on OpenShift (POST; no GET, PATCH or DELETE), so it
            # cannot go through server-side apply, which PATCHes: a provider with client-side
            # apply sends it as a plain create. See infra/openshift/README.md, "ProjectRequest: known limits".
            project_provider = cluster_provider(
                f"{name}-project-provider", self.access, self, server_side_apply=False
            )
            project = settings.project if settings is not None else None
            request = KubernetesObject(
                f"{name}-project",
                project_request(
                    target.namespace,
                    labels,
                    project.display_name if project else None,
                    project.description if project else None,
                ),
                opts=pulumi.ResourceOptions(parent=self, provider=project_provider),
            )
            self.namespace_resource = request
            return request.metadata.apply(lambda m: (m or {}).get("name") or target.namespace)
        # The namespace's name is the one the user configured, so it is set exactly.
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=target.namespace, labels=labels),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        self.namespace_resource = namespace
        return namespace.metadata.apply(lambda m: m.name or target.namespace)

    def _workload(
        self,
        name: str,
        workload: Workload,
        settings: OpenShiftSettings,
        steps: tuple[RenderedStep, ...],
        needed: RequiredQuota,
        identity: RunIdentity,
        target: KubernetesTarget,
        child: pulumi.ResourceOptions,
    ) -> pulumi.Output[dict[str, Any]]:
        """Everything a run needs in the project, in the order pods need it; its outputs."""
        constraints = self._constraints(name, settings, steps, needed, identity, child)
        claims = self._claims(name, settings, identity, constraints, child)
        component = pulumi.ResourceOptions(parent=self, providers={"kubernetes": self.provider})
        self.image = WorkloadImage(
            f"{name}-image",
            WorkloadImageArgs(workload, settings, identity, self.namespace, target.namespace),
            opts=component,
        )
        context = PodContext(
            identity=identity,
            namespace=self.namespace,
            image=self.image.image,
            service_account=self.service_account.metadata.name,
            claims=claims,
            workdir=settings.image.workdir or f"/opt/{workload.name}",
            openshift=settings.is_openshift,
            node_selector=dict(settings.placement.node_selector),
            tolerations=settings.placement.toleration_list(),
            source=self._source_volume(name, workload, identity, child),
            tools=self._tools_volume(name, settings, identity, child),
            run_as_uid=ANY_IMAGE_UID if settings.image.reference is not None and not settings.is_openshift else None,
        )
        before_pods = [*constraints, *self.image.ready, *self.tools_ready]
        # The Jobs' completions reach the API server as the provider does.
        access = self.access.completion
        self.staging = DataStaging(
            f"{name}-staging", DataStagingArgs(workload, settings, context, access, before_pods), opts=component
        )
        self.pipeline = TrainingPipeline(
            f"{name}-pipeline",
            TrainingPipelineArgs(
                workload, steps, settings, context, access, [*before_pods, *self.staging.ready],
                sweep_max_attempts=self.sweep_max_attempts,
            ),
            opts=component,
        )
        monitor_url: pulumi.Input[str] = ""
        if settings.monitor.enabled:
            # After the data is staged: the staging pod has then pulled the image, so a run whose
            # image cannot be pulled fails on its first Job, not ten minutes later on the
            # monitor Deployment's own await.
            self.monitor = RunMonitor(
                f"{name}-monitor",
                RunMonitorArgs(workload, settings, context, target.namespace, [*before_pods, *self.staging.ready]),
                opts=component,
            )
            monitor_url = self.monitor.url
        # Where the sampler and the training log write: a folder on one of the run's claims.
        files = {
            what: volume_path(workload, root)
            for what, root in (("telemetry", workload.telemetry.root), ("logs", workload.logs.root))
        }

        selector, tolerations = gpu_placement(
            dict(settings.placement.node_selector), settings.placement.toleration_list(), settings.gpu.product
        )

        def typed(values: dict[str, Any]) -> dict[str, Any]:
            return KubernetesOutputs(
                gpus_requested=requested_gpus(workload, ENVIRONMENT),
                run_id=identity.run_id,
                flavour=settings.flavour,
                namespace=values["namespace"],
                api_url=values["api_url"],
                image=values["image"],
                steps=tuple(kube_step(s) for s in values["steps"]),
                gpu_product=settings.gpu.product,
                telemetry=FilesAt(pvc=values["telemetry_pvc"], path=f"{files['telemetry'][1]}/"),
                logs=FilesAt(pvc=values["logs_pvc"], path=f"{files['logs'][1]}/"),
                monitor_url=values["monitor_url"],
                gpu_placement=KubePlacement(selector, tuple(tolerations)),
            ).to_dict()

        return pulumi.Output.all(
            namespace=self.namespace,
            api_url=self.api_url,
            image=self.image.image,
            steps=self.pipeline.steps,
            monitor_url=monitor_url,
            telemetry_pvc=claims.of(files["telemetry"][0]),
            logs_pvc=claims.of(files["logs"][0]),
        ).apply(typed)

    def _constraints(
        self,
        name: str,
        settings: OpenShiftSettings,
        steps: tuple[RenderedStep, ...],
        needed: RequiredQuota,
        identity: RunIdentity,
        child: pulumi.ResourceOptions,
    ) -> list[pulumi.Resource]:
        """What every pod needs to exist first: LimitRange defaults and quota apply only to pods
        created after them, a NetworkPolicy only to traffic after it."""
        namespace = self.namespace
        constraints: list[pulumi.Resource] = []
        if settings.quota.manage:
            self.quota = k8s.core.v1.ResourceQuota(
                f"{name}-quota",
                metadata={"namespace": namespace, "labels": identity.labels("quota")},
                spec={"hard": quota_hard(settings, needed)},
                opts=child,
            )
            self.limit_range = k8s.core.v1.LimitRange(
                f"{name}-limits",
                metadata={"namespace": namespace, "labels": identity.labels("quota")},
                spec=limit_range_spec(steps, settings),
                opts=child,
            )
            constraints += [self.quota, self.limit_range]

        # Our own ServiceAccount: a pod created right after its namespace can be refused before the
        # namespace's `default` ServiceAccount exists; this one is awaited by reference.
        account = service_account(identity.labels("jobs"), namespace)
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-jobs",
            metadata=account["metadata"],
            automount_service_account_token=account["automountServiceAccountToken"],
            opts=child,
        )
        # Before any pod: nothing reaches the run's pods but the monitor (manifests/network.py).
        self.network_policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{policy['metadata']['labels']['atlas.dev/policy']}",
                metadata=policy["metadata"],
                spec=policy["spec"],
                opts=child,
            )
            for policy in network_policies(settings, identity, namespace)
        ]
        return [*constraints, *self.network_policies]

    def _claims(
        self,
        name: str,
        settings: OpenShiftSettings,
        identity: RunIdentity,
        constraints: list[pulumi.Resource],
        child: pulumi.ResourceOptions,
    ) -> Claims:
        """The run's volumes: data (RWX), results and logs."""
        self.claims: dict[str, k8s.core.v1.PersistentVolumeClaim] = {}
        for role in VOLUME_ROLES:
            volume = getattr(settings.storage, role)
            self.claims[role] = k8s.core.v1.PersistentVolumeClaim(
                f"{name}-{role}",
                # Not awaited until Bound: the first Job's pod waits for its claims anyway, and its
                # completion fails, naming the claim, if one stays unbound (completion.py).
                metadata={
                    "namespace": self.namespace,
                    "labels": identity.labels(f"{role}-volume"),
                    "annotations": {SKIP_AWAIT: "true"},
                },
                spec=pvc_spec(volume),
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=constraints)),
            )
        return Claims(
            data=self.claims["data"].metadata.name,
            results=self.claims["results"].metadata.name,
            logs=self.claims["logs"].metadata.name,
        )

    def _source_volume(
        self, name: str, workload: Workload, identity: RunIdentity, child: pulumi.ResourceOptions
    ) -> SourceVolume | None:
        """For a workload that runs in Atlas's runtime image: its code in one ConfigMap, copied into
        each step's working directory by the image's entrypoint (SOURCE_DIR, manifests/volumes.py)."""
        if not workload.runs_in_runtime_image:
            return None
        files = [(f.path, f.source.read_bytes(), f.mode) for f in self.staged_source]
        data, items = source_config_map_data(files)
        self.source_config_map = k8s.core.v1.ConfigMap(
            f"{name}-source",
            metadata={"namespace": self.namespace, "labels": identity.labels("source")},
            binary_data=data,
            immutable=True,
            # Immutable: a changed folder is a new ConfigMap (and new Jobs), never an edit.
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(replace_on_changes=["binaryData"])),
        )
        return SourceVolume(self.source_config_map.metadata.name, items)

    def _tools_volume(
        self, name: str, settings: OpenShiftSettings, identity: RunIdentity, child: pulumi.ResourceOptions
    ) -> SourceVolume | None:
        """For an image Atlas did not build (`image.reference`): Atlas's entrypoint and sampler in one
        ConfigMap, mounted into each step (TOOLS_DIR, manifests/volumes.py). Atlas's own images carry
        both, built in from this repository, and their Jobs are as before.

        Named exactly, so the Jobs name it the same whatever it holds: a newer Atlas's sampler
        replaces the ConfigMap (deleted first, as its name is taken), never the Jobs, so an upgrade
        does not run a finished pipeline again; a step's pod started later mounts the new one."""
        self.tools_ready: list[pulumi.Resource] = []
        if settings.image.reference is None:
            return None
        data, items = source_config_map_data(pod_tools())
        self.tools_config_map = k8s.core.v1.ConfigMap(
            f"{name}-atlas-tools",
            metadata={
                "name": tools_config_map_name(identity),
                "namespace": self.namespace,
                "labels": identity.labels("atlas-tools"),
            },
            binary_data=data,
            immutable=True,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(replace_on_changes=["binaryData"], delete_before_replace=True)
            ),
        )
        # The name as written, not the resource's output: while a replacement is planned that output
        # is unknown, and the Jobs would show as changing in the preview. They wait for it instead.
        self.tools_ready.append(self.tools_config_map)
        return SourceVolume(tools_config_map_name(identity), items)


def kube_step(entry: dict[str, Any]) -> KubeStep:
    """One entry of the pipeline's `steps` (a swept step's with its `sweep`) as the outputs' KubeStep."""
    sweep = entry.get("sweep")
    return KubeStep(**{**entry, "sweep": sweep_outputs_from(sweep) if sweep is not None else None})
