"""The local environments the test run starts never share a port.

Each integration or e2e module that starts a Satori, moto or a whole environment of its own takes
its ports from a base of its own (localenv.layout.Ports), beside the run's environment
(scripts/test: 18000) and a developer's (the default, 16000). Ports are spread up to base + 818,
so two bases a few hundred apart can still meet on one port: a full run once lost every test of
a module to that (17600's slurmd on 18418, held by the run's environment). The bases are read
from the modules' own text, so a module added with a clashing base fails here, not in CI.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from localenv.layout import Ports

REPO = Path(__file__).resolve().parents[2]
# `PORT_BASE = 18700`, `PORT_BASE = int(os.environ.get("ATLAS_TEST_X_PORT_BASE", "17500"))`,
# `Ports(18600)`, and `Ports(PORT_BASE + 100)` (a second layout beside the module's own).
_BASE = re.compile(r'PORT_BASE = (?:int\(os\.environ\.get\("\w+", "(\d+)"\)\)|(\d+))')
_LITERAL = re.compile(r"Ports\((\d+)\)")
_OFFSET = re.compile(r"Ports\(PORT_BASE \+ (\d+)\)")


def module_bases(text: str) -> set[int]:
    """Every port base a test module's text names."""
    own = [int(a or b) for a, b in _BASE.findall(text)]
    bases = set(own) | {int(n) for n in _LITERAL.findall(text)}
    bases |= {base + int(n) for base in own for n in _OFFSET.findall(text)}
    return bases


def test_module_bases_reads_every_form() -> None:
    text = (
        'PORT_BASE = int(os.environ.get("ATLAS_TEST_HPC_PORT_BASE", "17200"))\n'
        "other = Layout(state_dir=s, ports=Ports(PORT_BASE + 100))\n"
        "made = Layout(state_dir=s, ports=Ports(18600))\n"
    )
    assert module_bases(text) == {17200, 17300, 18600}
    assert module_bases("PORT_BASE = 23700  # pod subnet\n") == {23700}


def test_no_two_environments_of_a_test_run_share_a_port() -> None:
    owners: dict[int, set[str]] = {18000: {"scripts/test"}, 16000: {"the default layout"}}
    for path in sorted((REPO / "tests").glob("*/test_*.py")):
        if path.parent.name not in ("integration", "e2e"):
            continue
        for base in module_bases(path.read_text()):
            owners.setdefault(base, set()).add(str(path.relative_to(REPO)))
    assert len(owners) > 8, f"too few bases found, the patterns no longer match: {owners}"
    clashes = []
    for a, b in itertools.combinations(sorted(owners), 2):
        shared = set(Ports(a).all().values()) & set(Ports(b).all().values())
        if shared:
            clashes.append(f"base {a} ({', '.join(sorted(owners[a]))}) and base {b} "
                           f"({', '.join(sorted(owners[b]))}) both use port(s) {sorted(shared)}")
    assert not clashes, "; ".join(clashes) + ": move one base (by a multiple of 50 that is not 250 or 400)"
