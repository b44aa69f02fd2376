"""The monitor: its Deployment, Service, Route or Ingress, and on OpenShift the login proxy in front of it.

A one-replica, read-only JSON view of the run's telemetry and training log. On OpenShift the
cluster's own login guards it: an oauth-proxy sidecar behind a reencrypt Route (see "The
monitor behind OpenShift's login" below).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi

from infra.openshift.manifests.image_build import image_stream_name
from infra.openshift.manifests.labels import SKIP_AWAIT, Manifest, RunIdentity, object_metadata
from infra.openshift.manifests.pods import (
    MOUNT_ROOT,
    NO_GPU_ENV,
    READ_ONLY_CONTAINER_SECURITY,
    SCRIPTS_DIR,
    PodContext,
    pod_spec,
)
from infra.openshift.manifests.volumes import pvc_volume, volume_path
from infra.openshift.settings import (
    MONITOR_CPU,
    MONITOR_MEMORY,
    MONITOR_PROXY_CPU,
    MONITOR_PROXY_MEMORY,
    OpenShiftSettings,
)
from infra.workload.model import Workload

MONITOR_PORT = 8080
# OpenShift only: the oauth-proxy in front of the monitor (see "The monitor behind OpenShift's login").
MONITOR_PROXY_PORT = 8443
MONITOR_APP = "monitor_app.py"


def monitor_selector(identity: RunIdentity) -> dict[str, str]:
    # Stable across runs: a Deployment's selector cannot change without replacing it.
    return {"app.kubernetes.io/component": "monitor", "atlas.dev/stack": identity.stack}


# How long `pulumi up` waits for the monitor to be ready (pulumi-kubernetes' default is 10
# minutes): it starts after the data is staged, so its image is on the node already, and a
# small HTTP server not ready in 3 minutes is a node or cluster fault worth reporting sooner.
MONITOR_AWAIT_S = 180
READINESS_PERIOD_S = 2


def _monitor_await(settings: OpenShiftSettings) -> dict[str, str]:
    """The monitor objects' await annotations: awaited for MONITOR_AWAIT_S, or not at all."""
    if settings.monitor.await_ready:
        return {"pulumi.com/timeoutSeconds": str(MONITOR_AWAIT_S)}
    return {SKIP_AWAIT: "true"}


def monitor_deployment(
    workload: Workload,
    settings: OpenShiftSettings,
    context: PodContext,
    app_config_map: pulumi.Input[str],
    namespace_name: str,
) -> Manifest:
    """A one-replica, read-only JSON view of the run's telemetry and training log; on OpenShift
    behind the oauth-proxy sidecar (`login_proxy`), which only it may reach from outside."""
    labels = context.identity.labels("monitor")
    telemetry_role, telemetry_path = volume_path(workload, workload.telemetry.root)
    logs_role, logs_path = volume_path(workload, workload.logs.root)
    # A sweep ranked by a file its points write: the monitor serves the results PVC too, where
    # `scripts/compare` reads each point's file (only then: other runs' Deployments are unchanged).
    serves_results = any(s.sweep is not None and s.sweep.metric is not None and s.sweep.metric.file is not None
                         for s in workload.steps)
    read_roles = sorted({telemetry_role, logs_role} | ({"results"} if serves_results else set()))
    amounts = {"cpu": MONITOR_CPU.text, "memory": MONITOR_MEMORY.text}
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10}
    # Readiness every 2 s: the first check comes as the container starts, before the server
    # listens, and at 10 s the Deployment waited 10 s more to be available (bench/local_vs_script).
    readiness = {**probe, "periodSeconds": READINESS_PERIOD_S}
    container = {
        "name": "monitor",
        "image": settings.monitor.image or context.image,
        "command": [
            "python3",
            f"{SCRIPTS_DIR}/{MONITOR_APP}",
            "--port",
            str(MONITOR_PORT),
            "--telemetry-dir",
            f"{MOUNT_ROOT}/{telemetry_role}/{telemetry_path}",
            "--logs-dir",
            f"{MOUNT_ROOT}/{logs_role}/{logs_path}",
            *(["--experiment", workload.logs.experiment] if workload.logs.experiment is not None else []),
            "--run",
            context.identity.run_id,
            *(["--results-dir", f"{MOUNT_ROOT}/results"] if serves_results else []),
        ],
        "ports": [{"name": "http", "containerPort": MONITOR_PORT, "protocol": "TCP"}],
        "env": [dict(NO_GPU_ENV)],
        "resources": {"requests": dict(amounts), "limits": {"cpu": "500m", "memory": MONITOR_MEMORY.text}},
        "readinessProbe": readiness,
        "livenessProbe": {**probe, "initialDelaySeconds": 10},
        "volumeMounts": [{"name": "app", "mountPath": SCRIPTS_DIR, "readOnly": True}]
        + [{"name": role, "mountPath": f"{MOUNT_ROOT}/{role}", "readOnly": True} for role in read_roles],
        "securityContext": dict(READ_ONLY_CONTAINER_SECURITY),
    }
    volumes = [{"name": "app", "configMap": {"name": app_config_map}}]
    volumes += [pvc_volume(role, context.claims, read_only=True) for role in read_roles]
    pod_extra: Manifest = {}
    containers = [container]
    if settings.is_openshift:
        proxy = login_proxy(settings, context, namespace_name, settings.monitor.image or context.image)
        containers.append(proxy.container)
        volumes += proxy.volumes
        # The ServiceAccount's token goes to the proxy alone (SERVICE_ACCOUNT_FILES), not
        # automounted into every container: the monitor never calls the API.
        pod_extra = {"initContainers": [proxy.init_container], "serviceAccountName": proxy.service_account}
    selector = monitor_selector(context.identity)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(labels, context.namespace, _monitor_await(settings)),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            # Recreate: a second pod would wait for the RWO claims of a cluster without RWX.
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": {**labels, **selector}},
                "spec": pod_spec(context, containers, volumes, **pod_extra),
            },
        },
    }


