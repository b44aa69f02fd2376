"""A scheduler's own options, a target's `scheduler_options`: the checks every scheduler's
`parse_options` shares, with errors that name the key and the fix.

Each scheduler says which options it takes and what each may be (LSF: `memory_unit`; both:
`max_array_size`, the site's cap on a job array); generic code never names one (target_parser.py
hands the section to the target's scheduler class, the BatchJob provider hands it its
`scheduler_options` input).
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


MAX_ARRAY_SIZE = "max_array_size"
# Beyond any site's: LSF's MAX_JOB_ARRAY_SIZE is at most 2,147,483,646, Slurm's MaxArraySize 4,000,001.
_ARRAY_SIZE_CEILING = 4_000_001


def array_size_help(variable: str, default: int, where: str) -> tuple[str, str]:
    """`max_array_size`'s description for one scheduler (`option_help`)."""
    return (
        f"The cluster's cap on a job array ({variable}, `{where}`): a swept step with more points is split "
        f"into several arrays of at most this many; default {default}, the scheduler's own default.",
        "500",
    )


def array_size_option(section: Mapping[str, Any], key: str, variable: str) -> dict[str, str]:
    """`max_array_size` as text where the target gives one (absent: the scheduler's default, so a
    target without it keeps the options it always had); refused unless a whole number from 1."""
    value = section.get(MAX_ARRAY_SIZE)
    if value is None:
        return {}
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise option_error(
            option_key(key, MAX_ARRAY_SIZE), f"expected a whole number, found {value!r}", f"use {variable}"
        )
    if not 1 <= int(value) <= _ARRAY_SIZE_CEILING:
        raise option_error(
            option_key(key, MAX_ARRAY_SIZE), f"{value} is outside 1 to {_ARRAY_SIZE_CEILING}", f"use {variable}"
        )
    return {MAX_ARRAY_SIZE: str(int(value))}


def job_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options that change what a job is: all but `max_array_size`, which only says how a
    sweep is split (its SweepJob's chunks show that), so a site's limit added later replaces no job."""
    return {name: value for name, value in options.items() if name != MAX_ARRAY_SIZE}
