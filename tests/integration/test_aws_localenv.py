"""`scripts/localenv --only aws`: the moto server starts once, answers boto3, and `down` stops exactly it.

Its own layout (state in a temporary folder, ports from ATLAS_TEST_AWS_PORT_BASE, default
17650, so moto listens on 18150), apart from the session's local environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from localenv import moto
from localenv.layout import Layout, Ports
from localenv.procs import port_open

pytestmark = pytest.mark.integration
PORT_BASE = int(os.environ.get("ATLAS_TEST_AWS_PORT_BASE", "17650"))


@pytest.fixture
def layout() -> Iterator[Layout]:
    state = Path(tempfile.mkdtemp(prefix="atlas-aws-localenv-", dir="/tmp"))
    lay = Layout(state_dir=state, ports=Ports(PORT_BASE))
    yield lay
    moto.down(lay)
    shutil.rmtree(state, ignore_errors=True)


def localenv(layout: Layout, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATLAS_LOCALENV_DIR": str(layout.state_dir), "ATLAS_LOCALENV_PORT_BASE": str(PORT_BASE)}
    return subprocess.run(
        [sys.executable, "-m", "localenv.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_up_status_down_with_only_aws(layout: Layout) -> None:
    assert not port_open(layout.ports.moto)
    up = localenv(layout, "up", "--only", "aws")
    assert up.returncode == 0, up.stderr
    assert "aws: starting the moto server" in up.stdout
    status = json.loads(localenv(layout, "status", "--only", "aws", "--json").stdout)
    assert status["aws"]["ready"] and status["aws"]["endpoint_url"] == f"http://127.0.0.1:{PORT_BASE + 500}"
    assert set(status) == {"state_dir", "aws"}  # --only aws: nothing of the other parts
    pid = status["aws"]["pid"]

    # Every boto3 call is real HTTP to it.
    s3 = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=layout.moto_url,
        aws_access_key_id="AKIALOCALENVTEST0001",
        aws_secret_access_key="any-secret-moto-accepts",
    )
    s3.create_bucket(Bucket="atlas-localenv-test")
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["atlas-localenv-test"]

    # A second up is idempotent: the same process.
    assert localenv(layout, "up", "--only", "aws").returncode == 0
    assert moto.status(layout)["aws"]["pid"] == pid

    down = localenv(layout, "down", "--only", "aws")
    assert down.returncode == 0 and "aws: moto server stopped" in down.stdout
    assert not port_open(layout.ports.moto) and not moto.daemon(layout).pid_file.exists()
    assert localenv(layout, "down", "--only", "aws").returncode == 0  # nothing to stop: fine


def test_a_taken_port_is_reported_with_the_fix(layout: Layout) -> None:
    import socket

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", layout.ports.moto))
        blocker.listen()
        result = localenv(layout, "up", "--only", "aws")
    assert result.returncode == 1
    assert f"moto on 127.0.0.1:{layout.ports.moto}" in result.stderr and "ATLAS_LOCALENV_PORT_BASE" in result.stderr
