"""The local AWS: a moto server on loopback, standing in for AWS's API.

Every boto3 call of infra/aws is a real HTTP call to it, so the local `hybrid` stack creates,
reads and deletes buckets, roles, key pairs, security groups and instances for real. Moto's
instances run nothing: the stack says so (`executed: false`) rather than inventing numbers.

moto keeps everything in memory: `down` forgets every AWS object, as a fresh account would.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from typing import Any

from infra.toolchain.pins import REPO_ROOT
from localenv import records
from localenv.layout import LOOPBACK, Layout
from localenv.procs import Daemon, port_open, require_free_ports, wait_for


def daemon(layout: Layout) -> Daemon:
    return Daemon("moto", layout.pids_dir, layout.logs_dir)


def _answers(layout: Layout) -> bool:
    # S3's ListBuckets, which moto's server answers at its root: cheap (its /moto-api/data.json
    # dumps the whole in-memory account, seconds with the built-in AMIs), and it proves S3 answers.
    try:
        with urllib.request.urlopen(f"{layout.moto_url}/", timeout=5) as response:  # noqa: S310
            return response.status == 200 and b"ListAllMyBucketsResult" in response.read()
    except (OSError, urllib.error.URLError):
        return False


def up(layout: Layout) -> dict[str, Any]:
    """Start the moto server (idempotent) and wait until it answers."""
    records.write_record(layout, REPO_ROOT)  # before any daemon: findable even if its folder goes
    server = daemon(layout)
    if not server.running():
        require_free_ports({"moto": layout.ports.moto})
        # The venv's own Python: moto[server] is a dependency of the project.
        server.start([sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(layout.ports.moto)])
    wait_for(lambda: _answers(layout), "the moto server", 60, server)
    return status(layout)


def down(layout: Layout) -> bool:
    """Stop the server `up` started (only that pid); True if one was running."""
    return daemon(layout).stop()


def status(layout: Layout) -> dict[str, Any]:
    server = daemon(layout)
    running = server.running()
    return {
        "aws": {
            "running": running,
            "endpoint_url": layout.moto_url,
            "port": layout.ports.moto,
            "pid": server.pid(),
            "log": str(server.log_file),
            "ready": running and port_open(layout.ports.moto) and _answers(layout),
        }
    }

