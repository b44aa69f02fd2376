"""EC2: the GPU instances, on demand or spot, each started with the launch script (launch.py)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.dynamic
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from infra.aws.clients import AwsProviderError, call, client, must
from infra.aws.launch import READY_MARK, compose_user_data
from infra.aws.providers.answers import instance_outputs
from infra.aws.providers.common import AwsResource, diff_inputs, drifted, gone, wait
from infra.aws.providers.inputs import LaunchRequest, ReadyWait, check_common
from infra.aws.providers.requests import run_instances_arguments, tag_list
from infra.dynamic.inputs import is_unknown
from infra.hpc import ssh

INSTANCE_GONE = ("shutting-down", "terminated")
WAIT_RUNNING_S = 600.0
WAIT_TERMINATED_S = 900.0
INSTANCE_OUTPUTS = (
    "instance_id",
    "state",
    "public_ip",
    "private_ip",
    "availability_zone",
    "lifecycle",
    "launched_at",
    "host_public_key",
)

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


def _wait_ready(ready: ReadyWait, instance_id: str, host: str, host_key: str) -> None:
    """Until the launch script wrote its ready mark: SSH answers and the node's Slurm is up."""
    if not host:
        raise AwsProviderError(f"instance {instance_id} has no public IP: use a subnet that assigns one")
    endpoint = ready.endpoint(host, host_key)
    timeout = ready.timeout_s
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
        failures = check_common(news)
        market = news.get("market")
        if not is_unknown(market) and market not in ("on-demand", "spot"):
            failures.fail("market", f"{market!r}: use on-demand or spot")
        script, digest = news.get("launch_script"), news.get("launch_script_sha256")
        if not is_unknown(script) and hashlib.sha256(str(script).encode()).hexdigest() != digest:
            failures.fail("launch_script_sha256", "does not match the launch script")
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        result = diff_inputs(
            olds, news, INSTANCE_DEFINING_INPUTS, ("wait_ready", "ready_timeout_s", "ssh_secret", "ssh_user")
        )
        if olds.get("state") in ("stopped", "stopping"):
            # Refresh saw it stopped outside Atlas: the desired state is a running instance.
            return drifted(result)
        return result

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        ec2 = client(props, "ec2")
        host_private, host_public = new_host_key()
        launch = LaunchRequest.of(props)
        user_data = compose_user_data(launch.launch_script, host_private, host_public, launch.bucket)
        images = call(
            f"reading image {launch.image_id}",
            lambda: ec2.describe_images(ImageIds=[launch.image_id]),
            gone_codes=("InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable"),
        )
        if not images or not images.get("Images"):
            raise AwsProviderError(f"image {launch.image_id} does not exist in {launch.region}: fix atlas:aws.ami")
        root_device = images["Images"][0].get("RootDeviceName") or "/dev/sda1"
        arguments = run_instances_arguments(launch, user_data, root_device)
        deadline = time.monotonic() + 90
        while True:
            try:
                made = must(f"launching a {launch.instance_type}", lambda: ec2.run_instances(**arguments))
                break
            except AwsProviderError as error:
                # A new instance profile takes a few seconds to be usable by EC2 (IAM is eventually consistent).
                if "iamInstanceProfile" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(5)
        instance_id = made["Instances"][0]["InstanceId"]
        pulumi.log.info(f"launched {instance_id} ({launch.instance_type}, {launch.market})")
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

        wait(f"instance {instance_id} to run", running, WAIT_RUNNING_S)
        outs = {**instance_outputs(props, described), "host_public_key": host_public}
        ready = ReadyWait.of(props)
        if ready.wanted:
            _wait_ready(ready, instance_id, outs["public_ip"], host_public)
        return pulumi.dynamic.CreateResult(instance_id, outs)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        instance = _describe(props, id_)
        if instance is None or instance["State"]["Name"] in INSTANCE_GONE:
            return gone()  # terminated outside (or a spot interruption): the next `up` launches anew
        return pulumi.dynamic.ReadResult(id_, instance_outputs(props, instance))

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        ec2 = client(news, "ec2")
        instance = _describe(news, id_) or {}
        state = instance.get("State", {}).get("Name")
        if state in ("stopped", "stopping"):
            if state == "stopping":
                wait(
                    f"instance {id_} to stop",
                    lambda: (_describe(news, id_) or {})["State"]["Name"] == "stopped",
                    WAIT_RUNNING_S,
                )
            must(f"starting instance {id_}", lambda: ec2.start_instances(InstanceIds=[id_]))
            wait(
                f"instance {id_} to run",
                lambda: (_describe(news, id_) or {})["State"]["Name"] == "running",
                WAIT_RUNNING_S,
            )
            instance = _describe(news, id_) or instance
        must(f"tagging instance {id_}", lambda: ec2.create_tags(Resources=[id_], Tags=tag_list(news["tags"])))
        outs = {**instance_outputs(news, instance), "host_public_key": olds.get("host_public_key")}
        ready = ReadyWait.of(news)
        if ready.wanted and state in ("stopped", "stopping"):
            _wait_ready(ready, id_, outs["public_ip"], str(olds.get("host_public_key")))
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
        wait(
            f"instance {id_} to terminate",
            lambda: (_describe(props, id_) or {"State": {"Name": "terminated"}})["State"]["Name"] == "terminated",
            WAIT_TERMINATED_S,
        )


class Instance(AwsResource, module="aws", name="Instance"):
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
        inputs = {
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
        }
        super().__init__(InstanceProvider(), name, {**common, **inputs}, INSTANCE_OUTPUTS, opts)

