"""BuildCompletion: the end of the image build a BuildConfig started, awaited by Atlas.

A BuildConfig's ConfigChange trigger makes a Build (`<config>-<n>`) that moves New, Pending,
Running and ends Complete, Failed, Error or Cancelled (build.openshift.io/v1). `pulumi up` used to
wait on the ImageStream's tag (`pulumi.com/waitFor`), which a failed build never writes: a build
that failed in half a second (its Containerfile missing from the Git source) held `up` for its
whole timeout and ended in "timed out waiting for the condition", the build's reason nowhere.
This resource waits on the Build itself:

- Complete: the image the build pushed, by digest, read from the ImageStream's tag event
  (`dockerImageReference`) for the digest the Build reports (`status.output.to.imageDigest`):
  what the Jobs pull, so a new image rolls them and an unchanged one leaves them be;
- Failed, Error or Cancelled: `pulumi up` fails at once with the Build's name, phase,
  `status.reason` and `status.message` and the last lines of its log: from the build log API
  (`builds/<name>/log`, OpenShift's), else the Build's `status.logSnippet` (what OpenShift's
  build controller keeps of a failed build's log, its last 5 lines; the local environment's
  build runner fills it the same way, as a CRD cannot serve `builds/<name>/log`). Credentials in
  URLs (`https://user:token@host`) are masked in every line shown;
- still New, Pending or Running when `image.build.timeout_seconds` ends: fails saying where it
  stands (a New build with a reason, such as InvalidOutputReference, says it while it waits).

The Build followed is the newest of those the BuildConfig owns (label
`openshift.io/build-config.name`, its uid in `ownerReferences`), so a build started again by hand
(`oc start-build`) is the one awaited.

Like JobCompletion (completion.py) the provider holds no live objects: the API client is made on
each call from the same kubeconfig resolution as the stack's provider. It is replaced with what it
waits for (the BuildConfig's uid, the image's tag) and never updated in place: the wait happens
at create only, and an in-place update of a dynamic resource is previewed with its inputs as its
outputs, which would show every Job's image changing from the digest to the tag's pull spec.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed
from infra.errors import ActionableError
from infra.kubeapi import KubeApi, KubeRequestError
from infra.kubeconfig import resolve_context
from infra.openshift.completion import ApiAccess, api_request, follow_until_finished
from infra.validation import mask_url_credentials

BUILD_API = "/apis/build.openshift.io/v1"
IMAGE_API = "/apis/image.openshift.io/v1"
BUILD_CONFIG_LABEL = "openshift.io/build-config.name"
BUILD_NUMBER = "openshift.io/build.number"
# Where the local environment's build runner (localenv/builds.py, a stand-in) keeps a build's
# whole log: named in the message, as `oc logs` is on OpenShift.
LOCAL_LOG_ANNOTATION = "atlas.dev/build-log"
FAILED_PHASES = ("Failed", "Error", "Cancelled")
LOG_TAIL_LINES = 20
WATCH_WINDOW_S = 10


class BuildFailed(ActionableError):
    """The build failed, was cancelled or outlasted the wait: the message says which, shows the end
    of the build's log and what to do, and is reported without a traceback (dynamic_host.py)."""


@dataclass(frozen=True)
class BuildProgress:
    """Where the awaited build stands (see `assess`)."""

    finished: bool
    succeeded: bool
    note: str
    build: str = ""  # the Build's name ("" while there is none)
    phase: str = ""
    why: str = ""  # status.reason and status.message, as `<reason>: <message>`
    digest: str = ""  # the image the build pushed (Complete only)


def _number(build: Mapping[str, Any]) -> int:
    meta = build.get("metadata") or {}
    text = str((meta.get("annotations") or {}).get(BUILD_NUMBER) or (meta.get("labels") or {}).get(BUILD_NUMBER) or "")
    if text.isdigit():
        return int(text)
    match = re.search(r"-(\d+)$", str(meta.get("name", "")))  # `<config>-<n>`, as the controller names it
    return int(match.group(1)) if match else 0


