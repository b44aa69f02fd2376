"""The AWS providers against the moto server, the way the Pulumi engine calls them.

Every call is real HTTP to moto; what is left afterwards is listed through boto3 itself, not
through the providers' own view: create, refresh after an instance was terminated (or
stopped) outside, update, destroy with nothing left.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest

from infra.aws import providers
from infra.aws.clients import AwsProviderError
from infra.aws.launch import LaunchSpec, decode_user_data, render_launch_script
from infra.aws.providers import (
    DataBucketProvider,
    InstanceProvider,
    InstanceRoleProvider,
    KeyPairProvider,
    SecurityGroupProvider,
    StagedObjectsProvider,
)
from infra.aws.providers.requests import tls_only_policy
from localenv.layout import Layout

pytestmark = pytest.mark.integration
REGION = "us-east-1"
SECRET_KEY = "integration-secret-" + uuid.uuid4().hex


@pytest.fixture
def aws(moto_env: Layout) -> Iterator[dict[str, Any]]:
    run = uuid.uuid4().hex[:6]
    yield {
        "provider_version": providers.PROVIDER_VERSION,
        "aws": {"region": REGION, "endpoint_url": moto_env.moto_url},
        "aws_secret": {"access_key_id": "AKIAINTEGRATIONTEST", "secret_access_key": SECRET_KEY},
        "name_prefix": f"atlas-it-{run}",
        "tags": {
            "atlas:project": "atlas",
            "atlas:stack": f"it-{run}",
            "atlas:environment": "aws",
            "atlas:run": "1",
        },
    }


def boto(aws: dict[str, Any], service: str) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=aws["aws"]["endpoint_url"],
        aws_access_key_id="AKIAINTEGRATIONTEST",
        aws_secret_access_key=SECRET_KEY,
    )


def tagged(aws: dict[str, Any]) -> dict[str, list[str]]:
    """Everything in the account that carries this test's stack tag, by kind, through boto3."""
    stack = aws["tags"]["atlas:stack"]
    ec2, s3, iam = boto(aws, "ec2"), boto(aws, "s3"), boto(aws, "iam")
    flt = [{"Name": "tag:atlas:stack", "Values": [stack]}]
    instances = [
        i["InstanceId"]
        for r in ec2.describe_instances(Filters=flt)["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    buckets = []
    for bucket in s3.list_buckets()["Buckets"]:
        if bucket["Name"].startswith(aws["name_prefix"]):
            buckets.append(bucket["Name"])
    return {
        "instances": instances,
        "security_groups": [g["GroupId"] for g in ec2.describe_security_groups(Filters=flt)["SecurityGroups"]],
        "key_pairs": [k["KeyPairId"] for k in ec2.describe_key_pairs(Filters=flt)["KeyPairs"]],
        "buckets": buckets,
        "roles": [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith(aws["name_prefix"])],
        "profiles": [
            p["InstanceProfileName"]
            for p in iam.list_instance_profiles()["InstanceProfiles"]
            if p["InstanceProfileName"].startswith(aws["name_prefix"])
        ],
    }


def nothing_left(aws: dict[str, Any]) -> None:
    left = tagged(aws)
    assert left == {k: [] for k in left}, left


def _tags(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def launch_script() -> str:
    return render_launch_script(
        LaunchSpec("it", "aws", "1", "probe", "p3.8xlarge", 4, "Tesla-V100-SXM2-16GB", "ubuntu",
                   "atlas-runs/it/aws/probe", "atlas/it/aws/probe")
    )  # fmt: skip


def test_every_resource_created_refreshed_updated_and_destroyed(aws: dict[str, Any], tmp_path: Path) -> None:
    ec2 = boto(aws, "ec2")
    # Create, in the order the component registers them.
    bucket_props = {**aws}
    bucket = DataBucketProvider().create(bucket_props)
    assert bucket.id.startswith(aws["name_prefix"])
    # Data at rest, as moto records it: encrypted by default; public access blocked.
    s3 = boto(aws, "s3")
    rules = s3.get_bucket_encryption(Bucket=bucket.id)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert s3.get_public_access_block(Bucket=bucket.id)["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True,
    }  # fmt: skip
    # In transit: moto's endpoint is plain HTTP, so the TLS-only policy is left off here and the
    # outputs say so; what the policy does on AWS, moto enforces too: with it, plain HTTP is refused.
    assert bucket.outs is not None and bucket.outs["protection"] == {"encryption": "AES256", "tls_only": False}
    s3.put_bucket_policy(Bucket=bucket.id, Policy=tls_only_policy(bucket.id))
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        s3.put_object(Bucket=bucket.id, Key="probe.txt", Body=b"x")
    assert refused.value.response["Error"]["Code"] in ("AccessDenied", "403")
    s3.delete_bucket_policy(Bucket=bucket.id)
    # Encryption removed outside Atlas: refresh sees it, the next up puts it back.
    s3.delete_bucket_encryption(Bucket=bucket.id)
    refreshed = DataBucketProvider().read(bucket.id, bucket.outs)
    assert refreshed.outs is not None and refreshed.outs["protection"] == {"encryption": None, "tls_only": False}
    assert DataBucketProvider().diff(bucket.id, refreshed.outs, bucket_props).changes
    restored = DataBucketProvider().update(bucket.id, refreshed.outs, bucket_props)
    assert restored.outs is not None
    assert DataBucketProvider().read(bucket.id, restored.outs).outs["protection"] == {  # type: ignore[index]
        "encryption": "AES256", "tls_only": False,
    }  # fmt: skip
    source = tmp_path / "sampler.py"
    source.write_text("print('sampler')\n")
    files = [
        {"path": "jobs/train.sbatch", "content": "#!/bin/bash\necho train\n",
         "sha256": hashlib.sha256(b"#!/bin/bash\necho train\n").hexdigest()},
        {"path": "python/sampler.py", "source": str(source), "sha256": hashlib.sha256(source.read_bytes()).hexdigest()},
    ]  # fmt: skip
    staged_props = {**aws, "bucket": bucket.id, "prefix": "atlas/it/aws/probe", "files": files}
    staged = StagedObjectsProvider().create(staged_props)
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket.id)["Contents"]}
    assert listed == {"atlas/it/aws/probe/jobs/train.sbatch", "atlas/it/aws/probe/python/sampler.py"}
    assert s3.get_object(Bucket=bucket.id, Key="atlas/it/aws/probe/jobs/train.sbatch")["Body"].read() == (
        b"#!/bin/bash\necho train\n"
    )
    role = InstanceRoleProvider().create({**aws, "bucket": bucket.id, "prefix": "atlas/it/aws/probe"})
    key = KeyPairProvider().create({**aws, "public_key": None})
    assert key.outs is not None and "PRIVATE KEY" in key.outs["private_key"]
    group = SecurityGroupProvider().create(
        {**aws, "allowed_ssh_cidrs": ["203.0.113.7/32"], "allow_ssh_from_anywhere": False, "subnet_id": None}
    )
    assert group.outs is not None
    described = ec2.describe_security_groups(GroupIds=[group.id])["SecurityGroups"][0]
    assert providers.ssh_cidrs_of(described) == ["203.0.113.7/32"]

    script = launch_script()
    instance_props = {
        **aws,
        "image_id": "ami-12c6146b",
        "instance_type": "p3.8xlarge",
        "market": "spot",
        "spot_max_price": 5.0,
        "key_name": key.outs["key_name"],
        "security_group_id": group.id,
        "subnet_id": None,
        "instance_profile_arn": role.outs["profile_arn"] if role.outs else None,
        "root_volume_gib": 100,
        "launch_script": script,
        "launch_script_sha256": hashlib.sha256(script.encode()).hexdigest(),
        "bucket": bucket.id,
        "ssh_user": "ubuntu",
        "ssh_private_key_file": None,
        "ssh_secret": {"private_key": key.outs["private_key"]},
        "wait_ready": False,
        "ready_timeout_s": 60,
    }
    check = InstanceProvider().check({}, instance_props)
    assert check.failures == []
    first = InstanceProvider().create(instance_props)
    assert first.outs is not None and first.outs["state"] == "running" and first.outs["lifecycle"] == "spot"
    live = ec2.describe_instances(InstanceIds=[first.id])["Reservations"][0]["Instances"][0]
    assert live["InstanceType"] == "p3.8xlarge" and live["KeyName"] == key.outs["key_name"]
    root = next(m for m in live["BlockDeviceMappings"] if m["DeviceName"] == live["RootDeviceName"])
    volume = ec2.describe_volumes(VolumeIds=[root["Ebs"]["VolumeId"]])["Volumes"][0]
    assert volume["Size"] == 100 and volume["Encrypted"] is True
    # Instance metadata v2 only: no credentials without a session token.
    assert live["MetadataOptions"]["HttpTokens"] == "required"
    assert {t["Key"]: t["Value"] for t in live["Tags"]}["atlas:stack"] == aws["tags"]["atlas:stack"]
    # The user data EC2 holds is the launch script, with the host key Atlas reports in front of it.
    user_data = ec2.describe_instance_attribute(InstanceId=first.id, Attribute="userData")["UserData"]["Value"]
    text = decode_user_data(user_data)
    assert first.outs["host_public_key"] in text and "slurm.conf" in text and f"ATLAS_BUCKET={bucket.id}" in text
    assert set(tagged(aws)["instances"]) == {first.id}

    # Refresh: a running instance reads back running; stopped outside, it reads back stopped and the
    # diff asks for an update, which starts it again.
    ec2.create_tags(Resources=[first.id], Tags=[{"Key": "owner", "Value": "someone else"}])
    read = InstanceProvider().read(first.id, first.outs)
    assert read.id == first.id and read.outs is not None and read.outs["state"] == "running"
    # A tag someone else added is not drift; a changed tag of Atlas's is.
    assert not InstanceProvider().diff(first.id, read.outs, instance_props).changes
    ec2.create_tags(Resources=[first.id], Tags=[{"Key": "atlas:run", "Value": "edited"}])
    edited = InstanceProvider().read(first.id, first.outs)
    assert edited.outs is not None and InstanceProvider().diff(first.id, edited.outs, instance_props).changes
    ec2.create_tags(Resources=[first.id], Tags=_tags(aws["tags"]))
    ec2.stop_instances(InstanceIds=[first.id])
    stopped = InstanceProvider().read(first.id, first.outs)
    assert stopped.outs is not None and stopped.outs["state"] in ("stopping", "stopped")
    diff = InstanceProvider().diff(first.id, stopped.outs, instance_props)
    assert diff.changes and not diff.replaces
    started = InstanceProvider().update(first.id, stopped.outs, instance_props)
    assert started.outs is not None and started.outs["state"] == "running"

    # Terminated outside: refresh says it is gone (empty id), so the next `up` launches a new one.
    ec2.terminate_instances(InstanceIds=[first.id])
    gone = InstanceProvider().read(first.id, first.outs)
    assert gone.id == "" and gone.outs == {}
    second = InstanceProvider().create(instance_props)
    assert second.id != first.id

    # Update: new tags and a new SSH address, in place; a new instance type replaces.
    new_tags = {**aws["tags"], "atlas:run": "2"}
    group_news = {**group.outs, "tags": new_tags, "allowed_ssh_cidrs": ["198.51.100.0/24"]}
    assert SecurityGroupProvider().diff(group.id, group.outs, group_news).replaces == []
    SecurityGroupProvider().update(group.id, group.outs, group_news)
    described = ec2.describe_security_groups(GroupIds=[group.id])["SecurityGroups"][0]
    assert providers.ssh_cidrs_of(described) == ["198.51.100.0/24"]
    assert {t["Key"]: t["Value"] for t in described["Tags"]}["atlas:run"] == "2"
    assert second.outs is not None
    assert (
        "instance_type"
        in InstanceProvider().diff(second.id, second.outs, {**instance_props, "instance_type": "p3.2xlarge"}).replaces
    )
    staged_news = {**staged_props, "files": files[:1]}
    assert staged.outs is not None
    StagedObjectsProvider().update(staged.id, staged.outs, staged_news)
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket.id)["Contents"]}
    assert listed == {"atlas/it/aws/probe/jobs/train.sbatch"}

    # A rule opened outside shows as drift on refresh; the next update closes it.
    ec2.authorize_security_group_ingress(
        GroupId=group.id,
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    after_update = {**group_news, "seen_ssh_cidrs": ["198.51.100.0/24"]}
    drifted = SecurityGroupProvider().read(group.id, after_update)
    assert drifted.outs is not None and "0.0.0.0/0" in drifted.outs["seen_ssh_cidrs"]
    assert SecurityGroupProvider().diff(group.id, drifted.outs, group_news).changes
    SecurityGroupProvider().update(group.id, drifted.outs, group_news)
    described = ec2.describe_security_groups(GroupIds=[group.id])["SecurityGroups"][0]
    assert providers.ssh_cidrs_of(described) == ["198.51.100.0/24"]

    # Destroy, in reverse order; then nothing carries the stack's tag any more.
    InstanceProvider().delete(second.id, second.outs)
    InstanceProvider().delete(first.id, first.outs)  # already terminated: success
    SecurityGroupProvider().delete(group.id, group.outs)
    KeyPairProvider().delete(key.id, key.outs)
    assert role.outs is not None
    InstanceRoleProvider().delete(role.id, role.outs)
    StagedObjectsProvider().delete(staged.id, staged_news)
    DataBucketProvider().delete(bucket.id, {**bucket_props, **(bucket.outs or {})})
    nothing_left(aws)

    # Deleting again, everything already gone, is success; reading says gone.
    SecurityGroupProvider().delete(group.id, group.outs)
    KeyPairProvider().delete(key.id, key.outs)
    InstanceRoleProvider().delete(role.id, role.outs)
    DataBucketProvider().delete(bucket.id, bucket_props)
    StagedObjectsProvider().delete(staged.id, staged_news)
    assert DataBucketProvider().read(bucket.id, bucket_props).id == ""
    assert KeyPairProvider().read(key.id, key.outs).id == ""
    assert SecurityGroupProvider().read(group.id, group.outs).id == ""
    assert InstanceRoleProvider().read(role.id, role.outs).id == ""


def test_imported_key_pair_keeps_no_private_key(aws: dict[str, Any]) -> None:
    _, public = providers.new_host_key()  # any Ed25519 public key line will do
    key = KeyPairProvider().create({**aws, "public_key": public})
    assert key.outs is not None and key.outs["private_key"] is None
    ec2 = boto(aws, "ec2")
    pair = ec2.describe_key_pairs(KeyNames=[key.outs["key_name"]])["KeyPairs"][0]
    assert pair["KeyPairId"] == key.id
    KeyPairProvider().delete(key.id, key.outs)
    nothing_left(aws)


def test_errors_name_the_call_and_never_the_secret(aws: dict[str, Any]) -> None:
    props = {**aws, "aws": {**aws["aws"], "endpoint_url": "http://127.0.0.1:9"}}  # nothing listens there
    with pytest.raises(AwsProviderError) as error:
        DataBucketProvider().create(props)
    assert "creating bucket" in str(error.value) and "endpoint_url" in str(error.value)
    assert SECRET_KEY not in str(error.value)
    # An image the region does not have: the error names the config key to fix.
    script = launch_script()
    missing_image = {
        **aws, "image_id": "ami-0000000000000000f", "instance_type": "p3.8xlarge", "market": "on-demand",
        "key_name": "k", "security_group_id": "sg-1", "root_volume_gib": 100, "launch_script": script, "bucket": "b",
    }  # fmt: skip
    with pytest.raises(AwsProviderError, match=r"ami-0000000000000000f does not exist in us-east-1: fix atlas:aws.ami"):
        InstanceProvider().create(missing_image)
    # Deleting an instance that never existed is success; a missing role reads as gone, not an error.
    InstanceProvider().delete("i-0123456789abcdef0", aws)
    assert InstanceRoleProvider().read("atlas-never-made", aws).id == ""
