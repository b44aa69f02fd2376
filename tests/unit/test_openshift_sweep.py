"""A swept step on the OpenShift side: its Indexed Job in the pipeline (under Pulumi mocks), the
points' letters from the Job's status and pods (table-driven), and the SweepCompletion's wait,
refresh and failure against a scripted API server."""

from __future__ import annotations

import dataclasses
import urllib.error
from collections.abc import Iterator, Mapping
from typing import Any

import pulumi
import pytest

from infra.hpc import arrays
from infra.index_ranges import index_ranges, parse_index_ranges
from infra.openshift import sweep_completion
from infra.openshift.completion import StepFailed, StepJob
from infra.openshift.environment import OpenShiftEnvironment, OpenShiftEnvironmentArgs
from infra.openshift.manifests.sweep_jobs import INDEX_ANNOTATION, points_config_map_data
from infra.openshift.settings import OpenShiftSettings, OpenShiftSettingsError
from infra.openshift.settings_parser import parse_openshift_settings
from infra.openshift.sweep_completion import (
    SweepCompletionProvider,
    element_letters,
    sweep_timeout_s,
    wait_for_sweep,
)
from infra.workload.load import load_workload
from infra.workload.model import Workload
from tests.support import REPO_ROOT
from tests.unit.openshift_fixtures import KEY, RecordingMonitor, install_mocks, local_raw, target_for

PROBE_SWEEP = load_workload(REPO_ROOT / "workloads" / "probe" / "sweep.yaml")
COMPLETION = "pulumi-python:dynamic/openshift:SweepCompletion"


@pytest.fixture
def mocks() -> RecordingMonitor:
    return install_mocks()


def settings(**pipeline: Any) -> OpenShiftSettings:
    raw = {k: v for k, v in local_raw().items() if k != "data"}
    if pipeline:
        raw["pipeline"] = pipeline
    return parse_openshift_settings(raw, KEY)


def swept_in_the_middle() -> Workload:
    """The probe's sweep with the swept step second, so that a step comes after it."""
    first, second, train = PROBE_SWEEP.steps
    return dataclasses.replace(PROBE_SWEEP, steps=(first, train, second))


def environment(workload: Workload, config: OpenShiftSettings, max_attempts: int = 1) -> OpenShiftEnvironment:
    return OpenShiftEnvironment(
        "openshift",
        OpenShiftEnvironmentArgs(
            target=target_for(config),
            stack="local",
            workload=workload.name,
            definition=workload,
            settings=config,
            run_id="run-7",
            sweep_max_attempts=max_attempts,
        ),
    )


# --- the pipeline ---------------------------------------------------------------------------------


