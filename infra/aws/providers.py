"""Pulumi dynamic resources over boto3: the AWS side's bucket, staged objects, instance role,
key pair, security group and GPU instances.

Lifecycle, as for the HPC side's batch jobs:
- preview: `check` refuses bad inputs (tolerating values not known yet) and `diff` says what
  is replaced and what is updated in place; the launch script is an input, shown line by line;
- up: each `create` names its AWS object from a prefix plus a random suffix (as Pulumi's own
  auto-naming does, so a replacement never collides with its predecessor) and tags it with the
  stack, run, environment and project;
- refresh: `read` asks AWS; an object deleted outside, or an instance terminated outside, reads
  back as gone (empty id), so the next `up` creates it again; an instance stopped outside reads
  back `stopped`, and the next `up` starts it;
- destroy: `delete` removes what `create` made; an object already gone is success.

Providers hold no live objects (dill pickles them into state): boto3 clients come from
clients.py's per-process cache. Credentials travel in the `aws_secret` input, which the
component makes a secret; `additional_secret_outputs` keeps it (and a created key pair's
private key) encrypted in state.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from infra.aws.clients import AwsProviderError, call, client, must
from infra.aws.launch import READY_MARK, compose_user_data
from infra.hpc import ssh
from infra.hpc.providers import is_unknown

_AWS_DIR = Path(__file__).resolve().parent
# Code changes show up in `pulumi preview` as an update of every AWS resource (and nothing else).
PROVIDER_VERSION = (
    "1+"
    + hashlib.sha256(
        b"".join((_AWS_DIR / n).read_bytes() for n in ("providers.py", "clients.py", "launch.py"))
    ).hexdigest()[:12]
)
NAME_PREFIX = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")
TAG_KEYS = ("atlas:project", "atlas:stack", "atlas:environment", "atlas:run")
INSTANCE_GONE = ("shutting-down", "terminated")
WAIT_RUNNING_S = 600.0
WAIT_TERMINATED_S = 900.0
DEPENDENCY_RETRY_S = 300.0
SECRET_OUTPUTS = ["aws_secret", "ssh_secret", "private_key"]


# --- shared pieces -----------------------------------------------------------------------------


def _suffix() -> str:
    return secrets.token_hex(4)


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": str(v)} for k, v in sorted(tags.items())]


def _tag_dict(tags: Sequence[Mapping[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags or ()}


def _our_tags(tags: Sequence[Mapping[str, str]] | None, props: Mapping[str, Any]) -> dict[str, str]:
    """The tags Atlas manages, as read back: a tag someone else added is theirs, not drift
    (create_tags would never remove it, so counting it would make every later diff an update)."""
    wanted = props.get("tags") or {}
    return {k: v for k, v in _tag_dict(tags).items() if k in wanted}


def _check_common(news: Mapping[str, Any]) -> list[pulumi.dynamic.CheckFailure]:
    failures: list[pulumi.dynamic.CheckFailure] = []
    target = news.get("aws")
    if not is_unknown(target) and not (isinstance(target, Mapping) and target.get("region")):
        failures.append(pulumi.dynamic.CheckFailure("aws.region", "required"))
    prefix = news.get("name_prefix")
    if not is_unknown(prefix) and not (isinstance(prefix, str) and NAME_PREFIX.match(prefix)):
        failures.append(
            pulumi.dynamic.CheckFailure("name_prefix", f"{prefix!r}: use at most 41 lower-case letters, digits, '-'")
        )
    tags = news.get("tags")
    if not is_unknown(tags):
        missing = [k for k in TAG_KEYS if not (isinstance(tags, Mapping) and tags.get(k))]
        if missing:
            failures.append(pulumi.dynamic.CheckFailure("tags", f"missing {', '.join(missing)}"))
    return failures


def _changed(olds: Mapping[str, Any], news: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    return [k for k in keys if is_unknown(news.get(k)) or olds.get(k) != news.get(k)]


# Inputs every AWS resource has; a change to any of them is an update in place.
COMMON_UPDATES = ("provider_version", "aws_secret", "tags")


def _diff(
    olds: Mapping[str, Any], news: Mapping[str, Any], replaces: Sequence[str], updates: Sequence[str] = ()
) -> pulumi.dynamic.DiffResult:
    replace = _changed(olds, news, ("aws", "name_prefix", *replaces))
    update = _changed(olds, news, (*COMMON_UPDATES, *updates))
    return pulumi.dynamic.DiffResult(changes=bool(replace or update), replaces=replace, delete_before_replace=False)


def _wait(what: str, check: Callable[[], bool], timeout_s: float, interval_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AwsProviderError(
                f"{what}: still not done after {timeout_s:.0f} s; run the command again to keep waiting"
            )
        time.sleep(interval_s)


def _gone() -> pulumi.dynamic.ReadResult:
    """What `read` returns for an object that no longer exists: the engine drops it from state."""
    return pulumi.dynamic.ReadResult("", {})


# --- S3: the data bucket -----------------------------------------------------------------------


class DataBucketProvider(pulumi.dynamic.ResourceProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        return pulumi.dynamic.CheckResult(news, _check_common(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        return _diff(olds, news, ())

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        s3 = client(props, "s3")
        name = f"{props['name_prefix']}-{_suffix()}"
        region = props["aws"]["region"]
        arguments: dict[str, Any] = {"Bucket": name}
        if region != "us-east-1":  # us-east-1 refuses its own name as a location constraint
            arguments["CreateBucketConfiguration"] = {"LocationConstraint": region}
        must(f"creating bucket {name}", lambda: s3.create_bucket(**arguments))
        must(
            f"blocking public access to {name}",
            lambda: s3.put_public_access_block(
                Bucket=name,
                PublicAccessBlockConfiguration={
                    "BlockPublicAcls": True,
                    "IgnorePublicAcls": True,
                    "BlockPublicPolicy": True,
                    "RestrictPublicBuckets": True,
                },
            ),
        )
        self._tag(props, name)
        return pulumi.dynamic.CreateResult(name, {**props, "bucket": name, "arn": f"arn:aws:s3:::{name}"})

    def _tag(self, props: Mapping[str, Any], name: str) -> None:
        s3 = client(props, "s3")
        must(
            f"tagging bucket {name}",
            lambda: s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": _tag_list(props["tags"])}),
        )

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        s3 = client(props, "s3")
        found = call(f"reading bucket {id_}", lambda: s3.head_bucket(Bucket=id_), gone_codes=("404", "NoSuchBucket"))
        if found is None:
            return _gone()
        tagging = call(
            f"reading the tags of bucket {id_}", lambda: s3.get_bucket_tagging(Bucket=id_), gone_codes=("NoSuchTagSet",)
        )
        return pulumi.dynamic.ReadResult(id_, {**props, "tags": _our_tags((tagging or {}).get("TagSet"), props)})

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        self._tag(news, id_)
        return pulumi.dynamic.UpdateResult({**news, "bucket": id_, "arn": f"arn:aws:s3:::{id_}"})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        s3 = client(props, "s3")
        # A bucket is deleted only when empty: every object version and delete marker first.
        pages = call(
            f"listing bucket {id_}",
            lambda: list(s3.get_paginator("list_object_versions").paginate(Bucket=id_)),
            gone_codes=("NoSuchBucket",),
        )
        if pages is None:
            return
        for page in pages:
            objects = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
            ]
            if objects:
                must(f"emptying bucket {id_}", partial(s3.delete_objects, Bucket=id_, Delete={"Objects": objects}))
        call(f"deleting bucket {id_}", lambda: s3.delete_bucket(Bucket=id_), gone_codes=("NoSuchBucket",))


class DataBucket(pulumi.dynamic.Resource, module="aws", name="DataBucket"):
    bucket: pulumi.Output[str]
    arn: pulumi.Output[str]

    def __init__(self, name: str, *, common: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(DataBucketProvider(), name, {**common, "bucket": None, "arn": None}, _secret_opts(opts))


# --- S3: the staged files ----------------------------------------------------------------------


def _object_body(entry: Mapping[str, Any]) -> bytes:
    if entry.get("content") is not None:
        return str(entry["content"]).encode()
    return Path(str(entry["source"])).read_bytes()


def _present(props: Mapping[str, Any]) -> dict[str, str | None]:
    """sha256 (from the object's metadata) of each wanted key; None where it is missing."""
    s3 = client(props, "s3")
    bucket, prefix = props["bucket"], props["prefix"]
    found: dict[str, str | None] = {f"{prefix}/{f['path']}": None for f in props["files"]}
    pages = call(
        f"listing s3://{bucket}/{prefix}/",
        lambda: list(s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")),
        gone_codes=("NoSuchBucket",),
    )
    listed = {o["Key"] for page in pages or () for o in page.get("Contents", [])}
    for key in found:
        if key in listed:
            head = call(
                f"reading s3://{bucket}/{key}", partial(s3.head_object, Bucket=bucket, Key=key), gone_codes=("404",)
            )
            found[key] = (head or {}).get("Metadata", {}).get("sha256")
    return found


class StagedObjectsProvider(pulumi.dynamic.ResourceProvider):
    """Files under `s3://<bucket>/<prefix>/`, each checked by the sha256 kept in its metadata."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = [f for f in _check_common(news) if f.property != "name_prefix"]
        prefix = news.get("prefix")
        if not is_unknown(prefix) and not (isinstance(prefix, str) and re.match(r"^[A-Za-z0-9._/-]{1,512}$", prefix)):
            failures.append(pulumi.dynamic.CheckFailure("prefix", f"{prefix!r} is not a plain key prefix"))
        for i, entry in enumerate(news.get("files") or []):
            if is_unknown(entry):
                continue
            path = str(entry.get("path", ""))
            if not re.match(r"^[A-Za-z0-9._/+-]{1,512}$", path) or ".." in path.split("/") or path.startswith("/"):
                failures.append(pulumi.dynamic.CheckFailure(f"files[{i}].path", f"{path!r} is not a relative path"))
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        result = _diff(olds, news, ("bucket", "prefix"), ("files",))
        present = olds.get("present_sha256") or {}
        wanted = {f"{olds.get('prefix')}/{f['path']}": f["sha256"] for f in olds.get("files") or []}
        if present and any(present.get(k) != v for k, v in wanted.items()):
            # Refresh found an object changed or deleted outside: put it back.
            return pulumi.dynamic.DiffResult(changes=True, replaces=result.replaces, delete_before_replace=False)
        return result

    def _stage(self, props: Mapping[str, Any], previous: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        s3 = client(props, "s3")
        bucket, prefix = props["bucket"], props["prefix"]
        present = _present(props)
        total = 0
        for entry in props["files"]:
            key = f"{prefix}/{entry['path']}"
            body = _object_body(entry)
            digest = hashlib.sha256(body).hexdigest()
            if digest != entry["sha256"]:
                raise AwsProviderError(f"{entry['path']}: its content changed since preview; run `pulumi up` again")
            total += len(body)
            if present.get(key) == digest:
                continue
            must(
                f"uploading s3://{bucket}/{key}",
                partial(
                    s3.put_object,
                    Bucket=bucket,
                    Key=key,
                    Body=body,
                    Metadata={"sha256": digest},
                    ServerSideEncryption="AES256",
                ),
            )
        wanted = {f"{prefix}/{f['path']}" for f in props["files"]}
        stale = [f"{prefix}/{f['path']}" for f in previous if f"{prefix}/{f['path']}" not in wanted]
        self._remove(props, stale)
        keys = sorted(wanted)
        return {
            **props,
            "keys": keys,
            "total_bytes": total,
            "present_sha256": {f"{prefix}/{f['path']}": f["sha256"] for f in props["files"]},
        }

    def _remove(self, props: Mapping[str, Any], keys: Sequence[str]) -> None:
        s3 = client(props, "s3")
        for start in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[start : start + 1000]]
            call(
                f"deleting staged objects from s3://{props['bucket']}",
                partial(s3.delete_objects, Bucket=props["bucket"], Delete={"Objects": chunk}),
                gone_codes=("NoSuchBucket",),
            )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        return pulumi.dynamic.CreateResult(f"s3://{props['bucket']}/{props['prefix']}/", self._stage(props))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        return pulumi.dynamic.ReadResult(id_, {**props, "present_sha256": _present(props)})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(self._stage(news, olds.get("files") or ()))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        self._remove(props, [f"{props['prefix']}/{f['path']}" for f in props.get("files") or []])


class StagedObjects(pulumi.dynamic.Resource, module="aws", name="StagedObjects"):
    keys: pulumi.Output[list[str]]
    total_bytes: pulumi.Output[int]

    def __init__(
        self,
        name: str,
        *,
        common: Mapping[str, Any],
        bucket: pulumi.Input[str],
        prefix: str,
        files: Sequence[Mapping[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            **common,
            "bucket": bucket,
            "prefix": prefix,
            "files": [dict(f) for f in files],
            "keys": None,
            "total_bytes": None,
            "present_sha256": None,
        }
        super().__init__(StagedObjectsProvider(), name, props, _secret_opts(opts))


# --- IAM: the instances' role (read the bucket) ------------------------------------------------

_EC2_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
)
ROLE_POLICY_NAME = "atlas-read-staged-data"


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


class InstanceRoleProvider(pulumi.dynamic.ResourceProvider):
    """An IAM role the instances assume, allowed to read the staged prefix, and its instance profile."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        return pulumi.dynamic.CheckResult(news, _check_common(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        return _diff(olds, news, (), ("bucket", "prefix"))

    def _policy(self, props: Mapping[str, Any], role: str) -> None:
        iam = client(props, "iam")
        document = read_policy(props["bucket"], props["prefix"])
        must(
            f"writing the policy of role {role}",
            lambda: iam.put_role_policy(RoleName=role, PolicyName=ROLE_POLICY_NAME, PolicyDocument=document),
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        iam = client(props, "iam")
        name = f"{props['name_prefix']}-{_suffix()}"
        tags = _tag_list(props["tags"])
        must(
            f"creating role {name}",
            lambda: iam.create_role(RoleName=name, AssumeRolePolicyDocument=_EC2_TRUST, Tags=tags),
        )
        self._policy(props, name)
        profile = must(
            f"creating instance profile {name}",
            lambda: iam.create_instance_profile(InstanceProfileName=name, Tags=tags),
        )
        must(
            f"adding role {name} to its instance profile",
            lambda: iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name),
        )
        arn = profile["InstanceProfile"]["Arn"]
        return pulumi.dynamic.CreateResult(name, {**props, "role_name": name, "profile_name": name, "profile_arn": arn})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        iam = client(props, "iam")
        found = call(
            f"reading instance profile {id_}",
            lambda: iam.get_instance_profile(InstanceProfileName=id_),
            gone_codes=("NoSuchEntity",),
        )
        role = call(f"reading role {id_}", lambda: iam.get_role(RoleName=id_), gone_codes=("NoSuchEntity",))
        if found is None or role is None:
            # Half of it gone is as good as gone: the next `up` creates both afresh.
            self.delete(id_, props)
            return _gone()
        return pulumi.dynamic.ReadResult(id_, {**props, "profile_arn": found["InstanceProfile"]["Arn"]})

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        self._policy(news, id_)
        return pulumi.dynamic.UpdateResult(
            {**news, "role_name": id_, "profile_name": id_, "profile_arn": olds.get("profile_arn")}
        )

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        iam = client(props, "iam")
        gone = ("NoSuchEntity",)
        call(
            f"removing role {id_} from its profile",
            lambda: iam.remove_role_from_instance_profile(InstanceProfileName=id_, RoleName=id_),
            gone_codes=gone,
        )
        call(
            f"deleting instance profile {id_}",
            lambda: iam.delete_instance_profile(InstanceProfileName=id_),
            gone_codes=gone,
        )
        call(
            f"deleting the policy of role {id_}",
            lambda: iam.delete_role_policy(RoleName=id_, PolicyName=ROLE_POLICY_NAME),
            gone_codes=gone,
        )
        call(f"deleting role {id_}", lambda: iam.delete_role(RoleName=id_), gone_codes=gone)


class InstanceRole(pulumi.dynamic.Resource, module="aws", name="InstanceRole"):
    role_name: pulumi.Output[str]
    profile_name: pulumi.Output[str]
    profile_arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        common: Mapping[str, Any],
        bucket: pulumi.Input[str],
        prefix: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            **common,
            "bucket": bucket,
            "prefix": prefix,
            "role_name": None,
            "profile_name": None,
            "profile_arn": None,
        }
        super().__init__(InstanceRoleProvider(), name, props, _secret_opts(opts))


# --- EC2: key pair -----------------------------------------------------------------------------


class KeyPairProvider(pulumi.dynamic.ResourceProvider):
    """Imports the public half of the user's key, or has AWS create one (its private half is
    returned once, and kept only as a Pulumi secret)."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = _check_common(news)
        public = news.get("public_key")
        if public is not None and not is_unknown(public) and "PRIVATE KEY" in str(public):
            failures.append(pulumi.dynamic.CheckFailure("public_key", "is a private key (value not shown)"))
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        return _diff(olds, news, ("public_key",))

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        ec2 = client(props, "ec2")
        name = f"{props['name_prefix']}-{_suffix()}"
        tags = [{"ResourceType": "key-pair", "Tags": _tag_list(props["tags"])}]
        private_key = None
        if props.get("public_key"):
            made = must(
                f"importing key pair {name}",
                lambda: ec2.import_key_pair(
                    KeyName=name, PublicKeyMaterial=str(props["public_key"]).encode(), TagSpecifications=tags
                ),
            )
        else:
            made = must(
                f"creating key pair {name}",
                lambda: ec2.create_key_pair(KeyName=name, KeyType="ed25519", TagSpecifications=tags),
            )
            private_key = made["KeyMaterial"]
        outs = {
            **props,
            "key_name": name,
            "key_pair_id": made["KeyPairId"],
            "fingerprint": made.get("KeyFingerprint", ""),
            "private_key": private_key,
        }
        return pulumi.dynamic.CreateResult(made["KeyPairId"], outs)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        ec2 = client(props, "ec2")
        selector = {"KeyNames": [props["key_name"]]} if props.get("key_name") else {"KeyPairIds": [id_]}
        found = call(
            f"reading key pair {id_}",
            lambda: ec2.describe_key_pairs(**selector),
            gone_codes=("InvalidKeyPair.NotFound",),
        )
        # Matched by id as well: moto (5.2) answers a KeyPairIds filter with every key pair.
        pair = next((p for p in (found or {}).get("KeyPairs", []) if p.get("KeyPairId") == id_), None)
        if pair is None:
            return _gone()
        return pulumi.dynamic.ReadResult(
            id_, {**props, "key_name": pair["KeyName"], "tags": _our_tags(pair.get("Tags"), props)}
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        ec2 = client(news, "ec2")
        must(f"tagging key pair {id_}", lambda: ec2.create_tags(Resources=[id_], Tags=_tag_list(news["tags"])))
        kept = {k: olds.get(k) for k in ("key_name", "key_pair_id", "fingerprint", "private_key")}
        return pulumi.dynamic.UpdateResult({**news, **kept})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        ec2 = client(props, "ec2")
        # By name where known: moto (5.2) ignores KeyPairId in DeleteKeyPair; AWS takes either.
        selector = {"KeyName": props["key_name"]} if props.get("key_name") else {"KeyPairId": id_}
        call(
            f"deleting key pair {id_}",
            lambda: ec2.delete_key_pair(**selector),
            gone_codes=("InvalidKeyPair.NotFound",),
        )


class KeyPair(pulumi.dynamic.Resource, module="aws", name="KeyPair"):
    key_name: pulumi.Output[str]
    key_pair_id: pulumi.Output[str]
    private_key: pulumi.Output[str | None]

    def __init__(
        self,
        name: str,
        *,
        common: Mapping[str, Any],
        public_key: str | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            **common,
            "public_key": public_key,
            "key_name": None,
            "key_pair_id": None,
            "fingerprint": None,
            "private_key": None,
        }
        super().__init__(KeyPairProvider(), name, props, _secret_opts(opts))


# --- EC2: security group -----------------------------------------------------------------------


def _ssh_permissions(cidrs: Sequence[str]) -> list[dict[str, Any]]:
    v4 = [{"CidrIp": c, "Description": "atlas: SSH"} for c in cidrs if ipaddress.ip_network(c).version == 4]
    v6 = [{"CidrIpv6": c, "Description": "atlas: SSH"} for c in cidrs if ipaddress.ip_network(c).version == 6]
    return [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": v4, "Ipv6Ranges": v6}] if cidrs else []


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


def _world_open(cidrs: Sequence[str]) -> bool:
    return any(ipaddress.ip_network(c).prefixlen == 0 for c in cidrs)


class SecurityGroupProvider(pulumi.dynamic.ResourceProvider):
    """SSH from the configured CIDRs only; nothing else in. Refresh reads the rules back, so a
    rule someone added outside shows up as drift and the next `up` removes it."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = _check_common(news)
        cidrs = news.get("allowed_ssh_cidrs")
        if not is_unknown(cidrs):
            try:
                parsed = [str(ipaddress.ip_network(c)) for c in cidrs or []]
            except (TypeError, ValueError) as error:
                failures.append(pulumi.dynamic.CheckFailure("allowed_ssh_cidrs", str(error)))
            else:
                if _world_open(parsed) and news.get("allow_ssh_from_anywhere") is not True:
                    failures.append(
                        pulumi.dynamic.CheckFailure(
                            "allowed_ssh_cidrs", "opens SSH to the whole internet without allow_ssh_from_anywhere"
                        )
                    )
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        result = _diff(olds, news, ("subnet_id",), ("allowed_ssh_cidrs", "allow_ssh_from_anywhere"))
        seen = olds.get("seen_ssh_cidrs")
        if seen is not None and sorted(seen) != sorted(olds.get("allowed_ssh_cidrs") or []):
            return pulumi.dynamic.DiffResult(changes=True, replaces=result.replaces, delete_before_replace=False)
        return result

    def _vpc(self, props: Mapping[str, Any]) -> str:
        ec2 = client(props, "ec2")
        if props.get("subnet_id"):
            subnets = must("reading the subnet", lambda: ec2.describe_subnets(SubnetIds=[props["subnet_id"]]))
            return str(subnets["Subnets"][0]["VpcId"])
        vpcs = must(
            "finding the default VPC",
            lambda: ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}]),
        )["Vpcs"]
        if not vpcs:
            raise AwsProviderError(
                f"region {props['aws']['region']} has no default VPC: set atlas:aws.subnet_id to a public subnet"
            )
        return str(vpcs[0]["VpcId"])

    def _authorize(self, props: Mapping[str, Any], group_id: str, cidrs: Sequence[str]) -> None:
        ec2 = client(props, "ec2")
        if cidrs:
            call(
                f"opening SSH in {group_id}",
                lambda: ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=_ssh_permissions(cidrs)),
                gone_codes=("InvalidPermission.Duplicate",),
            )

    def _revoke(self, props: Mapping[str, Any], group_id: str, cidrs: Sequence[str]) -> None:
        ec2 = client(props, "ec2")
        if cidrs:
            call(
                f"closing SSH in {group_id}",
                lambda: ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=_ssh_permissions(cidrs)),
                gone_codes=("InvalidPermission.NotFound",),
            )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        ec2 = client(props, "ec2")
        name = f"{props['name_prefix']}-{_suffix()}"
        vpc = self._vpc(props)
        made = must(
            f"creating security group {name}",
            lambda: ec2.create_security_group(
                GroupName=name,
                Description="Atlas GPU instances: SSH from the configured addresses only",
                VpcId=vpc,
                TagSpecifications=[{"ResourceType": "security-group", "Tags": _tag_list(props["tags"])}],
            ),
        )
        group_id = made["GroupId"]
        cidrs = list(props.get("allowed_ssh_cidrs") or [])
        self._authorize(props, group_id, cidrs)
        outs = {**props, "group_id": group_id, "group_name": name, "vpc_id": vpc, "seen_ssh_cidrs": sorted(cidrs)}
        return pulumi.dynamic.CreateResult(group_id, outs)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        ec2 = client(props, "ec2")
        found = call(
            f"reading security group {id_}",
            lambda: ec2.describe_security_groups(GroupIds=[id_]),
            gone_codes=("InvalidGroup.NotFound", "InvalidGroupId.NotFound"),
        )
        if not found or not found.get("SecurityGroups"):
            return _gone()
        group = found["SecurityGroups"][0]
        return pulumi.dynamic.ReadResult(
            id_, {**props, "seen_ssh_cidrs": ssh_cidrs_of(group), "tags": _our_tags(group.get("Tags"), props)}
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        ec2 = client(news, "ec2")
        wanted = sorted(news.get("allowed_ssh_cidrs") or [])
        seen = olds.get("seen_ssh_cidrs")
        have: list[str] = sorted(seen if seen is not None else olds.get("allowed_ssh_cidrs") or [])
        self._revoke(news, id_, [c for c in have if c not in wanted])
        self._authorize(news, id_, [c for c in wanted if c not in have])
        must(f"tagging security group {id_}", lambda: ec2.create_tags(Resources=[id_], Tags=_tag_list(news["tags"])))
        kept = {k: olds.get(k) for k in ("group_id", "group_name", "vpc_id")}
        return pulumi.dynamic.UpdateResult({**news, **kept, "seen_ssh_cidrs": wanted})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        ec2 = client(props, "ec2")
        deadline = time.monotonic() + DEPENDENCY_RETRY_S
        while True:
            try:
                call(
                    f"deleting security group {id_}",
                    lambda: ec2.delete_security_group(GroupId=id_),
                    gone_codes=("InvalidGroup.NotFound", "InvalidGroupId.NotFound"),
                )
                return
            except AwsProviderError as error:
                # An instance that is still shutting down keeps its group in use for a while.
                if "DependencyViolation" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(5)


class SecurityGroup(pulumi.dynamic.Resource, module="aws", name="SecurityGroup"):
    group_id: pulumi.Output[str]
    vpc_id: pulumi.Output[str]
    seen_ssh_cidrs: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        *,
        common: Mapping[str, Any],
        allowed_ssh_cidrs: Sequence[str],
        allow_ssh_from_anywhere: bool,
        subnet_id: str | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            **common,
            "allowed_ssh_cidrs": list(allowed_ssh_cidrs),
            "allow_ssh_from_anywhere": allow_ssh_from_anywhere,
            "subnet_id": subnet_id,
            "group_id": None,
            "group_name": None,
            "vpc_id": None,
            "seen_ssh_cidrs": None,
        }
        super().__init__(SecurityGroupProvider(), name, props, _secret_opts(opts))


