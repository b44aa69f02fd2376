"""Pulumi's Python dynamic-provider host, with a worker thread for every wait Atlas runs at once.

The engine runs every dynamic resource of a program (the HPC side's `StagedFiles`, `BatchJob`
and `JobCompletion`, the OpenShift side's `JobCompletion`, the AWS side's resources) through
one plugin process, `pulumi-resource-pulumi-python`, which serves them from a gRPC server with
four worker threads (`pulumi/dynamic/__main__.py`). A completion holds its thread for as long
as its step runs, so a stack with two HPC environments already fills all four with waits, and
every other call of that `pulumi up`, even a Check, queues behind steps that may run for
hours: the Kubernetes side's next step, an AWS instance, a staged file.

This launcher runs that same module unchanged, with the thread pool it asks for widened to
WORKERS (threads cost nothing while they wait on a socket). The module builds its server when
it is run, with `futures.ThreadPoolExecutor(max_workers=4)` and no setting to change it, so the
pool class is what is widened, in this process only. bootstrap installs the shim that runs
this module in the toolchain's bin folder (DYNAMIC_HOST_SHIM in bootstrap.py).

The module reports a provider's exception to the engine as `traceback.format_exc()`. A failure
the user fixes (infra.errors.ActionableError: credentials a cluster refuses, say) is reported as
its one-line message instead, naming the fix; every other exception keeps its traceback.
"""

from __future__ import annotations

import runpy
import sys
import traceback
from collections.abc import Callable
from concurrent import futures
from typing import Any

from infra.errors import ActionableError
from infra.toolchain.plugin_signals import interrupt_on_sigint

WORKERS = 64


class WidePool(futures.ThreadPoolExecutor):
    """A ThreadPoolExecutor with at least WORKERS threads."""

    def __init__(self, max_workers: int | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(max(max_workers or 0, WORKERS), *args, **kwargs)


def message_or_traceback(format_exc: Callable[..., str]) -> Callable[..., str]:
    """`traceback.format_exc`, but the message alone for the ActionableError being handled."""

    def format_exc_unless_actionable(limit: int | None = None, chain: bool = True) -> str:
        handled = sys.exc_info()[1]
        if isinstance(handled, ActionableError):
            return str(handled)
        return format_exc(limit, chain)

    return format_exc_unless_actionable


def main() -> None:
    interrupt_on_sigint()  # the engine stops this plugin with SIGINT; the module stops on KeyboardInterrupt
    futures.ThreadPoolExecutor = WidePool  # type: ignore[misc]
    traceback.format_exc = message_or_traceback(traceback.format_exc)
    runpy.run_module("pulumi.dynamic", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
