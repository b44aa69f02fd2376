"""A scheduler's own options, a target's `scheduler_options`: the checks every scheduler's
`parse_options` shares, with errors that name the key and the fix.

Each scheduler says which options it takes and what each may be (LSF: `memory_unit`; Slurm:
none); generic code never names one (target_parser.py hands the section to the target's
scheduler class, the BatchJob provider hands it its `scheduler_options` input).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from infra.hpc.target import HpcConfigError
from infra.validation import Fields

_fields = Fields(HpcConfigError)


def option_key(key: str, option: str) -> str:
    """Where an option is written: `atlas:hpc.satori.scheduler_options.memory_unit`."""
    return f"{key}.scheduler_options.{option}"


def option_error(key: str, problem: str, fix: str) -> HpcConfigError:
    return _fields.fail(key, problem, fix)


def options_section(options: Any, key: str, known: Collection[str], label: str) -> Mapping[str, Any]:
    """`scheduler_options` as a mapping (absent: empty) holding only options the scheduler
    (`label`) takes; an unknown one is refused, naming its own key."""
    section = _fields.mapping(options, f"{key}.scheduler_options", allow_missing=True)
    for option in sorted(str(name) for name in section):
        if option not in known:
            takes = f"use one of: {', '.join(sorted(known))}" if known else "remove it (it takes none)"
            raise option_error(option_key(key, option), f"is not an option of {label}", takes)
    return section
