"""The stack config's pydantic base: a section, field types with their rules, the one translation of pydantic's errors.

Every `atlas:` section is a model (infra/config_model.py gathers them): its fields carry the
type, the default, a description and an example, and the rules (validators) the section's values
must follow. The models are the only reader of the stack's config; `docs/configuration.md` and
`docs/atlas-config.schema.json` are drawn from them (infra/config_reference.py).

A rule refuses a value by raising `Problem(problem, fix, at=...)`: what is wrong and the fix,
without the key, which only pydantic knows (the error's location). `validate_section` turns the
first error of a `ValidationError` into the caller's error class, `<key>: <problem>; <fix>` with
the full key (`atlas:openshift.storage.data.access_mode`). Values are echoed only where a rule
echoes them: never for a field whose name says it holds a secret, and pydantic's own messages
(which never carry the input) are reworded, never passed on with their input.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, ClassVar, TypeVar, Union, get_args, get_origin

from annotated_types import Ge, GroupedMetadata, Le
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    ValidationError,
    model_validator,
)

from infra.errors import AtlasConfigError
from infra.validation import (
    DNS_LABEL,
    DNS_LABEL_MAX,
    DNS_SUBDOMAIN,
    DNS_SUBDOMAIN_MAX,
    PLACEHOLDER,
    hide_userinfo,
    is_dns_label,
    switched_off,
)

ModelT = TypeVar("ModelT", bound=BaseModel)
ErrorT = TypeVar("ErrorT", bound=Exception)
_WHOLE_NUMBER = re.compile(r"-?[0-9]+")
# A template stack's placeholder: the whole value in angle brackets, e.g. `<your OpenShift project>`.
TEMPLATE_PLACEHOLDER = re.compile(r"^<[^<>\n]+>$")
# Fields that hold a secret: set with `pulumi config set --secret`, never echoed.
SECRET_FIELDS = frozenset({"private_key", "private_key_passphrase", "secret_access_key"})


class Problem(ValueError):
    """A value a rule refuses: what is wrong and the fix; `at` is a key below the field's own
    (".build", "[2]", " (claim name)") where the problem lies there. `{here}` in the fix stands
    for the full key of the field or section that refused, `{name}` for its last part as the
    stack file writes it (`await`, not the field's Python name)."""

    def __init__(self, problem: str, fix: str, at: str = "") -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem, self.fix, self.at = problem, fix, at


def relative(error: Exception) -> Problem:
    """An error a `Fields` reader raised for the key "" (`": problem; fix"`, `".sub: problem; fix"`)
    as a Problem at that sub-key."""
    at, _, rest = str(error).partition(": ")
    problem, _, fix = rest.partition("; ")
    return Problem(problem, fix or "see docs/configuration.md", at)


@dataclass(frozen=True, init=False)
class Rule(GroupedMetadata):
    """A field's rule for `Annotated[T, Rule(check, *constraints)]`: the constraints describe the
    value in the JSON Schema (and pydantic checks them too), `check` refuses with the words a user
    reads (it runs first)."""

    check: Callable[[Any], Any]
    constraints: tuple[Any, ...]

    def __init__(self, check: Callable[..., Any], *constraints: Any) -> None:
        object.__setattr__(self, "check", check)
        object.__setattr__(self, "constraints", constraints)

    def __iter__(self) -> Iterator[object]:
        yield from self.constraints
        yield BeforeValidator(self.check)


class ConfigSection(BaseModel):
    """One object of the stack's config: frozen, its unknown keys refused naming the closest known one."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, str_strip_whitespace=False)
    # The fix an unknown key's message gives besides the list of known ones (None: the list alone).
    unknown_hint: ClassVar[str | None] = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            # The type only, never the value: a secret pasted one level too high must not be echoed.
            raise Problem(f"expected an object, found {type(value).__name__}", "write it as `key: value` lines")
        allowed = cls.known_keys()
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(allowed), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise Problem(
                f"unknown key(s) {', '.join(unknown)}", f"{hint}remove them or use one of: {', '.join(sorted(allowed))}"
            )
        return value

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        """The keys the section takes, as written in the stack file (aliases: `class`, `await`)."""
        return frozenset(f.alias or name for name, f in cls.model_fields.items())


# ---------------------------------------------------------------------------------------------
# Field types: a type pydantic checks and documents, and a rule that words the refusal.


def _boolean(value: Any) -> Any:
    """true or false; `pulumi config set` stores scalars as text, so "true" and "false" too."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        # `{name}`: the key as the stack writes it (`await`), which only the error's location knows.
        raise Problem(f"expected true or false, found {value!r}", "write `{name}: true` or `false`")
    return value


Bool = Annotated[bool, BeforeValidator(_boolean)]


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise Problem(f"expected a whole number, found {value!r}", f"write a number >= {minimum}")
        if value < minimum or (maximum is not None and value > maximum):
            problem = f"{value} is negative" if value < 0 else f"{value} is out of range"
            bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise Problem(problem, f"use a number {bounds}")
        return value

    return check


def WholeNumber(minimum: int, maximum: int | None = None) -> Rule:
    """`Annotated[int, WholeNumber(0, 9)]`: from `minimum` to `maximum` (text of digits too)."""
    bounds = (Ge(minimum),) + (() if maximum is None else (Le(maximum),))
    return Rule(whole_number(minimum, maximum), *bounds)


def number(minimum: float, maximum: float, example: float, fix: str | None = None) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Problem(f"expected a number, found {value!r}", f"write e.g. {example:g}")
        if not minimum <= float(value) <= maximum:
            raise Problem(f"{value} is out of range", fix or f"use {minimum:g} to {maximum:g}")
        return float(value)

    return check


def Number(minimum: float, maximum: float, example: float, fix: str | None = None) -> Rule:
    """`Annotated[float, Number(1, 60, 5)]`: from `minimum` to `maximum` (an int or text of a number too)."""
    return Rule(number(minimum, maximum, example, fix), Ge(minimum), Le(maximum))


def one_line(max_len: int = 4096) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or "\n" in value or "\r" in value or "\0" in value:
            # The type only: a key or a certificate pasted here must not be echoed.
            found = type(value).__name__ if not isinstance(value, str) else "text with a newline or nothing"
            raise Problem(f"expected a one-line string, found {found}", "write it as a quoted string")
        if len(value) > max_len:
            raise Problem(f"is {len(value)} characters long", f"use at most {max_len}")
        return value

    return check


def OneLine(max_len: int = 4096) -> Rule:
    """`Annotated[str, OneLine(255)]`: a non-empty string of one line, at most `max_len` characters."""
    return Rule(one_line(max_len), StringConstraints(min_length=1, max_length=max_len))


def kubernetes_name(subdomain: bool = False) -> Callable[[Any], Any]:
    pattern, limit = (DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX) if subdomain else (DNS_LABEL, DNS_LABEL_MAX)

    def check(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or len(value) > limit or not pattern.match(value):
            characters = "digits, '-' and '.'" if subdomain else "digits and '-'"
            raise Problem(
                f"{value!r} is not a valid Kubernetes name",
                f"use at most {limit} lower-case letters, {characters}, starting and ending with a letter or digit",
            )
        return value

    return check


KubeName = Annotated[
    str, Rule(kubernetes_name(), StringConstraints(pattern=DNS_LABEL.pattern, max_length=DNS_LABEL_MAX))
]
KubeSubdomain = Annotated[
    str,
    Rule(kubernetes_name(True), StringConstraints(pattern=DNS_SUBDOMAIN.pattern, max_length=DNS_SUBDOMAIN_MAX)),
]


def _step_names(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, list) or not all(is_dns_label(name) for name in value):
        raise Problem(f"expected a list of step names, found {value!r}",
                      "write a list of the workload's step names, e.g. [make-hdf5]")
    return tuple(value)


StepNames = Annotated[tuple[KubeName, ...], BeforeValidator(_step_names)]


# ---------------------------------------------------------------------------------------------
# Placeholders: a template's `<...>` and an example's `REPLACE_WITH_...`


def find_placeholder(value: Any, key: str) -> tuple[str, str] | None:
    """The first placeholder in `value`, searched through objects and lists: a string that is
    wholly `<...>` (a template stack's) or holds `REPLACE_WITH` (an example's); (its full key,
    the placeholder) or None. A section switched off (`enabled: false`) is not searched."""
    if isinstance(value, str):
        return (key, value) if PLACEHOLDER in value or TEMPLATE_PLACEHOLDER.match(value.strip()) else None
    items: Any = ()
    if isinstance(value, Mapping):
        if switched_off(value):
            return None
        items = ((f"{key}.{name}", item) for name, item in value.items())
    elif isinstance(value, list):
        items = ((f"{key}[{index}]", item) for index, item in enumerate(value))
    for item_key, item in items:
        found = find_placeholder(item, item_key)
        if found is not None:
            return found
    return None


def reject_placeholders(
    value: Any, key: str, error: type[Exception] = AtlasConfigError, fix: str | None = None
) -> None:
    """Refuse a placeholder left anywhere in `value`, naming its key; the fix is the `pulumi config
    set` line for that key (with --secret for a secret's) unless `fix` says otherwise."""
    found = find_placeholder(value, key)
    if found is None:
        return
    where, placeholder = found
    kind = "example's" if PLACEHOLDER in placeholder else "template's"
    secret = "--secret " if where.rsplit(".", 1)[-1] in SECRET_FIELDS else ""
    raise error(
        f"{where}: still the {kind} placeholder {placeholder}; "
        + (fix or f"set it with `pulumi config set {secret}--path {where} ...`")
    )


# ---------------------------------------------------------------------------------------------
# The one translation of pydantic's errors


def key_of(prefix: str, loc: tuple[int | str, ...]) -> str:
    """`atlas:openshift` and ("storage", "data", "size") -> `atlas:openshift.storage.data.size`."""
    key = prefix
    for part in loc:
        if part == "[key]":  # pydantic's mark of a mapping's key: the key names it already
            continue
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key and not key.endswith(":") else str(part))
    return key if not key.endswith(":") else f"{key}*"


def field_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> Any:
    """The pydantic FieldInfo at `loc` under `model` (None where the location is not a field)."""
    current: Any = model
    info = None
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            by_alias = {f.alias or name: f for name, f in current.model_fields.items()}
            info = by_alias.get(str(part))
            if info is None:
                return None
            current = info.annotation
        elif get_origin(current) in (dict, tuple, list) or current in (dict, tuple, list):
            args = get_args(current)
            current = args[-1] if args else Any
            info = None
    return info


def _unwrap(annotation: Any) -> Any:
    """`X | None` and `Annotated[X, ...]` down to X."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _message(model: type[BaseModel], prefix: str, detail: Mapping[str, Any]) -> str:
    loc = tuple(detail.get("loc", ()))
    cause = (detail.get("ctx") or {}).get("error")
    if isinstance(cause, Problem):
        here = key_of(prefix, loc)
        name = str(loc[-1]) if loc and not isinstance(loc[-1], int) else here
        return f"{here}{cause.at}: {cause.problem}; {cause.fix.replace('{here}', here).replace('{name}', name)}"
    if isinstance(cause, AtlasConfigError):
        return str(cause)
    key = key_of(prefix, loc)
    secret = "--secret " if loc and str(loc[-1]) in SECRET_FIELDS else ""
    info = field_at(model, loc)
    example = info.examples[0] if info is not None and info.examples else "..."
    if detail.get("type") == "missing":
        return f"{key}: required; set it with `pulumi config set {secret}--path {key} {example}`"
    # pydantic's own words (never its input), and where the reference gives the key.
    words = str(detail.get("msg", "not valid"))
    return f"{key}: {words[:1].lower()}{words[1:]}; write e.g. {example} (docs/configuration.md lists the key)"


def validate_section(
    model: type[ModelT],
    raw: Any,
    prefix: str,
    error: type[Exception] | Callable[[tuple[int | str, ...]], type[Exception]] = AtlasConfigError,
    context: Mapping[str, Any] | None = None,
) -> ModelT:
    """`raw` validated by `model`; its first error raised as `error` (a class, or a function of the
    error's location that picks one), worded `<key>: <problem>; <fix>` with `prefix` before the key.
    The ValidationError itself is dropped (`from None`): its text would show the input."""
    try:
        return model.model_validate(raw, context=dict(context or {}))
    except ValidationError as failure:
        detail = failure.errors(include_url=False)[0]
        loc = tuple(detail.get("loc", ()))
        cls = error(loc) if not isinstance(error, type) else error
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, AtlasConfigError) and not isinstance(cause, cls):
            cls = type(cause)
        message = hide_userinfo(_message(model, prefix, detail))  # a URL's credential is never echoed
    raise cls(message) from None
