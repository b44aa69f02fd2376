"""What the AWS providers send: tag lists, IAM policy documents, SSH ingress rules, and the
`run_instances` request. Pure functions of typed inputs, so a change to them shows in a test."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

from infra.aws.providers.inputs import LaunchRequest

EC2_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
)
ROLE_POLICY_NAME = "atlas-read-staged-data"


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": str(v)} for k, v in sorted(tags.items())]


def read_policy(bucket: str, prefix: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*"},
                {
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": f"arn:aws:s3:::{bucket}",
                    "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
                },
            ],
        },
        sort_keys=True,
    )


# Every object encrypted at rest by default (S3-managed keys: no KMS key to create, rotate or pay
# for), with S3 Bucket Keys; and no request to the bucket over plain HTTP.
BUCKET_ENCRYPTION = {
    "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}, "BucketKeyEnabled": True}]
}


def tls_only_policy(bucket: str) -> str:
    """A bucket policy that refuses every request not made over TLS (aws:SecureTransport false),
    whoever makes it; what the instances' role may read is granted by the role (read_policy)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AtlasDenyPlainHttp",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        },
        sort_keys=True,
    )


def ssh_permissions(cidrs: Sequence[str]) -> list[dict[str, Any]]:
    v4 = [{"CidrIp": c, "Description": "atlas: SSH"} for c in cidrs if ipaddress.ip_network(c).version == 4]
    v6 = [{"CidrIpv6": c, "Description": "atlas: SSH"} for c in cidrs if ipaddress.ip_network(c).version == 6]
    return [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": v4, "Ipv6Ranges": v6}] if cidrs else []


def run_instances_arguments(launch: LaunchRequest, user_data: bytes, root_device: str) -> dict[str, Any]:
    """`run_instances`'s arguments for one instance; the root volume is resized under the image's
    own root device name (sda1 on Ubuntu, xvda elsewhere)."""
    tags = tag_list(launch.tags)
    arguments: dict[str, Any] = {
        "ImageId": launch.image_id,
        "InstanceType": launch.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "KeyName": launch.key_name,
        "UserData": user_data,
        "BlockDeviceMappings": [
            {
                "DeviceName": root_device,
                "Ebs": {
                    "VolumeSize": launch.root_volume_gib,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                    # At rest with the account's default EBS key; the image's snapshot need not be.
                    "Encrypted": True,
                },
            }
        ],
        "NetworkInterfaces": [
            {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": True,
                "Groups": [launch.security_group_id],
                **({"SubnetId": launch.subnet_id} if launch.subnet_id else {}),
                "DeleteOnTermination": True,
            }
        ],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
        # IMDSv2 only: a token is needed to read the role's credentials, so a request forged through
        # the instance (SSRF) cannot; one hop, so a container on the instance cannot either.
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1, "HttpEndpoint": "enabled"},
    }
    if launch.instance_profile_arn:
        arguments["IamInstanceProfile"] = {"Arn": launch.instance_profile_arn}
    if launch.market == "spot":
        spot: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
        if launch.spot_max_price is not None:
            spot["MaxPrice"] = f"{launch.spot_max_price:.4f}"
        arguments["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    return arguments
