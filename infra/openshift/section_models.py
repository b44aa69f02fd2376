"""The sections of the `atlas:openshift` object as pydantic models (project, quota, storage, gpu, ...).

Each field with its type, default, description and example, and the rules it follows (the value
rules below refuse with a Problem, located at the field's key). `settings_parser.py` assembles
them into `OpenShiftSettingsModel` and builds settings.py's dataclasses from it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema, model_validator

from infra.config_schema import (
    Bool,
    ConfigSection,
    KubeSubdomain,
    OneLine,
    Problem,
    Rule,
    WholeNumber,
    relative,
)
from infra.openshift.security_lint import image_pin_problem
from infra.openshift.settings import (
    LOCAL_BUILDER,
    DataSource,
    OpenShiftSettingsError,
    Quantity,
)
from infra.validation import (
    DNS_LABEL_MAX,
    GIT_REF,
    GIT_URL_OR_GIT_PROTOCOL,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    Fields,
    is_dns_label,
)

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
MAX_BACKOFF_LIMIT = 20
# The default sizes fit the local cluster's PV pool (localenv/kwok.py: RWX volumes of
# 500Gi); a real cluster sets its own (stacks/Pulumi.openshift-gpu.yaml).
DEFAULT_SIZES = {"data": "200Gi", "results": "50Gi", "logs": "5Gi"}


# ---------------------------------------------------------------------------------------------
# Value rules: each refuses with a Problem (the key is the error's location) or the section's error


def parse_quantity(value: Any, key: str, what: str = "size") -> Quantity:
    """A positive Kubernetes quantity ("500Gi", "1Ti", "48", "500m"); errors name the key."""
    try:
        text = _quantity_text(value, what)
    except Problem as problem:
        raise _fail(key, problem.problem, problem.fix) from None
    match = QUANTITY.match(text.lstrip("+"))
    assert match is not None  # _quantity_text checked it
    return Quantity(text=text, value=Decimal(match["number"]) * SUFFIX_FACTORS[match["suffix"]])


def _quantity_text(value: Any, what: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise Problem(f"expected a {what}, found {value!r}", "write a Kubernetes quantity such as 500Gi or 4")
    if text.startswith("-"):
        raise Problem(f"{text!r} is a negative {what}", f"write a positive {what}, e.g. {text[1:] or '10Gi'}")
    match = QUANTITY.match(text.lstrip("+"))
    if not match:
        raise Problem(f"{text!r} is not a Kubernetes quantity", "write it like 500Gi, 1Ti, 4 or 500m")
    if Decimal(match["number"]) <= 0:
        raise Problem(f"{text!r} is zero", f"give a positive {what}")
    return text


def _quantity(what: str) -> Rule:
    """`Annotated[str, _quantity("memory size")]`: a positive Kubernetes quantity (a whole number too)."""
    schema = {"anyOf": [{"type": "string", "pattern": QUANTITY.pattern}, {"type": "integer", "minimum": 1}]}
    return Rule(lambda value: None if value is None else _quantity_text(value, what), WithJsonSchema(schema))


def _image_reference(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str) or not IMAGE_REFERENCE.match(value):
        raise Problem(
            f"{value!r} is not an image reference", "write registry/path:tag or registry/path@sha256:<digest>"
        )
    # What the cluster runs must not move under the run (docs/security.md): a tag or digest, never latest.
    unpinned = image_pin_problem(value)
    if unpinned is not None:
        raise Problem(unpinned, "pin it: write registry/path:<version tag> or registry/path@sha256:<digest>")
    return value


ImageReference = Annotated[str, BeforeValidator(_image_reference), Field(pattern=IMAGE_REFERENCE.pattern)]


def _is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and LABEL_VALUE.fullmatch(value) is not None


def _choice(choices: Sequence[str], fix: str | None = None) -> Any:
    def check(value: Any) -> Any:
        if value is not None and value not in choices:
            raise Problem(f"found {value!r}", fix or f"use one of {', '.join(choices)}")
        return value

    return BeforeValidator(check)


# ---------------------------------------------------------------------------------------------
# The models: one per object of `atlas:openshift`


class ProjectModel(ConfigSection):
    """The project (OpenShift) or namespace (Kubernetes) the run lives in."""

    create: Bool = Field(
        True, description="Create the project (a ProjectRequest on OpenShift, a Namespace on Kubernetes) and delete "
        "it on destroy; false: it exists already (made by the cluster's admins), nothing creates or deletes it.",
        examples=[False])
    display_name: Annotated[str, OneLine()] | None = Field(
        None, description="The ProjectRequest's display name (OpenShift only).", examples=["BigGAN on MOC"])
    description: Annotated[str, OneLine()] | None = Field(
        None, description="The ProjectRequest's description (OpenShift only).", examples=["Atlas runs of BigGAN"])


class QuotaModel(ConfigSection):
    """The project's ResourceQuota; a value left out is sized from the workload at its busiest."""

    manage: Bool = Field(
        True, description="Write the ResourceQuota; false: the cluster's admins own the quota (a project admin may "
        "not write one), and the values are only checked against the workload.", examples=[False])
    gpus: Annotated[int, WholeNumber(0)] | None = Field(None, description="GPUs the project may request.", examples=[4])
    cpu: Annotated[str, _quantity("CPU amount")] | None = Field(
        None, description="CPU the project may request.", examples=["48"])
    memory: Annotated[str, _quantity("memory size")] | None = Field(
        None, description="Memory the project may request.", examples=["256Gi"])
    storage: Annotated[str, _quantity("storage size")] | None = Field(
        None, description="Storage the project's claims may request.", examples=["800Gi"])
    pvcs: Annotated[int, WholeNumber(1)] | None = Field(
        None, description="Claims the project may hold (Atlas's three and each pvc:// source's).", examples=[5])


