"""Build Atlas's toolchain from Go modules and PyPI, into a versioned cache.

Nothing here downloads a prebuilt binary: the Pulumi CLI, its Kubernetes provider, etcd,
the Kubernetes control plane and KWOK are all built with the ordinary `go` client from
the Go module proxy, each in a small wrapper module of its own so that one tool's
dependencies never raise another's.

Each step is built from the pins it names (its sections of toolchain/pins.toml) into a
store folder of its own, `<cache>/toolchain/steps/<step>-<key>`, and the toolchain's `bin/`
links each tool to its step's build: a changed pin rebuilds only the steps built from it.
A step builds into a scratch folder and moves its binaries into the store only when the
whole step succeeded; a stamp file written last marks it done. A binary without its stamp
is never trusted, so a failed or interrupted build is simply redone.

Every step has a fetch stage (the wrapper module and `go get`/`go mod download`: network)
and a compile stage (CPU). The fetch stages run one after another in a thread of their own,
ahead of the compiles, so downloads overlap the compiling of the step before; all steps
share Go's module and build caches.

The tools and their stages are in tools.py, the commands they run in go.py, the virtual
environment in venv.py, the store's layout in store.py; this module orders and records the steps.
Standard library only: this runs with the system Python before the venv exists.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from infra.toolchain.go import BuildStepFailed, check_go
from infra.toolchain.pins import Pins, cache_root, load_pins, toolchain_dir
from infra.toolchain.progress import Progress
from infra.toolchain.store import BuildStep, Toolchain
from infra.toolchain.tools import BINARY_STEPS, OPTIONAL_STEPS
from infra.toolchain.venv import VENV_DIR, build_venv, compile_project_bytecode, link_program_venv, venv_key


def default_toolchain(pins: Pins) -> Toolchain:
    toolchain = Toolchain(cache_root() / "toolchain", pins)
    assert toolchain.bin.parent == toolchain_dir(pins)  # one place decides the folder
    return toolchain


def step_done(step: BuildStep, toolchain: Toolchain) -> bool:
    store = toolchain.store(step)
    stamp = store / ".stamp"
    return (
        stamp.exists()
        and stamp.read_text() == step.key(toolchain.pins)
        and all((store / o).exists() for o in step.outputs)
    )


def link_step(step: BuildStep, toolchain: Toolchain) -> None:
    """Point `bin/<tool>` at the step's build (relative links, so the cache can move)."""
    toolchain.bin.mkdir(parents=True, exist_ok=True)
    store = toolchain.store(step)
    for name in step.outputs:
        link = toolchain.bin / name
        target = os.path.relpath(store / name, toolchain.bin)
        if link.is_symlink() and os.readlink(link) == target:
            continue
        tmp = toolchain.bin / f".{name}.link"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)


