"""A step's `sweep:` section validated into `model.Sweep`: its points, throttle, metric, arguments and results folder.

Every refusal names the key (`steps[2].sweep.grid.lr[1]`) and the fix, before anything is
created: an empty sweep, a value that is not a scalar, zip lists of unequal lengths, a name that
is no environment-variable suffix, a clash with the step's own arguments or environment, more than
`sweep.MAX_SWEEP_POINTS` points, `parallel` below 1, a metric pattern without one capture group.
Pure; parse.py checks what needs the whole document (outputs, overrides).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from infra.workload.model import Sweep, SweepMetric, SweepValue
from infra.workload.options import is_option, split_options
from infra.workload.parse_values import (
    MAX_PATTERN,
    fail,
    read_argument,
    read_arguments,
    read_mapping,
    read_positive_int,
    read_relative_path,
    read_required,
    read_text,
    reject_unknown,
)
from infra.workload.sweep import (
    BUILT_IN,
    ENV_PREFIX,
    MAX_SWEEP_POINTS,
    MAX_SWEEP_TABLE_BYTES,
    argument_template,
    point_count,
    points_table,
    template_fields,
    value_text,
)

SWEEP_KEYS = ("grid", "zip", "points", "parallel", "metric", "args", "results")
KINDS = ("grid", "zip", "points")
# A name becomes an option (`--lr`) and an environment variable's suffix (`ATLAS_SWEEP_LR`).
SWEEP_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,39}$")


def read_sweep_name(name: Any, key: str) -> str:
    if not isinstance(name, str) or not SWEEP_NAME.match(name):
        raise fail(
            key,
            f"{name!r} is not a name a sweep can carry (it becomes --{name} and {ENV_PREFIX}{str(name).upper()})",
            "use a letter, then up to 39 letters, digits or '_' (lr, batch_size)",
        )
    if name.lower() in BUILT_IN:
        raise fail(
            key,
            f"{name!r} is a name every point already has ({ENV_PREFIX}{name.upper()})",
            f"rename it; {', '.join(BUILT_IN)} are the point's own (use {{{name.lower()}}} in sweep.args)",
        )
    return name


def read_sweep_value(value: Any, key: str) -> SweepValue:
    """A scalar: a string, a whole number, a float (finite) or a boolean."""
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise fail(key, f"{value!r} is not a finite number", "write a finite number, or quote it as text")
        return value
    if isinstance(value, str):
        return read_argument(value, key)
    raise fail(
        key,
        f"expected a scalar (string, number or boolean), found {type(value).__name__}",
        "write one value per item; a point holding several values is a `points:` entry",
    )


def _read_axes(section: Any, key: str) -> tuple[tuple[str, tuple[SweepValue, ...]], ...]:
    axes_section = read_mapping(section, key)
    if not axes_section:
        raise fail(key, "names no values", "write `name: [value, ...]` lines, at least one")
    axes = []
    for name, raw in axes_section.items():
        name_key = f"{key}.{name}"
        read_sweep_name(name, name_key)
        if not isinstance(raw, list) or not raw:
            found = "an empty list" if raw == [] else type(raw).__name__
            raise fail(name_key, f"expected a non-empty list of values, found {found}", f"write {name}: [value, ...]")
        values = tuple(read_sweep_value(item, f"{name_key}[{i}]") for i, item in enumerate(raw))
        axes.append((str(name), values))
    return tuple(axes)


def _check_names(names: tuple[str, ...], key: str) -> None:
    """Two names that differ only in case would set one environment variable."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.upper(), name)
        if other != name:
            raise fail(
                f"{key}.{name}",
                f"sets {ENV_PREFIX}{name.upper()}, as {other!r} does",
                "give the names different letters, not only a different case",
            )


