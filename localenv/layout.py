"""Where the local environment keeps its state, and which loopback ports it uses.

One object, so `scripts/localenv`, the tests and the `local` stack agree on paths.
Ports can be moved as a block with ATLAS_LOCALENV_PORT_BASE (default 16000) when
something else on the machine already uses them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from infra.toolchain.pins import REPO_ROOT

LOOPBACK = "127.0.0.1"
# Where every environment on this machine keeps what must outlive its state folder: its record
# (localenv/records.py) and its daemons' pid files. Outside the checkout on purpose: an
# environment whose folder was deleted while it ran can still be found, stopped and cleaned up
# by `scripts/localenv down --state-dir` or the next `up` of any checkout. /run is emptied at
# boot, with the processes and interfaces the records describe.
RECORDS_ROOT = Path("/run/atlas/envs")


def records_root() -> Path:
    """RECORDS_ROOT for root (every part that changes the host runs as root); a folder of the
    user's own otherwise (a kube-only environment needs no root); ATLAS_LOCALENV_RECORDS moves it
    (the unit tests' own folder)."""
    if os.environ.get("ATLAS_LOCALENV_RECORDS"):
        return Path(os.environ["ATLAS_LOCALENV_RECORDS"])
    if os.geteuid() == 0:
        return RECORDS_ROOT
    return Path.home() / ".local" / "state" / "atlas" / "envs"


def environment_id(state_dir: Path) -> str:
    """A short, stable name for the environment in `state_dir` (its bridge, cgroup and records use it)."""
    return hashlib.sha256(str(state_dir).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Ports:
    base: int

    @property
    def etcd_client(self) -> int:
        return self.base + 379

    @property
    def etcd_peer(self) -> int:
        return self.base + 380

    @property
    def apiserver(self) -> int:
        return self.base + 443

    @property
    def controller_manager(self) -> int:
        return self.base + 257

    @property
    def scheduler(self) -> int:
        return self.base + 259

    @property
    def kwok(self) -> int:
        return self.base + 247

    @property
    def sshd(self) -> int:
        return self.base + 22

    @property
    def bastion(self) -> int:
        """The local site's bastion (localenv/site.py): the one way in to its login nodes."""
        return self.base + 24

    @property
    def site_login(self) -> int:
        """The local site's login node (the Satori's, reached through the bastion only)."""
        return self.base + 25

    @property
    def site_login_mfa(self) -> int:
        """The same login node asking a second factor after the key (keyboard-interactive)."""
        return self.base + 26

    @property
    def slurmctld(self) -> int:
        return self.base + 817

    @property
    def slurmd(self) -> int:
        return self.base + 818

    @property
    def moto(self) -> int:
        """The AWS API stand-in (moto server)."""
        return self.base + 500

    @property
    def registry(self) -> int:
        """The image registry (distribution) the local node pulls from."""
        return self.base + 510

    @property
    def git(self) -> int:
        """git daemon serving this repository to the BuildConfig runner (git://)."""
        return self.base + 418

    @property
    def dead_api(self) -> int:
        """Nothing listens here: the dead server of the local user's old kubeconfig context (localenv/kube_user.py)."""
        return self.base + 441

    @property
    def kubelet(self) -> int:
        return self.base + 250

    @property
    def kubelet_healthz(self) -> int:
        return self.base + 248

    @property
    def kube_proxy_healthz(self) -> int:
        return self.base + 249

    @property
    def kube_proxy_metrics(self) -> int:
        return self.base + 256

    def all(self) -> dict[str, int]:
        """Every port above, by its property's name, in the order they are listed."""
        return {name: getattr(self, name) for name, attr in vars(Ports).items() if isinstance(attr, property)}


@dataclass(frozen=True)
class Layout:
    state_dir: Path
    ports: Ports

    @property
    def kube_dir(self) -> Path:
        return self.state_dir / "kube"

    @property
    def kubeconfig(self) -> Path:
        return self.kube_dir / "kubeconfig"

    @property
    def satori_dir(self) -> Path:
        return self.state_dir / "satori"

    @property
    def site_dir(self) -> Path:
        return self.state_dir / "site"

    @property
    def moto_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.moto}"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def id(self) -> str:
        return environment_id(self.state_dir)

    @property
    def record_dir(self) -> Path:
        """This environment's record and pid files, outside its state folder (see RECORDS_ROOT)."""
        return records_root() / self.id

    @property
    def pids_dir(self) -> Path:
        return self.record_dir / "pids"

    @property
    def api_url(self) -> str:
        return f"https://{LOOPBACK}:{self.ports.apiserver}"


def default_layout() -> Layout:
    state = Path(os.environ.get("ATLAS_LOCALENV_DIR") or REPO_ROOT / ".state" / "localenv")
    base = int(os.environ.get("ATLAS_LOCALENV_PORT_BASE", "16000"))
    return Layout(state_dir=state.resolve(), ports=Ports(base))
