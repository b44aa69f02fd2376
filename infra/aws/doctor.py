"""`atlas doctor` on the AWS side: the credentials, the region and the instance type, asked of AWS
(or the endpoint the stack names: moto locally) and changing nothing.

The checks, in order, each needing the ones named:
- `credentials`: found (the stack's secret keys, the standard chain, or an emulator's placeholder,
  as `pulumi up` resolves them: settings_parser.resolve_credentials) and accepted
  (`sts get-caller-identity`, which needs no permission);
- `region` (credentials): the region answers and is enabled for the account (`ec2
  describe-regions`: an opt-in region not opted in is refused there);
- `instance-type` (region): the region offers the instance type (`ec2
  describe-instance-type-offerings`).
Every call goes through infra/aws/clients.py, whose errors name the call and AWS's reason and
never a credential. The deciders are pure functions of boto3's answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from infra.aws.settings import AwsSettings
from infra.aws.settings_parser import KEY, resolve_credentials
from infra.doctor import Check, Checklist, Finding
from infra.errors import AtlasConfigError

# A client of one AWS service for the settings (infra.aws.clients.client's, by default).
ClientFor = Callable[[AwsSettings, str], Any]


def client_for(settings: AwsSettings, service: str) -> Any:
    from infra.aws.clients import client

    secret = {
        "access_key_id": settings.credentials.access_key_id,
        "secret_access_key": settings.credentials.secret_access_key,
    }
    where = {"region": settings.region, "endpoint_url": settings.endpoint_url}
    return client({"aws": where, "aws_secret": secret}, service)


def _expected() -> tuple[type[BaseException], ...]:
    from infra.aws.clients import AwsProviderError

    return (AwsProviderError, AtlasConfigError, OSError)


# --- the deciders --------------------------------------------------------------------------------


def judge_identity(answer: Mapping[str, Any], source: str, settings: AwsSettings) -> Finding:
    where = f" at {settings.endpoint_url}" if settings.endpoint_url else ""
    return Finding.ok(
        f"accepted{where}: account {answer.get('Account', '?')}, {answer.get('Arn', '?')} (from {source})"
    )


def judge_region(region: str, answer: Mapping[str, Any]) -> Finding:
    found = [r for r in answer.get("Regions") or [] if r.get("RegionName") == region]
    if not found:
        return Finding.fail(
            f"AWS lists no region {region!r} for this account",
            f"set {KEY}.region to a region the account has (`aws ec2 describe-regions`)",
        )
    status = str(found[0].get("OptInStatus") or "opt-in-not-required")
    if status == "not-opted-in":
        return Finding.fail(
            f"region {region!r} is not enabled for this account (an opt-in region)",
            f"enable it (AWS console: Account, AWS Regions) or set {KEY}.region to an enabled one",
        )
    return Finding.ok(f"region {region!r} answers ({status})")


def judge_offerings(settings: AwsSettings, answer: Mapping[str, Any]) -> Finding:
    name, region = settings.instance_type.name, settings.region
    offered = [o for o in answer.get("InstanceTypeOfferings") or [] if o.get("InstanceType") == name]
    if not offered:
        return Finding.fail(
            f"{name} is not offered in {region}",
            f"choose a region that offers it for {KEY}.region (`aws ec2 describe-instance-type-offerings "
            f"--filters Name=instance-type,Values={name} --region <region>`) or another {KEY}.instance_type",
        )
    gpus = settings.instance_type
    return Finding.ok(
        f"{name} ({gpus.gpus} x {gpus.gpu_product}) is offered in {region}; the stack asks for "
        f"{settings.instance_count}"
    )


# --- the checks --------------------------------------------------------------------------------


def aws_checks(settings: AwsSettings, client: ClientFor = client_for) -> tuple[Check, ...]:
    """Every check of the stack's AWS side (`atlas:aws`), in order."""
    from infra.aws.clients import must

    checks = Checklist(_expected())
    resolved: list[AwsSettings] = []

    def credentials() -> Finding:
        resolved.append(resolve_credentials(settings))
        found = resolved[0]
        sts = client(found, "sts")
        return judge_identity(must("sts get-caller-identity", sts.get_caller_identity), found.credentials.source, found)

    def region() -> Finding:
        ec2 = client(resolved[0], "ec2")
        answer = must(
            "ec2 describe-regions",
            lambda: ec2.describe_regions(AllRegions=True, RegionNames=[settings.region]),
        )
        return judge_region(settings.region, answer)

    def offerings() -> Finding:
        ec2 = client(resolved[0], "ec2")
        answer = must(
            "ec2 describe-instance-type-offerings",
            lambda: ec2.describe_instance_type_offerings(
                LocationType="region",
                Filters=[{"Name": "instance-type", "Values": [settings.instance_type.name]}],
            ),
        )
        return judge_offerings(settings, answer)

    checks.run(
        "credentials",
        credentials,
        fallback_fix=f"set {KEY}.access_key_id and secret_access_key as secrets, or configure the AWS CLI's profile",
    )
    checks.run("region", region, needs=("credentials",), fallback_fix=f"check {KEY}.region and {KEY}.endpoint_url")
    checks.run("instance-type", offerings, needs=("region",), fallback_fix=f"check {KEY}.instance_type")
    return tuple(checks.checks)
