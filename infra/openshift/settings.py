"""The OpenShift side's own settings, parsed and validated once into frozen dataclasses.

These are the keys of the `atlas:openshift` object beside the ones `infra/config.py` reads
for the target (`enabled`, `flavour`, `namespace`, `kubeconfig`, `context`):

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
    monitor:  {enabled, await, host, ingress_class, image}

Everything here is pure: `parse_openshift_settings` takes the plain dict that
`pulumi.Config.get_object` returns, so it is tested without an engine, and every error
names the full key and the fix. `check_workload_fits` compares the settings with a
workload's rendered steps (GPUs over the quota, a GPU product, nodes per step) and
`required_quota` computes what the workload needs, which is the quota's default.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from infra.errors import AtlasConfigError
from infra.validation import Fields
from infra.workload import RenderedStep

# The local cluster's BuildConfig runner (infra/localenv/builds.py), a stand-in for OpenShift's.
LOCAL_BUILDER = "atlas-local"
# Keys of `atlas:openshift` that infra/config.py reads into KubernetesTarget.
TARGET_KEYS = frozenset({"enabled", "flavour", "namespace", "kubeconfig", "context"})
SETTINGS_KEYS = frozenset({"project", "quota", "storage", "gpu", "image", "data", "pipeline", "monitor", "placement"})
# A node label key: an optional DNS-subdomain prefix and a name (Kubernetes' rules).
_LABEL_KEY = re.compile(r"(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")

# Values of the `nvidia.com/gpu.product` node label that NVIDIA's GPU feature discovery
# writes (the marketing name with spaces as '-'). MIG slices append `-MIG-<profile>`.
KNOWN_GPU_PRODUCTS = (
    "Tesla-K80",
    "Tesla-P100-PCIE-16GB",
    "Tesla-P100-SXM2-16GB",
    "Tesla-T4",
    "Tesla-V100-PCIE-16GB",
    "Tesla-V100-PCIE-32GB",
    "Tesla-V100-SXM2-16GB",
    "Tesla-V100-SXM2-32GB",
    "Tesla-V100S-PCIE-32GB",
    "NVIDIA-A10",
    "NVIDIA-A30",
    "NVIDIA-A40",
    "NVIDIA-A100-PCIE-40GB",
    "NVIDIA-A100-80GB-PCIe",
    "NVIDIA-A100-SXM4-40GB",
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-H100-PCIe",
    "NVIDIA-H100-NVL",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-H200",
    "NVIDIA-L4",
    "NVIDIA-L40S",
)
MIG_SUFFIX = re.compile(r"-MIG-[0-9]+g\.[0-9]+gb$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# What an image reference may look like: registry/path[:tag][@sha256:digest], no spaces.
IMAGE_REFERENCE = re.compile(r"^[a-z0-9]+([._:/-][a-zA-Z0-9_.-]+)*(@sha256:[0-9a-f]{64})?$")
# git:// as well: OpenShift builds from the Git protocol too (the local cluster serves this repository so).
GIT_URI = re.compile(r"^(https://|ssh://|git://|git@)[A-Za-z0-9._:/@~-]+$")
GIT_REF = re.compile(r"^[A-Za-z0-9._/-]+$")
# Kubernetes quantities without a sign (the sign is reported separately, with its own fix).
QUANTITY = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
SUFFIX_FACTORS: dict[str | None, Decimal] = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
DEFAULT_S3_IMAGE = "docker.io/amazon/aws-cli:2.15.0"
# The workload's own image has Python (stage_data.py needs nothing else); `data.image` overrides.
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")


class OpenShiftSettingsError(AtlasConfigError):
    """An OpenShift setting that cannot be used; the message names the key and the fix."""


_fields = Fields(OpenShiftSettingsError)
_fail = _fields.fail
_reject_unknown = _fields.reject_unknown
_bool = _fields.boolean
_optional_text = _fields.optional_text
_int = _fields.integer


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    """Every section of atlas:openshift is optional: absent reads as empty (defaults apply)."""
    return _fields.mapping(value, key, allow_missing=True)


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


# ---------------------------------------------------------------------------------------------
# Field readers: each takes the full key it reports


def parse_quantity(value: Any, key: str, what: str = "size") -> Quantity:
    """A positive Kubernetes quantity ("500Gi", "1Ti", "48", "500m"); errors name the key."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise _fail(key, f"expected a {what}, found {value!r}", "write a Kubernetes quantity such as 500Gi or 4")
    if text.startswith("-"):
        raise _fail(key, f"{text!r} is a negative {what}", f"write a positive {what}, e.g. {text[1:] or '10Gi'}")
    match = QUANTITY.match(text.lstrip("+"))
    if not match:
        raise _fail(key, f"{text!r} is not a Kubernetes quantity", "write it like 500Gi, 1Ti, 4 or 500m")
    try:
        number = Decimal(match["number"])
    except InvalidOperation:  # pragma: no cover (the regular expression only lets numbers through)
        raise _fail(key, f"{text!r} is not a number", "write it like 500Gi") from None
    if number <= 0:
        raise _fail(key, f"{text!r} is zero", f"give a positive {what}")
    return Quantity(text=text, value=number * SUFFIX_FACTORS[match["suffix"]])


