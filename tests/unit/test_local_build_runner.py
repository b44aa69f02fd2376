"""The local BuildConfig runner (localenv/builds.py, a stand-in for OpenShift's build controller)
ends a build as OpenShift does: the phase for its reason, OpenShift's message, the log's last 5
lines as `logSnippet`; a cancelled build Cancelled, a build a stopped runner left behind Error.
The API is a fake that records what the runner writes; git and buildah are not run."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from localenv import build_objects, builds
from localenv.build_objects import Output
from localenv.builds import BuildFailed, Runner

STARTED = dt.datetime(2026, 12, 4, 10, 0, 0, tzinfo=dt.UTC)
FINISHED = STARTED + dt.timedelta(seconds=1.5)
LOG = "".join(f"line {i}\n" for i in range(1, 9))


@pytest.mark.parametrize(
    ("reason", "phase", "message", "snippet"),
    [
        ("DockerBuildFailed", "Failed", "Docker build strategy has failed.", "line 4\nline 5\nline 6\nline 7\nline 8"),
        ("FetchSourceFailed", "Failed", "Failed to fetch the input source.", "line 4\nline 5\nline 6\nline 7\nline 8"),
        ("InvalidContextDirectory", "Failed", "The supplied context directory does not exist.",
         "line 4\nline 5\nline 6\nline 7\nline 8"),
        ("PushImageToRegistryFailed", "Failed", "Failed to push the image to the registry.",
         "line 4\nline 5\nline 6\nline 7\nline 8"),
        ("GenericBuildFailed", "Failed", "Generic Build failure - check logs for details.",
         "line 4\nline 5\nline 6\nline 7\nline 8"),
        # OpenShift keeps a log snippet for Failed builds only.
        ("CancelledBuild", "Cancelled", "The build was cancelled by the user.", None),
        ("BuildPodDeleted", "Error", "The pod for this build was deleted before the build completed.", None),
        # A reason OpenShift has no message for here: its generic one.
        ("SomethingNew", "Failed", "Generic Build failure - check logs for details.",
         "line 4\nline 5\nline 6\nline 7\nline 8"),
    ],
)
def test_a_build_that_did_not_complete_reads_as_openshift_writes_it(
    reason: str, phase: str, message: str, snippet: str | None
) -> None:
    status = build_objects.ended_status(reason, LOG, STARTED, FINISHED)
    assert (status["phase"], status["reason"], status["message"]) == (phase, reason, message)
    assert status.get("logSnippet") == snippet
    assert status["completionTimestamp"] == "2026-12-04T10:00:01Z"
    assert status["duration"] == 1_500_000_000


def test_a_build_that_never_started_has_no_duration_and_an_empty_log_no_snippet() -> None:
    status = build_objects.ended_status("DockerBuildFailed", "\n", None, FINISHED)
    assert "duration" not in status and "logSnippet" not in status


class FakeApi:
    """The API calls the runner makes, recorded; GETs answer from `builds`."""

    def __init__(self, builds: list[dict[str, Any]]) -> None:
        self.builds = builds
        self.writes: list[tuple[str, str, Any]] = []

    def get(self, path: str) -> Any:
        if path.endswith("/builds"):
            return {"items": self.builds}
        name = path.rsplit("/", 1)[1]
        (found,) = [b for b in self.builds if b["metadata"]["name"] == name]
        return found

    def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> Any:
        self.writes.append((method, path, body))
        return body

    def statuses(self, name: str) -> list[Mapping[str, Any]]:
        return [body["status"] for method, path, body in self.writes
                if method == "PATCH" and path.endswith(f"/builds/{name}/status")]


def a_build(name: str, phase: str = "New", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {build_objects.BUILD_CONFIG_LABEL: "app"},
                     "creationTimestamp": "2026-12-04T09:59:00Z"},
        "spec": {"output": {"to": {"kind": "ImageStreamTag", "name": "app:v1"}}},
        "status": {"phase": phase, **status},
    }


class FailingRunner(Runner):
    """A runner whose build writes a log and fails as buildah does for a missing Containerfile."""

    def execute(self, build: Mapping[str, Any], output: Output, log: Path) -> tuple[str, str]:
        with log.open("a") as out:
            out.write("$ buildah build -f /tmp/src/missing/Containerfile .\n")
            out.write("Error: stat /tmp/src/missing/Containerfile: no such file or directory\n")
        raise BuildFailed("DockerBuildFailed", "buildah build of Containerfile failed (exit 125)")


def runner(api: FakeApi, tmp_path: Path, cls: type[Runner] = FailingRunner) -> Runner:
    return cls(api, tmp_path, "127.0.0.1:23510", logging.getLogger("test"))  # type: ignore[arg-type]


def test_a_failed_build_ends_failed_with_its_reason_openshifts_message_and_the_logs_end(tmp_path: Path) -> None:
    api = FakeApi([a_build("app-1")])
    runner(api, tmp_path).run_build(api.builds[0])
    phases = [s.get("phase") for s in api.statuses("app-1")]
    assert phases == ["Pending", "Running", "Failed"]
    ended = api.statuses("app-1")[-1]
    assert (ended["reason"], ended["message"]) == ("DockerBuildFailed", "Docker build strategy has failed.")
    assert ended["logSnippet"].splitlines()[-2:] == [
        "Error: stat /tmp/src/missing/Containerfile: no such file or directory",
        "error: buildah build of Containerfile failed (exit 125)",
    ]
    log = tmp_path / "builds" / "ns" / "app-1.log"
    assert log.read_text().endswith("error: buildah build of Containerfile failed (exit 125)\n")
    annotations = [b["metadata"]["annotations"] for m, p, b in api.writes if p.endswith("/builds/app-1")]
    assert annotations == [{build_objects.LOG_ANNOTATION: str(log)}]


def test_a_build_cancelled_before_it_ran_ends_cancelled_and_runs_nothing(tmp_path: Path) -> None:
    api = FakeApi([a_build("app-1", cancelled=True)])
    runner(api, tmp_path).run_build(api.builds[0])
    assert [s["phase"] for s in api.statuses("app-1")] == ["Cancelled"]
    assert api.statuses("app-1")[0]["reason"] == "CancelledBuild"
    assert not (tmp_path / "builds").exists()


def test_builds_a_stopped_runner_left_going_end_in_error_when_the_next_starts(tmp_path: Path) -> None:
    api = FakeApi([a_build("app-1", "Running"), a_build("app-2", "Pending"), a_build("app-3", "Complete"),
                   a_build("app-4", "New"), a_build("app-5", "Failed")])
    assert runner(api, tmp_path).recover() == 2
    assert [s["phase"] for s in api.statuses("app-1")] == ["Error"]
    assert api.statuses("app-2")[0]["reason"] == "BuildPodDeleted"
    assert all(not api.statuses(f"app-{n}") for n in (3, 4, 5))


def test_the_runner_looks_for_left_builds_once_the_api_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner starts with the API server, which may still answer 429 (storage initializing)."""
    monkeypatch.setattr(builds, "POLL_S", 0.0)
    stop = threading.Event()
    calls: list[str] = []

    class Scripted:
        log = logging.getLogger("test")

        def recover(self) -> int:
            calls.append("recover")
            if calls.count("recover") == 1:
                raise OSError("HTTP Error 429: storage is (re)initializing")
            return 0

        def round(self) -> int:
            calls.append("round")
            if calls.count("round") == 3:
                stop.set()
            return 0

    builds.serve(Scripted(), stop)  # type: ignore[arg-type]
    assert calls == ["recover", "recover", "round", "round", "round"]
