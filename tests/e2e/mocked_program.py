"""Runs a Pulumi program under Pulumi's mocks and prints what it registered, one JSON object per
line: `python mocked_program.py PROGRAM_DIR PROJECT STACK`. A standalone script: it is run by
another virtual environment's Python (tests/e2e/test_example_program.py), with nothing of the
checkout on sys.path, so it imports Pulumi and whatever the program imports, nothing else."""

from __future__ import annotations

import json
import runpy
import sys
import threading
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await


class RecordingMocks(pulumi.runtime.Mocks):
    """Every resource's outputs are its inputs; each registration is recorded (from the SDK's threads)."""

    def __init__(self) -> None:
        self.registered: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        inputs = dict(args.inputs)
        record = {"type": args.typ, "name": args.name, "custom": bool(args.custom)}
        if args.typ.startswith("kubernetes:"):
            record["kind"] = str(inputs.get("kind", ""))
        with self.lock:
            self.registered.append(record)
        return f"{args.name}-id", inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


def main() -> None:
    program, project, stack = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    import infra  # the installed distribution's, which the program imports too

    print(json.dumps({"infra": str(Path(infra.__file__).resolve()), "sys_path": sys.path}), flush=True)
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False)
    _sync_await(run_pulumi_func(lambda: runpy.run_path(str(program / "__main__.py"), run_name="__main__")))
    for record in mocks.registered:
        print(json.dumps(record))


if __name__ == "__main__":
    main()
