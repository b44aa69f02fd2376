"""EC2: the key pair the instances are launched with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.dynamic

from infra.aws.clients import call, client, must
from infra.aws.providers.answers import our_tags
from infra.aws.providers.common import AwsResource, diff_inputs, gone, new_name
from infra.aws.providers.inputs import check_common
from infra.aws.providers.requests import tag_list
from infra.dynamic.inputs import is_unknown


class KeyPairProvider(pulumi.dynamic.ResourceProvider):
    """Imports the public half of the user's key, or has AWS create one (its private half is
    returned once, and kept only as a Pulumi secret)."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = check_common(news)
        public = news.get("public_key")
        if public is not None and not is_unknown(public) and "PRIVATE KEY" in str(public):
            failures.append(pulumi.dynamic.CheckFailure("public_key", "is a private key (value not shown)"))
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        return diff_inputs(olds, news, ("public_key",))

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        ec2 = client(props, "ec2")
        name = new_name(props)
        tags = [{"ResourceType": "key-pair", "Tags": tag_list(props["tags"])}]
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
            return gone()
        return pulumi.dynamic.ReadResult(
            id_, {**props, "key_name": pair["KeyName"], "tags": our_tags(pair.get("Tags"), props)}
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        ec2 = client(news, "ec2")
        must(f"tagging key pair {id_}", lambda: ec2.create_tags(Resources=[id_], Tags=tag_list(news["tags"])))
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


class KeyPair(AwsResource, module="aws", name="KeyPair"):
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
        outputs = ("key_name", "key_pair_id", "fingerprint", "private_key")
        super().__init__(KeyPairProvider(), name, {**common, "public_key": public_key}, outputs, opts)

