"""The stand-alone Satori stacks: placeholders refused by key, then exactly the one HPC side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import AtlasConfigError, parse_stack_config
from tests.support import project_with_workloads

STACKS = Path(__file__).resolve().parents[2] / "stacks"
HOST_KEY = "satori-login-001.mit.edu ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----\n"


def atlas_values(stack: str) -> dict[str, Any]:
    config = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {key.removeprefix("atlas:"): value for key, value in config.items() if key.startswith("atlas:")}


def filled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: filled(v) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("REPLACE_WITH"):
        return "gpu" if "PARTITION" in value else "alex"
    return value


@pytest.mark.parametrize(("stack", "environment", "scheduler"), [("satori", "satori", "lsf"),
                                                                  ("satori-slurm", "satori-slurm", "slurm")])
def test_stand_alone_satori_stacks(tmp_path: Path, stack: str, environment: str, scheduler: str) -> None:
    values = atlas_values(stack)
    with pytest.raises(AtlasConfigError, match=rf"^atlas:hpc\.{environment}\.\w+: still the example's placeholder"):
        parse_stack_config(stack, values, project_with_workloads(tmp_path))
    (tmp_path / "satori_known_hosts").write_text(HOST_KEY)
    values = filled(values)
    values["hpc"][environment]["private_key"] = KEY  # what `pulumi config set --secret` gives the program
    config = parse_stack_config(stack, values, project_with_workloads(tmp_path))
    assert config.openshift is None and config.aws is None and config.workload == "biggan"
    assert [h.name for h in config.hpc] == [environment]
    target = config.hpc[0].target
    assert (target.scheduler, target.host, target.poll_interval_s) == (scheduler, "satori-login-001.mit.edu", 60.0)
    assert target.known_hosts_file == tmp_path / "satori_known_hosts"
