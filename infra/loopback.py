"""Whether a host or URL names this machine's loopback: exactly `localhost`, an address in
127.0.0.0/8, or ::1, found by parsing (urllib.parse, ipaddress), never by a substring.

`http://localhost.example.com` and `http://127.0.0.1.evil.com` are remote hosts: a substring test
would take them for this machine. Pure and stdlib only.
"""

from __future__ import annotations

import ipaddress
import urllib.parse

LOCALHOST = "localhost"


def is_loopback_host(host: str) -> bool:
    """`host` as a URL or an ssh config writes it (brackets around IPv6 allowed, one trailing
    dot allowed, any case) is `localhost`, in 127.0.0.0/8 or ::1. Names that merely resolve
    to loopback (a hosts-file alias) are not looked up: only what the text itself says."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.lower().removesuffix(".")
    if text == LOCALHOST:
        return True
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return address.is_loopback


def is_loopback_url(url: str) -> bool:
    """The URL's host (after any userinfo, before any port) is loopback; a URL that does not
    parse, or has no host, is not."""
    try:
        host = urllib.parse.urlsplit(url.strip()).hostname
    except ValueError:
        return False
    return host is not None and is_loopback_host(host)
