"""A small REST client for the Kubernetes API over a kubeconfig context: GET, writes, watch streams.

Used by the comparison (infra/compare), the monitor and backfill (infra/monitor,
infra/nodes), the OpenShift side's step completions (infra/openshift/completion.py), the local
environment (localenv: its readiness checks, volume recycler and build runner) and pre-flight
checks (`whoami`, `can_i`). The `kubernetes` package is not a dependency: these few calls over
urllib are all Atlas needs, and they start in milliseconds inside a dynamic-provider process.

Which server and credentials: a context resolved by infra/kubeconfig.py (`KubeApi(resolved)`:
KUBECONFIG merged as kubectl merges it, the context the stack names), or one kubeconfig file or
document and a context in it (`KubeApi(path_or_document, context=...)`). The credentials are
infra/kubeauth.py's: a token, a client certificate, or an exec plugin's; never logged or returned.

What the API refuses, in one line each (the CLIs print it alone, the dynamic providers' host
without a traceback):
- 401 is `KubeAuthError`, after one retry with renewed credentials where that can help (a token
  file re-read, an exec plugin run again): it names the context, the server and how to log in
  again (`oc login --server=...` on OpenShift);
- 403 is `KubeForbiddenError`, naming the verb, the resource and where (the API's own sentence
  names the identity);
- any other refusal is `KubeRequestError` with the API's message, except through `get` and
  `download`, where it stays urllib's HTTPError (callers tell 404 apart by `code`), the API's
  sentence its message;
- a server certificate the kubeconfig's CA does not vouch for is `KubeTlsError`.
Each client counts its requests by kind (`calls`).
"""

from __future__ import annotations

import io
import json
import shutil
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from infra.kubeauth import KubeCredentials
from infra.kubeconfig import KubeAccessError, KubeconfigRequest, ResolvedContext, resolve_context, resolve_document

WATCH_TIMEOUT_S = 240  # server-side timeoutSeconds of one watch request, unless the caller asks for less
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "WATCH": "watch"}


class KubeRequestError(Exception):
    """A request the API refused; carries the status and the API's message."""

    def __init__(self, method: str, path: str, status: int, message: str, text: str | None = None) -> None:
        self.status = status
        self.method, self.path, self.api_message = method, path, message
        super().__init__(text or f"{method} {path}: HTTP {status}: {message}")


class KubeAuthError(KubeRequestError, KubeAccessError):
    """401: the context's credentials were refused (expired, revoked); the message says how to log in again."""


class KubeForbiddenError(KubeRequestError, KubeAccessError):
    """403: the identity may not do this; the message names the verb, the resource and where."""


class KubeTlsError(KubeAccessError):
    """The server's certificate is not one the kubeconfig's certificate authority vouches for."""


def request_target(method: str, path: str) -> tuple[str, str, str]:
    """The verb, resource (`jobs.batch`, `nodes`, `pods/log`) and namespace ("" cluster-wide) of a
    request, as RBAC names them."""
    parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(path).path.strip("/").split("/") if p]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    group = ""
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return (_VERBS.get(method, method.lower()), "/" + "/".join(parts), "")
    namespace = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    named = len(rest) >= 2
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    if group:
        resource = f"{resource.split('/')[0]}.{group}" + (f"/{resource.split('/', 1)[1]}" if "/" in resource else "")
    verb = _VERBS.get(method, method.lower())
    if method == "GET":
        verb = "watch" if query.get("watch") else ("get" if named else "list")
    elif method == "DELETE" and not named:
        verb = "deletecollection"
    return verb, resource, namespace


def _message(body: bytes) -> str:
    detail = body.decode(errors="replace").strip()
    try:
        parsed = json.loads(detail)
    except ValueError:
        return detail
    return str(parsed.get("message", detail)) if isinstance(parsed, Mapping) else detail


def forbidden_text(resolved: ResolvedContext, method: str, path: str, api_message: str) -> str:
    verb, resource, namespace = request_target(method, path)
    where = f"in namespace {namespace!r}" if namespace else "cluster-wide"
    return (
        f"{resolved.describe()} may not {verb} {resource} {where} (403 Forbidden: {api_message}); ask the cluster's "
        "admins for that right (a RoleBinding in the project, a ClusterRole for cluster-wide reads), or use a "
        "context that has it"
    )


