"""A workload's Containerfile read and judged for what its build can pull and read (pure).

A workload's image is built by a BuildConfig from Git (docs/workloads.md, "A workload's own
image"): the stack's `image.build.base_image` reaches the build only as the `BASE_IMAGE` build
argument, and the local environment's registry serves only the images Atlas made for it. So a
stage's `FROM` that does not go through `BASE_IMAGE` (a fixed image) cannot be replaced by the
stack, and on the local environment cannot be pulled at all.

- `instructions`: the Containerfile as instructions, each with the line it starts on (parser
  directives, comments, line continuations and heredocs handled as Docker's parser does);
- `parse_containerfile`: the ARGs before the first FROM, the stages (`FROM [--platform=...]
  image [AS name]`), the images `COPY --from` pulls, and the paths COPY and ADD read from the
  build context;
- `base_image_warnings`: the warnings for one Containerfile's base images, given where it is built (`BuildSite`).

No file is read here: `infra/image_check.py` reads the Containerfile and asks git.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from infra.loopback import is_loopback_authority

BASE_ARG = "BASE_IMAGE"
# What a stage's image resolves to where it names the BASE_IMAGE argument (never a real name).
_BASE_MARK = "\0BASE_IMAGE\0"
_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z][a-zA-Z0-9_-]*)\s*=\s*(\S*)\s*$")
_HEREDOC = re.compile(r"<<-?\s*([\"']?)([A-Za-z_][A-Za-z0-9_]*)\1")
# $NAME, ${NAME}, ${NAME:-word}, ${NAME:+word} (a word may hold one ${...} of its own)
_VARIABLE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>(?:\$\{[^{}]*\}|[^{}])*))?\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword (upper case), its arguments (continuations joined, heredoc
    bodies left out) and the line it starts on (1-based)."""

    line: int
    keyword: str
    arguments: str


@dataclass(frozen=True)
class Arg:
    line: int
    name: str
    default: str | None


@dataclass(frozen=True)
class Stage:
    """A `FROM`: the image as written, its `AS` name and `--platform`, if any."""

    line: int
    image: str
    name: str | None = None
    platform: str | None = None


@dataclass(frozen=True)
class ContextPath:
    """A path COPY or ADD reads from the build context (relative to it, as written)."""

    line: int
    path: str


@dataclass(frozen=True)
class Containerfile:
    global_args: tuple[Arg, ...]  # the ARGs before the first FROM: the only ones a FROM may use
    stages: tuple[Stage, ...]
    copied_images: tuple[Stage, ...]  # `COPY --from=<image>` of an image, not of a stage
    context_paths: tuple[ContextPath, ...]


class ContainerfileError(ValueError):
    """An instruction the parser cannot read (a FROM without an image, say), with its line."""


def _is_comment(text: str) -> bool:
    return text.lstrip().startswith("#")


def instructions(text: str) -> tuple[Instruction, ...]:
    """The instructions of a Containerfile, as Docker's parser reads them: parser directives
    (`# escape=`) only at the top, comment lines dropped (inside a continuation too), a line
    ending in the escape character continued on the next, heredoc bodies (`RUN <<EOF`) skipped."""
    lines = text.splitlines()
    escape = "\\"
    index = 0
    while index < len(lines):  # parser directives: `# name=value` lines before anything else
        match = _DIRECTIVE.match(lines[index].strip())
        if match is None:
            break
        if match.group(1).lower() == "escape" and match.group(2) in ("\\", "`"):
            escape = match.group(2)
        index += 1
    found: list[Instruction] = []
    while index < len(lines):
        raw = lines[index]
        if not raw.strip() or _is_comment(raw):
            index += 1
            continue
        start = index
        parts: list[str] = []
        current = raw.rstrip()
        while True:
            if current.endswith(escape):
                parts.append(current[: -len(escape)])
                index += 1
                # comment and empty lines inside a continuation are dropped, not ending it
                while index < len(lines) and (not lines[index].strip() or _is_comment(lines[index])):
                    index += 1
                if index >= len(lines):
                    break
                current = lines[index].rstrip()
                continue
            parts.append(current)
            index += 1
            break
        joined = " ".join(p.strip() for p in parts if p.strip())
        keyword, arguments = ([*joined.split(None, 1), ""])[:2]
        keyword = keyword.upper()
        if keyword in ("RUN", "COPY", "ADD"):
            for match in _HEREDOC.finditer(arguments):  # skip each body, up to its delimiter line
                tabs = match.group(0).startswith("<<-")
                while index < len(lines):
                    body = lines[index].lstrip("\t") if tabs else lines[index]
                    index += 1
                    if body.rstrip("\n") == match.group(2):
                        break
        found.append(Instruction(start + 1, keyword, arguments.strip()))
    return tuple(found)


def _words(text: str) -> list[str]:
    """Words as a shell splits them (quotes kept together), or on blanks where quoting is broken."""
    try:
        return shlex.split(text, posix=True)
    except ValueError:
        return text.split()


