"""SweepCompletion: a swept step's Indexed Job followed as one object, a letter per point in state.

What completion.py's JobCompletion is for a step's Job, for the Indexed Job of a swept step
(manifests/sweep_jobs.py), and what the HPC side's SweepJob keeps for its arrays
(infra/hpc/providers/sweep_job.py): one dynamic resource per sweep whose state holds one letter per
point, run-length encoded (infra/hpc/arrays.py: P pending, R running, D done, F failed, K killed
outside Atlas), so it does not grow with the points beyond that.

- up: where the sweep is awaited (a step comes after it, or `pipeline.await_last_step`), `create`
  holds until the whole Indexed Job finished: every index completed, or the controller's verdict
  (`Failed`: an index out of attempts); a sweep with a failed point fails `pulumi up`, naming the
  points and the end of a failed pod's log, so the steps after it are not created (the HPC side's
  `afterok`). Not awaited (a last step), it reads the elements once and returns.
- refresh: `read` reads the elements again. A Job deleted outside Atlas shows its unfinished
  points as `K`.
- Each read is one GET of the Job and one list of its pods (by the Job's controller uid), never
  one per point: `status.completedIndexes` and `status.failedIndexes` (range strings, `0-5,7`)
  say which points ended, the pods' `batch.kubernetes.io/job-completion-index` which run now.
  While it waits, it watches the Job alone, and lists the pods once a window to say why they do
  not start (completion.assess: a claim that never binds, an image that cannot be pulled).
- destroy: nothing to undo (the Job resource deletes the Job and its pods).
"""

from __future__ import annotations

import hashlib
import math
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed
from infra.hpc import arrays
from infra.index_ranges import index_ranges, parse_index_ranges
from infra.kubeapi import KubeApi
from infra.openshift import completion
from infra.openshift.completion import (
    AFTER_FAILURE_WINDOW_S,
    JOB_UPDATES,
    RETRY_S,
    WATCH_WINDOW_S,
    ApiAccess,
    StepFailed,
    StepJob,
    _api,
    _condition,
    _log_tail,
    assess,
    job_props,
)
from infra.openshift.manifests.sweep_jobs import INDEX_ANNOTATION
from infra.outputs import SweepArray, SweepOutputs

PROVIDER_VERSION = "1+" + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
SWEEP_OUTCOME_FIELDS = ("elements", "state", "counts")
# How many failed points a failure message names by number (the rest as a count).
NAMED_POINTS = 20


def job_finished(job: Mapping[str, Any]) -> bool:
    """The controller's verdict on the whole Job: complete, or failed (or about to be)."""
    return any(_condition(job, kind) for kind in ("Complete", "SuccessCriteriaMet", "Failed", "FailureTarget"))


def _pod_index(pod: Mapping[str, Any], size: int) -> int | None:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_ANNOTATION)
    if text is None or not str(text).isdigit() or int(text) >= size:
        return None
    return int(text)


def element_letters(
    size: int, job: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]], previous: str = ""
) -> str:
    """One letter per point of an Indexed Job of `size` completions, from the Job (None: it is
    gone) and its pods. Pure, table-tested (tests/unit/test_sweep_completion.py):

    - `status.completedIndexes`: D; `status.failedIndexes` (out of attempts): F;
    - else a pod of the index: Running R, Pending P, Succeeded D (the controller writes the
      index into completedIndexes a moment later); a failed pod alone is a retry to come: P;
    - else, while the Job runs: P (waiting for a pod); once the controller ended the Job, an index
      it never finished was ended with it (deleted, suspended for good, a deadline): K;
    - the Job gone (deleted outside Atlas): a point `previous`ly seen finished keeps its letter,
      every other is K.
    """
    if job is None:
        old = previous if len(previous) == size else ""
        return "".join(old[i] if old and old[i] in arrays.FINISHED else arrays.KILLED for i in range(size))
    status = job.get("status") or {}
    # The API leaves a field out (or empty) while no index is in it.
    completed, failed = (
        set(parse_index_ranges(status.get(field), size=size, where=f"status.{field}", empty_ok=True))
        for field in ("completedIndexes", "failedIndexes")
    )
    by_pod: dict[int, str] = {}
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", ""))):
        index = _pod_index(pod, size)
        if index is None:
            continue
        phase = (pod.get("status") or {}).get("phase", "Pending")
        letter = {"Running": arrays.RUNNING, "Succeeded": arrays.DONE}.get(phase, arrays.PENDING)
        if by_pod.get(index) != arrays.DONE:  # a newer failed attempt never undoes a success
            by_pod[index] = letter
    ended = job_finished(job)
    letters = []
    for i in range(size):
        if i in completed:
            letters.append(arrays.DONE)
        elif i in failed:
            letters.append(arrays.FAILED)
        elif by_pod.get(i) == arrays.DONE:
            letters.append(arrays.DONE)
        elif ended:
            letters.append(arrays.KILLED)
        else:
            letters.append(by_pod.get(i, arrays.PENDING))
    return "".join(letters)


