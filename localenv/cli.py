"""`scripts/localenv up|down|status [--json]`: the embedded local environment.

Kubernetes (etcd, API server, controller manager, scheduler, KWOK's simulated nodes), a real
node (containerd, kubelet, kube-proxy, kube-router's NetworkPolicy controller, mock GPUs, an image
registry), the local Satori (sshd
login node, Slurm, the LSF command set) and the local AWS (a moto server), all as processes on
this machine, with state in .state/localenv (or ATLAS_LOCALENV_DIR). The local site (the Satori
behind a bastion, the key in an agent: localenv/site.py) only with `--only site`; `down` of the
Satori stops it too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infra.toolchain.pins import REPO_ROOT
from localenv import kube, moto, netpol, node, records
from localenv.layout import Layout, default_layout
from localenv.procs import Daemon, LocalEnvError

PARTS = ("kube", "node", "satori", "aws")
# Started only when asked for by name: it adds a firewall rule, an account and a PAM service.
OPTIONAL_PARTS = ("site",)


def _sayer() -> Callable[[str], None]:
    start = time.monotonic()

    def say(line: str) -> None:
        print(f"localenv {time.monotonic() - start:6.1f}s {line}", flush=True)

    return say


def _satori() -> Any:
    from localenv import satori

    return satori


def _site() -> Any:
    from localenv import site

    return site


def running_daemons(layout: Layout) -> list[Daemon]:
    """Every daemon of this environment that runs now (every part records its pid in one folder)."""
    if not layout.pids_dir.is_dir():
        return []
    found = [Daemon(f.stem, layout.pids_dir, layout.logs_dir) for f in layout.pids_dir.glob("*.pid")]
    return [d for d in found if d.running()]


class UpFailed(Exception):
    """`up` failed and what it had started is stopped again; the message is one line."""


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "(no message)"
    return line.rstrip(":;,. ")


def up_or_roll_back(layout: Layout, parts: Sequence[str], settings: kube.KubeSettings) -> None:
    """`cmd_up`, and on any failure stop exactly the daemons this call started (newest first),
    keep the whole story in a log file, and raise UpFailed with one line that names what failed,
    what was stopped and what to do."""
    before = {d.name for d in running_daemons(layout)}
    try:
        cmd_up(layout, parts, settings)
    except (Exception, KeyboardInterrupt) as exc:  # reported in one line, logged whole
        started = [d for d in running_daemons(layout) if d.name not in before]
        started.sort(key=lambda d: d.pid_file.stat().st_mtime, reverse=True)
        stopped = [d.name for d in started if d.stop()]
        log = _failure_log(layout, exc, stopped)
        if isinstance(exc, LocalEnvError):
            what = _first_line(str(exc))
            hint = "fix that and run `scripts/localenv up` again"
        elif isinstance(exc, KeyboardInterrupt):
            what, hint = "interrupted", "run `scripts/localenv up` again"
        else:
            what = f"unexpected {type(exc).__name__}: {_first_line(str(exc))}"
            hint = "this is a bug in Atlas: please report it with that file"
        undone = f"stopped what it had started ({', '.join(stopped)})" if stopped else "it left nothing running"
        raise UpFailed(f"localenv up failed: {what}; {undone}; details in {log}; {hint}") from exc


def _failure_log(layout: Layout, exc: BaseException, stopped: Sequence[str]) -> Path:
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    path = layout.logs_dir / "localenv-up-failed.log"
    text = "".join(traceback.format_exception(exc))
    path.write_text(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n{text}\nstopped again: {', '.join(stopped) or 'none'}\n")
    return path


def observe_machine() -> tuple[list[records.Observed], records.Leftovers]:
    """Every recorded environment and the Atlas-named leftovers on this machine, as they are now."""
    observed = [records.Observed(r, tuple(sorted(d.name for d in running_daemons(r.layout()))), r.state_dir.is_dir())
                for r in records.read_records()]
    if os.geteuid() != 0:  # only root's environments change the host (bridges, cgroups, mounts)
        return observed, records.Leftovers()
    bridges: tuple[str, ...] = ()
    listed = subprocess.run(["ip", "-j", "link", "show", "type", "bridge"], capture_output=True, text=True, check=False)
    if listed.returncode == 0:
        bridges = records.atlas_bridges(json.loads(listed.stdout or "[]"))
    mountinfo = Path("/proc/self/mountinfo").read_text()
    return observed, records.Leftovers(bridges, node.cgroup_roots(), records.run_mounts(mountinfo),
                                       node.kube_proxy_owner_named(), netpol.owner_named())


def _pid_file_running(pid_file: Path) -> bool:
    return Daemon(pid_file.stem, pid_file.parent, pid_file.parent).running()


def clean_up_after_others(layout: Layout, say: Callable[[str], None]) -> None:
    """Before `up` starts anything: remove what environments stopped without `down` left on this
    machine, or refuse (nothing started) where one still runs in this one's way (localenv/records.py)."""
    observed, leftovers = observe_machine()
    plan = records.plan_cleanup(layout, observed, leftovers, records.running_ids(_pid_file_running))
    if plan.refusals:
        raise LocalEnvError("; ".join(plan.refusals))
    for note in plan.notes:
        say(f"note: {note}")
    for record in plan.abandoned:
        say(f"cleanup: the environment in {record.state_dir} stopped without `down` (none of its daemons runs): "
            "removing what it left")
        stop_recorded(record, lambda line: say(f"cleanup: {line}"))
    for bridge in plan.bridges:
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)
        say(f"cleanup: deleted bridge {bridge} and its routes (no running environment owns it)")
    for mount_point in plan.run_mounts:
        subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
        say(f"cleanup: unmounted {mount_point} (no running environment owns it)")
    for name in plan.cgroup_roots:
        node.remove_cgroup_tree(name)
        say(f"cleanup: removed cgroup /{name} (no running environment owns it)")
    if plan.kube_proxy_cleanup:
        node.cleanup_kube_proxy()
        say("cleanup: removed kube-proxy's iptables chains (its environment is gone)")
    if plan.kube_router_cleanup:
        removed = netpol.cleanup()
        say(f"cleanup: removed kube-router's {removed} iptables chain(s) and ipset(s) (its environment is gone)")


