"""The whole `atlas:` configuration of a stack as one pydantic model, gathering each section's own.

`StackModel` is the only reader of a stack's `atlas:*` keys: the top-level keys (`workload`,
`runId`, `workloadSource`) are its own fields, each section's model lives beside the code that
uses it (`infra/openshift/settings_parser.py`, `infra/hpc/target_parser.py`,
`infra/aws/settings_parser.py`, `infra/nodes/settings.py`). infra/config.py validates a stack's
values with it and builds the frozen dataclasses of infra/stack_config.py from the result;
infra/config_reference.py draws docs/configuration.md and the JSON Schema from it, so the
reference lists exactly the keys the code reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints, model_validator

from infra.aws.settings import AwsConfigError
from infra.aws.settings_parser import AwsModel
from infra.config_schema import Bool, ConfigSection, OneLine, Problem, Rule, StepNames, WholeNumber, validate_section
from infra.errors import AtlasConfigError
from infra.hpc.arrays import MAX_ATTEMPTS as MAX_SWEEP_ATTEMPTS
from infra.hpc.target import PROVENANCE_NOT_STATED, HpcConfigError
from infra.hpc.target_parser import HpcTargetModel
from infra.nodes.settings import BackfillModel
from infra.openshift.settings import OpenShiftSettingsError
from infra.openshift.settings_parser import OpenShiftModel
from infra.provenance import REAL, claims_real, loopback_host_fact, refusal
from infra.validation import is_dns_label, switched_off

PROJECT = "atlas"
RUN_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
# The sections whose values are structured (YAML objects) rather than strings.
OBJECT_KEYS = frozenset({"openshift", "hpc", "aws", "backfill", "sweep"})
# The error class each section's refusals carry (callers and tests tell them apart).
SECTION_ERRORS: dict[str, type[AtlasConfigError]] = {
    "openshift": OpenShiftSettingsError,
    "hpc": HpcConfigError,
    "aws": AwsConfigError,
}


def _provenance(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\r" in value:
        raise Problem(
            f"expected text saying what the environment is (`real`, or what stands in, e.g. `local stand-in: mock "
            f"GPUs`), found {value!r}",
            "set it with `pulumi config set --path atlas:hpc.<name>.provenance real`",
        )
    return REAL if claims_real(value) else value.strip()


class HpcEnvironmentModel(HpcTargetModel):
    """`atlas:hpc.<name>`: one batch-scheduler environment: its login node and scheduler, and how the run treats it."""

    enabled: Bool = Field(True, description="false: the environment is not read and not built.", examples=[False])
    wait_for: StepNames | None = Field(
        None, description="Steps whose jobs `pulumi up` waits for, so their failure fails the update; default: "
        "every step but the last.", examples=[["make-hdf5"]])
    provenance: Annotated[str, BeforeValidator(_provenance)] = Field(
        PROVENANCE_NOT_STATED, description="What the environment is, shown beside its name in every report: `real`, "
        "or what stands in. It may only narrow what Atlas observes (infra/provenance.py): `real` is refused for a "
        "login node on loopback, and the readers add what they see (mock GPUs in the scheduler's GPU types).",
        examples=["real"])

    @model_validator(mode="after")
    def _not_upgraded(self) -> Any:
        # The host as written; an ssh config alias that resolves to loopback is refused by the
        # component, which resolves it (infra/hpc/components.py).
        why = refusal(self.provenance, [loopback_host_fact("login node", self.host)])
        if why:
            raise Problem(
                why,
                "say what stands in instead, e.g. `pulumi config set --path atlas:hpc.<name>.provenance "
                "'local stand-in: Slurm on this host'`, or leave it out",
                ".provenance",
            )
        return self


def _run_id(value: Any) -> Any:
    text = str(value)
    if not RUN_ID.match(text):
        raise Problem(f"{text!r} is not a run id", "use 1 to 32 lower-case letters, digits and '-'")
    return text


def _workload_source(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise Problem(f"expected the path of a clone or git bundle, found {value!r}",
                      "set it with `pulumi config set atlas:workloadSource PATH`")
    return value


def _environments(value: Any) -> Any:
    """`atlas:hpc`: the environments by name, those switched off (`enabled: false`) left out."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise Problem(f"expected an object, found {type(value).__name__}", "write it as `name: {...}` lines")
    kept = {}
    for name, env in sorted(value.items(), key=lambda item: str(item[0])):
        if not is_dns_label(str(name)):
            raise Problem(
                f"the environment name {str(name)!r} is not a valid Kubernetes name",
                "rename it: at most 63 lower-case letters, digits and '-', starting and ending with a letter or "
                "digit",
                f".{name}",
            )
        if switched_off(env):
            continue
        kept[str(name)] = env
    return kept


