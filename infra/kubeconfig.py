"""Kubeconfig resolution: which files, context, cluster and user Atlas uses, found as kubectl finds them.

`resolve_context(KubeconfigRequest(...))` is the one resolution behind the stack program (the
pulumi-kubernetes provider's inputs, the outputs' `api_url`, the OpenShift JobCompletion's API
client), `atlas compare`, `monitor`, `nodes` and a pre-flight check:
- the files: the one file the stack (`atlas:openshift.kubeconfig`) or `--kubeconfig` names, alone
  (as `kubectl --kubeconfig`); else every file `KUBECONFIG` lists (missing ones skipped, as
  kubectl does); else `~/.kube/config`;
- merged as kubectl merges them: the first file to define a cluster, user or context name wins,
  `current-context` comes from the first file that sets one, and each file's relative references
  (`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`, an exec plugin's
  command when it holds a `/`) are resolved against that file's own folder;
- the context the stack names (`atlas:openshift.context`; `oc login` names them
  `<project>/<api-host-with-dashes>:<port>/<user>`, with `/` and `:`), else the current one. A
  context that is not there is refused, naming the contexts that are.

What Atlas accepts of a user entry: a bearer token (`token`, `tokenFile`), a client certificate
and key (files or `-data`), an exec credential plugin (`client.authentication.k8s.io/v1` or
`v1beta1`; infra/kubeauth.py runs it). A legacy `auth-provider`, basic auth, impersonation,
`tls-server-name` and `proxy-url` are refused here, each naming the fix, before anything is sent.

`insecure-skip-tls-verify: true` is refused unless the request allows it (the stack's
`atlas:openshift.insecure_skip_tls_verify: true`, read by the stack program and the CLIs alike):
the server's certificate is always checked otherwise, as SSH host keys are. The fix named is the
cluster's CA in the kubeconfig.

Nothing here returns or prints a credential: `ResolvedContext` keeps the user entry out of its
repr, and every message names files, entries and servers only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.errors import ActionableError

KUBECONFIG_ENV = "KUBECONFIG"
# The exec credential API versions client-go still speaks (v1alpha1 went in Kubernetes 1.24).
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
# `oc login` names a context <project>/<api host, dots as dashes>:<port>/<user>.
OC_CONTEXT = re.compile(r"^[^/]*/[^/]+:[0-9]+/.+$")
_CLUSTER_FILES = ("certificate-authority",)
_USER_FILES = ("client-certificate", "client-key", "tokenFile")
_SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


class KubeAccessError(ActionableError):
    """The cluster cannot be reached as configured; the message names what and the fix."""


class KubeConfigError(KubeAccessError):
    """The kubeconfig is missing, unreadable, lacks the context asked for, or asks for what Atlas
    does not do (a legacy auth-provider, TLS unchecked without the stack's leave)."""


@dataclass(frozen=True)
class KubeconfigRequest:
    """Where to look and what to accept: what the stack (or a CLI's flags) says."""

    file: Path | None = None  # the one file to read; None: KUBECONFIG, else ~/.kube/config
    context: str | None = None  # None: the current-context
    allow_insecure_tls: bool = False  # accept a cluster's insecure-skip-tls-verify: true
    flavour: str | None = None  # "openshift": the fix for a refused login is `oc login`
    # What named the file, the context and the TLS leave, for messages: stack keys, or a CLI's flags.
    file_key: str = "atlas:openshift.kubeconfig"
    context_key: str = "atlas:openshift.context"
    insecure_key: str = "atlas:openshift.insecure_skip_tls_verify"


@dataclass(frozen=True)
class ResolvedContext:
    """One context of the merged kubeconfig, with its cluster and user entries. The entries'
    file references are absolute; the user entry (credentials) is never in the repr."""

    name: str
    server: str
    cluster_name: str
    user_name: str  # "" where the context names no user (anonymous)
    files: tuple[Path, ...]  # the files read, in KUBECONFIG's order
    where: str  # how they were found, for messages: "KUBECONFIG (a, b)", "~/.kube/config", a key
    named: bool  # the context was named (not the current-context)
    namespace: str = ""  # the context's own namespace, if any
    flavour: str | None = None
    relative_entries: tuple[str, ...] = ()  # KUBECONFIG entries given relative to the working folder
    # The one file that holds the context, its cluster and its user, none with a reference relative
    # to that file's folder: what pulumi-kubernetes, which reads a file it is handed without
    # resolving such references, can be given as a path. None otherwise.
    whole_in: Path | None = None
    cluster: Mapping[str, Any] = field(default_factory=dict, repr=False)
    user: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def credential_kind(self) -> str:
        """What the user entry authenticates with: token, token file, client certificate, exec
        plugin, or none."""
        if self.user.get("token"):
            return "token"
        if self.user.get("tokenFile"):
            return "token file"
        if self.user.get("exec"):
            return "exec plugin"
        if self.user.get("client-certificate") or self.user.get("client-certificate-data"):
            return "client certificate"
        return "none"

    @property
    def is_openshift(self) -> bool:
        """OpenShift by the stack's flavour, or a token user of a context named as `oc login` names them."""
        by_name = OC_CONTEXT.match(self.name) is not None and self.credential_kind in ("token", "none")
        return self.flavour == "openshift" or by_name

    def describe(self) -> str:
        return f"context {self.name!r} ({self.server})"

    def login_fix(self) -> str:
        """How to get credentials the server accepts again, for this context's kind of user."""
        if self.is_openshift:
            return f"log in again: `oc login --server={self.server}`"
        kind = self.credential_kind
        user = self.user_name or "<user>"
        if kind == "exec plugin":
            command = str((self.user.get("exec") or {}).get("command", ""))
            return f"log in again with the credential plugin `{Path(command).name}` (its own login), then retry"
        if kind == "token file":
            return f"log in again: renew the token in {self.user.get('tokenFile')}"
        if kind == "client certificate":
            return (
                "log in again: get a new client certificate and key, then `kubectl config set-credentials "
                f"{user} --client-certificate=<file> --client-key=<file> --embed-certs`"
            )
        return f"log in again: get a new token, then `kubectl config set-credentials {user} --token=<token>`"


def kubeconfig_files(
    request: KubeconfigRequest, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> tuple[tuple[Path, ...], str, tuple[str, ...]]:
    """The files to read (existing ones, in order), how they were found, and the KUBECONFIG entries
    given relative to the working folder; KubeConfigError where there is none."""
    env = os.environ if environ is None else environ
    if request.file is not None:
        if not request.file.is_file():
            raise KubeConfigError(
                f"{request.file_key}: {request.file} does not exist or is not a file; name the kubeconfig `oc login` "
                "wrote (or remove the key to use KUBECONFIG or ~/.kube/config)"
            )
        return (request.file,), f"{request.file_key} ({request.file})", ()
    listed = env.get(KUBECONFIG_ENV, "")
    if listed:
        entries = list(dict.fromkeys(p for p in listed.split(os.pathsep) if p))
        relative = tuple(p for p in entries if not Path(p).is_absolute())
        paths = [Path(p).absolute() for p in entries]
        found = tuple(p for p in paths if p.is_file())
        where = f"KUBECONFIG ({', '.join(entries)})"
        if not found:
            raise KubeConfigError(
                f"none of the files {where} lists exists; log in (`oc login --server=<API URL>` writes the first), "
                "or unset KUBECONFIG to use ~/.kube/config"
            )
        return found, where, relative
    default = (home or Path(env.get("HOME") or Path.home())) / ".kube" / "config"
    if not default.is_file():
        raise KubeConfigError(
            f"no kubeconfig: {default} does not exist and KUBECONFIG is not set; log in (`oc login "
            f"--server=<API URL>`), or name a file in {request.file_key}"
        )
    return (default,), "~/.kube/config", ()


def load_document(path: Path) -> Mapping[str, Any]:
    """One kubeconfig file, parsed; KubeConfigError naming the file where it cannot be."""
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not YAML"
        raise KubeConfigError(f"cannot read the kubeconfig {path}: {reason}") from None
    if not isinstance(doc, Mapping):
        raise KubeConfigError(f"the kubeconfig {path} is not a kubeconfig (expected a mapping of clusters, users, ...)")
    return doc


def _absolute(entry: Mapping[str, Any], keys: Sequence[str], base: Path) -> tuple[dict[str, Any], bool]:
    """The entry with its relative file references made absolute against `base`; and whether it had any."""
    copy = dict(entry)
    relative = False
    for key in keys:
        value = copy.get(key)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            copy[key] = str(base / value)
            relative = True
    exec_ = copy.get("exec")
    if isinstance(exec_, Mapping):
        command = exec_.get("command")
        if isinstance(command, str) and os.sep in command and not Path(command).is_absolute():
            copy["exec"] = {**exec_, "command": str(base / command)}
            relative = True
    return copy, relative


@dataclass(frozen=True)
class Merged:
    """Kubeconfig documents merged, and where each entry came from."""

    config: dict[str, Any]
    # (section, name) -> the file that defined it, and whether it held a reference relative to that file
    origins: dict[tuple[str, str], tuple[Path | None, bool]]


def merge_documents(documents: Sequence[tuple[Path | None, Mapping[str, Any]]]) -> Merged:
    """Kubeconfig documents merged as kubectl merges them: the first to define a name wins, the
    first `current-context` set wins, each file's relative references resolved against its folder
    (a document of no file: the working folder)."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": [], "current-context": ""}
    origins: dict[tuple[str, str], tuple[Path | None, bool]] = {}
    for path, doc in documents:
        base = path.parent.absolute() if path is not None else Path.cwd()
        where = str(path) if path is not None else "the kubeconfig"
        for section, inner in _SECTIONS:
            entries = doc.get(section) or []
            if not isinstance(entries, list):
                raise KubeConfigError(f"{where}: {section} is not a list")
            for i, item in enumerate(entries):
                name = item.get("name") if isinstance(item, Mapping) else None
                body = item.get(inner) if isinstance(item, Mapping) else None
                if not isinstance(name, str) or not name or not isinstance(body, Mapping):
                    raise KubeConfigError(f"{where}: {section}[{i}] needs a name and a {inner} mapping")
                if (section, name) in origins:
                    continue
                if section == "clusters":
                    body, relative = _absolute(body, _CLUSTER_FILES, base)
                elif section == "users":
                    body, relative = _absolute(body, _USER_FILES, base)
                else:
                    relative = False
                origins[(section, name)] = (path, relative)
                merged[section].append({"name": name, inner: dict(body)})
        current = doc.get("current-context")
        if not merged["current-context"] and isinstance(current, str) and current:
            merged["current-context"] = current
    return Merged(merged, origins)


def _entry(config: Mapping[str, Any], section: str, inner: str, name: str) -> Mapping[str, Any] | None:
    for item in config.get(section) or ():
        if item.get("name") == name:
            found: Mapping[str, Any] = item[inner]
            return found
    return None


def context_names(config: Mapping[str, Any]) -> list[str]:
    return [str(c.get("name")) for c in config.get("contexts") or () if isinstance(c, Mapping)]


def _listing(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names) if names else "none"


def resolve_document(
    config: Mapping[str, Any],
    request: KubeconfigRequest,
    where: str,
    files: tuple[Path, ...] = (),
    relative_entries: tuple[str, ...] = (),
    origins: Mapping[tuple[str, str], tuple[Path | None, bool]] | None = None,
) -> ResolvedContext:
    """The context `request` asks for in an already merged kubeconfig, checked (see the module's
    docstring); KubeConfigError naming the fix otherwise."""
    name = request.context or config.get("current-context") or ""
    names = context_names(config)
    if not name:
        raise KubeConfigError(
            f"{where} sets no current-context and {request.context_key} is not set; name one of its contexts "
            f"({_listing(names)}) in {request.context_key}"
        )
    context = _entry(config, "contexts", "context", name)
    if context is None:
        if request.context:
            raise KubeConfigError(
                f"{request.context_key}: context {name!r} is not in {where}; it has {_listing(names)}: name one of "
                "them, or log in to make it (`oc login --server=<API URL>`)"
            )
        raise KubeConfigError(
            f"the current-context {name!r} of {where} is not defined there; it has {_listing(names)}: name one in "
            f"{request.context_key}, or `kubectl config use-context <name>`"
        )
    cluster_name = str(context.get("cluster") or "")
    cluster = _entry(config, "clusters", "cluster", cluster_name)
    if cluster is None:
        raise KubeConfigError(f"context {name!r} of {where} names cluster {cluster_name!r}, which is not defined there")
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise KubeConfigError(f"cluster {cluster_name!r} of {where} has no server")
    user_name = str(context.get("user") or "")
    user: Mapping[str, Any] = {}
    if user_name:
        found = _entry(config, "users", "user", user_name)
        if found is None:
            raise KubeConfigError(f"context {name!r} of {where} names user {user_name!r}, which is not defined there")
        user = found
    resolved = ResolvedContext(
        name=name,
        server=server,
        cluster_name=cluster_name,
        user_name=user_name,
        files=files,
        where=where,
        named=bool(request.context),
        namespace=str(context.get("namespace") or ""),
        flavour=request.flavour,
        relative_entries=relative_entries,
        whole_in=_whole_in(origins or {}, name, cluster_name, user_name),
        cluster=cluster,
        user=user,
    )
    _check_cluster(resolved, request)
    _check_user(resolved)
    return resolved


def _whole_in(
    origins: Mapping[tuple[str, str], tuple[Path | None, bool]], context: str, cluster: str, user: str
) -> Path | None:
    """The one file the context, its cluster and its user all come from, with no reference relative
    to its folder; None where they come from several, or one of them has such a reference."""
    wanted = [("contexts", context), ("clusters", cluster)] + ([("users", user)] if user else [])
    found = [origins.get(key) for key in wanted]
    files = {origin[0] for origin in found if origin is not None}
    if None in found or len(files) != 1 or any(origin[1] for origin in found if origin is not None):
        return None
    return files.pop()


def resolve_context(
    request: KubeconfigRequest, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> ResolvedContext:
    """The files `request` leads to, merged, and the context it names (else the current one)."""
    files, where, relative = kubeconfig_files(request, environ, home)
    merged = merge_documents([(path, load_document(path)) for path in files])
    return resolve_document(merged.config, request, where, files, relative, merged.origins)


def _check_cluster(resolved: ResolvedContext, request: KubeconfigRequest) -> None:
    cluster, label = resolved.cluster, f"cluster {resolved.cluster_name!r} of {resolved.where}"
    if cluster.get("insecure-skip-tls-verify") in (True, "true") and not request.allow_insecure_tls:
        raise KubeConfigError(
            f"{label} sets insecure-skip-tls-verify (the server's certificate would not be checked); put the "
            f"cluster's CA in the kubeconfig instead (`oc login --certificate-authority=<ca.crt> "
            f"--server={resolved.server}`, or `kubectl config set-cluster {resolved.cluster_name} "
            f"--certificate-authority=<ca.crt> --embed-certs`), or accept it for this stack with "
            f"{request.insecure_key}: true"
        )
    if cluster.get("tls-server-name"):
        raise KubeConfigError(
            f"{label} sets tls-server-name, which Atlas's client does not support; reach the server by the name "
            "its certificate holds"
        )
    if cluster.get("proxy-url"):
        raise KubeConfigError(
            f"{label} sets proxy-url, which Atlas's client does not read; remove it and set HTTPS_PROXY "
            "(and NO_PROXY) instead, which Atlas and pulumi-kubernetes both honour"
        )
    _check_file(cluster.get("certificate-authority"), f"{label}: certificate-authority")


def _check_file(value: Any, label: str) -> None:
    if value and not Path(str(value)).expanduser().is_file():
        raise KubeConfigError(f"{label} {value} does not exist; fix the path, or log in again to write it")


def _check_user(resolved: ResolvedContext) -> None:
    user = resolved.user
    label = f"user {resolved.user_name!r} of {resolved.where}"
    if user.get("auth-provider"):
        provider = str((user.get("auth-provider") or {}).get("name", ""))
        raise KubeConfigError(
            f"{label} uses the legacy auth-provider {provider!r}, which Kubernetes removed (gcp and azure in 1.26) and "
            "Atlas does not read; switch to its exec credential plugin (gke-gcloud-auth-plugin, kubelogin) or "
            "log in with a token (`oc login`)"
        )
    if user.get("username") or user.get("password"):
        raise KubeConfigError(
            f"{label} uses basic auth (username and password), which Kubernetes no longer accepts; log in with a "
            "token (`oc login`) or a client certificate"
        )
    for key in ("as", "as-uid", "as-groups", "as-user-extra"):
        if user.get(key):
            raise KubeConfigError(f"{label} impersonates ({key}), which Atlas does not do; use a context without it")
    if bool(user.get("client-certificate") or user.get("client-certificate-data")) != bool(
        user.get("client-key") or user.get("client-key-data")
    ):
        raise KubeConfigError(f"{label} has a client certificate without its key, or a key without its certificate")
    for key in _USER_FILES:
        _check_file(user.get(key), f"{label}: {key}")
    exec_ = user.get("exec")
    if exec_ is not None:
        _check_exec(exec_, label)


def _check_exec(exec_: Any, label: str) -> None:
    if not isinstance(exec_, Mapping) or not exec_.get("command"):
        raise KubeConfigError(f"{label}: exec needs a command")
    version = exec_.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise KubeConfigError(
            f"{label}: exec apiVersion {version!r} is not one Atlas speaks ({', '.join(EXEC_API_VERSIONS)}); "
            "update the plugin's entry (v1alpha1 went in Kubernetes 1.24)"
        )
    mode = exec_.get("interactiveMode")
    if mode is None and version.endswith("/v1"):
        raise KubeConfigError(f"{label}: exec of {version} needs interactiveMode (Never or IfAvailable)")
    if mode is not None and mode not in EXEC_INTERACTIVE_MODES:
        raise KubeConfigError(
            f"{label}: exec interactiveMode {mode!r} is not one of {', '.join(EXEC_INTERACTIVE_MODES)}"
        )
    if mode == "Always":
        raise KubeConfigError(
            f"{label}: the exec plugin asks for a terminal (interactiveMode: Always), which Atlas never has (it runs "
            "under `pulumi up`); log in with the plugin by hand first and set interactiveMode: IfAvailable"
        )
    for key in ("args", "env"):
        if exec_.get(key) is not None and not isinstance(exec_.get(key), list):
            raise KubeConfigError(f"{label}: exec {key} is not a list")


def minified(resolved: ResolvedContext) -> str:
    """A kubeconfig of the one context, its cluster and its user, file references absolute (what
    `kubectl config view --minify --raw` prints): it holds the user's credentials, so it is only
    ever handed on as a secret."""
    context: dict[str, Any] = {"cluster": resolved.cluster_name}
    if resolved.user_name:
        context["user"] = resolved.user_name
    if resolved.namespace:
        context["namespace"] = resolved.namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": resolved.cluster_name, "cluster": dict(resolved.cluster)}],
        "users": [{"name": resolved.user_name, "user": dict(resolved.user)}] if resolved.user_name else [],
        "contexts": [{"name": resolved.name, "context": context}],
        "current-context": resolved.name,
    }
    return yaml.safe_dump(doc, sort_keys=False)
