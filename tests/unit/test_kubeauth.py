"""infra/kubeauth.py and infra/kubeapi.py against a loopback stand-in for an API server: which
credentials each kind of user sends, an exec plugin run, cached and run again, and what a 401 or
a 403 ends in (one line, the fix named, no credential in it)."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from infra.kubeapi import KubeApi, KubeAuthError, KubeForbiddenError, KubeRequestError, request_target
from infra.kubeauth import KubeCredentialError, KubeCredentials, forget_exec_credentials
from infra.kubeconfig import KubeconfigRequest, resolve_document

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"


class FakeApi:
    """Answers 200 to the tokens it accepts, 401 to others, 403 to /api/v1/nodes; records what came."""

    def __init__(self) -> None:
        self.accepted: set[str] = set()
        self.seen: list[str | None] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _answer(self) -> None:
                auth = self.headers.get("Authorization")
                api.seen.append(auth)
                token = (auth or "").removeprefix("Bearer ")
                if token not in api.accepted:
                    self._send(401, {"kind": "Status", "message": "Unauthorized", "code": 401})
                elif self.path.startswith("/api/v1/nodes"):
                    message = ('nodes is forbidden: User "system:serviceaccount:p:u" cannot list resource "nodes" in '
                               'API group "" at the cluster scope')
                    self._send(403, {"kind": "Status", "message": message, "code": 403})
                else:
                    self._send(200, {"kind": "Version", "path": self.path})

            def _send(self, code: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi()
    forget_exec_credentials()
    yield api
    api.server.shutdown()
    api.server.server_close()
    forget_exec_credentials()


def client(fake: FakeApi, user: dict[str, Any], name: str = "ctx") -> KubeApi:
    config = {
        "current-context": name,
        "clusters": [{"name": "c", "cluster": {"server": fake.url}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u"}}],
    }
    return KubeApi(resolve_document(config, KubeconfigRequest(), "the test kubeconfig"), timeout_s=5)


def plugin(tmp_path: Path, api_version: str = V1, token: str = "exec-token", expires: str = "", code: int = 0) -> Path:
    """A plugin script that answers with `token` (the file `token` beside it wins, where present)
    and records each run: its args, its env's MARK, and the ExecCredential request it was given."""
    script = tmp_path / "plugin"
    script.write_text(f"""#!{sys.executable}
import json, os, pathlib, sys
here = pathlib.Path(__file__).parent
with (here / "runs").open("a") as runs:
    runs.write(json.dumps({{"args": sys.argv[1:], "mark": os.environ.get("MARK"),
                           "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"])}}) + "\\n")
if {code}:
    print("error: you must be logged in to the server (secret-free stderr)", file=sys.stderr)
    print("STDOUT-NEVER-SHOWN")
    sys.exit({code})
token = (here / "token").read_text() if (here / "token").exists() else {token!r}
status = {{"token": token}}
if {expires!r}:
    status["expirationTimestamp"] = {expires!r}
print(json.dumps({{"apiVersion": {api_version!r}, "kind": "ExecCredential", "status": status}}))
""")
    script.chmod(0o755)
    return script


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "runs"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def exec_user(script: Path, api_version: str = V1, **extra: Any) -> dict[str, Any]:
    entry = {"apiVersion": api_version, "command": str(script), "args": ["get-token", "--cluster", "x"],
             "env": [{"name": "MARK", "value": "from-kubeconfig"}], **extra}
    if api_version == V1:
        entry.setdefault("interactiveMode", "Never")
    return {"exec": entry}


def test_a_token_is_sent_as_a_bearer_token(fake: FakeApi) -> None:
    fake.accepted = {"abc"}
    assert client(fake, {"token": "abc"}).get("/version")["kind"] == "Version"
    assert fake.seen == ["Bearer abc"]


