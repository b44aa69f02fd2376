"""The OpenShift side's JobCompletion: where a Job stands (table-driven), and the wait over a
scripted API (lists, watch windows, the Job's verdict, a dropped connection, a deleted Job)."""

from __future__ import annotations

import datetime
import urllib.error
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from infra.openshift import completion
from infra.openshift.completion import StepFailed, StepJob, assess, wait_for_step
from infra.timeparse import rfc3339

UID = "0b9d3c1e-uid"


def job(*conditions: str, uid: str = UID) -> dict[str, Any]:
    return {
        "metadata": {"name": "make-hdf5-x", "uid": uid},
        "status": {
            "conditions": [
                {"type": c.split(":")[0], "status": "True", "reason": c.split(":")[1] if ":" in c else ""}
                for c in conditions
            ]
        },
    }


def pod(name: str, phase: str, created: str = "2026-12-02T10:00:00Z", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase, **status}}


def exited(code: int, reason: str = "Error", finished: str = "2026-12-02T10:05:00Z") -> dict[str, Any]:
    terminated = {"exitCode": code, "reason": reason, "finishedAt": finished}
    return {"containerStatuses": [{"state": {"terminated": terminated}}]}


UNSCHEDULABLE = {
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/6 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            "lastTransitionTime": "2026-12-02T10:00:00Z",
        }
    ]
}
NO_GPU = {
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.",
            "lastTransitionTime": "2026-12-02T10:00:00Z",
        }
    ]
}
PULL_BACKOFF = {
    "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]
}


@pytest.mark.parametrize(
    ("the_job", "pods", "finished", "succeeded", "note"),
    [
        # The pod's success is enough: the controller's Complete comes a second later.
        (job(), [pod("p1", "Succeeded", **exited(0))], True, True, "pod p1 succeeded"),
        (job("Complete"), [], True, True, "the Job completed"),
        (job("SuccessCriteriaMet"), [], True, True, "the Job completed"),
        # A retry that succeeded after a failed attempt.
        (job(), [pod("p1", "Failed", **exited(1)), pod("p2", "Succeeded", "2026-12-02T10:01:00Z")], True, True,
         "pod p2 succeeded"),
        # The controller's verdict, with the last failed pod's exit.
        (job("Failed:BackoffLimitExceeded"), [pod("p1", "Failed", **exited(3))], True, False,
         "BackoffLimitExceeded; pod p1 exited 3 (Error)"),
        (job("Failed:DeadlineExceeded"), [], True, False, "DeadlineExceeded; no pod ran"),
        (job("FailureTarget:BackoffLimitExceeded"), [pod("p1", "Failed", **exited(137, "OOMKilled"))], True, False,
         "BackoffLimitExceeded; pod p1 exited 137 (OOMKilled)"),
        # Still going, and why.
        (job(), [], False, False, "no pod yet"),
        (job(), [pod("p1", "Pending", **UNSCHEDULABLE)], False, False,
         "pod p1 is not scheduled: Unschedulable: 0/6 nodes are available: pod has unbound immediate "
         "PersistentVolumeClaims."),
        (job(), [pod("p1", "Pending", **PULL_BACKOFF)], False, False,
         "pod p1 is waiting: ImagePullBackOff: Back-off pulling image"),
        (job(), [pod("p1", "Running")], False, False, "pod p1 is Running"),
        (job(), [pod("p1", "Failed", **exited(1)), pod("p2", "Running", "2026-12-02T10:01:00Z")], False, False,
         "pod p2 is Running (1 earlier attempt(s) failed)"),
        # A pod failed and the controller has not decided yet: retry or verdict.
        (job(), [pod("p1", "Failed", **exited(2))], False, False,
         "pod p1 exited 2 (Error); waiting for the Job's retry or verdict"),
    ],
)
def test_assess(the_job: dict[str, Any], pods: list[dict[str, Any]], finished: bool, succeeded: bool, note: str):
    progress = assess(the_job, pods)
    assert (progress.finished, progress.succeeded) == (finished, succeeded)
    assert progress.note.startswith(note), progress.note


