"""The OpenShift side's BuildCompletion: where a Build stands (table-driven), which Build is the
config's newest, the image a tag event names, the failure's text (golden), and the wait over a
scripted API (a build that fails, completes, outlasts the wait; a log API that is not served).

Regenerate the golden file after an intended change:
ATLAS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_build_completion.py
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from infra.kubeapi import KubeRequestError
from infra.openshift import build_completion
from infra.openshift.build_completion import (
    BuildFailed,
    BuildTarget,
    assess,
    failure_text,
    newest_build,
    tagged_image,
    wait_for_build,
    wait_for_image,
)
from infra.validation import mask_url_credentials

GOLDEN = Path(__file__).parent / "golden"
CONFIG_UID = "bc-uid-1"
TARGET = BuildTarget(
    namespace="atlas-x",
    config="openshift-image-build-1a2b3c4",
    config_uid=CONFIG_UID,
    stream="probe-local",
    tag="0123456789abcdef",
    config_urn="urn:pulumi:local::atlas::kubernetes:build.openshift.io/v1:BuildConfig::openshift-image-build",
    git_source="git://127.0.0.1:23418/atlas at HEAD",
)
# What buildah printed for a Containerfile missing from the Git source (the case).
MISSING_LOG = (
    "$ git -C /tmp/atlas-build-x/source checkout -q FETCH_HEAD\n"
    "$ git -C /tmp/atlas-build-x/source rev-parse HEAD\n"
    "4f0c1d2e3a4b5c6d7e8f90a1b2c3d4e5f6a7b8c9\n"
    "$ buildah build --layers -f /tmp/atlas-build-x/source/workloads/probe/missing/Containerfile -t x .\n"
    "Error: stat /tmp/atlas-build-x/source/workloads/probe/missing/Containerfile: no such file or directory\n"
    "error: buildah build of Containerfile failed (exit 125)\n"
)


def build(
    number: int,
    phase: str | None = None,
    *,
    owner: str | None = CONFIG_UID,
    created: str = "2026-12-04T10:00:00Z",
    **status: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{TARGET.config}-{number}",
        "namespace": TARGET.namespace,
        "creationTimestamp": created,
        "labels": {build_completion.BUILD_CONFIG_LABEL: TARGET.config},
        "annotations": {build_completion.BUILD_NUMBER: str(number)},
    }
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "BuildConfig", "name": TARGET.config, "uid": owner, "controller": True}]
    return {"metadata": meta, "status": {**({"phase": phase} if phase else {}), **status}}


FAILED = build(1, "Failed", reason="DockerBuildFailed", message="Docker build strategy has failed.",
               logSnippet="\n".join(MISSING_LOG.splitlines()[-5:]))


@pytest.mark.parametrize(
    ("the_build", "finished", "succeeded", "note"),
    [
        (None, False, False, "no build yet: the build controller starts one for the BuildConfig"),
        (build(1), False, False, f"build {TARGET.config}-1 is New"),
        (build(1, "New", reason="InvalidOutputReference", message="Output image could not be resolved."),
         False, False, f"build {TARGET.config}-1 is New (InvalidOutputReference: Output image could not be resolved.)"),
        (build(1, "Pending"), False, False, f"build {TARGET.config}-1 is Pending"),
        (build(1, "Running"), False, False, f"build {TARGET.config}-1 is Running"),
        (build(1, "Complete", output={"to": {"imageDigest": "sha256:abc"}}), True, True,
         f"build {TARGET.config}-1 is Complete"),
        (FAILED, True, False,
         f"build {TARGET.config}-1 is Failed: DockerBuildFailed: Docker build strategy has failed."),
        (build(1, "Error", reason="BuildPodDeleted"), True, False,
         f"build {TARGET.config}-1 is Error: BuildPodDeleted"),
        (build(1, "Cancelled", reason="CancelledBuild", message="The build was cancelled by the user."), True, False,
         f"build {TARGET.config}-1 is Cancelled: CancelledBuild: The build was cancelled by the user."),
        (build(1, "Failed"), True, False, f"build {TARGET.config}-1 is Failed"),
    ],
)
def test_assess(the_build: dict[str, Any] | None, finished: bool, succeeded: bool, note: str) -> None:
    progress = assess(the_build)
    assert (progress.finished, progress.succeeded, progress.note) == (finished, succeeded, note)


def test_a_complete_build_gives_its_digest_and_a_failed_one_its_reason() -> None:
    assert assess(build(2, "Complete", output={"to": {"imageDigest": "sha256:abc"}})).digest == "sha256:abc"
    progress = assess(FAILED)
    assert (progress.build, progress.phase, progress.why) == (
        f"{TARGET.config}-1", "Failed", "DockerBuildFailed: Docker build strategy has failed.")


@pytest.mark.parametrize(
    ("builds", "wanted"),
    [
        ([], None),
        ([build(1, "Failed"), build(2, "Running")], 2),
        ([build(2, "Running"), build(1, "Failed")], 2),
        # Build 10 is newer than build 9, whatever the strings say.
        ([build(9, "Complete"), build(10, "New")], 10),
        # Another config's build of the same name (deleted and created again) is not this one's.
        ([build(1, "Failed"), build(2, "Complete", owner="another-uid")], 1),
        ([build(3, "Complete", owner="another-uid")], None),
        # No owner references at all: taken by its label.
        ([build(4, "Running", owner=None)], 4),
    ],
)
def test_the_newest_build_of_the_config_is_followed(builds: list[dict[str, Any]], wanted: int | None) -> None:
    found = newest_build(builds, CONFIG_UID)
    assert (found["metadata"]["name"] if found else None) == (f"{TARGET.config}-{wanted}" if wanted else None)


def test_without_a_number_the_name_orders_builds() -> None:
    nameless = [build(1, "Failed"), build(12, "Running")]
    for b in nameless:
        del b["metadata"]["annotations"]
    assert newest_build(nameless, CONFIG_UID) is nameless[1]


STREAM = {"status": {"tags": [
    {"tag": "other", "items": [{"image": "sha256:o", "dockerImageReference": "reg/ns/s@sha256:o"}]},
    {"tag": TARGET.tag, "items": [
        {"image": "sha256:new", "dockerImageReference": "reg/ns/s@sha256:new"},
        {"image": "sha256:old", "dockerImageReference": "reg/ns/s@sha256:old"},
    ]},
]}}


@pytest.mark.parametrize(
    ("stream", "digest", "wanted"),
    [
        (STREAM, "sha256:new", "reg/ns/s@sha256:new"),
        (STREAM, "sha256:old", "reg/ns/s@sha256:old"),  # the build's own push, not the newest event
        (STREAM, "", "reg/ns/s@sha256:new"),  # no digest reported: the newest event
        (STREAM, "sha256:unknown", None),  # not recorded yet
        ({"status": {"tags": [{"tag": TARGET.tag, "items": []}]}}, "", None),
        ({"status": {}}, "", None),
        (None, "", None),
    ],
)
def test_the_image_is_the_tag_event_of_the_builds_digest(
    stream: dict[str, Any] | None, digest: str, wanted: str | None
) -> None:
    assert tagged_image(stream, TARGET.tag, digest) == wanted


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("git fetch https://alex:ghp_secret@github.com/x/atlas.git main",
         "git fetch https://***@github.com/x/atlas.git main"),
        ("clone https://ghp_token@github.com/x.git", "clone https://***@github.com/x.git"),
        ("ssh://git@host:22/x.git and git://127.0.0.1:16418/atlas", "ssh://***@host:22/x.git and git://127.0.0.1:16418/atlas"),
        ("git@github.com:x/atlas.git", "git@github.com:x/atlas.git"),  # scp-like: a user, no secret
        ("https://a:b@one/ then https://c@two/", "https://***@one/ then https://***@two/"),
        ("no url here: user@example.com", "no url here: user@example.com"),
    ],
)
def test_credentials_in_urls_are_masked(text: str, wanted: str) -> None:
    assert mask_url_credentials(text) == wanted


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def test_the_failure_names_the_build_its_reason_the_log_and_what_to_do() -> None:
    local = {**FAILED, "metadata": {**FAILED["metadata"],
                                    "annotations": {build_completion.LOCAL_LOG_ANNOTATION: "/tmp/s/builds/x.log"}}}
    text = failure_text(TARGET, local, assess(local), MISSING_LOG, "the Build's status.logSnippet")
    _golden("build-failure.txt", text + "\n")
    first = text.splitlines()[0]
    assert first == (f"image build atlas-x/{TARGET.config}-1 of BuildConfig atlas-x/{TARGET.config} ended Failed: "
                     "DockerBuildFailed: Docker build strategy has failed.")
    assert "workloads/probe/missing/Containerfile: no such file or directory" in text
    assert "the whole log (the local build runner's): /tmp/s/builds/x.log" in text
    assert f"pulumi up --replace '{TARGET.config_urn}'" in text


def test_on_openshift_the_failure_says_how_to_read_the_whole_log_and_masks_credentials() -> None:
    target = BuildTarget(**{**TARGET.__dict__, "flavour": "openshift",
                            "git_source": "https://alex:ghp_secret@github.com/x/atlas.git at main"})
    log = "Cloning \"https://alex:ghp_secret@github.com/x/atlas.git\" ...\nerror: failed to fetch requested repository"
    failed = build(3, "Failed", reason="FetchSourceFailed", message="Failed to fetch the input source.")
    text = failure_text(target, failed, assess(failed), log, f"builds/{TARGET.config}-3/log")
    assert f"the whole log: oc logs build/{TARGET.config}-3 -n atlas-x" in text
    assert "ghp_secret" not in text
    assert "https://***@github.com/x/atlas.git" in text
    # No log at all is said, not left blank.
    assert "(no log:" in failure_text(target, failed, assess(failed), "", "")


class ScriptedApi:
    """The calls the wait makes, answered from a script: one listing of the config's builds (and
    of the ImageStream), the watch windows' events in turn, and the build log API."""

    def __init__(
        self,
        builds: list[dict[str, Any]],
        windows: list[list[dict[str, Any]]],
        log: str | Exception = "",
        streams: list[dict[str, Any]] | None = None,
    ) -> None:
        self.builds, self.windows, self.log = builds, list(windows), log
        self.streams = streams or []
        self.calls: list[str] = []

    def get(self, path: str) -> Any:
        if "/imagestreams?" in path:
            self.calls.append("streams")
            assert path.endswith(f"fieldSelector=metadata.name%3D{TARGET.stream}")
            return {"metadata": {"resourceVersion": "50"}, "items": self.streams}
        assert path == (f"/apis/build.openshift.io/v1/namespaces/atlas-x/builds?labelSelector="
                        f"openshift.io/build-config.name%3D{TARGET.config}")
        self.calls.append("list")
        return {"metadata": {"resourceVersion": "10"}, "items": self.builds}

    def watch(self, path: str, version: str, stop: Any = None, timeout_s: int = 0) -> Iterator[Mapping[str, Any]]:
        self.calls.append(f"watch@{version}")
        yield from self.windows.pop(0) if self.windows else []

    def text(self, path: str) -> str:
        self.calls.append("log")
        assert path.endswith(f"/builds/{TARGET.config}-1/log?tailLines={build_completion.LOG_TAIL_LINES}")
        if isinstance(self.log, Exception):
            raise self.log
        return self.log