# The sections with an `enabled` switch, read no further than their keys' names when it is off.
SWITCHABLE: dict[str, type[ConfigSection]] = {"openshift": OpenShiftModel, "aws": AwsModel, "backfill": BackfillModel}


class SweepModel(ConfigSection):
    """`atlas:sweep`: how a stack runs the workload's swept steps (docs/workloads.md, "Sweeps")."""

    max_attempts: Annotated[int, WholeNumber(1, MAX_SWEEP_ATTEMPTS)] = Field(
        1, description="How many times a sweep's point may run: above 1, `pulumi up --refresh` runs the points "
        "that failed or were killed again, as one new array per chunk on LSF and Slurm (never a point that "
        "succeeded or still runs); on Kubernetes the Indexed Job's backoffLimitPerIndex is one less.",
        examples=[3])


class StackModel(ConfigSection):
    """`atlas:*`: a stack's whole configuration; at least one of openshift, hpc and aws must be enabled."""

    workload: Annotated[str, OneLine()] = Field(
        "probe", description="The workload: the name of one that ships with Atlas (workloads/), or the path of a "
        "workload.yaml or its folder.", examples=["biggan"])
    run_id: Annotated[str, Rule(_run_id, StringConstraints(pattern=RUN_ID.pattern))] = Field(
        "1", alias="runId", description="Every job name and label derives from it: bump it to run the workload "
        "afresh.", examples=["2"])
    workload_source: Annotated[str, BeforeValidator(_workload_source)] | None = Field(
        None, alias="workloadSource", description="A local clone or git bundle of the workload's repository, for "
        "machines without network (it must hold the pinned commit).", examples=["~/src/BigGAN-PyTorch.bundle"])
    openshift: OpenShiftModel | None = Field(None, description="The OpenShift (or plain Kubernetes) side.")
    hpc: Annotated[dict[str, HpcEnvironmentModel], BeforeValidator(_environments)] = Field(
        default_factory=dict, description="The HPC sides (LSF or Slurm over SSH), by name (a Kubernetes-style name, "
        "e.g. satori).")
    aws: AwsModel | None = Field(None, description="Rented AWS GPU instances.")
    backfill: BackfillModel | None = Field(None, description="Backfill that yields to real jobs.")
    sweep: SweepModel = Field(default_factory=SweepModel, description="How swept steps run.")

    @model_validator(mode="before")
    @classmethod
    def _switched_off(cls, value: Any) -> Any:
        """A section with `enabled: false` is read no further than its keys' names."""
        if not isinstance(value, Mapping):
            return value
        kept = dict(value)
        for name in ("openshift", "aws", "backfill"):
            section = kept.get(name)
            if switched_off(section):
                model = SWITCHABLE[name]
                unknown = sorted(str(k) for k in section if k not in model.known_keys())
                if not unknown:
                    kept[name] = None
        return kept


def validate_stack(values: Mapping[str, Any]) -> StackModel:
    """The stack's `atlas:*` values (keys without the prefix) validated; the first refusal raised as
    its section's error class, naming the full key (`atlas:openshift.storage.data.size`)."""
    return validate_section(
        StackModel,
        values,
        f"{PROJECT}:",
        lambda loc: SECTION_ERRORS.get(str(loc[0]) if loc else "", AtlasConfigError),
    )
