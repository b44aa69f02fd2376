"""Apptainer on the local Satori, against its real login node, Slurm and the local registry:
what is refused before anything is submitted (an image built for another architecture, a site
without Apptainer), and the SIF cache under concurrent conversions.

The images are pushed here to the local registry through the distribution API: a one-file
layer and a config naming its architecture, which is all the architecture check and a
conversion read (the whole probe in the OpenShift side's image is test_local_all_sides's).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shlex
import tarfile
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from infra.hpc.apptainer import ensure_sif_script, parse_conversion, parse_image_reference
from localenv import images
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_hpc_sections
from tests.e2e.pulumi_cli import satori_ssh as ssh

# Every URL opened here is the local registry's (http://127.0.0.1:<port>/v2/...).
# ruff: noqa: S310

pytestmark = pytest.mark.e2e
ENVIRONMENT = "satori-slurm"


def push_image(layout: Layout, repository: str, architecture: str, marker: str) -> str:
    """An image of one file (`/atlas-marker`) whose config says `architecture`, pushed to the
    local registry; its reference by digest."""
    registry = f"http://{images.registry_host(layout)}/v2/{repository}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = marker.encode()
        info = tarfile.TarInfo("atlas-marker")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps({
        "architecture": architecture, "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}"]},
    }).encode()

    def blob(content: bytes) -> str:
        digest = f"sha256:{hashlib.sha256(content).hexdigest()}"
        start = urllib.request.Request(f"{registry}/blobs/uploads/", method="POST")
        with urllib.request.urlopen(start, timeout=30) as response:
            location = response.headers["Location"]
        if location.startswith("/"):
            location = f"http://{images.registry_host(layout)}{location}"
        joiner = "&" if "?" in location else "?"
        put = urllib.request.Request(f"{location}{joiner}digest={digest}", data=content, method="PUT",
                                     headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(put, timeout=30) as response:
            assert response.status == 201, response.status
        return digest

    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(layer),
                    "size": len(layer)}],
    }).encode()
    put = urllib.request.Request(f"{registry}/manifests/{architecture}", data=manifest, method="PUT",
                                 headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(put, timeout=30) as response:
        assert response.status == 201, response.status
    return f"{images.registry_host(layout)}/{repository}@sha256:{hashlib.sha256(manifest).hexdigest()}"


@pytest.fixture
def hpc_only_stack(tmp_path, kube_env, satori_env):
    """A stack of the local Satori's Slurm environment alone (no OpenShift side), runtime apptainer."""
    proj = PulumiProject.create(tmp_path)
    remote = f"atlas-e2e-{uuid.uuid4().hex[:6]}"
    config = proj.stack_config("local")
    config.pop("atlas:openshift")
    config["atlas:hpc"] = {ENVIRONMENT: config["atlas:hpc"][ENVIRONMENT]}
    local_hpc_sections(config, satori_env, (ENVIRONMENT,), remote)
    proj.run("stack", "init", "local")
    yield proj, config, remote
    proj.run("destroy", "--yes", "-s", "local", check=False)
    proj.run("stack", "rm", "--yes", "-s", "local", check=False)
    ssh(satori_env, f"rm -rf ~/{remote}")


def _batch_jobs_in_state(proj: PulumiProject) -> list[str]:
    state = json.loads(proj.run("stack", "export", "-s", "local").stdout)
    return [r["urn"] for r in state["deployment"].get("resources") or [] if r["type"].endswith("BatchJob")]


@pytest.mark.parametrize(
    ("apptainer", "expected"),
    [
        # Satori is ppc64le, this host x86_64: an image built for the other is refused, with the fix.
        ({}, ["is built for linux/ppc64le", "login node is x86_64", "Fix: build the image for linux/amd64"]),
        # A site without Apptainer: said before anything is submitted, naming the key.
        ({"command": "/opt/no-such-apptainer/bin/apptainer"},
         ["atlas:hpc.satori-slurm.runtime is apptainer", "is not found on", "apptainer.command"]),
    ],
    ids=["architecture-mismatch", "apptainer-missing"],
)
def test_refused_before_anything_is_submitted(hpc_only_stack, kube_env, satori_env, apptainer, expected):
    proj, config, remote = hpc_only_stack
    image = push_image(kube_env, "atlas-e2e/ppc64le-only", "ppc64le", "built for ppc64le")
    config["atlas:hpc"][ENVIRONMENT]["apptainer"] = {
        **config["atlas:hpc"][ENVIRONMENT]["apptainer"], "image": image, **apptainer,
    }
    proj.set_stack_config("local", config)
    jobs_before = ssh(satori_env, "squeue -h -t all -o %i").split()

    up = proj.run("up", "--yes", "--skip-preview", "-s", "local", check=False)

    assert up.returncode != 0
    for text in expected:
        assert text in up.stdout + up.stderr, up.stdout + up.stderr
    assert _batch_jobs_in_state(proj) == []
    assert ssh(satori_env, "squeue -h -t all -o %i").split() == jobs_before, "a job was submitted"
    # Nothing was linked into the run directory, and nothing converted.
    assert ssh(satori_env, f"ls ~/{remote}/local/{ENVIRONMENT}/probe/.atlas/image.sif 2>/dev/null || true") == ""


