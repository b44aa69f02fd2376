"""Validation of a loaded workload definition (`workloads/<name>/workload.yaml`) into `model.Workload`.

Pure: it takes the YAML text or the loaded document, never a file (`load.py` reads it). Every
error names the key path (`steps[2].resources.memory`) and the fix. The sections are read by
parse_sections.py, single values by parse_values.py; here the whole document, how its steps
and data fit together, and the YAML itself.
"""

from __future__ import annotations

from typing import Any

import yaml

from infra.workload.model import (
    RUNTIME_BUILD,
    GitSource,
    InTreeSource,
    Logs,
    Step,
    StepOverride,
    Telemetry,
    Workload,
    WorkloadError,
)
from infra.workload.options import split_options
from infra.workload.parse_sections import (
    read_build,
    read_data_paths,
    read_override,
    read_report,
    read_source,
    read_step,
)
from infra.workload.parse_values import (
    fail,
    read_dns_label,
    read_mapping,
    read_relative_path,
    read_required,
    read_text,
    reject_unknown,
)
from infra.workload.sweep import ENV_PREFIX, argument_template

SCHEMA_VERSION = 1


TOP_KEYS = (
    "version",
    "name",
    "description",
    "source",
    "build",
    "data",
    "steps",
    "logs",
    "telemetry",
    "report",
    "overrides",
)


def parse_workload(raw: Any) -> Workload:
    """Validate a loaded YAML document into a `Workload`; raises `WorkloadError`."""
    top = read_mapping(raw, "(top level)")
    reject_unknown(top, TOP_KEYS, "(top level)")
    version = read_required(top, "version", "")
    if version != SCHEMA_VERSION:
        raise fail(
            "version", f"found {version!r}", f"this Atlas reads version {SCHEMA_VERSION}: write `version: 1`"
        )
    name = read_dns_label(read_required(top, "name", ""), "name")

    source = read_source(read_required(top, "source", ""), "source")
    build = read_build(top.get("build"), source)

    data_section = read_mapping(top.get("data", {}), "data")
    reject_unknown(data_section, ("inputs", "outputs"), "data")
    data = read_data_paths(data_section.get("inputs", []), "data.inputs") + read_data_paths(
        data_section.get("outputs", []), "data.outputs"
    )
    data_names = [d.name for d in data]
    duplicate_data = sorted({n for n in data_names if data_names.count(n) > 1})
    if duplicate_data:
        raise fail(
            "data",
            f"name(s) {', '.join(duplicate_data)} appear more than once",
            "give each path its own name",
        )
    external_inputs = {d.name for d in read_data_paths(data_section.get("inputs", []), "data.inputs")}

    raw_steps = read_required(top, "steps", "")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise fail(
            "steps", f"expected a non-empty list, found {raw_steps!r}", "list the steps in the order they run"
        )
    steps = tuple(read_step(item, f"steps[{i}]") for i, item in enumerate(raw_steps))
    seen_steps: set[str] = set()
    available = set(external_inputs)  # what a step may read: given inputs, then earlier outputs
    produced: set[str] = set()
    for i, step in enumerate(steps):
        if step.name in seen_steps:
            raise fail(f"steps[{i}].name", f"{step.name!r} is used twice", "give each step its own name")
        seen_steps.add(step.name)
        for j, item in enumerate(step.inputs):
            if item not in data_names:
                raise fail(
                    f"steps[{i}].inputs[{j}]",
                    f"{item!r} is not declared",
                    "declare it under data.inputs or data.outputs",
                )
            if item not in available:
                raise fail(
                    f"steps[{i}].inputs[{j}]",
                    f"{item!r} is produced by no earlier step",
                    "order the steps so the producer comes first, or declare it under data.inputs",
                )
        for j, item in enumerate(step.outputs):
            if item not in data_names or item in external_inputs:
                raise fail(
                    f"steps[{i}].outputs[{j}]",
                    f"{item!r} is not declared under data.outputs",
                    "declare it there",
                )
            if item in produced:
                raise fail(
                    f"steps[{i}].outputs[{j}]",
                    f"{item!r} is produced by two steps",
                    "let one step produce it",
                )
            produced.add(item)
        available |= set(step.outputs)
        check_sweep_outputs(step, f"steps[{i}]", {d.name: d.path for d in data})

    logs_section = read_mapping(read_required(top, "logs", ""), "logs")
    reject_unknown(logs_section, ("root", "experiment"), "logs")
    experiment = logs_section.get("experiment")
    logs = Logs(
        root=read_relative_path(read_required(logs_section, "root", "logs"), "logs.root"),
        experiment=read_relative_path(experiment, "logs.experiment") if experiment is not None else None,
    )
    telemetry_section = read_mapping(read_required(top, "telemetry", ""), "telemetry")
    reject_unknown(telemetry_section, ("root", "interval_seconds"), "telemetry")
    interval = telemetry_section.get("interval_seconds", 5)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not 0.1 <= interval <= 3600:
        raise fail(
            "telemetry.interval_seconds", f"found {interval!r}", "use a number of seconds from 0.1 to 3600"
        )
    telemetry = Telemetry(
        root=read_relative_path(read_required(telemetry_section, "root", "telemetry"), "telemetry.root"),
        interval_seconds=float(interval),
    )

    by_name = {s.name: s for s in steps}
    overrides = []
    for environment, per_step in read_mapping(top.get("overrides") or {}, "overrides").items():
        env_key = f"overrides.{environment}"
        read_dns_label(environment, env_key)
        parsed = []
        for step_name, body in read_mapping(per_step, env_key).items():
            if step_name not in by_name:
                raise fail(f"{env_key}.{step_name}", "no such step", f"use one of {', '.join(by_name)}")
            override = read_override(body, f"{env_key}.{step_name}", by_name[step_name])
            check_sweep_override(by_name[step_name], override, f"{env_key}.{step_name}")
            parsed.append((step_name, override))
        overrides.append((environment, tuple(parsed)))

    report = read_report(top.get("report"), steps, logs) if top.get("report") is not None else None

    return Workload(
        name=name,
        description=read_text(top.get("description", "-"), "description"),
        source=source,
        build=build,
        data=data,
        steps=steps,
        logs=logs,
        telemetry=telemetry,
        overrides=tuple(overrides),
        report=report,
    )


