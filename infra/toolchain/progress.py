"""What the bootstrap prints while it works: the step it is on, of how many, and the time elapsed."""

from __future__ import annotations

import threading
import time


def elapsed_text(start: float) -> str:
    seconds = int(time.monotonic() - start)
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.start = time.monotonic()
        self.index = 0
        self._lock = threading.Lock()
        # Seconds per phase ("venv", "<step> fetch", "<step> compile"), for --timings.
        self.phases: dict[str, float] = {}

    def step(self, name: str, what: str) -> None:
        self.index += 1
        self.say(f"[{self.index}/{self.total}] {name}: {what}")

    def say(self, line: str) -> None:
        with self._lock:
            print(f"bootstrap {elapsed_text(self.start):>7} {line}", flush=True)

    def timed(self, phase: str, started: float) -> None:
        with self._lock:
            self.phases[phase] = round(time.monotonic() - started, 1)
