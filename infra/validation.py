"""Readers for configuration sections that report the exact key, what was found and the fix.

Every parser of user input (workload definitions, `atlas:openshift`, `atlas:hpc.<name>`,
`atlas:aws`, ...) raises its own error class so callers can tell them apart, but words them
the same way: `<key>: <problem>; <fix>`. One `Fields` per error class holds the readers:

    _fields = Fields(WorkloadError)
    section = _fields.mapping(raw, "steps[0]")
    _fields.reject_unknown(section, ("name", "command"), "steps[0]")

`pulumi config set` stores scalars as strings, so the number and boolean readers also take
"3" and "true".

The rules more than one section checks live here too, once: Kubernetes names and label values,
git commits, refs and URLs, the examples' `REPLACE_WITH_...` placeholders, lists of step names,
and the `enabled` switch of an optional section.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Generic, TypeGuard, TypeVar

ErrorT = TypeVar("ErrorT", bound=Exception)

_WHOLE_NUMBER = re.compile(r"-?[0-9]+")
# A URL's userinfo (`//user:token@`, up to the authority's last `@`): a credential, never echoed.
_USERINFO = re.compile(r"//[^/\s'\"]*@")
USERINFO_SHOWN = "//<userinfo not shown>@"

# Kubernetes' names (RFC 1123), which every environment's names end up under (a step becomes a
# Job and a scheduler job name): a label (namespace, Job, step) at most 63 characters long, a
# subdomain (claim, StorageClass, host) at most 253. The patterns leave the length to the caller.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
# A Kubernetes label value: may be empty, and may hold upper case, '_' and '.' (at most 63).
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX = 63
# Git: a full commit id, a branch or tag name (callers also refuse ".."), a remote's URL.
GIT_COMMIT = re.compile(r"^[0-9a-f]{40}$")
GIT_REF = re.compile(r"^[A-Za-z0-9._/-]+$")
GIT_URL = re.compile(r"^(https://|ssh://|git@)[A-Za-z0-9._:/@~-]+$")
# git:// as well, where OpenShift's build controller clones (it speaks the Git protocol; the local
# cluster serves this repository so).
GIT_URL_OR_GIT_PROTOCOL = re.compile(r"^(https://|ssh://|git://|git@)[A-Za-z0-9._:/@~-]+$")
# What an example stack file writes where the user must put their own value.
PLACEHOLDER = "REPLACE_WITH"
# A URL's user information (`https://user:token@host`, `https://token@host`): a credential, masked
# wherever a URL is shown (a build's log, a git command line).
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")


def mask_url_credentials(text: str) -> str:
    """`text` with the user information of every URL in it masked (`https://***@host/...`)."""
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


def switched_off(section: object) -> TypeGuard[Mapping[Any, Any]]:
    """A config section (or HPC environment) with `enabled: false`, as the models read the switch: a
    bool, or the text `pulumi config set` stores ("false", any case). Everything that skips a section
    before the models have read it asks here, so it agrees with them."""
    return isinstance(section, Mapping) and str(section.get("enabled", True)).lower() == "false"


def is_dns_label(value: object) -> bool:
    """A string Kubernetes accepts as a namespace, Job or step name (length included)."""
    return isinstance(value, str) and len(value) <= DNS_LABEL_MAX and DNS_LABEL.match(value) is not None


def config_path(value: str, project_dir: Path | None) -> Path:
    """A path written in stack config: `~` expanded, and relative to the project (Pulumi.yaml's
    folder), not to the program's working directory (stacks/)."""
    path = Path(value).expanduser()
    return path if path.is_absolute() or project_dir is None else project_dir / path



def hide_userinfo(text: str) -> str:
    """`text` with every URL's userinfo hidden (`https://x-access-token:<token>@github.com/...`,
    `http://user:password@host`): a refusal may echo a URL, never the credential in it."""
    return _USERINFO.sub(USERINFO_SHOWN, text)


class Fields(Generic[ErrorT]):
    """Section readers that raise `error(f"{key}: {problem}; {fix}")` (a URL's userinfo hidden)."""

    def __init__(self, error: type[ErrorT]) -> None:
        self.error = error

    def fail(self, key: str, problem: str, fix: str) -> ErrorT:
        return self.error(hide_userinfo(f"{key}: {problem}; {fix}"))

    def mapping(self, value: Any, key: str, *, allow_missing: bool = False) -> Mapping[str, Any]:
        """The section itself; with `allow_missing`, an absent section (None) reads as empty."""
        if value is None and allow_missing:
            return {}
        if not isinstance(value, Mapping):
            # The type only, never the value: a secret pasted one level too high must not be echoed.
            raise self.fail(key, f"expected an object, found {type(value).__name__}", "write it as `key: value` lines")
        return value

    def enabled_section(self, raw: Any, key: str, allowed: Collection[str]) -> Mapping[str, Any] | None:
        """An optional section with an `enabled` switch (default true): None where it is absent
        or `enabled: false`, otherwise the section, its unknown keys refused."""
        if raw is None:
            return None
        section = self.mapping(raw, key)
        self.reject_unknown(section, allowed, key)
        if not self.boolean(section, "enabled", key, True):
            return None
        return section

    def kubernetes_name(self, value: Any, key: str, *, subdomain: bool = False) -> str:
        """A DNS label (namespace, Job, step) or, with `subdomain`, a DNS subdomain (claim, host)."""
        pattern, limit = (DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX) if subdomain else (DNS_LABEL, DNS_LABEL_MAX)
        if not isinstance(value, str) or len(value) > limit or not pattern.match(value):
            characters = "digits, '-' and '.'" if subdomain else "digits and '-'"
            raise self.fail(
                key,
                f"{value!r} is not a valid Kubernetes name",
                f"use at most {limit} lower-case letters, {characters}, starting and ending with a letter or digit",
            )
        return value

    def label_value(self, value: str, key: str) -> str:
        """A Kubernetes label value (a run id or stack name written into labels)."""
        if len(value) > LABEL_VALUE_MAX or not LABEL_VALUE.match(value):
            raise self.fail(
                key,
                f"{value!r} cannot be a label value",
                f"use at most {LABEL_VALUE_MAX} letters, digits, '-', '_', '.', starting and ending with a letter "
                "or digit",
            )
        return value

    def step_names(self, section: Mapping[str, Any], field: str, key: str) -> tuple[str, ...] | None:
        """A list of workload step names (e.g. the steps `pulumi up` waits for), or None where absent."""
        value = section.get(field)
        if value is None:
            return None
        if not isinstance(value, list) or not all(is_dns_label(name) for name in value):
            raise self.fail(f"{key}.{field}", f"expected a list of step names, found {value!r}", "e.g. [make-hdf5]")
        return tuple(value)

    def choice(
        self, section: Mapping[str, Any], field: str, key: str, choices: Collection[str], default: str | None, fix: str
    ) -> str:
        """One of `choices`; `fix` says how to set it where it is required (no default) and absent,
        and stands for the list where that is too long to print (over 20)."""
        value = section.get(field, default)
        if value is None:
            raise self.fail(f"{key}.{field}", "required but missing", fix)
        if not isinstance(value, str) or value not in choices:
            listing = ", ".join(sorted(choices)) if len(choices) <= 20 else fix
            raise self.fail(f"{key}.{field}", f"{value!r} is not known", f"use one of: {listing}")
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