def check_sweep_outputs(step: Step, key: str, paths: dict[str, str]) -> None:
    """A swept step's output is its sweep's results folder, which a later step reads whole once
    every point has succeeded (its job waits for the whole array): no step depends on one point,
    and no file is written by every point at once."""
    if step.sweep is None:
        return
    for j, item in enumerate(step.outputs):
        if paths[item] != step.sweep.results:
            raise fail(
                f"{key}.outputs[{j}]",
                f"{item!r} ({paths[item]}) is one path, which every point of the sweep would write",
                f"declare {item!r} at the sweep's results folder ({step.sweep.results}; each point writes its "
                "point-<index> folder there), which later steps read once the whole sweep has run",
            )


def check_sweep_override(step: Step, override: StepOverride, key: str) -> None:
    """An environment's override of a swept step may not set what each point sets."""
    if step.sweep is None:
        return
    swept = {use.option for use in split_options(argument_template(step.sweep)) if use.option}
    for option, _ in override.set_args:
        if option in swept:
            raise fail(
                f"{key}.args.set.{option}",
                f"sets {option}, which each point of the sweep sets",
                "leave it to the sweep, or change the sweep's values",
            )
    for name, _ in override.env:
        if name.startswith(ENV_PREFIX):
            raise fail(
                f"{key}.env.{name}", f"{ENV_PREFIX}* is what each point of the sweep gets", "rename the variable"
            )


def check_outside_repository(workload: Workload) -> None:
    """A definition outside Atlas's repository cannot name files of Atlas's tree: its image is
    built from Atlas's repository (the BuildConfig's Git source), and a patch or an in-tree
    package would be looked up there, not beside the definition."""
    if isinstance(workload.source, InTreeSource):
        raise WorkloadError(
            "source.path: names a Python package inside Atlas's repository; outside it, write "
            "`source: {folder: .}` to stage the files beside workload.yaml"
        )
    if isinstance(workload.source, GitSource) and workload.source.patch is not None:
        raise WorkloadError(
            "source.patch: is read from Atlas's repository; outside it, commit the change to your "
            "repository and pin that commit instead"
        )
    if workload.build != RUNTIME_BUILD:
        raise WorkloadError(
            "build: the image is built from Atlas's repository, so a definition outside it runs in Atlas's "
            "runtime image: leave `build` out and use `source: {folder: .}`, or push your own image and set "
            "atlas:openshift.image.reference"
        )


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a definition must not."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise WorkloadError(f"line {key_node.start_mark.line + 1}: key {key!r} appears twice; keep one")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse_workload_text(text: str) -> Workload:
    """Parse and validate the text of a workload.yaml; raises `WorkloadError`."""
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as error:
        raise WorkloadError(f"not valid YAML: {error}") from None
    return parse_workload(raw)
