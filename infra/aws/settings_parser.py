"""`atlas:aws`, the AWS side of a stack, as a pydantic model validated into the `AwsSettings` dataclass (settings.py).

`AwsModel` gives each key its type, default, description, example and rule;
`parse_aws_settings` validates what `pulumi.Config.get_object("aws")` returns, so every refusal
is tested without an engine; the one file it reads is the public key file the section may name.
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
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints, model_validator

from infra.aws.settings import (
    GPU_INSTANCE_TYPES,
    MARKETS,
    REGIONS,
    AwsConfigError,
    AwsCredentials,
    AwsSettings,
)
from infra.config_schema import (
    Bool,
    ConfigSection,
    Number,
    OneLine,
    Problem,
    Rule,
    StepNames,
    WholeNumber,
    one_line,
    reject_placeholders,
    validate_section,
)
from infra.extras import missing_extra
from infra.loopback import is_loopback_url
from infra.validation import Fields, config_path

KEY = "atlas:aws"
DEFAULT_INSTANCE_TYPE = "p3.8xlarge"  # 4 x V100, as a Satori node (whose V100s have 32 GB)
DEFAULT_SSH_USER = "ubuntu"  # the user of AWS's Deep Learning AMIs on Ubuntu
DEFAULT_ROOT_VOLUME_GIB = 200
DEFAULT_READY_TIMEOUT_S = 1800.0
MAX_INSTANCES = 8
REGION_FIX = "name a commercial region, e.g. us-east-1 (docs/configuration.md lists them)"


AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
ACCESS_KEY_ID = re.compile(r"^[A-Z0-9]{16,128}$")
ENDPOINT_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?/?$")
SSH_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
PUBLIC_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]{40,}( [^\n]*)?$")

_fields = Fields(AwsConfigError)


def _cidrs(value: Any) -> Any:
    raw = [] if value is None else value
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise Problem(f"expected a list, found {type(raw).__name__}", "write a list, e.g. [203.0.113.7/32]")
    result = []
    for i, item in enumerate(raw):
        try:
            network = ipaddress.ip_network(str(item), strict=True)
        except ValueError as error:
            raise Problem(f"{item!r} is not a CIDR block ({error})", "write e.g. 203.0.113.7/32", f"[{i}]") from None
        result.append(str(network))
    return list(dict.fromkeys(result))


def _pattern(regex: re.Pattern[str], what: str, fix: str, max_len: int) -> Rule:
    """One line of text matching `regex` (`what` names it where it does not)."""
    check_text = one_line(max_len)

    def check(value: Any) -> Any:
        text = check_text(value)
        if text is not None and not regex.match(text):
            raise Problem(f"{text!r} is not {what}", fix)
        return text

    return Rule(check, StringConstraints(pattern=regex.pattern))


def _choice(choices: Any, fix: str) -> Any:
    def check(value: Any) -> Any:
        if not isinstance(value, str) or value not in choices:
            listing = f"use one of: {', '.join(sorted(choices))}" if len(choices) <= 20 else fix
            raise Problem(f"{value!r} is not known", listing)
        return value

    return BeforeValidator(check)


def _instance_type(value: Any) -> Any:
    if str(value) not in GPU_INSTANCE_TYPES:
        raise Problem(
            f"{value!r} is not a GPU instance type Atlas knows",
            f"use one of: {', '.join(GPU_INSTANCE_TYPES)} (default {DEFAULT_INSTANCE_TYPE}, 4 x V100)",
        )
    return str(value)


def _access_key_id(value: Any) -> Any:
    # Never echo either value: a key pasted into the wrong field must not end up in a log.
    if value is not None and (not isinstance(value, str) or not ACCESS_KEY_ID.match(value)):
        raise Problem("is not an AWS access key id (value not shown)", "paste the AKIA... id")
    return value


def _secret_key(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not 16 <= len(value) <= 128
                              or any(c.isspace() for c in value)):
        raise Problem("is not an AWS secret access key (value not shown)", "paste the key")
    return value


def _public_key_line(value: Any) -> Any:
    if value is not None and (
        not isinstance(value, str) or "PRIVATE KEY" in value or not PUBLIC_KEY.match(value.strip())
    ):
        raise Problem("is not an OpenSSH public key line (value not shown)", "use the .pub half, e.g. id_ed25519.pub")
    return value


AMI_FIX = (
    "an NVIDIA-driver image of the region, e.g. AWS's Deep Learning Base AMI (Ubuntu 22.04): "
    "aws ssm get-parameter --name /aws/service/deeplearning/ami/x86_64/"
    "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)


class AwsModel(ConfigSection):
    """`atlas:aws`: rented AWS GPU instances as a third environment, the steps run as Slurm jobs over SSH."""

    enabled: Bool = Field(True, description="false: the section is not read and no AWS side is built.",
                          examples=[False])
    region: Annotated[str, _choice(REGIONS, REGION_FIX), Field(json_schema_extra={"enum": sorted(REGIONS)})]\
        = Field(description="The AWS region (commercial partition).", examples=["us-east-1"])
    endpoint_url: Annotated[str, _pattern(ENDPOINT_URL, "an http(s) URL", "e.g. http://127.0.0.1:16500", 255)] | None \
        = Field(None, description="Another AWS API endpoint; plain http only for a stand-in on this machine (moto), "
        "whose instances run nothing.", examples=["http://127.0.0.1:16500"])
    access_key_id: Annotated[str, BeforeValidator(_access_key_id)] | None = Field(
        None, description="An access key id (set with --secret, with secret_access_key); neither: the standard "
        "AWS chain (AWS_PROFILE, ~/.aws/credentials, SSO, an instance role).", examples=["<set with --secret>"])
    secret_access_key: Annotated[str, BeforeValidator(_secret_key)] | None = Field(
        None, description="The secret access key of access_key_id, a Pulumi secret.", examples=["<set with --secret>"],
        json_schema_extra={"x-atlas-secret": True})
    instance_type: Annotated[str, BeforeValidator(_instance_type),
                             Field(json_schema_extra={"enum": list(GPU_INSTANCE_TYPES)})] = Field(
        DEFAULT_INSTANCE_TYPE, description="A GPU instance type Atlas knows (its GPUs go into the report).",
        examples=["g5.xlarge"])
    instance_count: Annotated[int, WholeNumber(1, MAX_INSTANCES)] = Field(
        1, description="How many instances.", examples=[2])
    market: Annotated[str, _choice(MARKETS, "on-demand or spot"), Field(json_schema_extra={"enum": list(MARKETS)})]\
        = Field("on-demand", description="on-demand or spot.", examples=["spot"])
    spot_max_price: Annotated[float, Number(0.001, 1000.0, 1.0)] | None = Field(
        None, description="The most a spot instance-hour may cost, in USD (market: spot only).", examples=[1.5])
    ami: Annotated[str, _pattern(AMI_ID, "an AMI id", AMI_FIX, 64)] = Field(
        description="The image: one with NVIDIA's driver, of the region.", examples=["ami-0123456789abcdef0"])
    subnet_id: Annotated[
        str, _pattern(SUBNET_ID, "a subnet id", "write subnet-..., or leave it out (default VPC)", 64)
    ] | None = Field(None, description="The subnet; default: the default VPC's.", examples=["subnet-0123456789abcdef0"])
    root_volume_gib: Annotated[int, WholeNumber(8, 16384)] = Field(
        DEFAULT_ROOT_VOLUME_GIB, description="The root volume's size (encrypted), GiB.", examples=[500])
    ssh_user: Annotated[str, _pattern(SSH_USER, "a login name", "e.g. ubuntu or ec2-user", 32)] = Field(
        DEFAULT_SSH_USER, description="The image's login user.", examples=["ec2-user"])
    ssh_public_key: Annotated[str, BeforeValidator(_public_key_line)] | None = Field(
        None, description="An OpenSSH public key line imported as the key pair; none (with no file): AWS creates "
        "one.", examples=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... alex@laptop"])
    ssh_public_key_file: Annotated[str, OneLine()] | None = Field(
        None, description="A .pub file to import instead (relative to the project folder).",
        examples=["~/.ssh/id_ed25519.pub"])
    ssh_private_key_file: Annotated[str, OneLine()] | None = Field(
        None, description="The private half of the imported key, to run the steps over SSH.",
        examples=["~/.ssh/id_ed25519"])
    allowed_ssh_cidrs: Annotated[list[str], BeforeValidator(_cidrs)] = Field(
        default_factory=list, description="Addresses SSH is open to (the security group); required when the steps "
        "run (execute).", examples=[["203.0.113.7/32"]])
    allow_ssh_from_anywhere: Bool = Field(
        False, description="Allow a /0 in allowed_ssh_cidrs (SSH open to the whole internet).", examples=[True])
    execute: Bool | None = Field(
        None, description="Run the steps on the instances; default true, false against a stand-in (moto).",
        examples=[False])
    ready_timeout_seconds: Annotated[float, Number(60, 7200, DEFAULT_READY_TIMEOUT_S)] = Field(
        DEFAULT_READY_TIMEOUT_S, description="How long an instance may take to be ready.", examples=[3600])
    poll_interval_seconds: Annotated[float, Number(1.0, 3600.0, 30.0)] = Field(
        30.0, description="Seconds between job-status queries.", examples=[60])
    wait_for: StepNames | None = Field(
        None, description="Steps whose jobs `pulumi up` waits for; default: every step but the last.",
        examples=[["make-hdf5"]])

    @model_validator(mode="after")
    def _consistent(self) -> AwsModel:
        given = self.model_fields_set
        if (self.access_key_id is None) != (self.secret_access_key is None):
            missing = "secret_access_key" if self.secret_access_key is None else "access_key_id"
            raise Problem("missing: give both keys of the pair, or neither (the standard AWS chain)",
                          f"pulumi config set --secret --path {{here}}.{missing} <value>", f".{missing}")
        if "spot_max_price" in given and self.market != "spot":
            raise Problem("only applies to market: spot", "remove it, or set market: spot", ".spot_max_price")
        if self.ssh_public_key is not None and self.ssh_public_key_file is not None:
            raise Problem("give ssh_public_key or ssh_public_key_file, not both", "remove one", ".ssh_public_key")
        has_public = self.ssh_public_key is not None or self.ssh_public_key_file is not None
        if self.ssh_private_key_file is not None and not has_public:
            raise Problem("given without the public half",
                          "set ssh_public_key_file too, or remove both (AWS then creates the key pair)",
                          ".ssh_private_key_file")
        for i, cidr in enumerate(self.allowed_ssh_cidrs):
            if cidr.endswith("/0") and not self.allow_ssh_from_anywhere:
                raise Problem(f"{cidr} opens SSH to the whole internet",
                              "name your own address (curl -s checkip.amazonaws.com)/32, or set "
                              "{here}.allow_ssh_from_anywhere: true", f".allowed_ssh_cidrs[{i}]")
        endpoint = self.endpoint_url
        emulated = self.emulated
        if endpoint is not None and endpoint.startswith("http://") and not emulated:
            raise Problem(
                f"{endpoint!r} is plain HTTP to a host that is not this machine's loopback (localhost, "
                "127.0.0.0/8 or [::1], written so): data and requests would cross the network unencrypted",
                "use https:// (plain http only for the local stand-in on this machine)",
                ".endpoint_url")
        execute = self.runs_steps
        if execute and emulated:
            raise Problem(f"true, but {endpoint} is an AWS API stand-in on this machine (moto): its instances run "
                          "nothing", "set execute: false, or point endpoint_url at AWS", ".execute")
        if execute and not self.allowed_ssh_cidrs:
            raise Problem("empty, but the steps run over SSH (execute: true)",
                          "name the addresses Pulumi runs from, e.g. [203.0.113.7/32]", ".allowed_ssh_cidrs")
        if execute and has_public and self.ssh_private_key_file is None:
            raise Problem("required to run the steps when the key pair is imported",
                          "point it at the private half of ssh_public_key_file", ".ssh_private_key_file")
        return self

    @property
    def emulated(self) -> bool:
        return self.endpoint_url is not None and is_loopback_url(self.endpoint_url)

    @property
    def runs_steps(self) -> bool:
        return (not self.emulated) if self.execute is None else self.execute

    def settings(self, key: str, project_dir: Path | None) -> AwsSettings:
        """The `AwsSettings` the components take (the public key file read now, naming its key)."""
        if self.runs_steps:
            reason = ""
        elif self.emulated:
            reason = f"{self.endpoint_url} is an AWS API stand-in (moto): its instances run nothing"
        else:
            reason = f"{key}.execute is false: the instances were created, no step was run"
        endpoint = self.endpoint_url
        credentials = AwsCredentials()
        if self.access_key_id is not None and self.secret_access_key is not None:
            credentials = AwsCredentials(self.access_key_id, self.secret_access_key,
                                         f"secret config {key}.access_key_id / secret_access_key")
        return AwsSettings(
            region=self.region,
            endpoint_url=endpoint.rstrip("/") if endpoint else None,
            instance_type=GPU_INSTANCE_TYPES[self.instance_type],
            instance_count=self.instance_count,
            market=self.market,  # type: ignore[arg-type]  # checked against MARKETS
            spot_max_price=self.spot_max_price,
            ami=self.ami,
            subnet_id=self.subnet_id,
            root_volume_gib=self.root_volume_gib,
            ssh_user=self.ssh_user,
            ssh_public_key=_public_key(self, key, project_dir),
            ssh_private_key_file=config_path(self.ssh_private_key_file, project_dir)
            if self.ssh_private_key_file else None,
            allowed_ssh_cidrs=tuple(self.allowed_ssh_cidrs),
            allow_ssh_from_anywhere=self.allow_ssh_from_anywhere,
            execute=self.runs_steps,
            not_executed_reason=reason,
            ready_timeout_s=self.ready_timeout_seconds,
            poll_interval_s=self.poll_interval_seconds,
            wait_for=self.wait_for,
            credentials=credentials,
        )


def _public_key(model: AwsModel, key: str, project_dir: Path | None) -> str | None:
    inline, source = model.ssh_public_key, f"{key}.ssh_public_key"
    if model.ssh_public_key_file is not None:
        file = config_path(model.ssh_public_key_file, project_dir)
        source = f"{key}.ssh_public_key_file"
        try:
            inline = file.read_text().strip()
        except OSError as error:
            raise _fields.fail(source, f"{file} cannot be read ({error.strerror})", "point it at a .pub file") from None
    if inline is None:
        return None
    if not isinstance(inline, str) or "PRIVATE KEY" in inline or not PUBLIC_KEY.match(inline.strip()):
        raise _fields.fail(
            source, "is not an OpenSSH public key line (value not shown)", "use the .pub half, e.g. id_ed25519.pub"
        )
    return inline.strip()


def parse_aws_settings(raw: Any, project_dir: Path | None = None, key: str = KEY) -> AwsSettings | None:
    """The section validated by `AwsModel`, or None when it is absent or `enabled: false`."""
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        reject_placeholders(raw, key, AwsConfigError)
    model = validate_section(AwsModel, raw, key, AwsConfigError)
    return model.settings(key, project_dir) if model.enabled else None


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
