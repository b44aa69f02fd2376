"""Readers of one value of a workload definition: text, names, paths, numbers, argv tokens, env, resources.

Each takes the key path it reports (`steps[2].resources.memory`), so an error names the key,
what was found and the fix. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from infra.validation import Fields, is_dns_label
from infra.workload.model import Resources, WorkloadError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Binary suffixes only: Slurm reads "64G" as 64 GiB while Kubernetes reads it as 64e9 bytes,
# so a decimal suffix would ask the two sides for different amounts.
MEMORY = re.compile(r"^(?P<number>[0-9]+)(?P<unit>Ki|Mi|Gi|Ti)?$")
MEMORY_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
WALLTIME = re.compile(
    r"^(?:(?P<days>[0-9]+)-)?(?P<hours>[0-9]{1,3}):(?P<minutes>[0-5][0-9]):(?P<seconds>[0-5][0-9])$"
)
MAX_GPUS_PER_NODE = 16
MAX_PATTERN = 500  # a regular expression's length (report.throughput.pattern, a sweep's metric)

_fields = Fields(WorkloadError)
fail = _fields.fail
read_mapping = _fields.mapping
reject_unknown = _fields.reject_unknown


def read_required(section: Mapping[str, Any], field: str, key: str) -> Any:
    if field not in section or section[field] is None:
        raise fail(f"{key}.{field}" if key else field, "required but missing", f"add `{field}:`")
    return section[field]


def read_text(value: Any, key: str, what: str = "a non-empty string") -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail(key, f"expected {what}, found {value!r}", "write it as a quoted string")
    if "\n" in value or "\0" in value:
        raise fail(key, "contains a newline or NUL character", "keep it on one line")
    return value


def read_dns_label(value: Any, key: str) -> str:
    # A step name becomes part of a Kubernetes Job name and a scheduler job name.
    text = read_text(value, key)
    if not is_dns_label(text):
        raise fail(
            key,
            f"{text!r} is not a DNS label",
            "use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit",
        )
    return text


def read_relative_path(value: Any, key: str) -> str:
    text = read_text(value, key)
    path = PurePosixPath(text)
    if path.is_absolute():
        raise fail(
            key, f"{text!r} is absolute", "write it relative (each environment chooses where its root is)"
        )
    if ".." in path.parts:
        raise fail(key, f"{text!r} contains '..'", "write a path that stays inside its root")
    if any(ch in text for ch in "$`\\*?[]{}~;&|<>'\" "):
        raise fail(
            key,
            f"{text!r} contains a shell metacharacter or space",
            "use letters, digits, '.', '_', '-', '/'",
        )
    return str(path)


def read_positive_int(value: Any, key: str, minimum: int = 1, maximum: int | None = None) -> int:
    # bool is an int in Python; YAML's `yes` would otherwise read as 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(key, f"expected a whole number, found {value!r}", f"write a number >= {minimum}")
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise fail(key, f"{value} is out of range", f"use a number {bounds}")
    return value


def read_argument(value: Any, key: str) -> str:
    """One command-line token. Numbers are accepted only where YAML keeps their text exact."""
    if isinstance(value, bool):
        raise fail(key, f"YAML read this as the boolean {value}", 'quote it, e.g. "true", or remove it')
    if isinstance(value, float):
        # PyYAML turns 1.0e-4 into 0.0001: the job would get different text than was written.
        raise fail(
            key, f"the number {value!r} would be re-formatted", f'quote it as written, e.g. "{value}"'
        )
    if isinstance(value, int):
        return str(value)
    text = read_text(value, key, "a string or whole number")
    if "$" in text or "`" in text:
        # Kubernetes expands $(VAR) in args, the quoted HPC line expands nothing: the same
        # argument would mean different things on the two sides.
        raise fail(
            key,
            f"{text!r} contains '$' or '`', which Kubernetes and the job script would expand differently",
            "write the value out, or set it per environment under overrides",
        )
    return text


def read_arguments(value: Any, key: str, allow_empty: bool) -> tuple[str, ...]:
    if isinstance(value, str):
        raise fail(key, "expected a list, found a string", "write one token per item: [python, main.py]")
    if not isinstance(value, list) or (not value and not allow_empty):
        raise fail(
            key, f"expected a{'' if allow_empty else ' non-empty'} list, found {value!r}", "write a YAML list"
        )
    return tuple(read_argument(item, f"{key}[{i}]") for i, item in enumerate(value))


def read_env(value: Any, key: str) -> tuple[tuple[str, str], ...]:
    section = read_mapping(value if value is not None else {}, key)
    pairs = []
    for name, raw in section.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise fail(
                f"{key}.{name}", "not a valid environment variable name", "use letters, digits and '_'"
            )
        pairs.append((name, read_argument(raw, f"{key}.{name}")))
    return tuple(sorted(pairs))


def parse_memory(value: Any, key: str) -> tuple[str, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise fail(
            key, f"expected a quantity, found {value!r}", "write it like 64Gi, 500Mi or 1073741824 (bytes)"
        )
    match = MEMORY.match(text)
    if not match:
        decimal = re.match(r"^[0-9]+(?:\.[0-9]+)?\s*([kKMGT]B?|[kKMGT]i?B)$", text)
        fix = (
            "use a binary unit (Ki, Mi, Gi, Ti): Slurm reads 64G as 64 GiB but Kubernetes as 64e9 bytes"
            if decimal
            else "write it like 64Gi, 500Mi or 1073741824 (bytes)"
        )
        raise fail(key, f"{text!r} is not a quantity Atlas reads the same on every side", fix)
    number = int(match["number"])
    if number <= 0:
        raise fail(key, f"{text!r} is zero", "ask for some memory, e.g. 1Gi")
    return text, number * MEMORY_UNITS[match["unit"]]


def parse_walltime(value: Any, key: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        raise fail(
            key,
            f"found the number {value}; YAML reads an unquoted 12:00:00 as a base-60 number",
            'quote it: walltime: "12:00:00" (or "1-00:00:00" for a day)',
        )
    text = read_text(value, key)
    match = WALLTIME.match(text)
    if not match:
        raise fail(key, f"{text!r} is not a walltime", 'write "HH:MM:SS" or "D-HH:MM:SS", quoted')
    seconds = (
        int(match["days"] or 0) * 86400
        + int(match["hours"]) * 3600
        + int(match["minutes"]) * 60
        + int(match["seconds"])
    )
    if seconds <= 0:
        raise fail(key, "is zero", "give the step time to run")
    return seconds


RESOURCE_KEYS = ("nodes", "gpus_per_node", "cpus_per_task", "memory", "walltime")


def parse_resources(value: Any, key: str, base: Resources | None = None) -> Resources:
    """Full resources, or (with `base`) a partial set laid over `base` for an override."""
    section = read_mapping(value, key)
    reject_unknown(section, RESOURCE_KEYS, key)
    fields: dict[str, Any] = {}
    for field in RESOURCE_KEYS:
        if field not in section:
            if base is None:
                read_required(section, field, key)
            continue
        raw = section[field]
        if field == "memory":
            fields["memory"], fields["memory_bytes"] = parse_memory(raw, f"{key}.memory")
        elif field == "walltime":
            fields["walltime_seconds"] = parse_walltime(raw, f"{key}.walltime")
        elif field == "gpus_per_node":
            fields[field] = read_positive_int(raw, f"{key}.{field}", minimum=0, maximum=MAX_GPUS_PER_NODE)
        else:
            fields[field] = read_positive_int(raw, f"{key}.{field}")
    if base is not None:
        return replace(base, **fields)
    return Resources(**fields)