def test_a_token_file_is_read_again_after_a_401(fake: FakeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old\n")
    fake.accepted = {"old"}
    api = client(fake, {"tokenFile": str(token)})
    api.get("/version")
    token.write_text("new\n")  # rotated, as a projected service account token is
    fake.accepted = {"new"}
    api.get("/version")
    assert fake.seen == ["Bearer old", "Bearer old", "Bearer new"]


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_an_exec_plugin_is_run_with_its_args_env_and_request(fake: FakeApi, tmp_path: Path, api_version: str) -> None:
    fake.accepted = {"exec-token"}
    script = plugin(tmp_path, api_version)
    api = client(fake, exec_user(script, api_version, provideClusterInfo=True))
    api.get("/version")
    api.get("/version")
    assert fake.seen == ["Bearer exec-token"] * 2
    (run,) = runs(tmp_path)  # once: no expiry, so kept until the server refuses it
    assert run["args"] == ["get-token", "--cluster", "x"] and run["mark"] == "from-kubeconfig"
    assert run["info"]["apiVersion"] == api_version and run["info"]["kind"] == "ExecCredential"
    assert run["info"]["spec"]["interactive"] is False
    assert run["info"]["spec"]["cluster"]["server"] == fake.url


def test_an_exec_credential_is_renewed_when_it_expires_and_after_a_401(fake: FakeApi, tmp_path: Path) -> None:
    fake.accepted = {"exec-token"}
    script = plugin(tmp_path, expires="2000-01-01T00:00:00Z")  # already past: every use runs it again
    api = client(fake, exec_user(script))
    api.get("/version")
    api.get("/version")
    assert len(runs(tmp_path)) == 2
    script = plugin(tmp_path, expires="2999-01-01T00:00:00Z")
    forget_exec_credentials()
    api = client(fake, exec_user(script))
    api.get("/version")
    (tmp_path / "token").write_text("renewed")
    fake.accepted = {"renewed"}  # the server now refuses the cached one: the plugin runs again
    api.get("/version")
    assert fake.seen[-2:] == ["Bearer exec-token", "Bearer renewed"]
    assert len(runs(tmp_path)) == 4


def test_a_failing_plugin_names_itself_and_its_stderr_never_its_stdout(fake: FakeApi, tmp_path: Path) -> None:
    api = client(fake, exec_user(plugin(tmp_path, code=3)))
    with pytest.raises(KubeCredentialError) as failed:
        api.get("/version")
    message = str(failed.value)
    assert "the exec credential plugin `plugin` failed (exit 3: error: you must be logged in" in message
    assert "STDOUT-NEVER-SHOWN" not in message and message.endswith("log in again with it (its own login), then retry")


def test_a_missing_plugin_shows_its_install_hint(fake: FakeApi, tmp_path: Path) -> None:
    api = client(fake, exec_user(tmp_path / "nowhere", installHint="install it with `brew install kubelogin`"))
    with pytest.raises(KubeCredentialError, match=r"is not installed .*; install it with `brew install kubelogin`"):
        api.get("/version")


def test_a_plugin_answering_another_api_version_is_refused(fake: FakeApi, tmp_path: Path) -> None:
    api = client(fake, exec_user(plugin(tmp_path, api_version=V1BETA1), V1))
    with pytest.raises(KubeCredentialError, match=r"answered '.*/v1beta1', the kubeconfig asks for '.*/v1'"):
        api.get("/version")


def test_a_refused_token_ends_in_one_line_saying_how_to_log_in_again(fake: FakeApi) -> None:
    name = "atlas-probe/127-0-0-1:25443/system:serviceaccount:atlas-probe:atlas-user"
    api = client(fake, {"token": "expired-token-value"}, name)
    with pytest.raises(KubeAuthError) as refused:
        api.get("/api/v1/namespaces/atlas-probe/pods")
    message = str(refused.value)
    assert message == (
        f"the API server {fake.url} refused the credentials of context '{name}' (401 Unauthorized: expired or "
        f"revoked); log in again: `oc login --server={fake.url}`"
    )
    assert refused.value.status == 401 and "expired-token-value" not in message
    assert len(fake.seen) == 1  # a token in the kubeconfig cannot renew itself: not asked twice
    with pytest.raises(KubeAuthError):
        api.request("DELETE", "/api/v1/namespaces/atlas-probe/pods/x")
    with pytest.raises(KubeAuthError):
        list(api.watch("/api/v1/pods", "1"))


def test_a_403_names_the_verb_and_resource(fake: FakeApi) -> None:
    fake.accepted = {"abc"}
    api = client(fake, {"token": "abc"})
    for call in (lambda: api.get("/api/v1/nodes"), lambda: api.request("GET", "/api/v1/nodes")):
        with pytest.raises(KubeForbiddenError) as refused:
            call()
        assert isinstance(refused.value, KubeRequestError) and refused.value.status == 403
        message = str(refused.value)
        assert message.startswith(f"context 'ctx' ({fake.url}) may not list nodes cluster-wide (403 Forbidden: ")
        assert 'User "system:serviceaccount:p:u" cannot list resource "nodes"' in message


@pytest.mark.parametrize(("method", "path", "target"), [
    ("GET", "/api/v1/nodes", ("list", "nodes", "")),
    ("GET", "/api/v1/nodes/kwok-1", ("get", "nodes", "")),
    ("GET", "/api/v1/namespaces/p/pods/x/log?tailLines=20", ("get", "pods/log", "p")),
    ("WATCH", "/apis/batch/v1/namespaces/p/jobs", ("watch", "jobs.batch", "p")),
    ("GET", "/apis/batch/v1/namespaces/p/jobs?watch=1", ("watch", "jobs.batch", "p")),
    ("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", ("create", "priorityclasses.scheduling.k8s.io", "")),
    ("PATCH", "/apis/apps/v1/namespaces/b/deployments/d/scale", ("patch", "deployments.apps/scale", "b")),
    ("DELETE", "/api/v1/namespaces/p", ("delete", "namespaces", "")),
    ("DELETE", "/api/v1/namespaces/p/pods", ("deletecollection", "pods", "p")),
])
def test_request_target_names_what_rbac_names(method: str, path: str, target: tuple[str, str, str]) -> None:
    assert request_target(method, path) == target


def test_credentials_hold_a_client_certificate_that_does_not_load_to_account(tmp_path: Path) -> None:
    config = {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://c"}}],
        "users": [{"name": "u", "user": {"client-certificate-data": "bm90IGEgY2VydA==", "client-key-data": "a2V5"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    }
    with pytest.raises(KubeCredentialError, match="the client certificate and key do not load"):
        KubeCredentials(resolve_document(config, KubeconfigRequest(), "k"))
