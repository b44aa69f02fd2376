"""infra/openshift/settings_parser.py: parsing, defaults, and errors that name the key and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import AtlasConfigError
from infra.openshift.settings import OpenShiftSettingsError, required_quota
from infra.openshift.settings_parser import check_workload_fits, parse_openshift_settings
from infra.workload.render import render_steps
from tests.unit.openshift_fixtures import KEY, biggan, example_raw, example_settings, local_raw, modified


def parse(raw: dict[str, Any]) -> Any:
    return parse_openshift_settings(raw, KEY)


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises(OpenShiftSettingsError) as caught:
        parse(raw)
    return str(caught.value)


def test_the_example_parses_with_its_placeholders_filled():
    settings = example_settings()
    assert settings.is_openshift
    assert settings.gpu.product == "Tesla-V100-SXM2-32GB"
    assert settings.image.build is not None and settings.image.reference is None
    assert settings.image.build.git_uri == "https://github.com/example/atlas.git"
    assert settings.storage.data.size.text == "400Gi"
    assert settings.storage.data.storage_class == "ocs-storagecluster-cephfs"
    assert settings.storage.data.access_mode == "ReadWriteMany"
    assert [(s.input, s.scheme) for s in settings.data.sources] == [
        ("imagenet-train", "pvc"),
        ("inception-weights", "https"),
    ]
    assert settings.data.sources[0].claim == "imagenet-ilsvrc2012"
    assert settings.data.sources[0].path == "ILSVRC2012/train"
    assert settings.quota.gpus == 4 and settings.quota.cpu is None
    assert settings.quota.storage is not None and settings.quota.storage.text == "800Gi"
    assert settings.pipeline.shm_size is not None and settings.pipeline.shm_size.text == "16Gi"


def test_the_example_as_shipped_names_the_key_still_to_set():
    message = error_of(example_raw(fill=False))
    assert message.startswith(f"{KEY}.context: still the example's placeholder")


def test_the_errors_are_config_errors_and_value_errors():
    # stacks/__main__.py turns AtlasConfigError into a clean RunError before any resource.
    assert issubclass(OpenShiftSettingsError, AtlasConfigError)
    assert issubclass(OpenShiftSettingsError, ValueError)


def test_local_defaults():
    settings = parse(local_raw())
    assert settings.flavour == "kubernetes"
    assert settings.image.reference == "registry.local/atlas/biggan:dev"
    assert settings.storage.results.size.text == "50Gi"
    assert settings.storage.logs.storage_class == "atlas-local"
    assert settings.monitor.await_ready is False
    assert settings.pipeline.backoff_limit == 0
    assert settings.pipeline.await_last_step is False
    assert settings.quota.manage is True


def test_unknown_gpu_product_suggests_the_nearest_and_the_fix():
    message = error_of(modified(example_raw(), lambda r: r["gpu"].update(product="Tesla-V100-SXM2-32G")))
    assert message.startswith(f"{KEY}.gpu.product: unknown GPU product 'Tesla-V100-SXM2-32G'")
    assert "did you mean Tesla-V100-SXM2-32GB" in message
    assert "oc get nodes -L nvidia.com/gpu.product" in message
    assert f"{KEY}.gpu.check_product: false" in message


def test_unlisted_gpu_product_allowed_when_asked_and_mig_slices_known():
    raw = modified(example_raw(), lambda r: r["gpu"].update(product="Custom-GPU", check_product=False))
    assert parse(raw).gpu.product == "Custom-GPU"
    mig = modified(example_raw(), lambda r: r["gpu"].update(product="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"))
    assert parse(mig).gpu.product.endswith("MIG-1g.5gb")


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        (lambda r: r["storage"]["data"].update(size="-10Gi"), "storage.data.size", "negative storage size"),
        (lambda r: r["storage"]["logs"].update(size="0"), "storage.logs.size", "is zero"),
        (lambda r: r["storage"]["results"].update(size="lots"), "storage.results.size", "not a Kubernetes quantity"),
        (lambda r: r["quota"].update(gpus=-1), "quota.gpus", "-1 is negative"),
        (lambda r: r["quota"].update(memory="-1Gi"), "quota.memory", "negative memory size"),
        (lambda r: r["image"]["build"].update(memory="-8Gi"), "image.build.memory", "negative memory size"),
        (lambda r: r["pipeline"].update(backoff_limit=-2), "pipeline.backoff_limit", "negative"),
    ],
)
def test_negative_or_bad_sizes_name_the_key(change, key, words):
    message = error_of(modified(example_raw(), change))
    assert message.startswith(f"{KEY}.{key}: ")
    assert words in message


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda r: r["storage"].update({"class": "Fast_SSD"}), "storage.class"),
        (lambda r: r["data"]["sources"].update({"imagenet-train": "pvc://Bad_Claim/x"}), "data.sources.imagenet-train"),
        (lambda r: r["data"]["sources"].update({"ImageNet": "https://x.org/a"}), "data.sources.ImageNet"),
        (lambda r: r["data"].update(s3={"credentials_secret": "s3 creds"}), "data.s3.credentials_secret"),
        (lambda r: r["monitor"].update(host="Monitor_Host"), "monitor.host"),
    ],
)
def test_invalid_names_name_the_key(change, key):
    message = error_of(modified(example_raw(), change))
    assert message.startswith(f"{KEY}.{key}")
    assert "not a valid Kubernetes name" in message
    assert "lower-case letters" in message


def test_the_login_proxy_image_is_openshifts_and_can_be_moved():
    assert example_settings().monitor.proxy_image.startswith("quay.io/openshift/origin-oauth-proxy:")
    mirror = "mirror.example/oauth-proxy:4.16"
    mirrored = parse(modified(example_raw(), lambda r: r["monitor"].update(proxy_image=mirror)))
    assert mirrored.monitor.proxy_image == "mirror.example/oauth-proxy:4.16"
    message = error_of(modified(example_raw(), lambda r: r["monitor"].update(proxy_image="x --privileged")))
    assert message.startswith(f"{KEY}.monitor.proxy_image")


def test_missing_image_source_on_openshift_offers_both_fixes():
    message = error_of(modified(example_raw(), lambda r: r.pop("image")))
    assert message.startswith(f"{KEY}.image: no image source")
    assert f"{KEY}.image.build.git_uri" in message and f"{KEY}.image.reference" in message


def test_missing_image_source_on_plain_kubernetes_asks_for_a_reference():
    message = error_of(modified(local_raw(), lambda r: r.pop("image")))
    assert message.startswith(f"{KEY}.image: no image source")
    assert f"set {KEY}.image.reference" in message


def test_a_build_needs_openshift_or_the_local_builder():
    raw = modified(local_raw(), lambda r: r.update(image={"build": {"git_uri": "https://github.com/x/atlas"}}))
    message = error_of(raw)
    assert message.startswith(f"{KEY}.image.build: a BuildConfig needs OpenShift's build API")
    assert f"{KEY}.build.builder: atlas-local" in message.replace(".image.build.builder", ".build.builder")
    local = modified(local_raw(), lambda r: r.update(
        image={"build": {"git_uri": "git://127.0.0.1:16418/atlas", "git_ref": "HEAD", "builder": "atlas-local"}}))
    assert parse_openshift_settings(local, KEY).image.build.builder == "atlas-local"
    wrong = modified(local, lambda r: r["image"]["build"].update(builder="tekton"))
    assert error_of(wrong).startswith(f"{KEY}.image.build.builder: found 'tekton'")


def test_build_and_reference_exclude_each_other():
    raw = modified(example_raw(), lambda r: r["image"].update(reference="quay.io/x/y:1"))
    assert "both build and reference are set" in error_of(raw)


def test_bad_git_uri_and_data_source():
    raw = modified(example_raw(), lambda r: r["image"]["build"].update(git_uri="github.com/x"))
    assert error_of(raw).startswith(f"{KEY}.image.build.git_uri: ")
    raw = modified(example_raw(), lambda r: r["data"]["sources"].update({"imagenet-train": "ftp://host/x"}))
    message = error_of(raw)
    assert message.startswith(f"{KEY}.data.sources.imagenet-train: unsupported source")
    assert "pvc://<claim>/<path>" in message
    raw = modified(example_raw(), lambda r: r["data"]["sources"].update({"imagenet-train": "pvc://claim/../x"}))
    assert "'..'" in error_of(raw)


def test_unknown_keys_are_refused_with_the_allowed_ones():
    message = error_of(modified(example_raw(), lambda r: r["storage"].update(size="1Ti")))
    assert message.startswith(f"{KEY}.storage: unknown key(s) size")
    assert "use one of: class, data, logs, results" in message
    assert error_of(modified(example_raw(), lambda r: r.update(gpus=4))).startswith(f"{KEY}: unknown key(s) gpus")


def test_data_volume_must_be_shared():
    raw = modified(example_raw(), lambda r: r["storage"]["data"].update(access_mode="ReadWriteOnce"))
    assert error_of(raw).startswith(f"{KEY}.storage.data.access_mode: the data volume must be ReadWriteMany")


def test_strings_from_pulumi_config_set_are_read_as_numbers_and_booleans():
    raw = modified(example_raw(), lambda r: (r["quota"].update(gpus="4"), r["monitor"].update({"await": "false"})))
    settings = parse(raw)
    assert settings.quota.gpus == 4
    assert settings.monitor.await_ready is False


# --- Against the workload


def test_required_quota_is_the_busiest_moment():
    settings = example_settings()
    steps = render_steps(biggan(), "openshift")
    needed = required_quota(steps, settings)
    # train: 2 GPUs, 16 CPUs, 128Gi; staging (2 x 1 CPU, 2Gi) + build (4 CPU, 8Gi) is smaller;
    # the monitor (100m, 128Mi) and its login proxy (50m, 64Mi) run throughout.
    assert needed.gpus == 2
    assert needed.cpu == "16150m"
    assert needed.memory == f"{128 * 1024 + 128 + 64}Mi"
    assert needed.storage == "510Gi"
    assert needed.pvcs == 4  # Atlas's three claims and the pvc:// source's


def test_gpus_over_the_quota_name_the_key_the_step_and_the_fix():
    settings = parse(modified(example_raw(), lambda r: r["quota"].update(gpus=1)))
    steps = render_steps(biggan(), "openshift")
    with pytest.raises(OpenShiftSettingsError) as caught:
        check_workload_fits(settings, steps, [d.name for d in biggan().data])
    message = str(caught.value)
    assert message.startswith(f"{KEY}.quota.gpus: step 'train' asks for 2 GPUs, over the quota of 1")
    assert f"raise {KEY}.quota.gpus to 2" in message
    assert "overrides.openshift.train.resources" in message


@pytest.mark.parametrize(
    ("field", "value", "needed"),
    [("cpu", "8", "16150m"), ("memory", "64Gi", "131264Mi"), ("storage", "100Gi", "510Gi")],
)
def test_cpu_memory_storage_over_the_quota(field, value, needed):
    settings = parse(modified(example_raw(), lambda r: r["quota"].update({field: value})))
    with pytest.raises(OpenShiftSettingsError) as caught:
        check_workload_fits(settings, render_steps(biggan(), "openshift"), [d.name for d in biggan().data])
    assert str(caught.value).startswith(f"{KEY}.quota.{field}: the workload needs {needed}")


def test_a_source_for_an_input_the_workload_does_not_have():
    settings = parse(modified(example_raw(), lambda r: r["data"]["sources"].update({"cifar": "https://x.org/c"})))
    with pytest.raises(OpenShiftSettingsError, match=rf"^{KEY}\.data\.sources\.cifar: not a data input"):
        check_workload_fits(settings, render_steps(biggan(), "openshift"), [d.name for d in biggan().data])


def test_shared_memory_must_leave_room_for_the_step():
    settings = parse(modified(example_raw(), lambda r: r["pipeline"].update(shm_size="64Gi")))
    with pytest.raises(OpenShiftSettingsError, match=rf"^{KEY}\.pipeline\.shm_size: shared memory would take all"):
        check_workload_fits(settings, render_steps(biggan(), "openshift"), [d.name for d in biggan().data])


def test_the_example_fits_biggan():
    needed = check_workload_fits(
        example_settings(), render_steps(biggan(), "openshift"), [d.name for d in biggan().data]
    )
    assert needed.gpus == 2


def test_the_staged_from_claim_counts_against_the_claim_quota():
    settings = parse(modified(example_raw(), lambda r: r["quota"].update(pvcs=3)))
    with pytest.raises(OpenShiftSettingsError, match=rf"^{KEY}\.quota\.pvcs: 3 is fewer than the 4 claims"):
        check_workload_fits(settings, render_steps(biggan(), "openshift"), [d.name for d in biggan().data])
