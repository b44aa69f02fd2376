"""The OpenShift objects the local build runner writes: a Build from its BuildConfig, its output, tag events.

Pure, dict to dict, following OpenShift's documented behaviour (build.openshift.io/v1,
image.openshift.io/v1); localenv/builds.py watches the API, runs git and buildah, and
writes these back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]
BUILD_API = "/apis/build.openshift.io/v1"
IMAGE_API = "/apis/image.openshift.io/v1"
BUILD_CONFIG_LABEL = "openshift.io/build-config.name"
BUILD_NUMBER = "openshift.io/build.number"
LOG_ANNOTATION = "atlas.dev/build-log"
TERMINAL = ("Complete", "Failed", "Error", "Cancelled")
# openshift-controller-manager's maxExcerptLength: the lines of a failed build's log it keeps.
LOG_SNIPPET_LINES = 5
# OpenShift's status messages for the reasons this runner gives (openshift/api, build/v1:
# StatusMessage*), so a Build here reads as one there; what went wrong in detail is in the log.
STATUS_MESSAGES = {
    "FetchSourceFailed": "Failed to fetch the input source.",
    "InvalidContextDirectory": "The supplied context directory does not exist.",
    "DockerBuildFailed": "Docker build strategy has failed.",
    "PushImageToRegistryFailed": "Failed to push the image to the registry.",
    "CancelledBuild": "The build was cancelled by the user.",
    "BuildPodDeleted": "The pod for this build was deleted before the build completed.",
    "GenericBuildFailed": "Generic Build failure - check logs for details.",
}
# The phase each reason ends a build in: Failed where the build itself failed, Cancelled when
# asked to stop, Error where it could not run to an end (its pod gone: here, the runner stopped).
REASON_PHASES = {"CancelledBuild": "Cancelled", "BuildPodDeleted": "Error"}


def now_text(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def wants_config_change_build(config: Mapping[str, Any]) -> bool:
    """A ConfigChange trigger builds once, when the config has never been built."""
    triggers = config.get("spec", {}).get("triggers") or []
    return any(t.get("type") == "ConfigChange" for t in triggers) and not config.get("status", {}).get("lastVersion")


def new_build(config: Mapping[str, Any], number: int) -> Manifest:
    """The Build OpenShift's controller instantiates from a BuildConfig."""
    meta = config["metadata"]
    name = f"{meta['name']}-{number}"
    spec = config["spec"]
    build_spec = {k: v for k, v in spec.items() if k in (
        "serviceAccount", "source", "revision", "strategy", "output", "resources", "postCommit",
        "completionDeadlineSeconds", "nodeSelector", "mountTrustedCA",
    )}
    build_spec["triggeredBy"] = [{"message": "Build configuration change"}]
    labels = {**(meta.get("labels") or {}), "buildconfig": meta["name"], BUILD_CONFIG_LABEL: meta["name"],
              "openshift.io/build.start-policy": spec.get("runPolicy", "Serial")}
    return {
        "apiVersion": "build.openshift.io/v1",
        "kind": "Build",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {BUILD_CONFIG_LABEL: meta["name"], BUILD_NUMBER: str(number)},
            "ownerReferences": [{"apiVersion": "build.openshift.io/v1", "kind": "BuildConfig",
                                 "name": meta["name"], "uid": meta["uid"], "controller": True}],
        },
        "spec": build_spec,
    }


@dataclass(frozen=True)
class Output:
    """Where a build pushes: an ImageStreamTag of the build's namespace (or a DockerImage)."""

    stream: str | None
    tag: str
    repository: str  # in the local registry, e.g. ns/stream

    @classmethod
    def of(cls, build: Mapping[str, Any]) -> Output:
        to = build["spec"].get("output", {}).get("to") or {}
        namespace = to.get("namespace") or build["metadata"]["namespace"]
        if to.get("kind") == "ImageStreamTag":
            stream, _, tag = str(to["name"]).partition(":")
            return cls(stream, tag or "latest", f"{namespace}/{stream}")
        if to.get("kind") == "DockerImage":
            image = str(to["name"])
            repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
            return cls(None, tag, repository.split("/", 1)[1] if "/" in repository else repository)
        raise ValueError(f"build {build['metadata']['name']}: output kind {to.get('kind')!r} is not supported")


def image_stream_status(stream: Mapping[str, Any], registry: str, tag: str, digest: str,
                        created: str) -> Manifest:
    """The stream's status with a new tag event on top (newest first), as the registry's
    image-stream mapping writes it."""
    namespace, name = stream["metadata"]["namespace"], stream["metadata"]["name"]
    repository = f"{registry}/{namespace}/{name}"
    status = dict(stream.get("status") or {})
    status["dockerImageRepository"] = repository
    tags = [dict(t) for t in status.get("tags") or []]
    event = {"created": created, "dockerImageReference": f"{repository}@{digest}", "image": digest,
             "generation": int(stream["metadata"].get("generation", 1))}
    for entry in tags:
        if entry.get("tag") == tag:
            entry["items"] = [event, *(i for i in entry.get("items") or [] if i.get("image") != digest)]
            break
    else:
        tags.append({"tag": tag, "items": [event]})
    status["tags"] = tags
    return status


def log_snippet(log: str) -> str:
    return "\n".join(log.rstrip().splitlines()[-LOG_SNIPPET_LINES:])


def ended_status(reason: str, log: str, started: dt.datetime | None, finished: dt.datetime) -> Manifest:
    """The status of a build that did not complete, as OpenShift's build controller writes it:
    the phase for `reason`, its message, the end of the log (`logSnippet`, Failed builds only,
    as OpenShift keeps it) and the times."""
    phase = REASON_PHASES.get(reason, "Failed")
    status: Manifest = {"phase": phase, "reason": reason,
                        "message": STATUS_MESSAGES.get(reason, STATUS_MESSAGES["GenericBuildFailed"]),
                        "completionTimestamp": now_text(finished)}
    if phase == "Failed" and log.strip():
        status["logSnippet"] = log_snippet(log)
    if started is not None:
        status["duration"] = int((finished - started).total_seconds() * 1e9)
    return status


def is_cancelled(build: Mapping[str, Any]) -> bool:
    """`oc cancel-build` sets `status.cancelled`; the controller then ends the build Cancelled."""
    return bool((build.get("status") or {}).get("cancelled"))
