"""OpenShiftEnvironment under Pulumi mocks: the objects it declares, resolved, with their
dependencies and options as the engine receives them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.openshift.environment import OpenShiftEnvironment, OpenShiftEnvironmentArgs
from infra.openshift.settings import OpenShiftSettings, OpenShiftSettingsError
from infra.openshift.settings_parser import parse_openshift_settings
from infra.openshift.target import KubernetesTarget
from infra.outputs import OUTPUTS_VERSION
from infra.workload.model import Workload
from tests.unit.openshift_fixtures import (
    KEY,
    RecordingMonitor,
    biggan,
    example_raw,
    example_settings,
    install_mocks,
    local_raw,
    modified,
    target_for,
)


@pytest.fixture
def mocks() -> RecordingMonitor:
    return install_mocks()


def environment(
    settings: OpenShiftSettings, workload: Workload | None = None, name: str = "openshift", stack: str = "openshift-gpu"
) -> OpenShiftEnvironment:
    return OpenShiftEnvironment(
        name,
        OpenShiftEnvironmentArgs(
            target=target_for(settings),
            stack=stack,
            workload="biggan",
            definition=workload or biggan(),
            settings=settings,
            run_id="run-7",
        ),
    )


def resolved(env: OpenShiftEnvironment) -> pulumi.Output[dict[str, Any]]:
    return env.outputs


@pulumi.runtime.test
def test_namespace_is_labelled_and_named_exactly(mocks, tmp_path: Path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:16443'}\n"
        "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n"
    )
    target = KubernetesTarget(flavour="kubernetes", namespace="atlas-test", kubeconfig_path=kubeconfig, context=None)
    env = OpenShiftEnvironment("openshift", OpenShiftEnvironmentArgs(target=target, stack="unit", workload="probe"))

    def check(values: list[object]) -> None:
        namespace, api_url = values
        assert namespace == "atlas-test"
        assert api_url == "https://127.0.0.1:16443"
        ns = mocks.named("openshift-namespace")
        assert ns.typ == "kubernetes:core/v1:Namespace"
        assert ns.inputs["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "atlas",
            "atlas.dev/stack": "unit",
            "atlas.dev/workload": "probe",
        }
        provider = mocks.named("openshift-provider")
        assert provider.inputs["kubeconfig"] == str(kubeconfig)
        # Without a definition and settings, only the project.
        assert {r.typ for r in mocks.registered} == {
            "atlas:openshift:OpenShiftEnvironment",
            "pulumi:providers:kubernetes",
            "kubernetes:core/v1:Namespace",
        }

    return pulumi.Output.all(env.namespace, env.api_url).apply(check)


@pulumi.runtime.test
def test_openshift_gpu_declares_every_object(mocks):
    env = environment(example_settings())

    def check(outputs: dict[str, Any]) -> None:
        kinds = sorted((r.kind, r.name) for r in mocks.registered if r.kind)
        assert kinds == [
            ("BuildConfig", "openshift-image-build"),
            ("ConfigMap", "openshift-monitor-app"),
            ("ConfigMap", "openshift-staging-scripts"),
            ("Deployment", "openshift-monitor-deployment"),
            ("ImageStream", "openshift-image-stream"),
            ("Job", "openshift-pipeline-inception-moments"),
            ("Job", "openshift-pipeline-make-hdf5"),
            ("Job", "openshift-pipeline-train"),
            ("Job", "openshift-staging-imagenet-train"),
            ("Job", "openshift-staging-inception-weights"),
            ("Job", "openshift-staging-volumes"),
            ("LimitRange", "openshift-limits"),
            ("NetworkPolicy", "openshift-deny-ingress"),
            ("NetworkPolicy", "openshift-monitor-ingress"),
            ("PersistentVolumeClaim", "openshift-data"),
            ("PersistentVolumeClaim", "openshift-logs"),
            ("PersistentVolumeClaim", "openshift-results"),
            ("ProjectRequest", "openshift-project"),
            ("ResourceQuota", "openshift-quota"),
            ("Route", "openshift-monitor-route"),
            ("Service", "openshift-monitor-service"),
            ("ServiceAccount", "openshift-jobs"),
            ("ServiceAccount", "openshift-monitor-service-account"),
        ]
        # Every namespaced object is in the project and labelled with the stack and the run.
        for r in mocks.registered:
            if not r.kind:
                continue
            labels = r.inputs["metadata"]["labels"]
            assert labels["atlas.dev/stack"] == "openshift-gpu", r.name
            assert labels["atlas.dev/run"] == "run-7", r.name
            assert labels["app.kubernetes.io/managed-by"] == "atlas", r.name
            if r.kind != "ProjectRequest":
                assert r.inputs["metadata"]["namespace"] == "atlas-biggan", r.name
                # Auto-named, except the ImageStream, whose name the pull spec and the build
                # share, and the monitor's Route and ServiceAccount, which name each other.
                named = {"openshift-image-stream", "openshift-monitor-route", "openshift-monitor-service-account"}
                assert ("name" in r.inputs["metadata"]) == (r.name in named), r.name

        request = mocks.named("openshift-project")
        assert request.inputs["metadata"]["name"] == "atlas-biggan"
        assert request.inputs["displayName"] == "Atlas BigGAN"
        # Created with client-side apply: a ProjectRequest cannot be PATCHed.
        project_provider = mocks.named("openshift-project-provider")
        assert project_provider.inputs["enableServerSideApply"] == "false"
        assert request.provider.startswith(project_provider.urn)

        assert outputs["namespace"] == "atlas-biggan"
        assert outputs["flavour"] == "openshift"
        assert outputs["gpus_requested"] == 2 and outputs["gpu_product"] == "Tesla-V100-SXM2-32GB"
        assert outputs["kind"] == "kubernetes" and outputs["version"] == OUTPUTS_VERSION
        assert [s["name"] for s in outputs["steps"]] == ["make-hdf5", "inception-moments", "train"]
        assert outputs["steps"][2]["job"] == "openshift-pipeline-train-0a1b2c3d"
        assert outputs["steps"][2]["uid"] == "uid-openshift-pipeline-train"
        assert outputs["telemetry"] == {"pvc": "openshift-results-0a1b2c3d", "path": "telemetry/"}
        assert outputs["logs"] == {"pvc": "openshift-logs-0a1b2c3d", "path": "logs/"}

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_network_policy_denies_ingress_and_lets_the_router_reach_only_the_monitors_login(mocks):
    env = environment(example_settings())

    def check(_: dict[str, Any]) -> None:
        deny = mocks.named("openshift-deny-ingress")
        assert deny.inputs["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}  # no rule: nothing in
        monitor = mocks.named("openshift-monitor-ingress")
        proxy_rule, monitor_rule = monitor.inputs["spec"]["ingress"]
        router = {"namespaceSelector": {"matchLabels": {"policy-group.network.openshift.io/ingress": ""}}}
        host_network = {"namespaceSelector": {"matchLabels": {"policy-group.network.openshift.io/host-network": ""}}}
        # The login proxy from the router (host-network routers too), the monitor's own plain
        # port only from host network (the API server's service proxy, the kubelet's probes).
        assert proxy_rule == {"ports": [{"protocol": "TCP", "port": 8443}], "from": [router, host_network]}
        assert monitor_rule == {"ports": [{"protocol": "TCP", "port": 8080}], "from": [host_network]}
        service_ports = {p["targetPort"] for p in mocks.named("openshift-monitor-service").inputs["spec"]["ports"]}
        container_ports = {
            p["name"]: p["containerPort"]
            for c in mocks.named("openshift-monitor-deployment").inputs["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        assert {container_ports[name] for name in service_ports} == {8080, 8443}
        # The policy selects the monitor's pods, and only them.
        deployment = mocks.named("openshift-monitor-deployment")
        pod_labels = deployment.inputs["spec"]["template"]["metadata"]["labels"]
        selector = monitor.inputs["spec"]["podSelector"]["matchLabels"]
        assert selector.items() <= pod_labels.items()
        for job in mocks.of_kind("Job"):
            assert not selector.items() <= job.inputs["spec"]["template"]["metadata"]["labels"].items(), job.name
        # In force before any pod is created.
        for job in mocks.of_kind("Job"):
            assert deny.urn in mocks.depends_on(job.name), job.name

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_quota_pvcs_and_service_account(mocks):
    env = environment(example_settings())

    def check(_: Any) -> None:
        quota = mocks.named("openshift-quota").inputs["spec"]["hard"]
        assert quota["requests.nvidia.com/gpu"] == "4"
        assert quota["requests.storage"] == "800Gi"
        assert quota["persistentvolumeclaims"] == "4"
        data = mocks.named("openshift-data").inputs["spec"]
        assert data["accessModes"] == ["ReadWriteMany"]
        assert data["storageClassName"] == "ocs-storagecluster-cephfs"
        assert data["resources"]["requests"]["storage"] == "400Gi"
        assert mocks.named("openshift-results").inputs["spec"]["resources"]["requests"]["storage"] == "100Gi"
        assert mocks.named("openshift-logs").inputs["spec"]["resources"]["requests"]["storage"] == "10Gi"
        account = mocks.named("openshift-jobs")
        assert account.inputs["automountServiceAccountToken"] is False
        for job in mocks.of_kind("Job"):
            pod = job.inputs["spec"]["template"]["spec"]
            assert pod["serviceAccountName"] == "openshift-jobs-0a1b2c3d"
            # Created after the quota and the LimitRange, so their defaults and limits apply.
            assert {mocks.urn_of("openshift-quota"), mocks.urn_of("openshift-limits")} <= mocks.depends_on(job.name)

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_jobs_pull_the_built_image_which_is_awaited(mocks):
    env = environment(example_settings())

    def check(outputs: dict[str, Any]) -> None:
        stream = mocks.named("openshift-image-stream")
        build = mocks.named("openshift-image-build")
        name = stream.inputs["metadata"]["name"]
        tag = build.inputs["spec"]["output"]["to"]["name"].split(":")[1]
        assert build.inputs["spec"]["output"]["to"] == {"kind": "ImageStreamTag", "name": f"{name}:{tag}"}
        assert stream.inputs["metadata"]["annotations"]["pulumi.com/waitFor"].startswith("jsonpath=")
        # The BuildConfig must not wait for the ImageStream, whose await ends after the build.
        assert stream.urn not in build.dependencies
        assert build.delete_before_replace and build.replace_on_changes == ["spec"]
        pull_spec = f"image-registry.openshift-image-registry.svc:5000/atlas-biggan/{name}:{tag}"
        assert outputs["image"] == pull_spec
        for job in mocks.of_kind("Job"):
            containers = job.inputs["spec"]["template"]["spec"]["containers"]
            if not job.name.endswith("inception-weights") and not job.name.endswith("imagenet-train"):
                assert containers[0]["image"] == pull_spec, job.name
            assert stream.urn in mocks.depends_on(job.name), job.name

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_pipeline_runs_after_staging_in_order_and_replaces_cleanly(mocks):
    env = environment(example_settings())

    def check(_: Any) -> None:
        volumes = mocks.named("openshift-staging-volumes")
        staging = [mocks.named("openshift-staging-imagenet-train"), mocks.named("openshift-staging-inception-weights")]
        first, second, train = (
            mocks.named(f"openshift-pipeline-{s}") for s in ("make-hdf5", "inception-moments", "train")
        )
        # Each awaited Job is followed by its completion, which the next Job waits for.
        done = {r.name: r for r in mocks.registered if r.typ == "pulumi-python:dynamic/openshift:JobCompletion"}
        assert sorted(done) == sorted(
            f"{j.name}-done" for j in [volumes, *staging, first, second]
        ), "training is not awaited"
        for job in [volumes, *staging, first, second]:
            completion = done[f"{job.name}-done"]
            assert job.urn in completion.dependencies, job.name
            assert completion.inputs["job_urn"] == job.urn
        for job in staging:
            assert done["openshift-staging-volumes-done"].urn in job.dependencies
        assert {done[f"{j.name}-done"].urn for j in [volumes, *staging]} <= set(first.dependencies)
        assert done["openshift-pipeline-make-hdf5-done"].urn in second.dependencies
        assert done["openshift-pipeline-inception-moments-done"].urn in train.dependencies
        for job in [volumes, *staging, first, second, train]:
            assert job.delete_before_replace, job.name
            # pulumi-kubernetes awaits none of them: Atlas does, for as long as the step may run.
            assert job.inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}, job.name
            assert job.create_timeout == "", job.name
        assert done["openshift-pipeline-make-hdf5-done"].inputs["timeout_s"] == 24 * 3600 + 600
        assert done["openshift-pipeline-inception-moments-done"].inputs["timeout_s"] == 12 * 3600 + 600
        assert done["openshift-pipeline-make-hdf5-done"].inputs["step"] == "make-hdf5"
        assert done["openshift-staging-volumes-done"].inputs["step"] == "prepare-volumes"
        # The claims are not awaited either: the first pod waits for them, and its completion
        # reports a claim that never binds.
        for role in ("data", "results", "logs"):
            claim = mocks.named(f"openshift-{role}")
            assert claim.inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
            assert claim.urn in mocks.depends_on("openshift-staging-volumes")
        # The completions reach the cluster as the provider does.
        provider = mocks.named("openshift-provider")
        for completion in done.values():
            assert completion.inputs.get("kubeconfig") == provider.inputs.get("kubeconfig")
        pod = train.inputs["spec"]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}
        assert train.inputs["spec"]["activeDeadlineSeconds"] == 24 * 3600
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"].endswith("-0a1b2c3d")

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_changing_training_arguments_changes_only_the_training_job(mocks):
    original = biggan()
    train = original.step("train")
    seed = train.args.index("--seed")
    changed_train = dataclasses.replace(train, args=(*train.args[: seed + 1], "1", *train.args[seed + 2 :]))
    changed = dataclasses.replace(original, steps=(*original.steps[:-1], changed_train))
    first = environment(example_settings(), original, name="a")
    second = environment(example_settings(), changed, name="b")

    def check(_: Any) -> None:
        def inputs_by_role(prefix: str) -> dict[str, str]:
            # The same object in both programs, with the program's name prefix taken out (of
            # names, and of the URNs and mock uids a completion names its Job by).
            return {
                r.name.removeprefix(prefix): repr(r.inputs)
                .replace(f"'{prefix}", "'")
                .replace(f"::{prefix}", "::")
                .replace(f"'uid-{prefix}", "'uid-")
                for r in mocks.registered
                if r.name.startswith(prefix)
            }

        a, b = inputs_by_role("a-"), inputs_by_role("b-")
        assert a.keys() == b.keys()
        assert [role for role in a if a[role] != b[role]] == ["pipeline-train"]
        assert "pipeline-train-done" not in a

    return pulumi.Output.all(resolved(first), resolved(second)).apply(check)


@pulumi.runtime.test
def test_plain_kubernetes_uses_a_namespace_no_ingress_without_a_host_and_the_prebuilt_image(mocks):
    settings = parse_openshift_settings(local_raw(), KEY)
    env = environment(settings, stack="local")

    def check(outputs: dict[str, Any]) -> None:
        kinds = {r.kind for r in mocks.registered if r.kind}
        assert "Namespace" in kinds
        # No host: no Ingress, which would publish the monitor; the API server's service proxy reaches it.
        assert not kinds & {"ProjectRequest", "ImageStream", "BuildConfig", "Route", "Ingress"}
        for job in mocks.of_kind("Job"):
            assert job.inputs["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/atlas/biggan:dev"
        for name in ("openshift-monitor-deployment", "openshift-monitor-service"):
            assert mocks.named(name).inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
        assert outputs["monitor_url"] == "http://openshift-monitor-service-0a1b2c3d.atlas-biggan.svc/"
        # No router to name: the monitor's one port is open (the API server's proxy comes from the
        # control plane's own network); everything else is still denied.
        (rule,) = mocks.named("openshift-monitor-ingress").inputs["spec"]["ingress"]
        assert rule == {"ports": [{"protocol": "TCP", "port": 8080}]}
        assert mocks.named("openshift-deny-ingress").inputs["spec"]["podSelector"] == {}
        assert outputs["image"] == "registry.local/atlas/biggan:dev"

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_existing_project_and_admin_owned_quota_create_neither(mocks):
    raw = modified(example_raw(), lambda r: (r["project"].update(create=False), r["quota"].update(manage=False)))
    env = environment(parse_openshift_settings(raw, KEY))

    def check(_: Any) -> None:
        kinds = {r.kind for r in mocks.registered if r.kind}
        assert not kinds & {"ProjectRequest", "Namespace", "ResourceQuota", "LimitRange"}
        assert "Job" in kinds

    return resolved(env).apply(check)


def test_bad_settings_fail_before_any_resource_is_registered(mocks):
    settings = parse_openshift_settings(modified(example_raw(), lambda r: r["quota"].update(gpus=1)), KEY)
    with pytest.raises(OpenShiftSettingsError, match=rf"^{KEY}\.quota\.gpus: "):
        environment(settings)
    assert mocks.registered == []


@pulumi.runtime.test
def test_plain_kubernetes_with_a_monitor_host_gets_an_ingress(mocks):
    raw = modified(local_raw(), lambda r: r["monitor"].update(host="monitor.example.org"))
    env = environment(parse_openshift_settings(raw, KEY), stack="local")

    def check(outputs: dict[str, Any]) -> None:
        (ingress,) = mocks.of_kind("Ingress")
        assert ingress.inputs["spec"]["rules"][0]["host"] == "monitor.example.org"
        assert outputs["monitor_url"] == "http://monitor.example.org/"

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_placement_reaches_every_pod(mocks):
    raw = modified(local_raw(), lambda r: r.update(placement={
        "node_selector": {"atlas.dev/node-kind": "kubelet"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }))
    env = environment(parse_openshift_settings(raw, KEY), stack="local")

    def check(outputs: dict[str, Any]) -> None:
        specs = [j.inputs["spec"]["template"]["spec"] for j in mocks.of_kind("Job")]
        specs += [d.inputs["spec"]["template"]["spec"] for d in mocks.of_kind("Deployment")]
        assert len(specs) >= 4
        for spec in specs:
            assert spec["nodeSelector"]["atlas.dev/node-kind"] == "kubelet"
            assert spec["tolerations"].count(
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}) == 1
        gpu_steps = [s for s in specs if "nvidia.com/gpu" in s["containers"][0]["resources"].get("limits", {})]
        assert gpu_steps and all("nvidia.com/gpu.product" in s["nodeSelector"] for s in gpu_steps)
        # The outputs record where the GPU steps may run, as their Jobs say (the monitor's estimate
        # counts only those nodes before the Jobs exist).
        for spec in gpu_steps:
            placed = {"node_selector": spec["nodeSelector"], "tolerations": spec["tolerations"]}
            assert outputs["gpu_placement"] == placed

    return resolved(env).apply(check)


def step_jobs(mocks: RecordingMonitor) -> list[Any]:
    return [j for j in mocks.of_kind("Job") if j.inputs["metadata"]["labels"]["app.kubernetes.io/component"] == "step"]


@pulumi.runtime.test
def test_a_runtime_image_workload_carries_its_code_in_one_configmap_every_step_mounts(mocks):
    from infra.hpc.components import workload_source_files
    from infra.workload.load import load_workload

    repo = Path(__file__).resolve().parents[2]
    workload = load_workload(repo / "workloads" / "wordfreq" / "workload.yaml")
    assert workload.runs_in_runtime_image
    files = workload_source_files(workload, repo)
    # The example's shared memory is sized for BigGAN's steps; this workload's are small.
    # (and its data sources fill BigGAN's inputs; this workload reads none).
    def for_wordfreq(raw: dict[str, Any]) -> None:
        raw["pipeline"].pop("shm_size")
        raw.pop("data", None)

    settings = parse_openshift_settings(modified(example_raw(), for_wordfreq), KEY)
    env = OpenShiftEnvironment(
        "openshift",
        OpenShiftEnvironmentArgs(
            target=target_for(settings), stack="unit", workload=workload.name, definition=workload,
            settings=settings, run_id="run-7", source_files=files,
        ),
    )

    def check(_: dict[str, Any]) -> None:
        import base64

        source = mocks.named("openshift-source")
        assert source.typ == "kubernetes:core/v1:ConfigMap" and source.inputs["immutable"] is True
        data = {k: base64.b64decode(v) for k, v in source.inputs["binaryData"].items()}
        # The runtime image is built from Atlas's repository by the BuildConfig, like any image.
        build = mocks.named("openshift-image-build")
        assert build.inputs["spec"]["strategy"]["dockerStrategy"]["dockerfilePath"] == "workloads/runtime/Containerfile"
        steps = step_jobs(mocks)
        assert len(steps) == len(workload.steps)
        for job in steps:
            pod = job.inputs["spec"]["template"]["spec"]
            (volume,) = [v for v in pod["volumes"] if v["name"] == "source"]
            assert {i["path"]: data[i["key"]] for i in volume["configMap"]["items"]} == {
                f.path: f.source.read_bytes() for f in files
            }
            modes = {i["path"]: i["mode"] for i in volume["configMap"]["items"]}
            assert modes["steps/count.sh"] == 0o755 and modes["corpus/batch.txt"] == 0o644
            container = pod["containers"][0]
            assert {"name": "ATLAS_SOURCE_DIR", "value": "/opt/atlas/source"} in container["env"]
            assert {"name": "source", "mountPath": "/opt/atlas/source", "readOnly": True} in container["volumeMounts"]
            assert source.urn in mocks.depends_on(job.name), job.name

    return resolved(env).apply(check)


@pulumi.runtime.test
def test_a_workload_with_its_own_image_has_no_source_configmap(mocks):
    env = environment(example_settings())

    def check(_: dict[str, Any]) -> None:
        assert not any(r.typ == "kubernetes:core/v1:ConfigMap" and r.name.endswith("-source") for r in mocks.registered)
        steps = step_jobs(mocks)
        assert steps
        for job in steps:
            assert all(v["name"] != "source" for v in job.inputs["spec"]["template"]["spec"]["volumes"])

    return resolved(env).apply(check)