def sweep_timeout_s(walltime_s: int, points: int, parallel: int, max_attempts: int, margin_s: int) -> float:
    """How long an awaited sweep may take: every point's walltime in waves of `parallel`, each
    attempt of each, and the margin a step gets (the Job's pods have their own deadlines)."""
    waves = math.ceil(points / max(1, min(parallel, points)))
    return float(walltime_s * waves * max_attempts + margin_s)


def sweep_outputs(
    points: int, job_name: str, elements: str, results: str, max_attempts: int
) -> SweepOutputs:
    """A swept step's `sweep` output: its one Indexed Job as the one array, offset 0."""
    return SweepOutputs(
        points=points,
        arrays=(SweepArray(job_id=job_name, offset=0, count=points),),
        elements=elements,
        results=results,
        max_attempts=max_attempts,
    )


def sweep_outputs_from(raw: Mapping[str, Any]) -> SweepOutputs:
    """`dataclasses.asdict(sweep_outputs(...))` (as the pipeline's `steps` carry it) read back."""
    return SweepOutputs(
        points=int(raw["points"]),
        arrays=tuple(SweepArray(**dict(a)) for a in raw["arrays"]),
        elements=str(raw["elements"]),
        results=str(raw["results"]),
        max_attempts=int(raw.get("max_attempts", 1)),
    )


# --- reading and waiting -----------------------------------------------------------------------


@dataclass(frozen=True)
class SweepRead:
    """One read of the Indexed Job: the Job (None: gone) and its pods."""

    job: Mapping[str, Any] | None
    pods: tuple[Mapping[str, Any], ...]


def read_sweep(api: KubeApi, job: StepJob) -> SweepRead:
    """One GET of the Job and one list of its pods (by controller uid). A Job that is not there,
    or is another Job of the same name (a different uid), reads as gone."""
    try:
        current: Mapping[str, Any] = api.get(job.job_path)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
        return SweepRead(None, ())
    if (current.get("metadata") or {}).get("uid") != job.uid:
        return SweepRead(None, ())
    return SweepRead(current, tuple(api.get(job.pods_path).get("items") or ()))


def _describe(letters: str) -> str:
    return ", ".join(f"{n} {word}" for word, n in arrays.counts(letters).items())


