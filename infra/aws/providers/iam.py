"""IAM: the role the instances assume, allowed to read the staged prefix, and its instance profile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.dynamic

from infra.aws.clients import call, client, must
from infra.aws.providers.common import AwsResource, diff_inputs, gone, new_name
from infra.aws.providers.inputs import check_common
from infra.aws.providers.requests import EC2_TRUST, ROLE_POLICY_NAME, read_policy, tag_list


class InstanceRoleProvider(pulumi.dynamic.ResourceProvider):
    """An IAM role the instances assume, allowed to read the staged prefix, and its instance profile."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        return pulumi.dynamic.CheckResult(news, check_common(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        return diff_inputs(olds, news, (), ("bucket", "prefix"))

    def _policy(self, props: Mapping[str, Any], role: str) -> None:
        iam = client(props, "iam")
        document = read_policy(props["bucket"], props["prefix"])
        must(
            f"writing the policy of role {role}",
            lambda: iam.put_role_policy(RoleName=role, PolicyName=ROLE_POLICY_NAME, PolicyDocument=document),
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        iam = client(props, "iam")
        name = new_name(props)
        tags = tag_list(props["tags"])
        must(
            f"creating role {name}",
            lambda: iam.create_role(RoleName=name, AssumeRolePolicyDocument=EC2_TRUST, Tags=tags),
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
            return gone()
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


class InstanceRole(AwsResource, module="aws", name="InstanceRole"):
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
        outputs = ("role_name", "profile_name", "profile_arn")
        super().__init__(InstanceRoleProvider(), name, {**common, "bucket": bucket, "prefix": prefix}, outputs, opts)

