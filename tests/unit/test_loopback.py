"""infra/loopback.py: the one loopback test, table by table (each row: the input, the answer, why)."""

from __future__ import annotations

import pytest

from infra import loopback
from infra.loopback import is_loopback_authority, is_loopback_host, is_loopback_url

URLS: list[tuple[str, bool]] = [
    # loopback, as a stand-in's endpoint is written
    ("http://127.0.0.1:16500", True),
    ("http://127.0.0.1:16500/", True),
    ("http://127.0.0.1", True),
    ("https://127.0.0.1:8443/path?q=1#f", True),
    ("http://127.5.6.7:80", True),  # all of 127.0.0.0/8
    ("http://127.255.255.255", True),
    ("http://localhost:9000", True),
    ("http://LOCALHOST:9000", True),  # host names are case-insensitive
    ("HTTP://localhost:9000", True),  # so is the scheme
    ("http://[::1]:9000", True),
    ("http://[::1]", True),
    ("http://[0:0:0:0:0:0:0:1]:9000", True),  # ::1 written out
    # a loopback name or address as a prefix or a suffix of a remote one
    ("http://localhost.example.com", False),
    ("http://localhost.example.com:9000", False),
    ("http://127.0.0.1.evil.com", False),
    ("http://127.0.0.1.nip.io", False),
    ("http://evil.com/127.0.0.1", False),
    ("http://evil.com/?localhost", False),
    ("http://evil.com#127.0.0.1", False),
    ("http://notlocalhost:9000", False),
    ("http://evil-localhost", False),
    ("http://[::1].evil.com", False),
    # userinfo: parsers disagree on which `@` ends it
    ("http://user@localhost@evil", False),
    ("http://localhost@evil.com", False),
    ("http://user@localhost", False),
    ("http://user:pw@127.0.0.1:9000", False),
    ("http://evil.com@127.0.0.1", False),
    # other spellings of 127.0.0.1
    ("http://0x7f.1", False),
    ("http://0x7f000001", False),
    ("http://127.1", False),
    ("http://2130706433", False),
    ("http://0177.0.0.1", False),
    ("http://127.000.000.001", False),
    ("http://[::ffff:127.0.0.1]", False),
    ("http://[::ffff:7f00:1]", False),
    ("http://[::1%25lo]:9000", False),
    ("http://localhost.:9000", False),
    ("http://app.localhost", False),
    # other addresses that are this machine's in some sense, but not loopback
    ("http://0.0.0.0:9000", False),
    ("http://[::]:9000", False),
    ("http://10.0.0.1", False),
    ("http://128.0.0.1", False),
    ("http://126.255.255.255", False),
    # not a URL to a host at all, or not http(s)
    ("", False),
    ("localhost:9000", False),
    ("127.0.0.1", False),
    ("ftp://127.0.0.1", False),
    ("file://localhost/etc/passwd", False),
    ("http://", False),
    ("http:///127.0.0.1", False),
    ("http://:9000", False),
    # ports
    ("http://127.0.0.1:0", False),
    ("http://127.0.0.1:65536", False),
    ("http://127.0.0.1:99999", False),
    ("http://127.0.0.1:", False),
    ("http://127.0.0.1:9000x", False),
    ("http://[::1", False),
    # characters parsers read differently
    ("http://127.0.0.1\\@evil.com", False),
    ("http://127.0.0.1\t.evil.com", False),
    ("http://127.0.0.1\n.evil.com", False),
    ("http://local\x00host", False),
    (" http://127.0.0.1", False),
    ("http://127.0.0.1 .evil.com", False),
]


@pytest.mark.parametrize(("url", "loopback"), URLS, ids=[repr(u) for u, _ in URLS])
def test_is_loopback_url(url: str, loopback: bool) -> None:
    assert is_loopback_url(url) is loopback


AUTHORITIES: list[tuple[str, bool]] = [
    ("127.0.0.1:5000", True),
    ("127.0.0.1", True),
    ("localhost:5000", True),
    ("Localhost", True),
    ("[::1]:5000", True),
    ("[::1]", True),
    ("::1", False),  # unbracketed, `::1` is not a host[:port]
    ("localhost.example.com:5000", False),
    ("127.0.0.1.evil.com", False),
    ("127.0.0.1:5000/evil", False),
    ("user@127.0.0.1:5000", False),
    ("quay.io", False),
    ("registry-1.docker.io", False),
    ("127.0.0.1:0", False),
    ("127.0.0.1:70000", False),
    ("[127.0.0.1]:5000", False),  # brackets hold an IPv6 address only
    ("", False),
]


@pytest.mark.parametrize(("authority", "loopback"), AUTHORITIES, ids=[repr(a) for a, _ in AUTHORITIES])
def test_is_loopback_authority(authority: str, loopback: bool) -> None:
    assert is_loopback_authority(authority) is loopback


HOSTS: list[tuple[str, bool]] = [
    ("localhost", True),
    ("127.0.0.1", True),
    ("127.10.20.30", True),
    ("::1", True),
    ("[::1]", True),
    ("0:0::1", True),
    ("localhost.", False),
    ("::ffff:127.0.0.1", False),
    ("::1%lo", False),
    ("0x7f.1", False),
    ("1.2.3.4", False),
    ("[localhost]", False),
    ("", False),
]


@pytest.mark.parametrize(("host", "loopback"), HOSTS, ids=[repr(h) for h, _ in HOSTS])
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(("host", "reaches"), [
    ("localhost", True), ("LocalHost.", True), ("a.localhost", True), ("127.0.0.1", True), ("127.1", True),
    ("0x7f.1", True), ("2130706433", True), ("[::1]", True), ("::1%lo", True), ("::ffff:127.0.0.1", True),
    ("localhost.example.com", False), ("127.0.0.1.evil.com", False), ("10.0.0.1", False), ("::2", False),
    ("api.cluster.example", False), ("", False), ("0x7f.1.example", False),
])
def test_the_wide_test_takes_every_spelling_of_this_machine(host: str, reaches: bool) -> None:
    """Labels use the wide test: a label must never say `real` of what runs here, however spelt."""
    assert loopback.reaches_loopback_host(host) is reaches


@pytest.mark.parametrize(("url", "reaches"), [
    ("http://user@localhost:1", True), ("https://LOCALHOST.:6443", True), ("http://[::ffff:127.0.0.1]:80", True),
    ("http://user@localhost@evil.example", False),  # Python's client connects to evil.example
    ("http://localhost.example.com", False), ("not a url", False), ("http://[::1", False),
])
def test_the_wide_url_test_follows_pythons_parser(url: str, reaches: bool) -> None:
    assert loopback.reaches_loopback_url(url) is reaches
