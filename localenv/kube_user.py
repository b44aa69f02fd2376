"""The local cluster as a researcher with a project on a shared OpenShift cluster reaches it: a
project made for them beforehand, only that project's rights, and the kubeconfig `oc login` leaves.

`ensure_project_user(layout)`, as the cluster's admin (idempotent):
- the project (a Namespace, `atlas-probe`) made beforehand, as a cluster's admins make it
  (the stack then says `project.create: false`);
- a ServiceAccount `atlas-user` in it, bound to the built-in `admin` ClusterRole in that namespace
  only (a RoleBinding): no cluster-admin, no node listing, no namespace or PriorityClass creation;
- a ClusterRole aggregated into `admin` for the OpenShift kinds the local API server serves as
  CRDs (ImageStreams, BuildConfigs, Builds, Routes), as OpenShift's own `admin` includes them;
- a token for it (TokenRequest, 24 hours as OpenShift's OAuth tokens), bound to a Secret of the
  project (`<account>-login`): `revoke` deletes that Secret, and the token is refused (401) at
  once, as an expired or logged-out one is.
`ensure_certificate_user(layout)` is a user who logs in with a client certificate instead
(issued by the local CA), with the same rights in the same project.

`write_user_kubeconfig(layout, user, folder)` writes what such a user's `KUBECONFIG` lists:
- `config`: an earlier login, whose current context `old-cluster` points at a server that is not
  there (a dead port), and a second context on the same dead server;
- `openshift`: what `oc login --token=... --server=https://127.0.0.1:<port>` writes: the cluster
  `127-0-0-1:<port>` with its CA embedded, the user `<username>/127-0-0-1:<port>` with the token,
  and the context `atlas-probe/127-0-0-1:<port>/system:serviceaccount:atlas-probe:atlas-user`.
Only the named context reaches the local API server; the current one (from the first file) does not.
`openshift_section` is a stack's `atlas:openshift` as that user writes it (KUBECONFIG, no
kubeconfig key; the context; `project.create: false`, `quota.manage: false`).

Nothing here prints the token; the files holding it are the user's (mode 0600).
"""

from __future__ import annotations

import base64
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.kubeapi import KubeApi, KubeAuthError, KubeRequestError
from localenv.kube import kubectl
from localenv.layout import LOOPBACK, Layout
from localenv.pki import admin_api, issue_client_pair
from localenv.pki_files import Pki
from localenv.procs import wait_for

PROJECT = "atlas-probe"
SERVICE_ACCOUNT = "atlas-user"
TOKEN_SECONDS = 24 * 3600  # OpenShift's OAuth access tokens last 24 hours by default
OPENSHIFT_KINDS_ROLE = "atlas-local-openshift-kinds-admin"
DEAD_CONTEXT = "old-cluster"
MANAGED_BY = {"app.kubernetes.io/managed-by": "atlas-localenv"}


@dataclass(frozen=True)
class ProjectUser:
    """A user of one project: a ServiceAccount and a token for it (never in the repr)."""

    namespace: str
    service_account: str
    token: str = field(repr=False)

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@dataclass(frozen=True)
class UserKubeconfig:
    """The files a user's KUBECONFIG lists, and the context `oc login` wrote into the second."""

    files: tuple[Path, ...]
    context: str
    server: str
    dead_server: str

    @property
    def kubeconfig_env(self) -> str:
        """The value of KUBECONFIG that lists the files, the dead server's first."""
        return os.pathsep.join(str(f) for f in self.files)


def oc_cluster_name(server: str) -> str:
    """The cluster entry's name `oc login` writes: the API's host (dots as dashes) and port."""
    parts = urllib.parse.urlsplit(server)
    return f"{(parts.hostname or '').replace('.', '-')}:{parts.port or 443}"


def oc_context_name(server: str, namespace: str, username: str) -> str:
    """`<project>/<api-host-with-dashes>:<port>/<user>`, as `oc login` names a context."""
    return f"{namespace}/{oc_cluster_name(server)}/{username}"


