"""A target resolved through the user's OpenSSH config into an endpoint, and that endpoint in Pulumi state.

Each test writes its own ~/.ssh (HOME is a temporary folder, the system's ssh_config is not read,
no agent), so what the machine running the tests has configured changes nothing.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from infra.hpc.provider_inputs import check_ssh, endpoint_from, same_login
from infra.hpc.providers import BatchJobProvider, StagedFilesProvider, endpoint_inputs, ssh_inputs
from infra.hpc.remote import AGENT_FROM_ENVIRONMENT
from infra.hpc.ssh import NoKeyError, check_endpoint, resolve_endpoint
from infra.hpc.ssh.agent import agent_location
from infra.hpc.ssh.keys import DEFAULT_IDENTITY_FILES
from infra.hpc.target import HpcConfigError, HpcTarget
from tests.unit.test_hpc_providers import SSH, job_inputs, staged_inputs

KEY_A = "AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk="
KEY_B = "AAAAC3NzaC1lZDI1NTE5AAAAIEJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmI="
KEY = "atlas:hpc.satori"


def write(home: Path, config: str, known_hosts: str = "") -> None:
    (home / ".ssh" / "config").write_text(config)
    (home / ".ssh" / "known_hosts").write_text(known_hosts)


def target(host: str = "satori", **fields: Any) -> HpcTarget:
    return HpcTarget(host=host, user=fields.pop("user", None), scheduler="slurm", **fields)


SITE = """
Host satori
    HostName login.example.org
    User alex
    Port 2222
    IdentityFile ~/.ssh/id_site
    ProxyJump gate
    HostKeyAlias satori-login

Host gate
    HostName 10.0.0.1
    User jumper
    IdentityAgent ~/.agent.sock
