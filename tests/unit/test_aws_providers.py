"""The AWS providers' check and diff logic (no AWS), and AwsEnvironment under Pulumi mocks."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc

from infra.aws import providers
from infra.aws.providers import (
    DataBucketProvider,
    InstanceProvider,
    KeyPairProvider,
    SecurityGroupProvider,
    StagedObjectsProvider,
    ssh_cidrs_of,
)
from infra.outputs import AwsOutputs, read_environment
from tests.unit.pulumi_mocks import ResourceMocks

COMMON: dict[str, Any] = {
    "provider_version": providers.PROVIDER_VERSION,
    "aws": {"region": "us-east-1", "endpoint_url": None},
    "aws_secret": {"access_key_id": None, "secret_access_key": None},
    "name_prefix": "atlas-unit-aws",
    "tags": {"atlas:project": "atlas", "atlas:stack": "unit", "atlas:environment": "aws", "atlas:run": "1"},
}
SCRIPT = "#!/bin/bash\necho prepare\n"
INSTANCE: dict[str, Any] = {
    **COMMON,
    "image_id": "ami-0123456789abcdef0",
    "instance_type": "p3.8xlarge",
    "market": "on-demand",
    "spot_max_price": None,
    "key_name": "atlas-unit-aws-1",
    "security_group_id": "sg-1",
    "subnet_id": None,
    "instance_profile_arn": "arn:aws:iam::1:instance-profile/x",
    "root_volume_gib": 200,
    "launch_script": SCRIPT,
    "launch_script_sha256": hashlib.sha256(SCRIPT.encode()).hexdigest(),
    "bucket": "atlas-unit-aws-2",
    "wait_ready": False,
    "ready_timeout_s": 60,
    "ssh_user": "ubuntu",
    "ssh_secret": {"private_key": None},
}


def test_check_refuses_bad_common_inputs_and_tolerates_unknowns() -> None:
    bad = {**COMMON, "name_prefix": "Atlas_Unit", "tags": {"atlas:stack": "unit"}, "aws": {}}
    failures = {f.property for f in DataBucketProvider().check({}, bad).failures}
    assert failures == {"name_prefix", "tags", "aws.region"}
    unknown = {**COMMON, "name_prefix": rpc.UNKNOWN, "tags": rpc.UNKNOWN, "aws": rpc.UNKNOWN}
    assert DataBucketProvider().check({}, unknown).failures == []


def test_instance_check_refuses_a_script_other_than_the_one_previewed() -> None:
    assert InstanceProvider().check({}, INSTANCE).failures == []
    failures = InstanceProvider().check({}, {**INSTANCE, "launch_script": SCRIPT + "rm -rf /\n"}).failures
    assert [f.property for f in failures] == ["launch_script_sha256"]
    assert [f.property for f in InstanceProvider().check({}, {**INSTANCE, "market": "reserved"}).failures] == ["market"]


@pytest.mark.parametrize(
    ("change", "replaces"),
    [
        ({"instance_type": "p3.2xlarge"}, ["instance_type"]),
        ({"image_id": "ami-0fedcba9876543210"}, ["image_id"]),
        ({"market": "spot"}, ["market"]),
        ({"launch_script_sha256": "0" * 64}, ["launch_script_sha256"]),
        ({"key_name": rpc.UNKNOWN}, ["key_name"]),  # preview: a new key pair's name is not known yet
        ({"tags": {**COMMON["tags"], "atlas:run": "2"}}, []),
        ({"aws_secret": {"access_key_id": "AKIAOTHER", "secret_access_key": "x" * 40}}, []),
    ],
)
def test_instance_diff_replaces_only_for_what_defines_the_machine(change: dict[str, Any], replaces: list[str]) -> None:
    olds = {**INSTANCE, "state": "running", "instance_id": "i-1"}
    diff = InstanceProvider().diff("i-1", olds, {**INSTANCE, **change})
    assert diff.changes and diff.replaces == replaces


def test_instance_diff_no_change_and_stopped_outside() -> None:
    running = {**INSTANCE, "state": "running"}
    assert not InstanceProvider().diff("i-1", running, INSTANCE).changes
    # Refresh saw it stopped outside Atlas: an update (start it), not a replacement.
    diff = InstanceProvider().diff("i-1", {**INSTANCE, "state": "stopped"}, INSTANCE)
    assert diff.changes and diff.replaces == []


def test_security_group_diff_sees_rules_changed_outside() -> None:
    olds = {
        **COMMON,
        "allowed_ssh_cidrs": ["203.0.113.7/32"],
        "allow_ssh_from_anywhere": False,
        "subnet_id": None,
        "seen_ssh_cidrs": ["203.0.113.7/32"],
    }
    assert not SecurityGroupProvider().diff("sg-1", olds, dict(olds)).changes
    drifted = {**olds, "seen_ssh_cidrs": ["0.0.0.0/0", "203.0.113.7/32"]}
    diff = SecurityGroupProvider().diff("sg-1", drifted, dict(olds))
    assert diff.changes and diff.replaces == []
    assert SecurityGroupProvider().diff("sg-1", olds, {**olds, "subnet_id": "subnet-1"}).replaces == ["subnet_id"]


def test_security_group_check_refuses_world_open_ssh_without_the_flag() -> None:
    news = {**COMMON, "allowed_ssh_cidrs": ["0.0.0.0/0"], "allow_ssh_from_anywhere": False, "subnet_id": None}
    assert [f.property for f in SecurityGroupProvider().check({}, news).failures] == ["allowed_ssh_cidrs"]
    assert SecurityGroupProvider().check({}, {**news, "allow_ssh_from_anywhere": True}).failures == []


def test_ssh_cidrs_of_reads_every_rule_that_covers_port_22() -> None:
    group = {
        "IpPermissions": [
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "203.0.113.7/32"}]},
            {"IpProtocol": "tcp", "FromPort": 0, "ToPort": 1024, "Ipv6Ranges": [{"CidrIpv6": "2001:db8::/32"}]},
            {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
            {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "198.51.100.0/24"}]},
        ]
    }
    assert ssh_cidrs_of(group) == ["0.0.0.0/0", "2001:db8::/32", "203.0.113.7/32"]


def test_key_pair_check_refuses_a_private_key_and_replaces_on_a_new_public_key() -> None:
    failures = KeyPairProvider().check({}, {**COMMON, "public_key": "-----BEGIN OPENSSH PRIVATE KEY-----"}).failures
    assert [f.property for f in failures] == ["public_key"]
    assert "PRIVATE" not in failures[0].reason
    olds = {**COMMON, "public_key": "ssh-ed25519 AAAA one"}
    assert KeyPairProvider().diff("key-1", olds, {**COMMON, "public_key": "ssh-ed25519 AAAA two"}).replaces == [
        "public_key"
    ]


def test_staged_objects_check_and_drift() -> None:
    files = [{"path": "jobs/train.sbatch", "content": "x", "sha256": hashlib.sha256(b"x").hexdigest()}]
    news = {**COMMON, "bucket": "b", "prefix": "atlas/unit/aws/probe", "files": files}
    assert StagedObjectsProvider().check({}, news).failures == []
    bad = {**news, "files": [{**files[0], "path": "../etc/passwd"}]}
    assert [f.property for f in StagedObjectsProvider().check({}, bad).failures] == ["files[0].path"]
    present = {"atlas/unit/aws/probe/jobs/train.sbatch": files[0]["sha256"]}
    assert not StagedObjectsProvider().diff("s3://b/p/", {**news, "present_sha256": present}, news).changes
    # Deleted outside (refresh saw None): the next `up` uploads it again.
    missing = {"atlas/unit/aws/probe/jobs/train.sbatch": None}
    assert StagedObjectsProvider().diff("s3://b/p/", {**news, "present_sha256": missing}, news).changes


def test_host_keys_are_fresh_ed25519_keys() -> None:
    private_a, public_a = providers.new_host_key()
    _, public_b = providers.new_host_key()
    assert public_a.startswith("ssh-ed25519 ") and public_a != public_b
    assert "BEGIN OPENSSH PRIVATE KEY" in private_a


# --- AwsEnvironment under mocks ----------------------------------------------------------------


class Mocks(ResourceMocks):
    def outputs(self, args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
        kind = args.typ.rsplit(":", 1)[-1]
        index = len(self.resources)
        extra: dict[str, dict[str, Any]] = {
            "DataBucket": {"bucket": "atlas-unit-aws-b0", "arn": "arn:aws:s3:::atlas-unit-aws-b0"},
            "StagedObjects": {"keys": [f"k{i}" for i in range(len(args.inputs.get("files", [])))]},
            "InstanceRole": {"profile_arn": "arn:aws:iam::123:instance-profile/p"},
            "KeyPair": {"key_name": "atlas-unit-aws-k1", "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nMOCK"},
            "SecurityGroup": {"group_id": "sg-0abc"},
            "Instance": {
                "instance_id": f"i-{index:04d}",
                "state": "running",
                "lifecycle": args.inputs.get("market"),
                "public_ip": f"198.51.100.{index}",
                "host_public_key": "ssh-ed25519 AAAAHOSTKEY",
            },
            "BatchJob": {"job_id": str(100 + index), "queue": "normal", "submitted_at": "2026-12-02T15:00:00Z"},
            "SweepJob": {
                "job_ids": [str(200 + index)], "job_id": str(200 + index), "elements": "P6", "state": "pending",
                "submitted_at": "2026-12-02T15:00:00Z", "retries": [], "final_ids": [str(200 + index)],
                "ended_ids": [],
            },
        }
        return extra.get(kind, {})


@pytest.fixture
def mocks() -> Mocks:
    return Mocks().install()


def _environment(raw: dict[str, Any], definition: str = "workload.yaml", max_attempts: int = 1) -> Any:
    from infra.aws.components import AwsEnvironment, AwsEnvironmentArgs
    from infra.aws.settings_parser import parse_aws_settings, resolve_credentials
    from infra.hpc.components import workload_source_files
    from infra.toolchain.pins import REPO_ROOT
    from infra.workload.load import load_workload

    workload = load_workload(REPO_ROOT / "workloads" / "probe" / definition)
    settings = parse_aws_settings(raw)
    assert settings is not None
    settings = resolve_credentials(settings, chain_has_credentials=lambda: False)
    return AwsEnvironment(
        "aws",
        AwsEnvironmentArgs(
            settings=settings,
            workload=workload,
            environment="aws",
            stack="unit",
            run_id="7",
            wait_for_steps=tuple(s.name for s in workload.steps[:-1]),
            extra_files=workload_source_files(workload, REPO_ROOT),
            sweep_max_attempts=max_attempts,
        ),
    )


@pulumi.runtime.test
def test_aws_environment_on_moto_creates_everything_and_runs_nothing(mocks: Mocks) -> Any:
    env = _environment(
        {"region": "eu-west-1", "endpoint_url": "http://127.0.0.1:16500", "ami": "ami-1e749f67", "instance_count": 2}
    )

    def check(out: dict[str, Any]) -> None:
        by_name = {r.name: r for r in mocks.resources}
        assert {
            "aws-bucket",
            "aws-staged-objects",
            "aws-role",
            "aws-key-pair",
            "aws-security-group",
            "aws-instance-0",
            "aws-instance-1",
        } <= set(by_name)
        assert not any(r.typ.endswith("BatchJob") or r.typ.endswith("StagedFiles") for r in mocks.resources)
        assert by_name["aws-bucket"].typ.startswith("pulumi-python:dynamic")
        # Every AWS object is tagged with the stack, run and environment.
        for name in ("aws-bucket", "aws-instance-0", "aws-security-group", "aws-key-pair", "aws-role"):
            tags = by_name[name].inputs["tags"]
            assert tags["atlas:stack"] == "unit" and tags["atlas:run"] == "7" and tags["atlas:environment"] == "aws"
        staged = [f["path"] for f in by_name["aws-staged-objects"].inputs["files"]]
        assert ".atlas/jobs/train.sbatch" in staged and ".atlas/python/infra/telemetry/sampler.py" in staged
        instance = by_name["aws-instance-0"].inputs
        assert instance["launch_script"].startswith("#!/bin/bash\n") and instance["wait_ready"] is False
        assert instance["instance_type"] == "p3.8xlarge" and instance["image_id"] == "ami-1e749f67"

        assert out["kind"] == "aws" and out["region"] == "eu-west-1" and out["emulated"] is True
        assert out["executed"] is False and "moto" in out["not_executed_reason"] and out["batch"] is None
        typed = read_environment(AwsOutputs, out, "aws")  # what compare, monitor and nodes read back
        assert typed.instance_ids == tuple(i["id"] for i in out["instances"]) and len(typed.instance_ids) == 2
        # The instance type's GPUs and the workload's ask are two named figures (the probe asks for 1).
        assert out["gpus_per_instance"] == 4 and typed.gpus_total == 8 and out["gpus_requested"] == 1
        assert out["market"] == "on-demand"
        assert out["bucket"] == "atlas-unit-aws-b0" and out["staging"]["objects"] == len(staged)
        assert [s["name"] for s in out["steps"]] == ["make-hdf5", "inception-moments", "train"]
        assert all(s["state"] == "not-executed" for s in out["steps"])
        assert "MOCK" not in repr(out) and "moto-accepts-any-secret-key" not in repr(out)

    return env.outputs.apply(check)


@pulumi.runtime.test
def test_aws_environment_executing_runs_each_step_as_a_slurm_job_over_ssh(mocks: Mocks) -> Any:
    env = _environment(
        {
            "region": "us-east-1",
            "ami": "ami-0123456789abcdef0",
            "allowed_ssh_cidrs": ["203.0.113.7/32"],
            "market": "spot",
            "access_key_id": "AKIAIOSFODNN7EXAMPLE",
            "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        }
    )

    def check(out: dict[str, Any]) -> None:
        by_name = {r.name: r for r in mocks.resources}
        assert {"aws-staged-files", "aws-make-hdf5", "aws-inception-moments", "aws-train"} <= set(by_name)
        assert by_name["aws-instance-0"].inputs["wait_ready"] is True
        train = by_name["aws-train"].inputs
        assert train["scheduler"] == "slurm" and train["script"].startswith("#!/bin/bash\n#SBATCH")
        assert len(train["after_job_ids"]) == 2 and train["wait"] is False
        # The whole pipeline is submitted; the preparation steps are awaited after, as on Satori.
        assert by_name["aws-make-hdf5"].inputs["wait"] is False
        assert {"aws-make-hdf5-done", "aws-inception-moments-done"} <= set(by_name)
        assert "aws-train-done" not in by_name
        assert by_name["aws-make-hdf5-done"].inputs["job_name"] == by_name["aws-make-hdf5"].inputs["job_name"]
        assert out["executed"] is True and out["not_executed_reason"] == ""
        batch = out["batch"]  # the one-node Slurm on the first instance, read as an HPC side
        assert batch["scheduler"] == "slurm" and batch["host"] == out["instances"][0]["public_ip"]
        assert batch["port"] == 22 and batch["known_hosts"] == f"{batch['host']} ssh-ed25519 AAAAHOSTKEY"
        assert all(s["job_id"] for s in out["steps"]) and batch["steps"] == out["steps"] and out["market"] == "spot"
        assert batch["run_dir"] == "atlas-runs/unit/aws/probe"
        assert "wJalrXUtnFEMI" not in repr(out) and "MOCK" not in repr(out)

    return env.outputs.apply(check)


def test_name_prefix_is_a_valid_aws_name_prefix() -> None:
    from infra.aws.components import name_prefix

    assert name_prefix("atlas", "Local_Hybrid.dev", "aws") == "atlas-local-hybrid-dev-aws"
    assert len(name_prefix("atlas", "x" * 80, "aws")) <= 32


def test_run_instances_arguments_from_the_typed_launch_request() -> None:
    from infra.aws.providers.inputs import LaunchRequest
    from infra.aws.providers.requests import run_instances_arguments

    on_demand = run_instances_arguments(LaunchRequest.of(INSTANCE), b"data", "/dev/xvda")
    assert on_demand["BlockDeviceMappings"][0] == {
        "DeviceName": "/dev/xvda",
        "Ebs": {"VolumeSize": 200, "VolumeType": "gp3", "DeleteOnTermination": True, "Encrypted": True},
    }
    # Instance metadata v2 only, one hop: a container on the instance cannot reach the role's keys.
    assert on_demand["MetadataOptions"] == {"HttpTokens": "required", "HttpPutResponseHopLimit": 1,
                                            "HttpEndpoint": "enabled"}
    assert "SubnetId" not in on_demand["NetworkInterfaces"][0] and "InstanceMarketOptions" not in on_demand
    assert on_demand["IamInstanceProfile"] == {"Arn": "arn:aws:iam::1:instance-profile/x"}
    spot = run_instances_arguments(
        LaunchRequest.of({**INSTANCE, "market": "spot", "spot_max_price": 3, "subnet_id": "subnet-1"}), b"", "/dev/sda1"
    )
    assert spot["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == "3.0000"
    assert spot["NetworkInterfaces"][0]["SubnetId"] == "subnet-1"


def test_the_bucket_policy_refuses_plain_http_and_protection_is_read_back() -> None:
    from infra.aws.providers.answers import bucket_protection, wanted_protection
    from infra.aws.providers.requests import BUCKET_ENCRYPTION, tls_only_policy

    policy = tls_only_policy("atlas-data-1")
    (statement,) = json.loads(policy)["Statement"]
    assert statement["Effect"] == "Deny" and statement["Principal"] == "*" and statement["Action"] == "s3:*"
    assert statement["Resource"] == ["arn:aws:s3:::atlas-data-1", "arn:aws:s3:::atlas-data-1/*"]
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    answer = {"ServerSideEncryptionConfiguration": BUCKET_ENCRYPTION}
    assert bucket_protection(answer, policy) == wanted_protection({"aws": {"region": "us-east-1"}})
    # Over the local stand-in's plain HTTP the policy would refuse Atlas itself: encryption only.
    assert wanted_protection({"aws": {"endpoint_url": "http://127.0.0.1:16500"}}) == {
        "encryption": "AES256", "tls_only": False,
    }  # fmt: skip
    assert bucket_protection(None, None) == {"encryption": None, "tls_only": False}
    allow_only = json.dumps({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject"}]})
    assert bucket_protection(answer, allow_only) == {"encryption": "AES256", "tls_only": False}
    assert bucket_protection(answer, "not json") == {"encryption": "AES256", "tls_only": False}


def test_bucket_diff_puts_back_protection_removed_outside() -> None:
    inputs = {**COMMON, "aws": {**COMMON["aws"], "endpoint_url": None}}
    kept = {**inputs, "protection": {"encryption": "AES256", "tls_only": True}}
    assert not DataBucketProvider().diff("b", kept, inputs).changes
    stripped = {**inputs, "protection": {"encryption": None, "tls_only": True}}
    result = DataBucketProvider().diff("b", stripped, inputs)
    assert result.changes and not result.replaces


def test_ready_wait_keeps_the_key_out_of_its_repr() -> None:
    from infra.aws.providers.inputs import ReadyWait

    ready = ReadyWait.of({**INSTANCE, "ssh_secret": {"private_key": "SECRET-KEY-MATERIAL"}})
    assert ready.timeout_s == 60 and not ready.wanted and "SECRET-KEY-MATERIAL" not in repr(ready)
    assert ReadyWait.of({**INSTANCE, "ready_timeout_s": None}).timeout_s == 1800


@pulumi.runtime.test
def test_aws_environment_on_moto_stages_a_sweeps_arrays_and_runs_nothing(mocks: Mocks) -> Any:
    env = _environment({"region": "eu-west-1", "endpoint_url": "http://127.0.0.1:16500", "ami": "ami-1e749f67"},
                       "sweep.yaml")

    def check(out: dict[str, Any]) -> None:
        by_name = {r.name: r for r in mocks.resources}
        staged = [f["path"] for f in by_name["aws-staged-objects"].inputs["files"]]
        # The swept step's table and array script travel, not a plain script for it.
        assert any(p.startswith(".atlas/jobs/train.") and p.endswith(".points") for p in staged), staged
        assert ".atlas/jobs/train.sbatch" in staged
        script = next(f["content"] for f in by_name["aws-staged-objects"].inputs["files"]
                      if f["path"] == ".atlas/jobs/train.sbatch")
        assert "#SBATCH --array=0-5%2" in script
        assert not any(r.typ.endswith("SweepJob") for r in mocks.resources)
        train = next(s for s in out["steps"] if s["name"] == "train")
        assert train["state"] == "not-executed" and train["sweep"] is None

    return env.outputs.apply(check)


@pulumi.runtime.test
def test_aws_environment_executing_runs_a_sweep_as_arrays_on_the_instance(mocks: Mocks) -> Any:
    env = _environment(
        {
            "region": "us-east-1",
            "ami": "ami-0123456789abcdef0",
            "allowed_ssh_cidrs": ["203.0.113.7/32"],
            "access_key_id": "AKIAIOSFODNN7EXAMPLE",
            "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        },
        "sweep.yaml",
        max_attempts=3,
    )

    def check(out: dict[str, Any]) -> None:
        by_name = {r.name: r for r in mocks.resources}
        sweep = by_name["aws-train"]
        assert sweep.typ.endswith("SweepJob") and sweep.inputs["scheduler"] == "slurm"
        assert sweep.inputs["max_attempts"] == 3 and len(sweep.inputs["chunks"]) == 1
        assert len(sweep.inputs["after_job_ids"]) == 2  # make-hdf5's and inception-moments' jobs
        assert "aws-train-done" not in by_name  # a sweep is never awaited
        train = next(s for s in out["steps"] if s["name"] == "train")
        assert train["sweep"]["points"] == 6 and train["sweep"]["max_attempts"] == 3
        assert [a["job_id"] for a in train["sweep"]["arrays"]] == [train["job_id"]]
        assert out["batch"]["steps"] == out["steps"]

    return env.outputs.apply(check)


def test_the_aws_side_refuses_to_await_a_sweep() -> None:
    from infra.aws.components import check_fits
    from infra.aws.settings import AwsConfigError
    from infra.toolchain.pins import REPO_ROOT
    from infra.workload.load import load_workload

    workload = load_workload(REPO_ROOT / "workloads" / "probe" / "sweep.yaml")
    with pytest.raises(AwsConfigError, match=r"^atlas:aws.wait_for: train is a swept step; .*remove it from wait_for"):
        check_fits(workload, "aws", ("make-hdf5", "train"))
