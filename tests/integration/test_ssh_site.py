"""SSH as a site's users connect, against the local site (localenv/site.py): a bastion, an agent, a Host alias.

On the local Satori and site of the tests' local environment (started if not running), and
runs as the site's user does: HOME with their ~/.ssh/config and known_hosts, SSH_AUTH_SOCK their
agent; no key file is named anywhere. Every transport runs commands and SFTP (paramiko through
the bastion, the OpenSSH master connection to the login node that asks a code); every broken
variant ends in one line naming the fix; the providers submit a job through each.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from infra.hpc import ssh
from infra.hpc.job_script import render_job_script
from infra.hpc.providers import BatchJobProvider, StagedFilesProvider, endpoint_inputs
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import AGENT_FROM_ENVIRONMENT
from infra.hpc.scheduler import JobSpec
from infra.hpc.target import HpcConfigError, HpcTarget
from localenv import site
from localenv.layout import Layout
from localenv.procs import Daemon
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

LOGIN, LOGIN_MFA, BASTION = "satori-site", "satori-site-mfa", "atlas-bastion"


@pytest.fixture(scope="module")
def layout(site_env: Layout) -> Iterator[Layout]:
    """The local site (tests/conftest.py's `site_env`); the pooled connections closed after."""
    yield site_env
    ssh.close_all()


@pytest.fixture
def user(layout: Layout, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """This process as a shell of the site's user: their HOME and their agent."""
    info = site.status(layout)
    for name, value in info["env"].items():
        monkeypatch.setenv(name, value)
    ssh.close_all()
    return info


def target(host: str = LOGIN, scheduler: str = "slurm", **fields: Any) -> HpcTarget:
    """A target as the site's user writes it: the alias, nothing else of SSH."""
    return HpcTarget(host=host, user=None, scheduler=scheduler, **fields)


def one_line(error: BaseException) -> str:
    text = str(error)
    assert text and "\n" not in text, text
    return text


def test_the_login_node_is_reached_through_the_bastion_only(layout: Layout, user: dict[str, Any]) -> None:
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", layout.ports.site_login), timeout=5):
        pass  # refused: only the bastion's forwarding may connect
    endpoint = ssh.check_endpoint(target(), "atlas:hpc.site")
    direct = dataclasses.replace(endpoint, jumps=())
    with pytest.raises(ssh.SshConnectError) as caught:
        ssh.run_remote(ssh.PooledConnection(direct), "true")
    assert "cannot reach the login node satori-site" in one_line(caught.value)
    assert ssh.run_remote(ssh.PooledConnection(endpoint), "whoami").stdout == "atlas\n"


def test_through_the_bastion_with_the_agent_commands_and_sftp(user: dict[str, Any]) -> None:
    endpoint = ssh.check_endpoint(target(), "atlas:hpc.site")
    assert [hop.name for hop in endpoint.jumps] == [BASTION]
    assert (endpoint.user, endpoint.agent, endpoint.private_key_file, endpoint.name) == (
        "atlas", AGENT_FROM_ENVIRONMENT, None, LOGIN
    )
    # What goes into Pulumi state names the agent, never its socket (it changes with every shell).
    inputs = json.dumps(endpoint_inputs(endpoint))
    assert user["agent_socket"] not in inputs and '"agent": "SSH_AUTH_SOCK"' in inputs
    opened = ssh.CONNECTIONS_OPENED[endpoint.pool_key]
    conn = ssh.connection(endpoint)
    assert conn.master() is None  # paramiko, hop by hop
    assert ssh.run_remote(conn, "whoami; echo $SLURM_CONF").stdout.startswith("atlas\n/")
    assert "normal" in ssh.run_remote(conn, "sinfo -h -o %P").stdout
    content = os.urandom(300_000)
    ssh.make_directories(conn, ["atlas-site-it"])
    digest = ssh.upload_bytes(conn, content, "atlas-site-it/blob.bin")
    assert ssh.remote_sha256(conn, ["atlas-site-it/blob.bin"]) == {"atlas-site-it/blob.bin": digest}
    with conn.sftp_lock:
        assert conn.sftp().stat("atlas-site-it/blob.bin").st_size == len(content)
    ssh.remove_files(conn, ["atlas-site-it/blob.bin"])
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda i: ssh.run_remote(conn, f"sleep 0.3; echo {i}"), range(12)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    assert ssh.CONNECTIONS_OPENED[endpoint.pool_key] == opened + 1, ssh.CONNECTIONS_DROPPED  # one login for all


def test_a_second_factor_is_refused_naming_the_master_connection_to_open(layout: Layout, user: dict[str, Any]) -> None:
    site.close_master(layout)
    endpoint = ssh.check_endpoint(target(LOGIN_MFA), "atlas:hpc.site")
    assert endpoint.control_path == user["login_mfa"]["control_path"]
    with pytest.raises(ssh.SecondFactorError) as caught:
        ssh.run_remote(ssh.PooledConnection(endpoint), "true")
    text = one_line(caught.value)
    assert "asks for keyboard-interactive" in text and "Atlas never prompts" in text
    assert f"ssh -M -S {endpoint.control_path} -fN {LOGIN_MFA}" in text


def test_through_a_master_connection_commands_and_sftp_and_its_end(layout: Layout, user: dict[str, Any]) -> None:
    site.open_master(layout)
    try:
        endpoint = ssh.check_endpoint(target(LOGIN_MFA, "lsf"), "atlas:hpc.site")
        conn = ssh.connection(endpoint)
        assert conn.master() is not None
        assert ssh.run_remote(conn, "whoami; command -v bsub").stdout.startswith("atlas\n/opt/atlas-lsf/")
        failed = ssh.run_remote(conn, "echo out; echo err >&2; exit 255", check=False)
        assert (failed.exit_code, failed.stdout, failed.stderr) == (255, "out\n", "err\n")
        ssh.make_directories(conn, ["atlas-site-it"])
        digest = ssh.upload_bytes(conn, b"x" * 5_000_000, "atlas-site-it/master.bin")
        assert ssh.remote_sha256(conn, ["atlas-site-it/master.bin"])["atlas-site-it/master.bin"] == digest
        ssh.remove_files(conn, ["atlas-site-it/master.bin"])
        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(lambda i: ssh.run_remote(conn, f"sleep 0.3; echo {i}"), range(16)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(16)]
    finally:
        site.close_master(layout)
    # The master is gone: the next command (retried, it is safe) finds no master and a login node
    # that asks a code, and says how to open the master again.
    with pytest.raises(ssh.SshError) as caught:
        ssh.run_remote(conn, "true", safe_to_retry=True)
    assert f"`ssh -M -S {endpoint.control_path} -fN {LOGIN_MFA}`" in one_line(caught.value)


# --- each broken variant ends in one line naming the fix ---------------------------------------


def test_an_empty_agent_is_refused_before_any_connection(user: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSH_AUTH_SOCK", user["empty_agent_socket"])
    with pytest.raises(ssh.NoKeyError) as caught:
        ssh.check_endpoint(target(), "atlas:hpc.site")
    text = one_line(caught.value)
    assert text.startswith("atlas:hpc.site: no key to log in to jump host atlas-bastion")
    assert "holds no key" in text and "`ssh-add` your key" in text
    monkeypatch.delenv("SSH_AUTH_SOCK")
    with pytest.raises(ssh.NoKeyError, match=r"no ssh-agent \(SSH_AUTH_SOCK is not set\)"):
        ssh.check_endpoint(target(), "atlas:hpc.site")


def test_an_agent_without_the_key_the_site_takes_is_refused_naming_the_keys_offered(
    user: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "other-agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        wait_until(sock.exists, "the other agent's socket", 10)
        key = tmp_path / "stranger"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "stranger", "-f", str(key)], check=True)
        subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, check=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        endpoint = ssh.check_endpoint(target(), "atlas:hpc.site")  # a key is there to offer
        with pytest.raises(ssh.SshAuthError) as caught:
            ssh.run_remote(ssh.PooledConnection(endpoint), "true")
        text = one_line(caught.value)
        assert text.startswith("jump host atlas-bastion (atlas-jump@127.0.0.1:")
        assert "refused every key offered to atlas-jump: agent key ED25519 SHA256:" in text and "(stranger)" in text
        assert "authorized_keys" in text
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_a_bastion_that_is_down_is_named(layout: Layout, user: dict[str, Any]) -> None:
    bastion = Daemon("site-bastion", layout.pids_dir, layout.logs_dir)
    bastion.stop()
    try:
        endpoint = ssh.check_endpoint(target(), "atlas:hpc.site")
        with pytest.raises(ssh.SshConnectError) as caught:
            ssh.run_remote(ssh.PooledConnection(endpoint), "true", safe_to_retry=True)
        text = one_line(caught.value)
        bastion_address = f"atlas-jump@127.0.0.1:{layout.ports.bastion}"
        assert text.startswith(f"cannot reach jump host atlas-bastion ({bastion_address}) (hop 1 of 1 on the way to "
                               "satori-site (")
        assert "Connection refused" in text and "check that it is up" in text
    finally:
        site.up(layout)


def test_an_unknown_alias_is_refused_at_config_load_with_the_config_s_entries(user: dict[str, Any]) -> None:
    with pytest.raises(HpcConfigError) as caught:
        ssh.check_endpoint(target("satori-sit"), "atlas:hpc.site")
    text = one_line(caught.value)
    assert text.startswith("atlas:hpc.site.host: 'satori-sit' is no Host entry of ")
    assert "(its Host entries: atlas-bastion, satori-site, satori-site-mfa)" in text
    assert "did you mean 'satori-site'?" in text


def _config_with_known_hosts(user: dict[str, Any], tmp_path: Path, known_hosts: str, extra: str = "") -> Path:
    """The user's ssh config with its known_hosts file replaced by one of the test's."""
    file = tmp_path / "known_hosts"
    file.write_text(known_hosts)
    config = tmp_path / "config"
    text = Path(user["ssh_config"]).read_text().replace(user["known_hosts"], str(file))
    config.write_text(extra + text)
    return config


@pytest.mark.parametrize("hop", ["bastion", "login"])
def test_a_changed_host_key_is_refused_naming_the_hop_the_fingerprint_and_the_file(
    layout: Layout, user: dict[str, Any], tmp_path: Path, hop: str
) -> None:
    port = layout.ports.bastion if hop == "bastion" else layout.ports.site_login
    impostor = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk="
    lines = Path(user["known_hosts"]).read_text().splitlines()
    changed = [f"[127.0.0.1]:{port} {impostor}" if line.startswith(f"[127.0.0.1]:{port} ") else line for line in lines]
    # StrictHostKeyChecking no in the user's config changes nothing for Atlas.
    config = _config_with_known_hosts(user, tmp_path, "\n".join(changed) + "\n", "StrictHostKeyChecking no\n")
    endpoint = ssh.check_endpoint(target(ssh_config=config), "atlas:hpc.site")
    with pytest.raises(ssh.HostKeyError) as caught:
        ssh.run_remote(ssh.PooledConnection(endpoint), "true")
    text = one_line(caught.value)
    where = "jump host atlas-bastion" if hop == "bastion" else "the login node satori-site"
    assert text.startswith(f"host key of {where} (") and f"[127.0.0.1]:{port} CHANGED" in text
    assert "the server offered ssh-ed25519 SHA256:" in text and f"file {tmp_path / 'known_hosts'} has" in text
    assert f"ssh-keygen -R '[127.0.0.1]:{port}' -f {tmp_path / 'known_hosts'}" in text


def test_an_unknown_host_key_is_refused_whatever_strict_host_key_checking_says(
    layout: Layout, user: dict[str, Any], tmp_path: Path
) -> None:
    lines = Path(user["known_hosts"]).read_text().splitlines()
    login_only = [line for line in lines if str(layout.ports.bastion) not in line]
    config = _config_with_known_hosts(user, tmp_path, "\n".join(login_only) + "\n", "StrictHostKeyChecking no\n")
    with pytest.raises(HpcConfigError) as caught:
        ssh.check_endpoint(target(ssh_config=config), "atlas:hpc.site")
    text = one_line(caught.value)
    name = f"[127.0.0.1]:{layout.ports.bastion}"
    assert f"no host key for jump host atlas-bastion {name} in {tmp_path / 'known_hosts'}" in text
    assert f"ssh-keyscan -p {layout.ports.bastion} 127.0.0.1" in text and "whatever StrictHostKeyChecking says" in text


# --- the providers submit through each transport --------------------------------------------------


def _submit_and_wait(endpoint: ssh.SshEndpoint, scheduler: str, tag: str) -> dict[str, Any]:
    sched = scheduler_for(scheduler)
    run_dir = f"atlas-site-it/{tag}"
    name = f"atlas-site-{tag}-{int(time.time())}"
    spec = JobSpec(job_name=name, step="s", workdir=run_dir, log_dir="logs", command=("hostname",), queue="normal")
    script = render_job_script(sched, spec)
    script_path = f".atlas/jobs/s{sched.script_suffix}"
    inputs = {"ssh": endpoint_inputs(endpoint), "ssh_secret": {"private_key": None, "passphrase": None}}
    StagedFilesProvider().create({
        **inputs,
        "run_dir": run_dir,
        "files": [{"path": script_path, "content": script, "sha256": ssh.sha256_hex(script.encode())}],
        "directories": ["logs"],
    })
    props = {
        **inputs,
        "scheduler": scheduler, "step": "s", "job_name": name, "run_dir": run_dir, "script_path": script_path,
        "script": script, "script_sha256": ssh.sha256_hex(script.encode()),
        "log_pattern": f"logs/s.{sched.log_placeholder}", "requested_queue": "normal", "after_job_ids": [],
        "wait": False, "poll_interval_s": 1.0,
    }
    assert not BatchJobProvider().check({}, props).failures
    created = BatchJobProvider().create(props)
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(BatchJobProvider().read(str(created.id), props).outs or {})
        return seen.get("state") == "succeeded"

    wait_until(done, f"job {created.id} to succeed", 60, pause=1.0, detail=lambda: str(seen.get("state")))
    return {"props": props, "outs": seen}


def test_the_providers_submit_a_job_through_the_bastion_and_through_the_master(
    layout: Layout, user: dict[str, Any]
) -> None:
    through_bastion = _submit_and_wait(ssh.check_endpoint(target(), "atlas:hpc.site"), "slurm", "bastion")
    assert through_bastion["outs"]["exit_code"] == 0
    site.open_master(layout)
    try:
        endpoint = ssh.check_endpoint(target(LOGIN_MFA, "lsf"), "atlas:hpc.site")
        through_master = _submit_and_wait(endpoint, "lsf", "master")
        assert through_master["outs"]["exit_code"] == 0
        assert ssh.connection(endpoint).master() is not None
    finally:
        site.close_master(layout)
    for submitted in (through_bastion, through_master):
        state = json.dumps(submitted["props"])
        assert user["agent_socket"] not in state and "PRIVATE KEY" not in state