# --- EC2: GPU instances ------------------------------------------------------------------------

# Inputs that define the machine: a change replaces the instance.
INSTANCE_DEFINING_INPUTS = (
    "image_id",
    "instance_type",
    "market",
    "spot_max_price",
    "key_name",
    "security_group_id",
    "subnet_id",
    "instance_profile_arn",
    "root_volume_gib",
    "launch_script_sha256",
    "bucket",
)


def new_host_key() -> tuple[str, str]:
    """An Ed25519 SSH host key: (private key in OpenSSH format, public key line)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public


def _describe(props: Mapping[str, Any], instance_id: str) -> dict[str, Any] | None:
    ec2 = client(props, "ec2")
    found = call(
        f"reading instance {instance_id}",
        lambda: ec2.describe_instances(InstanceIds=[instance_id]),
        gone_codes=("InvalidInstanceID.NotFound",),
    )
    for reservation in (found or {}).get("Reservations", []):
        for instance in reservation.get("Instances", []):
            return dict(instance)
    return None


def _instance_outs(props: Mapping[str, Any], instance: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **props,
        "instance_id": instance["InstanceId"],
        "state": instance["State"]["Name"],
        "public_ip": instance.get("PublicIpAddress") or "",
        "private_ip": instance.get("PrivateIpAddress") or "",
        "availability_zone": (instance.get("Placement") or {}).get("AvailabilityZone", ""),
        "lifecycle": "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand",
        "launched_at": str(instance.get("LaunchTime") or ""),
        "tags": _our_tags(instance.get("Tags"), props),
    }


def _ready_endpoint(props: Mapping[str, Any], host: str, host_key: str) -> ssh.SshEndpoint:
    secret = props.get("ssh_secret") or {}
    return ssh.SshEndpoint(
        host=host,
        port=22,
        user=str(props["ssh_user"]),
        known_hosts=f"{host} {host_key}\n",
        known_hosts_source="the instance's host key (generated by Atlas at launch)",
        private_key_file=props.get("ssh_private_key_file") or None,
        private_key=secret.get("private_key") or None,
    )


def _wait_ready(props: Mapping[str, Any], instance_id: str, host: str, host_key: str) -> None:
    """Until the launch script wrote its ready mark: SSH answers and the node's Slurm is up."""
    if not host:
        raise AwsProviderError(f"instance {instance_id} has no public IP: use a subnet that assigns one")
    endpoint = _ready_endpoint(props, host, host_key)
    timeout = float(props.get("ready_timeout_s") or 1800)
    deadline = time.monotonic() + timeout
    last = ""
    started = time.monotonic()
    reported = started
    while time.monotonic() < deadline:
        try:
            result = ssh.run_remote(ssh.connection(endpoint), f"test -f {READY_MARK}", check=False, timeout=30)
            if result.exit_code == 0:
                pulumi.log.info(f"{instance_id} ready after {time.monotonic() - started:.0f} s")
                return
            last = "the launch script has not finished"
        except ssh.SshError as error:
            last = str(error)
        if time.monotonic() - reported >= 60:  # a launch takes minutes: say what it waits for
            reported = time.monotonic()
            pulumi.log.info(f"{instance_id}: waiting for the launch script ({reported - started:.0f} s; {last})")
        time.sleep(10)
    raise AwsProviderError(
        f"instance {instance_id} ({host}) was not ready after {timeout:.0f} s ({last}); its launch log is "
        "/var/log/atlas-launch.log (`aws ec2 get-console-output` shows it too). Run `pulumi up` again to keep waiting"
    )