def event(kind: str, obj: dict[str, Any], version: str) -> dict[str, Any]:
    return {"type": kind, "object": {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}}


NOT_SERVED = KubeRequestError("GET", "/apis/build.openshift.io/v1/namespaces/atlas-x/builds/x-1/log", 404, "not found")


def test_a_failed_build_ends_the_wait_at_once_with_the_log_apis_lines() -> None:
    api = ScriptedApi([build(1, "Running")], [[event("MODIFIED", FAILED, "11")]], log=MISSING_LOG)
    notes: list[str] = []
    with pytest.raises(BuildFailed) as failed:
        wait_for_build(api, TARGET, 900, notes.append)  # type: ignore[arg-type]
    message = str(failed.value)
    assert "ended Failed: DockerBuildFailed" in message
    assert f"--- last lines of its log (builds/{TARGET.config}-1/log)" in message
    assert "$ git -C /tmp/atlas-build-x/source checkout" in message  # the API's 20 lines, not the snippet's 5
    assert api.calls == ["list", "watch@10", "log"]
    assert notes == [f"build {TARGET.config}-1 is Running"]


def test_where_the_log_api_is_not_served_the_builds_log_snippet_is_shown() -> None:
    api = ScriptedApi([FAILED], [], log=NOT_SERVED)
    with pytest.raises(BuildFailed) as failed:
        wait_for_build(api, TARGET, 900)  # type: ignore[arg-type]
    message = str(failed.value)
    assert "--- last lines of its log (the Build's status.logSnippet)" in message
    assert "stat /tmp/atlas-build-x/source/workloads/probe/missing/Containerfile: no such file or directory" in message
    assert "$ git -C /tmp/atlas-build-x/source checkout" not in message
    assert api.calls == ["list", "log"]  # already Failed: no watch


