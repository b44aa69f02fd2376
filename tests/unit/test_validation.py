"""The shared section readers: the message names the key, the problem and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.config_schema import find_placeholder, reject_placeholders
from infra.validation import Fields, config_path, is_dns_label


class DemoError(ValueError):
    pass


FIELDS = Fields(DemoError)


def test_mapping_reports_the_type_but_never_the_value() -> None:
    with pytest.raises(DemoError) as caught:
        FIELDS.mapping("-----BEGIN OPENSSH PRIVATE KEY----- secret", "atlas:demo")
    assert str(caught.value) == "atlas:demo: expected an object, found str; write it as `key: value` lines"
    assert "secret" not in str(caught.value)
    assert FIELDS.mapping(None, "atlas:demo", allow_missing=True) == {}
    with pytest.raises(DemoError, match="found NoneType"):
        FIELDS.mapping(None, "atlas:demo")


def test_unknown_keys_are_listed_with_the_allowed_ones_sorted() -> None:
    with pytest.raises(DemoError) as caught:
        FIELDS.reject_unknown({"zone": 1, "hostname": 2, "port": 3}, ("port", "host"), "atlas:demo")
    assert str(caught.value) == "atlas:demo: unknown key(s) hostname, zone; remove them or use one of: host, port"
    FIELDS.reject_unknown({"port": 1}, frozenset({"port"}), "atlas:demo")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), ("FALSE", False), (None, None)],
)
def test_boolean_takes_yaml_and_pulumi_config_strings(value: Any, expected: bool | None) -> None:
    section = {} if value is None else {"flag": value}
    assert FIELDS.boolean(section, "flag", "atlas:demo", default=True) is (True if expected is None else expected)


@pytest.mark.parametrize("value", ["yes", 1, "1", [True]])
def test_boolean_refuses_anything_else(value: Any) -> None:
    with pytest.raises(DemoError, match=r"^atlas:demo\.flag: expected true or false"):
        FIELDS.boolean({"flag": value}, "flag", "atlas:demo", default=False)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("3.5", "expected a whole number"),
        (True, "expected a whole number"),
        (-1, "-1 is negative"),
        (0, "0 is out of range; use a number from 1 to 10"),
        (11, "11 is out of range; use a number from 1 to 10"),
    ],
)
def test_integer_bounds(value: Any, message: str) -> None:
    with pytest.raises(DemoError, match=rf"^atlas:demo\.count: {message}"):
        FIELDS.integer({"count": value}, "count", "atlas:demo", default=None, minimum=1, maximum=10)


def test_integer_reads_pulumi_config_strings_and_defaults() -> None:
    assert FIELDS.integer({"count": " 7 "}, "count", "atlas:demo", default=None, minimum=1) == 7
    assert FIELDS.integer({}, "count", "atlas:demo", default=3, minimum=1) == 3
    assert FIELDS.integer({}, "count", "atlas:demo", default=None, minimum=1) is None


def test_number_and_text() -> None:
    assert FIELDS.number({"rate": "2.5"}, "rate", "atlas:demo", default=1.0, minimum=0.0, maximum=10.0) == 2.5
    with pytest.raises(DemoError, match=r"rate: often is out|rate: expected a number"):
        FIELDS.number({"rate": "often"}, "rate", "atlas:demo", default=1.0, minimum=0.0, maximum=10.0)
    with pytest.raises(DemoError, match=r"rate: 11.0 is out of range; use 0 to 10"):
        FIELDS.number({"rate": 11.0}, "rate", "atlas:demo", default=1.0, minimum=0.0, maximum=10.0)
    assert FIELDS.optional_text({}, "name", "atlas:demo") is None
    with pytest.raises(DemoError, match="one-line string"):
        FIELDS.optional_text({"name": "a\nb"}, "name", "atlas:demo")
    with pytest.raises(DemoError, match="is 6 characters long; use at most 5"):
        FIELDS.optional_text({"name": "abcdef"}, "name", "atlas:demo", max_len=5)


def test_an_optional_section_is_none_when_absent_or_disabled() -> None:
    assert FIELDS.enabled_section(None, "atlas:demo", ("enabled",)) is None
    assert FIELDS.enabled_section({"enabled": "false"}, "atlas:demo", ("enabled",)) is None
    assert FIELDS.enabled_section({"port": 1}, "atlas:demo", ("enabled", "port")) == {"port": 1}
    with pytest.raises(DemoError, match=r"^atlas:demo: unknown key\(s\) prot"):
        FIELDS.enabled_section({"prot": 1, "enabled": False}, "atlas:demo", ("enabled", "port"))


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"host": "REPLACE_WITH_HOST"}, ("atlas:demo.host", "REPLACE_WITH_HOST")),
        ({"cidrs": ["10.0.0.1/32", "REPLACE_WITH_ADDRESS/32"]}, ("atlas:demo.cidrs[1]", "REPLACE_WITH_ADDRESS/32")),
        ({"image": {"ref": "q.io/REPLACE_WITH_ORG/x"}}, ("atlas:demo.image.ref", "q.io/REPLACE_WITH_ORG/x")),
        ({"host": "login.example.org", "port": 22}, None),
    ],
)
def test_placeholders_are_found_where_they_stand(value: Any, found: tuple[str, str] | None) -> None:
    assert find_placeholder(value, "atlas:demo") == found


def test_a_placeholder_names_its_key_and_the_config_line() -> None:
    with pytest.raises(DemoError) as caught:
        reject_placeholders({"user": "REPLACE_WITH_USER"}, "atlas:demo", DemoError)
    assert str(caught.value) == (
        "atlas:demo.user: still the example's placeholder REPLACE_WITH_USER; "
        "set it with `pulumi config set --path atlas:demo.user ...`"
    )
    with pytest.raises(DemoError, match=r"REPLACE_WITH_USER; ask the admins$"):
        reject_placeholders({"user": "REPLACE_WITH_USER"}, "atlas:demo", DemoError, "ask the admins")


@pytest.mark.parametrize(
    ("value", "subdomain", "ok"),
    [
        ("atlas-biggan", False, True),
        ("a" * 63, False, True),
        ("a" * 64, False, False),
        ("Atlas", False, False),
        ("-atlas", False, False),
        ("data.example.org", False, False),
        ("data.example.org", True, True),
        ("a" * 254, True, False),
        (7, False, False),
    ],
)
def test_kubernetes_names(value: Any, subdomain: bool, ok: bool) -> None:
    if ok:
        assert FIELDS.kubernetes_name(value, "atlas:demo.name", subdomain=subdomain) == value
        assert is_dns_label(value) is ("." not in value)
    else:
        with pytest.raises(DemoError, match=r"^atlas:demo\.name: .* is not a valid Kubernetes name; use at most"):
            FIELDS.kubernetes_name(value, "atlas:demo.name", subdomain=subdomain)


@pytest.mark.parametrize(("value", "ok"), [("", True), ("run-2026_12.02", True), ("run 1", False), ("x" * 64, False)])
def test_label_values(value: str, ok: bool) -> None:
    if ok:
        assert FIELDS.label_value(value, "run_id") == value
    else:
        with pytest.raises(DemoError, match=r"^run_id: .* cannot be a label value; use at most 63"):
            FIELDS.label_value(value, "run_id")


def test_step_names_and_choices() -> None:
    assert FIELDS.step_names({}, "wait_for", "atlas:demo") is None
    assert FIELDS.step_names({"wait_for": ["make-hdf5"]}, "wait_for", "atlas:demo") == ("make-hdf5",)
    with pytest.raises(DemoError, match=r"^atlas:demo\.wait_for: expected a list of step names, found \['Make'\]"):
        FIELDS.step_names({"wait_for": ["Make"]}, "wait_for", "atlas:demo")
    assert FIELDS.choice({}, "market", "atlas:demo", ("spot", "on-demand"), "spot", "spot or on-demand") == "spot"
    with pytest.raises(DemoError, match=r"^atlas:demo\.market: 'cheap' is not known; use one of: on-demand, spot$"):
        FIELDS.choice({"market": "cheap"}, "market", "atlas:demo", ("spot", "on-demand"), None, "spot or on-demand")
    with pytest.raises(DemoError, match=r"^atlas:demo\.region: required but missing; set it$"):
        FIELDS.choice({}, "region", "atlas:demo", ("us-east-1",), None, "set it")


def test_config_paths_are_relative_to_the_project(tmp_path: Path) -> None:
    assert config_path("keys/id", tmp_path) == tmp_path / "keys" / "id"
    assert config_path("/etc/atlas/id", tmp_path) == Path("/etc/atlas/id")
    assert config_path("~/id", tmp_path) == Path.home() / "id"
    assert config_path("keys/id", None) == Path("keys/id")
