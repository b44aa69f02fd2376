"""`atlas nodes` (scripts/nodes): under-used GPU nodes in every environment, queue-wait estimates, backfill.

    scripts/nodes -s local                      # every GPU node, judged by use, with a suggestion
    scripts/nodes -s local --json
    scripts/nodes -s local --estimate           # how long a job of the workload's shape would wait now
                                                # (also written to .state/estimates/<stack>.json, which
                                                # scripts/compare puts beside the measured wait)
    scripts/nodes -s local --backfill probe     # fill free GPUs with work that real jobs preempt
    scripts/nodes -s local --backfill-stop probe

Stack outputs and credentials are read as by scripts/monitor and scripts/compare.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from rich.console import Console

from infra.cli.common import (
    UsageError,
    add_source_arguments,
    check_interval,
    project_of,
    read_outputs,
    read_stack,
    workload_shape,
)
from infra.cli.monitor import build_monitor
from infra.cli.pulumi_cli import stack_file as project_stack_file
from infra.compare.access import Access
from infra.hpc import ssh
from infra.hpc.scheduler import BACKFILL_QUEUE, SchedulerError
from infra.kinds import BackfillRequest, backfill, outputs_before_up
from infra.kubeapi import KubeRequestError
from infra.monitor.build import Monitor
from infra.monitor.render import estimate_text
from infra.nodes.backfill import BackfillError
from infra.nodes.idle import IDLE_AFTER_S, IDLE_PERCENT, find_underused, summarize
from infra.nodes.render import estimates_record, estimates_table, findings_table
from infra.outputs import RunOutputs, StackOutputs

ESTIMATES_DIR = Path(".state") / "estimates"


def estimates_file(project: Path, stack: str) -> Path:
    return project / ESTIMATES_DIR / f"{stack}.json"


def outputs_from_stack_file(path: Path, stack: str) -> StackOutputs:
    """Before the first `pulumi up` there are no outputs: the environments as the stack file names
    them (where to reach each scheduler, no steps yet), enough to judge nodes and estimate waits."""
    config = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    run = RunOutputs(stack=stack, workload=str(config.get("atlas:workload", "probe")),
                     run_id=str(config.get("atlas:runId", "1")))
    outputs = outputs_before_up(config, stack, run)
    if not outputs.environments:
        raise UsageError(f"--stack-file {path}: names no environment (atlas:openshift, atlas:hpc)")
    return outputs


def _outputs(args: argparse.Namespace, project: Path | None) -> StackOutputs:
    """The stack's outputs; without any (not deployed yet), the environments its stack file names."""
    stack_file = args.stack_file or (
        project_stack_file(project, args.stack) if args.stack and project is not None else None
    )
    if args.outputs or (args.stack and stack_file is None):
        return read_outputs(args, project)
    if args.stack:
        try:
            return read_outputs(args, project)
        except UsageError as error:
            # Not deployed yet (no outputs, or no stack in the backend): the stack file says where
            # the environments are. A backend or passphrase that fails is the answer.
            if error.cause not in ("no-outputs", "stack") or stack_file is None or not stack_file.is_file():
                raise
            print(f"nodes: no outputs for stack {args.stack} ({error}); reading {stack_file}", file=sys.stderr)
    if stack_file is None or not stack_file.is_file():
        raise UsageError("give -s STACK, --outputs FILE|- or --stack-file FILE")
    name = args.stack or stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    return outputs_from_stack_file(stack_file, name)


# --- commands ------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atlas nodes", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_source_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--idle-percent",
        type=float,
        default=IDLE_PERCENT,
        help="GPU use below this counts as idle (default %(default)g)",
    )
    p.add_argument(
        "--idle-minutes",
        type=float,
        default=IDLE_AFTER_S / 60,
        help="allocated GPUs idle for longer than this are reported (default %(default)g)",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--estimate", action="store_true", help="queue-wait estimate per environment")
    what.add_argument("--backfill", metavar="WORKLOAD", help="fill free GPUs with this workload's GPU step")
    what.add_argument("--backfill-stop", metavar="WORKLOAD", help="remove the backfill started for WORKLOAD")
    p.add_argument("--slots", type=int, help="with --backfill: at most this many one-GPU copies per environment")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="with --backfill: only these environments (repeatable; default all that support it)",
    )
    p.add_argument(
        "--backfill-partition",
        default=BACKFILL_QUEUE,
        help="Slurm partition whose jobs are preempted and requeued (default %(default)s)",
    )
    return p


