"""bench/local_vs_script.py's pure helpers (most in bench/local_vs_script_peer.py): what the script
is given (Atlas's objects made fit to apply in another namespace, its job scripts for another
folder), how it reaches the login node (one ControlMaster connection) and how it reads a pod's
phase."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bench import local_vs_script as lvs
from bench import local_vs_script_peer as peer

INFO = {
    "host": "127.0.0.1",
    "port": 18222,
    "user": "atlas",
    "key_file": "/s/id_ed25519",
    "known_hosts_file": "/s/known_hosts",
}
IMAGE = "127.0.0.1:18210/atlas-bench-warmup/probe-local@sha256:" + "ab" * 32


def options_as_dict(argv: list[str]) -> dict[str, str]:
    assert argv[0::2] == ["-o"] * (len(argv) // 2), "only -o options, so ssh and scp take the same list"
    return dict(item.split("=", 1) for item in argv[1::2])


def test_mux_options_share_one_connection_and_check_the_host_key() -> None:
    options = options_as_dict(peer.mux_ssh_options(INFO, Path("/tmp/cm-x"), persist_s=60))
    assert options == {
        "IdentityFile": "/s/id_ed25519",
        "Port": "18222",
        "User": "atlas",
        "UserKnownHostsFile": "/s/known_hosts",
        "StrictHostKeyChecking": "yes",
        "BatchMode": "yes",
        "IdentitiesOnly": "yes",
        "ConnectTimeout": "10",
        "ControlMaster": "auto",
        "ControlPath": "/tmp/cm-x",
        "ControlPersist": "60",
    }


def job(name: str = "openshift-pipeline-make-hdf5-1a2b") -> dict[str, Any]:
    controller = {
        "controller-uid": "u1",
        "batch.kubernetes.io/controller-uid": "u1",
        "job-name": name,
        "batch.kubernetes.io/job-name": name,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "atlas-bench-warmup",
            "uid": "u1",
            "resourceVersion": "7",
            "creationTimestamp": "2026-12-03T18:00:00Z",
            "generation": 1,
            "managedFields": [{}],
            "labels": {"atlas.dev/step": "make-hdf5", **controller},
            "annotations": {"pulumi.com/skipAwait": "true", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "template": {
                "metadata": {"labels": {"atlas.dev/step": "make-hdf5", **controller}},
                "spec": {
                    "containers": [
                        {"name": "step", "image": IMAGE, "env": [{"name": "NS", "value": "atlas-bench-warmup"}]}
                    ]
                },
            },
        },
        "status": {"succeeded": 1},
    }


CLEAN_CASES = [
    pytest.param(
        job(),
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "openshift-pipeline-make-hdf5-1a2b",
                "namespace": "script-bench-s0",
                "labels": {"atlas.dev/step": "make-hdf5"},
                "annotations": {"pulumi.com/skipAwait": "true"},
            },
            "spec": {
                "template": {
                    "metadata": {"labels": {"atlas.dev/step": "make-hdf5"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "step",
                                "image": peer.IMAGE_PLACEHOLDER,
                                "env": [{"name": "NS", "value": "script-bench-s0"}],
                            }
                        ]
                    },
                }
            },
        },
        id="job: controller labels, selector, status gone; namespace and image moved",
    ),
    pytest.param(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "atlas-bench-warmup",
                "uid": "n",
                "finalizers": ["x"],
                "labels": {"kubernetes.io/metadata.name": "atlas-bench-warmup"},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        },
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "script-bench-s0",
                "labels": {"kubernetes.io/metadata.name": "script-bench-s0"},
                "annotations": {},
            },
        },
        id="namespace renamed, its spec and finalizers the server's",
    ),
    pytest.param(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "data",
                "namespace": "atlas-bench-warmup",
                "annotations": {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "volume.kubernetes.io/storage-provisioner": "x",
                    "keep": "me",
                },
            },
            "spec": {"volumeName": "pv-3", "storageClassName": "atlas-local"},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "script-bench-s0", "annotations": {"keep": "me"}, "labels": {}},
            "spec": {"storageClassName": "atlas-local"},
        },
        id="claim: bound volume and binder annotations gone",
    ),
    pytest.param(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "monitor", "namespace": "atlas-bench-warmup"},
            "spec": {"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"], "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "monitor", "namespace": "script-bench-s0", "annotations": {}, "labels": {}},
            "spec": {"ports": [{"port": 80}]},
        },
        id="service: addresses the server gave gone",
    ),
    pytest.param(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "atlas-bench-warmup-x", "namespace": "atlas-bench-warmup"},
            "data": {"a": "not-atlas-bench-warmup-2"},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "atlas-bench-warmup-x",
                "namespace": "script-bench-s0",
                "annotations": {},
                "labels": {},
            },
            "data": {"a": "not-atlas-bench-warmup-2"},
        },
        id="the namespace's name is replaced only where it stands alone, not inside a longer name",
    ),
]


@pytest.mark.parametrize(("live", "expected"), CLEAN_CASES)
def test_clean_object(live: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(live)
    assert peer.clean_object(live, "atlas-bench-warmup", "script-bench-s0", IMAGE) == expected
    assert live == before, "the captured object is left as it was"


def test_with_image_fills_the_script_s_own_build_in() -> None:
    cleaned = peer.clean_object(job(), "atlas-bench-warmup", "script-bench-s0", IMAGE)
    mine = "127.0.0.1:18210/script-bench-s0/probe-local@sha256:" + "cd" * 32
    assert peer.with_image(cleaned, mine)["spec"]["template"]["spec"]["containers"][0]["image"] == mine


LSF = """#!/bin/bash
#BSUB -J atlas-make-hdf5-0123abcd
#BSUB -o atlas-bench-warmup/local/satori/probe/logs/make-hdf5.%J.out
cd ~/atlas-bench-warmup/local/satori/probe && python3 .atlas/python/probe.py
"""


def test_script_job_text_moves_the_folder_and_renames_the_job() -> None:
    text = peer.script_job_text(
        LSF, "atlas-bench-warmup/local/satori/probe", "script-bench-s0/local/satori/probe", "script-make-hdf5-s0"
    )
    assert text == LSF.replace("atlas-bench-warmup", "script-bench-s0").replace(
        "atlas-make-hdf5-0123abcd", "script-make-hdf5-s0"
    )


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        ("job-abc Pending\n", None),
        ("job-abc Running\n", None),
        ("job-abc Succeeded\n", "Succeeded"),
        ("job-abc Failed\n", "Failed"),
        ("job-abc \n", None),  # a pod the scheduler has not seen yet has no phase
        ("", None),
    ],
)
def test_pod_phase_verdict(line: str, verdict: str | None) -> None:
    assert peer.pod_phase_verdict(line) == verdict


def test_image_stream_tag_and_pushed_reference() -> None:
    config = {"metadata": {"name": "b"}, "spec": {"output": {"to": {"kind": "ImageStreamTag", "name": "probe:v1"}}}}
    assert peer.image_stream_tag(config) == ("probe", "v1")
    stream = {
        "status": {
            "tags": [
                {"tag": "old", "items": [{"dockerImageReference": "r@sha256:0"}]},
                {
                    "tag": "v1",
                    "items": [{"dockerImageReference": "r@sha256:2"}, {"dockerImageReference": "r@sha256:1"}],
                },
            ]
        }
    }
    assert peer.pushed_reference(stream, "v1") == "r@sha256:2"
    assert peer.tag_pushed_condition("v1") == 'jsonpath={.status.tags[?(@.tag=="v1")].items[0].image}'
    assert peer.pushed_reference({"status": {}}, "v1") is None
    with pytest.raises(ValueError, match="DockerImage"):
        peer.image_stream_tag({"metadata": {"name": "b"}, "spec": {"output": {"to": {"kind": "DockerImage"}}}})


def test_plan_splits_atlas_objects_into_the_script_s_phases() -> None:
    env = "urn:pulumi:local::atlas::atlas:openshift:OpenShiftEnvironment"
    objects = [
        (f"{env}$kubernetes:core/v1:ResourceQuota::q", {"kind": "ResourceQuota", "metadata": {"name": "q"}}),
        (f"{env}$kubernetes:core/v1:Namespace::n", {"kind": "Namespace", "metadata": {"name": "n"}}),
        (f"{env}$atlas:openshift:DataStaging$kubernetes:batch/v1:Job::v", {"kind": "Job", "metadata": {"name": "v"}}),
        (
            f"{env}$atlas:openshift:RunMonitor$kubernetes:core/v1:Service::s",
            {"kind": "Service", "metadata": {"name": "s"}},
        ),
        (
            f"{env}$atlas:openshift:TrainingPipeline$kubernetes:batch/v1:Job::m",
            {"kind": "Job", "metadata": {"name": "m"}},
        ),
        (
            f"{env}$atlas:openshift:RunMonitor$kubernetes:apps/v1:Deployment::d",
            {"kind": "Deployment", "metadata": {"name": "d"}},
        ),
        (
            f"{env}$atlas:openshift:TrainingPipeline$kubernetes:batch/v1:Job::t",
            {"kind": "Job", "metadata": {"name": "t"}},
        ),
    ]
    steps = peer.plan(objects, ["v", "m"])

    def names(objs: list[dict[str, Any]]) -> list[str]:
        return [str(o["metadata"]["name"]) for o in objs]

    assert names(steps.base) == ["n", "q", "s"]
    assert names(steps.staging) == ["v"]
    assert names(steps.monitor) == ["d"]
    assert names(steps.pipeline) == ["m", "t"]
    assert steps.awaited == {"v", "m"}


def test_summarise_pairs_each_round_script_over_atlas() -> None:
    samples = [
        {"round": r, "side": side, "seconds": s, "logins": 1}
        for r, (a, b) in enumerate([(10.0, 12.0), (11.0, 11.0), (10.0, 15.0)])
        for side, s in (("atlas", a), ("script", b))
    ]
    summary = lvs.summarise(samples, 3)
    assert summary["median_s"] == {"atlas": 10.0, "script": 12.0}
    assert summary["script_over_atlas"]["pairs"] == [1.2, 1.0, 1.5]
    assert summary["logins_per_run"] == {"atlas": [1], "script": [1]}
    assert summary["samples"] == samples


BUILD_LOG = """$ buildah --root /x build --layers -f Containerfile .
STEP 1/4: FROM 127.0.0.1:18710/atlas/debian-python:bookworm
STEP 2/4: RUN pip install numpy
--> Using cache 1d6aca4b7ea254d4
--> 1d6aca4b7ea
STEP 3/4: COPY infra/telemetry/ /opt/atlas/infra/telemetry/
--> 059fa5a9c64
STEP 4/4: WORKDIR /work
--> 3cca4a3f713
COMMIT localhost/ns/probe-local:0e2c
"""


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (BUILD_LOG, {"steps": 4, "cached": 1}),
        (BUILD_LOG.replace("--> 059fa5a9c64", "--> Using cache 059fa5a9c64"), {"steps": 4, "cached": 2}),
        ("", {"steps": 0, "cached": 0}),
    ],
)
def test_build_cache_counts_steps_and_cache_hits(log: str, expected: dict[str, int]) -> None:
    assert lvs.build_cache(log) == expected
