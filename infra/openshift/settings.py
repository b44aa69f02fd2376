"""The OpenShift side's own settings as frozen dataclasses, and the sizing derived from them.

The model of the `atlas:openshift` keys beside the ones `infra/config.py` reads for the target
(`enabled`, `flavour`, `namespace`, `kubeconfig`, `context`, `insecure_skip_tls_verify`):

    project:  {create, display_name, description}
    quota:    {manage, gpus, cpu, memory, storage, pvcs}
    storage:  {class, data: {size, class}, results: {size, class}, logs: {size, class}}
    gpu:      {product, check_product}
    placement: {node_selector: {<label>: <value>}, tolerations: [{key, operator, value, effect}]}
    image:    {build: {git_uri, git_ref, base_image, cpu, memory, await, timeout_seconds, builder}
               | reference, workdir}
    data:     {sources: {<workload input>: pvc://claim/path | https://... | s3://bucket/key},
               s3: {endpoint, credentials_secret, image}, image, timeout_seconds}
    pipeline: {backoff_limit, shm_size, await_last_step}
    monitor:  {enabled, await, host, ingress_class, image, proxy_image}

`infra/openshift/settings_parser.py` validates the keys into this model. What the model derives
lives here too, pure: `required_quota` (what a workload needs at its busiest, the quota's
default) and `shm_bytes` (a step's shared memory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from infra.errors import AtlasConfigError
from infra.workload.render import RenderedStep

# The local cluster's BuildConfig runner (localenv/builds.py), a stand-in for OpenShift's.
LOCAL_BUILDER = "atlas-local"
# The extended resource a pod asks GPUs by, and the node label NVIDIA's GPU feature discovery
# sets to the GPU's product (what `gpu.product` names).
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# Off OpenShift, the UID the pods of an image Atlas did not build run as, in group 0 (Atlas's own
# images' USER): OpenShift would give them an arbitrary one; plain Kubernetes none but the image's,
# which may be root, and runAsNonRoot refuses root.
ANY_IMAGE_UID = 1001


class OpenShiftSettingsError(AtlasConfigError):
    """An OpenShift setting that cannot be used; the message names the key and the fix."""


# ---------------------------------------------------------------------------------------------
# The typed settings


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes quantity as written (what the manifests carry) and its value (for checks)."""

    text: str
    value: Decimal

    @property
    def millis(self) -> int:
        return int(self.value * 1000)


@dataclass(frozen=True)
class ProjectSettings:
    # False: the project exists already (made by the cluster's admins); nothing creates or deletes it.
    create: bool
    display_name: str | None
    description: str | None


@dataclass(frozen=True)
class QuotaSettings:
    """What the ResourceQuota holds; None: sized from the workload (`required_quota`)."""

    # False: the cluster's admins own the project's quota (a project admin may not write
    # ResourceQuota or LimitRange); the values are then only checked against the workload.
    manage: bool
    gpus: int | None
    cpu: Quantity | None
    memory: Quantity | None
    storage: Quantity | None
    pvcs: int | None


@dataclass(frozen=True)
class VolumeSettings:
    size: Quantity
    storage_class: str | None  # None: the cluster's default StorageClass
    access_mode: str


@dataclass(frozen=True)
class StorageSettings:
    data: VolumeSettings
    results: VolumeSettings
    logs: VolumeSettings

    @property
    def total_bytes(self) -> Decimal:
        return self.data.size.value + self.results.size.value + self.logs.size.value


@dataclass(frozen=True)
class GpuSettings:
    product: str


@dataclass(frozen=True)
class PlacementSettings:
    """Node labels every pod of the run must land on (an OpenShift project's node selector,
    set per pod so it holds on plain Kubernetes too)."""

    node_selector: tuple[tuple[str, str], ...] = ()
    # Taints every pod tolerates (a cluster whose only nodes are tainted GPU nodes, like the local one).
    tolerations: tuple[tuple[tuple[str, str], ...], ...] = ()

    def toleration_list(self) -> list[dict[str, str]]:
        return [dict(t) for t in self.tolerations]


@dataclass(frozen=True)
class ImageBuild:
    """An OpenShift BuildConfig: this repository at `git_ref`, Docker strategy."""

    git_uri: str
    git_ref: str
    base_image: str | None
    cpu: Quantity
    memory: Quantity
    # Wait in `pulumi up` until the build pushed the tag; the Jobs then pull it by digest.
    await_image: bool
    timeout_seconds: int
    # Who serves build.openshift.io: OpenShift's build controller, or the local cluster's stand-in.
    builder: str = "openshift"


@dataclass(frozen=True)
class ImageSettings:
    build: ImageBuild | None
    reference: str | None  # a pre-built image; exactly one of build and reference is set
    workdir: str | None  # the image's WORKDIR; None: /opt/<workload name>


@dataclass(frozen=True)
class DataSource:
    """Where one workload data input comes from."""

    input: str  # the workload's data input name
    url: str
    scheme: str  # "pvc", "https", "http" or "s3"
    claim: str | None  # for pvc://
    path: str  # pvc: path inside the claim ("" = its root); s3: the key; http(s): the URL path


@dataclass(frozen=True)
class S3Settings:
    endpoint: str | None
    credentials_secret: str | None  # a Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
    image: str


@dataclass(frozen=True)
class DataSettings:
    sources: tuple[DataSource, ...]
    s3: S3Settings
    image: str | None  # for pvc:// and http(s):// sources; None: the workload image
    timeout_seconds: int


@dataclass(frozen=True)
class PipelineSettings:
    backoff_limit: int
    shm_size: Quantity | None  # None: a quarter of each step's memory, at most 16Gi
    await_last_step: bool