def newest_build(builds: Iterable[Mapping[str, Any]], config_uid: str) -> Mapping[str, Any] | None:
    """The newest Build of the BuildConfig whose uid is `config_uid`: by build number, then by
    creation. A Build with owner references that do not name the config is another config's
    (one of the same name, deleted and created again); one with none is taken by its label."""
    own = []
    for build in builds:
        owners = (build.get("metadata") or {}).get("ownerReferences") or []
        if not owners or any(o.get("uid") == config_uid for o in owners):
            own.append(build)
    if not own:
        return None
    return max(own, key=lambda b: (_number(b), str((b.get("metadata") or {}).get("creationTimestamp", ""))))


def assess(build: Mapping[str, Any] | None) -> BuildProgress:
    """Where a Build stands: pure, so the rules are table-tested.

    - none yet: still going (the controller makes it when the BuildConfig is created);
    - Complete: done, with the digest it pushed;
    - Failed, Error or Cancelled: done, failed, with the Build's reason and message;
    - New, Pending or Running: still going, with its reason and message where it has one (a New
      build waiting for its output ImageStream, a Pending one whose pod cannot be created).
    """
    if build is None:
        return BuildProgress(False, False, "no build yet: the build controller starts one for the BuildConfig")
    name = str((build.get("metadata") or {}).get("name", ""))
    status = build.get("status") or {}
    phase = str(status.get("phase") or "New")
    why = ": ".join(str(part) for part in (status.get("reason"), status.get("message")) if part)
    if phase == "Complete":
        digest = str(((status.get("output") or {}).get("to") or {}).get("imageDigest") or "")
        return BuildProgress(True, True, f"build {name} is Complete", name, phase, why, digest)
    if phase in FAILED_PHASES:
        return BuildProgress(True, False, f"build {name} is {phase}" + (f": {why}" if why else ""), name, phase, why)
    return BuildProgress(False, False, f"build {name} is {phase}" + (f" ({why})" if why else ""), name, phase, why)


def log_lines(text: str, count: int = LOG_TAIL_LINES) -> str:
    """The last `count` lines of a log, credentials masked."""
    return mask_url_credentials("\n".join(text.rstrip().splitlines()[-count:]))


def tagged_image(stream: Mapping[str, Any] | None, tag: str, digest: str) -> str | None:
    """The pull spec by digest of the image pushed to `tag`, from the ImageStream's status: the tag
    event for `digest` (the newest event where the build reported none); None while not recorded."""
    for entry in ((stream or {}).get("status") or {}).get("tags") or []:
        if entry.get("tag") != tag:
            continue
        for item in entry.get("items") or []:
            reference = item.get("dockerImageReference")
            if reference and (not digest or item.get("image") == digest):
                return str(reference)
    return None


@dataclass(frozen=True)
class BuildTarget:
    """The build a completion waits for, and how to name it in a message."""

    namespace: str
    config: str  # the BuildConfig's name
    config_uid: str
    stream: str  # the ImageStream the build pushes to
    tag: str
    config_urn: str = ""
    git_source: str = ""  # `<uri> at <ref>`, as the message names it
    flavour: str = ""

    @property
    def builds_path(self) -> str:
        # OpenShift cuts a label value at 63 characters; the owner's uid tells configs apart.
        selector = urllib.parse.quote(f"{BUILD_CONFIG_LABEL}={self.config[:63]}")
        return f"{BUILD_API}/namespaces/{urllib.parse.quote(self.namespace)}/builds?labelSelector={selector}"

    def log_path(self, build: str) -> str:
        ns, name = urllib.parse.quote(self.namespace), urllib.parse.quote(build)
        return f"{BUILD_API}/namespaces/{ns}/builds/{name}/log?tailLines={LOG_TAIL_LINES}"

    @property
    def streams_path(self) -> str:
        selector = urllib.parse.quote(f"metadata.name={self.stream}")
        return f"{IMAGE_API}/namespaces/{urllib.parse.quote(self.namespace)}/imagestreams?fieldSelector={selector}"

    @property
    def label(self) -> str:
        return f"BuildConfig {self.namespace}/{self.config}"

    @classmethod
    def of(cls, props: Mapping[str, Any]) -> BuildTarget:
        return cls(
            namespace=str(props["namespace"]),
            config=str(props["build_config"]),
            config_uid=str(props["build_config_uid"]),
            stream=str(props["image_stream"]),
            tag=str(props["tag"]),
            config_urn=str(props.get("build_config_urn") or ""),
            git_source=str(props.get("git_source") or ""),
            flavour=str(props.get("flavour") or ""),
        )

    def rerun_hint(self) -> str:
        source = f" ({mask_url_credentials(self.git_source)}, as committed and pushed)" if self.git_source else ""
        again = (f"`pulumi up --replace '{self.config_urn}'`" if self.config_urn
                 else "`pulumi up --replace` the BuildConfig")
        return (f"Fix it in the build's Git source{source}, then build it again: {again} (a plain `pulumi up` builds "
                "again only where the build's Containerfile path, context, arguments or Git ref changed)")


