"""known_hosts as OpenSSH reads it: plain, hashed, wildcard and negated names, [host]:port, markers."""

from __future__ import annotations

import base64
import hashlib
import hmac

from infra.hpc.remote import host_key_name
from infra.hpc.ssh import known_hosts
from infra.hpc.ssh.known_hosts import HostKeyVerdict, entries_for, lines_for, names_match, verdict

KEY_A = "AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk="
KEY_B = "AAAAC3NzaC1lZDI1NTE5AAAAIEJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmI="


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_names_match_as_openssh_matches_them() -> None:
    assert names_match("login.example.org,10.0.0.1", "10.0.0.1")
    assert names_match("LOGIN.example.org", "login.EXAMPLE.org")  # case-insensitive
    assert names_match("*.example.org", "login.example.org") and not names_match("*.example.org", "example.org")
    assert names_match("login?.example.org", "login1.example.org")
    assert not names_match("*.example.org,!bad.example.org", "bad.example.org")
    # Brackets are literal: the name of a host on another port, not a character class.
    assert names_match("[127.0.0.1]:16022", "[127.0.0.1]:16022") and not names_match("[127.0.0.1]:16022", "1")
    assert names_match(hashed("[127.0.0.1]:16022"), "[127.0.0.1]:16022")
    assert not names_match(hashed("[127.0.0.1]:16022"), "[127.0.0.1]:16023")
    assert not names_match("|1|not base64|x", "x")


def test_host_key_names_carry_the_port_off_22() -> None:
    assert host_key_name("login.example.org", 22) == "login.example.org"
    assert host_key_name("127.0.0.1", 16022) == "[127.0.0.1]:16022"


def test_verdicts() -> None:
    text = "\n".join(
        [
            "# a comment",
            f"login.example.org ssh-ed25519 {KEY_A}",
            f"@cert-authority *.example.org ssh-ed25519 {KEY_B}",
            f"@revoked * ssh-ed25519 {KEY_B}",
            "",
        ]
    )
    assert verdict(text, "login.example.org", "ssh-ed25519", KEY_A) is HostKeyVerdict.KNOWN
    assert verdict(text, "login.example.org", "ssh-rsa", KEY_A) is HostKeyVerdict.CHANGED
    # A certificate authority's key is never the host's own; and revoked is revoked everywhere.
    assert verdict(text, "other.example.org", "ssh-ed25519", KEY_A) is HostKeyVerdict.UNKNOWN
    assert verdict(text, "login.example.org", "ssh-ed25519", KEY_B) is HostKeyVerdict.REVOKED
    assert known_hosts.known_key_types(text, "login.example.org") == ["ssh-ed25519"]


def test_only_the_lines_naming_a_route_s_hosts_are_kept() -> None:
    text = (
        f"bastion.example.org ssh-ed25519 {KEY_A}\n"
        f"unrelated.example.org ssh-ed25519 {KEY_B}\n"
        f"{hashed('login.example.org')} ssh-ed25519 {KEY_B}\n"
        "garbage line\n"
    )
    kept = lines_for(text, ["bastion.example.org", "login.example.org"])
    assert "unrelated" not in kept and kept.count("\n") == 2 and kept.startswith("bastion.example.org")
    assert [e.key_base64 for e in entries_for(text, "login.example.org")] == [KEY_B]


def test_fingerprints_are_openssh_s() -> None:
    blob = base64.b64decode(KEY_A)
    expected = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert known_hosts.fingerprint(KEY_A) == f"SHA256:{expected}"