def test_a_claim_that_never_binds_fails_the_step_after_five_minutes_not_at_its_deadline():
    since = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC).timestamp()
    waiting = [pod("p1", "Pending", **UNSCHEDULABLE)]
    assert not assess(job(), waiting, since + completion.UNBOUND_CLAIM_LIMIT_S - 1).finished
    failed = assess(job(), waiting, since + completion.UNBOUND_CLAIM_LIMIT_S)
    assert failed.finished and not failed.succeeded and failed.pod == "p1"
    assert "a claim it mounts has not bound in 300 s" in failed.note and "kubectl describe pvc" in failed.note
    # Waiting for GPUs is the queue doing its job: that goes on until the step's own deadline.
    assert not assess(job(), [pod("p1", "Pending", **NO_GPU)], since + 3600).finished


def test_a_success_names_its_pod_and_when_it_ended():
    progress = assess(job(), [pod("p1", "Succeeded", **exited(0, "Completed", "2026-12-02T10:09:00Z"))])
    assert (progress.pod, progress.exit_code, progress.finished_at) == ("p1", 0, "2026-12-02T10:09:00Z")


class ScriptedApi:
    """The few calls the wait makes, answered from a script: the Job's states in turn, one pod
    listing, and the watch windows' events in turn."""

    def __init__(
        self,
        jobs: list[dict[str, Any] | Exception],
        listing: list[dict[str, Any]],
        windows: list[list[dict[str, Any]] | Exception],
        log: str = "",
        events: list[dict[str, Any]] | None = None,
    ) -> None:
        self.jobs, self.listing, self.windows, self.log = list(jobs), listing, list(windows), log
        self.events = events or []
        self.calls: list[str] = []

    def get(self, path: str) -> Any:
        if "/events?" in path:
            self.calls.append("events")
            assert f"involvedObject.uid%3D{UID}%2Creason%3DFailedCreate" in path
            return {"items": self.events}
        if "/pods?" in path:
            self.calls.append("list")
            return {"metadata": {"resourceVersion": "10"}, "items": self.listing}
        self.calls.append("job")
        answer = self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def watch(self, path: str, version: str, stop: Any = None, timeout_s: int = 0) -> Iterator[Mapping[str, Any]]:
        self.calls.append(f"watch@{version}/{timeout_s}s")
        window = self.windows.pop(0) if self.windows else []
        if isinstance(window, Exception):
            raise window
        yield from window

    def text(self, path: str) -> str:
        self.calls.append("log")
        return self.log


STEP = StepJob(namespace="atlas-x", name="make-hdf5-x", uid=UID, step="make-hdf5", job_urn="urn:pulumi:s::p::Job::j")


