"""The shared section readers: the message names the key, the problem and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from infra.validation import Fields


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
