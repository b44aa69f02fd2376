"""What `atlas compare`, `monitor` and `nodes` share: the flags that say which stack and how to
reach it, and reading its outputs through the kinds router.

A flag with a wrong value ends the command with a `UsageError` naming the flag; outputs that
cannot be read (an unknown version or kind) end it naming the key and the fix.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.cli.stack_files import read_stack_outputs
from infra.kinds import read_stack_outputs as typed_outputs
from infra.monitor.estimate import JobShape, shape_of_workload
from infra.outputs import OutputsError, RunOutputs, StackOutputs
from infra.workload.load import load_workload
from infra.workload.model import WorkloadError

DEFAULT_INTERVAL_S = 30.0
MIN_INTERVAL_S = 1.0


class UsageError(Exception):
    """A flag's value is wrong; the message names the flag."""


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that say which stack and how to reach it (monitor and nodes)."""
    p.add_argument("-s", "--stack", help="read `pulumi stack output --json -s STACK` (and stacks/Pulumi.STACK.yaml)")
    p.add_argument("--outputs", help="a file with `pulumi stack output --json`, or - for stdin")
    p.add_argument("--stack-file", type=Path, help="where SSH keys and the kubeconfig are named")
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="the one kubeconfig to read (default: the stack's, else KUBECONFIG merged, else ~/.kube/config)",
    )
    p.add_argument(
        "--context", help="the kubeconfig context (default: the stack's atlas:openshift.context, else the current one)"
    )
    p.add_argument("--ssh-key", action="append", default=[], metavar="ENV=PATH")
    p.add_argument("--known-hosts", action="append", default=[], metavar="ENV=PATH")
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help="ask each scheduler at most this often (default %(default)g; sites often ask for 30 to 120)",
    )
    p.add_argument(
        "--workload-file", type=Path, help="the workload definition (default workloads/<workload>/workload.yaml)"
    )


def check_interval(value: float) -> float:
    if not value >= MIN_INTERVAL_S:
        raise UsageError(f"--interval: {value:g} s is too short; use at least {MIN_INTERVAL_S:g} s (30 s is usual)")
    return value


def read_outputs(args: argparse.Namespace) -> StackOutputs:
    """The stack outputs -s or --outputs names, typed; at least one environment."""
    if not (args.stack or args.outputs):
        raise UsageError("give -s STACK or --outputs FILE|-")
    try:
        raw = read_stack_outputs(args)
    except (OSError, ValueError) as error:
        what = "cannot be read as `pulumi stack output --json`"
        raise UsageError(f"--outputs {args.outputs}: {what} ({error})") from None
    if not raw or not raw.get("environments"):
        raise UsageError("the stack outputs name no environment (is the stack deployed? `pulumi up` first)")
    try:
        return typed_outputs(raw)
    except OutputsError as error:
        raise UsageError(f"the stack outputs: {error}") from None


def workload_shape(args: argparse.Namespace, run: RunOutputs, project: Path) -> JobShape | None:
    """The largest step of the workload the stack ran (the definition its outputs name, else a
    shipped workload of that name), for the wait estimate; None where it cannot be found."""
    path = args.workload_file or (
        Path(run.definition) if run.definition else project / "workloads" / run.workload / "workload.yaml"
    )
    if not path.is_file():
        return None
    try:
        return shape_of_workload(load_workload(path))
    except WorkloadError as error:
        raise UsageError(f"--workload-file {path}: {error}") from None