def event(kind: str, obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
    return {"type": kind, "object": obj}


def test_the_wait_ends_on_the_pods_success_without_asking_the_job_again():
    api = ScriptedApi(
        [job()],
        [pod("p1", "Pending")],
        [[event("MODIFIED", pod("p1", "Running"), "11"), event("MODIFIED", pod("p1", "Succeeded", **exited(0)), "12")]],
    )
    notes: list[str] = []
    progress = wait_for_step(api, STEP, 60, notes.append)  # type: ignore[arg-type]
    assert progress.succeeded and progress.pod == "p1"
    assert api.calls == ["job", "list", "watch@10/10s"]
    assert notes == ["pod p1 is Pending", "pod p1 is Running"]


def test_a_failure_is_the_controllers_verdict_with_exit_code_log_and_rerun_command():
    api = ScriptedApi(
        [job(), job("Failed:BackoffLimitExceeded")],
        [pod("p1", "Running")],
        # The pod fails; the next window (short, the verdict is due) sees nothing new.
        [[event("MODIFIED", pod("p1", "Failed", **exited(3)), "11")], []],
        log="Traceback (most recent call last):\nValueError: no images",
    )
    with pytest.raises(StepFailed) as failed:
        wait_for_step(api, STEP, 60)  # type: ignore[arg-type]
    message = str(failed.value)
    assert "step 'make-hdf5' (Job atlas-x/make-hdf5-x) failed: BackoffLimitExceeded; pod p1 exited 3 (Error)" in message
    assert "ValueError: no images" in message
    assert "pulumi up --replace 'urn:pulumi:s::p::Job::j'" in message
    assert api.calls == ["job", "list", "watch@10/10s", "job", "log"]


def test_a_retry_after_a_failed_pod_is_followed_to_its_success():
    api = ScriptedApi(
        [job()],
        [pod("p1", "Running")],
        [
            [event("MODIFIED", pod("p1", "Failed", **exited(1)), "11")],
            [event("ADDED", pod("p2", "Pending", "2026-12-02T10:01:00Z"), "12"),
             event("MODIFIED", pod("p2", "Succeeded", "2026-12-02T10:01:00Z", **exited(0)), "13")],
        ],
    )
    progress = wait_for_step(api, STEP, 60)  # type: ignore[arg-type]
    assert progress.pod == "p2"
    assert api.calls == ["job", "list", "watch@10/10s", "job", "watch@11/1s"]


def test_an_expired_watch_lists_afresh(monkeypatch: pytest.MonkeyPatch):
    api = ScriptedApi(
        [job()],
        [pod("p1", "Running")],
        [[{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}]],
    )
    # The second list finds the pod done.
    listings = iter([[pod("p1", "Running")], [pod("p1", "Succeeded", **exited(0))]])
    original_get = api.get

    def get(path: str) -> Any:
        if "/pods?" in path:
            api.listing = next(listings)
        return original_get(path)

    monkeypatch.setattr(api, "get", get)
    assert wait_for_step(api, STEP, 60).succeeded  # type: ignore[arg-type]
    assert api.calls == ["job", "list", "watch@10/10s", "job", "list"]


def test_a_dropped_connection_is_retried(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(completion, "RETRY_S", 0.0)
    api = ScriptedApi(
        [job()],
        [pod("p1", "Running")],
        [ConnectionResetError(104, "Connection reset by peer"), [event("MODIFIED", pod("p1", "Succeeded"), "12")]],
    )
    notes: list[str] = []
    assert wait_for_step(api, STEP, 60, notes.append).succeeded  # type: ignore[arg-type]
    assert any("did not answer" in n and "Connection reset" in n for n in notes)


def test_a_job_deleted_outside_stops_the_wait_and_says_what_to_do():
    not_found = urllib.error.HTTPError("https://x/jobs/make-hdf5-x", 404, "Not Found", None, None)  # type: ignore[arg-type]
    api = ScriptedApi([job(), not_found], [pod("p1", "Running")], [[]])
    with pytest.raises(StepFailed, match=r"was deleted outside Atlas.*pulumi refresh"):
        wait_for_step(api, STEP, 60)  # type: ignore[arg-type]
    # A Job of the same name but another uid (deleted and re-created outside) is not ours either.
    api = ScriptedApi([job(uid="other")], [], [])
    with pytest.raises(StepFailed, match="deleted outside Atlas"):
        wait_for_step(api, STEP, 60)  # type: ignore[arg-type]


def test_the_wait_ends_at_its_timeout_saying_why_and_that_the_job_stays(monkeypatch: pytest.MonkeyPatch):
    clock = iter([0.0, 0.0, 100.0, 200.0, 300.0])
    monkeypatch.setattr(completion.time, "monotonic", lambda: next(clock))
    api = ScriptedApi([job()], [pod("p1", "Pending", **NO_GPU)], [[]])
    with pytest.raises(StepFailed) as failed:
        wait_for_step(api, STEP, 150)  # type: ignore[arg-type]
    assert "has not finished after 150 s (pod p1 is not scheduled: Unschedulable" in str(failed.value)
    assert "run `pulumi up` again to keep waiting" in str(failed.value)


def test_diff_replaces_the_completion_with_its_job_and_updates_the_rest():
    provider = completion.JobCompletionProvider()
    olds = {"job_uid": "a", "timeout_s": 10, "provider_version": "1"}
    assert provider.diff("id", olds, {**olds, "job_uid": "b"}).replaces == ["job_uid"]
    changed = provider.diff("id", olds, {**olds, "timeout_s": 20})
    assert changed.changes and not changed.replaces
    assert not provider.diff("id", olds, dict(olds)).changes


def test_an_image_that_cannot_be_pulled_fails_the_step_after_the_limit():
    created = rfc3339("2026-12-02T10:00:00Z")
    waiting = [pod("p1", "Pending", **PULL_BACKOFF)]
    assert not assess(job(), waiting, created + completion.IMAGE_PULL_LIMIT_S - 1).finished
    failed = assess(job(), waiting, created + completion.IMAGE_PULL_LIMIT_S)
    assert failed.finished and not failed.succeeded and failed.pod == "p1"
    assert failed.note.startswith("pod p1 cannot pull its image: ImagePullBackOff: Back-off pulling image;")
    # A name that can never be pulled fails at once.
    invalid = {"containerStatuses": [{"state": {"waiting": {"reason": "InvalidImageName", "message": "bad"}}}]}
    assert assess(job(), [pod("p1", "Pending", **invalid)], created + 1).finished


def node_ready(status: str, since: str = "2026-12-02T10:02:00Z") -> dict[str, Any]:
    return {"metadata": {"name": "atlas-node"}, "status": {"conditions": [
        {"type": "Ready", "status": status, "reason": "NodeStatusUnknown",
         "message": "Kubelet stopped posting node status.", "lastTransitionTime": since}]}}


def test_a_lost_node_fails_the_step_after_the_limit_and_a_ready_one_never():
    since = rfc3339("2026-12-02T10:02:00Z")
    running = [pod("p1", "Running")]
    assert not assess(job(), running, since + 3600, node_ready("True")).finished
    assert not assess(job(), running, since + completion.NODE_LOST_LIMIT_S - 1, node_ready("Unknown")).finished
    lost = assess(job(), running, since + completion.NODE_LOST_LIMIT_S, node_ready("Unknown"))
    assert lost.finished and not lost.succeeded
    assert "node atlas-node, which has not been Ready for 60 s (NodeStatusUnknown: Kubelet stopped posting" in lost.note
    assert "The Job stays" in lost.note


QUOTA_MESSAGE = (
    'Error creating: pods "train-x-abcde" is forbidden: exceeded quota: atlas-quota, requested: '
    "limits.memory=2Gi, used: limits.memory=1Gi, limited: limits.memory=2Gi"
)


def failed_create(first: str, last: str, message: str = QUOTA_MESSAGE) -> dict[str, Any]:
    return {"reason": "FailedCreate", "type": "Warning", "message": message,
            "firstTimestamp": first, "lastTimestamp": last}


@pytest.mark.parametrize(
    ("events", "found"),
    [
        ([], None),
        ([{"reason": "SuccessfulCreate", "message": "Created pod: p1",
           "firstTimestamp": "2026-12-02T10:00:00Z"}], None),
        ([failed_create("2026-12-02T10:00:00Z", "2026-12-02T10:03:00Z")],
         (rfc3339("2026-12-02T10:00:00Z"), QUOTA_MESSAGE)),
        # The earliest refusal dates it; the newest one's message is shown.
        ([failed_create("2026-12-02T10:01:00Z", "2026-12-02T10:04:00Z", "newest"),
          failed_create("2026-12-02T10:00:00Z", "2026-12-02T10:02:00Z", "older")],
         (rfc3339("2026-12-02T10:00:00Z"), "newest")),
    ],
)
def test_the_controllers_refusals_to_create_pods_are_read_from_its_events(
    events: list[dict[str, Any]], found: tuple[float, str] | None
) -> None:
    assert completion.refusal(events) == found


def test_pods_the_api_server_refuses_fail_the_step_after_the_limit_naming_its_message():
    since = rfc3339("2026-12-02T10:00:00Z")
    assert since is not None
    refused = (since, QUOTA_MESSAGE)
    early = assess(job(), [], since + completion.POD_REFUSED_LIMIT_S - 1, refused=refused)
    assert not early.finished and early.note == f"no pod yet: the API server refuses to create it: {QUOTA_MESSAGE}"
    failed = assess(job(), [], since + completion.POD_REFUSED_LIMIT_S, refused=refused)
    assert failed.finished and not failed.succeeded
    assert failed.note.startswith(f"the API server has refused to create its pod for 120 s: {QUOTA_MESSAGE}; ")
    assert "atlas:openshift.quota" in failed.note
    # A pod that exists is followed as before, whatever the events say.
    assert assess(job(), [pod("p1", "Running")], since + 3600, refused=refused).note == "pod p1 is Running"
    assert assess(job(), [], since + 3600).note == "no pod yet"


def test_the_wait_ends_when_the_api_server_keeps_refusing_the_pods():
    api = ScriptedApi([job()], [], [], events=[failed_create("2026-12-02T10:00:00Z", "2026-12-02T10:09:00Z")])
    with pytest.raises(StepFailed) as failed:
        wait_for_step(api, STEP, 60)  # type: ignore[arg-type]
    assert "step 'make-hdf5' (Job atlas-x/make-hdf5-x) failed: the API server has refused to create its pod" in str(
        failed.value
    )
    assert "exceeded quota: atlas-quota" in str(failed.value)
    assert api.calls == ["job", "list", "events"]