def _flags(arguments: str) -> tuple[dict[str, str], str]:
    """`--name=value` flags at the front, and the text after them."""
    flags: dict[str, str] = {}
    rest = arguments.strip()
    while (match := re.match(r"--([A-Za-z][A-Za-z0-9-]*)(?:=(\S*))?\s*", rest)) is not None:
        flags[match.group(1).lower()] = _words(match.group(2) or "")[0] if match.group(2) else ""
        rest = rest[match.end():]
    return flags, rest


def _args(arguments: str, line: int) -> list[Arg]:
    found = []
    for word in _words(arguments):
        name, equals, default = word.partition("=")
        found.append(Arg(line, name, default if equals else None))
    return found


def _stage(instruction: Instruction) -> Stage:
    flags, rest = _flags(instruction.arguments)
    words = _words(rest)
    if not words:
        raise ContainerfileError(f"line {instruction.line}: FROM names no image")
    name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
    return Stage(instruction.line, words[0], name, flags.get("platform"))


def parse_containerfile(text: str) -> Containerfile:
    """The parts of a Containerfile its build's checks need; raises ContainerfileError for a FROM
    without an image."""
    global_args: list[Arg] = []
    stages: list[Stage] = []
    copied: list[Stage] = []
    paths: list[ContextPath] = []
    for instruction in instructions(text):
        if instruction.keyword == "ARG" and not stages:
            global_args += _args(instruction.arguments, instruction.line)
        elif instruction.keyword == "FROM":
            stages.append(_stage(instruction))
        elif instruction.keyword in ("COPY", "ADD"):
            flags, rest = _flags(instruction.arguments)
            if rest.startswith("["):  # the JSON form: ["src", ..., "dest"]
                try:
                    words = [str(w) for w in json.loads(rest)]
                except ValueError:
                    words = _words(rest.strip("[]").replace(",", " "))
            elif _HEREDOC.search(rest):
                continue  # an inline file: nothing is read from the context
            else:
                words = _words(rest)
            origin = flags.get("from")
            if origin is not None:
                known = {s.name.lower() for s in stages if s.name} | {str(i) for i in range(len(stages))}
                if origin.lower() not in known:
                    copied.append(Stage(instruction.line, origin))
                continue  # read from a stage or an image, not from the context
            for source in words[:-1]:
                if instruction.keyword == "ADD" and re.match(r"^[a-z][a-z0-9+.-]*://|^git@", source):
                    continue  # fetched from the network, not the context
                paths.append(ContextPath(instruction.line, source))
    return Containerfile(tuple(global_args), tuple(stages), tuple(copied), tuple(paths))


