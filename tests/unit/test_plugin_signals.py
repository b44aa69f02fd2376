"""Both Python plugin hosts stop on the engine's SIGINT, even when started with SIGINT ignored,
as a shell's background job without job control (CI scripts, nohup) starts them. The engine waits
5 s for a plugin that ignores it before SIGKILL, at the end of every `pulumi up`."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from infra.toolchain.recipes import DYNAMIC_HOST_SHIM, LANGUAGE_HOST_SHIM


def _started_with_sigint_ignored(module: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-u", "-m", module, "127.0.0.1:1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # inherited across exec, as from a shell
    )


@pytest.mark.parametrize(
    ("module", "shim"),
    [("infra.toolchain.language_host", LANGUAGE_HOST_SHIM), ("infra.toolchain.dynamic_host", DYNAMIC_HOST_SHIM)],
)
def test_a_plugin_started_with_sigint_ignored_stops_on_sigint(module: str, shim: str) -> None:
    assert f"-m {module} " in shim  # what the engine starts
    proc = _started_with_sigint_ignored(module)
    try:
        port = proc.stdout.readline() if proc.stdout else b""
        assert port.strip().isdigit(), (port, proc.stderr.read() if proc.stderr else b"")
        proc.send_signal(signal.SIGINT)
        # The engine's own grace; a plugin still running after it is what the engine SIGKILLs.
        # Upstream's dynamic provider announces its port just before it starts catching
        # KeyboardInterrupt: a SIGINT in between (the test sends it at once; the engine only at the
        # end of a run) ends it by the signal itself, as promptly, and the engine only waits for
        # the exit. Ignored, it would still be running here.
        assert proc.wait(timeout=5) in (0, -signal.SIGINT)
    finally:
        proc.kill()
        proc.wait()
