"""What Atlas brings along to run the sampler where Atlas's code is not: the sampler's files and the entrypoint.

The sampler's modules (stdlib only) are staged into an HPC or AWS run folder (infra/hpc/pipeline.py)
and, with the entrypoint, mounted from one ConfigMap into each Kubernetes step whose image Atlas did
not build (`atlas:openshift.image.reference`; infra/openshift/environment.py). There the entrypoint
runs the sampler under the image's own python3 (`MIN_PYTHON` or later); where the image has none,
the step runs unsampled and the entrypoint writes the reason into `unsampled_path(out)`, which the
report reads in place of the telemetry (infra/compare/run_files.py). Pure: paths and bytes.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

_INFRA_DIR = Path(__file__).resolve().parents[1]
# The sampler and what it imports, relative to infra/: stdlib only, so any python3 runs it.
SAMPLER_FILES = (
    "__init__.py",
    "telemetry/__init__.py",
    "telemetry/sampler.py",
    "telemetry/gpu.py",
    "telemetry/procfs.py",
    "telemetry/columns.py",
)
# The container entrypoint: Atlas's images carry it as /usr/local/bin/atlas-entrypoint; it is mounted
# beside the sampler's modules for any other image.
ENTRYPOINT = _INFRA_DIR / "telemetry" / "entrypoint.sh"
ENTRYPOINT_NAME = "atlas-entrypoint"
# The oldest Python the sampler runs on (the entrypoint's own check says the same).
MIN_PYTHON = (3, 8)
# Beside a step's `<step>.jsonl`, when the step ran unsampled: one line, why.
UNSAMPLED_SUFFIX = ".unsampled"


def sampler_file(relative: str) -> Path:
    """A file of SAMPLER_FILES on this machine."""
    return _INFRA_DIR / relative


def unsampled_path(telemetry_out: str) -> str:
    """Where the entrypoint writes why a step ran unsampled: its telemetry file's path, `.jsonl`
    replaced by `.unsampled` (`telemetry/train.jsonl` -> `telemetry/train.unsampled`)."""
    path = PurePosixPath(telemetry_out)
    return str(path.with_suffix(UNSAMPLED_SUFFIX)) if path.suffix == ".jsonl" else f"{path}{UNSAMPLED_SUFFIX}"


def pod_tools() -> list[tuple[str, bytes, int]]:
    """What the tools ConfigMap holds, as (path in the volume, content, mode): the entrypoint at its
    top, the sampler's modules under `infra/` beside it."""
    files = [(ENTRYPOINT_NAME, ENTRYPOINT.read_bytes(), 0o755)]
    files += [(f"infra/{name}", sampler_file(name).read_bytes(), 0o644) for name in SAMPLER_FILES]
    return files