def _read_points(raw: Any, key: str) -> tuple[tuple[str, ...], tuple[tuple[SweepValue, ...], ...]]:
    if not isinstance(raw, list) or not raw:
        raise fail(key, "expected a non-empty list of points", "write one `{name: value, ...}` per point")
    names: tuple[str, ...] = ()
    points = []
    for i, item in enumerate(raw):
        item_key = f"{key}[{i}]"
        point = read_mapping(item, item_key)
        if not point:
            raise fail(item_key, "names no values", "write `{name: value, ...}`")
        these = tuple(read_sweep_name(name, f"{item_key}.{name}") for name in point)
        if i == 0:
            names = these
        elif set(these) != set(names):
            raise fail(
                item_key,
                f"names {', '.join(these)} where {key}[0] names {', '.join(names)}",
                "give every point the same names",
            )
        points.append(tuple(read_sweep_value(point[name], f"{item_key}.{name}") for name in names))
    return names, tuple(points)


def _check_distinct(sweep: Sweep, key: str) -> None:
    """Two equal points would run the same thing twice; a grid's repeat is a repeated value."""
    if sweep.kind == "grid":
        for name, values in sweep.axes:
            seen: set[str] = set()
            for i, value in enumerate(values):
                text = value_text(value)
                if text in seen:
                    raise fail(f"{key}.grid.{name}[{i}]", f"{text} appears twice", "list each value once")
                seen.add(text)
        return
    seen_points: dict[tuple[str, ...], int] = {}
    rows = zip(*(values for _, values in sweep.axes), strict=True) if sweep.kind == "zip" else iter(sweep.points)
    for i, row in enumerate(rows):
        texts = tuple(value_text(v) for v in row)
        if texts in seen_points:
            where = f"{key}.points[{i}]" if sweep.kind == "points" else f"{key}.zip (position {i})"
            raise fail(where, f"repeats point {seen_points[texts]}", "list each point once; vary a seed to repeat it")
        seen_points[texts] = i


def read_metric(value: Any, key: str) -> SweepMetric:
    section = read_mapping(value, key)
    reject_unknown(section, ("goal", "pattern", "file"), key)
    goal = read_required(section, "goal", key)
    if goal not in ("min", "max"):
        raise fail(f"{key}.goal", f"found {goal!r}", "write min (lower is better) or max")
    given = [field for field in ("pattern", "file") if section.get(field) is not None]
    if len(given) != 1:
        raise fail(
            key,
            "names both pattern and file" if given else "names neither pattern nor file",
            "choose one: pattern (a line of the point's log) or file (a number it writes in its results folder)",
        )
    if given == ["file"]:
        return SweepMetric(goal=goal, file=read_relative_path(section["file"], f"{key}.file"))
    pattern = read_text(section["pattern"], f"{key}.pattern")
    if len(pattern) > MAX_PATTERN:
        raise fail(f"{key}.pattern", f"is {len(pattern)} characters long", f"keep it under {MAX_PATTERN}")
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise fail(f"{key}.pattern", f"is not a regular expression ({error})", "fix it (Python's re syntax)") from None
    if compiled.groups != 1:
        raise fail(
            f"{key}.pattern",
            "has no capture group" if compiled.groups == 0 else f"has {compiled.groups} capture groups",
            r"capture the number once: 'val_loss (\d+\.\d+)'; write (?:...) for a group that captures nothing",
        )
    return SweepMetric(goal=goal, pattern=pattern)


def _read_template(raw: Any, key: str, names: tuple[str, ...]) -> tuple[str, ...]:
    tokens = read_arguments(raw, key, allow_empty=True)
    known = {*names, *BUILT_IN}
    for i, token in enumerate(tokens):
        token_key = f"{key}[{i}]"
        try:
            pieces = template_fields(token)
        except ValueError as error:
            raise fail(
                token_key, f"{token!r} is not a template ({error})", "write {name}, and {{ or }} for a brace"
            ) from None
        for _, field, spec, conversion in pieces:
            if field is None:
                continue
            if field not in known:
                raise fail(
                    token_key,
                    f"{{{field}}} names no value of the sweep",
                    f"use one of {', '.join('{' + n + '}' for n in (*names, *BUILT_IN))}",
                )
            if spec or conversion:
                raise fail(
                    token_key, f"{token!r} formats {{{field}}}", f"write {{{field}}} alone: the value is as written"
                )
    return tokens


