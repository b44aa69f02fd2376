"""A `localenv up` that fails half-way stops exactly what it started and says so in one line
(what failed, what was stopped, where the details are, what to do), never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.toolchain.pins import REPO_ROOT
from localenv import kube
from localenv.cli import running_daemons
from localenv.layout import Layout, Ports
from localenv.pki import ensure_pki
from localenv.procs import port_open, wait_for

pytestmark = pytest.mark.integration
PORT_BASE = 18700


def localenv(layout: Layout, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATLAS_LOCALENV_DIR": str(layout.state_dir), "ATLAS_LOCALENV_PORT_BASE": str(PORT_BASE)}
    return subprocess.run([sys.executable, "-m", "localenv.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_failed_up_stops_what_it_started_and_says_so_in_one_line(tmp_path: Path):
    layout = Layout(state_dir=tmp_path / "localenv", ports=Ports(PORT_BASE))
    # A service-account key the API server cannot parse: etcd starts, then kube-apiserver exits.
    pki = ensure_pki(layout.kube_dir / "pki")
    pki.sa_pub.write_text("not a public key\n")
    try:
        proc = localenv(layout, "up", "--only", "kube")
        assert proc.returncode == 1
        assert "Traceback" not in proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("localenv up failed: kube-apiserver exited while waiting for kube-apiserver /readyz;")
        assert "stopped what it had started (etcd)" in line
        assert f"details in {layout.logs_dir / 'localenv-up-failed.log'}" in line
        assert line.endswith("fix that and run `scripts/localenv up` again")
        # The details: the API server's own complaint, in the log the line names.
        details = (layout.logs_dir / "localenv-up-failed.log").read_text()
        assert "kube-apiserver" in details and "stopped again: etcd" in details
        assert running_daemons(layout) == []
        assert not port_open(layout.ports.etcd_client)
    finally:
        kube.down(layout, lambda _line: None)


def test_what_ran_before_a_failed_up_keeps_running(tmp_path: Path):
    """Only what this `up` started is stopped: an etcd already running stays."""
    layout = Layout(state_dir=tmp_path / "localenv", ports=Ports(PORT_BASE))
    etcd = kube.daemons(layout)["etcd"]
    etcd.start([str(kube.bin_dir() / "etcd"), *kube.component_args(layout, ensure_pki(layout.kube_dir / "pki"),
                                                                   kube.KubeSettings())["etcd"]])
    try:
        wait_for(lambda: port_open(layout.ports.etcd_client), "etcd to listen", 30, etcd)
        (layout.kube_dir / "pki" / "sa.pub").write_text("not a public key\n")
        proc = localenv(layout, "up", "--only", "kube")
        assert proc.returncode == 1
        (line,) = proc.stderr.strip().splitlines()
        assert "it left nothing running" in line
        assert [d.name for d in running_daemons(layout)] == ["etcd"]
    finally:
        kube.down(layout, lambda _line: None)
