"""The `local-hybrid` stack end to end with the real CLI: OpenShift on the local cluster, Satori
under LSF and Slurm over SSH, and AWS GPU instances on the local AWS (moto), in one `pulumi up`
and one `pulumi destroy`.

The AWS side is checked through boto3 against moto, not through Pulumi's own view: every object
exists and is tagged after `up`, an instance terminated outside is seen by `refresh` and
launched again by `up`, and after `destroy` nothing tagged with the stack is left. The secret
access key set in config appears nowhere in plain text: not in state, outputs or CLI output.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import boto3
import pytest

from infra.outputs import AwsOutputs, read_environment
from localenv import satori
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift
from tests.e2e.pulumi_cli import satori_ssh as ssh

pytestmark = pytest.mark.e2e
STACK = "local-hybrid"
HPC_ENVIRONMENTS = ("satori", "satori-slurm")
ACCESS_KEY_ID = "AKIAE2ELOCALHYBRID01"


def ec2_s3_iam(moto: Layout, secret: str) -> tuple[Any, Any, Any]:
    kwargs = {
        "region_name": "us-east-1",
        "endpoint_url": moto.moto_url,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": secret,
    }
    return boto3.client("ec2", **kwargs), boto3.client("s3", **kwargs), boto3.client("iam", **kwargs)


def aws_objects(moto: Layout, secret: str, stack_tag: str, prefix: str) -> dict[str, list[str]]:
    """What the account holds for this stack, listed through boto3 (tags for EC2, names for S3 and IAM)."""
    ec2, s3, iam = ec2_s3_iam(moto, secret)
    by_tag = [{"Name": "tag:atlas:stack", "Values": [stack_tag]}]
    return {
        "instances": [
            i["InstanceId"]
            for r in ec2.describe_instances(Filters=by_tag)["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] not in ("terminated", "shutting-down")
        ],
        "security_groups": [g["GroupId"] for g in ec2.describe_security_groups(Filters=by_tag)["SecurityGroups"]],
        "key_pairs": [k["KeyName"] for k in ec2.describe_key_pairs(Filters=by_tag)["KeyPairs"]],
        "buckets": [b["Name"] for b in s3.list_buckets()["Buckets"] if b["Name"].startswith(prefix)],
        "roles": [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith(prefix)],
        "instance_profiles": [
            p["InstanceProfileName"]
            for p in iam.list_instance_profiles()["InstanceProfiles"]
            if p["InstanceProfileName"].startswith(prefix)
        ],
    }



def configure(proj: PulumiProject, kube_env: Layout, satori_env: Layout, moto_env: Layout, run: str) -> None:
    info = satori.status(satori_env)["ssh"]
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, f"atlas-e2e-{run}")
    for name in HPC_ENVIRONMENTS:
        config["atlas:hpc"][name] = {
            **config["atlas:hpc"][name],
            "port": info["port"],
            "known_hosts_file": info["known_hosts_file"],
            "private_key_file": info["key_file"],
            "remote_work_dir": f"atlas-e2e-{run}",
        }
    config["atlas:aws"] = {**config["atlas:aws"], "endpoint_url": moto_env.moto_url}
    proj.set_stack_config(STACK, config)


@pytest.fixture
def hybrid(tmp_path, kube_env, satori_env, moto_env):
    proj = PulumiProject.create(tmp_path)
    run = uuid.uuid4().hex[:6]
    configure(proj, kube_env, satori_env, moto_env, run)
    proj.run("stack", "init", STACK)
    secret = "e2e-secret-" + uuid.uuid4().hex
    proj.run("config", "set", "--secret", "--path", "atlas:aws.access_key_id", ACCESS_KEY_ID, "-s", STACK)
    proj.run("config", "set", "--secret", "--path", "atlas:aws.secret_access_key", secret, "-s", STACK)
    yield proj, secret
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/atlas-e2e-{run}")


def test_one_up_one_destroy_with_aws_on_moto(hybrid, kube_env, satori_env, moto_env):
    proj, secret = hybrid
    prefix = "atlas-local-hybrid-aws"
    # The stack tag is the stack's name; other tests' objects in the same moto carry other names.
    assert aws_objects(moto_env, secret, STACK, prefix)["instances"] == []
    cli_output = []

    preview = proj.run("preview", "--diff", "-s", STACK)
    cli_output.append(preview.stdout + preview.stderr)
    # Preview shows the launch script line by line, beside the HPC sides' job scripts.
    assert "pulumi-python:dynamic/aws:Instance::aws-instance-0]" in preview.stdout
    assert "slurm.conf" in preview.stdout and "#SBATCH --job-name=atlas-train-" in preview.stdout

    up = proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    cli_output.append(up.stdout + up.stderr)
    outputs = proj.outputs(STACK)
    envs = outputs["environments"]
    assert set(envs) == {"openshift", *HPC_ENVIRONMENTS, "aws"}
    aws = envs["aws"]
    assert aws["kind"] == "aws" and aws["executed"] is False and "moto" in aws["not_executed_reason"]
    assert aws["instance_type"] == "p3.8xlarge" and aws["gpus_per_instance"] == 4 and aws["region"] == "us-east-1"
    instance_ids = list(read_environment(AwsOutputs, aws, "aws").instance_ids)
    assert all(s["state"] == "not-executed" for s in aws["steps"])

    # Through boto3: every object exists, tagged with the stack, run and environment.
    found = aws_objects(moto_env, secret, STACK, prefix)
    assert found["instances"] == instance_ids
    assert len(found["security_groups"]) == len(found["key_pairs"]) == len(found["roles"]) == 1
    assert found["buckets"] == [aws["bucket"]] and len(found["instance_profiles"]) == 1
    ec2, s3, _ = ec2_s3_iam(moto_env, secret)
    instance = ec2.describe_instances(InstanceIds=instance_ids)["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["atlas:stack"] == STACK and tags["atlas:run"] == "1" and tags["atlas:environment"] == "aws"
    group = ec2.describe_security_groups(GroupIds=found["security_groups"])["SecurityGroups"][0]
    assert [r["CidrIp"] for p in group["IpPermissions"] for r in p.get("IpRanges", [])] == ["127.0.0.1/32"]
    staged = [o["Key"] for o in s3.list_objects_v2(Bucket=aws["bucket"])["Contents"]]
    assert (
        "atlas/local-hybrid/aws/probe/.atlas/jobs/train.sbatch" in staged and len(staged) == aws["staging"]["objects"]
    )

    # A second up changes nothing.
    proj.run("preview", "--expect-no-changes", "-s", STACK)

    # Terminated outside Atlas: refresh sees it gone, the next up launches a new one, and only that.
    ec2.terminate_instances(InstanceIds=instance_ids)
    refresh = proj.run("refresh", "--yes", "-s", STACK)
    assert "deleted" in refresh.stdout
    up = proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    cli_output.append(up.stdout + up.stderr)
    relaunched = read_environment(AwsOutputs, proj.outputs(STACK)["environments"]["aws"], "aws")
    assert list(relaunched.instance_ids) != instance_ids and relaunched.bucket == aws["bucket"]
    assert aws_objects(moto_env, secret, STACK, prefix)["instances"] == list(relaunched.instance_ids)
    proj.run("preview", "--expect-no-changes", "-s", STACK)

    # The comparison puts AWS beside the others and says its runs were not executed.
    report = proj.root / "report"
    outputs_file = proj.root / "outputs.json"
    outputs_file.write_text(json.dumps(proj.outputs(STACK)))
    compare = subprocess.run(
        [str(proj.env["PULUMI_PYTHON_CMD"]), "-m", "infra.cli.compare", "--outputs", str(outputs_file),
         "--out", str(report), "--kubeconfig", str(kube_env.kubeconfig)],
        capture_output=True, text=True, timeout=300, check=False, env=proj.env,
    )  # fmt: skip
    assert compare.returncode == 0, compare.stderr
    assert "aws: not executed" in compare.stdout
    assert "cloud rate aws-p3.8xlarge" in (report / "report.md").read_text()

    # No secret in plain text: not in state, outputs or anything the CLI printed.
    state = proj.run("stack", "export", "-s", STACK).stdout
    assert secret not in state and ACCESS_KEY_ID not in state
    assert "PRIVATE KEY" not in state  # the key pair AWS created stays a ciphertext
    assert secret not in json.dumps(proj.outputs(STACK))
    assert not any(secret in text for text in cli_output)

    destroy = proj.run("destroy", "--yes", "-s", STACK)
    assert secret not in destroy.stdout + destroy.stderr
    left = aws_objects(moto_env, secret, STACK, prefix)
    assert left == {k: [] for k in left}, left
    assert (
        ec2.describe_instances(InstanceIds=list(relaunched.instance_ids))["Reservations"][0]["Instances"][0]["State"][
            "Name"
        ]
        == "terminated"
    )


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"allowed_ssh_cidrs": ["0.0.0.0/0"]}, "atlas:aws.allowed_ssh_cidrs[0]"),
        ({"instance_type": "p3.9xlarge"}, "atlas:aws.instance_type"),
        ({"region": "us-east-9"}, "atlas:aws.region"),
        ({"endpoint_url": "https://ec2.us-east-1.amazonaws.com"}, "atlas:aws.access_key_id"),
    ],
)
def test_bad_aws_config_fails_preview_naming_the_key(tmp_path, moto_env, change, key):
    proj = PulumiProject.create(tmp_path)
    config = proj.stack_config(STACK)
    # The AWS side alone: a bad value must stop preview before any resource, whatever else is there.
    config = {k: v for k, v in config.items() if k not in ("atlas:openshift", "atlas:hpc")}
    config["atlas:aws"] = {**config["atlas:aws"], "endpoint_url": moto_env.moto_url, **change}
    if "endpoint_url" in change:  # real AWS, and no credentials anywhere
        config["atlas:aws"]["allowed_ssh_cidrs"] = ["203.0.113.7/32"]
        proj.env.update({"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent",
                         "AWS_EC2_METADATA_DISABLED": "true"})  # fmt: skip
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            proj.env.pop(name, None)
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    try:
        preview = proj.run("preview", "-s", STACK, check=False)
        assert preview.returncode != 0
        text = preview.stdout + preview.stderr
        assert f"invalid stack configuration: {key}: " in text, text
        assert "Traceback" not in text
        state = json.loads(proj.run("stack", "export", "-s", STACK).stdout)
        assert not state.get("deployment", {}).get("resources")
    finally:
        proj.run("stack", "rm", "--yes", "--force", "-s", STACK, check=False)
