"""Kubernetes access the way `oc login` leaves it, against the local API server: a project made
beforehand, a ServiceAccount with only that project's rights, a KUBECONFIG of two files whose
current context is a dead server and whose second holds an OpenShift-style context
(localenv/kube_user.py). Each credential kind reads through KubeApi; a revoked token ends in one
line saying how to log in again (the client, and a JobCompletion's own API calls); a 403 names
what the identity lacks; and pulumi-kubernetes, given what the resolution decides, creates an
object in the project through that context, where left to itself it cannot read the two files."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.kubeapi import KubeApi, KubeAuthError, KubeForbiddenError
from infra.kubeauth import forget_exec_credentials
from infra.kubeconfig import KubeConfigError, KubeconfigRequest, resolve_context
from infra.monitor.kube import KubeCache, KubeClient
from infra.openshift.completion import JobCompletionProvider
from infra.toolchain.pins import REPO_ROOT
from localenv import kube_user
from localenv.layout import Layout
from localenv.pki_files import Pki
from tests.e2e.pulumi_cli import isolated_env
from tests.support import ProjectUserSite as Site

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site(project_user: Site) -> Site:
    """The project's user and their KUBECONFIG (tests/conftest.py's `project_user`)."""
    return project_user


@pytest.fixture
def user_env(site: Site, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.setenv("KUBECONFIG", site.kubeconfig.kubeconfig_env)
    forget_exec_credentials()
    yield site
    forget_exec_credentials()


def pods_path(site: Site) -> str:
    return f"/api/v1/namespaces/{site.user.namespace}/pods"


def test_the_named_openshift_context_of_merged_files_reaches_the_project(user_env: Site) -> None:
    resolved = resolve_context(KubeconfigRequest(context=user_env.kubeconfig.context))
    assert resolved.name == user_env.kubeconfig.context and "/" in resolved.name and ":" in resolved.name
    assert resolved.server == user_env.layout.api_url and resolved.is_openshift
    assert resolved.whole_in == user_env.kubeconfig.files[1]  # what `oc login` wrote: the second file
    api = KubeApi(resolved)
    assert api.whoami() == user_env.user.username
    assert api.get(pods_path(user_env))["kind"] == "PodList"
    # The current context is the first file's, on a server that is not there.
    current = KubeApi(resolve_context(KubeconfigRequest()), timeout_s=5)
    assert current.server == user_env.kubeconfig.dead_server
    with pytest.raises(urllib.error.URLError):
        current.get("/version")


def test_a_context_that_is_not_there_is_refused_listing_those_that_are(user_env: Site) -> None:
    with pytest.raises(KubeConfigError) as refused:
        resolve_context(KubeconfigRequest(context="atlas-probe/api-elsewhere:6443/developer"))
    assert f"it has 'old-cluster', 'old-cluster-admin', '{user_env.kubeconfig.context}'" in str(refused.value)


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def one_context(site: Site, user: dict[str, Any]) -> dict[str, Any]:
    """A kubeconfig of one context on the local API server (its CA embedded) for `user`."""
    ca = base64.b64encode(Pki(site.layout.kube_dir / "pki").ca_cert.read_bytes()).decode()
    return {
        "current-context": "me",
        "clusters": [{"name": "local", "cluster": {"server": site.layout.api_url, "certificate-authority-data": ca}}],
        "users": [{"name": "me", "user": user}],
        "contexts": [{"name": "me", "context": {"cluster": "local", "user": "me"}}],
    }


def exec_plugin(folder: Path, token_file: Path, api_version: str) -> Path:
    """A credential plugin as small as one can be: it answers with the token in `token_file`."""
    script = folder / f"token-plugin-{api_version.rsplit('/', 1)[1]}"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, pathlib
        request = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        assert request["spec"]["interactive"] is False
        token = pathlib.Path({str(token_file)!r}).read_text().strip()
        print(json.dumps({{"apiVersion": request["apiVersion"], "kind": "ExecCredential",
                           "status": {{"token": token, "expirationTimestamp": "2999-01-01T00:00:00Z"}}}}))
        """))
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("kind", ["token", "tokenFile", "exec v1", "exec v1beta1", "client certificate data",
                                  "client certificate files"])