def _failure(api: KubeApi, job: StepJob, read: SweepRead, letters: str) -> StepFailed:
    """What a failed sweep says: which points, how the Job ended, a failed pod's last lines."""
    bad = [i for i, letter in enumerate(letters) if letter in (arrays.FAILED, arrays.KILLED)]
    named = index_ranges(bad[:NAMED_POINTS], empty_ok=True)
    if len(bad) > NAMED_POINTS:
        named += f" and {len(bad) - NAMED_POINTS} more"
    verdict = _condition(read.job or {}, "Failed") or _condition(read.job or {}, "FailureTarget") or {}
    reason = f"{verdict.get('reason', '')}: {verdict.get('message', '')}".strip(": ")
    failed_pods = [p for p in read.pods if (p.get("status") or {}).get("phase") == "Failed"]
    newest = max(failed_pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")), default=None)
    pod = str((newest or {}).get("metadata", {}).get("name", ""))
    tail = _log_tail(api, job.namespace, pod) if pod else ""
    return StepFailed(
        f"{job.label} failed: point(s) {named} did not succeed ({_describe(letters)})"
        + (f"; {reason}" if reason else "")
        + (f"\n--- last lines of the log of pod {pod}\n{tail}" if tail else "")
        + f"\n{job.rerun_hint()}"
    )


def _stuck(read: SweepRead, now: float, refused: tuple[float, str] | None = None) -> str | None:
    """Why the sweep cannot go on, if so (completion.assess's rules): its newest unfinished pod
    cannot start (a claim that never binds, an image that cannot be pulled), or it has no pod at
    all and the API server has refused to create one for long (`refused`: completion.refusal of
    the Job's FailedCreate events; a quota that admits fewer pods than `parallel` only slows it)."""
    active = [p for p in read.pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if not active and not (refused is not None and not read.pods):
        return None
    progress = assess({}, active, now, refused=refused if not read.pods else None)
    return progress.note if progress.finished and not progress.succeeded else None


def wait_for_sweep(
    api: KubeApi, job: StepJob, size: int, timeout_s: float, report: Callable[[str], None] = lambda _note: None
) -> str:
    """Follow an Indexed Job until every point ended; its letters once every one completed. Raise
    StepFailed where a point failed, the Job vanished, a pod cannot start, or the wait outlasted
    `timeout_s`. `report` hears the counts when they change. A dropped connection is retried."""
    deadline = time.monotonic() + timeout_s
    said = [""]

    def note(text: str) -> None:
        if text != said[-1]:
            report(text)
            said.append(text)

    while True:
        try:
            read = read_sweep(api, job)
            if read.job is None:
                raise StepFailed(
                    f"{job.label} was deleted outside Atlas while Atlas waited for it: "
                    "run `pulumi refresh`, then `pulumi up` to create it again"
                )
            letters = element_letters(size, read.job, read.pods)
            if job_finished(read.job) or not arrays.unfinished(letters):
                break
            refused = completion._refused(api, job, {}) if not read.pods else None
            stuck = _stuck(read, time.time(), refused)
            if stuck is not None:
                raise StepFailed(f"{job.label} cannot go on: {stuck}\n{job.rerun_hint()}")
            note(f"sweep of {size} point(s): {_describe(letters)}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StepFailed(
                    f"{job.label} has not finished after {timeout_s:g} s ({_describe(letters)}). The Job stays: "
                    "run `pulumi up` again to keep waiting (it is not created again)"
                )
            _watch_job(api, job, read.job, size, min(WATCH_WINDOW_S, max(1.0, remaining)))
        except (OSError, urllib.error.URLError) as error:  # refused, reset, timed out: not an answer
            if isinstance(error, urllib.error.HTTPError):
                raise
            if time.monotonic() > deadline:
                raise StepFailed(f"{job.label}: the API server did not answer ({error}) until the wait ended") from None
            note(f"the API server did not answer ({error}); asking again")
            time.sleep(RETRY_S)
    if set(letters) != {arrays.DONE}:
        raise _failure(api, job, read, letters)
    return letters


def _watch_job(api: KubeApi, job: StepJob, current: Mapping[str, Any], size: int, window_s: float) -> None:
    """Watch the Job alone for up to `window_s`; return early once its points' counts change (or
    it ended), so the caller reads it and its pods afresh."""
    name = urllib.parse.quote(f"metadata.name={job.name}")
    path = f"/apis/batch/v1/namespaces/{urllib.parse.quote(job.namespace)}/jobs?fieldSelector={name}"
    version = str((current.get("metadata") or {}).get("resourceVersion", ""))
    before = _progress_key(current)
    failing = bool((current.get("status") or {}).get("failed"))
    window = AFTER_FAILURE_WINDOW_S if failing else window_s
    for event in api.watch(path, version, timeout_s=int(max(1, window))):
        if event.get("type") in ("ERROR", "DELETED"):
            return
        obj = event.get("object") or {}
        if event.get("type") == "MODIFIED" and (job_finished(obj) or _progress_key(obj) != before):
            return


def _progress_key(job: Mapping[str, Any]) -> tuple[Any, ...]:
    status = job.get("status") or {}
    return tuple(status.get(k) for k in ("active", "ready", "succeeded", "failed", "completedIndexes", "failedIndexes"))


# --- the dynamic resource --------------------------------------------------------------------


def _outcome(letters: str) -> dict[str, Any]:
    return {
        "elements": arrays.encode(letters),
        "state": arrays.summary(letters).value,
        "counts": arrays.counts(letters),
    }


class SweepCompletionProvider(pulumi.dynamic.ResourceProvider):
    """Follows a swept step's Indexed Job (see the module's docstring)."""

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = changed(olds, news, ("job_uid", "size"))
        updates = changed(olds, news, (*JOB_UPDATES, "wait"))
        return pulumi.dynamic.DiffResult(changes=bool(replaces or updates), replaces=replaces)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        job, size = StepJob.of(props), int(props["size"])
        api = _api(props)
        if props.get("wait"):
            letters = wait_for_sweep(api, job, size, float(props["timeout_s"]), pulumi.log.info)
        else:
            read = read_sweep(api, job)
            letters = element_letters(size, read.job, read.pods)
        return pulumi.dynamic.CreateResult(f"{job.namespace}/{job.name}/sweep", {**props, **_outcome(letters)})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        job, size = StepJob.of(props), int(props["size"])
        read = read_sweep(_api(props), job)
        previous = arrays.decode(str(props.get("elements") or ""))
        letters = element_letters(size, read.job, read.pods, previous)
        if read.job is not None and arrays.unfinished(previous) and not arrays.unfinished(letters):
            pulumi.log.info(f"{job.label}: {_describe(letters)}")
        return pulumi.dynamic.ReadResult(id_, {**props, **_outcome(letters)})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult({**news, **{k: olds.get(k) for k in SWEEP_OUTCOME_FIELDS}})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # nothing to undo: reading changed nothing, and the Job resource deletes the Job


class SweepCompletion(pulumi.dynamic.Resource, module="openshift", name="SweepCompletion"):
    """A swept step's Indexed Job, its points' letters (see SweepCompletionProvider)."""

    elements: pulumi.Output[str]
    state: pulumi.Output[str]
    counts: pulumi.Output[dict[str, int]]

    def __init__(
        self,
        name: str,
        *,
        job: pulumi.CustomResource,
        step: str,
        size: int,
        access: ApiAccess,
        wait: bool,
        timeout_s: float,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            "provider_version": PROVIDER_VERSION,
            **job_props(job, step, access),
            "size": size,
            "wait": wait,
            "timeout_s": timeout_s,
            **dict.fromkeys(SWEEP_OUTCOME_FIELDS),
        }
        super().__init__(SweepCompletionProvider(), name, props, opts)
