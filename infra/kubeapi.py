"""A small REST client for the Kubernetes API over a kubeconfig: GET, writes, watch streams.

Used by the comparison (infra/compare), the monitor and backfill (infra/monitor,
infra/nodes), the OpenShift side's step completions (infra/openshift/completion.py) and the
local environment (localenv: its readiness checks, volume recycler and build runner).
The `kubernetes` package is not a dependency: these few calls over urllib are all Atlas
needs, and they start in milliseconds inside a dynamic-provider process.

Authentication is what `oc login` and the local cluster write: a bearer token or a client
certificate, with the cluster's CA, from the named context or the current one. Credentials
are read from the kubeconfig (its file, or its content already parsed) at construction and
never logged or returned. Each client counts its requests by kind (`calls`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from infra.kubeconfig import KubeConfigError, context_entries

WATCH_TIMEOUT_S = 240  # server-side timeoutSeconds of one watch request, unless the caller asks for less


class KubeRequestError(Exception):
    """A request the API refused; carries the status and the API's message."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


class KubeApi:
    """Requests to the API server named by a kubeconfig's context (the current one by default)."""

    def __init__(
        self, kubeconfig: Path | Mapping[str, Any], timeout_s: float = 10.0, context: str | None = None
    ) -> None:
        """`kubeconfig`: its file, or its content (relative file references then from the working folder)."""
        if isinstance(kubeconfig, Mapping):
            config, base, where = kubeconfig, Path(), "(in memory)"
        else:
            try:
                config = yaml.safe_load(kubeconfig.read_text()) or {}
            except (OSError, yaml.YAMLError) as error:
                raise KubeConfigError(f"cannot read the kubeconfig {kubeconfig}: {error}") from None
            base, where = kubeconfig.parent, str(kubeconfig)
        cluster, user = context_entries(config, context, where)
        self.server = str(cluster["server"]).rstrip("/")
        self.timeout_s = timeout_s
        self.token = user.get("token")
        self.calls: Counter[str] = Counter()
        with _material(cluster, "certificate-authority", base) as ca:
            self.context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            self.context.check_hostname = False
            self.context.verify_mode = ssl.CERT_NONE
        with _material(user, "client-certificate", base) as cert, _material(user, "client-key", base) as key:
            if cert and key:
                self.context.load_cert_chain(cert, key)

    def _headers(self, accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _request(self, path: str, accept: str) -> urllib.request.Request:
        return urllib.request.Request(self.server + path, headers=self._headers(accept))  # noqa: S310 (kubeconfig https)

    def _open(self, request: urllib.request.Request, kind: str, timeout_s: float | None = None) -> Any:
        """The one place a request goes out: TLS as the kubeconfig says, counted by `kind`."""
        self.calls[kind] += 1
        return urllib.request.urlopen(  # noqa: S310 (the kubeconfig's server)
            request, context=self.context, timeout=self.timeout_s if timeout_s is None else timeout_s
        )

    def _read(self, request: urllib.request.Request, kind: str) -> bytes:
        with self._open(request, kind) as response:
            return bytes(response.read())

    def get(self, path: str) -> Any:
        """A GET of JSON; an HTTP error is urllib's HTTPError as it came."""
        return json.loads(self._read(self._request(path, "application/json"), "GET"))

    def get_json_or_text(self, path: str) -> Any:
        """A GET answered with JSON or with plain text (`/readyz` answers `ok`), decoded by what
        came; an HTTP error is urllib's HTTPError as it came."""
        return _decode(self._read(self._request(path, "application/json"), "GET"))

    def text(self, path: str) -> str:
        """A plain-text GET (a pod's log), raising KubeRequestError with the API's message."""
        try:
            return self._read(self._request(path, "*/*"), "GET").decode(errors="replace")
        except urllib.error.HTTPError as error:
            raise _request_error("GET", path, error) from None

    def download(self, path: str, local: Path) -> bool:
        """Stream a GET's body into `local`; False where the API answers 404 (nothing there)."""
        request = self._request(path, "*/*")
        try:
            with self._open(request, "GET") as response, local.open("wb") as out:
                shutil.copyfileobj(response, out, 1 << 20)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                local.unlink(missing_ok=True)
                return False
            raise
        return True

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """Any verb; JSON in and out. Raises KubeRequestError with the API's own message."""
        headers = self._headers()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.server + path, data=data, headers=headers, method=method)  # noqa: S310
        try:
            raw = self._read(request, method)
        except urllib.error.HTTPError as error:
            raise _request_error(method, path, error) from None
        return _decode(raw)

    def watch(
        self,
        path: str,
        resource_version: str,
        stop: threading.Event | None = None,
        timeout_s: int = WATCH_TIMEOUT_S,
    ) -> Iterator[Mapping[str, Any]]:
        """The events of one watch request (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR), until the
        server ends it after `timeout_s` or `stop` is set (checked between events)."""
        sep = "&" if "?" in path else "?"
        query = urllib.parse.urlencode(
            {
                "watch": "1",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(max(1, int(timeout_s))),
            }
        )
        request = urllib.request.Request(f"{self.server}{path}{sep}{query}", headers=self._headers())  # noqa: S310
        try:
            response = self._open(request, "WATCH", timeout_s + 30)
        except urllib.error.HTTPError as error:
            raise _request_error("WATCH", path, error) from None
        with response:
            while stop is None or not stop.is_set():
                line = response.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)


def _decode(raw: bytes) -> Any:
    return json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()


def _request_error(method: str, path: str, error: urllib.error.HTTPError) -> KubeRequestError:
    detail = error.read().decode(errors="replace")
    with contextlib.suppress(ValueError, AttributeError):
        detail = str(json.loads(detail).get("message", detail))
    return KubeRequestError(method, path, error.code, detail)


@contextlib.contextmanager
def _material(section: Mapping[str, Any], key: str, base: Path) -> Iterator[str | None]:
    """A kubeconfig file reference, or its inline `-data` written to a private temp file for ssl."""
    if section.get(key):
        path = Path(section[key])
        yield str(path if path.is_absolute() else base / path)
        return
    data = section.get(f"{key}-data")
    if not data:
        yield None
        return
    fd, name = tempfile.mkstemp(prefix="atlas-kube-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(data))
        yield name
    finally:
        os.unlink(name)
