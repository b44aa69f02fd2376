"""Readers of a workload definition's sections: source, build, data paths, steps, report, per-environment overrides.

Each checks its section's keys and reads its values with parse_values.py's readers. Pure.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from infra.validation import GIT_COMMIT, GIT_REF, GIT_URL
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
    Source,
    Step,
    StepOverride,
    Throughput,
)
from infra.workload.options import is_option, option_values
from infra.workload.parse_sweep import read_sweep
from infra.workload.parse_values import (
    MAX_PATTERN,
    fail,
    parse_resources,
    read_argument,
    read_arguments,
    read_dns_label,
    read_env,
    read_mapping,
    read_positive_int,
    read_relative_path,
    read_required,
    read_text,
    reject_unknown,
)


def read_data_paths(value: Any, key: str) -> tuple[DataPath, ...]:
    if not isinstance(value, list):
        raise fail(
            key, f"expected a list, found {value!r}", "write a YAML list of {name, path, description}"
        )
    paths = []
    for i, item in enumerate(value):
        item_key = f"{key}[{i}]"
        section = read_mapping(item, item_key)
        reject_unknown(section, ("name", "path", "description"), item_key)
        paths.append(
            DataPath(
                name=read_dns_label(read_required(section, "name", item_key), f"{item_key}.name"),
                path=read_relative_path(read_required(section, "path", item_key), f"{item_key}.path"),
                description=read_text(section.get("description", "-"), f"{item_key}.description"),
            )
        )
    return tuple(paths)


def read_name_list(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail(key, f"expected a list of data names, found {value!r}", "write [name, ...]")
    return tuple(read_dns_label(item, f"{key}[{i}]") for i, item in enumerate(value))


def read_source(value: Any, key: str) -> Source:
    section = read_mapping(value, key)
    kinds = [kind for kind in ("path", "folder", "repository") if kind in section]
    if len(kinds) > 1:
        raise fail(
            key,
            f"names {' and '.join(kinds)}",
            "choose one: folder (files beside the definition), repository (Git at a commit) or path (a "
            "Python package inside Atlas)",
        )
    if "path" in section:
        reject_unknown(section, ("path",), key)
        return InTreeSource(path=read_relative_path(section["path"], f"{key}.path"))
    if "folder" in section:
        reject_unknown(section, ("folder",), key)
        return FolderSource(folder=read_relative_path(section["folder"], f"{key}.folder"))
    if not kinds:
        raise fail(
            key,
            "names no code",
            "write `folder: .` (the files beside workload.yaml), or repository, branch and commit",
        )
    reject_unknown(section, ("repository", "branch", "commit", "patch"), key)
    repository = read_text(read_required(section, "repository", key), f"{key}.repository")
    if not GIT_URL.match(repository):
        raise fail(f"{key}.repository", f"{repository!r} is not a git URL", "write https://host/owner/name")
    branch = read_text(read_required(section, "branch", key), f"{key}.branch")
    if not GIT_REF.match(branch) or ".." in branch:
        raise fail(
            f"{key}.branch", f"{branch!r} is not a branch name", "use letters, digits, '.', '_', '-', '/'"
        )
    commit = read_text(read_required(section, "commit", key), f"{key}.commit")
    if not GIT_COMMIT.match(commit):
        raise fail(
            f"{key}.commit",
            f"{commit!r} is not a full commit id",
            "write all 40 lower-case hex digits (git rev-parse)",
        )
    patch = read_relative_path(section["patch"], f"{key}.patch") if section.get("patch") is not None else None
    return GitSource(repository=repository, branch=branch, commit=commit, patch=patch)


def read_build(value: Any, source: Source) -> Build:
    if value is None:
        if isinstance(source, FolderSource | GitSource):
            return RUNTIME_BUILD  # Atlas's runtime image; the code arrives beside it
        raise fail(
            "build",
            "required but missing",
            "add `build:` with containerfile and entrypoint (a `source.path` package is built into its image)",
        )
    section = read_mapping(value, "build")
    reject_unknown(section, ("context", "containerfile", "entrypoint"), "build")
    return Build(
        context=read_relative_path(section.get("context", "."), "build.context"),
        containerfile=read_relative_path(read_required(section, "containerfile", "build"), "build.containerfile"),
        entrypoint=read_relative_path(read_required(section, "entrypoint", "build"), "build.entrypoint"),
    )


UNIT = re.compile(r"^[A-Za-z][A-Za-z0-9 ._/-]{0,31}$")


def read_report(value: Any, steps: tuple[Step, ...], logs: Logs) -> ReportRequest:
    section = read_mapping(value, "report")
    reject_unknown(section, ("step", "throughput"), "report")
    names = [s.name for s in steps]
    step = section.get("step", names[-1])
    if step not in names:
        raise fail("report.step", f"{step!r} is not a step", f"use one of {', '.join(names)}")
    throughput = None
    if section.get("throughput") is not None:
        key = "report.throughput"
        body = read_mapping(section["throughput"], key)
        reject_unknown(body, ("file", "pattern", "unit"), key)
        file = read_relative_path(read_required(body, "file", key), f"{key}.file")
        if not PurePosixPath(file).is_relative_to(logs.root) or file == logs.root:
            # Every side reads the run's logs folder (SFTP; the monitor's volume on Kubernetes).
            raise fail(f"{key}.file", f"{file!r} is not under logs.root ({logs.root})", f"write it as {logs.root}/...")
        pattern = read_text(read_required(body, "pattern", key), f"{key}.pattern")
        if len(pattern) > MAX_PATTERN:
            raise fail(f"{key}.pattern", f"is {len(pattern)} characters long", f"keep it under {MAX_PATTERN}")
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise fail(
                f"{key}.pattern", f"is not a regular expression ({error})", "fix it (Python's re syntax)"
            ) from None
        if "value" not in compiled.groupindex:
            raise fail(
                f"{key}.pattern", "has no group named `value`", r"capture the number: rate (?P<value>[0-9.]+) words/s"
            )
        unit = read_text(read_required(body, "unit", key), f"{key}.unit")
        if not UNIT.match(unit):
            raise fail(f"{key}.unit", f"{unit!r} is not a unit", "write a short unit such as words/s or samples/s")
        throughput = Throughput(file=file, pattern=pattern, unit=unit)
    return ReportRequest(step=step, throughput=throughput)


STEP_KEYS = (
    "name", "description", "command", "args", "resume_args", "resources", "inputs", "outputs", "env", "sweep",
)


def read_step(value: Any, key: str) -> Step:
    section = read_mapping(value, key)
    reject_unknown(section, STEP_KEYS, key)
    name = read_dns_label(read_required(section, "name", key), f"{key}.name")
    args = read_arguments(section.get("args", []), f"{key}.args", allow_empty=True)
    env = read_env(section.get("env"), f"{key}.env")
    sweep = None
    if section.get("sweep") is not None:
        sweep = read_sweep(section["sweep"], f"{key}.sweep", name, key, args, dict(env))
    return Step(
        name=name,
        description=read_text(section.get("description", "-"), f"{key}.description"),
        command=read_arguments(read_required(section, "command", key), f"{key}.command", allow_empty=False),
        args=args,
        resources=parse_resources(read_required(section, "resources", key), f"{key}.resources"),
        inputs=read_name_list(section.get("inputs"), f"{key}.inputs"),
        outputs=read_name_list(section.get("outputs"), f"{key}.outputs"),
        env=env,
        resume_args=read_arguments(section.get("resume_args", []), f"{key}.resume_args", allow_empty=True),
        sweep=sweep,
    )


def _input_overrides(value: Any, key: str, step: Step) -> tuple[tuple[str, InputOverride], ...]:
    section = read_mapping(value if value is not None else {}, key)
    result = []
    for name, raw in section.items():
        item_key = f"{key}.{name}"
        if name not in step.inputs:
            raise fail(item_key, f"{name!r} is not an input of step {step.name!r}", "name one of its inputs")
        body = read_mapping(raw, item_key)
        reject_unknown(body, ("made_by", "images"), item_key)
        made_by = read_relative_path(read_required(body, "made_by", item_key), f"{item_key}.made_by")
        images = read_positive_int(read_required(body, "images", item_key), f"{item_key}.images")
        result.append((str(name), InputOverride(made_by=made_by, images=images)))
    return tuple(result)


def read_override(value: Any, key: str, step: Step) -> StepOverride:
    section = read_mapping(value, key)
    reject_unknown(section, ("reason", "args", "resources", "env", "data"), key)
    reason = read_text(
        read_required(section, "reason", key), f"{key}.reason", "a sentence saying why this environment differs"
    )
    set_args: list[tuple[str, tuple[str, ...]]] = []
    remove_args: tuple[str, ...] = ()
    if "args" in section:
        args_key = f"{key}.args"
        args = read_mapping(section["args"], args_key)
        reject_unknown(args, ("set", "remove"), args_key)
        for option, raw in read_mapping(args.get("set", {}), f"{args_key}.set").items():
            option_key = f"{args_key}.set.{option}"
            if not isinstance(option, str) or not is_option(option):
                raise fail(
                    option_key,
                    f"{option!r} is not an option",
                    "name it as the program does, e.g. --batch_size",
                )
            if raw is True:
                values: tuple[str, ...] = ()
            elif isinstance(raw, list):
                values = read_arguments(raw, option_key, allow_empty=False)
            else:
                values = (read_argument(raw, option_key),)
            set_args.append((option, values))
        raw_remove = args.get("remove", [])
        remove_args = read_arguments(raw_remove, f"{args_key}.remove", allow_empty=True)
        present = set(option_values(step.args))
        for i, option in enumerate(remove_args):
            if option not in present:
                raise fail(
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
        env=read_env(section.get("env"), f"{key}.env"),
        data=_input_overrides(section.get("data"), f"{key}.data", step),
    )