def failure_text(
    target: BuildTarget, build: Mapping[str, Any], progress: BuildProgress, log: str, log_from: str
) -> str:
    """What `pulumi up` says when the build failed: pure, golden-tested."""
    meta = build.get("metadata") or {}
    why = f": {mask_url_credentials(progress.why)}" if progress.why else " (the Build gives no reason)"
    lines = [f"image build {target.namespace}/{progress.build} of {target.label} ended {progress.phase}{why}"]
    shown = log_lines(log)
    if shown:
        lines += [f"--- last lines of its log ({log_from})", shown]
    else:
        lines.append("(no log: the build log API answered nothing and the Build has no status.logSnippet)")
    local_log = (meta.get("annotations") or {}).get(LOCAL_LOG_ANNOTATION)
    if local_log:
        lines.append(f"the whole log (the local build runner's): {local_log}")
    elif target.flavour == "openshift":
        lines.append(f"the whole log: oc logs build/{progress.build} -n {target.namespace}")
    lines.append(target.rerun_hint())
    return "\n".join(lines)


# --- waiting ---------------------------------------------------------------------------------


def _read_log(api: KubeApi, target: BuildTarget, build: Mapping[str, Any]) -> tuple[str, str]:
    """(the end of the build's log, where it came from): the log API, else status.logSnippet."""
    name = str((build.get("metadata") or {}).get("name", ""))
    try:
        text = api.text(target.log_path(name)).rstrip()
    except (KubeRequestError, urllib.error.URLError, OSError):
        text = ""  # not served (the local stand-in's CRD), or the build pod is gone
    if text:
        return text, f"builds/{name}/log"
    return str((build.get("status") or {}).get("logSnippet") or ""), "the Build's status.logSnippet"


def wait_for_build(
    api: KubeApi, target: BuildTarget, timeout_s: float, report: Callable[[str], None] = lambda _note: None
) -> BuildProgress:
    """Follow the BuildConfig's newest Build until it ended; raise BuildFailed (its reason and the
    end of its log) if it did not complete, or did not end within `timeout_s`. `report` hears each
    new note while it waits. A dropped connection is retried (waiting changes nothing)."""
    deadline = time.monotonic() + timeout_s
    progress, build = follow_until_finished(
        lambda note: _follow(api, target, deadline, timeout_s, note), lambda found: found[0].finished, deadline,
        report, lambda text: BuildFailed(f"{target.label}: {text}"))
    if not progress.succeeded:
        log, log_from = _read_log(api, target, build)
        raise BuildFailed(failure_text(target, build, progress, log, log_from))
    return progress


def _follow(
    api: KubeApi, target: BuildTarget, deadline: float, timeout_s: float, note: Callable[[str], None]
) -> tuple[BuildProgress, Mapping[str, Any]]:
    """One list of the config's builds, then a watch from its version until the newest ended or
    the watch must start afresh (the progress returned is then unfinished)."""
    listing = api.get(target.builds_path)
    builds = {str(b["metadata"]["name"]): b for b in listing.get("items") or ()}
    version = str((listing.get("metadata") or {}).get("resourceVersion", ""))
    build = newest_build(builds.values(), target.config_uid)
    progress = assess(build)
    while not progress.finished:
        note(progress.note)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BuildFailed(
                f"{target.label}: the image build has not ended after {timeout_s:g} s ({progress.note}); "
                "the build goes on: run `pulumi up` again to keep waiting (image.build.timeout_seconds sets how long)"
            )
        for event in api.watch(target.builds_path, version, timeout_s=int(min(WATCH_WINDOW_S, max(1.0, remaining)))):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                return progress, build or {}  # the version is too old (410): list afresh
            version = str((obj.get("metadata") or {}).get("resourceVersion", version))
            name = str((obj.get("metadata") or {}).get("name", ""))
            if kind == "DELETED":
                builds.pop(name, None)
            elif kind in ("ADDED", "MODIFIED"):
                builds[name] = obj
            build = newest_build(builds.values(), target.config_uid)
            progress = assess(build)
            if progress.finished:
                break
            note(progress.note)
    return progress, build or {}


