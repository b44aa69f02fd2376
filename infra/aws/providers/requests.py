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
        "MetadataOptions": {"HttpTokens": "required"},
    }
    if launch.instance_profile_arn:
        arguments["IamInstanceProfile"] = {"Arn": launch.instance_profile_arn}
    if launch.market == "spot":
        spot: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
        if launch.spot_max_price is not None:
            spot["MaxPrice"] = f"{launch.spot_max_price:.4f}"
        arguments["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    return arguments
