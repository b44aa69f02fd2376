"""`atlas doctor` on the AWS side (infra/aws/doctor.py): credentials found and accepted, the region
enabled, the instance type offered, each judged on boto3's answers (as moto, from AWS's own data,
gives them), and the checks in order against fake clients: no credentials, a token AWS refuses, an
opt-in region, a type the region does not offer."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import botocore.exceptions
import pytest

from infra.aws.doctor import aws_checks, judge_offerings, judge_region
from infra.aws.settings import AwsCredentials, AwsSettings
from infra.aws.settings_parser import parse_aws_settings
from infra.doctor import Check, Status

MOTO = "http://127.0.0.1:16500"


def settings(**keys: Any) -> AwsSettings:
    raw = {
        "region": "us-east-1", "instance_type": "p5.48xlarge", "ami": "ami-1e749f67",
        "allowed_ssh_cidrs": ["203.0.113.7/32"], **keys,
    }
    parsed = parse_aws_settings(raw, None, "atlas:aws")  # type: ignore[arg-type]
    assert parsed is not None
    return parsed


class FakeAws:
    """boto3 clients answering as AWS (or moto) does: each call a value, or an exception to raise."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.seen: list[AwsSettings] = []

    def client(self, found: AwsSettings, service: str) -> Any:
        self.seen.append(found)
        fake = self

        class Client:
            def __getattr__(self, name: str) -> Callable[..., Any]:
                def call(**kwargs: Any) -> Any:
                    fake.calls.append((service, name, kwargs))
                    answer = fake.answers[name]
                    if isinstance(answer, Exception):
                        raise answer
                    return answer

                return call

        return Client()


IDENTITY = {"Account": "123456789012", "Arn": "arn:aws:sts::123456789012:user/moto", "UserId": "AKIA"}
REGIONS = {"Regions": [{"RegionName": "us-east-1", "OptInStatus": "opt-in-not-required"}]}
OFFERED = {
    "InstanceTypeOfferings": [{"InstanceType": "p5.48xlarge", "LocationType": "region", "Location": "us-east-1"}]
}
EVERYTHING = {"get_caller_identity": IDENTITY, "describe_regions": REGIONS, "describe_instance_type_offerings": OFFERED}


def table(checks: tuple[Check, ...]) -> list[tuple[str, str]]:
    return [(c.name, c.status.value) for c in checks]


def test_moto_with_its_placeholder_credentials_passes_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    aws = FakeAws(**EVERYTHING)
    checks = aws_checks(settings(endpoint_url=MOTO), client=aws.client)
    assert table(checks) == [("credentials", "ok"), ("region", "ok"), ("instance-type", "ok")]
    assert checks[0].detail == (
        f"accepted at {MOTO}: account 123456789012, arn:aws:sts::123456789012:user/moto (from the emulator's "
        "placeholder)"
    )
    assert checks[1].detail == "region 'us-east-1' answers (opt-in-not-required)"
    assert checks[2].detail == "p5.48xlarge (8 x NVIDIA-H100-80GB-HBM3) is offered in us-east-1; the stack asks for 1"
    # The checks ask with the credentials pulumi up would use; nothing but reads is called.
    assert {s.credentials.source for s in aws.seen} == {"the emulator's placeholder"}
    assert [name for _service, name, _kwargs in aws.calls] == [
        "get_caller_identity", "describe_regions", "describe_instance_type_offerings"
    ]
    assert aws.calls[2][2]["Filters"] == [{"Name": "instance-type", "Values": ["p5.48xlarge"]}]


def test_no_credentials_anywhere_fails_naming_the_keys_and_the_rest_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    import infra.aws.settings_parser as parser

    monkeypatch.setattr(parser, "_standard_chain_has_credentials", lambda: False)
    checks = aws_checks(settings(), client=FakeAws(**EVERYTHING).client)
    assert table(checks) == [("credentials", "fail"), ("region", "skip"), ("instance-type", "skip")]
    assert checks[0].detail.startswith("atlas:aws.access_key_id: no AWS credentials")
    assert "pulumi config set --secret --path atlas:aws.access_key_id" in checks[0].fix


def test_credentials_aws_refuses_are_its_own_reason_never_the_key() -> None:
    refused = botocore.exceptions.ClientError(
        {"Error": {"Code": "InvalidClientTokenId", "Message": "The security token included in the request is "
                                                              "invalid."}},
        "GetCallerIdentity",
    )
    secret = dataclasses.replace(
        settings(), credentials=AwsCredentials("AKIAEXAMPLE", "very-secret-value", "atlas:aws (secret config)")
    )
    checks = aws_checks(secret, client=FakeAws(**{**EVERYTHING, "get_caller_identity": refused}).client)
    assert table(checks)[0] == ("credentials", "fail")
    assert checks[0].detail == (
        "sts get-caller-identity: AWS answered InvalidClientTokenId: The security token included in the request is "
        "invalid."
    )
    assert checks[0].fix.startswith("set atlas:aws.access_key_id and secret_access_key as secrets")
    assert all("very-secret-value" not in c.detail + c.fix for c in checks)


def test_an_opt_in_region_and_a_type_not_offered_each_fail_with_their_fix() -> None:
    found = judge_region("ap-east-2", {"Regions": [{"RegionName": "ap-east-2", "OptInStatus": "not-opted-in"}]})
    assert (found.status, found.detail) == (Status.FAIL, "region 'ap-east-2' is not enabled for this account (an "
                                                         "opt-in region)")
    assert judge_region("xx-1", {"Regions": []}).fix == (
        "set atlas:aws.region to a region the account has (`aws ec2 describe-regions`)"
    )
    p3 = settings(instance_type="p3.8xlarge")
    missing = judge_offerings(p3, {"InstanceTypeOfferings": []})
    assert (missing.status, missing.detail) == (Status.FAIL, "p3.8xlarge is not offered in us-east-1")
    assert "or another atlas:aws.instance_type" in missing.fix
    on_moto = settings(instance_type="p3.8xlarge", endpoint_url=MOTO)
    checks = aws_checks(on_moto, client=FakeAws(**{**EVERYTHING, "describe_instance_type_offerings": {}}).client)
    assert table(checks)[-1] == ("instance-type", "fail")
