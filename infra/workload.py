"""A workload definition (`workloads/<name>/workload.yaml`), validated once into frozen dataclasses.

One definition serves every environment: the Kubernetes side renders each step into a Job
container's `args` (list form, so the image's entrypoint still runs first), the HPC side
into one line of a job script (`shlex`-quoted). Both call `render_step`, so both run the
same arguments unless the definition's `overrides` say otherwise, and every override shows
up in `step_differences`, which the comparison report prints.

Everything here is pure (no I/O except `load_workload`), so it is tested without any
environment. Every error names the key path (`steps[2].resources.memory`) and the fix.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from infra.validation import Fields

SCHEMA_VERSION = 1
# RFC 1123 label: a step name becomes part of a Kubernetes Job name and a scheduler job name.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
GIT_COMMIT = re.compile(r"^[0-9a-f]{40}$")
GIT_BRANCH = re.compile(r"^[A-Za-z0-9._/-]+$")
REPOSITORY_URL = re.compile(r"^(https://|ssh://|git@)[A-Za-z0-9._:/@~-]+$")
# Binary suffixes only: Slurm reads "64G" as 64 GiB while Kubernetes reads it as 64e9 bytes,
# so a decimal suffix would ask the two sides for different amounts.
MEMORY = re.compile(r"^(?P<number>[0-9]+)(?P<unit>Ki|Mi|Gi|Ti)?$")
MEMORY_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
WALLTIME = re.compile(
    r"^(?:(?P<days>[0-9]+)-)?(?P<hours>[0-9]{1,3}):(?P<minutes>[0-5][0-9]):(?P<seconds>[0-5][0-9])$"
)
MAX_GPUS_PER_NODE = 16


class WorkloadError(ValueError):
    """A workload definition that cannot be used; the message names the key path and the fix."""


_fields = Fields(WorkloadError)
_fail = _fields.fail
_mapping = _fields.mapping
_reject_unknown = _fields.reject_unknown


# ---------------------------------------------------------------------------------------------
# The typed definition


@dataclass(frozen=True)
class GitSource:
    """The workload's code lives in another repository, pinned to one commit.

    `patch` (relative to this repository's root) is applied to that commit wherever the code is
    materialised (infra/workload_source.py): the container build, the HPC staging and the device
    run, so every environment runs the same tree."""

    repository: str
    branch: str
    commit: str
    patch: str | None = None


@dataclass(frozen=True)
class InTreeSource:
    """The workload's code ships inside this repository (the probe)."""

    path: str


Source = GitSource | InTreeSource


@dataclass(frozen=True)
class Build:
    """The container build context; paths are relative to this repository's root."""

    context: str
    containerfile: str
    entrypoint: str


@dataclass(frozen=True)
class Resources:
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    memory: str  # as written (binary units), e.g. "64Gi": Kubernetes takes it unchanged
    memory_bytes: int
    walltime_seconds: int

    @property
    def memory_mib(self) -> int:
        """Whole MiB, rounded up: what `sbatch --mem=<n>M` and LSF's `rusage[mem=<n>]` take."""
        return -(-self.memory_bytes // (1 << 20))

    @property
    def walltime(self) -> str:
        """`[D-]HH:MM:SS`, Slurm's `--time` format; LSF's `-W` takes `HH:MM` (see `walltime_lsf`)."""
        days, rest = divmod(self.walltime_seconds, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, seconds = divmod(rest, 60)
        clock = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
        return f"{days}-{clock}" if days else clock

    @property
    def walltime_lsf(self) -> str:
        """`HH:MM`, rounded up to the minute, for `bsub -W`."""
        minutes = -(-self.walltime_seconds // 60)
        return f"{minutes // 60}:{minutes % 60:02d}"

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class DataPath:
    name: str
    path: str  # relative to the step's working directory
    description: str


@dataclass(frozen=True)
class Step:
    name: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    resources: Resources
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # sorted by name
    description: str
    # What backfill (infra/nodes/backfill.py) appends so a preempted, restarted copy continues from
    # its own checkpoint. Only for a program whose resume starts afresh where there is no checkpoint
    # yet (the probe's `--resume`); BigGAN-PyTorch's `--resume` fails without weights, so none there.
    # The pipeline's own runs never get these.
    resume_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class InputOverride:
    """An environment that reads other data for one of a step's inputs: how it is made, how much."""

    made_by: str  # a script of this repository that writes the input where data.inputs says
    images: int


@dataclass(frozen=True)
class StepOverride:
    """What one environment changes in one step, and why; always reported as a difference."""

    reason: str
    set_args: tuple[tuple[str, tuple[str, ...]], ...]  # option -> values (() for a bare flag)
    remove_args: tuple[str, ...]
    resources: tuple[tuple[str, str | int], ...]  # field -> value as written
    env: tuple[tuple[str, str], ...]
    data: tuple[tuple[str, InputOverride], ...] = ()  # input name -> what this environment reads instead


@dataclass(frozen=True)
class Logs:
    root: str
    experiment: str

    @property
    def jsonl(self) -> str:
        """BigGAN-PyTorch's evaluation log, one JSON object per `--test_every`."""
        return f"{self.root}/{self.experiment}_log.jsonl"

    @property
    def loss_dir(self) -> str:
        """Where the per-iteration `G_loss.log`, `D_loss_real.log`, `D_loss_fake.log` are."""
        return f"{self.root}/{self.experiment}"


@dataclass(frozen=True)
class Telemetry:
    root: str
    interval_seconds: float


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    source: Source
    build: Build
    data: tuple[DataPath, ...]
    steps: tuple[Step, ...]
    logs: Logs
    telemetry: Telemetry
    overrides: tuple[tuple[str, tuple[tuple[str, StepOverride], ...]], ...]  # env -> step -> override

    def step(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        names = ", ".join(s.name for s in self.steps)
        raise WorkloadError(f"step {name!r}: not in workload {self.name!r}; use one of {names}")

    def override(self, environment: str, step: str) -> StepOverride | None:
        for env_name, per_step in self.overrides:
            if env_name == environment:
                for step_name, override in per_step:
                    if step_name == step:
                        return override
        return None

    @property
    def environments_with_overrides(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.overrides)

    def depends_on(self, step: str) -> tuple[str, ...]:
        """The earlier steps whose outputs this step reads: the scheduler dependencies."""
        needed = set(self.step(step).inputs)
        return tuple(s.name for s in self.steps if s.name != step and needed & set(s.outputs))


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
    text = _text(value, key)
    if len(text) > 63 or not DNS_LABEL.match(text):
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
    if "path" in section:
        _reject_unknown(section, ("path",), key)
        return InTreeSource(path=_relative_path(section["path"], f"{key}.path"))
    _reject_unknown(section, ("repository", "branch", "commit", "patch"), key)
    repository = _text(_required(section, "repository", key), f"{key}.repository")
    if not REPOSITORY_URL.match(repository):
        raise _fail(f"{key}.repository", f"{repository!r} is not a git URL", "write https://host/owner/name")
    branch = _text(_required(section, "branch", key), f"{key}.branch")
    if not GIT_BRANCH.match(branch) or ".." in branch:
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
            if not isinstance(option, str) or not _is_option(option):
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
        present = set(_parse_options(step.args))
        for i, option in enumerate(remove_args):
            if option not in present:
                raise _fail(
                    f"{args_key}.remove[{i}]",
                    f"{option!r} is not among step {step.name!r}'s args",
                    "remove only options the step has",
                )
    resources: list[tuple[str, str | int]] = []
    if "resources" in section:
        res_key = f"{key}.resources"
        parse_resources(section["resources"], res_key, base=step.resources)  # validates
        resources = [(k, v) for k, v in _mapping(section["resources"], res_key).items()]
    return StepOverride(
        reason=reason,
        set_args=tuple(set_args),
        remove_args=remove_args,
        resources=tuple(resources),
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

    build_section = _mapping(_required(top, "build", ""), "build")
    _reject_unknown(build_section, ("context", "containerfile", "entrypoint"), "build")
    build = Build(
        context=_relative_path(build_section.get("context", "."), "build.context"),
        containerfile=_relative_path(
            _required(build_section, "containerfile", "build"), "build.containerfile"
        ),
        entrypoint=_relative_path(_required(build_section, "entrypoint", "build"), "build.entrypoint"),
    )

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
    logs = Logs(
        root=_relative_path(_required(logs_section, "root", "logs"), "logs.root"),
        experiment=_relative_path(_required(logs_section, "experiment", "logs"), "logs.experiment"),
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

    return Workload(
        name=name,
        description=_text(top.get("description", "-"), "description"),
        source=_source(_required(top, "source", ""), "source"),
        build=build,
        data=data,
        steps=steps,
        logs=logs,
        telemetry=telemetry,
        overrides=tuple(overrides),
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


def load_workload(path: Path) -> Workload:
    """Read and validate `path`; errors are prefixed with the file name."""
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
        return parse_workload(raw)
    except WorkloadError as error:
        raise WorkloadError(f"{path}: {error}") from None
    except yaml.YAMLError as error:
        raise WorkloadError(f"{path}: not valid YAML: {error}") from None


# ---------------------------------------------------------------------------------------------
# Rendering (pure): the same arguments for every environment unless an override says otherwise


def _is_option(word: str) -> bool:
    # "-1" and "-0.5" are values (negative numbers), not options.
    return word.startswith("-") and word != "-" and not re.match(r"^-[0-9.]", word)


def _parse_options(args: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Options in order, each with the values that follow it; positionals under ""."""
    options: dict[str, tuple[str, ...]] = {}
    current = ""
    for token in args:
        if _is_option(token):
            option, equals, value = token.partition("=")
            current = option
            options[current] = options.get(current, ()) + ((value,) if equals else ())
        else:
            options[current] = (*options.get(current, ()), token)
    return options


def _segments(args: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Tokens grouped as (option, its tokens): the leading positionals under ""."""
    segments: list[tuple[str, list[str]]] = [("", [])]
    for token in args:
        if _is_option(token):
            segments.append((token.partition("=")[0], [token]))
        else:
            segments[-1][1].append(token)
    return segments


def _apply_args(args: tuple[str, ...], override: StepOverride) -> tuple[str, ...]:
    removed = set(override.remove_args)
    pending = dict(override.set_args)
    result: list[str] = []
    for option, tokens in _segments(args):
        if option in removed:
            continue
        if option and option in dict(override.set_args):
            # A set option takes the place of its first occurrence; later repeats go.
            if option in pending:
                result.extend((option, *pending.pop(option)))
            continue
        result.extend(tokens)
    for option, values in pending.items():
        result.extend((option, *values))
    return tuple(result)


@dataclass(frozen=True)
class RenderedStep:
    """One step as one environment runs it."""

    environment: str
    name: str
    argv: tuple[str, ...]
    resources: Resources
    env: tuple[tuple[str, str], ...]
    override_reason: str | None  # None: exactly as defined


def render_step(workload: Workload, step_name: str, environment: str) -> RenderedStep:
    step = workload.step(step_name)
    override = workload.override(environment, step_name)
    if override is None:
        return RenderedStep(environment, step.name, step.command + step.args, step.resources, step.env, None)
    resources = step.resources
    if override.resources:
        resources = parse_resources(
            dict(override.resources), f"overrides.{environment}.{step_name}.resources", resources
        )
    env = tuple(sorted({**dict(step.env), **dict(override.env)}.items()))
    return RenderedStep(
        environment,
        step.name,
        step.command + _apply_args(step.args, override),
        resources,
        env,
        override.reason,
    )


def render_steps(workload: Workload, environment: str) -> tuple[RenderedStep, ...]:
    return tuple(render_step(workload, step.name, environment) for step in workload.steps)


def kubernetes_args(rendered: RenderedStep) -> list[str]:
    """The Job container's `args` (not `command`, which would replace the image's entrypoint)."""
    return list(rendered.argv)


def hpc_command_line(rendered: RenderedStep) -> str:
    """One line of a job script: every token quoted, so the shell expands nothing in it."""
    return shlex.join(rendered.argv)


def hpc_env_lines(rendered: RenderedStep) -> list[str]:
    return [f"export {name}={shlex.quote(value)}" for name, value in rendered.env]


def with_sampler(
    argv: Sequence[str], out: str, interval_seconds: float, python: str = "python3"
) -> tuple[str, ...]:
    """Wrap a step's argv in the telemetry sampler, which runs it as its child."""
    return (
        python,
        "-m",
        "infra.telemetry.sampler",
        "--out",
        out,
        "--interval",
        f"{interval_seconds:g}",
        "--",
        *argv,
    )


@dataclass(frozen=True)
class StepDifference:
    """One way two environments run a step differently; `None` means absent on that side."""

    step: str
    kind: str  # "arg", "resources", "env" or "data"
    key: str
    value_a: str | None
    value_b: str | None
    reason: str  # the overrides' reasons, joined


def _show_option(values: tuple[str, ...] | None) -> str | None:
    if values is None:
        return None
    return " ".join(values) if values else "(flag)"


def step_differences(
    workload: Workload, environment_a: str, environment_b: str
) -> tuple[StepDifference, ...]:
    """Every difference between two environments' rendered steps, in step order, for the report."""
    differences: list[StepDifference] = []
    for step in workload.steps:
        a = render_step(workload, step.name, environment_a)
        b = render_step(workload, step.name, environment_b)
        reason = "; ".join(
            f"{r.environment}: {r.override_reason}" for r in (a, b) if r.override_reason is not None
        )
        if a.argv[: len(step.command)] != b.argv[: len(step.command)]:
            differences.append(
                StepDifference(step.name, "arg", "(command)", shlex.join(a.argv), shlex.join(b.argv), reason)
            )
        options_a = _parse_options(a.argv[len(step.command) :])
        options_b = _parse_options(b.argv[len(step.command) :])
        for option in list(options_a) + [o for o in options_b if o not in options_a]:
            value_a, value_b = options_a.get(option), options_b.get(option)
            if value_a != value_b:
                differences.append(
                    StepDifference(
                        step.name,
                        "arg",
                        option or "(positional)",
                        _show_option(value_a),
                        _show_option(value_b),
                        reason,
                    )
                )
        for field in ("nodes", "gpus_per_node", "cpus_per_task", "memory_bytes", "walltime_seconds"):
            value_a, value_b = getattr(a.resources, field), getattr(b.resources, field)
            if value_a != value_b:
                differences.append(
                    StepDifference(step.name, "resources", field, str(value_a), str(value_b), reason)
                )
        env_a, env_b = dict(a.env), dict(b.env)
        for name in sorted(set(env_a) | set(env_b)):
            if env_a.get(name) != env_b.get(name):
                differences.append(
                    StepDifference(step.name, "env", name, env_a.get(name), env_b.get(name), reason)
                )
        data_a, data_b = _data_of(workload, environment_a, step), _data_of(workload, environment_b, step)
        for name in step.inputs:
            if data_a.get(name) != data_b.get(name):
                shown_a, shown_b = _show_data(workload, name, data_a), _show_data(workload, name, data_b)
                differences.append(StepDifference(step.name, "data", name, shown_a, shown_b, reason))
    return tuple(differences)


def _data_of(workload: Workload, environment: str, step: Step) -> dict[str, InputOverride]:
    override = workload.override(environment, step.name)
    return dict(override.data) if override is not None else {}


def _show_data(workload: Workload, name: str, data: dict[str, InputOverride]) -> str:
    if name in data:
        return f"{data[name].images} images made by {data[name].made_by}"
    path = next((d for d in workload.data if d.name == name), None)
    return f"{path.path} as defined ({path.description})" if path is not None else "as defined"


def input_override(workload: Workload, environment: str, step: str, name: str) -> InputOverride | None:
    """What `environment` reads instead of input `name` of `step`, if its overrides say so."""
    override = workload.override(environment, step)
    return dict(override.data).get(name) if override is not None else None


def sampled_argv(workload: Workload, rendered: RenderedStep, interval_seconds: float | None = None) -> tuple[str, ...]:
    """A step's argv wrapped by the sampler as a Job's container runs it (infra/openshift/manifests.py):
    `python3 -m infra.telemetry.sampler --out <telemetry>/<step>.jsonl --interval N --step <step> -- argv`."""
    interval = workload.telemetry.interval_seconds if interval_seconds is None else interval_seconds
    argv = list(with_sampler(rendered.argv, f"{workload.telemetry.root}/{rendered.name}.jsonl", interval))
    separator = argv.index("--")
    argv[separator:separator] = ["--step", rendered.name]
    return tuple(argv)
