"""Parsing of `atlas:aws`, the AWS side of a stack, into the `AwsSettings` model (settings.py).

`parse_aws_settings` takes what `pulumi.Config.get_object("aws")` returns, so every refusal is
tested without an engine; the one file it reads is the public key file the section may name.
What it refuses, before any resource exists: an unknown region or instance type (settings.py's
static tables), SSH open to the world without `allow_ssh_from_anywhere: true`, half a credential
pair, and a stack with no credentials at all (checked by `resolve_credentials`, which may ask
the standard AWS chain).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from infra.aws.settings import (
    GPU_INSTANCE_TYPES,
    LOOPBACK_HOSTS,
    MARKETS,
    REGIONS,
    AwsConfigError,
    AwsCredentials,
    AwsSettings,
)
from infra.extras import missing_extra
from infra.validation import Fields, config_path

KEY = "atlas:aws"
DEFAULT_INSTANCE_TYPE = "p3.8xlarge"  # 4 x V100, as a Satori node (whose V100s have 32 GB)
DEFAULT_SSH_USER = "ubuntu"  # the user of AWS's Deep Learning AMIs on Ubuntu
DEFAULT_ROOT_VOLUME_GIB = 200
DEFAULT_READY_TIMEOUT_S = 1800.0
MAX_INSTANCES = 8


AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
ACCESS_KEY_ID = re.compile(r"^[A-Z0-9]{16,128}$")
ENDPOINT_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?/?$")
SSH_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
PUBLIC_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]{40,}( [^\n]*)?$")

ALLOWED_KEYS = (
    "enabled",
    "region",
    "endpoint_url",
    "access_key_id",
    "secret_access_key",
    "instance_type",
    "instance_count",
    "market",
    "spot_max_price",
    "ami",
    "subnet_id",
    "root_volume_gib",
    "ssh_user",
    "ssh_public_key",
    "ssh_public_key_file",
    "ssh_private_key_file",
    "allowed_ssh_cidrs",
    "allow_ssh_from_anywhere",
    "execute",
    "ready_timeout_seconds",
    "poll_interval_seconds",
    "wait_for",
)


_fields = Fields(AwsConfigError)


def _cidrs(section: Mapping[str, Any], key: str, anywhere_allowed: bool) -> tuple[str, ...]:
    raw = section.get("allowed_ssh_cidrs", [])
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise _fields.fail(
            f"{key}.allowed_ssh_cidrs", f"expected a list, found {type(raw).__name__}", "e.g. [203.0.113.7/32]"
        )
    result = []
    for i, item in enumerate(raw):
        item_key = f"{key}.allowed_ssh_cidrs[{i}]"
        try:
            network = ipaddress.ip_network(str(item), strict=True)
        except ValueError as error:
            raise _fields.fail(
                item_key, f"{item!r} is not a CIDR block ({error})", "write e.g. 203.0.113.7/32"
            ) from None
        if network.prefixlen == 0 and not anywhere_allowed:
            raise _fields.fail(
                item_key,
                f"{item} opens SSH to the whole internet",
                f"name your own address (curl -s checkip.amazonaws.com)/32, or set {key}.allow_ssh_from_anywhere: true",
            )
        result.append(str(network))
    return tuple(dict.fromkeys(result))


def _public_key(section: Mapping[str, Any], key: str, project_dir: Path | None) -> str | None:
    inline = section.get("ssh_public_key")
    path = _fields.optional_text(section, "ssh_public_key_file", key)
    if inline is not None and path is not None:
        raise _fields.fail(
            f"{key}.ssh_public_key", "give ssh_public_key or ssh_public_key_file, not both", "remove one"
        )
    if path is not None:
        file = config_path(path, project_dir)
        try:
            inline = file.read_text().strip()
        except OSError as error:
            raise _fields.fail(
                f"{key}.ssh_public_key_file", f"{file} cannot be read ({error.strerror})", "point it at a .pub file"
            ) from None
        source = f"{key}.ssh_public_key_file"
    else:
        source = f"{key}.ssh_public_key"
    if inline is None:
        return None
    if not isinstance(inline, str) or "PRIVATE KEY" in inline or not PUBLIC_KEY.match(inline.strip()):
        raise _fields.fail(
            source, "is not an OpenSSH public key line (value not shown)", "use the .pub half, e.g. id_ed25519.pub"
        )
    return inline.strip()


def _credentials(section: Mapping[str, Any], key: str) -> AwsCredentials:
    access, secret = section.get("access_key_id"), section.get("secret_access_key")
    if (access is None) != (secret is None):
        missing = "secret_access_key" if secret is None else "access_key_id"
        raise _fields.fail(
            f"{key}.{missing}",
            "missing: give both keys of the pair, or neither (the standard AWS chain)",
            f"pulumi config set --secret --path {key}.{missing} <value>",
        )
    if access is None:
        return AwsCredentials()
    # Never echo either value: a key pasted into the wrong field must not end up in a log.
    if not isinstance(access, str) or not ACCESS_KEY_ID.match(access):
        raise _fields.fail(
            f"{key}.access_key_id", "is not an AWS access key id (value not shown)", "paste the AKIA... id"
        )
    if not isinstance(secret, str) or not 16 <= len(secret) <= 128 or any(c.isspace() for c in secret):
        raise _fields.fail(
            f"{key}.secret_access_key", "is not an AWS secret access key (value not shown)", "paste the key"
        )
    return AwsCredentials(access, secret, f"secret config {key}.access_key_id / secret_access_key")


def parse_aws_settings(raw: Any, project_dir: Path | None = None, key: str = KEY) -> AwsSettings | None:
    """The validated section, or None when it is absent or `enabled: false`."""
    section = _fields.enabled_section(raw, key, ALLOWED_KEYS)
    if section is None:
        return None
    _fields.reject_placeholders(section, key)
    region = _fields.choice(section, "region", key, REGIONS, None, f"pulumi config set --path {key}.region us-east-1")
    endpoint = _fields.optional_text(section, "endpoint_url", key, 255)
    if endpoint is not None and not ENDPOINT_URL.match(endpoint):
        raise _fields.fail(f"{key}.endpoint_url", f"{endpoint!r} is not an http(s) URL", "e.g. http://127.0.0.1:16500")
    instance_type = GPU_INSTANCE_TYPES.get(str(section.get("instance_type", DEFAULT_INSTANCE_TYPE)))
    if instance_type is None:
        raise _fields.fail(
            f"{key}.instance_type",
            f"{section.get('instance_type')!r} is not a GPU instance type Atlas knows",
            f"use one of: {', '.join(GPU_INSTANCE_TYPES)} (default {DEFAULT_INSTANCE_TYPE}, 4 x V100)",
        )
    count = _fields.integer(section, "instance_count", key, 1, 1, MAX_INSTANCES)
    market = _fields.choice(section, "market", key, MARKETS, "on-demand", "on-demand or spot")
    spot_max_price = None
    if "spot_max_price" in section:
        if market != "spot":
            raise _fields.fail(
                f"{key}.spot_max_price", "only applies to market: spot", "remove it, or set market: spot"
            )
        spot_max_price = _fields.number(section, "spot_max_price", key, 1.0, 0.001, 1000.0)
    ami = _fields.optional_text(section, "ami", key, 64)
    if ami is None or not AMI_ID.match(ami):
        raise _fields.fail(
            f"{key}.ami",
            "required but missing" if ami is None else f"{ami!r} is not an AMI id",
            "an NVIDIA-driver image of the region, e.g. AWS's Deep Learning Base AMI (Ubuntu 22.04): "
            "aws ssm get-parameter --name /aws/service/deeplearning/ami/x86_64/"
            "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
        )
    subnet = _fields.optional_text(section, "subnet_id", key, 64)
    if subnet is not None and not SUBNET_ID.match(subnet):
        raise _fields.fail(
            f"{key}.subnet_id", f"{subnet!r} is not a subnet id", "write subnet-..., or leave it out (default VPC)"
        )
    ssh_user = _fields.optional_text(section, "ssh_user", key, 32) or DEFAULT_SSH_USER
    if not SSH_USER.match(ssh_user):
        raise _fields.fail(f"{key}.ssh_user", f"{ssh_user!r} is not a login name", "e.g. ubuntu or ec2-user")
    public_key = _public_key(section, key, project_dir)
    private_key_file = _fields.optional_text(section, "ssh_private_key_file", key)
    if private_key_file is not None and public_key is None:
        raise _fields.fail(
            f"{key}.ssh_private_key_file",
            "given without the public half",
            "set ssh_public_key_file too, or remove both (AWS then creates the key pair)",
        )
    anywhere = _fields.boolean(section, "allow_ssh_from_anywhere", key, False)
    cidrs = _cidrs(section, key, anywhere)
    emulated_endpoint = endpoint is not None and any(h in endpoint for h in LOOPBACK_HOSTS)
    if endpoint is not None and endpoint.startswith("http://") and not emulated_endpoint:
        raise _fields.fail(
            f"{key}.endpoint_url",
            f"{endpoint!r} is plain HTTP to another machine: data and requests would cross the network unencrypted",
            "use https:// (plain http only for the local stand-in on this machine)",
        )
    execute = _fields.boolean(section, "execute", key, not emulated_endpoint)
    if execute and emulated_endpoint:
        raise _fields.fail(
            f"{key}.execute",
            f"true, but {endpoint} is an AWS API stand-in on this machine (moto): its instances run nothing",
            "set execute: false, or point endpoint_url at AWS",
        )
    if execute and not cidrs:
        raise _fields.fail(
            f"{key}.allowed_ssh_cidrs",
            "empty, but the steps run over SSH (execute: true)",
            "name the addresses Pulumi runs from, e.g. [203.0.113.7/32]",
        )
    if execute and public_key is not None and private_key_file is None:
        raise _fields.fail(
            f"{key}.ssh_private_key_file",
            "required to run the steps when the key pair is imported",
            "point it at the private half of ssh_public_key_file",
        )
    if execute:
        reason = ""
    elif emulated_endpoint:
        reason = f"{endpoint} is an AWS API stand-in (moto): its instances run nothing"
    else:
        reason = f"{key}.execute is false: the instances were created, no step was run"
    wait_for = _fields.step_names(section, "wait_for", key)
    return AwsSettings(
        region=region,
        endpoint_url=endpoint.rstrip("/") if endpoint else None,
        instance_type=instance_type,
        instance_count=count or 1,
        market=market,  # type: ignore[arg-type]  # checked against MARKETS
        spot_max_price=spot_max_price,
        ami=ami,
        subnet_id=subnet,
        root_volume_gib=_fields.integer(section, "root_volume_gib", key, DEFAULT_ROOT_VOLUME_GIB, 8, 16384) or 8,
        ssh_user=ssh_user,
        ssh_public_key=public_key,
        ssh_private_key_file=config_path(private_key_file, project_dir) if private_key_file else None,
        allowed_ssh_cidrs=cidrs,
        allow_ssh_from_anywhere=anywhere,
        execute=execute,
        not_executed_reason=reason,
        ready_timeout_s=_fields.number(section, "ready_timeout_seconds", key, DEFAULT_READY_TIMEOUT_S, 60, 7200),
        poll_interval_s=_fields.number(section, "poll_interval_seconds", key, 30.0, 1.0, 3600.0),
        wait_for=wait_for,
        credentials=_credentials(section, key),
    )


def aws_settings(project_dir: Path | None = None, **keys: Any) -> AwsSettings:
    """The settings of `AwsEnvironmentArgs` for a program that builds them itself: the keys of a
    stack's `atlas:aws` (region, ami, instance_type, allowed_ssh_cidrs, ...) as keyword arguments of
    plain values, with the same defaults and checks, and the credentials known to exist
    (`resolve_credentials`). Paths resolve against `project_dir`; errors name `aws.<key>`.

        aws_settings(region="us-east-1", ami="ami-0123456789abcdef0", allowed_ssh_cidrs=["203.0.113.7/32"])
    """
    settings = parse_aws_settings(keys, project_dir, key="aws")
    if settings is None:
        raise _fields.fail("aws.enabled", "false: there are no settings to build", "leave enabled out")
    return resolve_credentials(settings, key="aws")


# Moto accepts any credentials; these name what they are if they ever show up somewhere.
EMULATOR_CREDENTIALS = AwsCredentials("MOTOEMULATORKEYID", "moto-accepts-any-secret-key", "the emulator's placeholder")


def resolve_credentials(
    settings: AwsSettings, chain_has_credentials: Callable[[], bool] | None = None, key: str = KEY
) -> AwsSettings:
    """Settings whose credentials are known to exist: config's, the standard chain's, or (for an
    endpoint on this machine only) the emulator's placeholder. None anywhere fails, naming the key."""
    if settings.credentials.access_key_id is not None:
        return settings
    check = chain_has_credentials or _standard_chain_has_credentials
    if check():
        return settings
    if settings.emulated:
        return _replace_credentials(settings, EMULATOR_CREDENTIALS)
    raise _fields.fail(
        f"{key}.access_key_id",
        "no AWS credentials: not in config, and the standard chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, "
        "~/.aws/credentials, SSO, instance role) has none",
        f"pulumi config set --secret --path {key}.access_key_id <id> and {key}.secret_access_key, "
        "or configure the AWS CLI",
    )


def _replace_credentials(settings: AwsSettings, credentials: AwsCredentials) -> AwsSettings:
    import dataclasses

    return dataclasses.replace(settings, credentials=credentials)


def _standard_chain_has_credentials() -> bool:
    try:
        import boto3
        import botocore.exceptions
    except ModuleNotFoundError as missing:
        raise missing_extra(missing, "aws", "infra.aws (AwsEnvironment)") from None

    try:
        return boto3.session.Session().get_credentials() is not None
    except botocore.exceptions.BotoCoreError:
        return False
