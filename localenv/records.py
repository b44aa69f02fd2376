"""Every local environment on this machine, recorded outside its checkout, and what an
environment whose owner is gone left behind.

Seen here: an environment whose state folder was deleted while it ran (its processes then
killed) left its CNI bridge holding the same pod subnet as the next environment's; the host's
route went to the dead bridge and every probe of the next one failed. So `up` writes a record
under `/run/atlas/envs/<id>/` (localenv/layout.py: RECORDS_ROOT, beside the pid files), and
before it starts anything reads every other record:

- an environment none of whose daemons runs is abandoned: `up` removes what it left (bridge and
  its routes, kube-proxy's iptables chains, kube-router's chains and ipsets, the local site's
  firewall rules and keys, mounts, cgroups, leftover container shims) with `down`'s own code, then its record;
- one that still runs but whose state folder is gone, or that holds this environment's ports or
  pod subnet, is refused by name, with the command that stops it from any checkout:
  `scripts/localenv down --state-dir <its folder>`;
- Atlas-named leftovers no record accounts for (an `atl*` bridge, an `atlas-<id>` cgroup, a
  mount under `/run/atlas/<id>`) are removed by their name prefix.

The decisions are pure functions of what was read (`plan_cleanup`), tested table-driven; `up`
and `down` carry them out.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localenv.layout import Layout, Ports, environment_id, records_root

RECORD_FILE = "env.json"
BRIDGE_PREFIX = "atl"
CGROUP_PREFIX = "atlas-"
RUN_ROOT = Path("/run/atlas")
_ID = re.compile(r"^[0-9a-f]{8}$")


def pod_cidr_of(port_base: int) -> ipaddress.IPv4Network:
    """The node's pod subnet for a port base (localenv/node_config.py: Network.of uses this)."""
    return ipaddress.IPv4Network(f"10.201.{(port_base // 100) % 256}.0/24")


@dataclass(frozen=True)
class EnvRecord:
    """What is needed to find and stop an environment without its state folder."""

    state_dir: Path
    port_base: int
    repo: str
    created: str

    @property
    def id(self) -> str:
        return environment_id(self.state_dir)

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.id}"

    @property
    def pod_cidr(self) -> ipaddress.IPv4Network:
        return pod_cidr_of(self.port_base)

    def layout(self) -> Layout:
        return Layout(state_dir=self.state_dir, ports=Ports(self.port_base))

    def to_json(self) -> dict[str, Any]:
        return {"state_dir": str(self.state_dir), "port_base": self.port_base, "repo": self.repo,
                "created": self.created}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvRecord:
        return cls(Path(str(data["state_dir"])), int(data["port_base"]), str(data.get("repo", "")),
                   str(data.get("created", "")))


def record_of(layout: Layout, repo: Path) -> EnvRecord:
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return EnvRecord(layout.state_dir, layout.ports.base, str(repo), created)


def write_record(layout: Layout, repo: Path) -> EnvRecord:
    """Record this environment (once; a later `up` keeps the first record's creation time)."""
    path = layout.record_dir / RECORD_FILE
    if path.exists():
        existing = read_record(path)
        if existing is not None and existing.port_base == layout.ports.base:
            return existing
    record = record_of(layout, repo)
    layout.record_dir.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    temporary.replace(path)
    return record


def read_record(path: Path) -> EnvRecord | None:
    try:
        return EnvRecord.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_ids(running: Callable[[Path], bool], root: Path | None = None) -> frozenset[str]:
    """The ids of the environments with a pid file whose process runs (`running(pid_file)`),
    whether or not they have a record."""
    folder = root or records_root()
    if not folder.is_dir():
        return frozenset()
    return frozenset(d.name for d in folder.iterdir()
                     if _ID.match(d.name) and any(running(f) for f in (d / "pids").glob("*.pid")))


def read_records(root: Path | None = None) -> list[EnvRecord]:
    """Every environment recorded on this machine (unreadable records are skipped)."""
    folder = root or records_root()
    if not folder.is_dir():
        return []
    found = (read_record(d / RECORD_FILE) for d in sorted(folder.iterdir()) if d.is_dir())
    return [r for r in found if r is not None]


def find_record(state_dir: Path, root: Path | None = None) -> EnvRecord | None:
    folder = (root or records_root()) / environment_id(state_dir)
    return read_record(folder / RECORD_FILE)


@dataclass(frozen=True)
class Observed:
    """One recorded environment as this machine shows it now."""

    record: EnvRecord
    running: tuple[str, ...]  # its daemons that run
    state_dir_exists: bool


@dataclass(frozen=True)
class Leftovers:
    """Atlas-named things on this machine, as listed by `ip`, the cgroup hierarchies and mountinfo."""

    bridges: tuple[str, ...] = ()
    cgroup_roots: tuple[str, ...] = ()  # "atlas-<id>" folder names
    run_mounts: tuple[str, ...] = ()  # mount points under /run/atlas/<id>/
    kube_proxy_owner: Path | None = None  # the state folder named in the owner file, if any
    kube_router_owner: Path | None = None  # the same for kube-router (localenv/netpol.py)


