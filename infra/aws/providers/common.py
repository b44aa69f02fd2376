"""What every AWS dynamic resource shares: its common inputs (where, with which credentials,
named and tagged how), their check and diff, naming, tagging, waiting, and registration.

See infra/aws/providers/__init__.py for the resources' lifecycle.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from infra.aws.clients import AwsProviderError
from infra.dynamic.inputs import changed
from infra.dynamic.registration import DynamicResource
from infra.dynamic.version import provider_version

_AWS_DIR = Path(__file__).resolve().parents[1]
# Code changes show up in `pulumi preview` as an update of every AWS resource (and nothing else).
PROVIDER_VERSION = provider_version(
    [*sorted((_AWS_DIR / "providers").glob("*.py")), _AWS_DIR / "clients.py", _AWS_DIR / "launch.py"]
)
# Secret on the way in; kept encrypted in state on the way out too.
SECRET_OUTPUTS = ("aws_secret", "ssh_secret", "private_key")
# Inputs every AWS resource has; a change to any of them is an update in place.
COMMON_UPDATES = ("provider_version", "aws_secret", "tags")


def common_inputs(
    region: str,
    endpoint_url: str | None,
    aws_secret: pulumi.Input[dict[str, Any]],
    name_prefix: str,
    tags: Mapping[str, str],
) -> dict[str, Any]:
    """The inputs every AWS resource takes: where, with which credentials, named and tagged how."""
    return {
        "provider_version": PROVIDER_VERSION,
        "aws": {"region": region, "endpoint_url": endpoint_url},
        "aws_secret": aws_secret,
        "name_prefix": name_prefix,
        "tags": dict(tags),
    }


class AwsResource(DynamicResource):
    """An AWS resource: `common_inputs` and its own, registered with the AWS secrets kept secret."""

    SECRET_OUTPUTS = SECRET_OUTPUTS


# --- naming and tagging ------------------------------------------------------------------------


def suffix() -> str:
    return secrets.token_hex(4)


def new_name(props: Mapping[str, Any]) -> str:
    """A new object's name: the prefix and a random suffix (as Pulumi's own auto-naming does, so a
    replacement never collides with its predecessor)."""
    return f"{props['name_prefix']}-{suffix()}"


# --- check and diff ----------------------------------------------------------------------------


def diff_inputs(
    olds: Mapping[str, Any], news: Mapping[str, Any], replaces: Sequence[str], updates: Sequence[str] = ()
) -> pulumi.dynamic.DiffResult:
    replace = changed(olds, news, ("aws", "name_prefix", *replaces))
    update = changed(olds, news, (*COMMON_UPDATES, *updates))
    return pulumi.dynamic.DiffResult(changes=bool(replace or update), replaces=replace, delete_before_replace=False)


def drifted(result: pulumi.dynamic.DiffResult) -> pulumi.dynamic.DiffResult:
    """`result`, changed: refresh saw the object differ from its inputs outside Atlas; `up` puts it back."""
    return pulumi.dynamic.DiffResult(changes=True, replaces=result.replaces, delete_before_replace=False)


# --- waiting and reading -----------------------------------------------------------------------


def wait(what: str, check: Callable[[], bool], timeout_s: float, interval_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AwsProviderError(
                f"{what}: still not done after {timeout_s:.0f} s; run the command again to keep waiting"
            )
        time.sleep(interval_s)


def gone() -> pulumi.dynamic.ReadResult:
    """What `read` returns for an object that no longer exists: the engine drops it from state."""
    return pulumi.dynamic.ReadResult("", {})
