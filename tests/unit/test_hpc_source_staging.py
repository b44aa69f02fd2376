"""A workload from another repository staged on the HPC side, and `atlas:workloadSource`.

The HPC side stages the materialised tree (pinned commit + patch) into the run directory; a
stack names a clone or bundle where there is no network. A small git repository stands in
for BigGAN-PyTorch, so nothing here needs a network or BigGAN's code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from infra.config import AtlasConfigError, parse_stack_config
from infra.hpc.components import workload_source_files
from infra.hpc.target import HpcConfigError
from infra.workload.load import load_workload
from infra.workload.model import GitSource
from infra.workload_source import MARKER, create_bundle
from tests.support import project_with_workloads

from .test_workload_source import git, upstream  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[2]
BIGGAN = load_workload(REPO / "workloads" / "biggan" / "workload.yaml")
HPC = {
    "scheduler": "slurm",
    "host": "login.example.org",
    "user": "alice",
    "known_hosts": "login.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk=",
    "private_key_file": "id_ed25519",
}


def test_the_pinned_commit_with_its_patch_is_staged_at_the_run_directorys_root(
    upstream: tuple[Path, str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    clone, commit, patch = upstream
    bundle = create_bundle(clone, commit, tmp_path / "up.bundle")
    workload = dataclasses.replace(
        BIGGAN, source=GitSource("https://example.org/up", "satori", commit, patch.name)
    )
    files = workload_source_files(workload, patch.parent, local_source=bundle, cache_root=tmp_path / "cache")
    assert [f.path for f in files] == [MARKER, "LICENSE", "main.py"]
    main = next(f for f in files if f.path == "main.py")
    assert main.source.read_text() == "def f():\n    return 42\n"  # the patch was applied
    again = workload_source_files(workload, patch.parent, local_source=bundle, cache_root=tmp_path / "cache")
    assert [f.source for f in again] == [f.source for f in files]


def test_a_source_that_cannot_be_had_stops_with_the_key(tmp_path: Path) -> None:
    workload = dataclasses.replace(
        BIGGAN, source=GitSource("https://example.org/up", "satori", "0" * 40, None)
    )
    with pytest.raises(HpcConfigError, match=r"atlas:workloadSource: .* does not exist"):
        workload_source_files(workload, REPO, local_source=tmp_path / "missing.bundle", cache_root=tmp_path)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("carry/biggan.bundle", "{project}/carry/biggan.bundle"),
        ("/srv/mirrors/BigGAN-PyTorch", "/srv/mirrors/BigGAN-PyTorch"),
    ],
)
def test_workload_source_is_a_path_relative_to_the_project(tmp_path: Path, value: str, expected: str) -> None:
    project = project_with_workloads(tmp_path)
    config = parse_stack_config("s", {"workload": "biggan", "hpc": {"satori": HPC}, "workloadSource": value},
                                project)  # fmt: skip
    assert config.workload_source == Path(expected.format(project=project))


def test_workload_source_defaults_to_none_and_refuses_a_non_string(tmp_path: Path) -> None:
    project = project_with_workloads(tmp_path)
    assert parse_stack_config("s", {"hpc": {"satori": HPC}}, project).workload_source is None
    with pytest.raises(AtlasConfigError, match="atlas:workloadSource: expected the path of a clone or git bundle"):
        parse_stack_config("s", {"hpc": {"satori": HPC}, "workloadSource": ""}, project)
