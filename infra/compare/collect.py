"""What the comparison reads besides a stack's environments: past runs from a folder, and which
steps have not finished yet.

A stack's environments are collected by their own kinds (`infra.kinds.collect_environments`:
the Kubernetes API, SSH and SFTP for a batch side); a past run (a device run, or the seed's
own logs) comes from a local folder here, as one more environment's records.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from infra.compare.device_run import import_device_run, is_device_run
from infra.compare.records import EnvironmentRecords, Missing
from infra.compare.seed_import import import_seed_logs


def unfinished_steps(environments: Sequence[EnvironmentRecords]) -> list[str]:
    """`env/step (state)` for every step whose record has no finish time yet."""
    waiting = []
    for env in environments:
        if isinstance(env.steps, Missing):
            continue
        waiting += [f"{env.name}/{s.step} ({s.state})" for s in env.steps if s.finished_at is None]
    return waiting


def import_folder(folder: Path, name: str, gpus: int | None = None) -> EnvironmentRecords:
    """A past run from a folder: a device run (bench/biggan_h200.py, found by its atlas-run.json),
    else the seed's sar and nvidia-smi logs."""
    if is_device_run(folder):
        from infra.workload.load import load_workload

        # The differences from the full run are the workload's own overrides (workloads/<name>/).
        manifest = json.loads((folder / "atlas-run.json").read_text())
        definition = Path(__file__).resolve().parents[2] / "workloads" / str(manifest.get("workload")) / "workload.yaml"
        return import_device_run(folder, name, load_workload(definition) if definition.is_file() else None)
    return import_seed_logs(folder, name, gpus=gpus)