@dataclass(frozen=True)
class CleanupPlan:
    abandoned: tuple[EnvRecord, ...] = ()  # stopped with `down`'s code, then their records removed
    refusals: tuple[str, ...] = ()  # one message each; `up` stops before starting anything
    bridges: tuple[str, ...] = ()  # deleted (with their routes)
    cgroup_roots: tuple[str, ...] = ()
    run_mounts: tuple[str, ...] = ()
    kube_proxy_cleanup: bool = False  # the owner's environment is gone: remove its chains
    kube_router_cleanup: bool = False  # the same for kube-router's chains and ipsets
    notes: tuple[str, ...] = field(default=())


def _down_command(record: EnvRecord) -> str:
    return f"scripts/localenv down --state-dir {record.state_dir}"


def plan_cleanup(own: Layout, observed: Iterable[Observed], leftovers: Leftovers,
                 running_ids: Iterable[str] = ()) -> CleanupPlan:
    """What `up` of `own` removes or refuses, from what was observed (pure). `running_ids`: the
    environments with a daemon running by their pid files, recorded or not (one whose record is
    not written yet, or lost); their bridges, cgroups and mounts are never touched."""
    own_cidr = pod_cidr_of(own.ports.base)
    own_ports = set(own.ports.all().values())
    abandoned: list[EnvRecord] = []
    refusals: list[str] = []
    notes: list[str] = []
    live_ids = {own.id, *running_ids}
    for seen in observed:
        record = seen.record
        if record.id == own.id:
            continue
        if not seen.running:
            abandoned.append(record)
            continue
        live_ids.add(record.id)
        clashes = []
        if record.pod_cidr == own_cidr:
            clashes.append(f"the pod subnet {own_cidr}")
        shared_ports = own_ports & set(record.layout().ports.all().values())
        if shared_ports:
            clashes.append(f"{len(shared_ports)} of this environment's ports")
        missing = "" if seen.state_dir_exists else " (its state folder is gone)"
        if clashes:
            refusals.append(
                f"the environment in {record.state_dir}{missing} still runs ({', '.join(seen.running)}) and holds "
                f"{' and '.join(clashes)}: stop it with `{_down_command(record)}` (from any checkout), or move this "
                f"one with ATLAS_LOCALENV_PORT_BASE")
        elif not seen.state_dir_exists:
            notes.append(f"the environment in {record.state_dir} still runs but its state folder is gone; "
                         f"stop it with `{_down_command(record)}`")
    abandoned_ids = {r.id for r in abandoned}
    # Leftovers by name: those of live environments stay; an abandoned record's own are removed
    # by its `down` (listed again here, deleting twice is harmless but says it twice: skip them).
    keep = live_ids | abandoned_ids
    bridges = tuple(b for b in leftovers.bridges if _id_after(b, BRIDGE_PREFIX) not in keep | {None})
    cgroups = tuple(c for c in leftovers.cgroup_roots if _id_after(c, CGROUP_PREFIX) not in keep | {None})
    mounts = tuple(m for m in leftovers.run_mounts if _run_id(m) not in keep)
    return CleanupPlan(tuple(abandoned), tuple(refusals), bridges, cgroups, mounts,
                       kube_proxy_cleanup=_owner_gone(leftovers.kube_proxy_owner, live_ids, abandoned_ids),
                       kube_router_cleanup=_owner_gone(leftovers.kube_router_owner, live_ids, abandoned_ids),
                       notes=tuple(notes))


def _owner_gone(owner: Path | None, live_ids: set[str], abandoned_ids: set[str]) -> bool:
    """Whether a machine-wide daemon's owner file names an environment that is neither live nor
    abandoned (an abandoned one's `down` removes its chains itself)."""
    return owner is not None and environment_id(owner) not in live_ids | abandoned_ids


def _id_after(name: str, prefix: str) -> str | None:
    """The environment id in `name` (`prefix` + 8 hex digits), or None if it is not one of Atlas's."""
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return rest if _ID.match(rest) else None


def _run_id(mount_point: str) -> str | None:
    """The environment id of a mount point under /run/atlas/<id>/ (None for anything else)."""
    parts = Path(mount_point).parts
    root = RUN_ROOT.parts
    if len(parts) <= len(root) or parts[:len(root)] != root:
        return None
    candidate = parts[len(root)]
    return candidate if _ID.match(candidate) else None


def run_mounts(mountinfo: str) -> tuple[str, ...]:
    """Mount points under /run/atlas/<id>/ in /proc/self/mountinfo's text, deepest first."""
    points = [line.split()[4] for line in mountinfo.splitlines() if len(line.split()) > 4]
    return tuple(sorted((p for p in points if _run_id(p) is not None), key=len, reverse=True))


def atlas_bridges(ip_link_json: list[dict[str, Any]]) -> tuple[str, ...]:
    """Bridges named like Atlas's (`atl` + an 8-hex-digit id) from `ip -j link show type bridge`."""
    names = (str(link.get("ifname", "")) for link in ip_link_json)
    return tuple(n for n in names if _id_after(n, BRIDGE_PREFIX) is not None)
