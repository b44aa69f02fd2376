"""Every batch scheduler Atlas drives, by the name a target's `scheduler` key gives it.

The one list of them: config validation (target_parser.py), the providers, the monitor and
`atlas-nodes` ask here, and a name not listed is an error everywhere (never quietly taken
for Slurm). What differs between schedulers is data and methods on their classes (lsf.py,
slurm.py); this module only names them, so scheduler.py imports neither.
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


def scheduler_for(name: object, lsf_memory_unit: str = "MB") -> Scheduler:
    """The scheduler object for a target's `scheduler` value and its scheduler-specific options."""
    return scheduler_class(name).from_options({"lsf_memory_unit": lsf_memory_unit})