class VolumeModel(ConfigSection):
    """One of the run's claims (data, results or logs)."""

    size: Annotated[str, _quantity("storage size")] | None = Field(
        None, description="The claim's size; default data 200Gi, results 50Gi, logs 5Gi.", examples=["400Gi"])
    storage_class: KubeSubdomain | None = Field(
        None, alias="class", description="Its StorageClass; default: storage.class, else the cluster's default.",
        examples=["ocs-storagecluster-cephfs"])
    access_mode: Annotated[
        Literal["ReadWriteMany", "ReadWriteOnce"], _choice(ACCESS_MODES)
    ] = Field("ReadWriteMany", description="ReadWriteMany or ReadWriteOnce; the data volume must be ReadWriteMany "
              "(staging and every step mount it, possibly from several nodes).", examples=["ReadWriteOnce"])


class StorageModel(ConfigSection):
    """The run's three claims: data (inputs, staged), results, logs (telemetry and training logs)."""

    storage_class: KubeSubdomain | None = Field(
        None, alias="class", description="The StorageClass of every claim that names none; default: the cluster's.",
        examples=["ocs-storagecluster-cephfs"])
    data: VolumeModel = Field(default_factory=VolumeModel, description="The data claim (ReadWriteMany).")
    results: VolumeModel = Field(default_factory=VolumeModel, description="The results claim.")
    logs: VolumeModel = Field(default_factory=VolumeModel, description="The logs and telemetry claim.")

    @model_validator(mode="after")
    def _data_is_shared(self) -> StorageModel:
        if self.data.access_mode != "ReadWriteMany":
            # Staging and every step mount the data volume, possibly from different nodes at once.
            raise Problem("the data volume must be ReadWriteMany", "remove the key", ".data.access_mode")
        return self


def _product(value: Any) -> Any:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,63}", value):
        raise Problem(f"{value!r} is not a node label value", "write it as the node label shows it")
    return value