def dead_server(layout: Layout) -> str:
    """A server no one answers at: a port of the layout's block that nothing listens on."""
    return f"https://{LOOPBACK}:{layout.ports.dead_api}"


def login_secret(service_account: str) -> str:
    """The Secret a user's tokens are bound to: deleting it revokes them."""
    return f"{service_account}-login"


def admin_binding(namespace: str, subject: dict[str, str], name: str) -> dict[str, Any]:
    """`subject` gets the built-in `admin` ClusterRole in `namespace` only."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": MANAGED_BY},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [subject],
    }


def project_objects(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """What a cluster's admins set up for a project's user (see the module's docstring)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": MANAGED_BY}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": service_account, "namespace": namespace, "labels": MANAGED_BY},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": login_secret(service_account), "namespace": namespace, "labels": MANAGED_BY},
        },
        admin_binding(
            namespace,
            {"kind": "ServiceAccount", "name": service_account, "namespace": namespace},
            f"{service_account}-admin",
        ),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": OPENSHIFT_KINDS_ROLE,
                "labels": {
                    **MANAGED_BY,
                    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                },
            },
            "rules": [
                {
                    "apiGroups": ["image.openshift.io"],
                    "resources": ["imagestreams", "imagestreamtags", "imagestreams/status"],
                    "verbs": ["*"],
                },
                {
                    "apiGroups": ["build.openshift.io"],
                    "resources": ["buildconfigs", "builds", "buildconfigs/instantiate", "builds/log"],
                    "verbs": ["*"],
                },
                {"apiGroups": ["route.openshift.io"], "resources": ["routes", "routes/custom-host"], "verbs": ["*"]},
            ],
        },
    ]


# A right from the built-in admin role and one from the OpenShift kinds aggregated into it.
RIGHTS_TO_WAIT_FOR = (("list", "pods", ""), ("create", "imagestreams", "image.openshift.io"))


def _allowed(api: KubeApi, user: str, groups: list[str], namespace: str, verb: str, resource: str, group: str) -> bool:
    """What a SubjectAccessReview says of `user` (in `groups`) doing `verb` on `resource` in `namespace`."""
    review = api.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": resource, "group": group},
            },
        },
    )
    return bool(review.get("status", {}).get("allowed"))


def _wait_for_rights(api: KubeApi, user: str, groups: list[str], namespace: str) -> None:
    wait_for(
        lambda: all(_allowed(api, user, groups, namespace, *want) for want in RIGHTS_TO_WAIT_FOR),
        f"the admin role's rights to reach {user} (the aggregation controller)",
        60,
    )


def _apply(layout: Layout, objects: list[dict[str, Any]]) -> None:
    """Applied server-side as the cluster's admin: a second call changes nothing."""
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "--field-manager=atlas-localenv", "-f", "-",
            stdin=yaml.safe_dump_all(objects, sort_keys=False))


def ensure_project_user(
    layout: Layout, namespace: str = PROJECT, service_account: str = SERVICE_ACCOUNT, seconds: int = TOKEN_SECONDS
) -> ProjectUser:
    """The project, its user and their rights (applied server-side: a second call changes
    nothing), and a new token bound to the project's login Secret."""
    _apply(layout, project_objects(namespace, service_account))
    api = admin_api(layout, timeout_s=10)
    # The built-in admin role is filled in by kube-controller-manager's aggregation controller,
    # which on a cluster just started (and after our role joins it) has not always run yet.
    _wait_for_rights(
        api,
        f"system:serviceaccount:{namespace}:{service_account}",
        ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        namespace,
    )
    secret = api.get(f"/api/v1/namespaces/{namespace}/secrets/{login_secret(service_account)}")
    review = api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "name": login_secret(service_account),
                    "uid": secret["metadata"]["uid"],
                },
            },
        },
    )
    return ProjectUser(namespace, service_account, str(review["status"]["token"]))


