"""The stand-alone Satori stacks: placeholders refused by key, then exactly the one HPC side."""

from __future__ import annotations

import shutil
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


def test_the_local_site_stack_names_nothing_of_ssh_but_the_aliases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.hpc.ssh import resolve_endpoint
    from localenv import site_config
    from localenv.layout import Layout, Ports

    config = parse_stack_config("local-site", atlas_values("local-site"), project_with_workloads(tmp_path))
    targets = {h.name: h.target for h in config.hpc}
    assert sorted(targets) == ["satori-site", "satori-site-mfa"]
    for target in targets.values():
        assert (target.user, target.port, target.private_key_file, target.known_hosts_file) == (None,) * 4
    # Resolved as the site's user does: their HOME, with the ssh config the local site writes.
    layout = Layout(state_dir=tmp_path / "env", ports=Ports(16000))
    site = site_config.SitePaths(tmp_path / "home-site")
    monkeypatch.setenv("HOME", str(site.home))
    site.ssh_config.parent.mkdir(parents=True)
    site.ssh_config.write_text(site_config.render_user_ssh_config(site, layout))
    site.known_hosts.write_text(site_config.render_known_hosts("ssh-ed25519 AAAAb", "ssh-ed25519 AAAAl", layout))
    endpoint = resolve_endpoint(targets["satori-site"], "atlas:hpc.satori-site")
    assert [hop.name for hop in endpoint.jumps] == ["atlas-bastion"] and endpoint.port == layout.ports.site_login
    mfa = resolve_endpoint(targets["satori-site-mfa"], "atlas:hpc.satori-site-mfa")
    assert mfa.port == layout.ports.site_login_mfa
    # OpenSSH expands ControlPath (`ssh -G`); without its client there is no master to use.
    assert mfa.control_path == (str(site.control_path) if shutil.which("ssh") else None)