def _optional_quantity(section: Mapping[str, Any], field: str, key: str, what: str = "size") -> Quantity | None:
    if section.get(field) is None:
        return None
    return parse_quantity(section[field], f"{key}.{field}", what)


def _name(value: Any, key: str, pattern: re.Pattern[str] = DNS_SUBDOMAIN, limit: int = 253) -> str:
    if not isinstance(value, str) or len(value) > limit or not pattern.match(value):
        raise _fail(
            key,
            f"{value!r} is not a valid Kubernetes name",
            f"use at most {limit} lower-case letters, digits, '-' (and '.'), "
            "starting and ending with a letter or digit",
        )
    return value


def _optional_name(section: Mapping[str, Any], field: str, key: str) -> str | None:
    value = section.get(field)
    return None if value is None else _name(value, f"{key}.{field}")


def _image(value: Any, key: str) -> str:
    if not isinstance(value, str) or not IMAGE_REFERENCE.match(value):
        raise _fail(
            key, f"{value!r} is not an image reference", "write registry/path:tag or registry/path@sha256:<digest>"
        )
    return value


# ---------------------------------------------------------------------------------------------
# Sections


def _project(raw: Any, key: str) -> ProjectSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("create", "display_name", "description"), key)
    return ProjectSettings(
        create=_bool(section, "create", key, True),
        display_name=_optional_text(section, "display_name", key),
        description=_optional_text(section, "description", key),
    )


def _quota(raw: Any, key: str) -> QuotaSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("manage", "gpus", "cpu", "memory", "storage", "pvcs"), key)
    return QuotaSettings(
        manage=_bool(section, "manage", key, True),
        gpus=_int(section, "gpus", key, None, minimum=0),
        cpu=_optional_quantity(section, "cpu", key, "CPU amount"),
        memory=_optional_quantity(section, "memory", key, "memory size"),
        storage=_optional_quantity(section, "storage", key, "storage size"),
        pvcs=_int(section, "pvcs", key, None, minimum=1),
    )


# The default sizes fit the local cluster's PV pool (infra/localenv/kwok.py: RWX volumes of
# 500Gi); a real cluster sets its own (stacks/Pulumi.openshift-gpu.yaml).
DEFAULT_SIZES = {"data": "200Gi", "results": "50Gi", "logs": "5Gi"}


def _storage(raw: Any, key: str) -> StorageSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("class", "data", "results", "logs"), key)
    default_class = _optional_name(section, "class", key)
    volumes: dict[str, VolumeSettings] = {}
    for role, default_size in DEFAULT_SIZES.items():
        volume_key = f"{key}.{role}"
        volume = _mapping(section.get(role), volume_key)
        _reject_unknown(volume, ("size", "class", "access_mode"), volume_key)
        access_mode = volume.get("access_mode", "ReadWriteMany")
        if access_mode not in ACCESS_MODES:
            raise _fail(f"{volume_key}.access_mode", f"found {access_mode!r}", f"use one of {', '.join(ACCESS_MODES)}")
        if role == "data" and access_mode != "ReadWriteMany":
            # Staging and every step mount the data volume, possibly from different nodes at once.
            raise _fail(f"{volume_key}.access_mode", "the data volume must be ReadWriteMany", "remove the key")
        volumes[role] = VolumeSettings(
            size=parse_quantity(volume.get("size", default_size), f"{volume_key}.size", "storage size"),
            storage_class=_optional_name(volume, "class", volume_key) or default_class,
            access_mode=access_mode,
        )
    return StorageSettings(**volumes)