def test_each_credential_kind_reads_the_project(site: Site, tmp_path: Path, kind: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(site.user.token)
    expected = site.user.username
    if kind == "token":
        user: dict[str, Any] = {"token": site.user.token}
    elif kind == "tokenFile":
        user = {"tokenFile": str(token_file)}
    elif kind.startswith("exec"):
        version = f"client.authentication.k8s.io/{kind.split()[1]}"
        user = {"exec": {"apiVersion": version, "command": str(exec_plugin(tmp_path, token_file, version)),
                         "interactiveMode": "Never"}}
    else:
        cert, key = kube_user.ensure_certificate_user(site.layout)
        expected = "atlas-cert-user"
        if kind.endswith("data"):
            user = {"client-certificate-data": base64.b64encode(cert).decode(),
                    "client-key-data": base64.b64encode(key).decode()}
        else:
            (tmp_path / "me.crt").write_bytes(cert)
            (tmp_path / "me.key").write_bytes(key)
            (tmp_path / "me.key").chmod(0o600)
            user = {"client-certificate": "me.crt", "client-key": "me.key"}  # relative to the kubeconfig's folder
    forget_exec_credentials()
    file = write(tmp_path / "config", one_context(site, user))
    api = KubeApi(resolve_context(KubeconfigRequest(file=file)))
    assert api.whoami() == expected
    assert api.get(pods_path(site))["kind"] == "PodList"
    assert api.can_i("create", "jobs", "batch", site.user.namespace)
    assert not api.can_i("list", "nodes")


def test_what_the_project_s_user_may_not_do_is_refused_by_name(site: Site) -> None:
    api = kube_user.user_api(site.layout, site.user)
    with pytest.raises(KubeForbiddenError) as refused:
        api.get("/api/v1/nodes")
    assert "may not list nodes cluster-wide (403 Forbidden: nodes is forbidden: " in str(refused.value)
    assert f'User "{site.user.username}" cannot list resource "nodes"' in str(refused.value)
    priority = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "x"}, "value": -10}
    with pytest.raises(KubeForbiddenError, match=r"may not create priorityclasses\.scheduling\.k8s\.io cluster-wide"):
        api.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", priority)
    # The monitor keeps to the project and says why.
    cache = KubeCache(KubeClient(api.resolved), site.user.namespace)
    cache.list_all()
    assert cache.error("nodes").startswith("not readable: ") and "may not list nodes" in cache.error("nodes")
    assert any("listing all namespaces is forbidden" in note for note in cache.notes)