class InstanceProvider(pulumi.dynamic.ResourceProvider):
    """One GPU instance, on demand or spot, started with the launch script."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = _check_common(news)
        market = news.get("market")
        if not is_unknown(market) and market not in ("on-demand", "spot"):
            failures.append(pulumi.dynamic.CheckFailure("market", f"{market!r}: use on-demand or spot"))
        script, digest = news.get("launch_script"), news.get("launch_script_sha256")
        if not is_unknown(script) and hashlib.sha256(str(script).encode()).hexdigest() != digest:
            failures.append(pulumi.dynamic.CheckFailure("launch_script_sha256", "does not match the launch script"))
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        result = _diff(
            olds, news, INSTANCE_DEFINING_INPUTS, ("wait_ready", "ready_timeout_s", "ssh_secret", "ssh_user")
        )
        if olds.get("state") in ("stopped", "stopping"):
            # Refresh saw it stopped outside Atlas: the desired state is a running instance.
            return pulumi.dynamic.DiffResult(changes=True, replaces=result.replaces, delete_before_replace=False)
        return result

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        ec2 = client(props, "ec2")
        host_private, host_public = new_host_key()
        user_data = compose_user_data(props["launch_script"], host_private, host_public, str(props["bucket"]))
        tags = _tag_list(props["tags"])
        images = call(
            f"reading image {props['image_id']}",
            lambda: ec2.describe_images(ImageIds=[props["image_id"]]),
            gone_codes=("InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable"),
        )
        if not images or not images.get("Images"):
            raise AwsProviderError(
                f"image {props['image_id']} does not exist in {props['aws']['region']}: fix atlas:aws.ami"
            )
        # The root volume is resized under the image's own root device name (sda1 on Ubuntu, xvda elsewhere).
        root_device = images["Images"][0].get("RootDeviceName") or "/dev/sda1"
        arguments: dict[str, Any] = {
            "ImageId": props["image_id"],
            "InstanceType": props["instance_type"],
            "MinCount": 1,
            "MaxCount": 1,
            "KeyName": props["key_name"],
            "UserData": user_data,
            "BlockDeviceMappings": [
                {
                    "DeviceName": root_device,
                    "Ebs": {
                        "VolumeSize": int(props["root_volume_gib"]),
                        "VolumeType": "gp3",
                        "DeleteOnTermination": True,
                    },
                }
            ],
            "NetworkInterfaces": [
                {
                    "DeviceIndex": 0,
                    "AssociatePublicIpAddress": True,
                    "Groups": [props["security_group_id"]],
                    **({"SubnetId": props["subnet_id"]} if props.get("subnet_id") else {}),
                    "DeleteOnTermination": True,
                }
            ],
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": tags},
            ],
            "MetadataOptions": {"HttpTokens": "required"},
        }
        if props.get("instance_profile_arn"):
            arguments["IamInstanceProfile"] = {"Arn": props["instance_profile_arn"]}
        if props["market"] == "spot":
            spot: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if props.get("spot_max_price") is not None:
                spot["MaxPrice"] = f"{float(props['spot_max_price']):.4f}"
            arguments["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        deadline = time.monotonic() + 90
        while True:
            try:
                made = must(f"launching a {props['instance_type']}", lambda: ec2.run_instances(**arguments))
                break
            except AwsProviderError as error:
                # A new instance profile takes a few seconds to be usable by EC2 (IAM is eventually consistent).
                if "iamInstanceProfile" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(5)
        instance_id = made["Instances"][0]["InstanceId"]
        pulumi.log.info(f"launched {instance_id} ({props['instance_type']}, {props['market']})")
        described: dict[str, Any] = {}

        def running() -> bool:
            nonlocal described
            described = _describe(props, instance_id) or {}
            state = described.get("State", {}).get("Name")
            if state in INSTANCE_GONE:
                raise AwsProviderError(
                    f"instance {instance_id} ended while starting ({described.get('StateReason', {}).get('Message')})"
                )
            return bool(state == "running")

        _wait(f"instance {instance_id} to run", running, WAIT_RUNNING_S)
        outs = {**_instance_outs(props, described), "host_public_key": host_public}
        if props.get("wait_ready"):
            _wait_ready(props, instance_id, outs["public_ip"], host_public)
        return pulumi.dynamic.CreateResult(instance_id, outs)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        instance = _describe(props, id_)
        if instance is None or instance["State"]["Name"] in INSTANCE_GONE:
            return _gone()  # terminated outside (or a spot interruption): the next `up` launches anew
        return pulumi.dynamic.ReadResult(id_, _instance_outs(props, instance))

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        ec2 = client(news, "ec2")
        instance = _describe(news, id_) or {}
        state = instance.get("State", {}).get("Name")
        if state in ("stopped", "stopping"):
            if state == "stopping":
                _wait(
                    f"instance {id_} to stop",
                    lambda: (_describe(news, id_) or {})["State"]["Name"] == "stopped",
                    WAIT_RUNNING_S,
                )
            must(f"starting instance {id_}", lambda: ec2.start_instances(InstanceIds=[id_]))
            _wait(
                f"instance {id_} to run",
                lambda: (_describe(news, id_) or {})["State"]["Name"] == "running",
                WAIT_RUNNING_S,
            )
            instance = _describe(news, id_) or instance
        must(f"tagging instance {id_}", lambda: ec2.create_tags(Resources=[id_], Tags=_tag_list(news["tags"])))
        outs = {**_instance_outs(news, instance), "host_public_key": olds.get("host_public_key")}
        if news.get("wait_ready") and state in ("stopped", "stopping"):
            _wait_ready(news, id_, outs["public_ip"], str(olds.get("host_public_key")))
        return pulumi.dynamic.UpdateResult(outs)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        ec2 = client(props, "ec2")
        instance = _describe(props, id_)
        if instance is None:
            return
        if instance["State"]["Name"] != "terminated":
            call(
                f"terminating instance {id_}",
                lambda: ec2.terminate_instances(InstanceIds=[id_]),
                gone_codes=("InvalidInstanceID.NotFound",),
            )
        request = instance.get("SpotInstanceRequestId")
        if request:
            call(
                f"cancelling spot request {request}",
                lambda: ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=[request]),
                gone_codes=("InvalidSpotInstanceRequestID.NotFound",),
            )
        # Until it is gone, its network interface keeps the security group in use.
        _wait(
            f"instance {id_} to terminate",
            lambda: (_describe(props, id_) or {"State": {"Name": "terminated"}})["State"]["Name"] == "terminated",
            WAIT_TERMINATED_S,
        )


class Instance(pulumi.dynamic.Resource, module="aws", name="Instance"):
    instance_id: pulumi.Output[str]
    state: pulumi.Output[str]
    public_ip: pulumi.Output[str]
    private_ip: pulumi.Output[str]
    lifecycle: pulumi.Output[str]
    host_public_key: pulumi.Output[str]
    instance_type: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        common: Mapping[str, Any],
        image_id: str,
        instance_type: str,
        market: str,
        spot_max_price: float | None,
        key_name: pulumi.Input[str],
        security_group_id: pulumi.Input[str],
        subnet_id: str | None,
        instance_profile_arn: pulumi.Input[str] | None,
        root_volume_gib: int,
        launch_script: str,
        bucket: pulumi.Input[str],
        ssh_user: str,
        ssh_private_key_file: str | None,
        ssh_secret: pulumi.Input[dict[str, Any]],
        wait_ready: bool,
        ready_timeout_s: float,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            **common,
            "image_id": image_id,
            "instance_type": instance_type,
            "market": market,
            "spot_max_price": spot_max_price,
            "key_name": key_name,
            "security_group_id": security_group_id,
            "subnet_id": subnet_id,
            "instance_profile_arn": instance_profile_arn,
            "root_volume_gib": root_volume_gib,
            "launch_script": launch_script,
            # Preview shortens a multi-line string but prints a list in full: every line that will run.
            "launch_script_lines": launch_script.splitlines(),
            "launch_script_sha256": hashlib.sha256(launch_script.encode()).hexdigest(),
            "bucket": bucket,
            "ssh_user": ssh_user,
            "ssh_private_key_file": ssh_private_key_file,
            "ssh_secret": ssh_secret,
            "wait_ready": wait_ready,
            "ready_timeout_s": ready_timeout_s,
            "instance_id": None,
            "state": None,
            "public_ip": None,
            "private_ip": None,
            "availability_zone": None,
            "lifecycle": None,
            "launched_at": None,
            "host_public_key": None,
        }
        super().__init__(InstanceProvider(), name, props, _secret_opts(opts))


def _secret_opts(opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    # Secret on the way in; this keeps them encrypted in state on the way out too.
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS))


def common_inputs(
    region: str,
    endpoint_url: str | None,
    aws_secret: pulumi.Input[dict[str, Any]],
    name_prefix: str,
    tags: Mapping[str, str],
) -> dict[str, Any]:
    """The inputs every AWS resource takes: where, with which credentials, named and tagged how."""
    return {
        "provider_version": PROVIDER_VERSION,
        "aws": {"region": region, "endpoint_url": endpoint_url},
        "aws_secret": aws_secret,
        "name_prefix": name_prefix,
        "tags": dict(tags),
    }
