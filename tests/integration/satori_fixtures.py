"""The local Satori as the HPC integration tests start it: one per module, on the module's own ports.

test_hpc.py, test_hpc_sweep.py and test_hpc_sweep_report.py each start their own Satori (state in a
temporary directory, ports from the module's PORT_BASE, so modules never share one) and reach it
as a stack's providers do; their `layout` and `target` fixtures call these.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra.hpc import providers, ssh
from localenv import satori
from localenv.layout import Layout, Ports
from localenv.procs import port_open


@contextmanager
def satori_layout(port_base: int, prefix: str) -> Iterator[Layout]:
    """A Satori up on ports from `port_base`, its state in a fresh /tmp/`prefix`* directory; on exit
    the pooled SSH connections closed, Satori down (its sshd port closed) and the state removed."""
    state = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    state.chmod(0o755)  # the login user reaches slurm.conf and the munge socket in here
    lay = Layout(state_dir=state, ports=Ports(port_base))
    satori.up(lay)
    yield lay
    try:
        ssh.close_all()
        satori.down(lay)
        assert not port_open(lay.ports.sshd)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def satori_target(layout: Layout) -> dict[str, Any]:
    """The providers' `ssh` and `ssh_secret` inputs for Satori's login user."""
    info = satori.status(layout)["ssh"]
    known_hosts = Path(info["known_hosts_file"])
    return {
        "ssh": providers.ssh_inputs(
            info["host"], info["port"], info["user"], known_hosts.read_text(), f"file {known_hosts}", None
        ),
        # As a stack passes it: the key's text from secret config, not a path.
        "ssh_secret": {"private_key": Path(info["key_file"]).read_text(), "passphrase": None},
    }


def run(target: dict[str, Any], command: str) -> ssh.RemoteResult:
    """`command` as the login user, its exit status and output returned, not raised."""
    return ssh.run_remote(ssh.connection(providers.endpoint_from(target)), command, check=False)
