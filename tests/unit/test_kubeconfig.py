"""infra/kubeconfig.py: which files, context, cluster and user a request resolves to, as kubectl finds them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.kubeconfig import (
    KubeConfigError,
    KubeconfigRequest,
    ResolvedContext,
    kubeconfig_files,
    merge_documents,
    resolve_context,
    resolve_document,
)

OC_CONTEXT = "atlas-probe/api-crc-testing:6443/developer"
CONFIG = {
    "current-context": "a",
    "contexts": [{"name": "a", "context": {"cluster": "c1", "user": "u1"}},
                 {"name": "b", "context": {"cluster": "c2"}},
                 {"name": "broken", "context": {"cluster": "missing"}},
                 {"name": OC_CONTEXT, "context": {"cluster": "api-crc-testing:6443",
                                                  "user": "developer/api-crc-testing:6443",
                                                  "namespace": "atlas-probe"}}],
    "clusters": [{"name": "c1", "cluster": {"server": "https://one"}},
                 {"name": "c2", "cluster": {"server": "https://two/"}},
                 {"name": "api-crc-testing:6443", "cluster": {"server": "https://api.crc.testing:6443"}}],
    "users": [{"name": "u1", "user": {"token": "t0p-secret"}},
              {"name": "developer/api-crc-testing:6443", "user": {"token": "sha256~oc-token"}}],
}


def resolve(context: str | None = None, config: dict[str, Any] | None = None, **request: Any) -> ResolvedContext:
    return resolve_document(config or CONFIG, KubeconfigRequest(context=context, **request), "the test kubeconfig")


@pytest.mark.parametrize(("context", "server", "user"), [
    (None, "https://one", {"token": "t0p-secret"}),
    ("b", "https://two", {}),
    (OC_CONTEXT, "https://api.crc.testing:6443", {"token": "sha256~oc-token"}),
])
def test_the_named_context_else_the_current_one(context: str | None, server: str, user: dict[str, str]) -> None:
    resolved = resolve(context)
    assert resolved.server == server
    assert dict(resolved.user) == user
    assert resolved.named == (context is not None)


def test_an_openshift_context_name_keeps_its_slashes_and_colons() -> None:
    resolved = resolve(OC_CONTEXT)
    assert (resolved.name, resolved.cluster_name) == (OC_CONTEXT, "api-crc-testing:6443")
    assert resolved.namespace == "atlas-probe"
    assert resolved.is_openshift
    assert resolved.login_fix() == "log in again: `oc login --server=https://api.crc.testing:6443`"


def test_a_context_that_is_not_there_is_refused_listing_those_that_are() -> None:
    with pytest.raises(KubeConfigError) as refused:
        resolve("atlas-probe/api-other:6443/developer")
    message = str(refused.value)
    assert message.startswith("atlas:openshift.context: context 'atlas-probe/api-other:6443/developer' is not in ")
    assert f"it has 'a', 'b', 'broken', '{OC_CONTEXT}'" in message
    assert "oc login" in message and "\n" not in message


@pytest.mark.parametrize(("context", "config", "expected"), [
    ("broken", CONFIG, "names cluster 'missing', which is not defined there"),
    (None, {**CONFIG, "current-context": ""}, "sets no current-context and atlas:openshift.context is not set"),
    (None, {**CONFIG, "current-context": "gone"}, "the current-context 'gone' of the test kubeconfig is not defined"),
    ("x", {"contexts": [{"name": "x", "context": {"cluster": "c", "user": "nobody"}}],
           "clusters": [{"name": "c", "cluster": {"server": "https://c"}}]}, "names user 'nobody', which is not"),
    ("x", {"contexts": [{"name": "x", "context": {"cluster": "c"}}], "clusters": [{"name": "c", "cluster": {}}]},
     "cluster 'c' of the test kubeconfig has no server"),
])
def test_an_unusable_context_is_refused(context: str | None, config: dict[str, Any], expected: str) -> None:
    with pytest.raises(KubeConfigError, match=expected):
        resolve(context, config)


def test_no_credential_shows_in_the_resolved_context() -> None:
    resolved = resolve()
    assert "t0p-secret" not in repr(resolved) and "t0p-secret" not in str(resolved)
    assert resolved.credential_kind == "token"


# --- where the files are, and how they merge --------------------------------------------------


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def test_kubeconfig_lists_files_that_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    """The first file to define a name wins; the current-context is the first file's that sets
    one; each file's relative references are its own folder's; missing files are skipped."""
    first = write(tmp_path / "one" / "config", {
        "clusters": [{"name": "shared", "cluster": {"server": "https://first", "certificate-authority": "ca.crt"}}],
        "users": [{"name": "me", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "shared", "user": "me"}}],
    })
    second = write(tmp_path / "two" / "config", {
        "current-context": "dead",
        "clusters": [{"name": "shared", "cluster": {"server": "https://second"}},
                     {"name": "site:6443",
                      "cluster": {"server": "https://site:6443", "certificate-authority": "ca.crt"}}],
        "users": [{"name": "me", "user": {"token": "never-used"}}],
        "contexts": [{"name": OC_CONTEXT, "context": {"cluster": "site:6443", "user": "me"}}],
    })
    third = write(tmp_path / "three", {"current-context": OC_CONTEXT})
    for folder in ("one", "two"):
        (tmp_path / folder / "ca.crt").write_text("not read here")
    (tmp_path / "one" / "token").write_text("file-token")
    listed = os.pathsep.join([str(first), str(tmp_path / "missing"), str(second), str(third)])
    env = {"KUBECONFIG": listed}

    current = resolve_context(KubeconfigRequest(), env)
    assert (current.name, current.server) == ("dead", "https://first")  # the first file's cluster entry
    assert current.cluster["certificate-authority"] == str(tmp_path / "one" / "ca.crt")
    assert current.user == {"tokenFile": str(tmp_path / "one" / "token")}  # the first file's user entry
    assert current.files == (first, second, third)
    assert current.where.startswith("KUBECONFIG (") and current.whole_in is None  # a relative reference

    named = resolve_context(KubeconfigRequest(context=OC_CONTEXT), env)
    assert named.server == "https://site:6443"
    assert named.cluster["certificate-authority"] == str(tmp_path / "two" / "ca.crt")


def test_a_named_file_is_read_alone(tmp_path: Path) -> None:
    named = write(tmp_path / "named", {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://named"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}],
    })
    other = write(tmp_path / "other", {"current-context": "y",
                                       "contexts": [{"name": "y", "context": {"cluster": "c"}}]})
    resolved = resolve_context(KubeconfigRequest(file=named), {"KUBECONFIG": str(other)})
    assert (resolved.server, resolved.files) == ("https://named", (named,))
    assert resolved.where == f"atlas:openshift.kubeconfig ({named})"


def test_home_kube_config_without_kubeconfig(tmp_path: Path) -> None:
    write(tmp_path / ".kube" / "config", {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://home"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c"}}],
    })
    assert resolve_context(KubeconfigRequest(), {}, home=tmp_path).server == "https://home"
    assert kubeconfig_files(KubeconfigRequest(), {"KUBECONFIG": ""}, home=tmp_path)[1] == "~/.kube/config"


def test_relative_kubeconfig_entries_are_the_working_folder_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "k", {"clusters": [], "contexts": []})
    monkeypatch.chdir(tmp_path)
    files, _where, relative = kubeconfig_files(KubeconfigRequest(), {"KUBECONFIG": "k"})
    assert files == (tmp_path / "k",) and relative == ("k",)


@pytest.mark.parametrize(("request_", "env", "expected"), [
    (KubeconfigRequest(), {}, r"no kubeconfig: .*/\.kube/config does not exist and KUBECONFIG is not set; log in"),
    (KubeconfigRequest(), {"KUBECONFIG": "/nowhere/a:/nowhere/b"},
     r"none of the files KUBECONFIG \(/nowhere/a, /nowhere/b\)"),
    (KubeconfigRequest(file=Path("/nowhere/k"), file_key="--kubeconfig"), {},
     r"^--kubeconfig: /nowhere/k does not exist"),
])
def test_no_kubeconfig_is_refused_naming_where_it_looked(
    request_: KubeconfigRequest, env: dict[str, str], expected: str, tmp_path: Path
) -> None:
    with pytest.raises(KubeConfigError, match=expected):
        resolve_context(request_, env, home=tmp_path)


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("clusters: [unclosed\n")
    with pytest.raises(KubeConfigError, match=f"cannot read the kubeconfig {bad}: not YAML"):
        resolve_context(KubeconfigRequest(file=bad))
    bad.write_text("clusters:\n- cluster: {server: x}\n")
    with pytest.raises(KubeConfigError, match=r"clusters\[0\] needs a name and a cluster mapping"):
        resolve_context(KubeconfigRequest(file=bad))


def test_merge_keeps_absolute_references_and_path_based_exec_commands(tmp_path: Path) -> None:
    merged = merge_documents([(tmp_path / "k", {"users": [
        {"name": "abs", "user": {"client-certificate": "/etc/c.crt", "client-key": "/etc/c.key"}},
        {"name": "plugin", "user": {"exec": {"command": "bin/plugin", "apiVersion": "v"}}},
        {"name": "on-path", "user": {"exec": {"command": "oc", "apiVersion": "v"}}},
    ]})])
    users = {u["name"]: u["user"] for u in merged.config["users"]}
    assert users["abs"]["client-certificate"] == "/etc/c.crt"
    assert users["plugin"]["exec"]["command"] == str(tmp_path / "bin/plugin")
    assert users["on-path"]["exec"]["command"] == "oc"  # looked up on PATH, as kubectl does
    assert merged.origins[("users", "plugin")] == (tmp_path / "k", True)
    assert merged.origins[("users", "abs")] == (tmp_path / "k", False)


# --- what is refused of a cluster or user entry --------------------------------------------------


def single(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://c", **(cluster or {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    }


def test_insecure_tls_is_refused_unless_the_stack_allows_it() -> None:
    config = single({"insecure-skip-tls-verify": True})
    with pytest.raises(KubeConfigError) as refused:
        resolve(None, config)
    message = str(refused.value)
    assert "insecure-skip-tls-verify" in message and "--certificate-authority" in message
    assert message.endswith("or accept it for this stack with atlas:openshift.insecure_skip_tls_verify: true")
    assert resolve(None, config, allow_insecure_tls=True).server == "https://c"


@pytest.mark.parametrize(("cluster", "user", "expected"), [
    ({}, {"auth-provider": {"name": "oidc", "config": {"id-token": "SECRET-ID"}}},
     "legacy auth-provider 'oidc'.*exec credential plugin"),
    ({}, {"username": "admin", "password": "SECRET-PW"}, "basic auth"),
    ({}, {"as": "system:admin", "token": "SECRET-TOKEN"}, r"impersonates \(as\)"),
    ({}, {"client-certificate-data": "SECRET-CERT"}, "client certificate without its key"),
    ({}, {"tokenFile": "/nowhere/token"}, "tokenFile /nowhere/token does not exist"),
    ({"certificate-authority": "/nowhere/ca.crt"}, {}, "certificate-authority /nowhere/ca.crt does not exist"),
    ({"tls-server-name": "api"}, {}, "tls-server-name"),
    ({"proxy-url": "http://proxy:3128"}, {}, "proxy-url.*HTTPS_PROXY"),
    ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "p"}}, "v1alpha1 went"),
    ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "p"}}, "needs interactiveMode"),
    ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "p", "interactiveMode": "Always"}},
     "asks for a terminal"),
    ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1"}}, "exec needs a command"),
])
def test_what_atlas_does_not_do_is_refused_naming_the_fix(
    cluster: dict[str, Any], user: dict[str, Any], expected: str
) -> None:
    with pytest.raises(KubeConfigError, match=expected) as refused:
        resolve(None, single(cluster, user))
    assert "\n" not in str(refused.value)
    assert "SECRET" not in str(refused.value)  # a credential is never echoed


@pytest.mark.parametrize(("name", "user", "flavour", "fix"), [
    ("x", {"token": "t"}, None, "`kubectl config set-credentials u --token=<token>`"),
    ("x", {"token": "t"}, "openshift", "`oc login --server=https://c`"),
    ("ns/c:6443/me", {"token": "t"}, "kubernetes", "`oc login --server=https://c`"),
    ("x", {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/usr/bin/aws"}}, None,
     "the credential plugin `aws`"),
    ("x", {"client-certificate-data": "Yw==", "client-key-data": "aw=="}, None, "--client-certificate=<file>"),
])
def test_the_fix_for_refused_credentials_fits_the_kind_of_user(
    name: str, user: dict[str, Any], flavour: str | None, fix: str
) -> None:
    config = single(None, user)
    config["contexts"][0]["name"] = config["current-context"] = name
    resolved = resolve(None, config, flavour=flavour)
    assert resolved.login_fix().startswith("log in again")
    assert fix in resolved.login_fix()