def _gpu(raw: Any, key: str) -> GpuSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("product", "check_product"), key)
    product = section.get("product", "Tesla-V100-SXM2-32GB")
    if not isinstance(product, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,63}", product):
        raise _fail(f"{key}.product", f"{product!r} is not a node label value", "write it as the node label shows it")
    if _bool(section, "check_product", key, True):
        base = MIG_SUFFIX.sub("", product)
        if base not in KNOWN_GPU_PRODUCTS:
            close = difflib.get_close_matches(product, KNOWN_GPU_PRODUCTS, n=3)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise _fail(
                f"{key}.product",
                f"unknown GPU product {product!r}",
                f"{hint}use the value of the nodes' nvidia.com/gpu.product label "
                f"(`oc get nodes -L nvidia.com/gpu.product`), or set {key}.check_product: false for one not listed",
            )
    return GpuSettings(product=product)


_TOLERATION_KEYS = ("key", "operator", "value", "effect")


def _toleration(raw: Any, key: str) -> tuple[tuple[str, str], ...]:
    section = _mapping(raw, key)
    _reject_unknown(section, _TOLERATION_KEYS, key)
    operator = section.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise _fail(f"{key}.operator", f"found {operator!r}", "use Equal or Exists")
    effect = section.get("effect")
    if effect is not None and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise _fail(f"{key}.effect", f"found {effect!r}", "use NoSchedule, PreferNoSchedule or NoExecute")
    label = section.get("key")
    if label is not None and (not isinstance(label, str) or not _LABEL_KEY.fullmatch(label)):
        raise _fail(f"{key}.key", f"{label!r} is not a taint key", "write prefix/name, e.g. nvidia.com/gpu")
    if operator == "Exists" and section.get("value") is not None:
        raise _fail(f"{key}.value", "a value with operator Exists", "remove value, or use operator Equal")
    value = section.get("value")
    if value is not None and (not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value)):
        raise _fail(f"{key}.value", f"{value!r} is not a taint value", "quote it as a string")
    return tuple((k, str(section[k] if k != "operator" else operator)) for k in _TOLERATION_KEYS
                 if (k == "operator" or section.get(k) is not None))


def _placement(raw: Any, key: str) -> PlacementSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("node_selector", "tolerations"), key)
    tolerations = section.get("tolerations") or []
    if not isinstance(tolerations, list):
        raise _fail(f"{key}.tolerations", f"found {type(tolerations).__name__}", "write a list of tolerations")
    selector = _mapping(section.get("node_selector"), f"{key}.node_selector")
    pairs = []
    for label, value in selector.items():
        where = f"{key}.node_selector.{label}"
        if not isinstance(label, str) or len(label) > 316 or not _LABEL_KEY.fullmatch(label):
            raise _fail(where, f"{label!r} is not a node label key", "write prefix/name, e.g. example.com/zone")
        if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
            raise _fail(where, f"{value!r} is not a label value",
                        "quote it as a string of letters, digits, '-', '_' and '.' (63 at most)")
        pairs.append((label, value))
    return PlacementSettings(
        tuple(sorted(pairs)), tuple(_toleration(t, f"{key}.tolerations[{i}]") for i, t in enumerate(tolerations))
    )


