"""infra/openshift/manifests/: the objects rendered from the workload and the settings (pure)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest

from infra.openshift.manifests import step_jobs
from infra.openshift.manifests.image_build import build_config, image_stream, image_tag, internal_pull_spec
from infra.openshift.manifests.labels import RunIdentity, check_label_value
from infra.openshift.manifests.monitor import (
    COOKIE_SECRET_PROGRAM,
    OAUTH_REDIRECT_ANNOTATION,
    PROXY_COOKIE_SECRET,
    SERVICE_ACCOUNT_DIR,
    monitor_deployment,
    monitor_ingress,
    monitor_names,
    monitor_route,
    monitor_service,
    monitor_service_account,
)
from infra.openshift.manifests.pods import PodContext
from infra.openshift.manifests.project import limit_range_spec, pvc_spec, quota_hard
from infra.openshift.manifests.staging_jobs import prepare_volumes_job, staging_job
from infra.openshift.manifests.step_jobs import is_awaited
from infra.openshift.manifests.volumes import Claims, step_mounts
from infra.openshift.settings_parser import parse_openshift_settings
from infra.workload.model import Sweep, SweepMetric, Workload
from infra.workload.render import hpc_command_line, render_step, render_steps
from tests.unit.openshift_fixtures import KEY, biggan, example_raw, example_settings, local_raw, modified

IDENTITY = RunIdentity(stack="openshift-gpu", run_id="run-7", workload="biggan")


def context(openshift: bool = True) -> PodContext:
    return PodContext(
        identity=IDENTITY,
        namespace="atlas-biggan",
        image="registry/ns/biggan:tag",
        service_account="jobs-sa",
        claims=Claims(data="data-pvc", results="results-pvc", logs="logs-pvc"),
        workdir="/opt/biggan",
        openshift=openshift,
    )


def step_job(name: str, workload: Workload | None = None) -> dict[str, Any]:
    workload = workload or biggan()
    return step_jobs.step_job(render_step(workload, name, "openshift"), workload, example_settings(), context())


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def test_training_job_asks_for_its_gpus_on_the_configured_product_and_tolerates_the_taint():
    pod = pod_of(step_job("train"))
    (container,) = pod["containers"]
    assert container["resources"]["requests"] == {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "2"}
    assert container["resources"]["limits"] == container["resources"]["requests"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # The device plugin chooses the devices: the Job must not override its variable.
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in container["env"]}


def test_runs_as_non_root_without_a_fixed_uid():
    pod = pod_of(step_job("train"))
    assert pod["securityContext"]["runAsNonRoot"] is True
    text = repr(pod)
    for fixed in ("runAsUser", "runAsGroup", "fsGroup"):
        assert fixed not in text
    assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["serviceAccountName"] == "jobs-sa"
    assert pod["automountServiceAccountToken"] is False


def test_shared_memory_is_memory_backed_and_sized():
    pod = pod_of(step_job("train"))
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
    # Without pipeline.shm_size: a quarter of the step's memory (32Gi for make-hdf5's 64Gi... capped at 16Gi).
    settings = parse_openshift_settings(modified(example_raw(), lambda r: r["pipeline"].pop("shm_size")), KEY)
    workload = biggan()
    job = step_jobs.step_job(render_step(workload, "inception-moments", "openshift"), workload, settings, context())
    (shm,) = [v for v in pod_of(job)["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"]["sizeLimit"] == "8Gi"


def test_deadline_backoff_and_no_ttl():
    job = step_job("make-hdf5")
    assert job["spec"]["activeDeadlineSeconds"] == 24 * 3600
    assert job["spec"]["backoffLimit"] == 0
    assert "ttlSecondsAfterFinished" not in job["spec"]
    assert pod_of(job)["restartPolicy"] == "Never"


def test_the_command_is_the_hpc_sides_wrapped_by_the_sampler():
    workload = biggan()
    for step in render_steps(workload, "openshift"):
        (container,) = pod_of(step_job(step.name))["containers"]
        args = container["args"]
        separator = args.index("--")
        assert args[:separator] == [
            "python3",
            "-m",
            "infra.telemetry.sampler",
            "--out",
            f"telemetry/{step.name}.jsonl",
            "--interval",
            "5",
            "--step",
            step.name,
        ]
        # Identical to what the Satori job script runs (the satori overrides only add env).
        assert args[separator + 1 :] == shlex.split(hpc_command_line(render_step(workload, step.name, "satori")))
        assert "command" not in container  # the image's entrypoint runs first
        assert container["workingDir"] == "/opt/biggan"


def test_labels_tie_job_and_pods_to_stack_run_and_step():
    job = step_job("inception-moments")
    expected = {
        "app.kubernetes.io/managed-by": "atlas",
        "atlas.dev/stack": "openshift-gpu",
        "atlas.dev/run": "run-7",
        "atlas.dev/step": "inception-moments",
        "atlas.dev/workload": "biggan",
    }
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert expected.items() <= labels.items()


def test_atlas_awaits_the_preparation_steps_and_pulumi_kubernetes_awaits_no_job():
    settings = example_settings()
    steps = render_steps(biggan(), "openshift")
    assert [is_awaited(i, steps, settings) for i in range(len(steps))] == [True, True, False]
    awaited_last = dataclasses.replace(settings, pipeline=dataclasses.replace(settings.pipeline, await_last_step=True))
    assert [is_awaited(i, steps, awaited_last) for i in range(len(steps))] == [True, True, True]
    for step in ("make-hdf5", "train"):
        assert step_job(step)["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    prepare = prepare_volumes_job(biggan(), context())
    assert prepare["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


def test_volume_layout_mirrors_the_working_directory():
    mounts = {(m.role, m.sub_path) for m in step_mounts(biggan())}
    assert mounts == {
        ("data", "data"),  # ImageNet train (staged) and the HDF5 file and moments beside it
        ("data", ".cache"),  # the staged Inception weights
        ("results", "weights"),
        ("results", "telemetry"),
        ("logs", "logs"),
    }
    (container,) = pod_of(step_job("train"))["containers"]
    assert {"name": "data", "mountPath": "/opt/biggan/data", "subPath": "data"} in container["volumeMounts"]
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod_of(step_job("train"))["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {"data-pvc", "results-pvc", "logs-pvc"}


def test_changing_training_arguments_changes_only_the_training_job():
    original = biggan()
    steps = list(original.steps)
    train = original.step("train")
    seed = train.args.index("--seed")
    steps[-1] = dataclasses.replace(train, args=(*train.args[: seed + 1], "1", *train.args[seed + 2 :]))
    changed = dataclasses.replace(original, steps=tuple(steps))
    assert step_job("make-hdf5", changed) == step_job("make-hdf5", original)
    assert step_job("inception-moments", changed) == step_job("inception-moments", original)
    assert step_job("train", changed)["spec"]["template"] != step_job("train", original)["spec"]["template"]


def test_image_tag_follows_what_goes_into_the_image():
    settings = example_settings()
    assert settings.image.build is not None
    tag = image_tag(biggan(), settings.image.build)
    assert tag == image_tag(biggan(), settings.image.build)
    other = parse_openshift_settings(modified(example_raw(), lambda r: r["image"]["build"].update(git_ref="v2")), KEY)
    assert other.image.build is not None
    assert image_tag(biggan(), other.image.build) != tag
    assert internal_pull_spec("ns", "biggan-x", tag) == (
        f"image-registry.openshift-image-registry.svc:5000/ns/biggan-x:{tag}"
    )


def test_build_config_builds_this_repository_with_the_workloads_containerfile():
    settings = example_settings()
    assert settings.image.build is not None
    workload = biggan()
    bc = build_config(workload, settings.image.build, {"a": "b"}, "ns", "biggan-x:t")
    spec = bc["spec"]
    assert spec["source"] == {"type": "Git", "git": {"uri": "https://github.com/example/atlas.git", "ref": "main"}}
    assert spec["strategy"]["type"] == "Docker"
    assert spec["strategy"]["dockerStrategy"]["dockerfilePath"] == "workloads/biggan/Containerfile"
    args = {a["name"]: a["value"] for a in spec["strategy"]["dockerStrategy"]["buildArgs"]}
    assert args["COMMIT"] == "8a6984cfabd1792cd186598372ae6fa6b499ea37"
    assert args["BASE_IMAGE"] == "quay.io/example/pytorch-ppc64le:2.5.1-cuda12.4"
    assert spec["output"] == {"to": {"kind": "ImageStreamTag", "name": "biggan-x:t"}}
    assert spec["triggers"] == [{"type": "ConfigChange"}]
    # A context directory below the root: the Containerfile path becomes relative to it.
    sub = dataclasses.replace(workload, build=dataclasses.replace(workload.build, context="workloads"))
    sub_spec = build_config(sub, settings.image.build, {}, "ns", "x:t")["spec"]
    assert sub_spec["source"]["contextDir"] == "workloads"
    assert sub_spec["strategy"]["dockerStrategy"]["dockerfilePath"] == "biggan/Containerfile"


def test_image_stream_is_not_awaited_on_its_tag():
    # A failed build never writes the tag: `pulumi up` waits on the Build (build_completion.py).
    stream = image_stream({"a": "b"}, "ns", "biggan-x")
    assert stream["metadata"] == {"labels": {"a": "b"}, "name": "biggan-x", "namespace": "ns"}


def test_staging_from_a_claim_an_url_and_s3():
    workload = biggan()
    settings = example_settings()
    pvc, https = settings.data.sources
    job = staging_job(pvc, workload, settings, context(), "scripts-cm")
    (container,) = pod_of(job)["containers"]
    assert container["command"] == [
        "python3",
        "/atlas/scripts/stage_data.py",
        "--source",
        "/atlas/source/ILSVRC2012/train",
        "--dest",
        "/atlas/data/data/ImageNet/train",
    ]
    source_volume = next(v for v in pod_of(job)["volumes"] if v["name"] == "source")
    assert source_volume["persistentVolumeClaim"] == {"claimName": "imagenet-ilsvrc2012", "readOnly": True}
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]
    assert "nodeSelector" not in pod_of(job) and "tolerations" not in pod_of(job)

    job = staging_job(https, workload, settings, context(), "scripts-cm")
    (container,) = pod_of(job)["containers"]
    assert container["command"][3:] == [https.url, "--dest", "/atlas/data/.cache/torch/hub/checkpoints"]

    s3_raw = modified(
        example_raw(),
        lambda r: r["data"].update(
            sources={"imagenet-train": "s3://datasets/imagenet/train/"},
            s3={"endpoint": "https://s3.example.org", "credentials_secret": "s3-creds"},
        ),
    )
    s3_settings = parse_openshift_settings(s3_raw, KEY)
    (s3,) = s3_settings.data.sources
    job = staging_job(s3, workload, s3_settings, context(), "")
    (container,) = pod_of(job)["containers"]
    assert container["image"] == "docker.io/amazon/aws-cli:2.15.0"
    assert container["command"] == [
        "aws",
        "s3",
        "sync",
        "s3://datasets/imagenet/train/",
        "/atlas/data/data/ImageNet/train/",
        "--only-show-errors",
        "--endpoint-url",
        "https://s3.example.org",
    ]
    assert container["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert "runAsUser" not in repr(pod_of(job))  # OpenShift assigns it
    plain = staging_job(s3, workload, s3_settings, context(openshift=False), "")
    assert pod_of(plain)["securityContext"]["runAsUser"] == 1001


def test_prepare_volumes_creates_every_subpath_the_steps_mount():
    job = prepare_volumes_job(biggan(), context())
    (container,) = pod_of(job)["containers"]
    script = container["command"][2]
    for path in (
        "/atlas/data/data",
        "/atlas/data/.cache",
        "/atlas/results/weights",
        "/atlas/results/telemetry",
        "/atlas/logs/logs",
    ):
        assert path in script
    assert "chmod g+rwx" in script


def test_quota_and_limit_range_are_sized_from_the_workload():
    settings = example_settings()
    steps = render_steps(biggan(), "openshift")
    from infra.openshift.settings import required_quota

    hard = quota_hard(settings, required_quota(steps, settings))
    assert hard == {
        "requests.nvidia.com/gpu": "4",  # configured
        # Sized from the workload: the largest step, plus the monitor and its login proxy.
        "requests.cpu": "16150m",  # 16 + 100m + 50m
        "requests.memory": "131264Mi",  # 128Gi + 128Mi + 64Mi
        "requests.storage": "800Gi",  # configured: the staged-from claim counts too
        "persistentvolumeclaims": "4",
    }
    limits = limit_range_spec(steps, settings)["limits"]
    assert limits[0]["max"] == {"cpu": "16", "memory": "128Gi"}
    assert limits[1] == {"type": "PersistentVolumeClaim", "max": {"storage": "400Gi"}}


def test_pvcs_take_size_class_and_access_mode_from_settings():
    settings = parse_openshift_settings(local_raw(), KEY)
    assert pvc_spec(settings.storage.data) == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "300Gi"}},
        "volumeMode": "Filesystem",
        "storageClassName": "atlas-local",
    }


def test_monitor_reads_the_volumes_read_only():
    settings = example_settings()
    deployment = monitor_deployment(biggan(), settings, context(), "app-cm", "atlas-biggan")
    pod = deployment["spec"]["template"]["spec"]
    container, _proxy = pod["containers"]
    claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert container["volumeMounts"] and claims  # what `all` runs over below is there
    assert all(m.get("readOnly") for m in container["volumeMounts"])
    assert all(v["persistentVolumeClaim"].get("readOnly") for v in claims)
    assert container["command"][container["command"].index("--telemetry-dir") + 1] == "/atlas/results/telemetry"
    assert container["command"][container["command"].index("--logs-dir") + 1] == "/atlas/logs/logs"
    assert (
        deployment["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    # Awaited on a real cluster, for minutes rather than pulumi-kubernetes' ten; ready checked
    # every 2 s (at 10 s, up waited up to 10 s more for a server already listening).
    assert deployment["metadata"]["annotations"] == {"pulumi.com/timeoutSeconds": "180"}
    assert container["readinessProbe"]["periodSeconds"] == 2 and container["livenessProbe"]["periodSeconds"] == 10
    # The Service is never awaited: the Deployment's await already covers its pod's readiness.
    service = monitor_service(settings, context())
    assert service["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


def test_the_monitor_serves_the_results_pvc_only_for_a_sweep_ranked_by_a_file():
    settings = example_settings()
    workload = biggan()

    def command_and_claims(w):
        pod = monitor_deployment(w, settings, context(), "app-cm", "atlas-biggan")["spec"]["template"]["spec"]
        claims = sorted(v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v)
        return pod["containers"][0]["command"], claims

    plain_command, plain_claims = command_and_claims(workload)
    assert "--results-dir" not in plain_command
    by_log = replace(workload.steps[-1], sweep=Sweep(kind="grid", names=("G_lr",), axes=(("G_lr", (1.0, 2.0)),),
                                                    metric=SweepMetric("min", pattern=r"loss ([0-9.]+)"),
                                                    results="results/train"))
    assert command_and_claims(replace(workload, steps=(*workload.steps[:-1], by_log))) == (plain_command, plain_claims)
    by_file = replace(by_log, sweep=replace(by_log.sweep, metric=SweepMetric("min", file="score.txt")))
    command, claims = command_and_claims(replace(workload, steps=(*workload.steps[:-1], by_file)))
    assert command[command.index("--results-dir") + 1] == "/atlas/results" and "results" in claims


@pytest.mark.parametrize("make", [monitor_service, monitor_deployment])
def test_monitor_skips_awaits_kwok_cannot_satisfy(make):
    settings = parse_openshift_settings(local_raw(), KEY)
    rendered = (
        make(settings, context(False))
        if make is monitor_service
        else make(biggan(), settings, context(False), "cm", "atlas-biggan")
    )
    assert rendered["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    ingress = monitor_ingress(settings, context(False), "svc")
    assert ingress["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}


def test_on_openshift_the_route_reencrypts_to_the_login_proxy_not_to_the_monitor():
    route = monitor_route(example_settings(), context(), "monitor-svc")
    assert route["spec"]["to"] == {"kind": "Service", "name": "monitor-svc", "weight": 100}
    assert route["spec"]["tls"] == {"termination": "reencrypt", "insecureEdgeTerminationPolicy": "Redirect"}
    assert route["spec"]["port"] == {"targetPort": "https"}
    service = monitor_service(example_settings(), context())
    https = next(p for p in service["spec"]["ports"] if p["name"] == "https")
    assert https == {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
    deployment = monitor_deployment(biggan(), example_settings(), context(), "cm", "atlas-biggan")
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert [p["containerPort"] for p in containers["oauth-proxy"]["ports"] if p["name"] == "https"] == [8443]
    assert "--upstream=http://localhost:8080" in containers["oauth-proxy"]["args"]


def test_the_login_proxy_lets_in_only_who_may_read_the_projects_services():
    settings = example_settings()
    deployment = monitor_deployment(biggan(), settings, context(), "cm", "atlas-biggan")
    pod = deployment["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    proxy = containers["oauth-proxy"]
    flags = dict(a.partition("=")[::2] for a in proxy["args"])
    assert flags["--provider"] == "openshift"
    assert json.loads(flags["--openshift-sar"]) == {"namespace": "atlas-biggan", "resource": "services", "verb": "get"}
    names = monitor_names(IDENTITY)
    # The ServiceAccount is the OAuth client, and its annotation returns logins to the Route.
    assert flags["--openshift-service-account"] == names.service_account == pod["serviceAccountName"]
    account = monitor_service_account(context())
    assert account["metadata"]["name"] == names.service_account
    redirect = json.loads(account["metadata"]["annotations"][OAUTH_REDIRECT_ANNOTATION])
    route = monitor_route(settings, context(), "svc")
    assert redirect["reference"] == {"kind": "Route", "name": route["metadata"]["name"]}
    # The Route's host, <route>-<namespace>.<domain>, must fit one 63-character DNS label.
    long_identity = RunIdentity(stack="s" * 80, run_id="r", workload="w" * 80)
    assert len(monitor_names(long_identity).route) + 1 + len("atlas-biggan") <= 63
    # TLS from the certificate the Service's annotation asks OpenShift's service CA for.
    service = monitor_service(settings, context())
    secret = service["metadata"]["annotations"]["service.beta.openshift.io/serving-cert-secret-name"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["oauth-tls"]["secret"] == {"secretName": secret}
    assert flags["--tls-cert"].startswith("/etc/tls/private/") and flags["--http-address"] == ""
    # Only the proxy holds the ServiceAccount's token; the monitor, which serves files, has none.
    assert pod["automountServiceAccountToken"] is False
    token_mounts = {
        name: [m["mountPath"] for m in spec["volumeMounts"] if m["name"] == "oauth-client"]
        for name, spec in containers.items()
    }
    assert token_mounts == {"monitor": [], "oauth-proxy": [SERVICE_ACCOUNT_DIR]}
    sources = volumes["oauth-client"]["projected"]["sources"]
    assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}} in sources
    # The cookie key lives in memory, written by the init container, never in a Secret or the state.
    assert volumes["oauth-session"]["emptyDir"]["medium"] == "Memory"
    (init,) = pod["initContainers"]
    assert init["command"][:2] == ["python3", "-c"]


def test_the_cookie_secret_program_writes_a_32_byte_key_only_its_owner_reads(tmp_path):
    path = tmp_path / "cookie-secret"
    program = COOKIE_SECRET_PROGRAM.replace(repr(PROXY_COOKIE_SECRET), repr(str(path)))
    assert program != COOKIE_SECRET_PROGRAM
    subprocess.run([sys.executable, "-c", program], check=True)
    key = path.read_text()
    assert len(key) == 32 and int(key, 16) >= 0
    assert path.stat().st_mode & 0o777 == 0o600
    # Never overwritten: a restarted init container fails rather than change a live key.
    assert subprocess.run([sys.executable, "-c", program], capture_output=True).returncode != 0


def test_plain_kubernetes_has_no_login_proxy():
    settings = parse_openshift_settings(local_raw(), KEY)
    deployment = monitor_deployment(biggan(), settings, context(False), "cm", "atlas-biggan")
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["monitor"] and "initContainers" not in pod
    assert [p["name"] for p in monitor_service(settings, context(False))["spec"]["ports"]] == ["http"]


def test_label_values_are_checked():
    assert check_label_value("run-2026-12-02", "run_id") == "run-2026-12-02"
    with pytest.raises(ValueError, match="run_id: 'run 1' cannot be a label value"):
        check_label_value("run 1", "run_id")


def test_limit_range_max_never_falls_below_its_defaults():
    settings = parse_openshift_settings(local_raw(), KEY)
    workload = biggan()
    tiny = [
        dataclasses.replace(s, resources=dataclasses.replace(s.resources, memory="256Mi", memory_bytes=256 << 20))
        for s in render_steps(workload, "openshift")
    ]
    limits = limit_range_spec(tiny, settings)["limits"][0]
    assert limits["default"]["memory"] == "1Gi"
    # Nor below the staging pods' limits (the volumes' preparation runs in every run): with a
    # pre-built image nothing else lifts it above the tiny steps, and the API refused those pods.
    job = prepare_volumes_job(workload, context())
    (container,) = pod_of(job)["containers"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    assert limits["max"]["memory"] == "2Gi"  # the CPU bound is the steps' 16


def test_the_quota_makes_room_for_the_volumes_preparation_without_a_build_or_a_source():
    from infra.openshift.settings import required_quota

    raw = modified(local_raw(), lambda r: r.pop("data"))
    settings = parse_openshift_settings(raw, KEY)  # a pre-built image, no data sources
    assert settings.image.build is None and not settings.data.sources
    tiny = [
        dataclasses.replace(s, resources=dataclasses.replace(s.resources, cpus_per_task=1, memory="128Mi",
                                                             memory_bytes=128 << 20))
        for s in render_steps(biggan(), "openshift")
    ]
    needed = required_quota(tiny, settings)
    (container,) = pod_of(prepare_volumes_job(biggan(), context()))["containers"]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    # The preparation pod's requests, beside the monitor's (100m, 128Mi), which runs throughout.
    assert needed.cpu_millis >= 1000 + 100 and needed.memory_bytes >= (2 << 30) + (128 << 20)
