"""The `atlas:openshift` object's pydantic models, validating it into settings.py's dataclasses; the workload checks.

`OpenShiftModel` here, its sections (project, quota, storage, gpu, image, data, pipeline, monitor,
placement) in section_models.py: each field with its type, default, description and example,
and the rules it follows, so the models are both the validator and the source of the reference
(docs/configuration.md). `parse_openshift_settings` validates the plain dict that
`pulumi.Config.get_object` returns and builds the frozen dataclasses of
`infra/openshift/settings.py` that the components take (many modules read those; the model is
what the stack file says, the dataclasses what the code uses, e.g. a quantity's value). Pure:
tested without an engine; every error names the full key and the fix.
`check_workload_fits` compares the settings with a workload's rendered steps (GPUs over the
quota, a GPU product, nodes per step) through `required_quota`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from infra.config_schema import (
    Bool,
    ConfigSection,
    KubeName,
    OneLine,
    Problem,
    reject_placeholders,
    validate_section,
)
from infra.openshift.section_models import (
    DEFAULT_SIZES,
    DataModel,
    GpuModel,
    ImageModel,
    MonitorModel,
    PipelineModel,
    PlacementModel,
    ProjectModel,
    QuotaModel,
    StorageModel,
    parse_data_source,
    parse_quantity,
)
from infra.openshift.settings import (
    LOCAL_BUILDER,
    DataSettings,
    GpuSettings,
    ImageBuild,
    ImageSettings,
    MonitorSettings,
    OpenShiftSettings,
    OpenShiftSettingsError,
    PipelineSettings,
    PlacementSettings,
    ProjectSettings,
    Quantity,
    QuotaSettings,
    RequiredQuota,
    S3Settings,
    StorageSettings,
    VolumeSettings,
    required_quota,
    shm_bytes,
)
from infra.validation import Fields
from infra.workload.render import RenderedStep

_fail = Fields(OpenShiftSettingsError).fail


def _flavour(value: Any) -> Any:
    if value not in ("kubernetes", "openshift"):
        raise Problem(f"expected one of kubernetes, openshift, found {value!r}", "use openshift or kubernetes")
    return value


class OpenShiftSettingsModel(ConfigSection):
    """`atlas:openshift`: the OpenShift (or plain Kubernetes) side: which cluster and project, how the run uses them."""

    enabled: Bool = Field(True, description="false: the section is not read and no OpenShift side is built.",
                          examples=[False])
    flavour: Annotated[
        Literal["openshift", "kubernetes"],
        BeforeValidator(_flavour),
    ] = Field("openshift", description="openshift (ProjectRequest, BuildConfig, Route, oauth-proxy) or kubernetes "
              "(Namespace, Ingress, a pre-built image).", examples=["kubernetes"])
    namespace: KubeName | None = Field(
        None, description="The project (namespace) the run lives in.", examples=["biggan-atlas"])
    kubeconfig: Annotated[str, OneLine()] | None = Field(
        None, description="The cluster's kubeconfig, relative to the project folder; default: KUBECONFIG, else "
        "~/.kube/config.", examples=["~/.kube/config"])
    context: Annotated[str, OneLine()] | None = Field(
        None, description="The kubeconfig context; default: its current one (`oc login` writes "
        "<namespace>/<api-host>:6443/<user>).", examples=["biggan/api-moc-example-org:6443/alex"])
    insecure_skip_tls_verify: Bool = Field(
        False, description="Accept a cluster whose kubeconfig entry skips TLS verification (refused otherwise).",
        examples=[True])
    project: ProjectModel = Field(default_factory=ProjectModel, description="The project itself.")
    quota: QuotaModel = Field(default_factory=QuotaModel, description="The project's ResourceQuota.")
    storage: StorageModel = Field(default_factory=StorageModel, description="The run's claims.")
    gpu: GpuModel = Field(default_factory=GpuModel, description="The GPUs the steps ask for.")
    image: ImageModel = Field(default_factory=ImageModel, description="The steps' image.")
    data: DataModel = Field(default_factory=DataModel, description="The data inputs' sources.")
    pipeline: PipelineModel = Field(default_factory=PipelineModel, description="How the steps run as Jobs.")
    monitor: MonitorModel = Field(default_factory=MonitorModel, description="The live monitor.")
    placement: PlacementModel = Field(default_factory=PlacementModel, description="Where the pods may land.")

    @model_validator(mode="after")
    def _fits_the_flavour(self) -> OpenShiftSettingsModel:
        if self.flavour != "openshift" and (self.project.display_name or self.project.description):
            raise Problem("display_name and description belong to an OpenShift ProjectRequest",
                          "remove them for a plain Kubernetes target", ".project")
        build, reference = self.image.build, self.image.reference
        if build is not None and self.flavour != "openshift" and build.builder != LOCAL_BUILDER:
            raise Problem(
                "a BuildConfig needs OpenShift's build API, and this target's flavour is plain Kubernetes",
                "build the image elsewhere and set {here}.image.reference instead (or, on Atlas's local cluster, whose "
                f"BuildConfig runner serves that API, set {{here}}.image.build.builder: {LOCAL_BUILDER})",
                ".image.build",
            )
        if build is not None and reference is not None:
            raise Problem("both build and reference are set",
                          "keep {here}.image.build (build on the cluster) or {here}.image.reference", ".image")
        if build is None and reference is None:
            fix = ("set {here}.image.build.git_uri (this repository, built by a BuildConfig) or "
                   "{here}.image.reference (a pre-built image)" if self.flavour == "openshift"
                   else "set {here}.image.reference to a pre-built image, e.g. quay.io/<org>/atlas-biggan:<tag>")
            raise Problem("no image source", fix, ".image")
        if self.monitor.proxy_image is not None and self.flavour != "openshift":
            raise Problem(
                "the oauth-proxy sidecar logs users in through OpenShift's OAuth server, which plain Kubernetes "
                "has not",
                "remove it (on Kubernetes the monitor is read through the API server's service proxy)",
                ".monitor.proxy_image")
        return self

    def settings(self, key_prefix: str) -> OpenShiftSettings:
        """The frozen dataclasses the components take, built from the validated model."""
        storage = self.storage
        volumes = {
            role: VolumeSettings(
                size=parse_quantity(volume.size or DEFAULT_SIZES[role], f"{key_prefix}.storage.{role}.size"),
                storage_class=volume.storage_class or storage.storage_class,
                access_mode=volume.access_mode,
            )
            for role, volume in (("data", storage.data), ("results", storage.results), ("logs", storage.logs))
        }
        build = self.image.build
        monitor = self.monitor
        return OpenShiftSettings(
            flavour=self.flavour,
            project=ProjectSettings(self.project.create, self.project.display_name, self.project.description),
            quota=QuotaSettings(
                manage=self.quota.manage, gpus=self.quota.gpus, cpu=_optional_quantity(self.quota.cpu),
                memory=_optional_quantity(self.quota.memory), storage=_optional_quantity(self.quota.storage),
                pvcs=self.quota.pvcs,
            ),
            storage=StorageSettings(**volumes),
            gpu=GpuSettings(product=self.gpu.product),
            image=ImageSettings(
                build=None if build is None else ImageBuild(
                    git_uri=build.git_uri, git_ref=build.git_ref, base_image=build.base_image,
                    cpu=parse_quantity(build.cpu, "cpu"), memory=parse_quantity(build.memory, "memory"),
                    await_image=build.await_image, timeout_seconds=build.timeout_seconds, builder=build.builder,
                ),
                reference=self.image.reference,
                workdir=self.image.workdir,
            ),
            data=DataSettings(
                sources=tuple(parse_data_source(name, url, name) for name, url in self.data.sources.items()),
                s3=S3Settings(self.data.s3.endpoint, self.data.s3.credentials_secret, self.data.s3.image),
                image=self.data.image,
                timeout_seconds=self.data.timeout_seconds,
            ),
            pipeline=PipelineSettings(
                self.pipeline.backoff_limit, _optional_quantity(self.pipeline.shm_size), self.pipeline.await_last_step
            ),
            monitor=MonitorSettings(
                enabled=monitor.enabled, await_ready=monitor.await_ready, host=monitor.host,
                ingress_class=monitor.ingress_class, image=monitor.image,
                **({} if monitor.proxy_image is None else {"proxy_image": monitor.proxy_image}),
            ),
            key_prefix=key_prefix,
            placement=PlacementSettings(
                tuple(sorted(self.placement.node_selector.items())),
                tuple(t.pairs() for t in self.placement.tolerations),
            ),
        )


class OpenShiftModel(OpenShiftSettingsModel):
    """`atlas:openshift` as a stack gives it: the settings and the target, whose namespace is required."""

    namespace: KubeName = Field(description="The project (namespace) the run lives in.", examples=["biggan-atlas"])


def _optional_quantity(text: str | None) -> Quantity | None:
    return None if text is None else parse_quantity(text, "quantity")




def parse_openshift_settings(raw: Mapping[str, Any], key_prefix: str, flavour: str | None = None) -> OpenShiftSettings:
    """Validate the OpenShift settings in `raw` (the `atlas:openshift` object, its target's keys
    allowed beside them) by `OpenShiftSettingsModel`. `key_prefix` starts every key in messages,
    e.g. "atlas:openshift". `flavour` defaults to raw's `flavour`."""
    # The example file (stacks/Pulumi.openshift-gpu.yaml) says above each placeholder how to fill it.
    if isinstance(raw, Mapping):
        reject_placeholders(raw, key_prefix, OpenShiftSettingsError,
                            "set it for your cluster (the comment above it says how)")
        if flavour is not None:
            raw = {**raw, "flavour": flavour}
    model = validate_section(OpenShiftSettingsModel, raw, key_prefix, OpenShiftSettingsError)
    return model.settings(key_prefix)


