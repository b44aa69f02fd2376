"""S3: the data bucket (public access blocked, encrypted at rest by default, plain HTTP refused),
and the files staged into it (each checked by the sha256 in its metadata)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from infra.aws.clients import AwsProviderError, call, client, must
from infra.aws.providers.answers import bucket_protection, our_tags, wanted_protection
from infra.aws.providers.common import AwsResource, diff_inputs, drifted, gone, new_name
from infra.aws.providers.inputs import check_common
from infra.aws.providers.requests import BUCKET_ENCRYPTION, tag_list, tls_only_policy
from infra.dynamic.inputs import is_unknown


class DataBucketProvider(pulumi.dynamic.ResourceProvider):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        return pulumi.dynamic.CheckResult(news, check_common(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        result = diff_inputs(olds, news, ())
        if olds.get("protection") not in (None, wanted_protection(news)):
            # Refresh found the encryption or the TLS-only policy removed outside: put them back.
            return drifted(result)
        return result

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        s3 = client(props, "s3")
        name = new_name(props)
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
        self._protect(props, name)
        self._tag(props, name)
        return pulumi.dynamic.CreateResult(
            name, {**props, "bucket": name, "arn": f"arn:aws:s3:::{name}", "protection": wanted_protection(props)}
        )

    def _protect(self, props: Mapping[str, Any], name: str) -> None:
        """Encrypted at rest by default, and no plain-HTTP request accepted (wanted_protection says where)."""
        s3 = client(props, "s3")
        must(
            f"turning on default encryption of bucket {name}",
            lambda: s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration=BUCKET_ENCRYPTION),
        )
        if wanted_protection(props)["tls_only"]:
            policy = tls_only_policy(name)
            must(f"refusing plain HTTP to bucket {name}", lambda: s3.put_bucket_policy(Bucket=name, Policy=policy))

    def _tag(self, props: Mapping[str, Any], name: str) -> None:
        s3 = client(props, "s3")
        must(
            f"tagging bucket {name}",
            lambda: s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": tag_list(props["tags"])}),
        )

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        s3 = client(props, "s3")
        found = call(f"reading bucket {id_}", lambda: s3.head_bucket(Bucket=id_), gone_codes=("404", "NoSuchBucket"))
        if found is None:
            return gone()
        tagging = call(
            f"reading the tags of bucket {id_}", lambda: s3.get_bucket_tagging(Bucket=id_), gone_codes=("NoSuchTagSet",)
        )
        encryption = call(
            f"reading the default encryption of bucket {id_}",
            lambda: s3.get_bucket_encryption(Bucket=id_),
            gone_codes=("ServerSideEncryptionConfigurationNotFoundError",),
        )
        policy = call(
            f"reading the policy of bucket {id_}",
            lambda: s3.get_bucket_policy(Bucket=id_),
            gone_codes=("NoSuchBucketPolicy",),
        )
        return pulumi.dynamic.ReadResult(
            id_,
            {
                **props,
                "tags": our_tags((tagging or {}).get("TagSet"), props),
                "protection": bucket_protection(encryption, (policy or {}).get("Policy")),
            },
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        self._protect(news, id_)
        self._tag(news, id_)
        return pulumi.dynamic.UpdateResult(
            {**news, "bucket": id_, "arn": f"arn:aws:s3:::{id_}", "protection": wanted_protection(news)}
        )

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


class DataBucket(AwsResource, module="aws", name="DataBucket"):
    bucket: pulumi.Output[str]
    arn: pulumi.Output[str]
    protection: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, *, common: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(DataBucketProvider(), name, {**common}, ("bucket", "arn", "protection"), opts)


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
        failures = [f for f in check_common(news) if f.property != "name_prefix"]
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
        result = diff_inputs(olds, news, ("bucket", "prefix"), ("files",))
        present = olds.get("present_sha256") or {}
        wanted = {f"{olds.get('prefix')}/{f['path']}": f["sha256"] for f in olds.get("files") or []}
        if present and any(present.get(k) != v for k, v in wanted.items()):
            # Refresh found an object changed or deleted outside: put it back.
            return drifted(result)
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


class StagedObjects(AwsResource, module="aws", name="StagedObjects"):
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
        inputs = {**common, "bucket": bucket, "prefix": prefix, "files": [dict(f) for f in files]}
        super().__init__(StagedObjectsProvider(), name, inputs, ("keys", "total_bytes", "present_sha256"), opts)

