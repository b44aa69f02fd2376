"""SIGINT for the Python plugins the engine starts, even where their launcher ignored it.

The engine stops each plugin at the end of every `pulumi up`, preview and destroy by sending it
SIGINT, and waits up to 5 s before SIGKILL (sdk/go/common/resource/plugin/plugin.go). Both
Python plugins stop their gRPC servers on KeyboardInterrupt, but Python raises it only where
SIGINT was not ignored when the process started, and an ignored signal stays ignored across
exec: a command a shell runs in the background without job control (a CI script's `cmd &`,
`nohup`, a batch job's wrapper) starts with SIGINT ignored, and then each plugin held the engine
for the full 5 s. The bench's no-change `pulumi up` took 7.3 to 7.7 s that way, 2.7 s otherwise.
Standard library only: the language host keeps its start-up small.
"""

from __future__ import annotations

import signal


def interrupt_on_sigint() -> None:
    """SIGINT raises KeyboardInterrupt in the main thread, whatever this process inherited."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