def expand(value: str, variables: dict[str, str | None]) -> str:
    """`$NAME`, `${NAME}`, `${NAME:-word}` and `${NAME:+word}` as a Containerfile expands them; an
    undeclared or unset name is empty."""

    def one(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("plain")
        current = variables.get(name)
        op = match.group("op")
        if op == "-":
            return current if current else expand(match.group("word"), variables)
        if op == "+":
            return expand(match.group("word"), variables) if current else ""
        return current or ""

    return _VARIABLE.sub(one, value)


def resolved_args(containerfile: Containerfile) -> dict[str, str | None]:
    """The global ARGs with their defaults expanded in order; BASE_IMAGE as a mark, as the stack
    (or the local environment's builder) always gives its value."""
    variables: dict[str, str | None] = {}
    for arg in containerfile.global_args:
        if arg.name == BASE_ARG:
            variables[arg.name] = _BASE_MARK
        else:
            variables[arg.name] = None if arg.default is None else expand(arg.default, variables)
    return variables


def registry_host(image: str) -> str | None:
    """The registry an image reference names (`host[:port]` before the first `/`), or None for
    Docker Hub's short names (`python:3.11-slim`, `library/debian`)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        return first
    return None


def repository_and_tag(image: str) -> str:
    """`repository:tag` of a reference without its registry host (tag `latest` when none)."""
    host = registry_host(image)
    rest = image[len(host) + 1:] if host else image
    if "@" in rest:
        return rest
    _, colon, tag = rest.rpartition(":")
    return rest if colon and "/" not in tag else f"{rest}:latest"


def is_loopback(host: str | None) -> bool:
    """A registry on this machine's loopback (the local environment's), whatever its port."""
    return host is not None and is_loopback_authority(host)


@dataclass(frozen=True)
class BuildSite:
    """What the checks know of where the image is built. `local` None: not known (`scripts/workload
    check` without a stack), so both the local environment's and a real cluster's view are given."""

    served: frozenset[str]  # repository:tag the local environment's registry serves as bases
    local: bool | None = None
    base_image: str | None = None  # the stack's image.build.base_image, where known


@dataclass(frozen=True)
class BuildWarning:
    """One warning: where (the file, a line when one is to blame), what is wrong, and the fix."""

    path: str
    line: int | None
    problem: str
    fix: str

    def text(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.problem}; {self.fix}"


def _served_text(site: BuildSite) -> str:
    return ", ".join(sorted(site.served)) or "no base image"


def _fixed_image_problem(image: str, resolved: str, site: BuildSite) -> str | None:
    """Why a stage's fixed image (not through BASE_IMAGE) cannot be built where `site` says, or
    None where it can and nothing is lost."""
    shown = image if image == resolved else f"{image} (that is, {resolved})"
    host = registry_host(resolved)
    if is_loopback(host):
        if site.local is False:
            return f"{shown} is this machine's local registry, which a cluster's build cannot reach"
        if repository_and_tag(resolved) not in site.served:
            return (f"{shown} is not served by the local environment's registry (it serves {_served_text(site)} "
                    "and the images Atlas's builds push)")
        if site.local is True:
            return None  # the local builder pulls it; the stack is this machine's
        return f"{shown} is fixed to this machine's local registry: a real cluster's build cannot pull it"
    if site.local is True:
        return (f"{shown} is a fixed image the local environment cannot pull (no registry outside this machine "
                f"is reachable; its registry serves {_served_text(site)})")
    if site.local is False:
        if site.base_image is None:
            return None  # the cluster pulls it, and the stack sets no base image it would ignore
        return f"{shown} is a fixed image: the stack's image.build.base_image ({site.base_image}) does not reach it"
    return (f"{shown} is a fixed image: the stack's image.build.base_image cannot replace it, and the local "
            f"environment cannot pull it (its registry serves {_served_text(site)})")


def base_image_warnings(containerfile: Containerfile, path: str, site: BuildSite) -> list[BuildWarning]:
    """The warnings for a Containerfile's base images: a missing `ARG BASE_IMAGE` before the first
    FROM, a stage (or a `COPY --from`) of a fixed image, a local registry's image it does not serve,
    a BASE_IMAGE the build leaves empty, and, on the local environment, a base image the stack names
    that its registry does not serve."""
    findings: list[BuildWarning] = []
    if not containerfile.stages:
        return [BuildWarning(path, None, "has no FROM", f"start it with `ARG {BASE_ARG}=<default image>` and "
                                                   f"`FROM ${{{BASE_ARG}}}`")]
    variables = resolved_args(containerfile)
    declared = next((a for a in containerfile.global_args if a.name == BASE_ARG), None)
    first = containerfile.stages[0]
    if declared is None:
        findings.append(BuildWarning(
            path, first.line, f"no `ARG {BASE_ARG}` before the first FROM, so the stack's image.build.base_image "
            "(passed as the BASE_IMAGE build argument) never reaches the build",
            f"add `ARG {BASE_ARG}=<default image>` above it and write `FROM ${{{BASE_ARG}}}`"))
    elif declared.default is None and site.base_image is None and site.local is not True:
        findings.append(BuildWarning(
            path, declared.line, f"`ARG {BASE_ARG}` has no default, so a stack without image.build.base_image "
            "builds FROM an empty name and fails",
            f"give it one (`ARG {BASE_ARG}=docker.io/library/python:3.11-slim`) or set image.build.base_image"))
    names: set[str] = set()  # the stages named so far: a FROM or COPY --from of one pulls nothing
    pulled = [("FROM", stage) for stage in containerfile.stages]
    pulled += [("COPY --from", stage) for stage in containerfile.copied_images]
    for what, stage in sorted(pulled, key=lambda pair: pair[1].line):
        resolved = expand(stage.image, variables)
        if resolved.lower() in names or _BASE_MARK in resolved or resolved.lower() == "scratch":
            pass  # an earlier stage, the stack's base image (or the local registry's), or nothing
        elif not resolved:
            findings.append(BuildWarning(
                path, stage.line, f"{what} {stage.image} is empty: it names no ARG declared before the first FROM",
                f"declare it there, or write `FROM ${{{BASE_ARG}}}`"))
        elif (problem := _fixed_image_problem(stage.image, resolved, site)) is not None:
            fix = (
                f"write `FROM ${{{BASE_ARG}}}` (with `ARG {BASE_ARG}=<default image>` above the first FROM) and "
                "set the image in the stack's image.build.base_image"
                if what == "FROM"
                else f"copy from a stage of this file instead (`FROM ${{{BASE_ARG}}} AS <name>`, then "
                "`COPY --from=<name>`)"
            )
            findings.append(BuildWarning(path, stage.line, f"{what} {problem}", fix))
        if what == "FROM" and stage.name:
            names.add(stage.name.lower())
    if site.local is True and site.base_image is not None:
        host = registry_host(site.base_image)
        if not is_loopback(host) or repository_and_tag(site.base_image) not in site.served:
            findings.append(BuildWarning(
                path, declared.line if declared else None,
                f"the stack's image.build.base_image {site.base_image} is not an image the local environment's "
                f"registry serves ({_served_text(site)})",
                "set image.build.base_image to the local registry's base image "
                "(`scripts/localenv status` prints the registry)"))
    return findings