def monitor_service(settings: OpenShiftSettings, context: PodContext) -> Manifest:
    # Never awaited: the Deployment's await already holds `up` until its pod is ready, and
    # pulumi-kubernetes' own wait for the Service's endpoints ended about 10 s after that.
    annotations = {SKIP_AWAIT: "true"}
    ports = [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    if settings.is_openshift:
        # The service CA operator writes a certificate for <service>.<namespace>.svc into this
        # Secret: the proxy serves it, and the router trusts it for the reencrypt Route.
        annotations[SERVING_CERT_ANNOTATION] = monitor_names(context.identity).tls_secret
        ports.append({"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(context.identity.labels("monitor"), context.namespace, annotations),
        "spec": {"type": "ClusterIP", "selector": monitor_selector(context.identity), "ports": ports},
    }


def monitor_route(settings: OpenShiftSettings, context: PodContext, service: pulumi.Input[str]) -> Manifest:
    """TLS from the browser to the router and again from the router to the login proxy
    (reencrypt): the monitor's own plain-HTTP port is never what the Route reaches."""
    spec: Manifest = {
        "to": {"kind": "Service", "name": service, "weight": 100},
        "port": {"targetPort": "https"},
        "tls": {"termination": "reencrypt", "insecureEdgeTerminationPolicy": "Redirect"},
        "wildcardPolicy": "None",
    }
    if settings.monitor.host:
        spec["host"] = settings.monitor.host
    names = monitor_names(context.identity)
    return {
        "apiVersion": "route.openshift.io/v1",
        "kind": "Route",
        "metadata": object_metadata(context.identity.labels("monitor"), context.namespace, name=names.route),
        "spec": spec,
    }


# ---------------------------------------------------------------------------------------------
# The monitor behind OpenShift's login
#
# OpenShift's oauth-proxy (github.com/openshift/oauth-proxy) runs beside the monitor: a browser
# is sent to the cluster's own login, and only a user who may `get` Services in the project is
# let through (a subject access review made with that user's token). The proxy is an OAuth
# client through its ServiceAccount, whose annotation names the Route the login returns to.

SERVING_CERT_ANNOTATION = "service.beta.openshift.io/serving-cert-secret-name"
OAUTH_REDIRECT_ANNOTATION = "serviceaccounts.openshift.io/oauth-redirectreference.primary"
PROXY_TLS_DIR = "/etc/tls/private"
PROXY_SESSION_DIR = "/etc/oauth-proxy"
PROXY_COOKIE_SECRET = f"{PROXY_SESSION_DIR}/cookie-secret"
# Written once per pod into memory by the init container: the session cookie's AES key never
# leaves the pod (not in Pulumi's state, not in a Secret); a new pod means logging in again.
# 16 random bytes as 32 hex characters: a 32-byte key, as oauth-proxy asks (16, 24 or 32).
COOKIE_SECRET_PROGRAM = (
    "import os, secrets; "
    f"fd = os.open({PROXY_COOKIE_SECRET!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600); "
    "os.write(fd, secrets.token_hex(16).encode())"
)
# The Services `get` the proxy checks: who may see the project's Services may see its monitor.
MONITOR_ACCESS = {"resource": "services", "verb": "get"}


@dataclass(frozen=True)
class MonitorNames:
    """Names fixed in advance for the objects that name one another (the ServiceAccount's
    redirect names the Route, the proxy's flags the ServiceAccount, the Deployment the
    certificate Secret the Service's annotation asks for), so no name waits on a creation."""

    route: str
    service_account: str
    tls_secret: str


def monitor_names(identity: RunIdentity) -> MonitorNames:
    # The Route's generated host is <route>-<namespace>.<apps domain>, one DNS label of at most
    # 63 characters: the base is kept short to leave room for the namespace.
    base = image_stream_name(identity.workload, identity.stack)[:32].rstrip("-")
    return MonitorNames(
        route=f"{base}-monitor", service_account=f"{base}-monitor", tls_secret=f"{base}-monitor-tls"
    )


def monitor_service_account(context: PodContext) -> Manifest:
    """The proxy's OAuth client: OpenShift lets a ServiceAccount be one, returning logins to the
    Route its annotation names. It is bound to no role: the proxy checks users' own access. Its
    token is projected into the proxy alone (SERVICE_ACCOUNT_FILES), never automounted."""
    names = monitor_names(context.identity)
    route = {"kind": "Route", "name": names.route}
    redirect = {"kind": "OAuthRedirectReference", "apiVersion": "v1", "reference": route}
    annotations = {OAUTH_REDIRECT_ANNOTATION: json.dumps(redirect, separators=(",", ":"))}
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_metadata(
            context.identity.labels("monitor"), context.namespace, annotations, name=names.service_account
        ),
        "automountServiceAccountToken": False,
    }


# Where a pod's ServiceAccount credentials are, and what OpenShift's own automount puts there
# (a bound token, the API server's CA, the service CA, the namespace); the proxy reads them as
# its OAuth client secret and to call the API.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_FILES: Manifest = {
    "name": "oauth-client",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "configMap": {
                    "name": "openshift-service-ca.crt",
                    "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}],
                }
            },
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]
    },
}