def test_concurrent_conversions_make_one_sif(kube_env, satori_env):
    """Three conversions of one digest at once, as three stacks' `up`s: one converts, the others
    wait on the lock and find its SIF; the cache holds one whole SIF and no partial file."""
    image = parse_image_reference(
        push_image(kube_env, "atlas-e2e/amd64-marker", "amd64", f"marker {uuid.uuid4().hex}"), "image"
    )
    cache = f"atlas-e2e-sif-{uuid.uuid4().hex[:6]}"
    script = ensure_sif_script("apptainer", cache, image, plain_http=True, stack="e2e")

    def convert(_: int) -> str:
        return ssh(satori_env, f"bash -c {shlex.quote(script)}", timeout=300)

    try:
        with ThreadPoolExecutor(3) as pool:
            found = [parse_conversion(out) for out in pool.map(convert, range(3))]
        assert sorted(f.converted for f in found) == [False, False, True]
        # Every caller reports the one conversion's record: its time, once.
        assert len({(f.seconds, f.converted_at) for f in found}) == 1
        assert found[0].seconds is not None and found[0].seconds > 0
        listing = ssh(satori_env, f"ls -A ~/{cache}").split()
        assert sorted(listing) == sorted([image.sif_name, f"{image.sif_name}.json", f".{image.sif_name}.lock"])
        # The SIF is whole: its filesystem partition holds the image's one file (the image has no
        # shell to exec, so the partition is read with squashfs-tools).
        sif = f"~/{cache}/{image.sif_name}"
        marker = ssh(
            satori_env,
            f"part=$(apptainer sif list {sif} | awk -F'|' '/FS/ {{print $1 + 0}}') && "
            f"apptainer sif dump \"$part\" {sif} > ~/{cache}/fs.sqfs && unsquashfs -cat ~/{cache}/fs.sqfs atlas-marker",
        )
        assert marker.startswith("marker ")
    finally:
        ssh(satori_env, f"rm -rf ~/{cache}")


def test_converted_here_and_staged_for_a_site_that_cannot_reach_the_registry(
    kube_env, satori_env, tmp_path, monkeypatch
):
    """`source: here`: this machine pulls and converts (the toolchain's Apptainer), the SIF is
    staged over SFTP into the site's cache and linked into the run directory; a second `up` finds
    it on both ends and converts nothing."""
    from infra.hpc.providers import apptainer_image
    from tests.integration.satori_fixtures import satori_target

    monkeypatch.setattr(apptainer_image, "local_sif_cache", lambda: tmp_path / "sif-here")
    reference = push_image(kube_env, "atlas-e2e/amd64-staged", "amd64", f"staged {uuid.uuid4().hex}")
    image = parse_image_reference(reference, "image")
    remote = f"atlas-e2e-here-{uuid.uuid4().hex[:6]}"
    props = {
        **satori_target(satori_env), "environment": ENVIRONMENT, "stack": "e2e-here",
        "run_dir": f"{remote}/run", "image": reference, "command": "apptainer", "cache_dir": f"{remote}/sif",
        "source": "here", "pull_registry": None, "plain_http": True, "image_arch": None,
    }
    try:
        first = apptainer_image.make_sif(props)
        assert first["conversion"]["converted_now"] is True and first["conversion"]["seconds"] > 0
        assert first["conversion"]["by"] == "e2e-here"
        assert (tmp_path / "sif-here" / image.sif_name).is_file()
        assert first["sif"].endswith(f"/{remote}/sif/{image.sif_name}")
        assert ssh(satori_env, f"readlink -f ~/{remote}/run/.atlas/image.sif").strip() == first["sif"]
        # The staged SIF is the one converted here, byte for byte.
        here = hashlib.sha256((tmp_path / "sif-here" / image.sif_name).read_bytes()).hexdigest()
        assert ssh(satori_env, f"sha256sum ~/{remote}/sif/{image.sif_name}").split()[0] == here
        assert sorted(ssh(satori_env, f"ls -A ~/{remote}/sif").split()) == sorted(
            [image.sif_name, f"{image.sif_name}.json", f".{image.sif_name}.lock"]
        ), "no staged partial left behind"
        second = apptainer_image.make_sif(props)
        assert second["conversion"] == {**first["conversion"], "converted_now": False}
    finally:
        ssh(satori_env, f"rm -rf ~/{remote}")
