"""`atlas:backfill`: backfill that yields, declared in the stack (so `pulumi destroy` removes it).

    atlas:backfill:
      enabled: true            # default true when the section is present
      workload: probe          # default: the stack's workload; its last GPU step is the work
      gpus: 2                  # one-GPU copies per environment (default 1)
      namespace: atlas-backfill
      priority: -10            # the PriorityClass's value: below every real pod (0 by default)
      partition: backfill      # the Slurm partition whose jobs are preempted and requeued
      environments: [openshift, satori-slurm]   # default: every environment that supports it

Pure: validated by `BackfillModel` (pydantic) into `BackfillSettings`, errors `<key>: <problem>; <fix>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from infra.config_schema import Bool, ConfigSection, Problem, WholeNumber, one_line, validate_section
from infra.errors import AtlasConfigError
from infra.hpc.registry import scheduler_class
from infra.validation import Fields, is_dns_label

PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_GPUS = 1024

_fields = Fields(AtlasConfigError)


@dataclass(frozen=True)
class BackfillSettings:
    workload: str | None
    gpus: int = 1
    namespace: str = "atlas-backfill"
    priority: int = -10
    partition: str = "backfill"
    environments: tuple[str, ...] | None = None  # None: every environment that supports backfill


def _workload(value: Any) -> Any:
    return one_line()(value)


def _partition(value: Any) -> Any:
    text = one_line()(value)
    if text is not None and not PARTITION.match(text):
        raise Problem(f"{text!r} is not a partition name", "use letters, digits, _ . -")
    return text


def _namespace(value: Any) -> Any:
    text = one_line()(value)
    if text is not None and not is_dns_label(text):
        raise Problem(f"{text!r} is not a Kubernetes name", "use lower-case letters, digits and '-'")
    return text


def _environments(value: Any) -> Any:
    if value is not None and (not isinstance(value, list) or not all(is_dns_label(e) for e in value)):
        raise Problem(f"expected a list of environment names, found {value!r}", "write e.g. [openshift, satori-slurm]")
    return value


class BackfillModel(ConfigSection):
    """`atlas:backfill`: one-GPU copies of a workload's step that yield to real jobs, on the environments that can."""

    enabled: Bool = Field(True, description="false: the section is not read and no backfill is declared.",
                          examples=[False])
    workload: Annotated[str, BeforeValidator(_workload)] | None = Field(
        None, description="The workload whose last GPU step is the work (a shipped name or a path); default: the "
        "stack's.", examples=["probe"])
    gpus: Annotated[int, WholeNumber(1, MAX_GPUS)] = Field(
        1, description="One-GPU copies per environment.", examples=[2])
    namespace: Annotated[str, BeforeValidator(_namespace)] = Field(
        "atlas-backfill", description="The Kubernetes namespace the copies run in.", examples=["atlas-backfill"])
    priority: Annotated[int, WholeNumber(-1_000_000, -1)] = Field(
        -10, description="The PriorityClass's value: below every real pod (0 by default).", examples=[-100])
    partition: Annotated[str, BeforeValidator(_partition)] = Field(
        "backfill", description="The Slurm partition whose jobs are preempted and requeued.", examples=["backfill"])
    environments: Annotated[list[str], BeforeValidator(_environments)] | None = Field(
        None, description="The environments that take backfill; default: every one that can (Kubernetes, Slurm).",
        examples=[["openshift", "satori-slurm"]])

    def settings(self) -> BackfillSettings:
        return BackfillSettings(
            workload=self.workload,
            gpus=self.gpus,
            namespace=self.namespace,
            priority=self.priority,
            partition=self.partition,
            environments=tuple(self.environments) if self.environments is not None else None,
        )


def parse_backfill_settings(raw: Any, key: str = "atlas:backfill") -> BackfillSettings | None:
    """The section validated by `BackfillModel`; None when it is absent or `enabled: false`."""
    if raw is None:
        return None
    model = validate_section(BackfillModel, raw, key)
    return model.settings() if model.enabled else None


def check_backfill_targets(
    settings: BackfillSettings,
    has_kubernetes: bool,
    hpc_schedulers: dict[str, str],
    key: str = "atlas:backfill",
) -> None:
    """Every environment named can take backfill (Kubernetes; a scheduler whose class says it can,
    Slurm). The workload itself is located by config.py, like `atlas:workload`."""
    schedulers = {name: scheduler_class(scheduler) for name, scheduler in hpc_schedulers.items()}
    capable = {name for name, scheduler in schedulers.items() if not scheduler.backfill_unsupported}
    if has_kubernetes:
        capable.add("openshift")
    for name in settings.environments or ():
        if name not in capable:
            refused = schedulers.get(name)
            why = (
                f"{refused.label} environment: {refused.backfill_unsupported}"
                if refused is not None
                else "not an environment of this stack"
            )
            raise _fields.fail(
                f"{key}.environments",
                f"{name!r} cannot take backfill ({why})",
                f"use some of: {', '.join(sorted(capable)) or 'none here'}",
            )
    if not capable:
        raise _fields.fail(key, "no environment of this stack can take backfill", "add openshift or a Slurm side")
