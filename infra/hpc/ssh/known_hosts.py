"""Host keys in OpenSSH's known_hosts format: which lines name a host, and whether a key is known, changed or revoked.

Pure: text in, answers out, no paramiko, so config resolution (which keeps only the lines that
name the hosts of a route) and the connection's check read the files the same way. Names match as
OpenSSH matches them (`match_hostname`): comma-separated patterns with `*` and `?` only (no
brackets: `[host]:port` is a literal name), `!pattern` excluding, hashed names (`|1|salt|hmac`,
HashKnownHosts), case-insensitive. `@revoked` lines refuse their key for the hosts they name;
`@cert-authority` lines are kept with the rest but never make a key known (Atlas checks the
host's own key, not certificates).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

REVOKED = "@revoked"
CERT_AUTHORITY = "@cert-authority"


@dataclass(frozen=True)
class KnownKey:
    """One key line: the key, the marker before it (if any), and the line as written."""

    patterns: str
    key_type: str
    key_base64: str
    marker: str | None
    line: str


class HostKeyVerdict(Enum):
    KNOWN = "known"
    UNKNOWN = "unknown"  # no key of the host is on file
    CHANGED = "changed"  # keys of the host are on file, none is this one
    REVOKED = "revoked"


def _hashed_matches(pattern: str, name: str) -> bool:
    # |1|base64(salt)|base64(HMAC-SHA1(salt, name)), as ssh-keygen -H writes it.
    _, _, salt_b64, digest_b64 = [*pattern.split("|"), "", "", ""][:4]
    try:
        salt, digest = base64.b64decode(salt_b64, validate=True), base64.b64decode(digest_b64, validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def _glob(pattern: str) -> re.Pattern[str]:
    # OpenSSH's match_pattern knows `*` and `?` only; everything else is literal.
    parts = (".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile("".join(parts) + r"\Z", re.IGNORECASE | re.DOTALL)


def names_match(patterns: str, name: str) -> bool:
    """Whether a known_hosts line's names (`host1,[host2]:2222,*.example.org,!bad.example.org`) name `name`."""
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if not pattern:
            continue
        hit = _hashed_matches(pattern, name) if pattern.startswith("|1|") else bool(_glob(pattern).match(name))
        if hit and negated:
            return False
        matched = matched or hit
    return matched


def parse_line(line: str) -> KnownKey | None:
    """A non-comment line as a key entry; None for blank lines, comments and lines that are no entry."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    fields = stripped.split()
    marker = None
    if fields[0].startswith("@"):
        marker, fields = fields[0], fields[1:]
    if len(fields) < 3:
        return None
    return KnownKey(fields[0], fields[1], fields[2], marker, stripped)


def entries_for(text: str, name: str) -> list[KnownKey]:
    """Every line of `text` that names `name` (as `host_key_name` writes it)."""
    found = []
    for line in text.splitlines():
        entry = parse_line(line)
        if entry is not None and names_match(entry.patterns, name):
            found.append(entry)
    return found


def lines_for(text: str, names: Iterable[str]) -> str:
    """The lines of `text` naming any of `names`, in their order: what a route needs of a user's
    whole known_hosts file (and nothing of the other hosts in it)."""
    wanted = list(names)
    kept = [
        entry.line
        for entry in map(parse_line, text.splitlines())
        if entry is not None and any(names_match(entry.patterns, name) for name in wanted)
    ]
    return "".join(line + "\n" for line in kept)


def verdict(text: str, name: str, key_type: str, key_base64: str) -> HostKeyVerdict:
    """What the known_hosts `text` says of the key a server offered under `name`."""
    entries = entries_for(text, name)
    if any(e.marker == REVOKED and e.key_base64 == key_base64 for e in entries):
        return HostKeyVerdict.REVOKED
    plain = [e for e in entries if e.marker is None]
    if any(e.key_type == key_type and e.key_base64 == key_base64 for e in plain):
        return HostKeyVerdict.KNOWN
    return HostKeyVerdict.CHANGED if plain else HostKeyVerdict.UNKNOWN


def known_key_types(text: str, name: str) -> list[str]:
    """The key types on file for `name`, in file order: the host key algorithms to ask for first."""
    types: list[str] = []
    for entry in entries_for(text, name):
        if entry.marker is None and entry.key_type not in types:
            types.append(entry.key_type)
    return types


def fingerprint(key_base64: str) -> str:
    """OpenSSH's SHA256 fingerprint of a key (`ssh-keygen -lf`): what a message shows of it."""
    digest = hashlib.sha256(base64.b64decode(key_base64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
