"""The toolchain's store: a build step (its tools, the pins it is built from) and where builds live.

Each step's build sits in `<root>/steps/<step>-<key>`, keyed by the digest of the pins it names
and of what it writes itself, and the toolchain's `bin/` (keyed by every built pin) links its
tools there. Standard library only, as infra/toolchain/bootstrap.py, which runs the steps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.toolchain.pins import BUILT_SECTIONS, Pins
from infra.toolchain.progress import Progress

StageFn = Callable[[Pins, Path, Path, Progress], None]


@dataclass(frozen=True)
class BuildStep:
    """One build of the toolchain: the tools it makes, the pins it is built from, its two stages."""

    name: str
    outputs: tuple[str, ...]
    what: str
    # The sections of toolchain/pins.toml the step is built from: its cache key.
    sections: tuple[str, ...]
    fetch: StageFn
    compile: StageFn | None = None
    # What the step writes itself besides the pinned sources (shims): a change redoes the step alone.
    recipe: str = ""

    def key(self, pins: Pins) -> str:
        recipe = hashlib.sha256(self.recipe.encode()).hexdigest()[:12] if self.recipe else "-"
        return f"{self.name}:{pins.digest_of(*self.sections)}:{recipe}"


@dataclass(frozen=True)
class Toolchain:
    """Where steps are built (`steps/<step>-<key>`) and the `bin/` that links their tools."""

    root: Path
    pins: Pins

    @property
    def bin(self) -> Path:
        return self.root / self.pins.digest_of(*BUILT_SECTIONS) / "bin"

    def store(self, step: BuildStep) -> Path:
        key = hashlib.sha256(step.key(self.pins).encode()).hexdigest()[:12]
        return self.root / "steps" / f"{step.name}-{key}"