@dataclass(frozen=True)
class MonitorSettings:
    enabled: bool
    # False on clusters that cannot make the pods Ready or give Services endpoints (KWOK) or
    # fill an Ingress status (no controller): `pulumi.com/skipAwait` on Deployment, Service, Ingress.
    await_ready: bool
    host: str | None
    ingress_class: str | None
    image: str | None  # None: the workload image (it has Python)
    # OpenShift only: the oauth-proxy sidecar that puts the monitor behind the cluster's login.
    proxy_image: str = "quay.io/openshift/origin-oauth-proxy:4.16"


@dataclass(frozen=True)
class OpenShiftSettings:
    flavour: str
    project: ProjectSettings
    quota: QuotaSettings
    storage: StorageSettings
    gpu: GpuSettings
    image: ImageSettings
    data: DataSettings
    pipeline: PipelineSettings
    monitor: MonitorSettings
    key_prefix: str  # for messages raised later (check_workload_fits)
    placement: PlacementSettings = PlacementSettings()

    @property
    def is_openshift(self) -> bool:
        return self.flavour == "openshift"

    @property
    def run_as_uid(self) -> int | None:
        """The UID the run's pods are given (in group 0): ANY_IMAGE_UID for an image Atlas did not build,
        off OpenShift; None (the image's own USER, or OpenShift's arbitrary UID) otherwise."""
        return ANY_IMAGE_UID if self.image.reference is not None and not self.is_openshift else None


# ---------------------------------------------------------------------------------------------
# Sizing from the workload

# Requests of the small pods beside the steps (staging, monitor); the manifests use the same.
STAGING_CPU = Quantity("1", Decimal(1))
STAGING_MEMORY = Quantity("2Gi", Decimal(2) * 2**30)
MONITOR_CPU = Quantity("100m", Decimal("0.1"))
MONITOR_MEMORY = Quantity("128Mi", Decimal(128) * 2**20)
# OpenShift's oauth-proxy beside the monitor (a Go binary: about 30 MiB resident).
MONITOR_PROXY_CPU = Quantity("50m", Decimal("0.05"))
MONITOR_PROXY_MEMORY = Quantity("64Mi", Decimal(64) * 2**20)
MAX_DEFAULT_SHM = 16 * 2**30


@dataclass(frozen=True)
class RequiredQuota:
    """What the project must allow at its busiest moment, and which PVCs Atlas creates."""

    gpus: int
    cpu_millis: int
    memory_bytes: int
    storage_bytes: int
    pvcs: int

    @property
    def cpu(self) -> str:
        return f"{self.cpu_millis // 1000}" if self.cpu_millis % 1000 == 0 else f"{self.cpu_millis}m"

    @property
    def memory(self) -> str:
        return _binary_text(self.memory_bytes)

    @property
    def storage(self) -> str:
        return _binary_text(self.storage_bytes)


def _binary_text(value: int) -> str:
    for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def shm_bytes(step: RenderedStep, settings: OpenShiftSettings) -> int:
    """The shared-memory size for a step: tmpfs pages count against the container's memory limit, so a
    quarter of the step's memory (at most 16Gi) unless pipeline.shm_size says otherwise."""
    if settings.pipeline.shm_size is not None:
        return int(settings.pipeline.shm_size.value)
    return min(step.resources.memory_bytes // 4, MAX_DEFAULT_SHM)


def required_quota(
    steps: Sequence[RenderedStep], settings: OpenShiftSettings, widths: Mapping[str, int] | None = None
) -> RequiredQuota:
    """The busiest moment: the staging Jobs and the image build run together before the first
    step (the volumes' preparation at the least); the steps run one at a time, a swept step as
    many pods at once as its `widths` entry says (`sweep_widths`: its points, at most its
    `parallel`); the monitor runs throughout."""
    width = {s.name: (widths or {}).get(s.name, 1) for s in steps}
    before_cpu = len(settings.data.sources) * STAGING_CPU.millis
    before_memory = len(settings.data.sources) * int(STAGING_MEMORY.value)
    if settings.image.build is not None:
        before_cpu += settings.image.build.cpu.millis
        before_memory += int(settings.image.build.memory.value)
    # At the least the volumes' preparation pod, which every run starts first (staging.py): without
    # a build or a source (an `image.reference`), nothing else made room for it, and the API refused it.
    before_cpu = max(before_cpu, STAGING_CPU.millis)
    before_memory = max(before_memory, int(STAGING_MEMORY.value))
    step_cpu = max((s.resources.cpus_per_task * 1000 * width[s.name] for s in steps), default=0)
    step_memory = max((s.resources.memory_bytes * width[s.name] for s in steps), default=0)
    monitor_cpu = monitor_memory = 0
    if settings.monitor.enabled:
        monitor_cpu, monitor_memory = MONITOR_CPU.millis, int(MONITOR_MEMORY.value)
        if settings.is_openshift:
            monitor_cpu += MONITOR_PROXY_CPU.millis
            monitor_memory += int(MONITOR_PROXY_MEMORY.value)
    return RequiredQuota(
        gpus=max((s.resources.total_gpus * width[s.name] for s in steps), default=0),
        cpu_millis=max(before_cpu, step_cpu) + monitor_cpu,
        memory_bytes=max(before_memory, step_memory) + monitor_memory,
        storage_bytes=int(settings.storage.total_bytes),
        # A pvc:// source is a claim in the same project: it counts against the same quota.
        pvcs=3 + len({s.claim for s in settings.data.sources if s.claim is not None}),
    )
