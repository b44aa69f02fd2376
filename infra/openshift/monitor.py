"""RunMonitor: a small read-only JSON endpoint over the run's telemetry and training log.

A one-replica Deployment runs monitor_app.py (Python's http.server, mounted from a ConfigMap)
with the results and logs PVCs mounted read-only, behind a Service. On OpenShift a reencrypt
Route leads to OpenShift's oauth-proxy beside it, which sends a browser to the cluster's login
and lets in only users who may read the project's Services (its ServiceAccount is the OAuth
client; see manifests/monitor.py, "The monitor behind OpenShift's login"). On plain Kubernetes, an
Ingress when `monitor.host` names one (without it, the monitor is reached through the API
server's service proxy with the user's own credentials, as `scripts/compare` does: an Ingress
without a host would publish it to anyone).

Awaiting: pulumi-kubernetes waits for a Deployment to become available and for an Ingress to
get a load balancer status. The Service is never awaited: the Deployment's wait already covers
its pod, and the Service's own endpoints wait ended about 10 s after it. On a cluster that
cannot make pods Ready or has no ingress controller, `monitor.await: false` puts
`pulumi.com/skipAwait` on both (a Route is never awaited).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from infra.openshift.manifests.monitor import (
    MONITOR_APP,
    monitor_deployment,
    monitor_ingress,
    monitor_route,
    monitor_service,
    monitor_service_account,
)
from infra.openshift.manifests.pods import PodContext
from infra.openshift.objects import KubernetesObject
from infra.openshift.settings import OpenShiftSettings
from infra.workload.model import Workload

MONITOR_APP_PATH = Path(__file__).with_name(MONITOR_APP)


@dataclass
class RunMonitorArgs:
    workload: Workload
    settings: OpenShiftSettings
    context: PodContext
    namespace_name: str
    depends_on: list[pulumi.Resource] = field(default_factory=list)


class RunMonitor(pulumi.ComponentResource):
    url: pulumi.Output[str]

    def __init__(self, name: str, args: RunMonitorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("atlas:openshift:RunMonitor", name, None, opts)
        context = args.context
        settings = args.settings
        child = pulumi.ResourceOptions(parent=self)
        self.app = k8s.core.v1.ConfigMap(
            f"{name}-app",
            metadata={"namespace": context.namespace, "labels": context.identity.labels("monitor")},
            data={MONITOR_APP: MONITOR_APP_PATH.read_text()},
            opts=child,
        )
        depends_on = list(args.depends_on)
        self.service_account: k8s.core.v1.ServiceAccount | None = None
        if settings.is_openshift:
            account = monitor_service_account(context)
            self.service_account = k8s.core.v1.ServiceAccount(
                f"{name}-service-account",
                metadata=account["metadata"],
                automount_service_account_token=account["automountServiceAccountToken"],
                opts=child,
            )
            depends_on.append(self.service_account)
        deployment = monitor_deployment(
            args.workload, settings, context, self.app.metadata.name, args.namespace_name
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=deployment["metadata"],
            spec=deployment["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )
        service = monitor_service(settings, context)
        self.service = k8s.core.v1.Service(
            f"{name}-service", metadata=service["metadata"], spec=service["spec"], opts=child
        )
        service_name = self.service.metadata.name
        self.route: KubernetesObject | None = None
        self.ingress: k8s.networking.v1.Ingress | None = None
        if settings.is_openshift:
            self.route = KubernetesObject(
                f"{name}-route", monitor_route(settings, context, service_name), opts=child
            )
            # OpenShift's router admission fills spec.host when it is left empty.
            host = self.route.spec.apply(lambda spec: (spec or {}).get("host") or settings.monitor.host or "")
            self.url = host.apply(lambda h: f"https://{h}/" if h else "")
        elif settings.monitor.host:
            ingress = monitor_ingress(settings, context, service_name)
            self.ingress = k8s.networking.v1.Ingress(
                f"{name}-ingress", metadata=ingress["metadata"], spec=ingress["spec"], opts=child
            )
            self.url = pulumi.Output.from_input(f"http://{settings.monitor.host}/")
        else:
            # No host: reachable in the cluster, or through the API server's service proxy.
            self.url = pulumi.Output.concat("http://", service_name, ".", args.namespace_name, ".svc/")
        self.register_outputs({"url": self.url})