def _check(args: argparse.Namespace) -> None:
    check_interval(args.interval)
    if not 0 <= args.idle_percent <= 100:
        raise UsageError(f"--idle-percent: {args.idle_percent:g} is not a percentage; use 0 to 100")
    if args.idle_minutes < 0:
        raise UsageError(f"--idle-minutes: {args.idle_minutes:g} is negative; use 0 or more")
    if args.slots is not None and args.slots < 1:
        raise UsageError(f"--slots: {args.slots} must be at least 1")
    if (args.slots is not None or args.env) and not args.backfill:
        raise UsageError("--slots and --env go with --backfill WORKLOAD")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console()
    try:
        _check(args)
        found = project_of(args)
        outputs = _outputs(args, found)
        stack = read_stack(args, found)
        shape = workload_shape(args, outputs.run, stack.home)
    except UsageError as error:
        print(f"nodes: {error}", file=sys.stderr)
        return 2
    project, access = stack.home, stack.access
    monitor = build_monitor(outputs, access, args.interval, shape, watch=False)
    try:
        if args.backfill or args.backfill_stop:
            return _backfill(args, monitor, outputs, access, project, console)
        snapshot = monitor.snapshot()
        for env in snapshot.environments:
            if env.error:
                print(f"nodes: {env.name}: {env.error}", file=sys.stderr)
            elif not env.nodes:
                # No node to judge: say why (a project's user may not list nodes, say).
                for note in env.notes:
                    print(f"nodes: {env.name}: {note}", file=sys.stderr)
        if args.estimate:
            estimates = [e.estimate for e in snapshot.environments if e.estimate is not None]
            record = estimates_record(snapshot)
            path = estimates_file(project, snapshot.stack or "outputs")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=2, sort_keys=True))
            if args.json:
                print(json.dumps(record, indent=2, sort_keys=True))
            else:
                console.print(estimates_table(estimates, {e.name: e.provenance for e in snapshot.environments}))
                console.print(f"written to {path} (scripts/compare shows it beside the measured wait)")
            return 0
        findings = find_underused(snapshot, args.idle_percent, args.idle_minutes * 60)
        if args.json:
            print(
                json.dumps(
                    {"summary": summarize(findings), "nodes": [dataclasses.asdict(f) for f in findings]},
                    indent=2,
                    sort_keys=True,
                )
            )
        else:
            console.print(findings_table(findings))
            s = summarize(findings)
            console.print(
                f"{s['underused_nodes']} of {s['nodes']} GPU nodes under-used: {s['free_gpus']} GPUs free, "
                f"{s['idle_gpus']} allocated but idle for over {args.idle_minutes:g} min "
                f"(below {args.idle_percent:g} %)"
            )
            for env in snapshot.environments:
                if env.estimate is not None:
                    console.print(f"{env.name} ({env.provenance}): {estimate_text(env.estimate)}", style="cyan")
        return 0
    finally:
        ssh.close_all()


def _backfill(
    args: argparse.Namespace,
    monitor: Monitor,
    outputs: StackOutputs,
    access: Access,
    project: Path,
    console: Console,
) -> int:
    workload = args.backfill or args.backfill_stop
    snapshot = monitor.snapshot()
    chosen = set(args.env)
    unknown = chosen - {e.name for e in snapshot.environments}
    if unknown:
        print(f"nodes: --env: {', '.join(sorted(unknown))} not in the stack outputs", file=sys.stderr)
        return 2
    status = 0
    for env in snapshot.environments:
        if chosen and env.name not in chosen:
            continue
        free = sum(n.gpus_free for n in env.nodes)
        request = BackfillRequest(
            environment=env.name,
            source=monitor.sources[env.name],
            access=access,
            project=project,
            workload=workload,
            run_workload=outputs.run.workload,
            slots=min(free, args.slots) if args.slots else free,
            partition=args.backfill_partition,
            stop=bool(args.backfill_stop),
        )
        try:
            backfill(request, outputs.environments[env.name], console.print)
        except (BackfillError, UsageError, KubeRequestError, SchedulerError, OSError, ValueError) as error:
            print(f"nodes: {env.name}: {error}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
