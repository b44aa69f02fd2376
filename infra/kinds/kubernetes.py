"""The Kubernetes kind (OpenShift or plain Kubernetes): `OpenShiftEnvironment`, its records through
the API, its watch-cache monitor, backfill as a Deployment that yields.

Everything the rest of Atlas asks of a Kubernetes environment, in the order of
`EnvironmentKind` (base.py); what each part does lives in its own package (infra/openshift,
infra/compare/kube_*, infra/monitor/kube*, infra/nodes/backfill*), imported where it is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.kinds.base import BackfillRequest, BuildContext, Built, DoctorContext, EnvironmentKind, backfill_work
from infra.outputs import FilesAt, KubePlacement, KubernetesOutputs
from infra.validation import switched_off

if TYPE_CHECKING:
    from infra.compare.access import Access
    from infra.compare.records import EnvironmentRecords, ReportContract
    from infra.doctor import EnvironmentChecks
    from infra.kubeapi import KubeApi
    from infra.monitor.kube import KubeClient
    from infra.monitor.sources import EnvironmentSource
    from infra.stack_config import StackConfig
    from infra.workload.model import Workload

# The stack config's section, and the environment's name in the outputs and the workload's overrides.
SECTION = "atlas:openshift"
ENVIRONMENT = "openshift"


def api_for(access: Access, outputs: KubernetesOutputs, timeout_s: float = 10.0) -> KubeApi:
    """A client of the environment's API server, resolved as the stack program resolves it
    (Access.kube_request: the stack's or --kubeconfig file, else KUBECONFIG merged, else
    ~/.kube/config; the stack's or --context context, else the current one)."""
    from infra.kubeapi import KubeApi
    from infra.kubeconfig import resolve_context

    return KubeApi(resolve_context(access.kube_request(outputs.flavour)), timeout_s=timeout_s)


def client_for(access: Access, outputs: KubernetesOutputs) -> KubeClient:
    """As api_for, the monitor's client (watches, writes, GETs that raise the API's message)."""
    from infra.kubeconfig import resolve_context
    from infra.monitor.kube import KubeClient

    return KubeClient(resolve_context(access.kube_request(outputs.flavour)))


class KubernetesKind(EnvironmentKind[KubernetesOutputs]):
    name = KubernetesOutputs.kind
    outputs_type = KubernetesOutputs

    def stages_source(self, config: StackConfig, workload: Workload) -> bool:
        # An image of the workload's own carries its code; Atlas's runtime image gets it in a ConfigMap.
        return config.openshift is not None and workload.runs_in_runtime_image

    def build(self, context: BuildContext) -> dict[str, Built]:
        config = context.config
        if config.openshift is None:
            return {}
        from infra.openshift.environment import OpenShiftEnvironment, OpenShiftEnvironmentArgs
        from infra.workload.load import check_staged_size

        staged = context.source_files if self.stages_source(config, context.workload) else ()
        # The code goes into one ConfigMap: too much of it stops preview here, naming the workload.
        check_staged_size([f.source.stat().st_size for f in staged], f"workload {context.workload.name!r}'s code")
        environment = OpenShiftEnvironment(
            ENVIRONMENT,
            OpenShiftEnvironmentArgs(
                target=config.openshift,
                stack=config.stack,
                workload=context.workload.name,
                definition=context.workload,
                settings=config.openshift_settings,
                run_id=config.run_id,
                source_files=staged,
                sweep_max_attempts=config.sweep_max_attempts,
            ),
        )
        return {ENVIRONMENT: Built(environment, environment.outputs, environment.image.image)}

    def outputs_before_up(self, config: Mapping[str, Any], stack: str) -> dict[str, KubernetesOutputs]:
        section = config.get(SECTION)
        if not isinstance(section, dict) or switched_off(section):
            return {}
        from infra.openshift.manifests.pods import gpu_placement
        from infra.openshift.section_models import GpuModel

        # As written (the stack is not validated here); the GPU product's default is the model's.
        written = section.get("placement")
        placement: dict[str, Any] = written if isinstance(written, dict) else {}
        selector, tolerations = gpu_placement(
            {str(k): str(v) for k, v in (placement.get("node_selector") or {}).items()},
            [{str(k): str(v) for k, v in t.items()} for t in placement.get("tolerations") or () if isinstance(t, dict)],
            str((section.get("gpu") or {}).get("product") or GpuModel.model_fields["product"].default),
        )
        return {
            ENVIRONMENT: KubernetesOutputs(
                gpus_requested=0,
                run_id=str(config.get("atlas:runId", "1")),
                flavour=str(section.get("flavour", "openshift")),
                namespace=str(section.get("namespace", "")),
                steps=(),
                telemetry=FilesAt(""),
                logs=FilesAt(""),
                gpu_product=(section.get("gpu") or {}).get("product"),
                gpu_placement=KubePlacement(selector, tuple(tolerations)),
            )
        }

    def collect(
        self, name: str, outputs: KubernetesOutputs, access: Access, raw_dir: Path, contract: ReportContract
    ) -> EnvironmentRecords:
        from infra.compare.kube_collector import collect_kubernetes
        from infra.compare.remote_files import MonitorFiles
        api = api_for(access, outputs, timeout_s=60.0)
        files = functools.partial(MonitorFiles, api.get, api.download)
        return collect_kubernetes(name, outputs, api.get, files, raw_dir, contract, pod_log=api.text)

    def unreachable(self, name: str, outputs: KubernetesOutputs, reason: str) -> EnvironmentRecords:
        import dataclasses

        from infra.compare.records import without_records
        from infra.compare.runtimes import kube_runtime
        from infra.provenance import NOT_REACHED, label, loopback_url_fact

        # The image is the outputs' own; what ran it is the nodes', which could not be asked.
        why = reason if reason.startswith("not ") else f"not read: {reason}"
        runtime = dataclasses.replace(kube_runtime(name, outputs, (), ()), note=why, arch_note=why)

        return without_records(
            name,
            outputs.kind,
            f"{outputs.flavour.capitalize()} API",
            reason,
            notes=(reason,),
            gpus=outputs.gpus_requested,
            gpu_product=outputs.gpu_product,
            cost_profile="moc",
            runtime=runtime,
            provenance=label(NOT_REACHED, [loopback_url_fact("Kubernetes API", outputs.api_url)]),
        )

    def monitor_source(
        self, name: str, outputs: KubernetesOutputs, access: Access, interval_s: float
    ) -> EnvironmentSource:
        from infra.monitor.kube import KubeCache
        from infra.monitor.kube_live import KubeLive
        from infra.monitor.kube_view import KubeSource

        # A kubeconfig that cannot be resolved ends the command in one line (infra.cli), as in compare.
        client = client_for(access, outputs)
        # The running steps' files are read through the run's monitor at the monitor's pace.
        live = KubeLive(client.get, outputs.namespace, outputs.run_id, bool(outputs.monitor_url), interval_s)
        return KubeSource(name, outputs, KubeCache(client, outputs.namespace), live)

    def polls_scheduler(self, outputs: KubernetesOutputs) -> bool:
        return False  # the API is watched, not polled

    def backfill(self, request: BackfillRequest, outputs: KubernetesOutputs, echo: Callable[[str], None]) -> None:
        import dataclasses

        from infra.nodes import backfill, backfill_apply
        from infra.openshift.settings import ANY_IMAGE_UID

        client = client_for(request.access, outputs)
        if request.stop:
            gone = backfill_apply.stop_kubernetes(client, request.workload)
            echo(f"{request.environment}: backfill Deployment {'deleted' if gone else 'was not there'}")
            return
        work = backfill_work(request, outputs.image, outputs.gpu_product or None)
        if outputs.flavour != "openshift":
            # Nothing assigns a UID there, and the run's image may be one Atlas did not build (whose USER
            # may be root); Atlas's own images' USER is this UID anyway.
            work = dataclasses.replace(work, run_as_uid=ANY_IMAGE_UID)
        applied = backfill_apply.apply_kubernetes(client, work, request.slots)
        echo(
            f"{request.environment}: {request.slots} one-GPU backfill pod(s) at priority {backfill.PRIORITY_VALUE} "
            f"({', '.join(applied)}); real jobs preempt them"
        )

    def doctor(self, context: DoctorContext) -> dict[str, EnvironmentChecks]:
        config = context.config
        if config.openshift is None or config.openshift_settings is None:
            return {}
        from infra.config import kubernetes_rights
        from infra.doctor import EnvironmentChecks
        from infra.openshift.doctor import kubernetes_checks
        from infra.openshift.manifests.sweep_jobs import sweep_widths
        from infra.workload.render import render_steps

        checks = kubernetes_checks(
            config.openshift,
            config.openshift_settings,
            render_steps(context.workload, ENVIRONMENT),
            kubernetes_rights(config),
            context.access.kube_request(config.openshift.flavour),
            config.stack,
            widths=sweep_widths(context.workload),
        )
        return {ENVIRONMENT: EnvironmentChecks(ENVIRONMENT, self.name, checks)}