def _option_position(args: tuple[str, ...], option: str) -> int:
    for i, token in enumerate(args):
        if is_option(token) and token.partition("=")[0] == option:
            return i
    return -1


def _check_clashes(
    sweep: Sweep, key: str, step_key: str, step_args: tuple[str, ...], step_env: Mapping[str, str]
) -> None:
    """A point's option must not replace one the step already passes (which would win depends on
    the program), nor its variables one the step sets."""
    for use in split_options(argument_template(sweep)):
        position = _option_position(step_args, use.option) if use.option else -1
        if position < 0:
            continue
        if sweep.args is None:
            name = use.option[2:]
            where = f"{key}.{sweep.kind}.{name}" if sweep.kind != "points" else f"{key}.points[0].{name}"
        else:
            where = f"{key}.args[{_option_position(sweep.args, use.option)}]"
        raise fail(
            where,
            f"sets {use.option}, which {step_key}.args[{position}] sets already",
            f"remove {use.option} from {step_key}.args (the sweep sets it for every point), or rename the value",
        )
    for name in sorted(step_env):
        if name.startswith(ENV_PREFIX):
            raise fail(
                f"{step_key}.env.{name}",
                f"{ENV_PREFIX}* is what each point of the sweep gets",
                "rename the variable, or let the sweep set it",
            )


def read_sweep(
    value: Any, key: str, step_name: str, step_key: str, step_args: tuple[str, ...], step_env: Mapping[str, str]
) -> Sweep:
    """The `sweep:` of step `step_name` (whose args and env it must not clash with)."""
    section = read_mapping(value, key)
    reject_unknown(section, SWEEP_KEYS, key)
    kinds = [kind for kind in KINDS if kind in section]
    if len(kinds) != 1:
        raise fail(
            key,
            f"names {' and '.join(kinds)}" if kinds else "declares no points",
            "choose one: grid (every combination), zip (lists of equal length, taken together) or points (a list)",
        )
    kind = kinds[0]
    axes: tuple[tuple[str, tuple[SweepValue, ...]], ...] = ()
    points: tuple[tuple[SweepValue, ...], ...] = ()
    if kind == "points":
        names, points = _read_points(section["points"], f"{key}.points")
    else:
        axes = _read_axes(section[kind], f"{key}.{kind}")
        names = tuple(name for name, _ in axes)
        if kind == "zip":
            lengths = {name: len(values) for name, values in axes}
            first = names[0]
            for name, length in lengths.items():
                if length != lengths[first]:
                    raise fail(
                        f"{key}.zip.{name}",
                        f"has {length} values where {first} has {lengths[first]}",
                        "give every list of a zip the same length (a grid takes every combination)",
                    )
    _check_names(names, f"{key}.{kind}")
    parallel = section.get("parallel")
    sweep = Sweep(
        kind=kind,
        names=names,
        axes=axes,
        points=points,
        parallel=read_positive_int(parallel, f"{key}.parallel") if parallel is not None else None,
        metric=read_metric(section["metric"], f"{key}.metric") if section.get("metric") is not None else None,
        args=_read_template(section["args"], f"{key}.args", names) if section.get("args") is not None else None,
        results=read_relative_path(section.get("results", f"results/{step_name}"), f"{key}.results"),
    )
    size = point_count(sweep)
    if size > MAX_SWEEP_POINTS:
        shape = " x ".join(str(len(values)) for _, values in axes) if kind == "grid" else str(size)
        raise fail(
            key,
            f"has {size:,} points ({shape}), more than {MAX_SWEEP_POINTS:,}",
            "split the study into several sweeps, or take fewer values (a zip instead of a grid)",
        )
    _check_distinct(sweep, key)
    _check_clashes(sweep, key, step_key, step_args, step_env)
    table = len(points_table(sweep).encode())
    if table > MAX_SWEEP_TABLE_BYTES:
        raise fail(
            key,
            f"its table of points is {table:,} bytes, more than {MAX_SWEEP_TABLE_BYTES:,} (it travels in a ConfigMap)",
            "use shorter values or fewer points",
        )
    return sweep
