"""Validation of a loaded workload definition (`workloads/<name>/workload.yaml`) into `model.Workload`.

Pure: it takes the YAML text or the loaded document, never a file (`load.py` reads it). Every
error names the key path (`steps[2].resources.memory`) and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

import yaml

from infra.validation import GIT_COMMIT, GIT_REF, GIT_URL, Fields, is_dns_label
from infra.workload.model import (
    RUNTIME_BUILD,
    Build,
    DataPath,
    FolderSource,
    GitSource,
    InputOverride,
    InTreeSource,
    Logs,
    ReportRequest,
    Resources,
    Source,
    Step,
    StepOverride,
    Telemetry,
    Throughput,
    Workload,
    WorkloadError,
)
from infra.workload.options import is_option, option_values

SCHEMA_VERSION = 1
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Binary suffixes only: Slurm reads "64G" as 64 GiB while Kubernetes reads it as 64e9 bytes,
# so a decimal suffix would ask the two sides for different amounts.
MEMORY = re.compile(r"^(?P<number>[0-9]+)(?P<unit>Ki|Mi|Gi|Ti)?$")
MEMORY_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
WALLTIME = re.compile(
    r"^(?:(?P<days>[0-9]+)-)?(?P<hours>[0-9]{1,3}):(?P<minutes>[0-5][0-9]):(?P<seconds>[0-5][0-9])$"
)
MAX_GPUS_PER_NODE = 16


_fields = Fields(WorkloadError)
_fail = _fields.fail
_mapping = _fields.mapping
_reject_unknown = _fields.reject_unknown


# ---------------------------------------------------------------------------------------------
# Validation helpers: each takes the key path it reports


def _required(section: Mapping[str, Any], field: str, key: str) -> Any:
    if field not in section or section[field] is None:
        raise _fail(f"{key}.{field}" if key else field, "required but missing", f"add `{field}:`")
    return section[field]


def _text(value: Any, key: str, what: str = "a non-empty string") -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, f"expected {what}, found {value!r}", "write it as a quoted string")
    if "\n" in value or "\0" in value:
        raise _fail(key, "contains a newline or NUL character", "keep it on one line")
    return value


def _dns_label(value: Any, key: str) -> str:
    # A step name becomes part of a Kubernetes Job name and a scheduler job name.
    text = _text(value, key)
    if not is_dns_label(text):
        raise _fail(
            key,
            f"{text!r} is not a DNS label",
            "use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit",
        )
    return text


def _relative_path(value: Any, key: str) -> str:
    text = _text(value, key)
    path = PurePosixPath(text)
    if path.is_absolute():
        raise _fail(
            key, f"{text!r} is absolute", "write it relative (each environment chooses where its root is)"
        )
    if ".." in path.parts:
        raise _fail(key, f"{text!r} contains '..'", "write a path that stays inside its root")
    if any(ch in text for ch in "$`\\*?[]{}~;&|<>'\" "):
        raise _fail(
            key,
            f"{text!r} contains a shell metacharacter or space",
            "use letters, digits, '.', '_', '-', '/'",
        )
    return str(path)


def _positive_int(value: Any, key: str, minimum: int = 1, maximum: int | None = None) -> int:
    # bool is an int in Python; YAML's `yes` would otherwise read as 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, f"expected a whole number, found {value!r}", f"write a number >= {minimum}")
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise _fail(key, f"{value} is out of range", f"use a number {bounds}")
    return value


def _argument(value: Any, key: str) -> str:
    """One command-line token. Numbers are accepted only where YAML keeps their text exact."""
    if isinstance(value, bool):
        raise _fail(key, f"YAML read this as the boolean {value}", 'quote it, e.g. "true", or remove it')
    if isinstance(value, float):
        # PyYAML turns 1.0e-4 into 0.0001: the job would get different text than was written.
        raise _fail(
            key, f"the number {value!r} would be re-formatted", f'quote it as written, e.g. "{value}"'
        )
    if isinstance(value, int):
        return str(value)
    text = _text(value, key, "a string or whole number")
    if "$" in text or "`" in text:
        # Kubernetes expands $(VAR) in args, the quoted HPC line expands nothing: the same
        # argument would mean different things on the two sides.
        raise _fail(
            key,
            f"{text!r} contains '$' or '`', which Kubernetes and the job script would expand differently",
            "write the value out, or set it per environment under overrides",
        )
    return text


def _arguments(value: Any, key: str, allow_empty: bool) -> tuple[str, ...]:
    if isinstance(value, str):
        raise _fail(key, "expected a list, found a string", "write one token per item: [python, main.py]")
    if not isinstance(value, list) or (not value and not allow_empty):
        raise _fail(
            key, f"expected a{'' if allow_empty else ' non-empty'} list, found {value!r}", "write a YAML list"
        )
    return tuple(_argument(item, f"{key}[{i}]") for i, item in enumerate(value))


def _env(value: Any, key: str) -> tuple[tuple[str, str], ...]:
    section = _mapping(value if value is not None else {}, key)
    pairs = []
    for name, raw in section.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise _fail(
                f"{key}.{name}", "not a valid environment variable name", "use letters, digits and '_'"
            )
        pairs.append((name, _argument(raw, f"{key}.{name}")))
    return tuple(sorted(pairs))


def parse_memory(value: Any, key: str) -> tuple[str, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise _fail(
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
        raise _fail(key, f"{text!r} is not a quantity Atlas reads the same on every side", fix)
    number = int(match["number"])
    if number <= 0:
        raise _fail(key, f"{text!r} is zero", "ask for some memory, e.g. 1Gi")
    return text, number * MEMORY_UNITS[match["unit"]]


def parse_walltime(value: Any, key: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        raise _fail(
            key,
            f"found the number {value}; YAML reads an unquoted 12:00:00 as a base-60 number",
            'quote it: walltime: "12:00:00" (or "1-00:00:00" for a day)',
        )
    text = _text(value, key)
    match = WALLTIME.match(text)
    if not match:
        raise _fail(key, f"{text!r} is not a walltime", 'write "HH:MM:SS" or "D-HH:MM:SS", quoted')
    seconds = (
        int(match["days"] or 0) * 86400
        + int(match["hours"]) * 3600
        + int(match["minutes"]) * 60
        + int(match["seconds"])
    )
    if seconds <= 0:
        raise _fail(key, "is zero", "give the step time to run")
    return seconds


RESOURCE_KEYS = ("nodes", "gpus_per_node", "cpus_per_task", "memory", "walltime")


def parse_resources(value: Any, key: str, base: Resources | None = None) -> Resources:
    """Full resources, or (with `base`) a partial set laid over `base` for an override."""
    section = _mapping(value, key)
    _reject_unknown(section, RESOURCE_KEYS, key)
    fields: dict[str, Any] = {}
    for field in RESOURCE_KEYS:
        if field not in section:
            if base is None:
                _required(section, field, key)
            continue
        raw = section[field]
        if field == "memory":
            fields["memory"], fields["memory_bytes"] = parse_memory(raw, f"{key}.memory")
        elif field == "walltime":
            fields["walltime_seconds"] = parse_walltime(raw, f"{key}.walltime")
        elif field == "gpus_per_node":
            fields[field] = _positive_int(raw, f"{key}.{field}", minimum=0, maximum=MAX_GPUS_PER_NODE)
        else:
            fields[field] = _positive_int(raw, f"{key}.{field}")
    if base is not None:
        return replace(base, **fields)
    return Resources(**fields)


def _data_paths(value: Any, key: str) -> tuple[DataPath, ...]:
    if not isinstance(value, list):
        raise _fail(
            key, f"expected a list, found {value!r}", "write a YAML list of {name, path, description}"
        )
    paths = []
    for i, item in enumerate(value):
        item_key = f"{key}[{i}]"
        section = _mapping(item, item_key)
        _reject_unknown(section, ("name", "path", "description"), item_key)
        paths.append(
            DataPath(
                name=_dns_label(_required(section, "name", item_key), f"{item_key}.name"),
                path=_relative_path(_required(section, "path", item_key), f"{item_key}.path"),
                description=_text(section.get("description", "-"), f"{item_key}.description"),
            )
        )
    return tuple(paths)


def _name_list(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(key, f"expected a list of data names, found {value!r}", "write [name, ...]")
    return tuple(_dns_label(item, f"{key}[{i}]") for i, item in enumerate(value))


def _source(value: Any, key: str) -> Source:
    section = _mapping(value, key)
    kinds = [kind for kind in ("path", "folder", "repository") if kind in section]
    if len(kinds) > 1:
        raise _fail(
            key,
            f"names {' and '.join(kinds)}",
            "choose one: folder (files beside the definition), repository (Git at a commit) or path (a "
            "Python package inside Atlas)",
        )
    if "path" in section:
        _reject_unknown(section, ("path",), key)
        return InTreeSource(path=_relative_path(section["path"], f"{key}.path"))
    if "folder" in section:
        _reject_unknown(section, ("folder",), key)
        return FolderSource(folder=_relative_path(section["folder"], f"{key}.folder"))
    if not kinds:
        raise _fail(
            key,
            "names no code",
            "write `folder: .` (the files beside workload.yaml), or repository, branch and commit",
        )
    _reject_unknown(section, ("repository", "branch", "commit", "patch"), key)
    repository = _text(_required(section, "repository", key), f"{key}.repository")
    if not GIT_URL.match(repository):
        raise _fail(f"{key}.repository", f"{repository!r} is not a git URL", "write https://host/owner/name")
    branch = _text(_required(section, "branch", key), f"{key}.branch")
    if not GIT_REF.match(branch) or ".." in branch:
        raise _fail(
            f"{key}.branch", f"{branch!r} is not a branch name", "use letters, digits, '.', '_', '-', '/'"
        )
    commit = _text(_required(section, "commit", key), f"{key}.commit")
    if not GIT_COMMIT.match(commit):
        raise _fail(
            f"{key}.commit",
            f"{commit!r} is not a full commit id",
            "write all 40 lower-case hex digits (git rev-parse)",
        )
    patch = _relative_path(section["patch"], f"{key}.patch") if section.get("patch") is not None else None
    return GitSource(repository=repository, branch=branch, commit=commit, patch=patch)


def _build(value: Any, source: Source) -> Build:
    if value is None:
        if isinstance(source, FolderSource | GitSource):
            return RUNTIME_BUILD  # Atlas's runtime image; the code arrives beside it
        raise _fail(
            "build",
            "required but missing",
            "add `build:` with containerfile and entrypoint (a `source.path` package is built into its image)",
        )
    section = _mapping(value, "build")
    _reject_unknown(section, ("context", "containerfile", "entrypoint"), "build")
    return Build(
        context=_relative_path(section.get("context", "."), "build.context"),
        containerfile=_relative_path(_required(section, "containerfile", "build"), "build.containerfile"),
        entrypoint=_relative_path(_required(section, "entrypoint", "build"), "build.entrypoint"),
    )


MAX_PATTERN = 500
UNIT = re.compile(r"^[A-Za-z][A-Za-z0-9 ._/-]{0,31}$")


def _report(value: Any, steps: tuple[Step, ...], logs: Logs) -> ReportRequest:
    section = _mapping(value, "report")
    _reject_unknown(section, ("step", "throughput"), "report")
    names = [s.name for s in steps]
    step = section.get("step", names[-1])
    if step not in names:
        raise _fail("report.step", f"{step!r} is not a step", f"use one of {', '.join(names)}")
    throughput = None
    if section.get("throughput") is not None:
        key = "report.throughput"
        body = _mapping(section["throughput"], key)
        _reject_unknown(body, ("file", "pattern", "unit"), key)
        file = _relative_path(_required(body, "file", key), f"{key}.file")
        if not PurePosixPath(file).is_relative_to(logs.root) or file == logs.root:
            # Every side reads the run's logs folder (SFTP; the monitor's volume on Kubernetes).
            raise _fail(f"{key}.file", f"{file!r} is not under logs.root ({logs.root})", f"write it as {logs.root}/...")
        pattern = _text(_required(body, "pattern", key), f"{key}.pattern")
        if len(pattern) > MAX_PATTERN:
            raise _fail(f"{key}.pattern", f"is {len(pattern)} characters long", f"keep it under {MAX_PATTERN}")
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise _fail(
                f"{key}.pattern", f"is not a regular expression ({error})", "fix it (Python's re syntax)"
            ) from None
        if "value" not in compiled.groupindex:
            raise _fail(
                f"{key}.pattern", "has no group named `value`", r"capture the number: rate (?P<value>[0-9.]+) words/s"
            )
        unit = _text(_required(body, "unit", key), f"{key}.unit")
        if not UNIT.match(unit):
            raise _fail(f"{key}.unit", f"{unit!r} is not a unit", "write a short unit such as words/s or samples/s")
        throughput = Throughput(file=file, pattern=pattern, unit=unit)
    return ReportRequest(step=step, throughput=throughput)


STEP_KEYS = ("name", "description", "command", "args", "resume_args", "resources", "inputs", "outputs", "env")


def _step(value: Any, key: str) -> Step:
    section = _mapping(value, key)
    _reject_unknown(section, STEP_KEYS, key)
    return Step(
        name=_dns_label(_required(section, "name", key), f"{key}.name"),
        description=_text(section.get("description", "-"), f"{key}.description"),
        command=_arguments(_required(section, "command", key), f"{key}.command", allow_empty=False),
        args=_arguments(section.get("args", []), f"{key}.args", allow_empty=True),
        resources=parse_resources(_required(section, "resources", key), f"{key}.resources"),
        inputs=_name_list(section.get("inputs"), f"{key}.inputs"),
        outputs=_name_list(section.get("outputs"), f"{key}.outputs"),
        env=_env(section.get("env"), f"{key}.env"),
        resume_args=_arguments(section.get("resume_args", []), f"{key}.resume_args", allow_empty=True),
    )


def _input_overrides(value: Any, key: str, step: Step) -> tuple[tuple[str, InputOverride], ...]:
    section = _mapping(value if value is not None else {}, key)
    result = []
    for name, raw in section.items():
        item_key = f"{key}.{name}"
        if name not in step.inputs:
            raise _fail(item_key, f"{name!r} is not an input of step {step.name!r}", "name one of its inputs")
        body = _mapping(raw, item_key)
        _reject_unknown(body, ("made_by", "images"), item_key)
        made_by = _relative_path(_required(body, "made_by", item_key), f"{item_key}.made_by")
        images = _positive_int(_required(body, "images", item_key), f"{item_key}.images")
        result.append((str(name), InputOverride(made_by=made_by, images=images)))
    return tuple(result)


def _override(value: Any, key: str, step: Step) -> StepOverride:
    section = _mapping(value, key)
    _reject_unknown(section, ("reason", "args", "resources", "env", "data"), key)
    reason = _text(
        _required(section, "reason", key), f"{key}.reason", "a sentence saying why this environment differs"
    )
    set_args: list[tuple[str, tuple[str, ...]]] = []
    remove_args: tuple[str, ...] = ()
    if "args" in section:
        args_key = f"{key}.args"
        args = _mapping(section["args"], args_key)
        _reject_unknown(args, ("set", "remove"), args_key)
        for option, raw in _mapping(args.get("set", {}), f"{args_key}.set").items():
            option_key = f"{args_key}.set.{option}"
            if not isinstance(option, str) or not is_option(option):
                raise _fail(
                    option_key,
                    f"{option!r} is not an option",
                    "name it as the program does, e.g. --batch_size",
                )
            if raw is True:
                values: tuple[str, ...] = ()
            elif isinstance(raw, list):
                values = _arguments(raw, option_key, allow_empty=False)
            else:
                values = (_argument(raw, option_key),)
            set_args.append((option, values))
        raw_remove = args.get("remove", [])
        remove_args = _arguments(raw_remove, f"{args_key}.remove", allow_empty=True)
        present = set(option_values(step.args))
        for i, option in enumerate(remove_args):
            if option not in present:
                raise _fail(
                    f"{args_key}.remove[{i}]",
                    f"{option!r} is not among step {step.name!r}'s args",
                    "remove only options the step has",
                )
    resources = None
    if "resources" in section:
        resources = parse_resources(section["resources"], f"{key}.resources", base=step.resources)
    return StepOverride(
        reason=reason,
        set_args=tuple(set_args),
        remove_args=remove_args,
        resources=resources,
        env=_env(section.get("env"), f"{key}.env"),
        data=_input_overrides(section.get("data"), f"{key}.data", step),
    )


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
    top = _mapping(raw, "(top level)")
    _reject_unknown(top, TOP_KEYS, "(top level)")
    version = _required(top, "version", "")
    if version != SCHEMA_VERSION:
        raise _fail(
            "version", f"found {version!r}", f"this Atlas reads version {SCHEMA_VERSION}: write `version: 1`"
        )
    name = _dns_label(_required(top, "name", ""), "name")

    source = _source(_required(top, "source", ""), "source")
    build = _build(top.get("build"), source)

    data_section = _mapping(top.get("data", {}), "data")
    _reject_unknown(data_section, ("inputs", "outputs"), "data")
    data = _data_paths(data_section.get("inputs", []), "data.inputs") + _data_paths(
        data_section.get("outputs", []), "data.outputs"
    )
    data_names = [d.name for d in data]
    duplicate_data = sorted({n for n in data_names if data_names.count(n) > 1})
    if duplicate_data:
        raise _fail(
            "data",
            f"name(s) {', '.join(duplicate_data)} appear more than once",
            "give each path its own name",
        )
    external_inputs = {d.name for d in _data_paths(data_section.get("inputs", []), "data.inputs")}

    raw_steps = _required(top, "steps", "")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise _fail(
            "steps", f"expected a non-empty list, found {raw_steps!r}", "list the steps in the order they run"
        )
    steps = tuple(_step(item, f"steps[{i}]") for i, item in enumerate(raw_steps))
    seen_steps: set[str] = set()
    available = set(external_inputs)  # what a step may read: given inputs, then earlier outputs
    produced: set[str] = set()
    for i, step in enumerate(steps):
        if step.name in seen_steps:
            raise _fail(f"steps[{i}].name", f"{step.name!r} is used twice", "give each step its own name")
        seen_steps.add(step.name)
        for j, item in enumerate(step.inputs):
            if item not in data_names:
                raise _fail(
                    f"steps[{i}].inputs[{j}]",
                    f"{item!r} is not declared",
                    "declare it under data.inputs or data.outputs",
                )
            if item not in available:
                raise _fail(
                    f"steps[{i}].inputs[{j}]",
                    f"{item!r} is produced by no earlier step",
                    "order the steps so the producer comes first, or declare it under data.inputs",
                )
        for j, item in enumerate(step.outputs):
            if item not in data_names or item in external_inputs:
                raise _fail(
                    f"steps[{i}].outputs[{j}]",
                    f"{item!r} is not declared under data.outputs",
                    "declare it there",
                )
            if item in produced:
                raise _fail(
                    f"steps[{i}].outputs[{j}]",
                    f"{item!r} is produced by two steps",
                    "let one step produce it",
                )
            produced.add(item)
        available |= set(step.outputs)

    logs_section = _mapping(_required(top, "logs", ""), "logs")
    _reject_unknown(logs_section, ("root", "experiment"), "logs")
    experiment = logs_section.get("experiment")
    logs = Logs(
        root=_relative_path(_required(logs_section, "root", "logs"), "logs.root"),
        experiment=_relative_path(experiment, "logs.experiment") if experiment is not None else None,
    )
    telemetry_section = _mapping(_required(top, "telemetry", ""), "telemetry")
    _reject_unknown(telemetry_section, ("root", "interval_seconds"), "telemetry")
    interval = telemetry_section.get("interval_seconds", 5)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not 0.1 <= interval <= 3600:
        raise _fail(
            "telemetry.interval_seconds", f"found {interval!r}", "use a number of seconds from 0.1 to 3600"
        )
    telemetry = Telemetry(
        root=_relative_path(_required(telemetry_section, "root", "telemetry"), "telemetry.root"),
        interval_seconds=float(interval),
    )

    by_name = {s.name: s for s in steps}
    overrides = []
    for environment, per_step in _mapping(top.get("overrides") or {}, "overrides").items():
        env_key = f"overrides.{environment}"
        _dns_label(environment, env_key)
        parsed = []
        for step_name, body in _mapping(per_step, env_key).items():
            if step_name not in by_name:
                raise _fail(f"{env_key}.{step_name}", "no such step", f"use one of {', '.join(by_name)}")
            parsed.append((step_name, _override(body, f"{env_key}.{step_name}", by_name[step_name])))
        overrides.append((environment, tuple(parsed)))

    report = _report(top.get("report"), steps, logs) if top.get("report") is not None else None

    return Workload(
        name=name,
        description=_text(top.get("description", "-"), "description"),
        source=source,
        build=build,
        data=data,
        steps=steps,
        logs=logs,
        telemetry=telemetry,
        overrides=tuple(overrides),
        report=report,
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
