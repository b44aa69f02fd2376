"""The `atlas:openshift` object validated once into settings.py's model, then checked against a workload.

Everything here is pure: `parse_openshift_settings` takes the plain dict that
`pulumi.Config.get_object` returns and builds the model of `infra/openshift/settings.py`, so it
is tested without an engine, and every error names the full key and the fix.
`check_workload_fits` compares the settings with a workload's rendered steps (GPUs over the
quota, a GPU product, nodes per step) through `required_quota`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from infra.openshift.settings import (
    LOCAL_BUILDER,
    DataSettings,
    DataSource,
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
from infra.validation import (
    GIT_REF,
    GIT_URL_OR_GIT_PROTOCOL,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    Fields,
)
from infra.workload.render import RenderedStep

# Keys of `atlas:openshift` that infra/config.py reads into KubernetesTarget.
TARGET_KEYS = frozenset({"enabled", "flavour", "namespace", "kubeconfig", "context", "insecure_skip_tls_verify"})
SETTINGS_KEYS = frozenset({"project", "quota", "storage", "gpu", "image", "data", "pipeline", "monitor", "placement"})
# A node label key: an optional DNS-subdomain prefix and a name (Kubernetes' rules).
_LABEL_KEY = re.compile(r"(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")

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
# What an image reference may look like: registry/path[:tag][@sha256:digest], no spaces.
IMAGE_REFERENCE = re.compile(r"^[a-z0-9]+([._:/-][a-zA-Z0-9_.-]+)*(@sha256:[0-9a-f]{64})?$")
# Kubernetes quantities without a sign (the sign is reported separately, with its own fix).
QUANTITY = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
SUFFIX_FACTORS: dict[str | None, Decimal] = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    # k, M, G, ... are powers of 1000; Ki, Mi, Gi, ... powers of 1024.
    **{suffix: Decimal(1000) ** power for power, suffix in enumerate("kMGTPE", start=1)},
    **{f"{suffix}i": Decimal(1024) ** power for power, suffix in enumerate("KMGTPE", start=1)},
}
DEFAULT_S3_IMAGE = "docker.io/amazon/aws-cli:2.15.0"
# The workload's own image has Python (stage_data.py needs nothing else); `data.image` overrides.
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")


_fields = Fields(OpenShiftSettingsError)
_fail = _fields.fail
_reject_unknown = _fields.reject_unknown
_bool = _fields.boolean
_optional_text = _fields.optional_text
_int = _fields.integer
MAX_BACKOFF_LIMIT = 20


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    """Every section of atlas:openshift is optional: absent reads as empty (defaults apply)."""
    return _fields.mapping(value, key, allow_missing=True)


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


def _optional_name(section: Mapping[str, Any], field: str, key: str) -> str | None:
    value = section.get(field)
    return None if value is None else _fields.kubernetes_name(value, f"{key}.{field}", subdomain=True)


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


# The default sizes fit the local cluster's PV pool (localenv/kwok.py: RWX volumes of
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


def _is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and LABEL_VALUE.fullmatch(value) is not None


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
    if value is not None and (not isinstance(value, str) or not _is_label_value(value)):
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
        if not isinstance(value, str) or not _is_label_value(value):
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
    if not isinstance(git_uri, str) or not GIT_URL_OR_GIT_PROTOCOL.match(git_uri):
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
        claim = _fields.kubernetes_name(parts.netloc, f"{key} (claim name)", subdomain=True)
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
        _fields.kubernetes_name(input_name, item_key)
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
        # A failed step retried more than this is a loop, not resilience (each retry is a new pod).
        backoff_limit=_int(section, "backoff_limit", key, 0, minimum=0, maximum=MAX_BACKOFF_LIMIT) or 0,
        shm_size=_optional_quantity(section, "shm_size", key, "memory size"),
        await_last_step=_bool(section, "await_last_step", key, False),
    )


def _monitor(raw: Any, key: str, flavour: str) -> MonitorSettings:
    section = _mapping(raw, key)
    _reject_unknown(section, ("enabled", "await", "host", "ingress_class", "image", "proxy_image"), key)
    host = section.get("host")
    if host is not None:
        _fields.kubernetes_name(host, f"{key}.host", subdomain=True)
    proxy_image = section.get("proxy_image")
    if proxy_image is not None and flavour != "openshift":
        raise _fail(
            f"{key}.proxy_image",
            "the oauth-proxy sidecar logs users in through OpenShift's OAuth server, which plain Kubernetes has not",
            "remove it (on Kubernetes the monitor is read through the API server's service proxy)",
        )
    return MonitorSettings(
        enabled=_bool(section, "enabled", key, True),
        await_ready=_bool(section, "await", key, True),
        host=host,
        ingress_class=_optional_name(section, "ingress_class", key),
        image=None if section.get("image") is None else _image(section["image"], f"{key}.image"),
        **({} if proxy_image is None else {"proxy_image": _image(proxy_image, f"{key}.proxy_image")}),
    )


def parse_openshift_settings(raw: Mapping[str, Any], key_prefix: str, flavour: str | None = None) -> OpenShiftSettings:
    """Validate the OpenShift settings in `raw` (the `atlas:openshift` object; the target's own
    keys, TARGET_KEYS, are left to infra/config.py). `key_prefix` starts every key in messages,
    e.g. "atlas:openshift". `flavour` defaults to raw's `flavour`, as config.py reads it."""
    section = _mapping(raw, key_prefix)
    _reject_unknown(section, SETTINGS_KEYS | TARGET_KEYS, key_prefix)
    # The example file (stacks/Pulumi.openshift-gpu.yaml) says above each placeholder how to fill it.
    _fields.reject_placeholders(section, key_prefix, "set it for your cluster (the comment above it says how)")
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
        monitor=_monitor(section.get("monitor"), f"{key_prefix}.monitor", flavour),
        key_prefix=key_prefix,
        placement=_placement(section.get("placement"), f"{key_prefix}.placement"),
    )


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