def test_the_wait_follows_a_build_that_appears_and_completes() -> None:
    done = build(1, "Complete", output={"to": {"imageDigest": "sha256:new"}})
    api = ScriptedApi([], [[event("ADDED", build(1), "11"), event("MODIFIED", build(1, "Running"), "12")],
                           [event("MODIFIED", done, "13")]])
    notes: list[str] = []
    progress = wait_for_build(api, TARGET, 900, notes.append)  # type: ignore[arg-type]
    assert (progress.succeeded, progress.digest) == (True, "sha256:new")
    assert api.calls == ["list", "watch@10", "watch@12"]
    assert notes == ["no build yet: the build controller starts one for the BuildConfig",
                     f"build {TARGET.config}-1 is New", f"build {TARGET.config}-1 is Running"]


def test_an_expired_watch_lists_afresh() -> None:
    api = ScriptedApi([build(1, "Running")], [[{"type": "ERROR", "object": {"code": 410}}]])
    listings = iter([[build(1, "Running")], [build(1, "Complete")]])
    original = api.get

    def get(path: str) -> Any:
        api.builds = next(listings)
        return original(path)

    api.get = get  # type: ignore[method-assign]
    assert wait_for_build(api, TARGET, 900).succeeded  # type: ignore[arg-type]
    assert api.calls == ["list", "watch@10", "list"]