class KubeApi:
    """Requests to the API server of one kubeconfig context (see the module's docstring)."""

    def __init__(
        self,
        kubeconfig: Path | Mapping[str, Any] | ResolvedContext,
        timeout_s: float = 10.0,
        context: str | None = None,
    ) -> None:
        """`kubeconfig`: a resolved context (infra.kubeconfig.resolve_context), or one file, or its
        content (relative file references then from the working folder), with `context` in it."""
        if isinstance(kubeconfig, ResolvedContext):
            resolved = kubeconfig
        elif isinstance(kubeconfig, Mapping):
            resolved = resolve_document(
                kubeconfig, KubeconfigRequest(context=context, context_key="context"), "the kubeconfig"
            )
        else:
            resolved = resolve_context(
                KubeconfigRequest(file=kubeconfig, context=context, file_key="kubeconfig", context_key="context")
            )
        self.resolved = resolved
        self.server = resolved.server
        self.timeout_s = timeout_s
        self.credentials = KubeCredentials(resolved)
        self.calls: Counter[str] = Counter()

    # --- the one way out ------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        accept: str,
        authorization: str | None,
        data: bytes | None = None,
        content_type: str | None = None,
    ) -> urllib.request.Request:
        headers = {"Accept": accept}
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        return urllib.request.Request(  # noqa: S310 (the kubeconfig's server)
            self.server + path, data=data, headers=headers, method="GET" if method == "WATCH" else method
        )

    def _open(
        self,
        method: str,
        path: str,
        accept: str = "application/json",
        data: bytes | None = None,
        content_type: str | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """The one place a request goes out, counted by `method`: TLS as the kubeconfig says,
        asked once more after a 401 where renewed credentials may help; a 401 then is KubeAuthError."""
        self.calls[method] += 1
        for attempt in (1, 2):
            authorization, tls = self.credentials.for_request()
            request = self._request(method, path, accept, authorization, data, content_type)
            try:
                return urllib.request.urlopen(  # noqa: S310 (the kubeconfig's server)
                    request,
                    context=tls,
                    timeout=self.timeout_s if timeout_s is None else timeout_s,
                )
            except urllib.error.HTTPError as error:
                if error.code != 401:
                    raise
                error.close()
                if attempt == 1 and self.credentials.refresh():
                    continue
                raise self.auth_error(method, path) from None
            except urllib.error.URLError as error:
                if isinstance(error.reason, ssl.SSLCertVerificationError):
                    raise self.tls_error(error.reason) from None
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def auth_error(self, method: str, path: str) -> KubeAuthError:
        resolved = self.resolved
        text = (
            f"the API server {resolved.server} refused the credentials of context {resolved.name!r} "
            f"(401 Unauthorized: expired or revoked); {resolved.login_fix()}"
        )
        return KubeAuthError(method, path, 401, "Unauthorized", text)

    def tls_error(self, reason: ssl.SSLCertVerificationError) -> KubeTlsError:
        resolved = self.resolved
        return KubeTlsError(
            f"the API server {resolved.server} of {resolved.describe()} presented a certificate that cluster "
            f"{resolved.cluster_name!r}'s certificate authority does not vouch for ({reason.verify_message}); put the "
            "cluster's CA in the kubeconfig (`oc login` asks to trust it; `kubectl config set-cluster "
            f"{resolved.cluster_name} --certificate-authority=<ca.crt> --embed-certs`)"
        )

    def _refused(self, method: str, path: str, error: urllib.error.HTTPError) -> KubeRequestError:
        message = _message(error.read())
        if error.code == 403:
            return KubeForbiddenError(method, path, 403, message, forbidden_text(self.resolved, method, path, message))
        return KubeRequestError(method, path, error.code, message)

    def _read(self, method: str, path: str, accept: str) -> bytes:
        try:
            with self._open(method, path, accept) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as error:
            if error.code == 403:
                raise self._refused(method, path, error) from None
            # Kept urllib's (callers tell 404 and 409 apart by `code`), with the API's own sentence as its message.
            body = error.read()
            raise urllib.error.HTTPError(
                error.url, error.code, _message(body), error.headers, io.BytesIO(body)
            ) from None

    # --- requests -------------------------------------------------------------------------------

    def get(self, path: str) -> Any:
        """A GET of JSON; a refusal other than 401 and 403 is urllib's HTTPError, with the API's message."""
        return json.loads(self._read("GET", path, "application/json"))

    def get_json_or_text(self, path: str) -> Any:
        """A GET answered with JSON or with plain text (`/readyz` answers `ok`), decoded by what
        came; a refusal other than 401 and 403 is urllib's HTTPError."""
        return _decode(self._read("GET", path, "application/json"))

    def text(self, path: str) -> str:
        """A plain-text GET (a pod's log), raising KubeRequestError with the API's message."""
        try:
            with self._open("GET", path, "*/*") as response:
                return bytes(response.read()).decode(errors="replace")
        except urllib.error.HTTPError as error:
            raise self._refused("GET", path, error) from None

    def download(self, path: str, local: Path) -> bool:
        """Stream a GET's body into `local`; False where the API answers 404 (nothing there)."""
        try:
            with self._open("GET", path, "*/*") as response, local.open("wb") as out:
                shutil.copyfileobj(response, out, 1 << 20)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                local.unlink(missing_ok=True)
                return False
            if error.code == 403:
                raise self._refused("GET", path, error) from None
            raise
        return True

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """Any verb; JSON in and out. Raises KubeRequestError with the API's own message
        (KubeForbiddenError for 403, KubeAuthError for 401)."""
        data = None if body is None else json.dumps(body).encode()
        try:
            with self._open(
                method, path, data=data, content_type=content_type if data is not None else None
            ) as response:
                raw = bytes(response.read())
        except urllib.error.HTTPError as error:
            raise self._refused(method, path, error) from None
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
        full = f"{path}{sep}{query}"
        try:
            response = self._open("WATCH", full, timeout_s=timeout_s + 30)
        except urllib.error.HTTPError as error:
            raise self._refused("WATCH", path, error) from None
        with response:
            while stop is None or not stop.is_set():
                line = response.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)

    # --- who the credentials are, and what they may do (pre-flight checks) ------------------------

    def whoami(self) -> str:
        """The user name the API server knows these credentials by (a SelfSubjectReview)."""
        review = self.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        return str(((review.get("status") or {}).get("userInfo") or {}).get("username", ""))

    def can_i(self, verb: str, resource: str, group: str = "", namespace: str = "", name: str = "") -> bool:
        """Whether these credentials may `verb` the resource (a SelfSubjectAccessReview; `namespace`
        "" asks cluster-wide), as `kubectl auth can-i` answers."""
        attributes = {"verb": verb, "resource": resource, "group": group}
        attributes |= {k: v for k, v in (("namespace", namespace), ("name", name)) if v}
        review = self.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            },
        )
        return bool((review.get("status") or {}).get("allowed"))


def _decode(raw: bytes) -> Any:
    return json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()
