"""Whether a URL, a `host[:port]` or a host is this machine's loopback: the one test behind every plain-HTTP allowance.

Plain HTTP is allowed only to a stand-in on this machine (moto's AWS API, the local registry);
anything else must be TLS. The test parses, never searches: a substring or prefix match lets
`http://localhost.example.com` or `http://127.0.0.1.evil.com` pass as local. Loopback is exactly:

- the name `localhost` (any case);
- an IPv4 address in 127.0.0.0/8, in dotted-quad form;
- the IPv6 address ::1 (in brackets in a URL or a `host:port`).

Refused, each on purpose (the answer is False, so plain HTTP is refused and TLS is asked for):

- `localhost.` (trailing dot) and `*.localhost`: whether a resolver answers them from
  /etc/hosts or asks DNS differs between resolvers;
- other spellings of 127.0.0.1 (`0x7f.1`, `127.1`, `2130706433`, `0177.0.0.1`, leading zeros):
  `inet_aton` reads them as loopback, strict parsers as names or errors, so two parts of one
  request could disagree on where it goes;
- the IPv4-mapped `::ffff:127.0.0.1` and a zone (`::1%lo`): whether they reach loopback
  depends on the socket (dual-stack or not), and no stand-in is written that way;
- any userinfo (`user@host`), backslash, space or control character: URL parsers disagree on
  where such a host ends (`http://user@localhost@evil` is evil's to Python, localhost's to
  others), and an endpoint of a stand-in carries none;
- a port outside 1..65535, and a scheme other than http or https (for a URL).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

LOCALHOST = "localhost"
LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
LOOPBACK_V6 = ipaddress.IPv6Address("::1")
URL_SCHEMES = ("http", "https")
# host[:port]: a bracketed IPv6 address or a name/dotted address; nothing else (no userinfo).
_AUTHORITY = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+)(?::(?P<port>[0-9]{1,5}))?")
_DOTTED_QUAD = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")


def is_loopback_host(host: str) -> bool:
    """`host` (a name or an address; IPv6 with or without brackets) is this machine's loopback."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            return False  # brackets hold an IPv6 address only
    if host.lower() == LOCALHOST:
        return True
    if ":" in host:
        try:
            v6 = ipaddress.IPv6Address(host)  # refuses a zone (`::1%lo`) on purpose: it has no `%` form here
        except ValueError:
            return False
        return v6 == LOOPBACK_V6  # ::ffff:127.0.0.1 is not ::1 (module docstring)
    if not _DOTTED_QUAD.fullmatch(host):
        return False  # 0x7f.1, 127.1, 2130706433: other parsers' spellings (module docstring)
    try:
        v4 = ipaddress.IPv4Address(host)  # refuses leading zeros (0177.0.0.1: octal to inet_aton)
    except ValueError:
        return False
    return v4 in LOOPBACK_V4


def is_loopback_authority(authority: str) -> bool:
    """`authority` (`host[:port]`, as a registry or an image reference names its host) is loopback."""
    found = _AUTHORITY.fullmatch(authority)
    if found is None:
        return False
    port = found["port"]
    if port is not None and not 1 <= int(port) <= 65535:
        return False
    return is_loopback_host(found["host"])


def is_loopback_url(url: str) -> bool:
    """`url` is http(s) to this machine's loopback (see the module docstring for what is refused)."""
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F or c == "\\" for c in url):
        return False  # urlsplit drops tabs and newlines silently; a backslash is a slash to browsers
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme not in URL_SCHEMES:
        return False
    return is_loopback_authority(parts.netloc)


def reaches_loopback_host(host: str) -> bool:
    """Whether `host` names this machine in any spelling a resolver accepts: the wide test, for
    labels (infra/provenance.py: a label must never say `real` of what runs here), where the
    narrow one above is for allowing plain HTTP. Beside what `is_loopback_host` takes: a trailing
    dot and `*.localhost` (resolvers answer them locally), other spellings of 127.0.0.1 (`127.1`,
    `0x7f.1`, `2130706433`: inet_aton's), the IPv4-mapped ::ffff:127.0.0.0/104 and a zone."""
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.split("%", 1)[0].rstrip(".").lower()
    if name == LOCALHOST or name.endswith("." + LOCALHOST):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        if ":" in name or not name or not all(part.isalnum() for part in name.split(".")):
            return False
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def reaches_loopback_url(url: str) -> bool:
    """Whether a client here (Python's URL parser, as Atlas's own clients use) connects to this
    machine for `url`: its parsed host, past any userinfo, by `reaches_loopback_host`."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return False
    return host is not None and reaches_loopback_host(host)
