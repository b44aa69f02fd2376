"""`atlas monitor` (scripts/monitor): a live view of a stack's runs in every environment.

    scripts/monitor -s local                  # live terminal view (Ctrl-C ends it)
    scripts/monitor -s local --once --json    # one snapshot as JSON, for scripts
    scripts/monitor -s local --serve          # the same view as a web page on 127.0.0.1:8730
    scripts/monitor --outputs outputs.json    # or `-` for stdin (pulumi stack output --json)

Each scheduler is asked at most every `atlas:hpc.<name>.poll_interval_seconds` (60 s where the
stack says none; --interval for all), one batched status query and one node/queue query per
environment, less often while its site fails; the Kubernetes API is followed through watches.
Each environment is reached as the stack reaches it, as for scripts/compare (its config read
through pulumi, a key held as a Pulumi secret included; --ssh-key, --known-hosts, --kubeconfig,
--context override). Nothing is changed anywhere.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from infra.cli.common import (
    UsageError,
    add_source_arguments,
    check_interval,
    project_of,
    read_outputs,
    read_stack,
    workload_shape,
)
from infra.compare.access import Access
from infra.hpc import ssh
from infra.hpc.target import DEFAULT_POLL_INTERVAL_S
from infra.kinds import monitor_sources, poll_intervals
from infra.monitor.build import Monitor
from infra.monitor.estimate import JobShape
from infra.monitor.render import to_json
from infra.outputs import StackOutputs

DEFAULT_PORT = 8730


def build_monitor(
    outputs: StackOutputs, access: Access, interval_s: float | None, shape: JobShape | None, watch: bool
) -> Monitor:
    """A source for every environment the outputs name, as its kind reads it, each scheduler polled
    at `interval_s` or else its site's interval; with `watch`, Kubernetes watches start (else one
    listing, for a single snapshot)."""
    intervals = poll_intervals(outputs, access, interval_s)
    shown = min(intervals.values()) if intervals else interval_s if interval_s is not None else DEFAULT_POLL_INTERVAL_S
    monitor = Monitor(outputs.run, monitor_sources(outputs, access, interval_s), shape, shown)
    monitor.start(watch)
    return monitor


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atlas monitor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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
    try:
        interval = check_interval(args.interval)
        if args.json and not args.once:
            raise UsageError("--json: only with --once (the live view is a terminal or --serve)")
        if not 0 <= args.port <= 65535:
            raise UsageError(f"--port: {args.port} is not a port number")
        project = project_of(args)
        outputs = read_outputs(args, project)
        stack = read_stack(args, project)
        shape = workload_shape(args, outputs.run, stack.home)
    except UsageError as error:
        print(f"monitor: {error}", file=sys.stderr)
        return 2
    monitor = build_monitor(outputs, stack.access, interval, shape, watch=not args.once)
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
            return _serve(monitor, args.host, args.port, monitor.interval_s)
        return _live(monitor)
    except KeyboardInterrupt:
        return 130
    finally:
        monitor.close()
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
