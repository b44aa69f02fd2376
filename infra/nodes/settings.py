"""`atlas:backfill`: backfill that yields, declared in the stack (so `pulumi destroy` removes it).

    atlas:backfill:
      enabled: true            # default true when the section is present
      workload: probe          # default: the stack's workload; its last GPU step is the work
      gpus: 2                  # one-GPU copies per environment (default 1)
      namespace: atlas-backfill
      priority: -10            # the PriorityClass's value: below every real pod (0 by default)
      partition: backfill      # the Slurm partition whose jobs are preempted and requeued
      environments: [openshift, satori-slurm]   # default: every environment that supports it

Pure: parsed with infra.validation's readers, errors `<key>: <problem>; <fix>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infra.errors import AtlasConfigError
from infra.hpc.registry import scheduler_class
from infra.validation import Fields, is_dns_label

KEYS = ("enabled", "workload", "gpus", "namespace", "priority", "partition", "environments")
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


def parse_backfill_settings(raw: Any, key: str = "atlas:backfill") -> BackfillSettings | None:
    """None when the section is absent or `enabled: false`."""
    section = _fields.enabled_section(raw, key, KEYS)
    if section is None:
        return None
    workload = _fields.optional_text(section, "workload", key)
    gpus = _fields.integer(section, "gpus", key, 1, 1, MAX_GPUS)
    namespace = _fields.optional_text(section, "namespace", key) or "atlas-backfill"
    if not is_dns_label(namespace):
        raise _fields.fail(
            f"{key}.namespace", f"{namespace!r} is not a Kubernetes name", "use lower-case letters, digits and '-'"
        )
    priority = _fields.integer(section, "priority", key, -10, -1_000_000, -1)
    partition = _fields.optional_text(section, "partition", key) or "backfill"
    if not PARTITION.match(partition):
        raise _fields.fail(f"{key}.partition", f"{partition!r} is not a partition name", "use letters, digits, _ . -")
    environments = section.get("environments")
    if environments is not None and (
        not isinstance(environments, list) or not all(is_dns_label(e) for e in environments)
    ):
        raise _fields.fail(
            f"{key}.environments",
            f"expected a list of environment names, found {environments!r}",
            "write e.g. [openshift, satori-slurm]",
        )
    assert gpus is not None and priority is not None  # defaults given
    return BackfillSettings(
        workload=workload,
        gpus=gpus,
        namespace=namespace,
        priority=priority,
        partition=partition,
        environments=tuple(environments) if environments is not None else None,
    )


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