class Prepared:
    """A step's scratch folders once its fetch stage ran (or the error it raised)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.scratch = tmp / "src"
        self.staged = tmp / "bin"
        self.done = threading.Event()
        self.error: BaseException | None = None


def fetch_step(step: BuildStep, toolchain: Toolchain, progress: Progress, prepared: Prepared) -> None:
    started = time.monotonic()
    try:
        prepared.scratch.mkdir(parents=True)
        prepared.staged.mkdir(parents=True)
        step.fetch(toolchain.pins, prepared.scratch, prepared.staged, progress)
        progress.timed(f"{step.name} fetch", started)
    except BaseException as exc:  # noqa: BLE001 - handed to the compiling thread, which raises it
        prepared.error = exc
    finally:
        prepared.done.set()


def finish_step(step: BuildStep, toolchain: Toolchain, progress: Progress, prepared: Prepared) -> None:
    """Compile a fetched step, move its outputs into its store folder, stamp it, link it."""
    prepared.done.wait()
    if prepared.error is not None:
        raise prepared.error
    if step.compile is not None:
        started = time.monotonic()
        step.compile(toolchain.pins, prepared.scratch, prepared.staged, progress)
        progress.timed(f"{step.name} compile", started)
    missing = [o for o in step.outputs if not (prepared.staged / o).exists()]
    if missing:
        raise BuildStepFailed(f"the build finished but did not produce {', '.join(missing)}")
    store = toolchain.store(step)
    if store.exists():
        shutil.rmtree(store)
    store.parent.mkdir(parents=True, exist_ok=True)
    os.replace(prepared.staged, store)
    (store / ".stamp").write_text(step.key(toolchain.pins))
    link_step(step, toolchain)


def run_step(step: BuildStep, toolchain: Toolchain, progress: Progress) -> None:
    """Fetch and compile one step in this thread (what `build_steps` does, without overlap)."""
    build_steps([step], toolchain, progress, announce=False)


def build_steps(steps: Sequence[BuildStep], toolchain: Toolchain, progress: Progress, announce: bool = True) -> None:
    """Build `steps` in order: a thread runs their fetch stages one after another, ahead of
    the compiles, so a step's downloads overlap the compiling of the one before it."""
    work = toolchain.root / "work"
    work.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bootstrap-", dir=work))
    prepared = {s.name: Prepared(tmp / s.name) for s in steps}
    stop = threading.Event()

    def fetch_all() -> None:
        for s in steps:
            if stop.is_set():
                prepared[s.name].error = BuildStepFailed("not fetched: an earlier step failed")
                prepared[s.name].done.set()
                continue
            fetch_step(s, toolchain, progress, prepared[s.name])

    fetcher = threading.Thread(target=fetch_all, name="bootstrap-fetch", daemon=True)
    fetcher.start()
    try:
        for s in steps:
            if announce:
                progress.step(s.name, f"building {s.what}")
            finish_step(s, toolchain, progress, prepared[s.name])
    finally:
        stop.set()
        fetcher.join()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bootstrap", description=__doc__.splitlines()[0])
    step_names = ",".join(["venv", *(s.name for s in BINARY_STEPS + OPTIONAL_STEPS)])
    optional_names = ",".join(s.name for s in OPTIONAL_STEPS)
    parser.add_argument("--only", help=f"comma-separated step names ({step_names})")
    parser.add_argument("--with", dest="with_steps", default=os.environ.get("ATLAS_BOOTSTRAP_WITH") or None,
                        help=f"also build these optional steps ({optional_names}; or $ATLAS_BOOTSTRAP_WITH)")
    parser.add_argument("--print-bin", action="store_true", help="print the toolchain's bin folder and exit")
    parser.add_argument("--timings", type=Path, default=os.environ.get("ATLAS_BOOTSTRAP_TIMINGS") or None,
                        help="write the seconds each phase took to this JSON file (or $ATLAS_BOOTSTRAP_TIMINGS)")
    args = parser.parse_args(argv)

    pins = load_pins()
    toolchain = default_toolchain(pins)
    if args.print_bin:
        print(toolchain.bin)
        return 0
    wanted = set(args.only.split(",")) if args.only else None
    unknown = (wanted or set()) - {"venv", *(s.name for s in BINARY_STEPS + OPTIONAL_STEPS)}
    if unknown:
        parser.error(f"--only: unknown step(s) {', '.join(sorted(unknown))}; known: {step_names}")
    extra = set(args.with_steps.split(",")) if args.with_steps else set()
    if extra - {s.name for s in OPTIONAL_STEPS}:
        parser.error(f"--with: unknown optional step(s) {', '.join(sorted(extra))}; known: {optional_names}")
    steps = [s for s in BINARY_STEPS if wanted is None or s.name in wanted]
    # Optional steps: built when named (--only or --with), linked whenever they are already built.
    steps += [s for s in OPTIONAL_STEPS if s.name in extra or (wanted is not None and s.name in wanted)]
    todo = [s for s in steps if not step_done(s, toolchain)]
    for step in [*steps, *(s for s in OPTIONAL_STEPS if s not in steps)]:
        if step not in todo and step_done(step, toolchain):
            link_step(step, toolchain)  # built by another pin set that shares this step's pins
    venv_wanted = wanted is None or "venv" in wanted
    venv_stale = venv_wanted and not (
        (VENV_DIR / ".atlas-stamp").exists() and (VENV_DIR / ".atlas-stamp").read_text() == venv_key()
    )
    progress = Progress(len(todo) + int(venv_stale))
    if venv_wanted and not venv_stale:
        compile_project_bytecode()
        link_program_venv()
    if not todo and not venv_stale:
        progress.say(f"toolchain up to date in {toolchain.bin}")
        return 0
    started = time.monotonic()
    try:
        if todo:
            progress.say(check_go())
        if venv_stale:
            progress.step("venv", f"Python virtual environment in {VENV_DIR}")
            build_venv(pins, progress)
            compile_project_bytecode()
            link_program_venv()
            progress.timed("venv", started)
        if todo:
            build_steps(todo, toolchain, progress)
    except BuildStepFailed as exc:
        progress.say(f"FAILED at step {progress.index}/{progress.total}: {exc}")
        return 1
    except KeyboardInterrupt:
        progress.say("interrupted: the step in progress left nothing behind; run again to resume")
        return 130
    finally:
        progress.timed("total", started)
        if args.timings is not None:
            args.timings.write_text(json.dumps(progress.phases, indent=2) + "\n")
    phases = ", ".join(f"{k} {v:.0f}s" for k, v in progress.phases.items())
    progress.say(f"done; toolchain in {toolchain.bin} ({phases})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
