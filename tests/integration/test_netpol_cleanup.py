"""What a killed environment's kube-router left (its chains, the jumps to them, an ipset a rule
still uses) removed from this machine's real iptables and ipset by `netpol.cleanup`, the one
`down` and the next `up` run, and nothing else: another chain and its jump stay. kube-router
v2.1.0's own `--cleanup-config` removes none of them (localenv/netpol.py says why)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from localenv import netpol

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

KEEP = "ATLAS-TEST-KEEP"
SET = "KUBE-SRC-ATLASTEST"
POD_CHAIN = "KUBE-POD-FW-ATLASTEST"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def must(*argv: str) -> None:
    done = run(*argv)
    assert done.returncode == 0, f"{argv}: {done.stderr}"


def chains(filter_table: str) -> set[str]:
    return {ln[1:].split()[0] for ln in filter_table.splitlines() if ln.startswith(":")}


@pytest.fixture
def leftovers() -> Iterator[None]:
    owner = netpol.owner()
    assert owner is None, (
        f"the environment in {owner} runs kube-router: this test would remove its chains; stop it "
        "(scripts/localenv down) and run the test again")
    assert netpol.cleanup_restore_input(netpol.filter_table()) == "", "kube-router chains are already here"
    must("iptables", "-N", KEEP)
    must("iptables", "-A", "FORWARD", "-m", "comment", "--comment", "atlas test keep", "-j", KEEP)
    must("ipset", "create", SET, "hash:ip")
    must("iptables", "-N", "KUBE-ROUTER-FORWARD")
    must("iptables", "-N", POD_CHAIN)
    must("iptables", "-A", POD_CHAIN, "-m", "set", "--match-set", SET, "src", "-j", "ACCEPT")
    must("iptables", "-A", "KUBE-ROUTER-FORWARD", "-j", POD_CHAIN)
    must("iptables", "-I", "FORWARD", "1", "-m", "comment", "--comment", "kube-router netpol - ATLASTEST",
         "-j", "KUBE-ROUTER-FORWARD")
    netpol.OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)
    netpol.OWNER_FILE.write_text("/tmp/atlas-an-environment-that-is-gone\n")
    yield
    run("iptables", "-D", "FORWARD", "-m", "comment", "--comment", "atlas test keep", "-j", KEEP)
    run("iptables", "-X", KEEP)
    for chain in ("KUBE-ROUTER-FORWARD", POD_CHAIN):  # only if the test failed before cleaning
        run("iptables", "-D", "FORWARD", "-m", "comment", "--comment", "kube-router netpol - ATLASTEST",
            "-j", "KUBE-ROUTER-FORWARD")
        run("iptables", "-F", chain)
        run("iptables", "-X", chain)
    run("ipset", "destroy", SET)


def test_cleanup_removes_its_chains_jumps_and_sets_and_nothing_else(leftovers: None) -> None:
    before = netpol.filter_table()
    assert netpol.hooked(before) is False  # only FORWARD jumps here
    # Other chains by name (their rules and counters may change meanwhile: kube-proxy syncs).
    others = chains(before) - {"KUBE-ROUTER-FORWARD", POD_CHAIN}

    assert netpol.cleanup() == 3  # two chains and one set

    after = netpol.filter_table()
    assert "KUBE-ROUTER" not in after and POD_CHAIN not in after, after
    assert chains(after) == others
    assert f"-j {KEEP}" in after
    assert SET not in run("ipset", "list", "-n").stdout.split()
    assert not netpol.OWNER_FILE.exists()
    assert netpol.cleanup() == 0  # nothing left: a second run changes nothing
