"""`atlas compare` (scripts/compare): collect from every environment a stack's outputs name, compute, write the report.

    scripts/compare -s local                     # the stack's outputs and config, through pulumi
    scripts/compare --outputs outputs.json       # or `-` for stdin
    scripts/compare -s local --import seed-logs/ # the seed's sar and nvidia-smi logs beside the new run
    scripts/compare --import seed-logs/          # only an imported run
    scripts/compare -s satori --wait 3600        # first wait for every step, asking at the site's pace

With -s, each environment is reached as the stack reaches it: its config read through pulumi
(`pulumi config --show-secrets`: a login key held as a Pulumi secret works; nothing secret is
printed or written) and parsed by the stack program's parsers, so an HPC side uses its target
(resolved through the user's ssh config: aliases, jump hosts, the agent) and the Kubernetes side
`atlas:openshift.kubeconfig` and `.context` (else KUBECONFIG merged, else ~/.kube/config, and the
current context). --ssh-key, --known-hosts, --kubeconfig and --context override. Credentials the
API refuses end the command in one line saying how to log in again. --wait asks each scheduler
at most every `atlas:hpc.<name>.poll_interval_seconds` (60 s where unset), less often while a
site fails. Paths on the command line are relative to where it runs; the project (`-C DIR`, else
the one holding the current folder) holds the stack and, by default, reports/.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from infra.cli.common import UsageError, add_stack_arguments, check_interval, project_of, read_stack
from infra.cli.pulumi_cli import user_path
from infra.cli.stack_files import StackReadError, read_stack_outputs
from infra.compare.access import Access
from infra.compare.collect import import_folder, unfinished_steps
from infra.compare.cost_files import RATES_FILE, load_cost_profiles, load_estimates, load_rate_table
from infra.compare.costs import CostConfigError
from infra.compare.estimates import with_estimates
from infra.compare.metrics import build_report
from infra.compare.render import summary_renderables
from infra.compare.report import WrittenReport, write_report
from infra.compare.report_model import Report
from infra.hpc import ssh
from infra.hpc.polling import backoff_s
from infra.kinds import collect_environments, poll_intervals
from infra.kinds import read_stack_outputs as typed_outputs
from infra.outputs import OutputsError, StackOutputs

# With no batch scheduler in the stack (Kubernetes alone), how often the API is read while waiting.
API_WAIT_INTERVAL_S = 5.0


def wait_interval(outputs: StackOutputs, access: Access, override_s: float | None = None) -> float:
    """How long between two readings of every environment while waiting: the slowest pace a site
    allows among the stack's schedulers (`poll_intervals`), or `override_s` (--interval)."""
    intervals = poll_intervals(outputs, access, override_s)
    if intervals:
        return max(intervals.values())
    return override_s if override_s is not None else API_WAIT_INTERVAL_S


