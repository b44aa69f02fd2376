"""scripts/monitor: a live view of a stack's runs in every environment.

    scripts/monitor -s local                  # live terminal view (Ctrl-C ends it)
    scripts/monitor -s local --once --json    # one snapshot as JSON, for scripts
    scripts/monitor -s local --serve          # the same view as a web page on 127.0.0.1:8730
    scripts/monitor --outputs outputs.json    # or `-` for stdin (pulumi stack output --json)

Schedulers are asked at most every --interval seconds (default 30), one batched status query
and one node/queue query per environment; the Kubernetes API is followed through watches.
Credentials come from the stack's file, as for scripts/compare (--ssh-key, --known-hosts,
--kubeconfig override it). Nothing is changed anywhere.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.compare.access import Access
from infra.compare.stack_files import load_access, read_stack_outputs
from infra.hpc import ssh
from infra.monitor.build import Monitor
from infra.monitor.hpc import HpcSource
from infra.monitor.kube import KubeCache, KubeClient
from infra.monitor.render import to_json
from infra.nodes.estimate import JobShape, shape_of_workload
from infra.workload.load import load_workload
from infra.workload.model import WorkloadError

DEFAULT_INTERVAL_S = 30.0
MIN_INTERVAL_S = 1.0
DEFAULT_PORT = 8730


class UsageError(Exception):
    """A flag's value is wrong; the message names the flag."""


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that say which stack and how to reach it (shared with scripts/nodes)."""
    p.add_argument("-s", "--stack", help="read `pulumi stack output --json -s STACK` (and stacks/Pulumi.STACK.yaml)")
    p.add_argument("--outputs", help="a file with `pulumi stack output --json`, or - for stdin")
    p.add_argument("--stack-file", type=Path, help="where SSH keys and the kubeconfig are named")
    p.add_argument("--kubeconfig", type=Path)
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


def read_outputs(args: argparse.Namespace) -> dict[str, Any]:
    if not (args.stack or args.outputs):
        raise UsageError("give -s STACK or --outputs FILE|-")
    try:
        outputs = read_stack_outputs(args)
    except (OSError, ValueError) as error:
        what = "cannot be read as `pulumi stack output --json`"
        raise UsageError(f"--outputs {args.outputs}: {what} ({error})") from None
    if not outputs or not outputs.get("environments"):
        raise UsageError("the stack outputs name no environment (is the stack deployed? `pulumi up` first)")
    return outputs


def hpc_runner(name: str, env: Mapping[str, Any], access: Access) -> ssh.PooledConnection:
    key, hosts = access.ssh_keys.get(name), access.known_hosts.get(name)
    if key is None or hosts is None:
        raise LookupError(
            f"no SSH key or known_hosts for {name!r}: pass --ssh-key {name}=PATH --known-hosts {name}=PATH, "
            "or a stack file that names them"
        )
    endpoint = ssh.SshEndpoint(
        host=str(env["host"]),
        port=int(env["port"]),
        user=str(env["user"]),
        known_hosts=hosts.read_text(),
        known_hosts_source=f"file {hosts}",
        private_key_file=str(key),
    )
    return ssh.connection(endpoint)


def build_monitor(
    outputs: Mapping[str, Any], access: Access, interval_s: float, shape: JobShape | None, watch: bool
) -> Monitor:
    """Sources for every environment the outputs name; with `watch`, Kubernetes watches start."""
    kube: KubeCache | None = None
    hpc: dict[str, HpcSource] = {}
    for name, env in sorted((outputs.get("environments") or {}).items()):
        if env.get("kind") == "kubernetes" and kube is None and access.kubeconfig is not None:
            kube = KubeCache(KubeClient(access.kubeconfig), str(env.get("namespace", "")))
            if watch:
                kube.start()
            else:
                kube.list_all()
        elif env.get("kind") == "hpc":
            try:
                connection = hpc_runner(name, env, access)
            except (LookupError, OSError) as error:
                print(f"monitor: {name}: {error}", file=sys.stderr)
                continue

            def runner(command: str, connection: ssh.PooledConnection = connection) -> ssh.RemoteResult:
                return ssh.run_remote(connection, command, check=False, safe_to_retry=True, timeout=60)

            hpc[name] = HpcSource(name, env, runner, interval_s)
    return Monitor(outputs, kube, hpc, shape, interval_s)


def workload_shape(args: argparse.Namespace, outputs: Mapping[str, Any], project: Path) -> JobShape | None:
    atlas = outputs.get("atlas") or {}
    # The definition the stack ran (outputs name its path), else a shipped workload of that name.
    workload = str(atlas.get("workload", ""))
    path = args.workload_file or (
        Path(atlas["definition"]) if atlas.get("definition") else project / "workloads" / workload / "workload.yaml"
    )
    if not path.is_file():
        return None
    try:
        return shape_of_workload(load_workload(path))
    except WorkloadError as error:
        raise UsageError(f"--workload-file {path}: {error}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/monitor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_source_arguments(p)
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="with --once: the snapshot as JSON")
    p.add_argument("--serve", action="store_true", help="serve the view as a web page with JSON behind it")
    p.add_argument("--host", default="127.0.0.1", help="with --serve: address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="with --serve: port (default %(default)s; 0: any)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    project = Path.cwd()
    try:
        interval = check_interval(args.interval)
        if args.json and not args.once:
            raise UsageError("--json: only with --once (the live view is a terminal or --serve)")
        if not 0 <= args.port <= 65535:
            raise UsageError(f"--port: {args.port} is not a port number")
        outputs = read_outputs(args)
        access = load_access(args, project)
        shape = workload_shape(args, outputs, project)
    except UsageError as error:
        print(f"monitor: {error}", file=sys.stderr)
        return 2
    monitor = build_monitor(outputs, access, interval, shape, watch=not args.once)
    try:
        if args.once:
            snapshot = monitor.snapshot()
            if args.json:
                print(to_json(snapshot))
            else:
                from rich.console import Console

                from infra.monitor.render import terminal_view

                Console().print(terminal_view(snapshot))
            return 0
        if args.serve:
            return _serve(monitor, args.host, args.port, interval)
        return _live(monitor)
    except KeyboardInterrupt:
        return 130
    finally:
        if monitor.kube is not None:
            monitor.kube.stop()
        ssh.close_all()


def _live(monitor: Monitor) -> int:
    from rich.console import Console
    from rich.live import Live

    from infra.monitor.render import terminal_view

    console = Console()
    with Live(terminal_view(monitor.snapshot()), console=console, refresh_per_second=1, screen=False) as live:
        while True:
            time.sleep(1.0)  # redraw each second (elapsed times move); sources keep their own pace
            live.update(terminal_view(monitor.snapshot()))


def _serve(monitor: Monitor, host: str, port: int, interval: float) -> int:
    from infra.monitor.serve import make_server

    server = make_server(monitor.snapshot, host, port, refresh_s=min(interval, 10.0))
    address, bound = server.server_address[:2]
    print(f"monitor: serving http://{address!s}:{bound}/ (JSON at /snapshot.json); Ctrl-C ends it", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