def _image_settings(raw: Any, key: str, flavour: str) -> ImageSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("build", "reference", "workdir"), key)
    reference = None if section.get("reference") is None else _image(section["reference"], f"{key}.reference")
    workdir = _optional_text(section, "workdir", key)
    if workdir is not None and not PurePosixPath(workdir).is_absolute():
        raise _fail(
            f"{key}.workdir", f"{workdir!r} is relative", "write the image's absolute WORKDIR, e.g. /opt/biggan"
        )
    build = None
    if section.get("build") is not None:
        build = _image_build(section["build"], f"{key}.build")
        if flavour != "openshift" and build.builder != LOCAL_BUILDER:
            raise _fail(
                f"{key}.build",
                "a BuildConfig needs OpenShift's build API, and this target's flavour is plain Kubernetes",
                f"build the image elsewhere and set {key}.reference instead (or, on Atlas's local cluster, whose "
                f"BuildConfig runner serves that API, set {key}.build.builder: {LOCAL_BUILDER})",
            )
    if build is not None and reference is not None:
        raise _fail(
            key, "both build and reference are set", f"keep {key}.build (build on the cluster) or {key}.reference"
        )
    if build is None and reference is None:
        fix = (
            f"set {key}.build.git_uri (this repository, built by a BuildConfig) or {key}.reference (a pre-built image)"
            if flavour == "openshift"
            else f"set {key}.reference to a pre-built image, e.g. quay.io/<org>/atlas-biggan:<tag>"
        )
        raise _fail(key, "no image source", fix)
    return ImageSettings(build=build, reference=reference, workdir=workdir)


def _image_build(raw: Any, key: str) -> ImageBuild:
    section = _mapping(raw, key)
    _reject_unknown(
        section, ("git_uri", "git_ref", "base_image", "cpu", "memory", "await", "timeout_seconds", "builder"), key
    )
    builder = section.get("builder", "openshift")
    if builder not in ("openshift", LOCAL_BUILDER):
        raise _fail(f"{key}.builder", f"found {builder!r}",
                    f"use openshift (the cluster's build controller) or {LOCAL_BUILDER} (Atlas's local stand-in)")
    git_uri = section.get("git_uri")
    if not isinstance(git_uri, str) or not GIT_URI.match(git_uri):
        raise _fail(
            f"{key}.git_uri",
            f"found {git_uri!r}",
            "set the git URL of this repository (the build context holds the Containerfile and the sampler)",
        )
    git_ref = section.get("git_ref", "main")
    if not isinstance(git_ref, str) or not GIT_REF.match(git_ref) or ".." in git_ref:
        raise _fail(f"{key}.git_ref", f"{git_ref!r} is not a branch, tag or commit", "write e.g. main or a commit id")
    base_image = None if section.get("base_image") is None else _image(section["base_image"], f"{key}.base_image")
    return ImageBuild(
        git_uri=git_uri,
        git_ref=git_ref,
        base_image=base_image,
        cpu=parse_quantity(section.get("cpu", "2"), f"{key}.cpu", "CPU amount"),
        # pip installing the BigGAN dependencies over a PyTorch base needs more than a default limit.
        memory=parse_quantity(section.get("memory", "8Gi"), f"{key}.memory", "memory size"),
        await_image=_bool(section, "await", key, True),
        timeout_seconds=_int(section, "timeout_seconds", key, 3600, minimum=60) or 3600,
        builder=builder,
    )


def parse_data_source(input_name: str, url: Any, key: str) -> DataSource:
    if not isinstance(url, str) or not url or any(c.isspace() for c in url):
        raise _fail(
            key, f"expected a URL, found {url!r}", "write pvc://<claim>/<path>, https://... or s3://<bucket>/<key>"
        )
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "pvc":
        claim = _name(parts.netloc, f"{key} (claim name)")
        path = parts.path.strip("/")
        if ".." in PurePosixPath(path).parts:
            raise _fail(key, f"{url!r} leaves the claim with '..'", "write a path inside the claim")
        return DataSource(input=input_name, url=url, scheme=scheme, claim=claim, path=path)
    if scheme in ("http", "https"):
        if not parts.netloc:
            raise _fail(key, f"{url!r} has no host", "write https://host/path")
        return DataSource(input=input_name, url=url, scheme=scheme, claim=None, path=parts.path)
    if scheme == "s3":
        if not parts.netloc:
            raise _fail(key, f"{url!r} has no bucket", "write s3://<bucket>/<key or prefix/>")
        return DataSource(input=input_name, url=url, scheme=scheme, claim=None, path=parts.path.lstrip("/"))
    raise _fail(
        key,
        f"unsupported source {url!r}",
        "use pvc://<claim>/<path> (an existing claim in the project), https://... or s3://<bucket>/<key>",
    )


