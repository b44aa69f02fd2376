"""The body of test_netpol_cleanup.py, run in a network namespace of its own (`unshare --net`):
its iptables tables and ipsets are the namespace's, so a kube-router that an environment runs on
this machine (the test suite's own, say) is neither seen nor touched, and nothing is left behind:
the namespace goes with this process.

    unshare --net python -m tests.integration.netns_netpol_cleanup OWNER_FILE

Exits 0 having checked everything, or raises AssertionError naming what differed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from localenv import netpol

KEEP = "ATLAS-TEST-KEEP"
OTHER = "KUBE-SERVICES"  # another component's chain (kube-proxy's), and its jump: both stay
SET = "KUBE-SRC-ATLASTEST"
POD_CHAIN = "KUBE-POD-FW-ATLASTEST"


def must(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{argv}: {done.stderr}"


def chains(filter_table: str) -> set[str]:
    return {ln[1:].split()[0] for ln in filter_table.splitlines() if ln.startswith(":")}


def make_leftovers(owner_file: Path) -> None:
    """What a killed environment's kube-router leaves: its chains, the jump to them, an ipset a
    rule still uses, and the owner file naming an environment that is gone."""
    assert netpol.cleanup_restore_input(netpol.filter_table()) == "", "a fresh namespace holds kube-router chains"
    must("iptables", "-N", KEEP)
    must("iptables", "-A", "FORWARD", "-m", "comment", "--comment", "atlas test keep", "-j", KEEP)
    must("iptables", "-N", OTHER)
    must("iptables", "-A", "OUTPUT", "-j", OTHER)
    must("ipset", "create", SET, "hash:ip")
    must("iptables", "-N", "KUBE-ROUTER-FORWARD")
    must("iptables", "-N", POD_CHAIN)
    must("iptables", "-A", POD_CHAIN, "-m", "set", "--match-set", SET, "src", "-j", "ACCEPT")
    must("iptables", "-A", "KUBE-ROUTER-FORWARD", "-j", POD_CHAIN)
    must("iptables", "-I", "FORWARD", "1", "-m", "comment", "--comment", "kube-router netpol - ATLASTEST",
         "-j", "KUBE-ROUTER-FORWARD")
    owner_file.write_text("/tmp/atlas-an-environment-that-is-gone\n")


def main(owner_file: Path) -> None:
    netpol.OWNER_FILE = owner_file  # the machine's own file names the machine's kube-router
    make_leftovers(owner_file)
    before = netpol.filter_table()
    assert netpol.hooked(before) is False  # only FORWARD jumps here
    others = chains(before) - {"KUBE-ROUTER-FORWARD", POD_CHAIN}
    assert others >= {KEEP, OTHER}, others

    removed = netpol.cleanup()
    assert removed == 3, removed  # two chains and one set

    after = netpol.filter_table()
    assert "KUBE-ROUTER" not in after and POD_CHAIN not in after, after
    assert chains(after) == others, after
    assert f"-j {KEEP}" in after and f"-j {OTHER}" in after, after
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=True).stdout.split()
    assert SET not in sets, sets
    assert not owner_file.exists()
    assert netpol.cleanup() == 0  # nothing left: a second run changes nothing
    print(f"removed {removed}; kept {sorted(others)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
