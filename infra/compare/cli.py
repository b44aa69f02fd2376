"""scripts/compare: collect from every environment a stack's outputs name, compute, write the report.

    scripts/compare -s local                     # runs `pulumi stack output --json -s local`
    scripts/compare --outputs outputs.json       # or `-` for stdin
    scripts/compare -s local --import seed-logs/ # the seed's sar and nvidia-smi logs beside the new run
    scripts/compare --import seed-logs/          # only an imported run

Credentials for the HPC sides come from the stack's file (stacks/Pulumi.<stack>.yaml:
atlas:hpc.<env>.private_key_file / known_hosts_file) or from --ssh-key / --known-hosts; the
Kubernetes API from atlas:openshift.kubeconfig or --kubeconfig. Nothing secret is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import json
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.compare import aws_collector
from infra.compare.cost_files import RATES_FILE, load_cost_profiles, load_rate_table
from infra.compare.costs import CostConfigError
from infra.compare.device_run import import_device_run, is_device_run
from infra.compare.estimates import load_estimates, with_estimates
from infra.compare.hpc_collector import collect_hpc
from infra.compare.kube_collector import collect_kubernetes
from infra.compare.metrics import Report, build_report
from infra.compare.records import EnvironmentRecords, Missing, without_records
from infra.compare.remote_files import MonitorFiles, SftpFiles
from infra.compare.render import print_summary
from infra.compare.report import WrittenReport, write_report
from infra.compare.seed_import import import_seed_logs
from infra.hpc import ssh
from infra.kubeapi import KubeApi


@dataclass
class Access:
    """How to reach each environment: paths to keys and kubeconfigs, never their contents."""

    project_dir: Path = field(default_factory=Path.cwd)
    kubeconfig: Path | None = None
    ssh_keys: dict[str, Path] = field(default_factory=dict)
    known_hosts: dict[str, Path] = field(default_factory=dict)


def access_from_stack_file(path: Path, project_dir: Path) -> Access:
    config = (yaml.safe_load(path.read_text()) or {}).get("config", {})
    access = Access(project_dir=project_dir)

    def local(value: Any) -> Path | None:
        if not isinstance(value, str) or not value:
            return None
        candidate = Path(value).expanduser()
        return candidate if candidate.is_absolute() else project_dir / candidate

    access.kubeconfig = local((config.get("atlas:openshift") or {}).get("kubeconfig"))
    aws = config.get("atlas:aws")
    if isinstance(aws, dict) and (key := local(aws.get("ssh_private_key_file"))) is not None:
        access.ssh_keys["aws"] = key
    for name, section in (config.get("atlas:hpc") or {}).items():
        if isinstance(section, dict):
            if (key := local(section.get("private_key_file"))) is not None:
                access.ssh_keys[name] = key
            if (hosts := local(section.get("known_hosts_file"))) is not None:
                access.known_hosts[name] = hosts
    return access


def _hpc(name: str, outputs: Mapping[str, Any], access: Access, raw_dir: Path) -> EnvironmentRecords:
    key, hosts = access.ssh_keys.get(name), access.known_hosts.get(name)
    # An AWS instance's host key is public and in the outputs (Atlas generated it at launch).
    inline_hosts = str(outputs["known_hosts"]) + "\n" if outputs.get("known_hosts") and hosts is None else None
    if key is None or (hosts is None and inline_hosts is None):
        raise LookupError(
            f"no SSH key or known_hosts for {name!r}: pass --ssh-key {name}=PATH "
            f"--known-hosts {name}=PATH, or a stack file that names them"
        )
    endpoint = ssh.SshEndpoint(
        host=str(outputs["host"]),
        port=int(outputs["port"]),
        user=str(outputs["user"]),
        known_hosts=inline_hosts if inline_hosts is not None else hosts.read_text(),  # type: ignore[union-attr]
        known_hosts_source="the stack outputs' known_hosts" if inline_hosts is not None else f"file {hosts}",
        private_key_file=str(key),
    )
    connection = ssh.connection(endpoint)

    def runner(command: str) -> ssh.RemoteResult:
        return ssh.run_remote(connection, command, check=False, safe_to_retry=True, timeout=60)

    return collect_hpc(name, outputs, runner, SftpFiles(connection.sftp()), raw_dir)


def _unreachable(name: str, outputs: Mapping[str, Any], error: Exception) -> EnvironmentRecords:
    reason = f"not collected: {type(error).__name__}: {error}"
    return without_records(
        name,
        str(outputs.get("kind", "")),
        str(outputs.get("scheduler") or outputs.get("flavour")),
        reason,
        outputs,
        notes=(reason,),
        cost_profile={"hpc": "satori", "aws": ""}.get(str(outputs.get("kind")), "moc"),
        cloud_rate=aws_collector.cloud_rate_name(outputs) if outputs.get("kind") == "aws" else "",
    )


def collect_environments(
    outputs: Mapping[str, Any],
    access: Access,
    raw_dir: Path,
    kube_get: Callable[[str], Any] | None = None,
) -> list[EnvironmentRecords]:
    """Each environment of the stack outputs, from its own records; one that cannot be reached says why."""
    result = []
    for name, env in sorted((outputs.get("environments") or {}).items()):
        try:
            if env.get("kind") == "kubernetes":
                if kube_get is not None:
                    result.append(collect_kubernetes(name, env, kube_get))
                    continue
                if access.kubeconfig is None:
                    raise LookupError("no kubeconfig: pass --kubeconfig or a stack file naming one")
                api = KubeApi(access.kubeconfig, timeout_s=60.0)
                result.append(
                    collect_kubernetes(
                        name,
                        env,
                        api.get,
                        functools.partial(MonitorFiles, api.get, api.download),
                        raw_dir / name,
                    )
                )
            elif env.get("kind") == "hpc":
                result.append(_hpc(name, env, access, raw_dir / name))
            elif env.get("kind") == "aws" and not env.get("executed"):
                result.append(aws_collector.not_executed(name, env))
            elif env.get("kind") == "aws":
                result.append(aws_collector.as_aws(_hpc(name, env, access, raw_dir / name), env))
            else:
                result.append(_unreachable(name, env, ValueError(f"unknown kind {env.get('kind')!r}")))
        except (OSError, LookupError, ValueError, urllib.error.URLError, ssh.SshError) as error:
            result.append(_unreachable(name, env, error))
    return result


def unfinished_steps(environments: Sequence[EnvironmentRecords]) -> list[str]:
    """`env/step (state)` for every step whose record has no finish time yet."""
    waiting = []
    for env in environments:
        if isinstance(env.steps, Missing):
            continue
        waiting += [f"{env.name}/{s.step} ({s.state})" for s in env.steps if s.finished_at is None]
    return waiting


def wait_until_finished(
    outputs: Mapping[str, Any], access: Access, raw_dir: Path, timeout_s: float, interval_s: float = 5.0
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
    outputs: Mapping[str, Any] | None,
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
    run = {k: str(v) for k, v in ((outputs or {}).get("atlas") or {}).items() if k in ("stack", "workload", "run_id")}
    if not run and environments and environments[0].run:
        run = dict(environments[0].run)  # an imported run alone: its own workload and run id
    report = build_report(environments, profiles, rate_table, run)
    if estimates:
        # The queue-wait estimate made before the run, beside the measured wait (scripts/nodes --estimate).
        report = dataclasses.replace(report, environments=with_estimates(report.environments, estimates, run))
    return report, write_report(report, out)


def import_folder(folder: Path, name: str, gpus: int | None = None) -> EnvironmentRecords:
    """A past run from a folder: a device run (bench/biggan_h200.py, found by its atlas-run.json),
    else the seed's sar and nvidia-smi logs."""
    if is_device_run(folder):
        from infra.workload.load import load_workload

        # The differences from the full run are the workload's own overrides (workloads/<name>/).
        manifest = json.loads((folder / "atlas-run.json").read_text())
        definition = Path(__file__).resolve().parents[2] / "workloads" / str(manifest.get("workload")) / "workload.yaml"
        return import_device_run(folder, name, load_workload(definition) if definition.is_file() else None)
    return import_seed_logs(folder, name, gpus=gpus)


