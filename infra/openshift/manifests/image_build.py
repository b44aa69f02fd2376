"""The image: the ImageStream the workload's image is pushed to, and the BuildConfig that builds it.

Its tag is a digest of everything that goes into the image, so that a change builds a new one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

import pulumi

from infra.openshift.manifests.labels import Manifest, object_metadata
from infra.openshift.settings import ImageBuild
from infra.workload.model import GitSource, Workload

INTERNAL_REGISTRY = "image-registry.openshift-image-registry.svc:5000"


def image_stream_name(workload: str, stack: str) -> str:
    """One ImageStream per workload and stack, named exactly (see image.py for why)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"{workload}-{stack}".lower()).strip("-")
    return name[:63].rstrip("-") or "atlas"


def image_tag(workload: Workload, build: ImageBuild) -> str:
    """A tag that changes whenever what goes into the image changes, so that a change builds
    a new image and re-runs the Jobs that use it, while a no-change `up` changes nothing."""
    inputs = {
        "git_uri": build.git_uri,
        "git_ref": build.git_ref,
        "context": workload.build.context,
        "containerfile": workload.build.containerfile,
        "build_args": build_args(workload, build),
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def build_args(workload: Workload, build: ImageBuild) -> list[dict[str, str]]:
    """The Containerfile's ARGs: the workload's source pin, and the base image if configured."""
    args = []
    if isinstance(workload.source, GitSource):
        args += [
            {"name": "REPOSITORY", "value": workload.source.repository},
            {"name": "COMMIT", "value": workload.source.commit},
        ]
    if build.base_image:
        args.append({"name": "BASE_IMAGE", "value": build.base_image})
    return args


def internal_pull_spec(namespace: str, image_stream: str, tag: str) -> str:
    return f"{INTERNAL_REGISTRY}/{namespace}/{image_stream}:{tag}"


def pushed_image(status: Mapping[str, Any] | None, tag: str, fallback: str) -> str:
    """The newest image pushed to `tag`, by digest, as the ImageStream's status records it
    (`dockerImageReference`); `fallback` (the tag's pull spec) while none is recorded."""
    for entry in (status or {}).get("tags") or []:
        if entry.get("tag") == tag and entry.get("items"):
            reference = entry["items"][0].get("dockerImageReference")
            if reference:
                return str(reference)
    return fallback


def image_stream(labels: Mapping[str, str], namespace: pulumi.Input[str], name: str) -> Manifest:
    """Not awaited by pulumi-kubernetes: a build that fails never writes the tag, so an await on it
    could only time out; `pulumi up` waits on the Build instead (infra/openshift/build_completion.py)."""
    return {
        "apiVersion": "image.openshift.io/v1",
        "kind": "ImageStream",
        "metadata": object_metadata(labels, namespace, name=name),
        "spec": {"lookupPolicy": {"local": False}},
    }


def build_config(
    workload: Workload, build: ImageBuild, labels: Mapping[str, str], namespace: pulumi.Input[str], output_tag: str
) -> Manifest:
    """Docker strategy over this repository (the build context holds the Containerfile and the
    sampler); the ConfigChange trigger builds once when the BuildConfig is created."""
    context = PurePosixPath(workload.build.context)
    containerfile = PurePosixPath(workload.build.containerfile)
    if str(context) != "." and not containerfile.is_relative_to(context):
        raise ValueError(
            f"build.containerfile: {containerfile} is outside build.context {context}; "
            "a BuildConfig reads the Containerfile from inside its context directory"
        )
    source: Manifest = {"type": "Git", "git": {"uri": build.git_uri, "ref": build.git_ref}}
    if str(context) != ".":
        source["contextDir"] = str(context)
    resources = {"cpu": build.cpu.text, "memory": build.memory.text}
    return {
        "apiVersion": "build.openshift.io/v1",
        "kind": "BuildConfig",
        "metadata": object_metadata(labels, namespace),
        "spec": {
            "runPolicy": "Serial",
            "source": source,
            "strategy": {
                "type": "Docker",
                "dockerStrategy": {
                    "dockerfilePath": str(containerfile if str(context) == "." else containerfile.relative_to(context)),
                    "buildArgs": build_args(workload, build),
                },
            },
            "output": {"to": {"kind": "ImageStreamTag", "name": output_tag}},
            "triggers": [{"type": "ConfigChange"}],
            "resources": {"requests": resources, "limits": resources},
            "successfulBuildsHistoryLimit": 2,
            "failedBuildsHistoryLimit": 3,
        },
    }