def wait_until_finished(
    outputs: StackOutputs,
    access: Access,
    raw_dir: Path,
    timeout_s: float,
    interval_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """`pulumi up` waits for the preparation steps only: read every environment's own records
    (batched) until every step has finished or `timeout_s` passed, at the sites' pace
    (`wait_interval`); while an environment cannot be read, it counts as unfinished and the
    delay grows (`backoff_s`). Returns the steps still unfinished (empty when all finished)."""
    start = clock()
    base = wait_interval(outputs, access, interval_s)
    failures = 0
    while True:
        unreachable: dict[str, str] = {}
        records = collect_environments(outputs, access, raw_dir, unreachable.__setitem__)
        waiting = unfinished_steps(records) + [f"{name} (not reachable)" for name in unreachable]
        elapsed = clock() - start
        if not waiting or elapsed >= timeout_s:
            return waiting
        failures = failures + 1 if unreachable else 0
        delay = min(backoff_s(base, failures), max(timeout_s - elapsed, 0.0))
        print(
            f"compare {elapsed:5.0f}s waiting for {len(waiting)} step(s): {', '.join(waiting)}; "
            f"next look in {delay:.0f}s",
            flush=True,
        )
        sleep(delay)


def compare(
    outputs: StackOutputs | None,
    out: Path,
    access: Access | None = None,
    imports: Sequence[tuple[Path, str]] = (),
    cost_files: Sequence[Path] = (),
    cost_flags: Sequence[str] = (),
    rates: Path = RATES_FILE,
    import_gpus: int | None = None,
    estimates: Mapping[str, Any] | None = None,
) -> tuple[Report, WrittenReport]:
    """Collect, compute and write: the one call scripts/demo needs (`compare(outputs, Path(dir))`)."""
    profiles = load_cost_profiles(cost_files, cost_flags)
    rate_table = load_rate_table(rates)
    environments = collect_environments(outputs, access or Access(), out / "raw") if outputs else []
    for folder, name in imports:
        environments.append(import_folder(folder, name, import_gpus))
    run = {}
    if outputs is not None:
        run = {"stack": outputs.run.stack, "workload": outputs.run.workload, "run_id": outputs.run.run_id}
    if not run and environments and environments[0].run:
        run = dict(environments[0].run)  # an imported run alone: its own workload and run id
    report = build_report(environments, profiles, rate_table, run)
    if estimates:
        # The queue-wait estimate made before the run, beside the measured wait (scripts/nodes --estimate).
        report = dataclasses.replace(report, environments=with_estimates(report.environments, estimates, run))
    return report, write_report(report, out)


def print_summary(report: Report, where: str, console: Console | None = None) -> None:
    # A log or a pipe gets a wide table; a terminal gets its own width.
    console = console or Console(width=None if sys.stdout.isatty() else 140)
    for renderable in summary_renderables(report):
        console.print(renderable)
    console.print(f"Report: {where}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atlas compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_stack_arguments(p)
    p.add_argument(
        "--out", type=user_path, help="report folder (default <project>/reports/<stack>-<UTC timestamp>/)"
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="DIR[=NAME]",
        help="a past run: a device run's folder (atlas-run.json) or the seed's logs (sar -u, sar -r, "
        "nvidia-smi CSV); repeatable",
    )
    p.add_argument("--import-gpus", type=int, help="GPUs per nvidia-smi sample in imported logs (default 1)")
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                   help="first wait up to SECONDS for every step to finish (pulumi up waits for prep steps only)")
    p.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="with --wait: read the environments this often (default: the slowest site's poll_interval_seconds, "
        "60 where the stack says none)",
    )
    p.add_argument(
        "--cost-file",
        action="append",
        default=[],
        type=user_path,
        help="YAML/JSON {profile: {parameter: value}} overriding the cost model; repeatable",
    )
    p.add_argument(
        "--cost",
        action="append",
        default=[],
        metavar="PROFILE.PARAMETER=VALUE",
        help="one cost-model override, e.g. satori.utilization=0.7; repeatable",
    )
    p.add_argument("--rates", type=user_path, default=RATES_FILE, help="the dated rate table (default: %(default)s)")
    p.add_argument(
        "--estimates",
        type=user_path,
        help="queue-wait estimates from `scripts/nodes --estimate` (default <project>/.state/estimates/<stack>.json "
        "if present)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (args.stack or args.outputs or args.imports):
        parser().error("give -s STACK, --outputs FILE|-, or --import DIR")
    try:
        check_interval(args.interval)
        project = project_of(args)
        # The outputs first: a backend that cannot be reached is said once, by this read.
        raw = read_stack_outputs(args, project)
        stack = read_stack(args, project)
    except (UsageError, StackReadError) as error:
        print(f"compare: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as error:
        print(f"compare: --outputs {args.outputs}: cannot be read as `pulumi stack output --json` ({error})",
              file=sys.stderr)
        return 2
    if raw is not None and not raw.get("environments") and not args.imports:
        print(
            "compare: the stack outputs name no environment (is the stack deployed? `pulumi up` first)", file=sys.stderr
        )
        return 1
    try:
        outputs = typed_outputs(raw) if raw is not None and raw.get("environments") else None
    except OutputsError as error:
        print(f"compare: the stack outputs: {error}", file=sys.stderr)
        return 2
    access = stack.access
    imports = []
    for item in args.imports:
        folder, _, name = item.partition("=")
        imports.append((user_path(folder), name or f"seed-{Path(folder).name}"))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    label = args.stack or (outputs.run.stack if outputs else "") or "import"
    out = args.out or stack.home / "reports" / f"{label}-{stamp}"
    if args.wait and outputs:
        left = wait_until_finished(outputs, access, out / "raw", args.wait, args.interval)
        if left:
            print(f"compare: still unfinished after {args.wait:.0f}s: {', '.join(left)}; reporting as they are",
                  file=sys.stderr)
    estimates_path = args.estimates or (
        stack.home / ".state" / "estimates" / f"{args.stack}.json" if args.stack else None
    )
    estimates = None
    if estimates_path is not None and (args.estimates or estimates_path.is_file()):
        try:
            estimates = load_estimates(estimates_path)
        except ValueError as error:
            print(f"compare: {error}", file=sys.stderr)
            return 2
    try:
        report, written = compare(
            outputs, out, access, imports, args.cost_file, args.cost, args.rates, args.import_gpus, estimates
        )
    except (CostConfigError, FileNotFoundError) as error:
        print(f"compare: {error}", file=sys.stderr)
        return 2
    finally:
        ssh.close_all()
    print_summary(
        report, f"{written.html} (and report.md, report.json, {len(written.charts)} PNG charts in {written.folder})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
