"""The router: every kind of environment Atlas builds and reads (Kubernetes/OpenShift, HPC, AWS),
one module each, chosen by the `kind` its outputs carry.

`KINDS` is the one list. The stack program builds each kind's components through it, and
`scripts/compare`, `monitor` and `nodes` read a stack's outputs through it
(`read_stack_outputs`: each environment's typed, versioned dataclass of infra/outputs.py) and
then ask the environment's own kind for its records, its monitor source or its backfill.
Nothing else chooses code by a kind's name. Adding a kind is one module implementing
`EnvironmentKind` (base.py), its outputs dataclass in infra/outputs.py, and one line below;
tests/unit/test_kinds.py checks every listed kind implements every operation.
"""

from __future__ import annotations

import dataclasses
import urllib.error
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from infra.kinds.aws import AwsKind
from infra.kinds.base import BackfillRequest, BuildContext, Built, DoctorContext, EnvironmentKind
from infra.kinds.hpc import HpcKind
from infra.kinds.kubernetes import KubernetesKind
from infra.outputs import EnvironmentOutputs, OutputsError, RunOutputs, StackOutputs, read_environment, read_run

if TYPE_CHECKING:
    from infra.compare.access import Access
    from infra.compare.records import EnvironmentRecords
    from infra.doctor import DoctorReport
    from infra.monitor.sources import EnvironmentSource
    from infra.stack_config import StackConfig
    from infra.workload.model import Workload

__all__ = [
    "KINDS",
    "BackfillRequest",
    "BuildContext",
    "Built",
    "DoctorContext",
    "EnvironmentKind",
    "backfill",
    "build_environments",
    "collect_environments",
    "doctor",
    "kind_named",
    "kind_of",
    "monitor_sources",
    "outputs_before_up",
    "poll_intervals",
    "read_stack_outputs",
    "stages_source",
]

KINDS: Mapping[str, EnvironmentKind[Any]] = MappingProxyType(
    {kind.name: kind for kind in (KubernetesKind(), HpcKind(), AwsKind())}
)


def kind_named(name: object, where: str = "kind") -> EnvironmentKind[Any]:
    """The kind of that name; an OutputsError naming the ones Atlas knows otherwise."""
    found = KINDS.get(name) if isinstance(name, str) else None
    if found is None:
        raise OutputsError(
            f"{where}: {name!r} is not a kind of environment this Atlas reads; it reads {', '.join(KINDS)}"
        )
    return found


def kind_of(outputs: EnvironmentOutputs) -> EnvironmentKind[Any]:
    return KINDS[outputs.kind]


def read_stack_outputs(raw: Mapping[str, Any]) -> StackOutputs:
    """`pulumi stack output --json` as typed outputs; OutputsError naming the key and the fix for
    what cannot be read (an unknown version or kind, a missing field)."""
    run = read_run(raw.get("atlas"))
    environments = raw.get("environments") or {}
    if not isinstance(environments, Mapping):
        raise OutputsError(f"environments: expected an object, found {type(environments).__name__}")
    typed = {}
    for name, env in sorted(environments.items()):
        where = f"environments.{name}"
        if not isinstance(env, Mapping):
            raise OutputsError(f"{where}: expected an object, found {type(env).__name__}")
        kind = kind_named(env.get("kind"), f"{where}.kind")
        typed[str(name)] = read_environment(kind.outputs_type, env, where, run.version)
    return StackOutputs(run, typed)


# --- the stack program -------------------------------------------------------------------------


def stages_source(config: StackConfig, workload: Workload) -> bool:
    """Whether any environment of the stack needs the workload's code staged."""
    return any(kind.stages_source(config, workload) for kind in KINDS.values())


def build_environments(context: BuildContext) -> dict[str, Built]:
    """Every environment the stack config enables, by name, kind after kind."""
    built: dict[str, Built] = {}
    for kind in KINDS.values():
        found = kind.build(context)
        built |= found
        # The first image built (the Kubernetes side's, listed first) is the one later kinds run.
        image = next((b.image for b in found.values() if b.image is not None), None)
        if context.image is None and image is not None:
            context = dataclasses.replace(context, image=image)
    return built


# --- reading what was built ---------------------------------------------------------------------


def outputs_before_up(config: Mapping[str, Any], stack: str, run: RunOutputs) -> StackOutputs:
    """Before the first `pulumi up`: the environments a stack file's `config:` names, as outputs
    with no steps (enough to judge nodes and estimate waits)."""
    environments: dict[str, EnvironmentOutputs] = {}
    for kind in KINDS.values():
        environments |= kind.outputs_before_up(config, stack)
    return StackOutputs(run, environments)


# What reaching an environment can raise, kept with the environment's records as why it was not read.
UNREACHABLE = (OSError, LookupError, ValueError, urllib.error.URLError)


def collect_environments(
    outputs: StackOutputs,
    access: Access,
    raw_dir: Path,
    unreachable: Callable[[str, str], None] | None = None,
) -> list[EnvironmentRecords]:
    """Each environment's own records; one that cannot be reached is kept, with why (and told to
    `unreachable(name, reason)` where given)."""
    from infra.compare.contract import contract_from_report, with_sweep_definitions
    from infra.hpc.ssh import SshError

    # The swept steps' sweeps (their metric, their points' values) are the definition's.
    contract = with_sweep_definitions(contract_from_report(outputs.run.report), outputs.run)
    result = []
    for name, env in sorted(outputs.environments.items()):
        kind = kind_of(env)
        try:
            result.append(kind.collect(name, env, access, raw_dir / name, contract))
        except (*UNREACHABLE, SshError) as error:
            reason = f"not collected: {type(error).__name__}: {error}"
            result.append(kind.unreachable(name, env, reason))
            if unreachable is not None:
                unreachable(name, reason)
    return result


def poll_intervals(outputs: StackOutputs, access: Access, override_s: float | None = None) -> dict[str, float]:
    """How often each environment that asks a batch scheduler may ask it: `override_s` (a flag),
    else the site's configured interval (`Access.poll_interval_s`)."""
    return {
        name: override_s if override_s is not None else access.poll_interval_s(name)
        for name, env in sorted(outputs.environments.items())
        if kind_of(env).polls_scheduler(env)
    }


def monitor_sources(
    outputs: StackOutputs, access: Access, interval_s: float | None = None
) -> dict[str, EnvironmentSource]:
    """The monitor's source for every environment of the outputs, whatever its kind; each
    scheduler is polled at `interval_s`, else at its site's interval (`poll_intervals`)."""
    intervals = poll_intervals(outputs, access, interval_s)
    return {
        name: kind_of(env).monitor_source(name, env, access, intervals.get(name, access.poll_interval_s(name)))
        for name, env in sorted(outputs.environments.items())
    }


def backfill(request: BackfillRequest, outputs: EnvironmentOutputs, echo: Callable[[str], None]) -> None:
    """Start or stop backfill in one environment, as its kind does it."""
    kind_of(outputs).backfill(request, outputs, echo)


# --- the pre-flight check -----------------------------------------------------------------------


def doctor(config: StackConfig, workload: Workload, access: Access) -> DoctorReport:
    """`atlas doctor`: every environment the stack's config declares, checked by its own kind
    before the first `pulumi up`, kind after kind."""
    from infra.doctor import DoctorReport

    context = DoctorContext(config, workload, access)
    environments = []
    for kind in KINDS.values():
        environments += list(kind.doctor(context).values())
    return DoctorReport(config.stack, tuple(environments))
