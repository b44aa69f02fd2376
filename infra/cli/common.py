"""What `atlas compare`, `monitor` and `nodes` share: the flags that say which stack and how to
reach it, and reading its outputs and config (stack_files.py) into what the kinds router needs.

A flag with a wrong value ends the command with a `UsageError` naming the flag; outputs that
cannot be read (an unknown version or kind), a stack whose config does not parse and a pulumi
command that fails end it in one line naming the key or the cause, and the fix.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from infra.cli.pulumi_cli import ProjectError, find_project, user_path
from infra.cli.stack_files import StackReadError, load_access, read_stack_config, read_stack_outputs
from infra.compare.access import Access
from infra.kinds import read_stack_outputs as typed_outputs
from infra.monitor.estimate import JobShape, shape_of_workload
from infra.outputs import OutputsError, RunOutputs, StackOutputs
from infra.stack_config import StackConfig
from infra.workload.load import load_workload
from infra.workload.model import WorkloadError

MIN_INTERVAL_S = 1.0


class UsageError(Exception):
    """A flag's value is wrong, or the stack cannot be read; the message names it and the fix.
    `cause`: "no-outputs" (nothing deployed), a StackReadError's cause, or "other"."""

    def __init__(self, message: str, cause: str = "other") -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class Stack:
    """What a command knows of the stack it was pointed at."""

    project: Path | None  # the Pulumi project's folder (None: no project, outputs from a file)
    config: StackConfig | None  # parsed as the stack program parses it; None: no stack config read
    access: Access

    @property
    def home(self) -> Path:
        """Where the command keeps its own files (reports/, .state/estimates/): the project's
        folder, else the folder the command was run in."""
        return self.project if self.project is not None else Path.cwd()


def add_stack_config_arguments(p: argparse.ArgumentParser, stack_help: str) -> None:
    """The flags that name the stack's config and its cluster (every command, doctor included).
    Relative paths are relative to the folder the command is run in."""
    p.add_argument("-s", "--stack", help=stack_help)
    p.add_argument(
        "-C",
        "--cwd",
        type=user_path,
        metavar="DIR",
        help="the Pulumi project's folder (default: the one holding the current folder, as for pulumi)",
    )
    p.add_argument(
        "--stack-file",
        type=user_path,
        help="the stack's config file (default: the project's Pulumi.<stack>.yaml)",
    )
    p.add_argument(
        "--kubeconfig", type=user_path, help="the kubeconfig (default: the stack's, else as kubectl finds it)"
    )
    p.add_argument("--context", help="the kubeconfig context (default: atlas:openshift.context, else the current one)")


def add_stack_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that name the stack, its outputs and how to reach its environments (compare,
    monitor, nodes)."""
    add_stack_config_arguments(p, "read the stack's outputs and config through pulumi (secrets included)")
    p.add_argument("--outputs", help="a file with `pulumi stack output --json`, or - for stdin")
    p.add_argument("--ssh-key", action="append", default=[], metavar="ENV=PATH", help="a key file for ENV's login")
    p.add_argument("--known-hosts", action="append", default=[], metavar="ENV=PATH", help="ENV's known_hosts file")


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The stack's flags, the polling interval and the workload (monitor and nodes)."""
    add_stack_arguments(p)
    p.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="ask every scheduler at most this often (default: each site's atlas:hpc.<name>.poll_interval_seconds, "
        "60 where the stack says none)",
    )
    p.add_argument(
        "--workload-file", type=user_path, help="the workload definition (default workloads/<workload>/workload.yaml)"
    )


def check_interval(value: float | None) -> float | None:
    if value is not None and not value >= MIN_INTERVAL_S:
        raise UsageError(f"--interval: {value:g} s is too short; use at least {MIN_INTERVAL_S:g} s (60 s is usual)")
    return value


def project_of(args: argparse.Namespace) -> Path | None:
    """The Pulumi project the command reads the stack from (`-C/--cwd`, else as pulumi finds it)."""
    try:
        return find_project(args.cwd, Path.cwd(), os.environ)
    except ProjectError as error:
        raise UsageError(str(error)) from None


def read_stack(args: argparse.Namespace, project: Path | None) -> Stack:
    """The stack's parsed config (with -s or --stack-file) and its Access, flags over config."""
    try:
        config = read_stack_config(project, args.stack, args.stack_file) if (args.stack or args.stack_file) else None
        access = load_access(args, project if project is not None else Path.cwd(), config)
    except StackReadError as error:
        raise UsageError(str(error)) from None
    return Stack(project, config, access)


def read_outputs(args: argparse.Namespace, project: Path | None) -> StackOutputs:
    """The stack outputs -s or --outputs names, typed; at least one environment."""
    if not (args.stack or args.outputs):
        raise UsageError("give -s STACK or --outputs FILE|-")
    try:
        raw = read_stack_outputs(args, project)
    except StackReadError as error:
        raise UsageError(str(error), error.cause) from None
    except (OSError, ValueError) as error:
        what = "cannot be read as `pulumi stack output --json`"
        raise UsageError(f"--outputs {args.outputs}: {what} ({error})") from None
    if not raw or not raw.get("environments"):
        raise UsageError(
            "the stack outputs name no environment (is the stack deployed? `pulumi up` first)", "no-outputs"
        )
    try:
        return typed_outputs(raw)
    except OutputsError as error:
        raise UsageError(f"the stack outputs: {error}") from None


def workload_shape(args: argparse.Namespace, run: RunOutputs, home: Path) -> JobShape | None:
    """The largest step of the workload the stack ran (the definition its outputs name, else a
    shipped workload of that name), for the wait estimate; None where it cannot be found."""
    path = args.workload_file or (
        Path(run.definition) if run.definition else home / "workloads" / run.workload / "workload.yaml"
    )
    if not path.is_file():
        return None
    try:
        return shape_of_workload(load_workload(path))
    except WorkloadError as error:
        raise UsageError(f"--workload-file {path}: {error}") from None
