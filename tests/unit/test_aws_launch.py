"""The instances' launch script, pinned by a golden file (tests/unit/golden/aws-launch-p3.8xlarge.sh).

Regenerate after an intended change: ATLAS_UPDATE_GOLDEN=1 pytest tests/unit/test_aws_launch.py
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest

from infra.aws.launch import (
    MAX_USER_DATA_BYTES,
    READY_MARK,
    LaunchSpec,
    compose_user_data,
    decode_user_data,
    render_launch_script,
)
from infra.aws.providers import new_host_key

GOLDEN = Path(__file__).parent / "golden" / "aws-launch-p3.8xlarge.sh"
SPEC = LaunchSpec(
    stack="hybrid",
    environment="aws",
    run_id="1",
    workload="biggan",
    instance_type="p3.8xlarge",
    gpus=4,
    gpu_product="Tesla-V100-SXM2-16GB",
    ssh_user="ubuntu",
    run_dir="atlas-runs/hybrid/aws/biggan",
    bucket_prefix="atlas/hybrid/aws/biggan",
    directories=(".atlas/jobs", "logs", "telemetry"),
)


def test_launch_script_matches_golden_file() -> None:
    script = render_launch_script(SPEC)
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(script)
    assert script == GOLDEN.read_text(), f"{GOLDEN} differs; if intended, regenerate (see module docstring)"


def test_launch_script_is_valid_bash_and_prepares_slurm_with_the_instance_gpus() -> None:
    script = render_launch_script(SPEC)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert "Gres=gpu:4" in script and "CPUs=${CPUS}" in script and "File=/dev/nvidia[0-3]" in script
    assert 'aws s3 sync --only-show-errors "s3://$ATLAS_BUCKET/$ATLAS_PREFIX/" "$ATLAS_RUN_DIR/"' in script
    # The ready mark comes last: the Instance provider waits for it before any step is staged.
    assert script.rstrip().splitlines()[-2].endswith(READY_MARK)
    single = render_launch_script(LaunchSpec(**{**SPEC.__dict__, "gpus": 1, "instance_type": "p3.2xlarge"}))
    assert "File=/dev/nvidia0" in single and "[0-0]" not in single


def test_values_are_quoted() -> None:
    hostile = LaunchSpec(**{**SPEC.__dict__, "run_dir": "runs/$(reboot)", "bucket_prefix": "p; rm -rf /"})
    script = render_launch_script(hostile)
    assert "'runs/$(reboot)'" in script and "'p; rm -rf /'" in script


def test_user_data_carries_the_host_key_and_bucket_and_round_trips() -> None:
    private, public = new_host_key()
    data = compose_user_data(render_launch_script(SPEC), private, public, "atlas-hybrid-aws-1234abcd")
    assert len(data) < MAX_USER_DATA_BYTES and data[:2] == b"\x1f\x8b"  # gzip, as cloud-init reads it
    text = decode_user_data(base64.b64encode(data).decode())
    assert text.startswith("#!/bin/bash\n") and text.count("#!/bin/bash") == 1
    assert public in text and "BEGIN OPENSSH PRIVATE KEY" in text
    assert "ATLAS_BUCKET=atlas-hybrid-aws-1234abcd" in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    # Deterministic for the same inputs (gzip without a time stamp): no spurious diffs.
    assert data == compose_user_data(render_launch_script(SPEC), private, public, "atlas-hybrid-aws-1234abcd")


def test_user_data_over_ec2s_limit_is_refused() -> None:
    noise = base64.b64encode(os.urandom(20000)).decode()
    with pytest.raises(ValueError, match="EC2 takes at most"):
        compose_user_data("#!/bin/bash\n# " + noise, "k", "p", "b")
