"""JobCompletion: the end of a Job's step on Kubernetes, awaited by Atlas rather than by
pulumi-kubernetes.

The Jobs themselves carry `pulumi.com/skipAwait`; a JobCompletion per awaited Job holds the
next step (and `pulumi up`) until the step has succeeded, as the HPC side's JobCompletion
does for a scheduler job. Two reasons to wait here rather than in pulumi-kubernetes:
- Sooner. pulumi-kubernetes (like `kubectl wait --for=condition=complete`) waits for the
  Job's `Complete` condition, which the job controller posts a second after the pod ended:
  it batches pod updates (`syncJobBatchPeriod`, 1 s, not configurable). A Job of one
  completion whose pod Succeeded has done its work and cannot fail any more, so the next
  step is created as soon as the pod says so: a second saved per step.
- Clearer. A failed step names the pod, its exit code and reason and the end of its log,
  with the command that runs it again unchanged; while it waits, why a pod does not start
  (unschedulable, an unbound claim, an image that cannot be pulled) is logged when it changes.

The wait follows the Job's pods with one watch (list, then watch from that version); it asks
for the Job itself when a watch window ends or a pod failed, because `Failed` (retries
exhausted, deadline passed) is the controller's verdict, not a pod's. The provider holds no
live objects: the API client is made on each call from the same kubeconfig resolution as the
stack's provider (infra/kubeconfig.py: the stack's file, else KUBECONFIG merged, else
~/.kube/config; its context). Credentials the API refuses end the wait with one line naming the
context, the server and how to log in again (infra.kubeapi.KubeAuthError), not a traceback.
"""

from __future__ import annotations

import hashlib
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed
from infra.kubeapi import KubeApi, KubeRequestError
from infra.kubeconfig import KubeconfigRequest, resolve_context
from infra.timeparse import rfc3339

PROVIDER_VERSION = "1+" + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LOG_TAIL_LINES = 20
# How long one watch window runs before the Job itself is asked again; shorter once a pod
# failed, so that the controller's `Failed` verdict is seen within a second or so.
WATCH_WINDOW_S = 10
AFTER_FAILURE_WINDOW_S = 1
RETRY_S = 2.0  # after the API server did not answer
Followed = TypeVar("Followed")
# How long a pod may wait for a claim to bind before the step is failed: what pulumi-kubernetes
# gives a claim to bind when it awaits one (the claims are created with skipAwait).
UNBOUND_CLAIM_LIMIT_S = 300
# How long a pod's image may fail to pull (a typo, a missing tag, a registry it cannot reach)
# before the step is failed; the kubelet retries with back-off for ever. A name that can never
# be pulled (InvalidImageName) fails at once.
IMAGE_PULL_LIMIT_S = 60
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "RegistryUnavailable"})
# How long the node a running pod is on may be not Ready (its kubelet or container runtime down)
# before the step is failed: nothing reports on the pod while it is.
NODE_LOST_LIMIT_S = 60
# How long the API server may refuse to create a Job's pods (the job controller's FailedCreate:
# over the project's quota, above its LimitRange's maximum, a forbidden security context) before
# the step is failed. The controller retries for ever, and a refusal can clear (another pod
# ending frees quota), so not at once; but the step would otherwise wait out its whole timeout
# with nothing to show but "no pod yet".
POD_REFUSED_LIMIT_S = 120
_OUTCOME_FIELDS = ("state", "pod", "exit_code", "finished_at")


class StepFailed(Exception):
    """A step's Job failed, vanished or outlasted the wait; the message says what to do."""


@dataclass(frozen=True)
class StepProgress:
    """Where a step's Job stands, from the Job and its pods (see `assess`)."""

    finished: bool
    succeeded: bool
    note: str  # what is happening, or how it ended
    pod: str = ""
    exit_code: int | None = None
    finished_at: str | None = None
    retry_pending: bool = False  # a pod failed and the controller has not yet decided


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition  # type: ignore[no-any-return]
    return None


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The first terminated container's state (the step's own container: Jobs here run one)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return terminated  # type: ignore[no-any-return]
    return {}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _created(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp", ""))


def _pod_note(pod: Mapping[str, Any]) -> str:
    """Why a pod that has not finished is where it is, in a line."""
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    scheduled = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None)
    if scheduled is not None and scheduled.get("status") == "False":
        return f"pod {_name(pod)} is not scheduled: {scheduled.get('reason', '')}: {scheduled.get('message', '')}"
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return f"pod {_name(pod)} is waiting: {waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    return f"pod {_name(pod)} is {phase}"


