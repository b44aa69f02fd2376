"""boto3 clients for the AWS providers: built per call from resource inputs, cached per process.

Why a module-level cache: Pulumi pickles dynamic providers into state, so they hold no live
objects; each provider method asks `client(props, "ec2")` instead, and every resource that
one provider process serves shares one client per (service, region, endpoint, credentials).

Credentials arrive in the `aws_secret` input (a Pulumi secret) or, when it holds none, come
from the standard AWS chain of the provider's process. They are never logged, never put in an
error message, and only a digest of them is used as a cache key.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from infra.extras import missing_extra

try:
    import boto3
    import botocore.config
    import botocore.exceptions
except ModuleNotFoundError as missing:  # the base install has no boto3
    raise missing_extra(missing, "aws", "infra.aws (AwsEnvironment)") from None

T = TypeVar("T")
_CLIENTS: dict[tuple[str, str, str, str], Any] = {}
_LOCK = threading.Lock()
# Standard retry mode: throttling and 5xx are retried by botocore itself, with backoff.
_BOTO_CONFIG = botocore.config.Config(retries={"max_attempts": 6, "mode": "standard"}, connect_timeout=10)


class AwsProviderError(Exception):
    """An AWS call that failed; the message names the operation, the resource and AWS's reason."""


def _target(props: Mapping[str, Any]) -> tuple[str, str | None, str | None, str | None]:
    target = props.get("aws") or {}
    secret = props.get("aws_secret") or {}
    return (
        str(target.get("region")),
        target.get("endpoint_url") or None,
        secret.get("access_key_id") or None,
        secret.get("secret_access_key") or None,
    )


def client(props: Mapping[str, Any], service: str) -> Any:
    """The process's boto3 client for a resource's `aws` (plain) and `aws_secret` (secret) inputs."""
    region, endpoint, access, secret = _target(props)
    digest = hashlib.sha256(f"{access}\0{secret}".encode()).hexdigest()
    key = (service, region, endpoint or "", digest)
    with _LOCK:  # boto3's sessions are not thread-safe to create clients from; clients are
        found = _CLIENTS.get(key)
        if found is None:
            session = boto3.session.Session(aws_access_key_id=access, aws_secret_access_key=secret, region_name=region)
            found = session.client(service, endpoint_url=endpoint, config=_BOTO_CONFIG)
            _CLIENTS[key] = found
        return found


def error_code(error: BaseException) -> str:
    if isinstance(error, botocore.exceptions.ClientError):
        return str(error.response.get("Error", {}).get("Code", ""))
    return ""


def call(what: str, action: Callable[[], T], *, gone_codes: tuple[str, ...] = ()) -> T | None:
    """Run one AWS call; None when it failed with one of `gone_codes` (the thing is already gone).

    Every other failure becomes an AwsProviderError naming `what`, AWS's code and message:
    botocore's messages carry no credentials, and nothing else is added to them.
    """
    try:
        return action()
    except botocore.exceptions.ClientError as error:
        code = error_code(error)
        if code in gone_codes:
            return None
        message = error.response.get("Error", {}).get("Message", "")
        raise AwsProviderError(f"{what}: AWS answered {code}: {message}") from None
    except botocore.exceptions.NoCredentialsError:
        raise AwsProviderError(
            f"{what}: no AWS credentials: set atlas:aws.access_key_id and secret_access_key as secrets, "
            "or configure the standard AWS chain for the process that runs `pulumi`"
        ) from None
    except botocore.exceptions.EndpointConnectionError as error:
        raise AwsProviderError(
            f"{what}: cannot reach {error.kwargs.get('endpoint_url', 'the AWS endpoint')}; check "
            "atlas:aws.endpoint_url and the network (locally: `scripts/localenv up --only aws`)"
        ) from None
    except botocore.exceptions.BotoCoreError as error:
        raise AwsProviderError(f"{what}: {type(error).__name__}: {error}") from None


def must(what: str, action: Callable[[], T]) -> T:
    result = call(what, action)
    if result is None:  # call() returns None only for gone_codes, and none were given
        raise AwsProviderError(f"{what}: AWS returned nothing")
    return result
