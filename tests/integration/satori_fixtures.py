"""The local Satori as the HPC integration tests start it: one per module, on the module's own ports.

test_hpc.py, test_hpc_sweep.py and test_hpc_sweep_report.py each start their own Satori (state in a
temporary directory, ports from the module's PORT_BASE, so modules never share one) and reach it
as a stack's providers do; their `layout` and `target` fixtures call these. The sweep modules stage
a swept step and make its SweepJob's inputs with `staged_sweep`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra.hpc import providers, ssh
from infra.hpc.job_script import SubmissionKey, sweep_scripts
from infra.hpc.pipeline import _chunk_entries, sweep_files
from infra.hpc.providers import StagedFilesProvider
from infra.hpc.registry import scheduler_for
from infra.workload.model import Workload
from localenv import satori
from localenv.layout import Layout, Ports
from localenv.procs import port_open

POLL_S = 1.0


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


def staged_sweep(
    target: dict[str, Any], scheduler: str, workload: Workload, key: SubmissionKey, body: str, array_limit: int
) -> dict[str, Any]:
    """Stage `workload`'s swept step `train` in `key.run_dir` as StagedFiles does in a stack (its
    table, its chunk scripts split at `array_limit`, and `point.sh`, each point's `body`) and return
    its SweepJob inputs (logs under logs/, queue normal, nothing waited for)."""
    sched = scheduler_for(scheduler)
    sweep = sweep_scripts(workload, sched, key, "normal", telemetry=False, array_limit=array_limit)["train"]
    files = [{"path": s.path, "content": s.script, "sha256": s.sha256} for s in sweep_files({"train": sweep}).values()]
    files.append({"path": sweep.table_path, "content": sweep.table, "sha256": ssh.sha256_hex(sweep.table.encode())})
    files.append({"path": "point.sh", "content": body, "sha256": ssh.sha256_hex(body.encode())})
    StagedFilesProvider().create({**target, "run_dir": key.run_dir, "files": files, "directories": ["logs"]})
    return {
        **target,
        "provider_version": providers.PROVIDER_VERSION,
        "scheduler": scheduler,
        "scheduler_options": {},
        "step": "train",
        "run_dir": key.run_dir,
        "table_path": sweep.table_path,
        "table_sha256": ssh.sha256_hex(sweep.table.encode()),
        "chunks": _chunk_entries(sweep),
        "log_pattern": f"logs/train.{sched.array_log_placeholder}",
        "requested_queue": "normal",
        "after_job_ids": [],
        "after_definitions": [],
        "poll_interval_s": POLL_S,
    }
