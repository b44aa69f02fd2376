"""`atlas:aws` validation: every refusal names the key, before any resource exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.aws.settings import AwsConfigError
from infra.aws.settings_parser import (
    EMULATOR_CREDENTIALS,
    parse_aws_settings,
    resolve_credentials,
)
from infra.config import AtlasConfigError, parse_stack_config
from tests.support import project_with_workloads

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk= me@laptop"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
REAL: dict[str, Any] = {
    "region": "us-east-1",
    "ami": "ami-0123456789abcdef0",
    "allowed_ssh_cidrs": ["203.0.113.7/32"],
    "access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "secret_access_key": SECRET,
}
MOTO: dict[str, Any] = {
    "region": "us-east-1",
    "endpoint_url": "http://127.0.0.1:16500",
    "ami": "ami-1e749f67",
}


def test_defaults_match_a_satori_node() -> None:
    settings = parse_aws_settings(REAL)
    assert settings is not None
    assert settings.instance_type.name == "p3.8xlarge" and settings.instance_type.gpus == 4
    assert "V100" in settings.instance_type.gpu_product
    assert settings.market == "on-demand" and settings.instance_count == 1
    assert settings.execute and settings.not_executed_reason == ""
    assert settings.credentials.access_key_id == "AKIAIOSFODNN7EXAMPLE"
    # Secrets never show in a repr (a traceback or a log line).
    assert SECRET not in repr(settings) and "AKIAIOSFODNN7EXAMPLE" not in repr(settings)


def test_an_endpoint_on_this_machine_executes_nothing_and_says_why() -> None:
    settings = parse_aws_settings(MOTO)
    assert settings is not None and settings.emulated and not settings.execute
    assert "moto" in settings.not_executed_reason and "run nothing" in settings.not_executed_reason


def test_absent_or_disabled_section_is_no_environment() -> None:
    assert parse_aws_settings(None) is None
    assert parse_aws_settings({**REAL, "enabled": "false"}) is None


BAD_CASES = [
    ({"region": "us-central-9"}, "atlas:aws.region", "'us-central-9' is not known"),
    ({"region": None}, "atlas:aws.region", "required"),
    ({"instance_type": "p3.9xlarge"}, "atlas:aws.instance_type", "not a GPU instance type Atlas knows"),
    ({"instance_type": "m5.large"}, "atlas:aws.instance_type", "p3.8xlarge"),
    ({"allowed_ssh_cidrs": ["0.0.0.0/0"]}, "atlas:aws.allowed_ssh_cidrs[0]", "whole internet"),
    ({"allowed_ssh_cidrs": ["::/0"]}, "atlas:aws.allowed_ssh_cidrs[0]", "allow_ssh_from_anywhere: true"),
    ({"allowed_ssh_cidrs": ["203.0.113.7/24"]}, "atlas:aws.allowed_ssh_cidrs[0]", "not a CIDR block"),
    ({"allowed_ssh_cidrs": []}, "atlas:aws.allowed_ssh_cidrs", "steps run over SSH"),
    ({"secret_access_key": None}, "atlas:aws.secret_access_key", "give both keys"),
    ({"access_key_id": None}, "atlas:aws.access_key_id", "give both keys"),
    ({"access_key_id": "not-a-key"}, "atlas:aws.access_key_id", "value not shown"),
    ({"market": "reserved"}, "atlas:aws.market", "on-demand, spot"),
    ({"spot_max_price": 3}, "atlas:aws.spot_max_price", "only applies to market: spot"),
    ({"ami": "ubuntu"}, "atlas:aws.ami", "is not an AMI id"),
    ({"ami": None}, "atlas:aws.ami", "required"),
    ({"ami": "REPLACE_WITH_DLAMI_ID"}, "atlas:aws.ami", "placeholder"),
    ({"allowed_ssh_cidrs": ["REPLACE_WITH_YOUR_ADDRESS/32"]}, "atlas:aws.allowed_ssh_cidrs[0]", "placeholder"),
    ({"instance_count": 0}, "atlas:aws.instance_count", "out of range"),
    ({"instance_count": 9}, "atlas:aws.instance_count", "out of range"),
    ({"endpoint_url": "ftp://x"}, "atlas:aws.endpoint_url", "http(s) URL"),
    # plain HTTP only to loopback, parsed (infra/loopback.py), not searched for "localhost" or "127.0.0.1"
    ({"endpoint_url": "http://localhost.example.com"}, "atlas:aws.endpoint_url", "not this machine's loopback"),
    ({"endpoint_url": "http://127.0.0.1.evil.com:16500"}, "atlas:aws.endpoint_url", "not this machine's loopback"),
    ({"endpoint_url": "http://[::ffff:127.0.0.1]:16500"}, "atlas:aws.endpoint_url", "not this machine's loopback"),
    ({"endpoint_url": "http://0x7f.1:16500"}, "atlas:aws.endpoint_url", "not this machine's loopback"),
    ({"ssh_public_key": "-----BEGIN OPENSSH PRIVATE KEY-----"}, "atlas:aws.ssh_public_key", "value not shown"),
    ({"ssh_public_key": PUBLIC_KEY}, "atlas:aws.ssh_private_key_file", "key pair is imported"),
    ({"ssh_private_key_file": "id"}, "atlas:aws.ssh_private_key_file", "without the public half"),
    ({"subnet_id": "vpc-1"}, "atlas:aws.subnet_id", "not a subnet id"),
    ({"regoin": "us-east-1"}, "atlas:aws", "unknown key(s) regoin"),
    ({"root_volume_gib": 4}, "atlas:aws.root_volume_gib", "out of range"),
]


@pytest.mark.parametrize(("change", "key", "problem"), BAD_CASES, ids=[c[1] + ":" + c[2] for c in BAD_CASES])
def test_bad_values_name_the_key(change: dict[str, Any], key: str, problem: str) -> None:
    raw = {k: v for k, v in {**REAL, **change}.items() if v is not None}
    with pytest.raises(AwsConfigError) as error:
        parse_aws_settings(raw)
    message = str(error.value)
    assert message.startswith(f"{key}: "), message
    assert problem in message, message
    assert SECRET not in message


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:16500", "http://localhost:16500", "http://[::1]:16500",
                                      "http://127.0.0.2:16500/"])
def test_a_loopback_endpoint_is_the_stand_in(endpoint: str) -> None:
    settings = parse_aws_settings({**MOTO, "endpoint_url": endpoint})
    assert settings is not None and settings.emulated and not settings.execute


@pytest.mark.parametrize(("endpoint", "tls_only"), [
    ("http://127.0.0.1:16500", False),  # moto on loopback: the policy would refuse Atlas itself
    ("https://127.0.0.1:16500", True),
    ("https://s3.example.org", True),
    ("http://localhost.example.com", True),  # never reaches here (refused above); if it did, TLS stays required
    (None, True),
])
def test_only_a_plain_http_stand_in_on_loopback_leaves_the_tls_only_policy_off(
    endpoint: str | None, tls_only: bool
) -> None:
    from infra.aws.providers.answers import wanted_protection

    assert wanted_protection({"aws": {"endpoint_url": endpoint}})["tls_only"] is tls_only


def test_execute_against_moto_is_refused() -> None:
    with pytest.raises(AwsConfigError, match=r"^atlas:aws.execute: true, but http://127.0.0.1:16500 is an AWS API"):
        parse_aws_settings({**MOTO, "execute": True})


def test_world_open_ssh_needs_the_explicit_flag() -> None:
    settings = parse_aws_settings({**REAL, "allowed_ssh_cidrs": ["0.0.0.0/0"], "allow_ssh_from_anywhere": True})
    assert settings is not None and settings.allowed_ssh_cidrs == ("0.0.0.0/0",)


def test_imported_key_pair_from_files(tmp_path: Path) -> None:
    (tmp_path / "id.pub").write_text(PUBLIC_KEY + "\n")
    settings = parse_aws_settings(
        {
            **REAL,
            "ssh_public_key_file": "id.pub",
            "ssh_private_key_file": "id",
            "market": "spot",
            "spot_max_price": "4.5",
        },
        project_dir=tmp_path,
    )
    assert settings is not None
    assert settings.ssh_public_key == PUBLIC_KEY and settings.ssh_private_key_file == tmp_path / "id"
    assert settings.market == "spot" and settings.spot_max_price == 4.5
    with pytest.raises(AwsConfigError, match=r"^atlas:aws.ssh_public_key_file: .* cannot be read"):
        parse_aws_settings({**REAL, "ssh_public_key_file": "missing.pub", "ssh_private_key_file": "id"}, tmp_path)


def test_missing_credentials_fail_naming_the_key() -> None:
    without = {k: v for k, v in REAL.items() if k not in ("access_key_id", "secret_access_key")}
    settings = parse_aws_settings(without)
    assert settings is not None
    with pytest.raises(AwsConfigError, match=r"^atlas:aws.access_key_id: no AWS credentials"):
        resolve_credentials(settings, chain_has_credentials=lambda: False)
    # The standard chain's credentials are used as they are (nothing copied into the stack).
    assert resolve_credentials(settings, chain_has_credentials=lambda: True).credentials.access_key_id is None
    # Config's credentials win without asking the chain.
    configured = parse_aws_settings(REAL)
    assert configured is not None
    assert resolve_credentials(configured, chain_has_credentials=lambda: pytest.fail("chain asked")) is configured


def test_moto_without_credentials_gets_the_emulator_placeholder() -> None:
    settings = parse_aws_settings(MOTO)
    assert settings is not None
    resolved = resolve_credentials(settings, chain_has_credentials=lambda: False)
    assert resolved.credentials == EMULATOR_CREDENTIALS


def test_stack_config_carries_the_aws_section(tmp_path: Path) -> None:
    config = parse_stack_config("hybrid", {"aws": MOTO}, project_with_workloads(tmp_path))
    assert config.aws is not None and config.aws.region == "us-east-1"
    assert config.openshift is None and config.hpc == ()
    with pytest.raises(AtlasConfigError, match=r"^atlas:aws.region"):
        parse_stack_config("hybrid", {"aws": {**MOTO, "region": "mars-1"}}, tmp_path)
    with pytest.raises(AtlasConfigError, match="no environment is enabled"):
        parse_stack_config("hybrid", {"aws": {**MOTO, "enabled": False}}, tmp_path)


def test_the_repository_stacks_parse(tmp_path: Path) -> None:
    import yaml

    from infra.toolchain.pins import REPO_ROOT

    local = yaml.safe_load((REPO_ROOT / "stacks" / "Pulumi.local-hybrid.yaml").read_text())["config"]
    section = local["atlas:aws"]
    settings = parse_aws_settings(section, REPO_ROOT)
    assert settings is not None and settings.emulated and not settings.execute
    hybrid = yaml.safe_load((REPO_ROOT / "stacks" / "Pulumi.hybrid.yaml").read_text())["config"]
    with pytest.raises(AwsConfigError, match="placeholder REPLACE_WITH"):
        parse_aws_settings(hybrid["atlas:aws"], REPO_ROOT)