def test_the_wait_ends_at_its_timeout_saying_where_the_build_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 0.0, 100.0, 200.0])
    monkeypatch.setattr(build_completion.time, "monotonic", lambda: next(clock))
    api = ScriptedApi([build(1, "Running")], [[]])
    with pytest.raises(BuildFailed) as failed:
        wait_for_build(api, TARGET, 150)  # type: ignore[arg-type]
    assert f"has not ended after 150 s (build {TARGET.config}-1 is Running)" in str(failed.value)
    assert "run `pulumi up` again to keep waiting" in str(failed.value)


def test_the_image_is_read_from_the_stream_or_awaited_until_recorded() -> None:
    recorded = {"metadata": {"name": TARGET.stream}, **STREAM}
    api = ScriptedApi([], [], streams=[recorded])
    assert wait_for_image(api, TARGET, "sha256:new", 60) == "reg/ns/s@sha256:new"  # type: ignore[arg-type]
    assert api.calls == ["streams"]
    api = ScriptedApi([], [[event("MODIFIED", recorded, "51")]], streams=[{"metadata": {"name": TARGET.stream}}])
    assert wait_for_image(api, TARGET, "sha256:old", 60) == "reg/ns/s@sha256:old"  # type: ignore[arg-type]
    assert api.calls == ["streams", "watch@50"]


def test_diff_replaces_the_completion_with_what_it_waits_for_and_updates_nothing_in_place() -> None:
    provider = build_completion.BuildCompletionProvider()
    olds = {"build_config_uid": "u1", "tag": "t1", "image_stream": "s", "namespace": "n", "timeout_s": 900,
            "kubeconfig": "/a", "image": "reg/n/s@sha256:x"}
    assert provider.diff("id", olds, dict(olds)).changes is False
    # How it reaches the API, how long it would wait, what a preview shows: nothing to redo.
    calmer = {**olds, "timeout_s": 60, "kubeconfig": "/b", "image": "reg/n/s:t1"}
    assert provider.diff("id", olds, calmer).changes is False
    for key in ("build_config_uid", "tag", "image_stream", "namespace"):
        result = provider.diff("id", olds, {**olds, key: "other"})
        assert result.changes is True and result.replaces == [key], key


def test_the_provider_host_reports_a_failed_build_without_a_traceback() -> None:
    from infra.toolchain.dynamic_host import message_or_traceback

    format_exc = message_or_traceback(lambda *_: "Traceback (most recent call last): ...")
    try:
        raise BuildFailed("image build atlas-x/b-1 of BuildConfig atlas-x/b ended Failed: DockerBuildFailed")
    except BuildFailed:
        shown = format_exc()
    assert shown == "image build atlas-x/b-1 of BuildConfig atlas-x/b ended Failed: DockerBuildFailed"