"""
KNOWN = (
    f"[satori-login]:2222 ssh-ed25519 {KEY_A}\n"
    f"10.0.0.1 ssh-ed25519 {KEY_B}\n"
    f"unrelated.example.org ssh-ed25519 {KEY_B}\n"
)


def test_an_alias_resolves_through_the_config(home: Path) -> None:
    write(home, SITE, KNOWN)
    endpoint = resolve_endpoint(target(), KEY)
    assert (endpoint.host, endpoint.port, endpoint.user, endpoint.name) == ("login.example.org", 2222, "alex", "satori")
    assert endpoint.host_key_alias == "satori-login" and endpoint.login_hop().key_name == "[satori-login]:2222"
    assert endpoint.identity_files == (str(home / ".ssh" / "id_site"),) and endpoint.agent == AGENT_FROM_ENVIRONMENT
    assert endpoint.known_hosts == f"[satori-login]:2222 ssh-ed25519 {KEY_A}\n"  # only this host's line
    assert endpoint.known_hosts_source == f"file {home}/.ssh/known_hosts"
    (gate,) = endpoint.jumps
    assert (gate.host, gate.port, gate.user, gate.name) == ("10.0.0.1", 22, "jumper", "gate")
    assert gate.agent == "~/.agent.sock"  # as written: the process that connects expands it
    assert gate.known_hosts == f"10.0.0.1 ssh-ed25519 {KEY_B}\n" and gate.identity_files == ()
    assert endpoint.route == "satori (alex@login.example.org:2222) via gate (jumper@10.0.0.1:22)"
    assert endpoint.control_path is None and endpoint.private_key_file is None


def test_what_the_target_gives_wins_and_its_own_key_is_the_only_one_for_the_login_node(home: Path) -> None:
    write(home, SITE, KNOWN + f"[satori-login]:2200 ssh-ed25519 {KEY_A}\n")  # HostKeyAlias, the target's port
    endpoint = resolve_endpoint(target(user="sam", port=2200, private_key_file=home / "id"), KEY)
    assert (endpoint.port, endpoint.user, endpoint.private_key_file) == (2200, "sam", str(home / "id"))
    assert (endpoint.agent, endpoint.identity_files) == (None, ())
    assert endpoint.jumps[0].agent == "~/.agent.sock"  # the jump host keeps its own way in
    from_secret = resolve_endpoint(target(), KEY, key_from_secret=True)
    assert (from_secret.agent, from_secret.identity_files) == (None, ())


def test_jump_hosts_chain_as_openssh_chains_them(home: Path) -> None:
    hosts = ["a", "b", "c", "d", "login"]
    config = "".join(f"Host {h}\n    HostName {h}.example.org\n    User u{h}\n" for h in hosts)
    config = config.replace("Host b\n", "Host b\n    ProxyJump a\n").replace("Host c\n", "Host c\n    ProxyJump d\n")
    known = "".join(f"{h}.example.org ssh-ed25519 {KEY_A}\n" for h in hosts) + f"x.example.org ssh-ed25519 {KEY_A}\n"
    # b's own ProxyJump is followed: a, then b.
    write(home, "Host login\n    ProxyJump b\n" + config, known)
    assert [h.name for h in resolve_endpoint(target("login"), KEY).jumps] == ["a", "b"]
    # `ProxyJump b,c`: c is reached through b (its own ProxyJump d is not followed), b through its own a.
    write(home, "Host login\n    ProxyJump b,c\n" + config, known)
    assert [h.name for h in resolve_endpoint(target("login"), KEY).jumps] == ["a", "b", "c"]
    # A jump host the config does not name, with its user and port in the spec.
    write(home, "Host login\n    ProxyJump ssh://ops@x.example.org:22\n" + config, known)
    (hop,) = resolve_endpoint(target("login"), KEY).jumps
    assert (hop.host, hop.port, hop.user, hop.name) == ("x.example.org", 22, "ops", "x.example.org")


def test_a_loop_of_jump_hosts_and_proxy_command_are_refused(home: Path) -> None:
    write(home, "Host a\n    ProxyJump b\n    User u\nHost b\n    ProxyJump a\n")
    with pytest.raises(HpcConfigError, match=r"ProxyJump in .* goes a -> b -> a: a loop"):
        resolve_endpoint(target("a"), KEY)
    write(home, "Host satori\n    User u\n    ProxyCommand ssh -W %h:%p gate\n")
    with pytest.raises(HpcConfigError, match=r"sets ProxyCommand.*`ProxyCommand ssh -W %h:%p bastion` is `ProxyJump"):
        resolve_endpoint(target(), KEY)


def test_include_lines_are_read(home: Path) -> None:
    (home / ".ssh" / "conf.d").mkdir()
    (home / ".ssh" / "conf.d" / "site.conf").write_text("Host satori\n    HostName 10.0.0.9\n    User alex\n")
    write(home, "Include conf.d/*.conf\n", f"10.0.0.9 ssh-ed25519 {KEY_A}\n")
    endpoint = resolve_endpoint(target(), KEY)
    assert (endpoint.host, endpoint.user) == ("10.0.0.9", "alex")


def test_a_named_config_is_the_only_one_read(home: Path) -> None:
    write(home, "Host satori\n    User from-home\n", f"satori ssh-ed25519 {KEY_A}\n")
    named = home / "site_config"
    named.write_text(f"Host satori\n    User from-named\n    UserKnownHostsFile {home}/.ssh/known_hosts\n")
    assert resolve_endpoint(target(ssh_config=named), KEY).user == "from-named"
    with pytest.raises(HpcConfigError, match=r"atlas:hpc.satori: the ssh config .*missing cannot be read"):
        resolve_endpoint(target(ssh_config=home / "missing"), KEY)


def test_what_neither_the_target_nor_the_config_gives_is_refused_naming_the_fix(home: Path) -> None:
    write(home, "Host satori\n    HostName 10.0.0.9\n", f"10.0.0.9 ssh-ed25519 {KEY_A}\n")
    with pytest.raises(HpcConfigError) as caught:
        resolve_endpoint(target(), KEY)
    assert str(caught.value) == (
        f"atlas:hpc.satori.user: not set, and {home}/.ssh/config gives no User for satori; set it (`pulumi config "
        "set --path atlas:hpc.satori.user <login name>`) or add `User <login name>` under `Host satori`"
    )
    write(home, "Host satori\n    HostName 10.0.0.9\n    User alex\n", f"10.0.0.8 ssh-ed25519 {KEY_A}\n")
    with pytest.raises(HpcConfigError) as caught:
        resolve_endpoint(target(), KEY)
    text = str(caught.value)
    assert text.startswith(f"atlas:hpc.satori: no host key for the login node 10.0.0.9 in {home}/.ssh/known_hosts")
    assert "whatever StrictHostKeyChecking says" in text and "ssh-keyscan -p 22 10.0.0.9" in text
    write(home, "Host satori\n    HostName bad;name\n    User alex\n")
    with pytest.raises(HpcConfigError, match=r"\(Host satori\): HostName 'bad;name' is not a host name"):
        resolve_endpoint(target(), KEY)


def test_no_agent_and_no_identity_file_means_openssh_s_default_files(home: Path) -> None:
    write(home, "Host satori\n    User alex\n    IdentityAgent none\n", f"satori ssh-ed25519 {KEY_A}\n")
    endpoint = resolve_endpoint(target(), KEY)
    assert (endpoint.agent, endpoint.identity_files) == (None, DEFAULT_IDENTITY_FILES)


def test_control_path_is_openssh_s_own_expansion(home: Path) -> None:
    write(home, f"Host satori\n    HostName 10.0.0.9\n    User alex\n    ControlPath {home}/cm-%r@%h:%p\n",
          f"10.0.0.9 ssh-ed25519 {KEY_A}\n")
    endpoint = resolve_endpoint(target(), KEY)
    if shutil.which("ssh") is None:
        assert endpoint.control_path is None  # no OpenSSH client, no master connection to use
    else:
        assert endpoint.control_path == f"{home}/cm-alex@10.0.0.9:22"
        assert endpoint.master_hint == f"ssh -M -S {home}/cm-alex@10.0.0.9:22 -fN satori"


def test_the_agent_is_found_where_the_process_that_connects_looks(home: Path) -> None:
    env = {"SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "OTHER": "/run/agent", "HOME": str(home)}
    assert agent_location(AGENT_FROM_ENVIRONMENT, env).path == "/tmp/ssh-x/agent.1"  # type: ignore[union-attr]
    assert agent_location(AGENT_FROM_ENVIRONMENT, {}).path is None  # type: ignore[union-attr]
    assert agent_location("${OTHER}", env).path == "/run/agent"  # type: ignore[union-attr]
    assert agent_location("~/.1password/agent.sock", env).path == f"{home}/.1password/agent.sock"  # type: ignore[union-attr]
    assert agent_location("none", env) is None and agent_location(None, env) is None


# --- check_endpoint: what this machine can tell before connecting --------------------------------


def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(host: str, *_: Any, **__: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_an_unknown_alias_is_named_with_the_config_s_entries(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(home, SITE, KNOWN + f"satory ssh-ed25519 {KEY_A}\n")
    no_dns(monkeypatch)
    with pytest.raises(HpcConfigError) as caught:
        check_endpoint(target("satory", user="alex"), KEY)
    refusal = (
        f"atlas:hpc.satori.host: 'satory' is no Host entry of {home}/.ssh/config (its Host entries: gate, satori) and "
        "does not resolve here (Name or service not known); did you mean 'satori'? write a Host alias of your ssh "
        "config or the login node's address, or add `Host satory` with its HostName"
    )
    assert str(caught.value) == refusal
    # A stack that leaves the user to the config (the alias's User): the alias is what is wrong,
    # not the User the mistyped alias cannot give; when the config is read alone too.
    for read in (check_endpoint, resolve_endpoint):
        with pytest.raises(HpcConfigError) as caught:
            read(target("satory"), KEY)
        assert str(caught.value) == refusal
    # A Host entry without a User is no mistyped alias: the User is what it lacks.
    write(home, SITE + "\nHost satory\n    HostName 10.0.0.7\n", KNOWN)
    with pytest.raises(HpcConfigError, match=r"^atlas:hpc.satori.user: not set, and .* gives no User for satory"):
        resolve_endpoint(target("satory"), KEY)
    write(home, SITE, KNOWN + f"satory ssh-ed25519 {KEY_A}\n")
    # An address never needs DNS; a jump host's HostName that is a name does, and is named.
    write(home, SITE.replace("10.0.0.1", "gate.example.org"), KNOWN.replace("10.0.0.1", "gate.example.org"))
    with pytest.raises(HpcConfigError, match=r"^atlas:hpc.satori: the HostName 'gate.example.org' of gate \("):
        check_endpoint(target(), KEY)


def test_no_key_to_offer_is_refused_naming_where_atlas_looked(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(home, "Host satori\n    HostName 10.0.0.9\n    User alex\n", f"10.0.0.9 ssh-ed25519 {KEY_A}\n")
    with pytest.raises(NoKeyError) as caught:
        check_endpoint(target(), KEY)
    files = ", ".join(f"{home}/.ssh/{name}" for name in ("id_rsa", "id_ecdsa", "id_ed25519"))
    assert str(caught.value) == (
        "atlas:hpc.satori: no key to log in to the login node satori (alex@10.0.0.9:22) with: no ssh-agent "
        f"(SSH_AUTH_SOCK is not set); no key file ({files} not there). Start an ssh-agent and `ssh-add` your key, "
        "name it with IdentityFile in your ssh config, or give the target private_key_file or a secret private_key"
    )
    monkeypatch.setenv("SSH_AUTH_SOCK", str(home / "gone.sock"))
    with pytest.raises(NoKeyError, match=r"no ssh-agent listens at SSH_AUTH_SOCK=.*gone\.sock"):
        check_endpoint(target(), KEY)
    # An encrypted default key file: Atlas never prompts, and says to add it to the agent.
    (home / ".ssh" / "id_ed25519").write_text(ENCRYPTED_KEY)
    with pytest.raises(NoKeyError, match=r"id_ed25519 is encrypted and Atlas never prompts: add it to your agent"):
        check_endpoint(target(), KEY)


def test_a_target_s_known_hosts_must_hold_the_login_node_s_key(home: Path) -> None:
    write(home, "Host satori\n    HostName 10.0.0.9\n    User alex\n")
    with pytest.raises(HpcConfigError, match=r"^atlas:hpc.satori.known_hosts: inline known_hosts has no key for 10"):
        check_endpoint(target(known_hosts=f"10.0.0.8 ssh-ed25519 {KEY_A}\n"), KEY)


# An Ed25519 key encrypted with the passphrase "atlas" (ssh-keygen -N atlas): never used to log in.
ENCRYPTED_KEY = """-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAACmFlczI1Ni1jdHIAAAAGYmNyeXB0AAAAGAAAABAmxWgv9h
4pf1KgUKwojV2HAAAAEAAAAAEAAAAzAAAAC3NzaC1lZDI1NTE5AAAAINmanV5Rah/+30Je
gt7JO/+buPgaMrwtd40d1gkf+8MrAAAAkDMKnjzv2x7Ony6Fd9iD8ziYsKUznP1IsT4Hay
JLOZaYpvCOOl+pj+fEcM5ekME9S8M4vpSlgkmqo+uF6RVAVDKqABEZJVkHkzXO37JXGPJT
xiOPGtWjsWfbohbb+0zcfSWWa3bHmKfy58d45prGaftNDZdFg2big5GmwemW8haNkjVp3e
/Qh/QS+tOOKRkgNA==
-----END OPENSSH PRIVATE KEY-----
"""


# --- the endpoint in Pulumi state ----------------------------------------------------------------


def test_a_direct_login_s_ssh_input_is_what_it_always_was(home: Path) -> None:
    write(home, "")
    known = f"[127.0.0.1]:16022 ssh-ed25519 {KEY_A}\n"
    endpoint = resolve_endpoint(target("127.0.0.1", user="atlas", port=16022, known_hosts=known,
                                       private_key_file=home / "id"), KEY)
    assert endpoint_inputs(endpoint) == ssh_inputs("127.0.0.1", 16022, "atlas", known, "inline known_hosts",
                                                   str(home / "id"))


def test_a_routed_login_reads_back_from_its_inputs(home: Path) -> None:
    write(home, SITE, KNOWN)
    endpoint = resolve_endpoint(target(), KEY)
    inputs = endpoint_inputs(endpoint)
    assert set(inputs) - set(SSH) == {"name", "host_key_alias", "jumps", "identity_files", "agent"}
    assert endpoint_from({"ssh": inputs, "ssh_secret": {}}) == endpoint
    failures: list[Any] = []
    check_ssh({"ssh": inputs, "ssh_secret": {"private_key": None}}, failures)
    assert failures == []  # the agent is a way in: no key of the target's needed
    check_ssh({"ssh": SSH, "ssh_secret": {"private_key": None}}, failures)
    assert [f.property for f in failures] == ["ssh_secret.private_key"]


def test_the_same_login_reached_another_way_is_never_replaced() -> None:
    routed = {**SSH, "jumps": [{**SSH, "host": "gate", "name": "gate"}], "agent": "SSH_AUTH_SOCK", "name": "satori"}
    assert same_login({"ssh": SSH}, {"ssh": routed})  # a bastion and the agent added: same login
    # The login node named by an alias whose HostName is the old host, or by a name the config maps.
    assert same_login({"ssh": {**SSH, "host": "satori"}}, {"ssh": routed})
    assert not same_login({"ssh": SSH}, {"ssh": {**routed, "user": "other"}})
    assert not same_login({"ssh": SSH}, {"ssh": {**SSH, "host": "other", "name": "other"}})
    result = BatchJobProvider().diff("41", {**job_inputs(), "state": "running", "job_id": "41"}, job_inputs(ssh=routed))
    assert result.changes and "ssh" not in (result.replaces or [])  # updated in place: the job is kept
    staged = StagedFilesProvider().diff("id", staged_inputs(), staged_inputs(ssh=routed))
    assert staged.changes and staged.replaces == []