class GpuModel(ConfigSection):
    """The GPUs the steps ask for."""

    product: Annotated[str, BeforeValidator(_product), Field(pattern=r"^[A-Za-z0-9._-]{1,63}$")] = Field(
        "Tesla-V100-SXM2-32GB", description="The nodes' nvidia.com/gpu.product label value the steps are placed "
        "by (`oc get nodes -L nvidia.com/gpu.product`); checked against the products Atlas knows unless "
        "check_product is false; a MIG slice ends -MIG-<profile>.", examples=["NVIDIA-A100-SXM4-40GB"])
    check_product: Bool = Field(
        True, description="Refuse a product Atlas does not know (a typo); false for one not listed.",
        examples=[False])

    @model_validator(mode="after")
    def _known_product(self) -> GpuModel:
        if self.check_product and MIG_SUFFIX.sub("", self.product) not in KNOWN_GPU_PRODUCTS:
            close = difflib.get_close_matches(self.product, KNOWN_GPU_PRODUCTS, n=3)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise Problem(
                f"unknown GPU product {self.product!r}",
                f"{hint}use the value of the nodes' nvidia.com/gpu.product label "
                "(`oc get nodes -L nvidia.com/gpu.product`), or set {here}.check_product: false for one not listed",
                ".product",
            )
        return self




def _toleration_key(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not _LABEL_KEY.fullmatch(value)):
        raise Problem(f"{value!r} is not a taint key", "write prefix/name, e.g. nvidia.com/gpu")
    return value


def _taint_value(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not _is_label_value(value)):
        raise Problem(f"{value!r} is not a taint value", "quote it as a string")
    return value


class TolerationModel(ConfigSection):
    """A taint every pod of the run tolerates."""

    key: Annotated[str, BeforeValidator(_toleration_key)] | None = Field(
        None, description="The taint's key.", examples=["nvidia.com/gpu"])
    operator: Annotated[Literal["Equal", "Exists"], _choice(("Equal", "Exists"), "use Equal or Exists")] = Field(
        "Equal", description="Equal (key and value match) or Exists (the key alone).", examples=["Exists"])
    value: Annotated[str, BeforeValidator(_taint_value)] | None = Field(
        None, description="The taint's value (operator Equal only).", examples=["present"])
    effect: Annotated[
        Literal["NoSchedule", "PreferNoSchedule", "NoExecute"],
        _choice(("NoSchedule", "PreferNoSchedule", "NoExecute"), "use NoSchedule, PreferNoSchedule or NoExecute"),
    ] | None = Field(None, description="The taint's effect; none: every effect.", examples=["NoSchedule"])

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> TolerationModel:
        if self.operator == "Exists" and self.value is not None:
            raise Problem("a value with operator Exists", "remove value, or use operator Equal", ".value")
        return self

    def pairs(self) -> tuple[tuple[str, str], ...]:
        given = {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect}
        return tuple((k, str(v)) for k, v in given.items() if v is not None)