def revoke(layout: Layout, user: ProjectUser) -> None:
    """Every token bound to the user's login Secret is refused from now on (a 401, as an expired or
    logged-out token is): the Secret is deleted (`ensure_project_user` makes it again)."""
    path = f"/api/v1/namespaces/{user.namespace}/secrets/{login_secret(user.service_account)}"
    try:
        admin_api(layout, timeout_s=10).request("DELETE", path)
    except KubeRequestError as error:
        if error.status != 404:
            raise
    # The API server learns of the deletion through its informer a moment later: done when it refuses.
    wait_for(lambda: _refused(layout, user), f"the API server to refuse {user.username}'s revoked tokens", 30)


def _refused(layout: Layout, user: ProjectUser) -> bool:
    try:
        user_api(layout, user).whoami()
    except KubeAuthError:
        return True
    return False


def ensure_certificate_user(
    layout: Layout, namespace: str = PROJECT, name: str = "atlas-cert-user"
) -> tuple[bytes, bytes]:
    """A user `name` with the project's `admin` rights who logs in with a client certificate: the
    certificate and key (PEM), newly issued by the local CA."""
    binding = admin_binding(
        namespace, {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}, f"{name}-admin"
    )
    _apply(layout, [binding])
    _wait_for_rights(admin_api(layout, timeout_s=10), name, ["system:authenticated"], namespace)
    return issue_client_pair(Pki(layout.kube_dir / "pki"), name)


def _private(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def write_user_kubeconfig(layout: Layout, user: ProjectUser, folder: Path) -> UserKubeconfig:
    """The two files of a user's KUBECONFIG (see the module's docstring), written into `folder`."""
    server, dead = layout.api_url, dead_server(layout)
    ca = base64.b64encode(Pki(layout.kube_dir / "pki").ca_cert.read_bytes()).decode()
    old = _private(
        folder / "config",
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": DEAD_CONTEXT,
            "clusters": [{"name": "old-cluster", "cluster": {"server": dead, "certificate-authority-data": ca}}],
            "users": [{"name": "old-user", "user": {"token": "a-token-of-an-old-login"}}],
            "contexts": [
                {"name": DEAD_CONTEXT, "context": {"cluster": "old-cluster", "user": "old-user"}},
                {
                    "name": "old-cluster-admin",
                    "context": {"cluster": "old-cluster", "user": "old-user", "namespace": "x"},
                },
            ],
        },
    )
    cluster = oc_cluster_name(server)
    login_user = f"{user.username}/{cluster}"
    context = oc_context_name(server, user.namespace, user.username)
    login = _private(
        folder / "openshift",
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": context,  # what `oc login` set; the first file's wins in the merge
            "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": ca}}],
            "users": [{"name": login_user, "user": {"token": user.token}}],
            "contexts": [
                {"name": context, "context": {"cluster": cluster, "namespace": user.namespace, "user": login_user}}
            ],
        },
    )
    return UserKubeconfig((old, login), context, server, dead)


def openshift_section(section: dict[str, Any], user: ProjectUser, kubeconfig: UserKubeconfig) -> dict[str, Any]:
    """A stack's `atlas:openshift` as this user writes it: no kubeconfig key (KUBECONFIG lists the
    files), the `oc login` context, the project made beforehand, the quota the admins own."""
    written = {k: v for k, v in section.items() if k != "kubeconfig"}
    return {
        **written,
        "namespace": user.namespace,
        "context": kubeconfig.context,
        "project": {**(section.get("project") or {}), "create": False},
        "quota": {**(section.get("quota") or {}), "manage": False},
    }


def user_api(layout: Layout, user: ProjectUser) -> KubeApi:
    """The local API server as the project's user (a token, no file): for checks of its rights."""
    ca = base64.b64encode(Pki(layout.kube_dir / "pki").ca_cert.read_bytes()).decode()
    config = {
        "current-context": "user",
        "clusters": [{"name": "local", "cluster": {"server": layout.api_url, "certificate-authority-data": ca}}],
        "users": [{"name": "user", "user": {"token": user.token}}],
        "contexts": [{"name": "user", "context": {"cluster": "local", "user": "user"}}],
    }
    return KubeApi(config, timeout_s=10)