def _read_outputs(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.outputs == "-":
        return dict(json.load(sys.stdin))
    if args.outputs:
        return dict(json.loads(Path(args.outputs).read_text()))
    if args.stack:
        proc = subprocess.run(
            ["pulumi", "stack", "output", "--json", "-s", args.stack],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if proc.returncode != 0:
            raise SystemExit(f"compare: `pulumi stack output --json -s {args.stack}` failed: {proc.stderr.strip()}")
        return dict(json.loads(proc.stdout or "{}"))
    return None


def _pairs(values: Sequence[str], flag: str) -> dict[str, Path]:
    result = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            raise SystemExit(f"compare: {flag} {value!r}: expected ENVIRONMENT=PATH")
        result[name] = Path(path).expanduser()
    return result


def load_access(args: argparse.Namespace, project: Path) -> Access:
    """How to reach each environment: the stack's file (--stack-file, else stacks/Pulumi.<stack>.yaml),
    then --kubeconfig, --ssh-key and --known-hosts over it (scripts/compare, monitor and nodes alike)."""
    stack_file = args.stack_file or (project / "stacks" / f"Pulumi.{args.stack}.yaml" if args.stack else None)
    access = access_from_stack_file(stack_file, project) if stack_file and stack_file.is_file() else Access(project)
    if args.kubeconfig:
        access.kubeconfig = args.kubeconfig
    access.ssh_keys.update(_pairs(args.ssh_key, "--ssh-key"))
    access.known_hosts.update(_pairs(args.known_hosts, "--known-hosts"))
    return access


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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
    p.add_argument("--kubeconfig", type=Path)
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
    outputs = _read_outputs(args)
    if outputs is not None and not outputs.get("environments") and not args.imports:
        print(
            "compare: the stack outputs name no environment (is the stack deployed? `pulumi up` first)", file=sys.stderr
        )
        return 1
    project = Path.cwd()
    access = load_access(args, project)
    imports = []
    for item in args.imports:
        folder, _, name = item.partition("=")
        imports.append((Path(folder), name or f"seed-{Path(folder).name}"))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    label = args.stack or ((outputs or {}).get("atlas") or {}).get("stack") or "import"
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