def _data(raw: Any, key: str) -> DataSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("sources", "s3", "image", "timeout_seconds"), key)
    sources_key = f"{key}.sources"
    sources = []
    for input_name, url in _mapping(section.get("sources"), sources_key).items():
        item_key = f"{sources_key}.{input_name}"
        _name(input_name, item_key, DNS_LABEL, 63)
        sources.append(parse_data_source(str(input_name), url, item_key))
    s3_key = f"{key}.s3"
    s3_section = _mapping(section.get("s3"), s3_key)
    _reject_unknown(s3_section, ("endpoint", "credentials_secret", "image"), s3_key)
    endpoint = _optional_text(s3_section, "endpoint", s3_key)
    if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
        raise _fail(f"{s3_key}.endpoint", f"{endpoint!r} is not an http(s) URL", "write https://s3.example.org")
    s3 = S3Settings(
        endpoint=endpoint,
        credentials_secret=_optional_name(s3_section, "credentials_secret", s3_key),
        image=_image(s3_section.get("image", DEFAULT_S3_IMAGE), f"{s3_key}.image"),
    )
    image = None if section.get("image") is None else _image(section["image"], f"{key}.image")
    return DataSettings(
        sources=tuple(sources),
        s3=s3,
        image=image,
        # ImageNet's 150 GB over a slow link: a day; also how long `pulumi up` waits for staging.
        timeout_seconds=_int(section, "timeout_seconds", key, 86400, minimum=60) or 86400,
    )


def _pipeline(raw: Any, key: str) -> PipelineSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("backoff_limit", "shm_size", "await_last_step"), key)
    return PipelineSettings(
        # 0: a failed step is looked at, not re-run; BigGAN's main.py without --resume deletes its logs.
        backoff_limit=_int(section, "backoff_limit", key, 0, minimum=0) or 0,
        shm_size=_optional_quantity(section, "shm_size", key, "memory size"),
        await_last_step=_bool(section, "await_last_step", key, False),
    )


def _monitor(raw: Any, key: str) -> MonitorSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("enabled", "await", "host", "ingress_class", "image"), key)
    host = section.get("host")
    if host is not None:
        _name(host, f"{key}.host")
    return MonitorSettings(
        enabled=_bool(section, "enabled", key, True),
        await_ready=_bool(section, "await", key, True),
        host=host,
        ingress_class=_optional_name(section, "ingress_class", key),
        image=None if section.get("image") is None else _image(section["image"], f"{key}.image"),
    )


PLACEHOLDER = "REPLACE_WITH"