def wait_for_image(
    api: KubeApi, target: BuildTarget, digest: str, timeout_s: float, report: Callable[[str], None] = lambda _n: None
) -> str:
    """The pull spec by digest of what the build pushed, once the ImageStream's status records it
    (the registry writes the tag event as it takes the push, before the build is Complete; this
    waits only where that lags)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listing = api.get(target.streams_path)
        streams = listing.get("items") or []
        version = str((listing.get("metadata") or {}).get("resourceVersion", ""))
        found = tagged_image(streams[0] if streams else None, target.tag, digest)
        if found:
            return found
        report(f"build complete; waiting for ImageStream {target.stream} to record tag {target.tag}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BuildFailed(
                f"{target.label}: the build is Complete (image {digest or 'unknown'}), but ImageStream "
                f"{target.namespace}/{target.stream} has no event for tag {target.tag} after {timeout_s:g} s: "
                "the registry did not record the push; `oc describe imagestream` shows its tags"
            )
        for event in api.watch(target.streams_path, version, timeout_s=int(min(WATCH_WINDOW_S, max(1.0, remaining)))):
            if event.get("type") in ("ADDED", "MODIFIED"):
                found = tagged_image(event.get("object"), target.tag, digest)
                if found:
                    return found


# --- the dynamic resource --------------------------------------------------------------------


def _api(props: Mapping[str, Any]) -> KubeApi:
    return KubeApi(resolve_context(api_request(props)), timeout_s=30.0)


# What the completion waits for: another BuildConfig (a new uid), another image (a new tag or
# stream) or another namespace is another build, awaited by a new completion.
REPLACES = ("build_config_uid", "tag", "image_stream", "namespace")


class BuildCompletionProvider(pulumi.dynamic.ResourceProvider):
    """Waits for the BuildConfig's build (see the module's docstring)."""

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = changed(olds, news, REPLACES)
        return pulumi.dynamic.DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        target = BuildTarget.of(props)
        api = _api(props)
        started = time.monotonic()
        timeout_s = float(props["timeout_s"])
        progress = wait_for_build(api, target, timeout_s, pulumi.log.info)
        image = wait_for_image(api, target, progress.digest, max(1.0, timeout_s - (time.monotonic() - started)),
                               pulumi.log.info)
        outs = {**props, "image": image, "build": progress.build, "digest": progress.digest}
        return pulumi.dynamic.CreateResult(f"{target.namespace}/{progress.build}", outs)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        return pulumi.dynamic.ReadResult(id_, props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # nothing to undo: waiting changed nothing


class BuildCompletion(pulumi.dynamic.Resource, module="openshift", name="BuildCompletion"):
    """The image a BuildConfig's build pushed, once it completed (see BuildCompletionProvider).

    `image` is the pushed image by digest. A preview shows a dynamic resource's inputs as its
    outputs, so until the build ran it is `known_image`: what the ImageStream's status records
    for the tag (the same image, where the build ran before this resource existed), else the
    tag's pull spec."""

    image: pulumi.Output[str]
    build: pulumi.Output[str]
    digest: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        build_config: pulumi.CustomResource,
        image_stream: str,
        tag: str,
        known_image: pulumi.Input[str],
        access: ApiAccess,
        timeout_s: float,
        git_source: str = "",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        metadata: Any = build_config.metadata  # type: ignore[attr-defined]
        props: dict[str, Any] = {
            **access.props(),
            "namespace": metadata.apply(lambda m: (m or {}).get("namespace")),
            "build_config": metadata.apply(lambda m: (m or {}).get("name")),
            "build_config_uid": metadata.apply(lambda m: (m or {}).get("uid")),
            "build_config_urn": build_config.urn,
            "image_stream": image_stream,
            "tag": tag,
            "git_source": git_source,
            "timeout_s": timeout_s,
            "image": known_image,
            "build": None,
            "digest": None,
        }
        super().__init__(BuildCompletionProvider(), name, props, opts)
