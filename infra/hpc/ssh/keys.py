"""Host keys and the login key: known_hosts only (never trust on first use), keys never in a message.

An unknown or changed host key is refused with the host and the known_hosts source named.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, NoReturn

from infra.hpc.remote import SshEndpoint
from infra.hpc.ssh.errors import HostKeyError, SshAuthError

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko


def reject_with_source(source: str) -> paramiko.MissingHostKeyPolicy:
    """RejectPolicy, with a message that says which known_hosts was consulted and how to fix it."""

    class RejectWithSource(paramiko.RejectPolicy):
        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> NoReturn:
            raise HostKeyError(
                f"host key of {hostname} ({key.get_name()} SHA256:{key.fingerprint.split(':', 1)[-1]}) is not in "
                f"{source}; Atlas never trusts a key on first use. Check the key with the cluster's admins "
                "and add it (`ssh-keyscan -p PORT HOST`, verified out of band) to the configured known_hosts"
            )

    return RejectWithSource()


def host_key_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def load_host_keys(client: paramiko.SSHClient, text: str, source: str) -> None:
    keys = client.get_host_keys()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(stripped, lineno=number)
        except (paramiko.SSHException, ValueError) as error:
            raise HostKeyError(f"{source}: line {number} cannot be read as a host key ({error})") from None
        if entry is None or entry.key is None:
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)


def _key_classes() -> tuple[type[paramiko.PKey], ...]:
    return (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)


def load_private_key(endpoint: SshEndpoint) -> paramiko.PKey:
    """The login key from secret text or a file; errors never include key material."""
    what = (
        "the private key from secret config"
        if endpoint.private_key
        else f"private key file {endpoint.private_key_file}"
    )
    for key_class in _key_classes():
        try:
            if endpoint.private_key is not None:
                return key_class.from_private_key(io.StringIO(endpoint.private_key), password=endpoint.passphrase)
            if endpoint.private_key_file is not None:
                return key_class.from_private_key_file(endpoint.private_key_file, password=endpoint.passphrase)
        except paramiko.PasswordRequiredException:
            raise SshAuthError(
                f"{what} is encrypted: set private_key_passphrase (as a secret) for {endpoint.address}"
            ) from None
        except FileNotFoundError:
            raise SshAuthError(f"{what} does not exist; fix private_key_file for {endpoint.address}") from None
        except PermissionError:
            raise SshAuthError(f"{what} cannot be read (permission denied)") from None
        except (paramiko.SSHException, ValueError):
            continue  # not this key type (or a wrong passphrase): try the next
    if endpoint.private_key is None and endpoint.private_key_file is None:
        raise SshAuthError(f"no private key configured for {endpoint.address}: set private_key or private_key_file")
    raise SshAuthError(f"{what} is not an Ed25519, ECDSA or RSA key that paramiko can read, or its passphrase is wrong")