def stop_recorded(record: records.EnvRecord, say: Callable[[str], None]) -> None:
    """Stop every part of a recorded environment, its state folder there or not, then forget it.
    A part that cannot be stopped cleanly is said, and the others are still stopped."""
    layout = record.layout()
    for part in ("aws", "site", "satori", "node", "kube"):
        try:
            cmd_down(layout, [part], say=say)
        except LocalEnvError as exc:
            say(f"{part}: {exc}")
    forget_if_stopped(layout)


def forget_if_stopped(layout: Layout) -> bool:
    """Forget the environment's record (localenv/records.py) once none of its daemons runs: then
    nothing of it is left for a later `up` to clean. Whether it was forgotten."""
    if running_daemons(layout):
        return False
    shutil.rmtree(layout.record_dir, ignore_errors=True)
    return True


def cmd_up(layout: Layout, parts: Sequence[str], settings: kube.KubeSettings) -> None:
    say = _sayer()
    started = time.monotonic()
    clean_up_after_others(layout, say)
    records.write_record(layout, REPO_ROOT)
    if "kube" in parts:
        kube.up(layout, settings, say)
    if "node" in parts:
        if not kube.status(layout)["ready"]:
            raise LocalEnvError("the node joins the local cluster: start it first (`scripts/localenv up --only kube`)")
        node.up(layout, say)
    if "satori" in parts:
        say("satori: starting sshd, munge, Slurm and the LSF command set")
        _satori().up(layout)
    if "aws" in parts:
        say(f"aws: starting the moto server (AWS API stand-in) on {layout.moto_url}")
        moto.up(layout)
    if "site" in parts:
        say("site: starting the bastion, the login node behind it and the user's agent")
        _site().up(layout)
    say(f"up in {time.monotonic() - started:.1f}s; `scripts/localenv status --json` for endpoints")


def cmd_down(layout: Layout, parts: Sequence[str], say: Callable[[str], None] | None = None) -> None:
    say = say or _sayer()
    if "aws" in parts and moto.down(layout):
        say("aws: moto server stopped")
    # The site's login nodes front the Satori: they go first, and with it.
    if ("site" in parts or "satori" in parts) and _site().down(layout):
        say("site: stopped")
    if "satori" in parts:
        _satori().down(layout)
        say("satori: stopped")
    if "node" in parts:
        node.down(layout, say)
    if "kube" in parts:
        kube.down(layout, say)
    if set(PARTS) <= set(parts):
        forget_if_stopped(layout)
    say("down")


def cmd_list() -> None:
    """The environments recorded on this machine, running or not."""
    found = records.read_records()
    if not found:
        print("no local environment is recorded on this machine")
    for record in found:
        running = sorted(d.name for d in running_daemons(record.layout()))
        folder = "" if record.state_dir.is_dir() else "  (state folder gone)"
        state = f"running: {', '.join(running)}" if running else "stopped without `down`"
        print(f"{record.state_dir}  ports {record.port_base}+  pods {record.pod_cidr}  {state}{folder}")
        checkout = record.repo or "(not recorded)"
        print(f"  checkout {checkout}; stop: scripts/localenv down --state-dir {record.state_dir}")