@pulumi.runtime.test
def test_a_swept_step_is_one_indexed_job_that_the_next_step_waits_for(mocks):
    workload = swept_in_the_middle()
    env = environment(workload, settings(), max_attempts=2)
    sweep = workload.step("train").sweep
    assert sweep is not None

    def check(outputs: dict[str, Any]) -> None:
        points = mocks.named("openshift-pipeline-train-points")
        assert points.typ == "kubernetes:core/v1:ConfigMap"
        assert points.inputs["data"] == points_config_map_data(sweep)
        assert points.inputs["immutable"] is True and points.replace_on_changes == ["data"]
        assert points.inputs["metadata"]["labels"]["atlas.dev/step"] == "train"
        job = mocks.named("openshift-pipeline-train")
        spec = job.inputs["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 6, 2)
        assert spec["backoffLimitPerIndex"] == 1  # two attempts a point
        (volume,) = [v for v in spec["template"]["spec"]["volumes"] if v["name"] == "atlas-sweep"]
        assert volume["configMap"]["name"] == "openshift-pipeline-train-points-0a1b2c3d"
        assert job.delete_before_replace
        assert job.inputs["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
        # After the step before it, as any step; its completion holds the step after it.
        assert mocks.urn_of("openshift-pipeline-make-hdf5-done") in job.dependencies
        done = mocks.named("openshift-pipeline-train-done")
        assert done.typ == COMPLETION
        assert job.urn in done.dependencies and done.inputs["job_urn"] == job.urn
        assert (done.inputs["wait"], done.inputs["size"], done.inputs["step"]) == (True, 6, "train")
        # Three waves of two points, each up to its 30 min walltime, each twice at most; the margin.
        assert done.inputs["timeout_s"] == 3 * 1800 * 2 + 600
        after = mocks.named("openshift-pipeline-inception-moments")
        assert done.urn in after.dependencies and job.urn not in after.dependencies
        assert not [r for r in mocks.registered if r.name == "openshift-pipeline-train-done" and r.typ != COMPLETION]
        # The outputs name the sweep as one object: its Indexed Job, offset 0, every point.
        steps = {s["name"]: s for s in outputs["steps"]}
        assert steps["make-hdf5"]["sweep"] is None
        assert steps["train"]["job"] == "openshift-pipeline-train-0a1b2c3d"
        assert steps["train"]["sweep"] == {
            "points": 6,
            "arrays": [{"job_id": "openshift-pipeline-train-0a1b2c3d", "offset": 0, "count": 6, "points": []}],
            "elements": "",  # the mocks read nothing; the provider's read fills it (tests below)
            "results": "results/train",
            "max_attempts": 2,
        }

    return env.outputs.apply(check)


@pulumi.runtime.test
def test_a_last_swept_step_is_read_not_awaited_unless_the_stack_awaits_the_last_step(mocks):
    awaited_env = environment(PROBE_SWEEP, settings(await_last_step=True))
    plain = OpenShiftEnvironment(
        "plain",
        OpenShiftEnvironmentArgs(
            target=target_for(settings(), namespace="atlas-plain"),
            stack="local",
            workload=PROBE_SWEEP.name,
            definition=PROBE_SWEEP,
            settings=settings(),
            run_id="run-7",
        ),
    )

    def check(_: Any) -> None:
        assert mocks.named("plain-pipeline-train-done").inputs["wait"] is False
        assert mocks.named("openshift-pipeline-train-done").inputs["wait"] is True
        assert mocks.named("plain-pipeline-train").inputs["spec"]["backoffLimitPerIndex"] == 0
        # Only the swept step has a table of points and a SweepCompletion.
        assert sorted(r.name for r in mocks.registered if r.typ == COMPLETION) == [
            "openshift-pipeline-train-done", "plain-pipeline-train-done"
        ]
        assert sorted(r.name for r in mocks.registered if r.name.endswith("-points")) == [
            "openshift-pipeline-train-points", "plain-pipeline-train-points"
        ]

    return pulumi.Output.all(awaited_env.outputs, plain.outputs).apply(check)


@pulumi.runtime.test
def test_the_managed_quota_holds_as_many_points_at_once_as_the_sweep_runs(mocks):
    env = environment(PROBE_SWEEP, settings())

    def check(_: Any) -> None:
        hard = mocks.named("openshift-quota").inputs["spec"]["hard"]
        # The probe's training point asks for one GPU, one CPU and 2Gi; two points run at once.
        assert hard["requests.nvidia.com/gpu"] == "2"
        assert hard["requests.cpu"] == "2100m"  # and the monitor's 100m

    return env.outputs.apply(check)


def test_a_quota_too_small_for_the_sweeps_parallel_points_is_refused_naming_parallel() -> None:
    raw = {k: v for k, v in local_raw().items() if k != "data"}
    raw["quota"] = {"gpus": 1}
    with pytest.raises(
        OpenShiftSettingsError,
        match=r"atlas:openshift\.quota\.gpus: step 'train' asks for 2 GPUs \(2 points of its sweep at once\), over "
        r"the quota of 1.*or its sweep's parallel \(steps\[train\]\.sweep\.parallel\)",
    ):
        environment(PROBE_SWEEP, parse_openshift_settings(raw, KEY))


def test_a_point_runs_at_least_once() -> None:
    with pytest.raises(ValueError, match=r"^atlas:sweep\.max_attempts: 0 attempts; a point runs at least once"):
        environment(PROBE_SWEEP, settings(), max_attempts=0)


def test_an_awaited_sweep_may_take_every_wave_of_every_attempt() -> None:
    assert sweep_timeout_s(60, 6, 2, 1, 600) == 3 * 60 + 600
    assert sweep_timeout_s(60, 5, 2, 3, 0) == 3 * 60 * 3
    assert sweep_timeout_s(60, 4, 10, 1, 0) == 60  # all at once


# --- the points' letters --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size", "expected"),
    [("", 4, set()), (None, 4, set()), ("2", 4, {2}), ("0-2,5", 6, {0, 1, 2, 5}), ("1,3-5", 6, {1, 3, 4, 5})],
)
def test_index_ranges_are_read_as_the_api_writes_them(text: str | None, size: int, expected: set[int]) -> None:
    assert set(parse_index_ranges(text, size=size, empty_ok=True)) == expected
    assert set(parse_index_ranges(index_ranges(expected, empty_ok=True), size=size, empty_ok=True)) == expected


@pytest.mark.parametrize("text", ["a", "1-", "3-1", "0-6", "-2", "1,,x"])
def test_index_ranges_the_api_does_not_write_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"status\.completedIndexes"):
        parse_index_ranges(text, size=6, where="status.completedIndexes", empty_ok=True)


def test_indexes_are_written_as_ranges() -> None:
    assert index_ranges([5, 0, 1, 2, 7, 8], empty_ok=True) == "0-2,5,7-8"
    assert index_ranges([], empty_ok=True) == ""


