"""The stack outputs contract: one typed, versioned dataclass per kind of environment, written by
the components and read by compare, monitor and nodes.

A component builds its kind's dataclass and exports `to_dict()`; `scripts/compare`, `monitor`
and `nodes` read `pulumi stack output --json` back through `infra.kinds.read_stack_outputs`,
which picks the dataclass by the environment's `kind` (the router owns that list) and calls its
`from_dict`. So a field is named once, here, and a reader never guesses with `.get("...")`.

Versions: `OUTPUTS_VERSION` is what this code writes. Version 1 (before the typed contract)
is still read: its one `gpus` field meant different things per kind (the workload's largest
step on Kubernetes and HPC, the instance type's GPUs on AWS) and is mapped to the named fields
of version 2. A version this code does not know is refused, naming it and the fix.

Pure and stdlib only: the stack program, the components and every reader import it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from infra.loopback import reaches_loopback_url
from infra.provenance import (
    EMULATED,
    LOCAL_STAND_IN,
    NOT_EXECUTED,
    NOT_STATED,
    REAL,
    Fact,
    label,
    loopback_host_fact,
)

OUTPUTS_VERSION = 2
READABLE_VERSIONS = (1, 2)
# What an HPC environment is when its stack did not say (never "real" by default).
PROVENANCE_NOT_STATED = NOT_STATED


class OutputsError(ValueError):
    """Stack outputs Atlas cannot read: an unknown version or kind, a missing or mistyped field.
    The message names the environment and the key, and the fix."""


@dataclass(frozen=True)
class FilesAt:
    """Where a run's files of one kind (telemetry, logs) are: a folder on a login node, or a
    folder on a Kubernetes claim (`pvc`, with `path` inside the claim)."""

    path: str
    pvc: str = ""


@dataclass(frozen=True)
class SifConversion:
    """An image's conversion to a SIF on an HPC site, as recorded beside the SIF by whoever made it
    (once per digest and site): its wall time, when, and which stack made it."""

    seconds: float | None = None  # None: not recorded (a SIF made by hand)
    converted_at: str = ""
    by: str = ""
    converted_now: bool = False  # this stack's `up` made it (else it found it in the cache)


@dataclass(frozen=True)
class ContainerRuntime:
    """What ran an environment's steps: the runtime ("bare", "apptainer"; on Kubernetes the node's
    own, e.g. "containerd" or "cri-o", read when the report collects) and the image by digest."""

    name: str = "bare"
    image: str = ""  # registry/repository@sha256:...; "" for bare
    digest: str = ""  # sha256:<hex>; "" for bare
    version: str = ""  # the runtime's version (Apptainer's, on an HPC site)
    sif: str = ""  # the SIF the steps ran (HPC, Apptainer)
    arch: str = ""  # the site's architecture as OCI names it (amd64, ppc64le)
    conversion: SifConversion | None = None


@dataclass(frozen=True)
class SweepArray:
    """One scheduler object of a sweep: an LSF or Slurm job array (one chunk of the sweep, or a
    retry of some of its points) or a Kubernetes Indexed Job (its name in `job_id`)."""

    job_id: str
    offset: int  # the sweep's point its first element (index 0, LSF's 1) runs
    count: int  # how many elements it has
    # A retry: the sweep's points it runs again, in element order (empty: offset .. offset+count-1).
    points: tuple[int, ...] = ()


@dataclass(frozen=True)
class SweepOutputs:
    """A swept step's one object per side (docs/architecture.md, "Sweeps"): its arrays in
    submission order (chunks, then retries) and a letter per point, run-length encoded
    (infra/hpc/arrays.py: P pending, R running, D done, F failed, K killed outside Atlas,
    C cancelled by Atlas, ? unknown) as the last `up` or `refresh` read them."""

    points: int
    arrays: tuple[SweepArray, ...]
    elements: str
    results: str  # the sweep's folder, relative to the run's directory (HPC) or results volume
    max_attempts: int = 1  # how many times a point may run (the stack's atlas:sweep.max_attempts)


@dataclass(frozen=True)
class KubePlacement:
    """Where the workload's GPU steps' pods may run, as the stack renders them: every label of
    `node_selector` (the GPU product's among them) and these `tolerations` against the nodes' taints.
    The monitor's queue-wait estimate counts only the nodes this admits."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True)
class KubeStep:
    """One workload step as a Kubernetes Job (a swept step: one Indexed Job, with `sweep`)."""

    name: str
    job: str
    uid: str = ""
    sweep: SweepOutputs | None = None


@dataclass(frozen=True)
class BatchStep:
    """One workload step as a batch job (LSF, Slurm): its id once submitted; a step that was
    not submitted (AWS against a stand-in) has no id and says so in `state`."""

    name: str
    job_id: str = ""
    queue: str = ""
    script_sha256: str = ""
    submitted_at: str = ""
    state: str = ""  # "not-executed" where the step was rendered but never submitted
    sweep: SweepOutputs | None = None  # a swept step: its arrays (job_id is the first one's)


@dataclass(frozen=True)
class RunOutputs:
    """The `atlas` output: which run of which workload, and what the report measures."""

    stack: str = ""
    workload: str = ""
    run_id: str = "1"
    definition: str = ""  # where the definition was read (monitor and nodes load it from there)
    report: Mapping[str, Any] = field(default_factory=dict)  # infra.compare.contract reads it
    version: int = OUTPUTS_VERSION


@dataclass(frozen=True, kw_only=True)
class EnvironmentOutputs:
    """What every kind's outputs have: its steps, the GPUs the workload asks for (from the
    workload definition, the same function for every kind: infra.workload.render.requested_gpus),
    and where the run's telemetry and logs are."""

    kind: ClassVar[str]

    gpus_requested: int
    run_id: str = ""  # the run's id (atlas:runId); outputs of version 1 of an HPC side had none

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": OUTPUTS_VERSION, **_plain(dataclasses.asdict(self))}

    @classmethod
    def upgrade(cls, raw: Mapping[str, Any], version: int) -> dict[str, Any]:
        """The raw outputs of an older `version` in this version's field names."""
        return dict(raw)


@dataclass(frozen=True, kw_only=True)
class KubernetesOutputs(EnvironmentOutputs):
    """The OpenShift (or plain Kubernetes) side: its namespace, Jobs and claims."""

    kind: ClassVar[str] = "kubernetes"

    flavour: str
    namespace: str
    steps: tuple[KubeStep, ...]
    telemetry: FilesAt
    logs: FilesAt
    api_url: str = ""
    image: str = ""
    gpu_product: str | None = None  # the GPU model the placement asks for (a node label)
    monitor_url: str = ""
    # None: outputs written before Atlas exported it (the monitor then reads the run's Jobs alone).
    gpu_placement: KubePlacement | None = None

    @classmethod
    def upgrade(cls, raw: Mapping[str, Any], version: int) -> dict[str, Any]:
        found = dict(raw)
        if version == 1:
            found["gpus_requested"] = found.pop("gpus", 0)
        return found


@dataclass(frozen=True, kw_only=True)
class HpcOutputs(EnvironmentOutputs):
    """A batch-scheduler side: where its login node is, the jobs, the run folder."""

    kind: ClassVar[str] = "hpc"

    scheduler: str
    host: str
    port: int
    user: str
    run_dir: str
    steps: tuple[BatchStep, ...]
    telemetry: FilesAt
    logs: FilesAt
    # What the stack says the environment is (`atlas:hpc.<name>.provenance`): it may only narrow
    # the label, which the readers derive with what was observed (`label`).
    provenance: str = PROVENANCE_NOT_STATED
    # The login node's host key, where Atlas knows it (an instance it launched); else a file.
    known_hosts: str = ""
    runtime: ContainerRuntime = field(default_factory=ContainerRuntime)
    # What the stack program observed that makes the environment a local stand-in: a hop of the
    # login route (resolved through the user's ssh config) on loopback.
    observed: tuple[str, ...] = ()

    @property
    def login(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def label(self, *more: Fact | None) -> str:
        """What the environment is, as every output shows it: the stack's words, narrowed by what the
        program observed, the login host itself (outputs of an older Atlas carry no `observed`)
        and `more` (what the reader saw: the scheduler's mock GPUs)."""
        seen = (Fact(LOCAL_STAND_IN, what) for what in self.observed)
        return label(self.provenance, (*seen, loopback_host_fact("login node", self.host), *more))

    @classmethod
    def upgrade(cls, raw: Mapping[str, Any], version: int) -> dict[str, Any]:
        found = dict(raw)
        if not found.get("provenance"):
            found.pop("provenance", None)  # said nothing: never taken for "real"
        if version == 1:
            found["gpus_requested"] = found.pop("gpus", 0)
        return found


@dataclass(frozen=True)
class AwsInstance:
    id: str
    type: str
    state: str = ""
    lifecycle: str = ""
    public_ip: str = ""


@dataclass(frozen=True)
class AwsStaging:
    bucket: str
    prefix: str
    objects: int


@dataclass(frozen=True, kw_only=True)
class AwsOutputs(EnvironmentOutputs):
    """Rented GPU instances: what was created, and (when the steps ran) the one-node Slurm on
    the first instance, read as an HPC side (`batch`)."""

    kind: ClassVar[str] = "aws"

    region: str
    instance_type: str
    instances: tuple[AwsInstance, ...]
    gpus_per_instance: int  # what the instance type has, not what the workload asks for
    steps: tuple[BatchStep, ...]
    executed: bool
    not_executed_reason: str = ""
    endpoint_url: str | None = None
    emulated: bool = False  # the AWS API is a stand-in (moto): nothing exists to run on
    market: str = "on-demand"
    gpu_product: str | None = None
    bucket: str = ""
    staging: AwsStaging | None = None
    security_group_id: str = ""
    key_name: str = ""
    # Set once the steps ran on the first instance (executed): its one-node Slurm.
    batch: HpcOutputs | None = None

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return tuple(i.id for i in self.instances)

    def facts(self, run: bool = True) -> tuple[Fact, ...]:
        """What the outputs show the side is: moto (an endpoint on loopback), and with `run`, a run
        not executed (the instances themselves are what they are whether or not anything ran)."""
        found = []
        if self.emulated or (self.endpoint_url and reaches_loopback_url(self.endpoint_url)):
            found.append(Fact(EMULATED, f"{EMULATED} at {self.endpoint_url}: its instances exist only as API records"))
        if run and not self.executed:
            why = self.not_executed_reason or "the outputs say no step ran"
            found.append(Fact(NOT_EXECUTED, f"not executed: {why}"))
        return tuple(found)

    def label(self, run: bool = True) -> str:
        """The side's label (`run`: the run's, else the instances')."""
        return label(REAL, self.facts(run))

    @property
    def gpus_total(self) -> int:
        return self.gpus_per_instance * len(self.instances)

    @classmethod
    def upgrade(cls, raw: Mapping[str, Any], version: int) -> dict[str, Any]:
        found = dict(raw)
        if version == 1:
            # Version 1's `gpus` was the instance type's; the workload's ask was not recorded.
            found["gpus_per_instance"] = found.pop("gpus", 0)
            found.setdefault("gpus_requested", 0)
            batch_keys = ("scheduler", "host", "port", "user", "known_hosts", "run_dir", "telemetry", "logs")
            batch = {k: found.pop(k) for k in batch_keys if k in found}
            if found.get("executed") and batch:
                found["batch"] = {
                    **batch,
                    "steps": found.get("steps", []),
                    "gpus_requested": 0,
                    "run_id": found.get("run_id", ""),
                    "provenance": "real",
                }
        return found


@dataclass(frozen=True)
class StackOutputs:
    """`pulumi stack output --json`, read: the run and each environment's typed outputs by name."""

    run: RunOutputs
    environments: Mapping[str, EnvironmentOutputs]


E = TypeVar("E", bound=EnvironmentOutputs)


def read_version(raw: Mapping[str, Any], where: str, default: int) -> int:
    """The outputs' version (`default` where they carry none: the stack's own, else 1)."""
    version = raw.get("version", default)
    if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_VERSIONS:
        raise OutputsError(
            f"{where}.version: outputs of version {version!r}, this Atlas reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}; use the Atlas that wrote them, or run `pulumi up` with this one"
        )
    return version


def read_environment(cls: type[E], raw: Mapping[str, Any], where: str, default_version: int = 1) -> E:
    """One environment's raw outputs (a dict from `pulumi stack output --json`) as `cls`."""
    if not isinstance(raw, Mapping):
        raise OutputsError(f"{where}: expected an object, found {type(raw).__name__}")
    version = read_version(raw, where, default_version)
    upgraded = cls.upgrade(raw, version)
    upgraded.pop("kind", None)
    upgraded.pop("version", None)
    return _build(cls, upgraded, where)


def read_run(raw: Any) -> RunOutputs:
    """The `atlas` output; outputs written without one (hand-made, or older) read as version 1."""
    if raw is None:
        return RunOutputs(version=1)
    if not isinstance(raw, Mapping):
        raise OutputsError(f"atlas: expected an object, found {type(raw).__name__}")
    version = read_version(raw, "atlas", 1)
    return _build(RunOutputs, {**raw, "version": version}, "atlas")


# --- reading a dataclass from plain JSON values ----------------------------------------------


def _plain(value: Any) -> Any:
    """asdict's output as JSON values: tuples as lists (what Pulumi exports anyway)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


T = TypeVar("T")


def _build(cls: type[T], raw: Mapping[str, Any], where: str) -> T:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not item.init:
            continue
        key = f"{where}.{item.name}"
        if item.name not in raw or (raw[item.name] is None and not _optional(hints[item.name])):
            has_default = item.default is not dataclasses.MISSING or item.default_factory is not dataclasses.MISSING
            if not has_default:
                raise OutputsError(f"{key}: missing; the outputs were not written by this Atlas's components")
            continue
        values[item.name] = _convert(hints[item.name], raw[item.name], key)
    return cls(**values)


def _optional(hint: Any) -> bool:
    return _is_union(hint) and type(None) in typing.get_args(hint)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _convert(hint: Any, value: Any, where: str) -> Any:
    if _is_union(hint):
        if value is None and type(None) in typing.get_args(hint):
            return None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner, value, where)
    origin = typing.get_origin(hint)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise OutputsError(f"{where}: expected a list, found {type(value).__name__}")
        (item,) = typing.get_args(hint)[:1]
        return tuple(_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or hint is Any:
        if origin is not None and not isinstance(value, Mapping):
            raise OutputsError(f"{where}: expected an object, found {type(value).__name__}")
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise OutputsError(f"{where}: expected an object, found {type(value).__name__}")
        return _build(typing.cast(type[Any], hint), value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise OutputsError(f"{where}: expected true or false, found {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise OutputsError(f"{where}: expected a whole number, found {value!r}")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise OutputsError(f"{where}: expected a number, found {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise OutputsError(f"{where}: expected text, found {type(value).__name__}")
        return str(value)
    raise OutputsError(f"{where}: cannot read a {hint!r}")  # a field type this reader lacks: a bug here