def _reject_placeholders(value: Any, key: str) -> None:
    """An example file's `REPLACE_WITH_...` values (stacks/Pulumi.openshift-gpu.yaml) left in place."""
    if isinstance(value, str) and PLACEHOLDER in value:
        raise _fail(
            key, f"still the example's placeholder {value!r}", "set it for your cluster (the comment above it says how)"
        )
    if isinstance(value, Mapping):
        for name, item in value.items():
            _reject_placeholders(item, f"{key}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_placeholders(item, f"{key}[{index}]")


def parse_openshift_settings(raw: Mapping[str, Any], key_prefix: str, flavour: str | None = None) -> OpenShiftSettings:
    """Validate the OpenShift settings in `raw` (the `atlas:openshift` object; the target's own
    keys, TARGET_KEYS, are left to infra/config.py). `key_prefix` starts every key in messages,
    e.g. "atlas:openshift". `flavour` defaults to raw's `flavour`, as config.py reads it."""
    section = _mapping(raw, key_prefix)
    _reject_unknown(section, SETTINGS_KEYS | TARGET_KEYS, key_prefix)
    _reject_placeholders(section, key_prefix)
    flavour = flavour or section.get("flavour", "openshift")
    if flavour not in ("openshift", "kubernetes"):
        raise _fail(f"{key_prefix}.flavour", f"found {flavour!r}", "use openshift or kubernetes")
    project = _project(section.get("project"), f"{key_prefix}.project")
    if flavour != "openshift" and (project.display_name or project.description):
        raise _fail(
            f"{key_prefix}.project",
            "display_name and description belong to an OpenShift ProjectRequest",
            "remove them for a plain Kubernetes target",
        )
    return OpenShiftSettings(
        flavour=flavour,
        project=project,
        quota=_quota(section.get("quota"), f"{key_prefix}.quota"),
        storage=_storage(section.get("storage"), f"{key_prefix}.storage"),
        gpu=_gpu(section.get("gpu"), f"{key_prefix}.gpu"),
        image=_image_settings(section.get("image"), f"{key_prefix}.image", flavour),
        data=_data(section.get("data"), f"{key_prefix}.data"),
        pipeline=_pipeline(section.get("pipeline"), f"{key_prefix}.pipeline"),
        monitor=_monitor(section.get("monitor"), f"{key_prefix}.monitor"),
        key_prefix=key_prefix,
        placement=_placement(section.get("placement"), f"{key_prefix}.placement"),
    )


# ---------------------------------------------------------------------------------------------
# Sizing and checks against the workload

# Requests of the small pods beside the steps (staging, monitor); the manifests use the same.
STAGING_CPU = Quantity("1", Decimal(1))
STAGING_MEMORY = Quantity("2Gi", Decimal(2) * 2**30)
MONITOR_CPU = Quantity("100m", Decimal("0.1"))
MONITOR_MEMORY = Quantity("128Mi", Decimal(128) * 2**20)
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


def required_quota(steps: Sequence[RenderedStep], settings: OpenShiftSettings) -> RequiredQuota:
    """The busiest moment: the staging Jobs and the image build run together before the first
    step; the steps run one at a time; the monitor runs throughout."""
    before_cpu = len(settings.data.sources) * STAGING_CPU.millis
    before_memory = len(settings.data.sources) * int(STAGING_MEMORY.value)
    if settings.image.build is not None:
        before_cpu += settings.image.build.cpu.millis
        before_memory += int(settings.image.build.memory.value)
    step_cpu = max((s.resources.cpus_per_task * 1000 for s in steps), default=0)
    step_memory = max((s.resources.memory_bytes for s in steps), default=0)
    monitor_cpu = MONITOR_CPU.millis if settings.monitor.enabled else 0
    monitor_memory = int(MONITOR_MEMORY.value) if settings.monitor.enabled else 0
    return RequiredQuota(
        gpus=max((s.resources.total_gpus for s in steps), default=0),
        cpu_millis=max(before_cpu, step_cpu) + monitor_cpu,
        memory_bytes=max(before_memory, step_memory) + monitor_memory,
        storage_bytes=int(settings.storage.total_bytes),
        # A pvc:// source is a claim in the same project: it counts against the same quota.
        pvcs=3 + len({s.claim for s in settings.data.sources if s.claim is not None}),
    )


def check_workload_fits(
    settings: OpenShiftSettings, steps: Sequence[RenderedStep], data_inputs: Sequence[str]
) -> RequiredQuota:
    """Raise (naming the key and the fix) where the workload cannot run under these settings;
    return what it needs. `data_inputs` are the workload's declared input names."""
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
    needed = required_quota(steps, settings)
    quota = settings.quota
    if quota.gpus is not None and needed.gpus > quota.gpus:
        greedy = max(steps, key=lambda s: s.resources.total_gpus)
        raise _fail(
            f"{prefix}.quota.gpus",
            f"step {greedy.name!r} asks for {needed.gpus} GPUs, over the quota of {quota.gpus}",
            f"raise {prefix}.quota.gpus to {needed.gpus} (if the cluster grants it) or lower the step's "
            f"gpus_per_node under overrides.openshift.{greedy.name}.resources",
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