def job(completed: str = "", failed: str = "", condition: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"completedIndexes": completed, "failedIndexes": failed}
    if condition is not None:
        status["conditions"] = [{"type": condition, "status": "True", "reason": "FailedIndexes", "message": "m"}]
    return {"metadata": {"name": "j", "uid": "u", "resourceVersion": "1"}, "status": status}


def pod(index: int, phase: str, created: str = "2026-12-05T10:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {"name": f"j-{index}-{phase}", "annotations": {INDEX_ANNOTATION: str(index)},
                     "creationTimestamp": created},
        "status": {"phase": phase},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("status", "pods", "previous", "expected"),
    [
        # Nothing started: every point waits.
        (job(), [], "", "PPPP"),
        # Running and pending pods by their index; the others wait for a pod.
        (job(), [pod(0, "Running"), pod(1, "Pending")], "", "RPPP"),
        # Ended points from the status; the running one from its pod.
        (job("0-1", "3"), [pod(2, "Running")], "", "DDRF"),
        # A pod that succeeded counts before the controller writes its index.
        (job("0"), [pod(1, "Succeeded")], "", "DDPP"),
        # A failed attempt with a retry to come waits; a newer failed attempt never undoes a success.
        (job(), [pod(0, "Failed"), pod(1, "Succeeded"), pod(1, "Failed", "2026-12-05T10:01:00Z")], "", "PDPP"),
        # Every point done.
        (job("0-3", condition="Complete"), [], "", "DDDD"),
        # The controller's verdict: out of attempts at 2; the Job ended before 3 ran.
        (job("0-1", "2", condition="Failed"), [], "", "DDFK"),
        # The Job gone (deleted outside Atlas): what had ended keeps its letter, the rest was killed.
        (None, [], "DRFP", "DKFK"),
        (None, [], "", "KKKK"),
        # Pods of no index of this Job (an annotation past its size) are not read.
        (job(), [pod(9, "Running")], "", "PPPP"),
    ],
)
def test_a_points_letter_comes_from_the_jobs_status_and_its_pods(
    status: dict[str, Any] | None, pods: list[dict[str, Any]], previous: str, expected: str
) -> None:
    assert element_letters(4, status, pods, previous) == expected


def test_ten_thousand_points_are_read_from_two_range_strings() -> None:
    letters = element_letters(10_000, job("0-9997", "9998-9999", condition="Failed"), [])
    assert arrays.encode(letters) == "D9998F2"


# --- the wait, the refresh and a failure, against a scripted API server -------------------------------


class ScriptedApi:
    """The Job's states, one per GET of it (the last repeats); its pods; a watch that ends at once."""

    def __init__(
        self,
        jobs: list[dict[str, Any] | None],
        pods: list[dict[str, Any]] | None = None,
        events: list[dict[str, Any]] | None = None,
    ) -> None:
        self.jobs = jobs
        self.pods = pods or []
        self.events = events or []
        self.calls: list[str] = []

    def get(self, path: str) -> Any:
        self.calls.append(path)
        if "/pods" in path:
            return {"items": self.pods}
        if "/events" in path:
            return {"items": self.events}
        current = self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]
        if current is None:
            raise urllib.error.HTTPError(path, 404, "not found", None, None)  # type: ignore[arg-type]
        return current

    def watch(self, path: str, version: str, timeout_s: int = 10) -> Iterator[Mapping[str, Any]]:
        self.calls.append(f"watch {path}")
        yield {"type": "MODIFIED", "object": self.jobs[0] or {}}

    def text(self, path: str) -> str:
        self.calls.append(path)
        return "Traceback\nValueError: G_lr is not a number"


STEP = StepJob(namespace="ns", name="j", uid="u", step="train")


def test_the_wait_holds_until_every_point_completed_reading_the_job_not_each_point() -> None:
    api = ScriptedApi([job(), job("0-1"), job("0-3", condition="Complete")], [pod(2, "Running")])
    notes: list[str] = []
    letters = wait_for_sweep(api, STEP, 4, 60, notes.append)  # type: ignore[arg-type]
    assert letters == "DDDD"
    assert notes == ["sweep of 4 point(s): 3 pending, 1 running", "sweep of 4 point(s): 1 pending, 1 running, 2 done"]
    # One GET of the Job and one list of its pods per read, one watch of the Job between: never per point.
    reads = [c for c in api.calls if c.endswith("/jobs/j")]
    assert len(reads) == 3 and sum("/pods" in c for c in api.calls) == 3
    watches = [c for c in api.calls if c.startswith("watch")]
    assert watches and all("fieldSelector=metadata.name%3Dj" in c for c in watches)


