"""A swept step's records on one side: every point's element (one query per array, the scheduler's
or the API's) and the sweep's metric read at each point. The figures are infra/compare/sweeps.py's.

The metric is the step's declared one (model.Sweep.metric): the last match of `pattern` in the
element's own log (HPC: `<logs>/<step>.<array>_<index>`; Kubernetes: the pod's log through the
API), or the number `file` holds in the point's results folder (`<results>/point-<index>`; SFTP,
or on Kubernetes the results PVC through the run's monitor). What
cannot be read is a `MetricReading` with no value and the reason, never a zero. `read_metric` is
pure; the collectors give it the files' text.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from infra.compare.records import ElementRecord, MetricReading, Missing, StepRecord, SweepRecord, step_record
from infra.compare.remote_files import RemoteFiles
from infra.hpc.remote import Runner
from infra.hpc.scheduler import Phase, Scheduler
from infra.index_ranges import parse_index_ranges
from infra.kubeapi import KubeRequestError
from infra.outputs import BatchStep, HpcOutputs, KubernetesOutputs, KubeStep, SweepOutputs
from infra.timeparse import rfc3339
from infra.workload.model import Sweep, SweepMetric

NO_DEFINITION = "not measured: the workload's definition was not loaded, so the sweep's metric is not known"
NO_METRIC = "not measured: the sweep declares no metric (sweep.metric)"
# The Indexed Job's pods carry their index here (Kubernetes 1.24+: label and annotation).
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def read_metric(point: int, text: str, metric: SweepMetric, where: str) -> MetricReading:
    """The metric at one point from its text: with `pattern`, the first group of its last match in
    the log; with `file`, the number the file holds (surrounding blanks allowed)."""
    if metric.pattern is not None:
        pattern = re.compile(metric.pattern)
        for line in reversed(text.splitlines()):
            match = pattern.search(line)
            if match is None:
                continue
            try:
                return MetricReading(point, float(match.group(1)), f"{where}: {line.strip()[:200]}")
            except (IndexError, ValueError):
                return MetricReading(point, None, f"not measured: {where}: {line.strip()[:200]!r} holds no number")
        return MetricReading(point, None, f"not measured: no line of {where} matches sweep.metric.pattern")
    try:
        return MetricReading(point, float(text.strip()), where)
    except ValueError:
        return MetricReading(point, None, f"not measured: {where} holds {text.strip()[:80]!r}, not a number")


def _metric_of(definition: Sweep | None, why: str) -> SweepMetric | Missing:
    if definition is None:
        return Missing(f"{NO_DEFINITION} ({why})" if why else NO_DEFINITION)
    return definition.metric if definition.metric is not None else Missing(NO_METRIC)


def with_sweep_steps(
    steps: tuple[StepRecord, ...] | Missing, sweeps: Sequence[SweepRecord]
) -> tuple[StepRecord, ...] | Missing:
    """The steps' records with each swept step's made from its elements: requested at the first
    request, started at the first start, finished at the last end once every point's element has
    ended (so `compare --wait` and the wall time wait for the whole sweep), its state the elements
    by state. The scheduler's record of a swept step's id alone is one array's, not the sweep's."""
    if isinstance(steps, Missing):
        return steps
    by_step = {s.step: s for s in sweeps}
    return tuple(_sweep_step(record, by_step[record.step]) if record.step in by_step else record for record in steps)


def _sweep_step(record: StepRecord, sweep: SweepRecord) -> StepRecord:
    elements = sweep.elements
    finished = len(elements) == sweep.points and all(e.phase in FINISHED_PHASES for e in elements)
    counts: dict[str, int] = {}
    for e in elements:
        counts[e.phase] = counts.get(e.phase, 0) + 1

    def first(values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return min(known) if known else None

    ends = [e.finished_at for e in elements if e.finished_at is not None]
    return step_record(
        record.step,
        ", ".join(sweep.arrays) or record.job,
        "sweep: " + ", ".join(f"{phase} {n}" for phase, n in sorted(counts.items())),
        "; ".join(dict.fromkeys(e.source for e in elements if e.source and not e.source.startswith("no "))),
        requested_at=first([e.requested_at for e in elements]),
        scheduled_at=first([e.started_at for e in elements]),
        started_at=first([e.started_at for e in elements]),
        finished_at=max(ends) if finished and ends else None,
        exit_code=None,
        pending_reason=record.pending_reason,
        gpus_requested=record.gpus_requested,
        gpus_allocated=record.gpus_allocated,
        node=", ".join(dict.fromkeys(e.node for e in elements if e.node)),
        simulated=any(e.simulated for e in elements),
        argv=record.argv,
    )


FINISHED_PHASES = frozenset({Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.CANCELLED.value})


Readings = tuple[MetricReading, ...]
AnyStep = TypeVar("AnyStep", BatchStep, KubeStep)


def _sweep_records(
    steps: Sequence[AnyStep],
    elements_of: Callable[[AnyStep, SweepOutputs], tuple[tuple[ElementRecord, ...], tuple[str, ...]]],
    read: Callable[[AnyStep, SweepOutputs, SweepMetric, Sequence[ElementRecord]], Readings],
    definitions: Mapping[str, Sweep],
    definition_note: str,
) -> tuple[SweepRecord, ...]:
    """Each swept step of a side, in order: its elements (`elements_of`: the records and notes),
    its metric at each one (`read`, where the step's definition declares one)."""
    found = []
    for step in steps:
        if step.sweep is None:
            continue
        elements, notes = elements_of(step, step.sweep)
        definition = definitions.get(step.name)
        metric = _metric_of(definition, definition_note)
        readings = metric if isinstance(metric, Missing) else read(step, step.sweep, metric, elements)
        found.append(
            SweepRecord(
                step=step.name,
                points=step.sweep.points,
                elements=elements,
                arrays=tuple(a.job_id for a in step.sweep.arrays),
                notes=notes,
                metric=readings,
                definition=definition,
            )
        )
    return tuple(found)


# --- an HPC side -------------------------------------------------------------------------------------


def _year_of(submitted_at: str) -> int:
    """The year LSF does not print: the submission's (stack outputs), else this one."""
    return int(submitted_at[:4]) if submitted_at[:4].isdigit() else dt.datetime.now(dt.UTC).year


def collect_hpc_sweeps(
    scheduler: Scheduler,
    runner: Runner,
    outputs: HpcOutputs,
    files: RemoteFiles,
    raw_dir: Path,
    definitions: Mapping[str, Sweep],
    definition_note: str = "",
) -> tuple[SweepRecord, ...]:
    """Each swept step of an HPC side: its elements through the scheduler's array queries, its
    metric from each element's log or its point's folder (SFTP)."""

    def elements_of(step: BatchStep, sweep: SweepOutputs) -> tuple[tuple[ElementRecord, ...], tuple[str, ...]]:
        return scheduler.collect_sweep_records(runner, sweep, outputs.host, _year_of(step.submitted_at))

    def read(step: BatchStep, sweep: SweepOutputs, metric: SweepMetric, elements: Sequence[ElementRecord]) -> Readings:
        where = f"on {outputs.login} (SFTP)"
        folder = raw_dir / "sweeps" / step.name
        folder.mkdir(parents=True, exist_ok=True)
        return tuple(
            _read_hpc_metric(element, metric, scheduler, step.name, outputs, sweep, files, folder, where)
            for element in elements
        )

    return _sweep_records(outputs.steps, elements_of, read, definitions, definition_note)


def _read_hpc_metric(
    element: ElementRecord,
    metric: SweepMetric,
    scheduler: Scheduler,
    step: str,
    outputs: HpcOutputs,
    sweep: SweepOutputs,
    files: RemoteFiles,
    folder: Path,
    where: str,
) -> MetricReading:
    if metric.pattern is not None:
        remote = posixpath.join(outputs.logs.path, scheduler.array_log_name(step, element.array, element.index))
    else:
        assert metric.file is not None  # parse_sweep: a metric has a pattern or a file
        remote = posixpath.join(outputs.run_dir, sweep.results, f"point-{element.point}", metric.file)
    local = folder / f"point-{element.point}.{'log' if metric.pattern is not None else 'metric'}"
    if not files.fetch(remote, local):
        return MetricReading(element.point, None, f"not measured: no {remote} {where}")
    return read_metric(element.point, local.read_text(errors="replace"), metric, f"{remote} {where}")


# --- the Kubernetes side ------------------------------------------------------------------------------

PodLog = Callable[[str], str]  # an API GET of a pod's log path -> its text


@dataclass(frozen=True)
class ResultsVolume:
    """The results PVC as the report reads it: through the run's monitor (`/files/results`, served
    when a sweep is ranked by a file), looked up when first needed; fetched files go to `folder`."""

    monitor: Callable[[], RemoteFiles | None]
    folder: Path


def kube_sweep_elements(
    sweep: SweepOutputs,
    jobs: Mapping[str, Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    simulated_nodes: frozenset[str],
    source: str,
) -> tuple[tuple[ElementRecord, ...], tuple[str, ...]]:
    """Every point's record from the Indexed Jobs (`jobs` by name) and their pods: the Job's
    creation is the request, the pod's container start and finish the element's; the last pod of
    an index (the latest created: earlier ones failed and were retried) is its record. A point
    whose last Job holds no pod of its index is UNKNOWN, saying so."""
    by_point: dict[int, ElementRecord] = {}
    attempts: dict[int, int] = {}
    notes = []
    for array in sweep.arrays:
        job = jobs.get(array.job_id)
        if job is None:
            notes.append(f"Indexed Job {array.job_id}: not found in the API (deleted, or never created)")
        requested = rfc3339(((job or {}).get("metadata") or {}).get("creationTimestamp"))
        last: dict[int, Mapping[str, Any]] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            if (labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")) != array.job_id:
                continue
            text = (meta.get("annotations") or {}).get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX)
            if text is None or not str(text).isdigit():
                continue
            index = int(text)
            if index not in last or meta.get("creationTimestamp", "") >= (last[index].get("metadata") or {}).get(
                "creationTimestamp", ""
            ):
                last[index] = pod
        # A retry Job runs a table of just its points, indexed from 0 (docs/architecture.md, "Sweeps").
        points = dict(enumerate(array.points)) if array.points else {i: array.offset + i for i in range(array.count)}
        status = (job or {}).get("status") or {}
        # Lenient: the report reads what it can of an odd answer rather than fail.
        completed = set(parse_index_ranges(status.get("completedIndexes"), lenient=True))
        failed = set(parse_index_ranges(status.get("failedIndexes"), lenient=True))
        ended = job is not None and _job_ended(status)
        for position, point in points.items():
            attempts[point] = attempts.get(point, 0) + 1
            ran = last.get(position)
            element = (
                _pod_element(point, ran, requested, array.job_id, position, attempts[point], simulated_nodes, source)
                if ran is not None
                else None
            )
            if element is not None:
                # The Job's own account of an index beats its last pod's: completedIndexes, failedIndexes
                # (out of attempts); a failed pod of an index in neither, while the Job runs, is a retry to come.
                if position in completed:
                    element = dataclasses.replace(element, phase=Phase.SUCCEEDED.value)
                elif position not in failed and element.phase == Phase.FAILED.value and not ended:
                    element = dataclasses.replace(
                        element, phase=Phase.PENDING.value, state=f"{element.state}, retry to come"
                    )
            elif position in completed or position in failed:
                done = position in completed
                phase, what = (Phase.SUCCEEDED, "completedIndexes") if done else (Phase.FAILED, "failedIndexes")
                why = f"the Job's {what} holds it; its pod is gone"
                element = _no_pod(point, array.job_id, position, attempts[point], requested, source, phase, why)
            elif ended:
                why = "the Job ended before this index ran (deleted, suspended, a deadline)"
                element = _no_pod(
                    point, array.job_id, position, attempts[point], requested, source, Phase.CANCELLED, why
                )
            by_point[point] = element or _no_pod(
                point,
                array.job_id,
                position,
                attempts[point],
                requested,
                source,
                Phase.UNKNOWN,
                f"no pod of {array.job_id} has completion index {position}",
            )
    return tuple(by_point[p] for p in sorted(by_point)), tuple(notes)


def _job_ended(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in status.get("conditions") or ()
    )


def _no_pod(
    point: int, job: str, index: int, attempt: int, requested: float | None, source: str, phase: Phase, why: str
) -> ElementRecord:
    return ElementRecord(
        point=point,
        job=f"{job} index {index}",
        state=f"no pod: {why}",
        phase=phase.value,
        requested_at=requested,
        started_at=None,
        finished_at=None,
        exit_code=None,
        node="",
        source=source,
        attempt=attempt,
        array=job,
        index=index,
    )


POD_PHASES = {
    "Pending": Phase.PENDING,
    "Running": Phase.RUNNING,
    "Succeeded": Phase.SUCCEEDED,
    "Failed": Phase.FAILED,
    "Unknown": Phase.UNKNOWN,
}


def _pod_element(
    point: int,
    pod: Mapping[str, Any],
    requested: float | None,
    job: str,
    index: int,
    attempt: int,
    simulated_nodes: frozenset[str],
    source: str,
) -> ElementRecord:
    status = pod.get("status") or {}
    started = finished = None
    exit_code: int | None = None
    reason = ""
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        if state.get("terminated"):
            started = rfc3339(state["terminated"].get("startedAt"))
            finished = rfc3339(state["terminated"].get("finishedAt"))
            exit_code = state["terminated"].get("exitCode")
            reason = str(state["terminated"].get("reason") or "")
        elif state.get("running"):
            started = rfc3339(state["running"].get("startedAt"))
    native = str(status.get("phase") or "Unknown")
    phase = POD_PHASES.get(native, Phase.UNKNOWN)
    # A container ended by a signal it did not ask for (143 = SIGTERM, 137 = SIGKILL): killed.
    if phase is Phase.FAILED and exit_code in (137, 143) and reason != "OOMKilled":
        phase = Phase.CANCELLED
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return ElementRecord(
        point=point,
        job=str((pod.get("metadata") or {}).get("name", "")),
        state=native + (f" ({reason})" if reason else ""),
        phase=phase.value,
        requested_at=requested,
        started_at=started,
        finished_at=finished,
        exit_code=exit_code,
        node=node,
        source=source,
        simulated=node in simulated_nodes,
        attempt=attempt,
        array=job,
        index=index,
    )


def collect_kube_sweeps(
    outputs: KubernetesOutputs,
    jobs: Mapping[str, Any],
    pods: Mapping[str, Any],
    simulated_nodes: frozenset[str],
    definitions: Mapping[str, Sweep],
    pod_log: PodLog | None,
    definition_note: str = "",
    results: ResultsVolume | None = None,
) -> tuple[SweepRecord, ...]:
    """Each swept step of the Kubernetes side: its Indexed Jobs' pods (already read with the
    namespace's pods: no query per element), its metric from each element's pod log (`pod_log`) or
    from the file each point wrote in its folder on the results PVC (`results`)."""
    namespace = urllib.parse.quote(outputs.namespace)
    source = (
        f"Kubernetes API {outputs.api_url}: GET /apis/batch/v1/namespaces/{namespace}/jobs "
        f"(the Indexed Job's creationTimestamp), /api/v1/namespaces/{namespace}/pods ({COMPLETION_INDEX}, "
        "containerStatuses[].state startedAt/finishedAt)"
    )
    by_name = {j["metadata"]["name"]: j for j in jobs.get("items", [])}

    def elements_of(_step: KubeStep, sweep: SweepOutputs) -> tuple[tuple[ElementRecord, ...], tuple[str, ...]]:
        return kube_sweep_elements(sweep, by_name, pods.get("items", []), simulated_nodes, source)

    def read(step: KubeStep, sweep: SweepOutputs, metric: SweepMetric, elements: Sequence[ElementRecord]) -> Readings:
        if metric.pattern is None:
            return tuple(_read_kube_metric_file(e, metric, step.name, sweep, results) for e in elements)
        return tuple(_read_kube_metric(e, metric, namespace, pod_log, sweep) for e in elements)

    return _sweep_records(outputs.steps, elements_of, read, definitions, definition_note)


def _read_kube_metric(
    element: ElementRecord, metric: SweepMetric, namespace: str, pod_log: PodLog | None, sweep: SweepOutputs
) -> MetricReading:
    if element.simulated:
        return MetricReading(element.point, None, "not measured: simulated node, no container ran")
    if pod_log is None or element.state.startswith("no pod"):
        return MetricReading(element.point, None, "not measured: no pod log to read")
    path = f"/api/v1/namespaces/{namespace}/pods/{urllib.parse.quote(element.job)}/log"
    try:
        text = pod_log(path)
    except (OSError, ValueError, KubeRequestError) as error:
        return MetricReading(element.point, None, f"not measured: GET {path}: {error}")
    return read_metric(element.point, text, metric, f"GET {path} (the pod's log)")


def _read_kube_metric_file(
    element: ElementRecord, metric: SweepMetric, step: str, sweep: SweepOutputs, results: ResultsVolume | None
) -> MetricReading:
    """The number `metric.file` holds in the point's folder on the results PVC, through the monitor."""
    assert metric.file is not None
    if element.simulated:
        return MetricReading(element.point, None, "not measured: simulated node, no container ran")
    path = posixpath.join(sweep.results, f"point-{element.point}", metric.file)
    files = None if results is None else results.monitor()
    if results is None or files is None:
        return MetricReading(
            element.point, None, f"not measured: {path} is on the results PVC, read through the run's monitor, and "
            "no monitor Service of the run was found (or the report kept no raw folder)"
        )
    local = results.folder / step / f"point-{element.point}.metric"
    local.parent.mkdir(parents=True, exist_ok=True)
    where = "on the results PVC (through the monitor, API service proxy)"
    if not files.fetch(f"results/{path}", local):
        return MetricReading(element.point, None, f"not measured: no {path} {where}")
    return read_metric(element.point, local.read_text(errors="replace"), metric, f"{path} {where}")
