"""The LSF commands' entry point: `main(<command>, argv)`, what each installed command calls.

Installed for the login user by satori.up() as /opt/atlas-lsf/10.1/bin/<command> (bsub, bjobs,
bkill, bhist, bqueues, bhosts, lsload), each a two-line wrapper calling main. The commands live
in bsub.py (bsub) and queries.py (the rest); an LsfError ends a command with its message on
stderr and LSF's exit code. Stdlib only: it runs on the login node.
"""

from __future__ import annotations

import sys

from .bsub import bsub
from .errors import LsfError
from .queries import bhist, bhosts, bjobs, bkill, bqueues, lsload

COMMANDS = {
    "bsub": bsub,
    "bjobs": bjobs,
    "bkill": bkill,
    "bhist": bhist,
    "bqueues": bqueues,
    "bhosts": bhosts,
    "lsload": lsload,
}


def main(command: str, argv: list[str]) -> int:
    try:
        return COMMANDS[command](argv)
    except LsfError as exc:
        print(exc.message, file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return 141
