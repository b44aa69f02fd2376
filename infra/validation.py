"""Readers for configuration sections that report the exact key, what was found and the fix.

Every parser of user input (workload definitions, `atlas:openshift`, `atlas:hpc.<name>`,
`atlas:aws`, ...) raises its own error class so callers can tell them apart, but words them
the same way: `<key>: <problem>; <fix>`. One `Fields` per error class holds the readers:

    _fields = Fields(WorkloadError)
    section = _fields.mapping(raw, "steps[0]")
    _fields.reject_unknown(section, ("name", "command"), "steps[0]")

`pulumi config set` stores scalars as strings, so the number and boolean readers also take
"3" and "true".
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Mapping
from typing import Any, Generic, TypeVar

ErrorT = TypeVar("ErrorT", bound=Exception)

_WHOLE_NUMBER = re.compile(r"-?[0-9]+")


class Fields(Generic[ErrorT]):
    """Section readers that raise `error(f"{key}: {problem}; {fix}")`."""

    def __init__(self, error: type[ErrorT]) -> None:
        self.error = error

    def fail(self, key: str, problem: str, fix: str) -> ErrorT:
        return self.error(f"{key}: {problem}; {fix}")

    def mapping(self, value: Any, key: str, *, allow_missing: bool = False) -> Mapping[str, Any]:
        """The section itself; with `allow_missing`, an absent section (None) reads as empty."""
        if value is None and allow_missing:
            return {}
        if not isinstance(value, Mapping):
            # The type only, never the value: a secret pasted one level too high must not be echoed.
            raise self.fail(key, f"expected an object, found {type(value).__name__}", "write it as `key: value` lines")
        return value

    def reject_unknown(self, section: Mapping[str, Any], allowed: Collection[str], key: str) -> None:
        unknown = sorted(str(k) for k in section if k not in allowed)
        if unknown:
            names = sorted(allowed)
            raise self.fail(
                key, f"unknown key(s) {', '.join(unknown)}", f"remove them or use one of: {', '.join(names)}"
            )

    def boolean(self, section: Mapping[str, Any], field: str, key: str, default: bool) -> bool:
        value = section.get(field, default)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise self.fail(
                f"{key}.{field}", f"expected true or false, found {value!r}", f"write `{field}: true` or `false`"
            )
        return value

    def optional_text(self, section: Mapping[str, Any], field: str, key: str, max_len: int = 4096) -> str | None:
        """A one-line string, or None where the field is absent."""
        value = section.get(field)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or "\n" in value or "\r" in value or "\0" in value:
            raise self.fail(
                f"{key}.{field}", f"expected a one-line string, found {value!r}", "write it as a quoted string"
            )
        if len(value) > max_len:
            raise self.fail(f"{key}.{field}", f"is {len(value)} characters long", f"use at most {max_len}")
        return value

    def integer(
        self,
        section: Mapping[str, Any],
        field: str,
        key: str,
        default: int | None,
        minimum: int,
        maximum: int | None = None,
    ) -> int | None:
        value = section.get(field, default)
        if value is None:
            return None
        if isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(
                f"{key}.{field}", f"expected a whole number, found {value!r}", f"write a number >= {minimum}"
            )
        if value < minimum or (maximum is not None and value > maximum):
            problem = f"{value} is negative" if value < 0 else f"{value} is out of range"
            bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise self.fail(f"{key}.{field}", problem, f"use a number {bounds}")
        return value

    def number(
        self, section: Mapping[str, Any], field: str, key: str, default: float, minimum: float, maximum: float
    ) -> float:
        value = section.get(field, default)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"{key}.{field}", f"expected a number, found {value!r}", f"write e.g. {default:g}")
        if not minimum <= float(value) <= maximum:
            raise self.fail(f"{key}.{field}", f"{value} is out of range", f"use {minimum:g} to {maximum:g}")
        return float(value)