def openshift_settings(flavour: str, **keys: Any) -> OpenShiftSettings:
    """The settings of `OpenShiftEnvironmentArgs` for a program that builds them itself: the keys of a
    stack's `atlas:openshift` (project, quota, storage, gpu, image, data, pipeline, monitor,
    placement) as keyword arguments of plain values, with the same defaults and checks.
    `flavour` ("kubernetes" or "openshift") must be the target's; errors name `openshift.<key>`.

        openshift_settings("kubernetes", image={"reference": "quay.io/org/app:1"}, monitor={"enabled": False})
    """
    return parse_openshift_settings(keys, "openshift", flavour)


# ---------------------------------------------------------------------------------------------
# Checks against the workload


def check_workload_fits(
    settings: OpenShiftSettings,
    steps: Sequence[RenderedStep],
    data_inputs: Sequence[str],
    widths: Mapping[str, int] | None = None,
) -> RequiredQuota:
    """Raise (naming the key and the fix) where the workload cannot run under these settings;
    return what it needs. `data_inputs` are the workload's declared input names; `widths` how
    many pods of a swept step run at once (required_quota)."""
    prefix = settings.key_prefix
    for step in steps:
        if step.resources.nodes != 1:
            raise _fail(
                f"steps[{step.name}].resources.nodes",
                f"{step.resources.nodes} nodes; the OpenShift side runs a step as one pod",
                f"set overrides.openshift.{step.name}.resources.nodes: 1 in the workload definition",
            )
        memory = step.resources.memory_bytes
        if shm_bytes(step, settings) >= memory:
            raise _fail(
                f"{prefix}.pipeline.shm_size",
                f"shared memory would take all of step {step.name!r}'s {step.resources.memory} (it counts as memory)",
                "make it smaller than the step's memory",
            )
    for source in settings.data.sources:
        if source.input not in data_inputs:
            raise _fail(
                f"{prefix}.data.sources.{source.input}",
                "not a data input of the workload",
                f"use one of {', '.join(data_inputs) or '(none declared)'}",
            )
    needed = required_quota(steps, settings, widths)
    quota = settings.quota
    if quota.gpus is not None and needed.gpus > quota.gpus:
        width = dict(widths or {})
        greedy = max(steps, key=lambda s: s.resources.total_gpus * width.get(s.name, 1))
        at_once = width.get(greedy.name, 1)
        raise _fail(
            f"{prefix}.quota.gpus",
            f"step {greedy.name!r} asks for {needed.gpus} GPUs"
            + (f" ({at_once} points of its sweep at once)" if at_once > 1 else "")
            + f", over the quota of {quota.gpus}",
            f"raise {prefix}.quota.gpus to {needed.gpus} (if the cluster grants it) or lower the step's "
            f"gpus_per_node under overrides.openshift.{greedy.name}.resources"
            + (f" or its sweep's parallel (steps[{greedy.name}].sweep.parallel)" if at_once > 1 else ""),
        )
    checks = (
        ("cpu", quota.cpu, Decimal(needed.cpu_millis) / 1000, needed.cpu),
        ("memory", quota.memory, Decimal(needed.memory_bytes), needed.memory),
        ("storage", quota.storage, Decimal(needed.storage_bytes), needed.storage),
    )
    for field, granted, amount, text in checks:
        if granted is not None and amount > granted.value:
            raise _fail(
                f"{prefix}.quota.{field}",
                f"the workload needs {text} at its busiest, over the quota of {granted.text}",
                f"raise {prefix}.quota.{field} to at least {text}, or remove it to size it from the workload",
            )
    if quota.pvcs is not None and quota.pvcs < needed.pvcs:
        raise _fail(
            f"{prefix}.quota.pvcs",
            f"{quota.pvcs} is fewer than the {needed.pvcs} claims the run uses (its own and pvc:// sources)",
            f"set it to at least {needed.pvcs}",
        )
    return needed