def collect_status(layout: Layout, parts: Sequence[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"state_dir": str(layout.state_dir)}
    if "kube" in parts:
        result["kubernetes"] = kube.status(layout)
    if "node" in parts:
        result["node"] = node.status(layout)
    if "satori" in parts:
        result.update(_satori().status(layout))
    if "aws" in parts:
        result.update(moto.status(layout))
    if "site" in parts:
        result["site"] = _site().status(layout)
    return result


def _print_status(status: dict[str, Any]) -> None:
    kube_status = status.get("kubernetes")
    if kube_status:
        state = "ready" if kube_status["ready"] else "not ready"
        print(f"kubernetes  {state:10} {kube_status['api_url']}  kubeconfig={kube_status['kubeconfig']}")
        for name, running in kube_status["components"].items():
            print(f"  {name:24} {'running' if running else 'stopped'}")
    node_status = status.get("node")
    if node_status:
        state = "ready" if node_status["ready"] else "not ready"
        print(f"node        {state:10} {node_status['name']}  {node_status['gpus']} x nvidia.com/gpu "
              f"({node_status['gpus_provenance']})  pods {node_status['pod_cidr']}")
        for name, running in node_status["components"].items():
            print(f"  {name:24} {'running' if running else 'stopped'}")
        print(f"  kube-proxy: {node_status['kube_proxy']}; registry {node_status['registry']['url']}")
        print(f"  NetworkPolicy: {node_status['network_policy']}")
    ssh = status.get("ssh")
    if ssh:
        print(f"ssh         {ssh.get('user')}@{ssh.get('host')}:{ssh.get('port')}  key={ssh.get('key_file')}")
    for key in ("slurm", "lsf"):
        if key in status:
            print(f"{key:11} {json.dumps(status[key])}")
    aws = status.get("aws")
    if aws:
        print(f"aws         {'ready' if aws['ready'] else 'not ready':10} {aws['endpoint_url']}  (moto)")
    site = status.get("site")
    if site:
        state = "running" if site["running"] else "stopped"
        print(f"site        {state:10} {site['login']['alias']} via {site['bastion']['alias']}  "
              f"HOME={site['env']['HOME']} SSH_AUTH_SOCK={site['env']['SSH_AUTH_SOCK']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/localenv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start (idempotent)")
    up.add_argument("--pod-run-seconds", type=float, default=5.0,
                    help="how long a simulated Job pod runs before it succeeds (default 5)")
    up.add_argument("--gpu-nodes", type=int, default=4)
    up.add_argument("--cpu-nodes", type=int, default=2)
    down = sub.add_parser("down", help="stop everything `up` started")
    down.add_argument("--reset", action="store_true", help="also forget the cluster's data")
    down.add_argument("--state-dir", type=Path,
                      help="stop the environment recorded for this state folder (of any checkout, even one "
                           "deleted): `scripts/localenv list` shows them")
    sub.add_parser("list", help="the environments recorded on this machine, and how to stop each")
    st = sub.add_parser("status", help="what runs, and the endpoints")
    st.add_argument("--json", action="store_true")
    for p in (up, down, st):
        p.add_argument("--only", choices=PARTS + OPTIONAL_PARTS,
                       help="one part of the environment (the node needs kube, the site the satori)")
    args = parser.parse_args(argv)
    layout = default_layout()
    only = getattr(args, "only", None)
    parts = [only] if only else list(PARTS)
    try:
        if args.command == "up":
            if args.gpu_nodes < 0 or args.cpu_nodes < 0 or args.pod_run_seconds < 0:
                parser.error("--gpu-nodes, --cpu-nodes and --pod-run-seconds must not be negative")
            up_or_roll_back(layout, parts, kube.KubeSettings(args.pod_run_seconds, args.gpu_nodes, args.cpu_nodes))
        elif args.command == "down" and args.state_dir is not None:
            record = records.find_record(args.state_dir.resolve())
            if record is None:
                raise LocalEnvError(f"no environment is recorded for {args.state_dir.resolve()} on this machine: "
                                    "`scripts/localenv list` shows those that are")
            stop_recorded(record, _sayer())
        elif args.command == "down":
            cmd_down(layout, parts)
            if args.reset:
                kube.reset(layout)
        elif args.command == "list":
            cmd_list()
        else:
            status = collect_status(layout, parts)
            if args.json:
                print(json.dumps(status, indent=2))
            else:
                _print_status(status)
    except UpFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    except LocalEnvError as exc:
        print(f"localenv: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