def test_a_revoked_token_ends_in_one_line_saying_how_to_log_in_again(
    kube_api_env: Layout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = kube_user.ensure_project_user(kube_api_env, service_account="atlas-user-revoked")
    files = kube_user.write_user_kubeconfig(kube_api_env, user, tmp_path)
    monkeypatch.setenv("KUBECONFIG", files.kubeconfig_env)
    api = KubeApi(resolve_context(KubeconfigRequest(context=files.context, flavour="kubernetes")))
    assert api.whoami() == user.username
    kube_user.revoke(kube_api_env, user)
    expected = (
        f"the API server {kube_api_env.api_url} refused the credentials of context '{files.context}' (401 "
        f"Unauthorized: expired or revoked); log in again: `oc login --server={kube_api_env.api_url}`"
    )
    with pytest.raises(KubeAuthError) as refused:
        api.get(f"/api/v1/namespaces/{user.namespace}/pods")
    assert str(refused.value) == expected and user.token not in str(refused.value)
    # The stack program's own API calls: a step's completion ends with the same line.
    props = {"kubeconfig": None, "context": files.context, "namespace": user.namespace, "job_name": "train",
             "job_uid": "x", "step": "train", "job_urn": "", "timeout_s": 30}
    with pytest.raises(KubeAuthError) as in_the_provider:
        JobCompletionProvider().create(props)
    assert str(in_the_provider.value) == expected


# --- pulumi-kubernetes through the same context -------------------------------------------------

# How `pulumi stack export` marks a secret value.
SECRET_SIGNATURE, SECRET = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"

PROGRAM = '''\
"""A ConfigMap in the project, through a provider given what Atlas's resolution decides (or, with
`probe:sdkDefault`, what pulumi-kubernetes's SDK does by itself with KUBECONFIG)."""
import pulumi
import pulumi_kubernetes as k8s

from infra.openshift.cluster_access import cluster_access, cluster_provider
from infra.openshift.target import KubernetesTarget

config = pulumi.Config("probe")
namespace, context = config.require("namespace"), config.require("context")


class Probe(pulumi.ComponentResource):
    def __init__(self, name: str) -> None:
        super().__init__("probe:index:Probe", name)
        if config.get_bool("sdkDefault"):
            self.provider = k8s.Provider(f"{name}-provider", context=context, opts=pulumi.ResourceOptions(parent=self))
        else:
            access = cluster_access(KubernetesTarget("kubernetes", namespace, context=context))
            self.provider = cluster_provider(f"{name}-provider", access, self)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config", metadata={"namespace": namespace}, data={"reached": "through " + context},
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        self.register_outputs({})


probe = Probe("probe")
pulumi.export("config_map", probe.config_map.metadata.name)
'''


def pulumi_project(tmp_path: Path, site: Site, kubeconfig_env: str, **config: str) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "project"
    (root / "program").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text("name: kubeaccess\nruntime: python\nmain: program/\n")
    (root / "program" / "__main__.py").write_text(PROGRAM)
    env = {**isolated_env(tmp_path), "KUBECONFIG": kubeconfig_env, "PYTHONPATH": str(REPO_ROOT)}
    settings = {"probe:namespace": site.user.namespace, "probe:context": site.kubeconfig.context, **config}
    (root / "Pulumi.it.yaml").write_text(yaml.safe_dump({"config": settings}))
    return root, env


def pulumi(root: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["pulumi", *args, "--non-interactive", "-s", "it"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"pulumi {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def config_map(site: Site, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube_user.user_api(site.layout, site.user).get(
            f"/api/v1/namespaces/{site.user.namespace}/configmaps/{name}"
        )
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    return found


@pytest.mark.parametrize("spread", [False, True], ids=["one file holds the context", "entries over two files"])
def test_pulumi_kubernetes_creates_in_the_project_through_the_named_context(
    site: Site, tmp_path: Path, spread: bool
) -> None:
    kubeconfig_env = site.kubeconfig.kubeconfig_env
    if spread:
        # The login's user entry in a third file of its own: no one file holds the whole context.
        login = yaml.safe_load(site.kubeconfig.files[1].read_text())
        users = write(tmp_path / "users", {"users": login.pop("users")})
        write(tmp_path / "login", login)
        kubeconfig_env = ":".join([str(site.kubeconfig.files[0]), str(tmp_path / "login"), str(users)])
    root, env = pulumi_project(tmp_path, site, kubeconfig_env)
    pulumi(root, env, "stack", "init")  # -s it: the helper names the stack
    pulumi(root, env, "up", "--yes", "--skip-preview")
    name = json.loads(pulumi(root, env, "stack", "output", "--json").stdout)["config_map"]
    found = config_map(site, name)
    assert found is not None and found["data"] == {"reached": f"through {site.kubeconfig.context}"}
    state = pulumi(root, env, "stack", "export").stdout
    assert site.user.token not in state  # a path, or the context as a secret: never the token in the clear
    resources = json.loads(state)["deployment"]["resources"]
    provider = next(r for r in resources if r["type"] == "pulumi:providers:kubernetes")
    if spread:
        assert provider["inputs"]["kubeconfig"][SECRET_SIGNATURE] == SECRET  # the context alone, as a secret
    else:
        assert provider["inputs"]["kubeconfig"] == str(site.kubeconfig.files[1])
    pulumi(root, env, "preview", "--expect-no-changes")
    pulumi(root, env, "destroy", "--yes", "--skip-preview")
    assert config_map(site, name) is None


def test_pulumi_kubernetes_left_to_itself_cannot_read_several_kubeconfig_files(site: Site, tmp_path: Path) -> None:
    """Why Atlas never leaves KUBECONFIG to the provider: its Python SDK hands `$KUBECONFIG` over as
    one string, which with two files is neither a file nor a kubeconfig. Should a later version
    read it, this fails, and cluster_access.py can leave several files to the provider."""
    root, env = pulumi_project(tmp_path, site, site.kubeconfig.kubeconfig_env, **{"probe:sdkDefault": "true"})
    pulumi(root, env, "stack", "init")  # -s it: the helper names the stack
    done = pulumi(root, env, "up", "--yes", "--skip-preview", check=False)
    assert done.returncode != 0, done.stdout
    assert "unreachable" in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
