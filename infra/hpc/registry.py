"""Every batch scheduler Atlas drives, by the name a target's `scheduler` key gives it.

The one list of them: config validation (target_parser.py), the providers, the report, the
monitor, `scripts/nodes` and backfill ask here, and a name not listed is an error everywhere
(never quietly taken for Slurm). Everything Atlas knows of a scheduler is on its class (the
`infra/hpc/<name>/` package); this module only names them, so scheduler.py imports none of them.
Adding a scheduler is its package and one line here (docs/architecture.md shows PBS Pro).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from infra.hpc.lsf import LsfScheduler
from infra.hpc.scheduler import Scheduler, SchedulerError
from infra.hpc.slurm import SlurmScheduler

SCHEDULER_CLASSES: Mapping[str, type[Scheduler]] = MappingProxyType(
    {cls.name: cls for cls in (LsfScheduler, SlurmScheduler)}
)
SCHEDULER_NAMES: tuple[str, ...] = tuple(SCHEDULER_CLASSES)


class UnknownSchedulerError(SchedulerError, ValueError):
    """A scheduler name Atlas does not drive; the message lists the ones it does."""


def scheduler_class(name: object) -> type[Scheduler]:
    """The class for a `scheduler` value; what it knows without a target's options (label, options)."""
    found = SCHEDULER_CLASSES.get(name) if isinstance(name, str) else None
    if found is None:
        raise UnknownSchedulerError(f"unknown scheduler {name!r}; use {' or '.join(SCHEDULER_NAMES)}")
    return found


def scheduler_for(name: object, options: Mapping[str, str] | None = None) -> Scheduler:
    """The scheduler object for a target's `scheduler` value and its `scheduler_options` (as the
    class's `parse_options` returned them; absent ones take their defaults)."""
    return scheduler_class(name).from_options(options or {})