def _node_selector(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Problem(f"expected an object, found {type(value).__name__}", "write it as `key: value` lines")
    for label, item in value.items():
        if not isinstance(label, str) or len(label) > 316 or not _LABEL_KEY.fullmatch(label):
            raise Problem(f"{label!r} is not a node label key", "write prefix/name, e.g. example.com/zone", f".{label}")
        if not isinstance(item, str) or not _is_label_value(item):
            raise Problem(f"{item!r} is not a label value",
                          "quote it as a string of letters, digits, '-', '_' and '.' (63 at most)", f".{label}")
    return value


def _tolerations(value: Any) -> Any:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Problem(f"found {type(value).__name__}", "write a list of tolerations")
    return value


class PlacementModel(ConfigSection):
    """Where the run's pods may land."""

    node_selector: Annotated[dict[str, str], BeforeValidator(_node_selector)] = Field(
        default_factory=dict, description="Node labels every pod of the run must land on (set per pod, so it holds "
        "on plain Kubernetes too).", examples=[{"atlas.dev/node-kind": "kubelet"}])
    tolerations: Annotated[list[TolerationModel], BeforeValidator(_tolerations)] = Field(
        default_factory=list, description="Taints every pod tolerates (a cluster whose only nodes are tainted GPU "
        "nodes).", examples=[[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]])


def _git_uri(value: Any) -> Any:
    if not isinstance(value, str) or not GIT_URL_OR_GIT_PROTOCOL.match(value):
        raise Problem(
            f"{value!r} is not a git URL the build controller clones (https://, ssh://, git:// or git@host:path)",
            "set the git URL of this repository (the build context holds the Containerfile and the sampler)",
        )
    return value


def _git_ref(value: Any) -> Any:
    if not isinstance(value, str) or not GIT_REF.match(value) or ".." in value:
        raise Problem(f"{value!r} is not a branch, tag or commit", "write e.g. main or a commit id")
    return value


class ImageBuildModel(ConfigSection):
    """An OpenShift BuildConfig: this repository at `git_ref`, Docker strategy, into an ImageStream."""

    git_uri: Annotated[str, BeforeValidator(_git_uri), Field(pattern=GIT_URL_OR_GIT_PROTOCOL.pattern)] = Field(
        description="The git URL of this repository, as the cluster's build controller clones it (https://, "
        "ssh://, git:// or git@).", examples=["https://github.com/example/atlas.git"])
    git_ref: Annotated[str, BeforeValidator(_git_ref), Field(pattern=GIT_REF.pattern)] = Field(
        "main", description="The branch, tag or commit built; the build takes the repository as committed.",
        examples=["main"])
    base_image: ImageReference | None = Field(
        None, description="The Containerfile's BASE_IMAGE build argument; default: the Containerfile's own.",
        examples=["quay.io/example/pytorch:2.3-cuda12"])
    cpu: Annotated[str, _quantity("CPU amount")] = Field("2", description="The build pod's CPU.", examples=["4"])
    # pip installing the BigGAN dependencies over a PyTorch base needs more than a default limit.
    memory: Annotated[str, _quantity("memory size")] = Field(
        "8Gi", description="The build pod's memory.", examples=["16Gi"])
    await_image: Bool = Field(
        True, alias="await", description="Wait in `pulumi up` until the build pushed its image; the Jobs then "
        "pull it by digest. A build that fails, errs or is cancelled ends `up` at once, with its reason and the "
        "end of its log.", examples=[False])
    timeout_seconds: Annotated[int, WholeNumber(60)] = Field(
        3600, description="How long the build may take (how long `pulumi up` waits for it).", examples=[7200])
    builder: Annotated[
        Literal["openshift", "atlas-local"],
        _choice(("openshift", LOCAL_BUILDER),
                f"use openshift (the cluster's build controller) or {LOCAL_BUILDER} (Atlas's local stand-in)"),
    ] = Field("openshift", description="Who serves build.openshift.io: OpenShift's build controller, or "
              "atlas-local, the local environment's stand-in (which a plain Kubernetes target may use).",
              examples=[LOCAL_BUILDER])


def _absolute(value: Any) -> Any:
    if value is not None and not PurePosixPath(value).is_absolute():
        raise Problem(f"{value!r} is relative", "write the image's absolute WORKDIR, e.g. /opt/biggan")
    return value


class ImageModel(ConfigSection):
    """The steps' image: built on the cluster (build) or pre-built (reference), exactly one."""

    build: ImageBuildModel | None = Field(None, description="Build the image on the cluster (OpenShift's "
                                          "BuildConfig, or the local environment's stand-in).")
    reference: ImageReference | None = Field(
        None, description="A pre-built image (registry/path:tag or @sha256:digest): any image with /bin/sh; "
        "Atlas mounts its entrypoint and sampler into the steps, run by the image's python3 or, "
        "without one, unsampled (docs/workloads.md, 'Any image').",
        examples=["quay.io/example/atlas-biggan:1"])
    workdir: Annotated[str, OneLine(), AfterValidator(_absolute)] | None = Field(
        None, description="The image's WORKDIR, absolute; default /opt/<workload name>.", examples=["/opt/biggan"])


def _https(value: Any) -> Any:
    if value is not None and urlsplit(value).scheme not in ("http", "https"):
        raise Problem(f"{value!r} is not an http(s) URL", "write https://s3.example.org")
    return value


class S3Model(ConfigSection):
    """How s3:// data sources are fetched."""

    endpoint: Annotated[str, OneLine(), AfterValidator(_https)] | None = Field(
        None, description="The S3 endpoint; default AWS's.", examples=["https://s3.example.org"])
    credentials_secret: KubeSubdomain | None = Field(
        None, description="A Secret in the project with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; none: "
        "anonymous reads.", examples=["s3-credentials"])
    image: ImageReference = Field(DEFAULT_S3_IMAGE, description="The image of the s3:// staging Job (the AWS CLI).",
                                  examples=[DEFAULT_S3_IMAGE])


def _source_url(value: Any) -> Any:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        # The type only: whatever was pasted here (a key, say) is not echoed.
        raise Problem(f"expected a URL, found {type(value).__name__ if not isinstance(value, str) else 'text'}",
                      "write pvc://<claim>/<path>, https://... or s3://<bucket>/<key>")
    try:
        parse_data_source("", value, "")
    except OpenShiftSettingsError as error:
        raise relative(error) from None
    return value


def _sources(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Problem(f"expected an object, found {type(value).__name__}", "write it as `input: url` lines")
    for name in value:
        if not is_dns_label(name):
            raise Problem(
                f"{name!r} is not a valid Kubernetes name",
                f"use at most {DNS_LABEL_MAX} lower-case letters, digits and '-', starting and ending with a letter "
                "or digit", f".{name}")
    return value


class DataModel(ConfigSection):
    """Where the workload's data inputs come from, staged into the data claim before the first step."""

    sources: Annotated[dict[str, Annotated[str, BeforeValidator(_source_url)]], BeforeValidator(_sources)] = Field(
        default_factory=dict, description="Each workload data input's source: pvc://<claim>/<path> (a claim in "
        "the project), https://... or s3://<bucket>/<key>.",
        examples=[{"imagenet-train": "pvc://imagenet/ILSVRC2012/train"}])
    s3: S3Model = Field(default_factory=S3Model, description="How s3:// sources are fetched.")
    image: ImageReference | None = Field(
        None, description="The image staging pvc:// and http(s):// sources; default: the workload's (it has Python).",
        examples=["registry.access.redhat.com/ubi9/python-311:1"])
    # ImageNet's 150 GB over a slow link: a day; also how long `pulumi up` waits for staging.
    timeout_seconds: Annotated[int, WholeNumber(60)] = Field(
        86400, description="How long staging may take (and `pulumi up` waits).", examples=[3600])


class PipelineModel(ConfigSection):
    """How the steps run as Jobs."""

    # 0: a failed step is looked at, not re-run; BigGAN's main.py without --resume deletes its logs.
    backoff_limit: Annotated[int, WholeNumber(0, MAX_BACKOFF_LIMIT)] = Field(
        0, description="Retries of a failed step (each a new pod); 0: a failure is looked at, not re-run.",
        examples=[2])
    shm_size: Annotated[str, _quantity("memory size")] | None = Field(
        None, description="The shared memory (/dev/shm) of each step (it counts as memory); default a quarter of "
        "the step's memory, "
        "at most 16Gi.", examples=["16Gi"])
    await_last_step: Bool = Field(
        False, description="`pulumi up` waits for the last step too (the others it always waits for).",
        examples=[True])


class MonitorModel(ConfigSection):
    """The live monitor: a Deployment, a Service and a Route (OpenShift) or Ingress."""

    enabled: Bool = Field(True, description="Run the monitor.", examples=[False])
    await_ready: Bool = Field(
        True, alias="await", description="Wait for it to be ready; false on clusters that cannot make pods Ready "
        "(KWOK) or fill an Ingress status.", examples=[False])
    host: KubeSubdomain | None = Field(
        None, description="The Route's or Ingress's host; default: the cluster's.", examples=["atlas.apps.example.org"])
    ingress_class: KubeSubdomain | None = Field(
        None, description="The Ingress's class (plain Kubernetes).", examples=["nginx"])
    image: ImageReference | None = Field(
        None, description="The monitor's image; default the workload's (it has Python).",
        examples=["registry.access.redhat.com/ubi9/python-311:1"])
    proxy_image: ImageReference | None = Field(
        None, description="OpenShift only: the oauth-proxy sidecar's image; default "
        "quay.io/openshift/origin-oauth-proxy:4.16.", examples=["mirror.example/oauth-proxy:4.16"])

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
