"""Runs Pulumi's program executor (`pulumi-language-python-exec`) and leaves without Python's
interpreter teardown.

The engine waits for the program's process to end before it finishes an update, and a Python
that has imported the Pulumi and pulumi-kubernetes SDKs spends about 0.3 s tearing down their
modules at exit, after the program has finished and every RPC has been answered: a third of a
second added to every `pulumi up`, preview and destroy. The executor itself is unchanged: it
runs here by its path, as `__main__`, with its own arguments; when it exits, this flushes the
standard streams, runs the `atexit` handlers (those are what a normal exit would run that
matters: logging's flush, thread pools' joins), and ends the process with the executor's code.

Used by infra/toolchain/language_host.py:

    python -u -m infra.toolchain.program_exec <pulumi-language-python-exec> [its arguments...]
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys


def exit_code(status: object) -> int:
    """What `sys.exit(status)` makes the process's exit code (as Python itself maps it)."""
    if status is None:
        return 0
    if isinstance(status, int):
        return status & 0xFF
    print(status, file=sys.stderr)
    return 1


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m infra.toolchain.program_exec EXECUTOR [ARGS...]", file=sys.stderr)
        os._exit(2)
    executor = sys.argv[1]
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(executor, run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = exit_code(stop.code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
