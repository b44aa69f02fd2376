"""Reading a workload definition file: the only I/O of the workload package."""

from __future__ import annotations

from pathlib import Path

from infra.workload.model import Workload, WorkloadError
from infra.workload.parse import parse_workload_text


def load_workload(path: Path) -> Workload:
    """Read and validate `path`; errors are prefixed with the file name."""
    try:
        return parse_workload_text(path.read_text())
    except WorkloadError as error:
        raise WorkloadError(f"{path}: {error}") from None
