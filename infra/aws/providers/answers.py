"""Reading what AWS answers: the tags Atlas manages, what guards a bucket, a security group's SSH
rules, an instance's outputs. Pure functions of boto3's response dicts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from infra.loopback import is_loopback_url


def _tag_dict(tags: Sequence[Mapping[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags or ()}


def our_tags(tags: Sequence[Mapping[str, str]] | None, props: Mapping[str, Any]) -> dict[str, str]:
    """The tags Atlas manages, as read back: a tag someone else added is theirs, not drift
    (create_tags would never remove it, so counting it would make every later diff an update)."""
    wanted = props.get("tags") or {}
    return {k: v for k, v in _tag_dict(tags).items() if k in wanted}


def wanted_protection(props: Mapping[str, Any]) -> dict[str, Any]:
    """Encrypted by default always; TLS only wherever the API itself is TLS. The local stand-in
    (moto, plain HTTP on loopback; settings refuse plain HTTP elsewhere) enforces bucket policies,
    so a TLS-only policy there would refuse Atlas's own requests: it is left off and the outputs say
    so (`protection.tls_only: false`). Only there: a plain-HTTP endpoint elsewhere (which settings
    refuse) keeps the policy, so its requests fail rather than cross the network unencrypted."""
    endpoint = str((props.get("aws") or {}).get("endpoint_url") or "")
    plain_local = urlsplit(endpoint).scheme == "http" and is_loopback_url(endpoint)
    return {"encryption": "AES256", "tls_only": not plain_local}


def bucket_protection(encryption: Mapping[str, Any] | None, policy: str | None) -> dict[str, Any]:
    """What guards a bucket's data, as read back: its default encryption algorithm (None: none),
    and whether its policy refuses plain HTTP. Compared with `wanted_protection` for drift."""
    rules = ((encryption or {}).get("ServerSideEncryptionConfiguration") or {}).get("Rules") or []
    algorithms = [((r.get("ApplyServerSideEncryptionByDefault") or {}).get("SSEAlgorithm")) for r in rules]
    tls_only = False
    if policy:
        try:
            statements = json.loads(policy).get("Statement") or []
        except ValueError:
            statements = []
        tls_only = any(
            s.get("Effect") == "Deny"
            and str((s.get("Condition") or {}).get("Bool", {}).get("aws:SecureTransport")).lower() == "false"
            for s in statements
        )
    return {"encryption": next((a for a in algorithms if a), None), "tls_only": tls_only}


def ssh_cidrs_of(group: Mapping[str, Any]) -> list[str]:
    """The CIDRs a described security group lets reach port 22 (any rule that covers it)."""
    found: list[str] = []
    for rule in group.get("IpPermissions", []):
        covers = rule.get("IpProtocol") == "-1" or (
            rule.get("IpProtocol") == "tcp" and rule.get("FromPort", 0) <= 22 <= rule.get("ToPort", 65535)
        )
        if covers:
            found += [r["CidrIp"] for r in rule.get("IpRanges", [])]
            found += [r["CidrIpv6"] for r in rule.get("Ipv6Ranges", [])]
    return sorted(set(found))


def instance_outputs(props: Mapping[str, Any], instance: Mapping[str, Any]) -> dict[str, Any]:
    """An Instance's outputs from `describe_instances`' answer for it."""
    return {
        **props,
        "instance_id": instance["InstanceId"],
        "state": instance["State"]["Name"],
        "public_ip": instance.get("PublicIpAddress") or "",
        "private_ip": instance.get("PrivateIpAddress") or "",
        "availability_zone": (instance.get("Placement") or {}).get("AvailabilityZone", ""),
        "lifecycle": "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand",
        "launched_at": str(instance.get("LaunchTime") or ""),
        "tags": our_tags(instance.get("Tags"), props),
    }
