"""A kubeconfig user's credentials as requests need them: a bearer token, a client certificate, or
what an exec credential plugin issues; and the TLS context that checks the server.

`KubeCredentials(resolved)` (a context from infra/kubeconfig.py) gives each request its
`Authorization` header and its `ssl.SSLContext` (`for_request`); after a 401, `refresh()` says whether asking
again can help (a token file re-read, an exec plugin run again) and makes it so. As client-go:
- a bearer token: `token`, or `tokenFile` (re-read every minute and after a 401), which wins over
  an exec plugin's token;
- a client certificate and key: files, or `client-certificate-data` and `client-key-data`;
- an exec plugin (`client.authentication.k8s.io/v1` or `v1beta1` ExecCredential): its command
  is run with the entry's `args` and `env` added to this process's, `KUBERNETES_EXEC_INFO` holding
  the request (never interactive; the cluster's details where `provideClusterInfo` asks), stdin
  closed. Its `status.token` or client certificate is kept, per process and per plugin entry,
  until `status.expirationTimestamp`, and it runs again after a 401;
- the server checked against `certificate-authority(-data)`, else the system's CAs; unchecked
  only where the cluster sets `insecure-skip-tls-verify` and the stack allowed it
  (infra/kubeconfig.py refuses it otherwise).

No credential leaves this module except in the header it builds: errors name the user entry,
the plugin's command and what it wrote on stderr, never what it wrote on stdout. Inline key
material is written for `ssl` to load into a private temporary file that is removed at once.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.kubeconfig import KubeAccessError, KubeConfigError, ResolvedContext
from infra.timeparse import rfc3339

EXEC_TIMEOUT_S = 60.0  # a plugin that waits longer is waiting for a person (a browser login)
TOKEN_FILE_PERIOD_S = 60.0  # client-go re-reads a token file this often
EXPIRY_MARGIN_S = 10.0  # an exec credential this close to its expiry is renewed before use
STDERR_TAIL = 300  # characters of a failing plugin's stderr shown


class KubeCredentialError(KubeAccessError):
    """A credential could not be had: an exec plugin missing, failing or answering nonsense, a
    certificate that does not load; the message names the user entry and the fix."""


@dataclass(frozen=True)
class Issued:
    """What an exec plugin gave: a token, or a client certificate and key (PEM), until `expires_at`."""

    token: str
    cert_pem: str
    key_pem: str
    expires_at: float | None  # Unix seconds; None: until the server refuses it

    def __repr__(self) -> str:
        return f"Issued(expires_at={self.expires_at!r})"

    def fresh(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at - EXPIRY_MARGIN_S


_EXEC_LOCK = threading.Lock()
_EXEC_CACHE: dict[str, Issued] = {}


def _exec_key(exec_: Mapping[str, Any], info: str) -> str:
    return json.dumps([exec_.get("command"), exec_.get("args") or [], exec_.get("env") or [], info], sort_keys=True)


def _read_bytes(path: str, label: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as error:
        raise KubeConfigError(
            f"{label} {path} cannot be read ({error.strerror}); fix the path, or log in again"
        ) from None


def _b64(value: Any, label: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise KubeConfigError(f"{label} is not base64; write it again (`kubectl config view --raw` shows it)") from None


def exec_info(resolved: ResolvedContext) -> str:
    """KUBERNETES_EXEC_INFO: the ExecCredential request a plugin reads (never interactive)."""
    exec_ = resolved.user.get("exec") or {}
    spec: dict[str, Any] = {"interactive": False}
    if exec_.get("provideClusterInfo"):
        cluster = resolved.cluster
        info: dict[str, Any] = {"server": resolved.server}
        if cluster.get("certificate-authority-data"):
            info["certificate-authority-data"] = str(cluster["certificate-authority-data"])
        elif cluster.get("certificate-authority"):
            raw = _read_bytes(
                str(cluster["certificate-authority"]), f"cluster {resolved.cluster_name!r}: certificate-authority"
            )
            info["certificate-authority-data"] = base64.b64encode(raw).decode()
        if cluster.get("insecure-skip-tls-verify"):
            info["insecure-skip-tls-verify"] = True
        extensions = cluster.get("extensions") or []
        for extension in extensions if isinstance(extensions, list) else []:
            if isinstance(extension, Mapping) and extension.get("name") == "client.authentication.k8s.io/exec":
                info["config"] = extension.get("extension")
        spec["cluster"] = info
    return json.dumps({"apiVersion": exec_.get("apiVersion"), "kind": "ExecCredential", "spec": spec})


def run_exec_plugin(resolved: ResolvedContext) -> Issued:
    """Run the user's exec plugin once and read its ExecCredential (see the module's docstring)."""
    exec_ = resolved.user.get("exec") or {}
    label = f"user {resolved.user_name!r} of {resolved.where}"
    command = str(exec_.get("command"))
    name = Path(command).name
    env = dict(os.environ)
    for item in exec_.get("env") or []:
        if isinstance(item, Mapping) and item.get("name"):
            env[str(item["name"])] = str(item.get("value", ""))
    env["KUBERNETES_EXEC_INFO"] = exec_info(resolved)
    argv = [command, *(str(a) for a in exec_.get("args") or [])]
    try:
        proc = subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=EXEC_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        hint = str(exec_.get("installHint") or "").strip().replace("\n", " ")
        raise KubeCredentialError(
            f"{label}: the exec credential plugin `{command}` is not installed (or not on PATH); "
            + (hint or f"install it, or log in another way (`oc login --server={resolved.server}`)")
        ) from None
    except subprocess.TimeoutExpired:
        raise KubeCredentialError(
            f"{label}: the exec credential plugin `{name}` did not answer within {EXEC_TIMEOUT_S:.0f} s (waiting for "
            "a person? Atlas never runs it interactively): log in with it by hand first, then retry"
        ) from None
    except OSError as error:
        raise KubeCredentialError(
            f"{label}: the exec credential plugin `{command}` cannot run ({error.strerror})"
        ) from None
    if proc.returncode != 0:
        said = proc.stderr.decode(errors="replace").strip().replace("\n", " ")[-STDERR_TAIL:]
        raise KubeCredentialError(
            f"{label}: the exec credential plugin `{name}` failed (exit {proc.returncode}"
            + (f": {said}" if said else "")
            + "); log in again with it (its own login), then retry"
        )
    return _read_exec_credential(proc.stdout, str(exec_.get("apiVersion")), f"{label}: the exec plugin `{name}`")


def _read_exec_credential(stdout: bytes, api_version: str, label: str) -> Issued:
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise KubeCredentialError(f"{label} did not print an ExecCredential (not JSON)") from None
    if not isinstance(doc, Mapping) or doc.get("kind") != "ExecCredential":
        raise KubeCredentialError(f"{label} did not print an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise KubeCredentialError(
            f"{label} answered {doc.get('apiVersion')!r}, the kubeconfig asks for {api_version!r}: make them agree"
        )
    status = doc.get("status")
    if not isinstance(status, Mapping):
        raise KubeCredentialError(f"{label} gave no status")
    token = str(status.get("token") or "")
    cert, key = str(status.get("clientCertificateData") or ""), str(status.get("clientKeyData") or "")
    if bool(cert) != bool(key):
        raise KubeCredentialError(
            f"{label} gave a client certificate without its key, or a key without its certificate"
        )
    if not token and not cert:
        raise KubeCredentialError(f"{label} gave neither a token nor a client certificate")
    try:
        expires = rfc3339(str(status.get("expirationTimestamp") or "") or None)
    except ValueError:
        raise KubeCredentialError(f"{label} gave an expirationTimestamp that is not RFC 3339") from None
    return Issued(token, cert, key, expires)


@contextlib.contextmanager
def _private_files(*contents: bytes) -> Iterator[list[str]]:
    """Each content in a temporary file only this user can read, removed on leaving."""
    names: list[str] = []
    try:
        for content in contents:
            fd, name = tempfile.mkstemp(prefix="atlas-kube-")
            names.append(name)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        yield names
    finally:
        for name in names:
            os.unlink(name)


class KubeCredentials:
    """The Authorization header and TLS context of one resolved context (see the module's docstring)."""

    def __init__(self, resolved: ResolvedContext, clock: Any = time.time) -> None:
        self.resolved = resolved
        self._clock = clock
        self._lock = threading.Lock()
        user = resolved.user
        self._label = f"user {resolved.user_name!r} of {resolved.where}"
        self._token_file = str(user.get("tokenFile") or "")
        self._token = str(user.get("token") or "")
        self._token_read_at = -float("inf")
        self._exec = user.get("exec") if isinstance(user.get("exec"), Mapping) else None
        self._exec_key = _exec_key(self._exec, exec_info(resolved)) if self._exec else ""
        self._ssl: ssl.SSLContext | None = None
        self._ssl_cert: tuple[str, str] | None = None  # the exec-issued pair the TLS context carries
        self.base_ssl = self._base_context()  # checked now: a CA or certificate that does not load fails here

    # --- TLS ----------------------------------------------------------------------------------

    def _base_context(self) -> ssl.SSLContext:
        cluster, resolved = self.resolved.cluster, self.resolved
        where = f"cluster {resolved.cluster_name!r} of {resolved.where}"
        try:
            if cluster.get("certificate-authority-data"):
                pem = _b64(cluster["certificate-authority-data"], f"{where}: certificate-authority-data")
                context = ssl.create_default_context(cadata=pem.decode(errors="replace"))
            elif cluster.get("certificate-authority"):
                context = ssl.create_default_context(
                    cafile=str(Path(str(cluster["certificate-authority"])).expanduser())
                )
            else:
                context = ssl.create_default_context()
        except (ssl.SSLError, ValueError):
            raise KubeConfigError(
                f"{where}: its certificate authority is not a PEM certificate; write it again"
            ) from None
        if cluster.get("insecure-skip-tls-verify") in (True, "true"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        user = self.resolved.user
        if user.get("client-certificate-data") or user.get("client-certificate"):
            cert = (
                _b64(user["client-certificate-data"], f"{self._label}: client-certificate-data")
                if user.get("client-certificate-data")
                else _read_bytes(str(user["client-certificate"]), f"{self._label}: client-certificate")
            )
            key = (
                _b64(user["client-key-data"], f"{self._label}: client-key-data")
                if user.get("client-key-data")
                else _read_bytes(str(user["client-key"]), f"{self._label}: client-key")
            )
            self._load_pair(context, cert, key)
        return context

    def _load_pair(self, context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
        with _private_files(cert, key) as (cert_file, key_file):
            try:
                context.load_cert_chain(cert_file, key_file)
            except ssl.SSLError:
                raise KubeCredentialError(
                    f"{self._label}: the client certificate and key do not load (not PEM, or not a pair); log in again"
                ) from None

    def _context_for(self, issued: Issued | None) -> ssl.SSLContext:
        """The TLS context: with the exec plugin's client certificate, where it gave one."""
        if issued is None or not issued.cert_pem:
            return self.base_ssl
        with self._lock:
            pair = (issued.cert_pem, issued.key_pem)
            if self._ssl is None or self._ssl_cert != pair:
                context = self._base_context()
                self._load_pair(context, issued.cert_pem.encode(), issued.key_pem.encode())
                self._ssl, self._ssl_cert = context, pair
            return self._ssl

    # --- the bearer token ---------------------------------------------------------------------

    def _issued(self, renew: bool = False) -> Issued:
        assert self._exec is not None
        with _EXEC_LOCK:
            cached = _EXEC_CACHE.get(self._exec_key)
            if cached is None or renew or not cached.fresh(self._clock()):
                cached = _EXEC_CACHE[self._exec_key] = run_exec_plugin(self.resolved)
            return cached

    def _file_token(self, reread: bool = False) -> str:
        with self._lock:
            now = self._clock()
            if reread or now - self._token_read_at >= TOKEN_FILE_PERIOD_S:
                self._token = _read_bytes(self._token_file, f"{self._label}: tokenFile").decode().strip()
                self._token_read_at = now
            return self._token

    def for_request(self) -> tuple[str | None, ssl.SSLContext]:
        """The next request's Authorization header value (None: a client certificate, or
        anonymous) and TLS context; an exec plugin is asked at most once for both."""
        issued = self._issued() if self._exec is not None else None
        token = self._file_token() if self._token_file else self._token
        if not token and issued is not None:
            token = issued.token
        return (f"Bearer {token}" if token else None), self._context_for(issued)

    def refresh(self) -> bool:
        """After a 401: renew what can be renewed; whether asking again may now succeed."""
        if self._token_file:
            token = self._token
            return self._file_token(reread=True) != token
        if self._exec is not None and not self._token:
            with _EXEC_LOCK:
                issued = _EXEC_CACHE.get(self._exec_key)
            # Run again: a plugin that gives the same credential again cannot help.
            return self._issued(renew=True) != issued
        return False


def forget_exec_credentials() -> None:
    """Drop every cached exec credential of this process (tests; a user who logged out)."""
    with _EXEC_LOCK:
        _EXEC_CACHE.clear()
