"""What a killed environment's kube-router left (its chains, the jumps to them, an ipset a rule
still uses) removed by `netpol.cleanup`, the one `down` and the next `up` run, and nothing else:
other chains and their jumps stay. kube-router v2.1.0's own `--cleanup-config` removes none of
them (localenv/netpol.py says why).

Real iptables and ipset, in a network namespace of the test's own (tests/integration/
netns_netpol_cleanup.py): the machine's tables are left alone, so the test runs beside an
environment whose kube-router is running (the suite's own)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.toolchain.pins import REPO_ROOT
from localenv import netpol
from localenv.system import ensure_packages

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]


def test_cleanup_removes_its_chains_jumps_and_sets_and_nothing_else(tmp_path: Path) -> None:
    ensure_packages(netpol.PACKAGES)  # iptables and ipset, as the node installs them
    unshare = shutil.which("unshare")
    assert unshare, "unshare (util-linux) is not installed"
    owner_file = tmp_path / "kube-router.owner"
    done = subprocess.run(
        [unshare, "--net", "--", sys.executable, "-m", "tests.integration.netns_netpol_cleanup", str(owner_file)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removed 3; kept" in done.stdout, done.stdout