@dataclass(frozen=True)
class LoginProxy:
    container: Manifest
    init_container: Manifest
    volumes: list[Manifest]
    service_account: str


def login_proxy(
    settings: OpenShiftSettings, context: PodContext, namespace_name: str, python_image: pulumi.Input[str]
) -> LoginProxy:
    """The oauth-proxy sidecar, the init container that writes its cookie key, their volumes."""
    names = monitor_names(context.identity)
    access = json.dumps({"namespace": namespace_name, **MONITOR_ACCESS}, separators=(",", ":"))
    resources = {
        "requests": {"cpu": MONITOR_PROXY_CPU.text, "memory": MONITOR_PROXY_MEMORY.text},
        "limits": {"cpu": "200m", "memory": MONITOR_PROXY_MEMORY.text},
    }
    probe = {"httpGet": {"path": "/oauth/healthz", "port": "https", "scheme": "HTTPS"}, "periodSeconds": 10}
    session_mount = {"name": "oauth-session", "mountPath": PROXY_SESSION_DIR}
    container = {
        "name": "oauth-proxy",
        "image": settings.monitor.proxy_image,
        "args": [
            "--provider=openshift",
            f"--openshift-service-account={names.service_account}",
            f"--https-address=:{MONITOR_PROXY_PORT}",
            "--http-address=",
            f"--upstream=http://localhost:{MONITOR_PORT}",
            f"--tls-cert={PROXY_TLS_DIR}/tls.crt",
            f"--tls-key={PROXY_TLS_DIR}/tls.key",
            f"--cookie-secret-file={PROXY_COOKIE_SECRET}",
            f"--openshift-sar={access}",
            "--skip-provider-button",
        ],
        "ports": [{"name": "https", "containerPort": MONITOR_PROXY_PORT, "protocol": "TCP"}],
        "resources": resources,
        "readinessProbe": {**probe, "periodSeconds": READINESS_PERIOD_S},
        "livenessProbe": {**probe, "initialDelaySeconds": 10},
        "volumeMounts": [
            {"name": "oauth-tls", "mountPath": PROXY_TLS_DIR, "readOnly": True},
            {**session_mount, "readOnly": True},
            {"name": "oauth-client", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True},
        ],
        "securityContext": dict(READ_ONLY_CONTAINER_SECURITY),
    }
    init_container = {
        "name": "oauth-cookie-secret",
        "image": python_image,
        "command": ["python3", "-c", COOKIE_SECRET_PROGRAM],
        "env": [dict(NO_GPU_ENV)],
        "resources": resources,
        "volumeMounts": [session_mount],
        "securityContext": dict(READ_ONLY_CONTAINER_SECURITY),
    }
    volumes = [
        {"name": "oauth-tls", "secret": {"secretName": names.tls_secret}},
        {"name": "oauth-session", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        SERVICE_ACCOUNT_FILES,
    ]
    return LoginProxy(container, init_container, volumes, names.service_account)


def monitor_ingress(settings: OpenShiftSettings, context: PodContext, service: pulumi.Input[str]) -> Manifest:
    rule: Manifest = {
        "http": {
            "paths": [
                {
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": service, "port": {"name": "http"}}},
                }
            ]
        }
    }
    if settings.monitor.host:
        rule["host"] = settings.monitor.host
    spec: Manifest = {"rules": [rule]}
    if settings.monitor.ingress_class:
        spec["ingressClassName"] = settings.monitor.ingress_class
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        # An Ingress is awaited until a controller fills its status: none on the local cluster.
        "metadata": object_metadata(context.identity.labels("monitor"), context.namespace, _monitor_await(settings)),
        "spec": spec,
    }