def _failure_detail(pod: Mapping[str, Any]) -> tuple[str, int | None]:
    terminated = _terminated(pod)
    code = terminated.get("exitCode")
    reason = terminated.get("reason") or (pod.get("status") or {}).get("reason") or "Failed"
    if code is None:
        return f"pod {_name(pod)} failed ({reason})", None
    return f"pod {_name(pod)} exited {code} ({reason})", int(code)


def _pull_failure(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when a container of the pod cannot pull its image."""
    for container in (pod.get("status") or {}).get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURES or waiting.get("reason") == "InvalidImageName":
            return str(waiting["reason"]), str(waiting.get("message", ""))
    return None


def _node_not_ready(node: Mapping[str, Any] | None) -> tuple[float, str] | None:
    """(since, why) when a node's Ready condition is not True."""
    if not node:
        return None
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            since = rfc3339(condition.get("lastTransitionTime"))
            why = f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
            return (since if since is not None else 0.0), why
    return None


def _unbound_claim_since(pod: Mapping[str, Any]) -> float | None:
    """When the scheduler first found a claim of this pod unbound (epoch seconds), if it did."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and "unbound" in str(condition.get("message", "")).lower()
            and "persistentvolumeclaim" in str(condition.get("message", "")).lower()
        ):
            return rfc3339(condition.get("lastTransitionTime"))
    return None


def refusal(events: Iterable[Mapping[str, Any]]) -> tuple[float, str] | None:
    """(since when, the newest message) of the job controller's FailedCreate events for a Job:
    the API server refused to create its pods. None when there are none."""
    refused = [e for e in events if e.get("reason") == "FailedCreate"]
    if not refused:
        return None
    times = [rfc3339(e.get("firstTimestamp") or e.get("eventTime")) for e in refused]
    known = [t for t in times if t is not None]
    newest = max(refused, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return (min(known) if known else 0.0), str(newest.get("message", "")).strip()


def assess(
    job: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    now: float | None = None,
    node: Mapping[str, Any] | None = None,
    refused: tuple[float, str] | None = None,
) -> StepProgress:
    """Where a Job of one completion stands: pure (`now` given), so the rules are table-tested.
    `node` is the node the newest pod is bound to, where known; `refused` what `refusal` found
    in the Job's events.

    - a pod Succeeded: done (the Job completes on the controller's next sync, whatever else);
    - the Job is Complete (its pods may be gone already): done;
    - the Job is Failed: failed, with the controller's reason and the last failed pod's exit;
    - the newest pod has waited UNBOUND_CLAIM_LIMIT_S for a claim to bind: failed, so a claim
      that will never bind is reported in minutes, not at the step's deadline;
    - its image cannot be pulled (IMAGE_PULL_LIMIT_S after the pod was created; a name that can
      never be pulled at once): failed, with the kubelet's reason and message;
    - its node has not been Ready for NODE_LOST_LIMIT_S: failed (the Job stays, and the next
      `pulumi up` waits for it again once the node is back);
    - no pod exists and the API server has refused to create one for POD_REFUSED_LIMIT_S:
      failed, with the API server's message (a quota, a LimitRange);
    - otherwise: still going, with a note about the newest pod.
    """
    ordered = sorted(pods, key=_created)
    for pod in ordered:
        if (pod.get("status") or {}).get("phase") == "Succeeded":
            return StepProgress(
                True, True, f"pod {_name(pod)} succeeded", _name(pod), 0, _terminated(pod).get("finishedAt")
            )
    if _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet"):
        return StepProgress(True, True, "the Job completed")
    failed_pods = [p for p in ordered if (p.get("status") or {}).get("phase") == "Failed"]
    verdict = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if verdict:
        detail, code, pod_name, finished = "no pod ran", None, "", None
        if failed_pods:
            detail, code = _failure_detail(failed_pods[-1])
            pod_name, finished = _name(failed_pods[-1]), _terminated(failed_pods[-1]).get("finishedAt")
        reason = f"{verdict.get('reason', 'Failed')}: {verdict.get('message', '')}".rstrip(": ")
        return StepProgress(True, False, f"{reason}; {detail}", pod_name, code, finished)
    active = [p for p in ordered if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if active:
        note = _pod_note(active[-1])
        since = _unbound_claim_since(active[-1])
        if since is not None and now is not None and now - since >= UNBOUND_CLAIM_LIMIT_S:
            return StepProgress(
                True,
                False,
                f"{note}; a claim it mounts has not bound in {now - since:.0f} s: see `kubectl describe pvc` in "
                "the namespace (its storage class, size and access mode must match a volume or a provisioner)",
                _name(active[-1]),
            )
        pull = _pull_failure(active[-1])
        created = rfc3339(_created(active[-1]))
        if pull is not None and now is not None and (
            pull[0] == "InvalidImageName" or (created is not None and now - created >= IMAGE_PULL_LIMIT_S)
        ):
            return StepProgress(
                True, False,
                f"pod {_name(active[-1])} cannot pull its image: {pull[0]}: {pull[1]}".rstrip(": ")
                + "; check the image reference (atlas:openshift.image) and that the node reaches its registry",
                _name(active[-1]),
            )
        lost = _node_not_ready(node)
        if lost is not None and now is not None and now - lost[0] >= NODE_LOST_LIMIT_S:
            node_name = _name(node or {})
            return StepProgress(
                True, False,
                f"pod {_name(active[-1])} is on node {node_name}, which has not been Ready for {now - lost[0]:.0f} s "
                f"({lost[1]}): its kubelet or container runtime is down. The Job stays: bring the node back "
                "(`scripts/localenv up` on the local cluster) and run `pulumi up` again to keep waiting",
                _name(active[-1]),
            )
        if failed_pods:
            note += f" ({len(failed_pods)} earlier attempt(s) failed)"
        return StepProgress(False, False, note)
    if failed_pods:
        detail, _ = _failure_detail(failed_pods[-1])
        return StepProgress(False, False, f"{detail}; waiting for the Job's retry or verdict", retry_pending=True)
    if refused is not None:
        since, message = refused
        if now is not None and now - since >= POD_REFUSED_LIMIT_S:
            return StepProgress(
                True, False,
                f"the API server has refused to create its pod for {now - since:.0f} s: {message}; the project's "
                "quota and LimitRange must admit the step's pod (atlas:openshift.quota; `kubectl get events` in the "
                "namespace shows each refusal)",
            )
        return StepProgress(False, False, f"no pod yet: the API server refuses to create it: {message}")
    return StepProgress(False, False, "no pod yet")


# --- waiting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepJob:
    """The Job a completion waits for, and how to reach it."""

    namespace: str
    name: str
    uid: str
    step: str
    job_urn: str = ""

    @property
    def label(self) -> str:
        return f"step {self.step!r} (Job {self.namespace}/{self.name})"

    @property
    def job_path(self) -> str:
        ns, name = urllib.parse.quote(self.namespace), urllib.parse.quote(self.name)
        return f"/apis/batch/v1/namespaces/{ns}/jobs/{name}"

    @property
    def pods_path(self) -> str:
        selector = urllib.parse.quote(f"{CONTROLLER_UID_LABEL}={self.uid}")
        return f"/api/v1/namespaces/{urllib.parse.quote(self.namespace)}/pods?labelSelector={selector}"

    @classmethod
    def of(cls, props: Mapping[str, Any]) -> StepJob:
        """The Job a completion's props (`job_props`) name."""
        return cls(
            namespace=str(props["namespace"]),
            name=str(props["job_name"]),
            uid=str(props["job_uid"]),
            step=str(props["step"]),
            job_urn=str(props.get("job_urn") or ""),
        )

    def rerun_hint(self) -> str:
        hint = "Fix the step and run `pulumi up` again: a changed step is a new Job"
        return hint + (f" (to run it again unchanged: pulumi up --replace '{self.job_urn}')" if self.job_urn else "")


def _read_job(api: KubeApi, job: StepJob) -> Mapping[str, Any]:
    try:
        current: Mapping[str, Any] = api.get(job.job_path)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
        current = {}
    uid = (current.get("metadata") or {}).get("uid")
    if uid != job.uid:
        raise StepFailed(
            f"{job.label} was deleted outside Atlas while Atlas waited for it: "
            "run `pulumi refresh`, then `pulumi up` to create it again"
        )
    return current


def _log_tail(api: KubeApi, namespace: str, pod: str) -> str:
    ns, name = urllib.parse.quote(namespace), urllib.parse.quote(pod)
    try:
        return api.text(f"/api/v1/namespaces/{ns}/pods/{name}/log?tailLines={LOG_TAIL_LINES}").rstrip()
    except (KubeRequestError, OSError):
        return ""  # no log to show (a simulated node, or the pod is gone): the message stands without


def follow_until_finished(
    follow: Callable[[Callable[[str], None]], Followed], finished: Callable[[Followed], bool], deadline: float,
    report: Callable[[str], None], unanswered: Callable[[str], Exception],
) -> Followed:
    """Call `follow` (one list, then a watch) until `finished` says what it found has ended. A
    dropped connection to the API server is retried until `deadline` (the wait changes nothing, so
    it is safe to), then `unanswered(why)` is raised; `report` hears each new note once."""
    notes: list[str] = [""]

    def note(text: str) -> None:
        if text != notes[-1]:
            report(text)
            notes.append(text)

    while True:
        try:
            found = follow(note)
        except urllib.error.HTTPError:
            raise
        except (OSError, urllib.error.URLError) as error:  # refused, reset, timed out: not an answer
            if time.monotonic() > deadline:
                raise unanswered(f"the API server did not answer ({error}) until the wait ended") from None
            note(f"the API server did not answer ({error}); asking again")
            time.sleep(RETRY_S)
            continue
        if finished(found):
            return found


def wait_for_step(
    api: KubeApi, job: StepJob, timeout_s: float, report: Callable[[str], None] = lambda _note: None
) -> StepProgress:
    """Follow a Job's pods until the step succeeded; raise StepFailed if it failed, vanished or
    did not finish within `timeout_s`. `report` hears each new note while it waits. A dropped
    connection to the API server is retried (the wait changes nothing, so it is safe to)."""
    deadline = time.monotonic() + timeout_s
    progress = follow_until_finished(
        lambda note: _follow(api, job, deadline, timeout_s, note), lambda found: found.finished, deadline, report,
        lambda text: StepFailed(f"{job.label}: {text}"))
    if progress.succeeded:
        return progress
    tail = _log_tail(api, job.namespace, progress.pod) if progress.pod else ""
    raise StepFailed(
        f"{job.label} failed: {progress.note}"
        + (f"\n--- last lines of the log of pod {progress.pod}\n{tail}" if tail else "")
        + f"\n{job.rerun_hint()}"
    )


def _follow(
    api: KubeApi, job: StepJob, deadline: float, timeout_s: float, note: Callable[[str], None]
) -> StepProgress:
    """One list of the pods, then watches from its version until the step finished or the
    watch has to start afresh (then the progress returned is unfinished)."""
    current = _read_job(api, job)
    listing = api.get(job.pods_path)
    pods = {_name(p): p for p in listing.get("items") or ()}
    version = str((listing.get("metadata") or {}).get("resourceVersion", ""))
    node = _node_of(api, pods.values())
    refused = _refused(api, job, pods)
    progress = assess(current, pods.values(), time.time(), node, refused)
    while not progress.finished:
        note(progress.note)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise StepFailed(
                f"{job.label} has not finished after {timeout_s:g} s ({progress.note}). The Job stays: "
                "run `pulumi up` again to keep waiting (it is not created again)"
            )
        window = AFTER_FAILURE_WINDOW_S if progress.retry_pending else WATCH_WINDOW_S
        for event in api.watch(job.pods_path, version, timeout_s=int(min(window, max(1.0, remaining)))):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                return progress  # the version is too old (410), or the watch was refused: list afresh
            version = str((obj.get("metadata") or {}).get("resourceVersion", version))
            if kind == "DELETED":
                pods.pop(_name(obj), None)
            elif kind in ("ADDED", "MODIFIED"):
                pods[_name(obj)] = obj
            progress = assess(current, pods.values(), time.time(), node, refused)
            if progress.finished or progress.retry_pending:
                break
            note(progress.note)
        if progress.finished:
            break
        current = _read_job(api, job)  # the controller's verdict is on the Job, not on a pod
        node = _node_of(api, pods.values())  # after every window: a node can be lost while nothing else moves
        refused = _refused(api, job, pods)
        progress = assess(current, pods.values(), time.time(), node, refused)
    return progress


def _refused(api: KubeApi, job: StepJob, pods: Mapping[str, Any]) -> tuple[float, str] | None:
    """The API server's refusals to create the Job's pods, asked only while it has none (None where
    events cannot be read: the wait then goes on as before)."""
    if pods:
        return None
    selector = urllib.parse.quote(f"involvedObject.uid={job.uid},reason=FailedCreate")
    try:
        listing = api.get(f"/api/v1/namespaces/{urllib.parse.quote(job.namespace)}/events?fieldSelector={selector}")
    except (urllib.error.HTTPError, KubeRequestError):
        return None
    return refusal(listing.get("items") or ())


def _node_of(api: KubeApi, pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The node the newest unfinished pod is bound to, if any (None where it cannot be read:
    a user of a shared cluster may not be allowed to read nodes)."""
    active = [p for p in sorted(pods, key=_created) if (p.get("status") or {}).get("phase") in ("Pending", "Running")]
    node_name = (active[-1].get("spec") or {}).get("nodeName") if active else None
    if not node_name:
        return None
    try:
        node: Mapping[str, Any] = api.get(f"/api/v1/nodes/{urllib.parse.quote(node_name)}")
    except (urllib.error.HTTPError, KubeRequestError):
        return None
    return node


# --- the dynamic resource --------------------------------------------------------------------


def api_request(props: Mapping[str, Any]) -> KubeconfigRequest:
    """Where a completion's props say the cluster is: the stack's file, or (None, as state
    written before flavour and the TLS leave were props holds too) KUBECONFIG or ~/.kube/config."""
    return KubeconfigRequest(
        file=Path(props["kubeconfig"]) if props.get("kubeconfig") else None,
        context=props.get("context") or None,
        allow_insecure_tls=bool(props.get("insecure_skip_tls_verify")),
        flavour=props.get("flavour") or None,
    )


def _api(props: Mapping[str, Any]) -> KubeApi:
    return KubeApi(resolve_context(api_request(props)), timeout_s=30.0)


# A completion's inputs that change in place: how it reaches the API, how long it waits, and the
# Job's names (the same Job, its uid unchanged: a Job replaced has a new uid, which replaces it).
JOB_UPDATES = (
    "provider_version", "kubeconfig", "context", "flavour", "insecure_skip_tls_verify", "timeout_s", "job_urn",
    "namespace", "job_name",
)


def job_props(job: pulumi.CustomResource, step: str, access: ApiAccess) -> dict[str, Any]:
    """A completion's props that name the step's Job (`StepJob.of` reads them) and how to reach it."""
    metadata: Any = job.metadata  # type: ignore[attr-defined]
    return {
        **access.props(),
        "namespace": metadata.namespace,
        "job_name": metadata.name,
        "job_uid": metadata.uid,
        "job_urn": job.urn,
        "step": step,
    }


class JobCompletionProvider(pulumi.dynamic.ResourceProvider):
    """Waits for a step's Job to succeed (see the module's docstring)."""

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = changed(olds, news, ("job_uid",))
        updates = changed(olds, news, JOB_UPDATES)
        return pulumi.dynamic.DiffResult(changes=bool(replaces or updates), replaces=replaces)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        job = StepJob.of(props)
        progress = wait_for_step(_api(props), job, float(props["timeout_s"]), pulumi.log.info)
        outs = {
            **props,
            "state": "succeeded",
            "pod": progress.pod,
            "exit_code": progress.exit_code,
            "finished_at": progress.finished_at,
        }
        return pulumi.dynamic.CreateResult(f"{job.namespace}/{job.name}/done", outs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult({**news, **{k: olds.get(k) for k in _OUTCOME_FIELDS}})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        # What the Job did afterwards is the Job resource's to report (refresh reads it there).
        return pulumi.dynamic.ReadResult(id_, props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # nothing to undo: waiting changed nothing


@dataclass(frozen=True)
class ApiAccess:
    """How a completion reaches the API server: the same kubeconfig and context as the
    Kubernetes provider (None: KUBECONFIG or ~/.kube/config, and the current context)."""

    kubeconfig: str | None
    context: str | None
    flavour: str | None = None
    allow_insecure_tls: bool = False

    def props(self) -> dict[str, Any]:
        """The props that carry it. Flavour (the fix a refused login names) and the TLS leave are
        written only where they differ from what their absence means, so a completion's inputs
        stay as state written before them holds them."""
        props: dict[str, Any] = {"kubeconfig": self.kubeconfig, "context": self.context}
        if self.flavour == "openshift":
            props["flavour"] = self.flavour
        if self.allow_insecure_tls:
            props["insecure_skip_tls_verify"] = True
        return props


class JobCompletion(pulumi.dynamic.Resource, module="openshift", name="JobCompletion"):
    """The success of one awaited Job (see JobCompletionProvider)."""

    state: pulumi.Output[str]
    pod: pulumi.Output[str]
    finished_at: pulumi.Output[str | None]

    def __init__(
        self,
        name: str,
        *,
        job: pulumi.CustomResource,
        step: str,
        access: ApiAccess,
        timeout_s: float,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            "provider_version": PROVIDER_VERSION,
            **job_props(job, step, access),
            "timeout_s": timeout_s,
            **dict.fromkeys(_OUTCOME_FIELDS),
        }
        super().__init__(JobCompletionProvider(), name, props, opts)
