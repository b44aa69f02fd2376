"""EC2: the instances' security group, SSH from the configured CIDRs only."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi.dynamic

from infra.aws.clients import AwsProviderError, call, client, must
from infra.aws.providers.answers import our_tags, ssh_cidrs_of
from infra.aws.providers.common import AwsResource, diff_inputs, drifted, gone, new_name
from infra.aws.providers.inputs import check_common, world_open
from infra.aws.providers.requests import ssh_permissions, tag_list
from infra.dynamic.inputs import is_unknown

DEPENDENCY_RETRY_S = 300.0


class SecurityGroupProvider(pulumi.dynamic.ResourceProvider):
    """SSH from the configured CIDRs only; nothing else in. Refresh reads the rules back, so a
    rule someone added outside shows up as drift and the next `up` removes it."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = check_common(news)
        cidrs = news.get("allowed_ssh_cidrs")
        if not is_unknown(cidrs):
            try:
                parsed = [str(ipaddress.ip_network(c)) for c in cidrs or []]
            except (TypeError, ValueError) as error:
                failures.append(pulumi.dynamic.CheckFailure("allowed_ssh_cidrs", str(error)))
            else:
                if world_open(parsed) and news.get("allow_ssh_from_anywhere") is not True:
                    failures.append(
                        pulumi.dynamic.CheckFailure(
                            "allowed_ssh_cidrs", "opens SSH to the whole internet without allow_ssh_from_anywhere"
                        )
                    )
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        result = diff_inputs(olds, news, ("subnet_id",), ("allowed_ssh_cidrs", "allow_ssh_from_anywhere"))
        seen = olds.get("seen_ssh_cidrs")
        if seen is not None and sorted(seen) != sorted(olds.get("allowed_ssh_cidrs") or []):
            return drifted(result)
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
        self._ssh_rules(props, group_id, cidrs, opening=True)

    def _revoke(self, props: Mapping[str, Any], group_id: str, cidrs: Sequence[str]) -> None:
        self._ssh_rules(props, group_id, cidrs, opening=False)

    def _ssh_rules(self, props: Mapping[str, Any], group_id: str, cidrs: Sequence[str], *, opening: bool) -> None:
        if not cidrs:
            return
        ec2 = client(props, "ec2")
        # Already open (or already closed) is what was wanted.
        action, what, done = (
            (ec2.authorize_security_group_ingress, "opening", "InvalidPermission.Duplicate")
            if opening
            else (ec2.revoke_security_group_ingress, "closing", "InvalidPermission.NotFound")
        )
        call(
            f"{what} SSH in {group_id}",
            lambda: action(GroupId=group_id, IpPermissions=ssh_permissions(cidrs)),
            gone_codes=(done,),
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        ec2 = client(props, "ec2")
        name = new_name(props)
        vpc = self._vpc(props)
        made = must(
            f"creating security group {name}",
            lambda: ec2.create_security_group(
                GroupName=name,
                Description="Atlas GPU instances: SSH from the configured addresses only",
                VpcId=vpc,
                TagSpecifications=[{"ResourceType": "security-group", "Tags": tag_list(props["tags"])}],
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
            return gone()
        group = found["SecurityGroups"][0]
        return pulumi.dynamic.ReadResult(
            id_, {**props, "seen_ssh_cidrs": ssh_cidrs_of(group), "tags": our_tags(group.get("Tags"), props)}
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        ec2 = client(news, "ec2")
        wanted = sorted(news.get("allowed_ssh_cidrs") or [])
        seen = olds.get("seen_ssh_cidrs")
        have: list[str] = sorted(seen if seen is not None else olds.get("allowed_ssh_cidrs") or [])
        self._revoke(news, id_, [c for c in have if c not in wanted])
        self._authorize(news, id_, [c for c in wanted if c not in have])
        must(f"tagging security group {id_}", lambda: ec2.create_tags(Resources=[id_], Tags=tag_list(news["tags"])))
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


class SecurityGroup(AwsResource, module="aws", name="SecurityGroup"):
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
        inputs = {
            "allowed_ssh_cidrs": list(allowed_ssh_cidrs),
            "allow_ssh_from_anywhere": allow_ssh_from_anywhere,
            "subnet_id": subnet_id,
        }
        outputs = ("group_id", "group_name", "vpc_id", "seen_ssh_cidrs")
        super().__init__(SecurityGroupProvider(), name, {**common, **inputs}, outputs, opts)