def test_a_failed_point_fails_the_wait_naming_it_and_its_log() -> None:
    api = ScriptedApi([job("0-1,3", "2", condition="Failed")], [pod(2, "Failed")])
    with pytest.raises(StepFailed) as failed:
        wait_for_sweep(api, STEP, 4, 60)  # type: ignore[arg-type]
    message = str(failed.value)
    assert message.startswith("step 'train' (Job ns/j) failed: point(s) 2 did not succeed (3 done, 1 failed); ")
    assert "FailedIndexes: m" in message
    assert "--- last lines of the log of pod j-2-Failed\nTraceback\nValueError: G_lr is not a number" in message
    assert "Fix the step and run `pulumi up` again" in message


def test_a_job_deleted_while_atlas_waits_fails_the_wait() -> None:
    with pytest.raises(StepFailed, match=r"was deleted outside Atlas while Atlas waited for it: run `pulumi refresh`"):
        wait_for_sweep(ScriptedApi([job(), None]), STEP, 4, 60)  # type: ignore[arg-type]


def test_a_sweep_that_outlasts_its_wait_says_the_job_stays() -> None:
    with pytest.raises(StepFailed, match=r"has not finished after 0 s \(4 pending\)\. The Job stays"):
        wait_for_sweep(ScriptedApi([job()]), STEP, 4, 0)  # type: ignore[arg-type]


def test_a_sweep_whose_pods_the_api_server_refuses_fails_with_its_message() -> None:
    refused = {"reason": "FailedCreate", "firstTimestamp": "2020-01-01T10:00:00Z",
               "lastTimestamp": "2020-01-01T10:05:00Z", "message": "exceeded quota: compute, requested: cpu=1"}
    with pytest.raises(StepFailed) as failed:
        wait_for_sweep(ScriptedApi([job()], events=[refused]), STEP, 4, 60)  # type: ignore[arg-type]
    message = str(failed.value)
    assert message.startswith("step 'train' (Job ns/j) cannot go on: the API server has refused to create its pod")
    assert "exceeded quota: compute" in message and "atlas:openshift.quota" in message
    # Some pods and a refusal for the others: a quota that admits fewer than `parallel` only slows it.
    slowed = ScriptedApi([job(), job("0-3", condition="Complete")], [pod(0, "Running")], events=[refused])
    assert wait_for_sweep(slowed, STEP, 4, 60) == "DDDD"  # type: ignore[arg-type]
    assert not [c for c in slowed.calls if "/events" in c]


def props(**extra: Any) -> dict[str, Any]:
    return {"namespace": "ns", "job_name": "j", "job_uid": "u", "step": "train", "size": 4, "timeout_s": 60,
            "kubeconfig": None, "context": None, **extra}  # fmt: skip


def test_up_reads_an_unawaited_sweep_once_and_refresh_reads_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = SweepCompletionProvider()
    api = ScriptedApi([job()], [pod(0, "Running")])
    monkeypatch.setattr(sweep_completion, "_api", lambda _props: api)
    created = provider.create(props(wait=False))
    assert created.outs["elements"] == "R1P3" and created.outs["state"] == "running"
    assert created.outs["counts"] == {"pending": 3, "running": 1}
    assert not [c for c in api.calls if c.startswith("watch")]
    # Refresh: the Job moved on; then it was deleted outside Atlas (what ended keeps its letter).
    api.jobs, api.pods = [job("0-2", "3", condition="Failed")], []
    read = provider.read(created.id, created.outs)
    assert read.outs["elements"] == "D3F1" and read.outs["state"] == "failed"
    api.jobs = [None]
    gone = provider.read(created.id, {**created.outs, "elements": "D2R1F1"})
    assert gone.outs["elements"] == "D2K1F1"
    # Another Job of the same name (a different uid) is not this sweep's.
    api.jobs = [{**job("0-3"), "metadata": {"name": "j", "uid": "other"}}]
    assert provider.read(created.id, {**created.outs, "elements": "P4"}).outs["elements"] == "K4"


def test_a_changed_job_is_followed_anew_and_other_changes_keep_the_letters() -> None:
    provider = SweepCompletionProvider()
    olds = {**props(wait=True, job_uid="u"), "elements": "D4", "state": "succeeded", "counts": {"done": 4}}
    assert provider.diff("id", olds, {**props(wait=True), "job_uid": "v"}).replaces == ["job_uid"]
    assert provider.diff("id", olds, props(wait=True, size=5)).replaces == ["size"]
    changed = provider.diff("id", olds, props(wait=True, timeout_s=120))
    assert changed.changes and not changed.replaces
    assert not provider.diff("id", olds, props(wait=True)).changes
    updated = provider.update("id", olds, props(wait=True, timeout_s=120))
    assert updated.outs["elements"] == "D4" and updated.outs["timeout_s"] == 120
