"""`atlas compare` (scripts/compare): collect from every environment a stack's outputs name, compute, write the report.

    scripts/compare -s local                     # runs `pulumi stack output --json -s local`
    scripts/compare --outputs outputs.json       # or `-` for stdin
    scripts/compare -s local --import seed-logs/ # the seed's sar and nvidia-smi logs beside the new run
    scripts/compare --import seed-logs/          # only an imported run

Credentials for the HPC sides come from the stack's file (stacks/Pulumi.<stack>.yaml:
atlas:hpc.<env>.private_key_file / known_hosts_file) or from --ssh-key / --known-hosts; the
Kubernetes API as the stack program reaches it: atlas:openshift.kubeconfig or --kubeconfig, else
KUBECONFIG (merged), else ~/.kube/config, with atlas:openshift.context or --context, else the
current context. Credentials the API refuses end the command in one line saying how to log in
again. Nothing secret is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from infra.cli.stack_files import load_access, read_stack_outputs
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
from infra.kinds import collect_environments
from infra.kinds import read_stack_outputs as typed_outputs
from infra.outputs import OutputsError, StackOutputs


def wait_until_finished(
    outputs: StackOutputs, access: Access, raw_dir: Path, timeout_s: float, interval_s: float = 5.0
) -> list[str]:
    """`pulumi up` waits for the preparation steps only: poll every environment's own records
    (batched, at most every `interval_s`) until every step has finished or `timeout_s` passed.
    Returns the steps still unfinished (empty when all finished)."""
    start = time.monotonic()
    while True:
        waiting = unfinished_steps(collect_environments(outputs, access, raw_dir))
        elapsed = time.monotonic() - start
        if not waiting or elapsed >= timeout_s:
            return waiting
        print(f"compare {elapsed:5.0f}s waiting for {len(waiting)} step(s): {', '.join(waiting)}", flush=True)
        time.sleep(interval_s)


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
    p.add_argument("-s", "--stack", help="read `pulumi stack output --json -s STACK` (and stacks/Pulumi.STACK.yaml)")
    p.add_argument("--outputs", help="a file with `pulumi stack output --json`, or - for stdin")
    p.add_argument("--out", type=Path, help="report folder (default reports/<stack>-<UTC timestamp>/)")
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
    p.add_argument(
        "--stack-file",
        type=Path,
        help="where SSH keys and the kubeconfig are named (default stacks/Pulumi.<stack>.yaml)",
    )
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                   help="first wait up to SECONDS for every step to finish (pulumi up waits for prep steps only)")
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
        "--cost-file",
        action="append",
        default=[],
        type=Path,
        help="YAML/JSON {profile: {parameter: value}} overriding the cost model; repeatable",
    )
    p.add_argument(
        "--cost",
        action="append",
        default=[],
        metavar="PROFILE.PARAMETER=VALUE",
        help="one cost-model override, e.g. satori.utilization=0.7; repeatable",
    )
    p.add_argument("--rates", type=Path, default=RATES_FILE, help="the dated rate table (default: %(default)s)")
    p.add_argument(
        "--estimates",
        type=Path,
        help="queue-wait estimates from `scripts/nodes --estimate` (default .state/estimates/<stack>.json if present)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (args.stack or args.outputs or args.imports):
        parser().error("give -s STACK, --outputs FILE|-, or --import DIR")
    raw = read_stack_outputs(args)
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
    project = Path.cwd()
    access = load_access(args, project)
    imports = []
    for item in args.imports:
        folder, _, name = item.partition("=")
        imports.append((Path(folder), name or f"seed-{Path(folder).name}"))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    label = args.stack or (outputs.run.stack if outputs else "") or "import"
    out = args.out or project / "reports" / f"{label}-{stamp}"
    if args.wait and outputs:
        left = wait_until_finished(outputs, access, out / "raw", args.wait)
        if left:
            print(f"compare: still unfinished after {args.wait:.0f}s: {', '.join(left)}; reporting as they are",
                  file=sys.stderr)
    estimates_path = args.estimates or (project / ".state" / "estimates" / f"{args.stack}.json" if args.stack else None)
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
