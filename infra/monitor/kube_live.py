"""The Kubernetes side's live readings: a running step's telemetry and the training log, read from
the run's own monitor (infra/openshift/monitor_app.py) through the API server's service proxy.

Why this way: the sampler writes its JSONL onto the run's logs PVC, which the monitor's pod mounts
read-only and serves (`/telemetry/<step>?tail=N`, `/log?tail=N`). Reaching it through
`/api/v1/namespaces/<ns>/services/<monitor>:http/proxy/...` needs only `get services/proxy` in the
run's own namespace (a project's `edit` and `admin` roles hold it on OpenShift and Kubernetes), the
same right and path `scripts/compare` reads the files through, with the user's own credentials. The
alternatives need more or give less: `pods/exec` (create, a streaming SPDY or WebSocket channel, a
`tail` in the step's image, and a command run inside the training container, which restricted
clusters often refuse), the pod log API (the sampler writes to its file, not to stdout), or a pod
started to read the claim (create pods, and a second mount of a ReadWriteOnce claim).

A read is one GET per running step and one for the log, never more often than `interval_s` (the
monitor's interval for the environment), so a live view redrawing each second asks nothing more.
Where nothing can be read the answer says why, per step (`missing`), and once for the environment
(`note`, the API's whole message).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.compare.remote_files import MONITOR_SELECTOR
from infra.kubeapi import KubeRequestError
from infra.monitor.hpc_reads import TELEMETRY_LINES, read_log_tail, telemetry_tail
from infra.monitor.model import LogTail, StepTelemetry
from infra.monitor.reasons import NO_LOG_RECORDS

ApiGet = Callable[[str], Any]  # a Kubernetes API GET of JSON, raising KubeRequestError with the status
NO_MONITOR = "no monitor serves the run's telemetry volume (atlas:openshift.monitor.enabled is false)"
NO_SERVICE = "the run's monitor Service is not there"


@dataclass(frozen=True)
class LiveRead:
    """One read of the run's monitor: each asked step's last samples, or why none (`missing`),
    the training log's tail, and what the environment's notes should say (`note`)."""

    steps: tuple[str, ...]
    telemetry: Mapping[str, StepTelemetry] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)
    log: LogTail | None = None
    note: str = ""


def monitor_said(error: KubeRequestError) -> str | None:
    """The monitor app's own `{"error": ...}` in a refusal; None where the API server (or something
    else in front of the monitor) answered."""
    try:
        body = json.loads(error.api_message)
    except ValueError:
        return None
    return str(body["error"]) if isinstance(body, Mapping) and "error" in body else None


def monitor_answer(error: KubeRequestError) -> str:
    """What was said in a refusal: the monitor's words, else the API's own message."""
    said = monitor_said(error)
    return said if said is not None else error.api_message


def refusal_reason(error: KubeRequestError) -> tuple[str, str]:
    """A short reason for the cells and the whole sentence for the environment's notes, for a
    refusal on the way to the monitor (403: the right; 503: no ready endpoint; other: the status)."""
    said = monitor_answer(error)
    if error.status == 403:
        return "may not read the run's monitor (403)", str(error)
    if error.status == 503:
        return "the run's monitor is not ready (503)", f"the run's monitor is not ready: {said}"
    return f"the run's monitor answered {error.status}", f"the run's monitor answered {error.status}: {said}"


class KubeLive:
    """Reads a Kubernetes run's live files through its monitor, at most once an interval."""

    def __init__(
        self,
        get: ApiGet,
        namespace: str,
        run_id: str,
        monitor_enabled: bool,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        tail: int = TELEMETRY_LINES,
    ) -> None:
        self.get, self.namespace, self.run_id = get, namespace, run_id
        self.monitor_enabled, self.interval_s, self.clock, self.tail = monitor_enabled, interval_s, clock, tail
        self.calls = 0  # GETs sent (tests read it)
        self._service = ""
        self._last: tuple[float, tuple[str, ...], bool, LiveRead] | None = None
        self._lock = threading.Lock()

    def read(self, steps: Sequence[str], want_log: bool) -> LiveRead:
        """The steps' last samples and the log's tail (`want_log`); the last answer while it is
        younger than the interval and was for the same steps."""
        asked = tuple(sorted(steps))
        with self._lock:
            now = self.clock()
            if self._last is not None:
                at, last_steps, last_log, last = self._last
                if now - at < self.interval_s and last_steps == asked and (last_log or not want_log):
                    return last
            if not asked and not want_log:
                return LiveRead(())
            answer = self._read_now(asked, want_log)
            self._last = (self.clock(), asked, want_log, answer)
            return answer

    def _get(self, path: str) -> Any:
        self.calls += 1
        return self.get(path)

    def _service_name(self) -> str:
        if not self._service:
            selector = urllib.parse.quote(MONITOR_SELECTOR.format(run=self.run_id))
            namespace = urllib.parse.quote(self.namespace)
            found = self._get(f"/api/v1/namespaces/{namespace}/services?labelSelector={selector}").get("items", [])
            self._service = str(found[0]["metadata"]["name"]) if found else ""
        return self._service

    def _proxy(self, service: str, path: str) -> str:
        namespace, name = urllib.parse.quote(self.namespace), urllib.parse.quote(service)
        return f"/api/v1/namespaces/{namespace}/services/{name}:http/proxy{path}"

    def _read_now(self, steps: tuple[str, ...], want_log: bool) -> LiveRead:
        if not self.monitor_enabled:
            return LiveRead(steps, missing=dict.fromkeys(steps, "no monitor serves the telemetry"), note=NO_MONITOR)
        try:
            service = self._service_name()
        except KubeRequestError as error:
            short, note = refusal_reason(error)
            return LiveRead(steps, missing=dict.fromkeys(steps, short), log=LogTail(unread=short), note=note)
        except (OSError, urllib.error.URLError, ValueError) as error:
            # The API server did not answer: this read says so; the Jobs and pods still show.
            short = f"not read: {type(error).__name__}"
            note = f"the run's monitor Service not looked up: {error}"
            return LiveRead(steps, missing=dict.fromkeys(steps, short), log=LogTail(unread=short), note=note)
        if not service:
            why = f"{NO_SERVICE} (label {MONITOR_SELECTOR.format(run=self.run_id)})"
            return LiveRead(steps, missing=dict.fromkeys(steps, NO_SERVICE), log=LogTail(unread=NO_SERVICE), note=why)
        telemetry: dict[str, StepTelemetry] = {}
        missing: dict[str, str] = {}
        notes: list[str] = []
        where = f"the run's monitor ({self.namespace}/{service}, API service proxy)"
        for step in steps:
            path = self._proxy(service, f"/telemetry/{urllib.parse.quote(step)}?tail={int(self.tail)}")
            try:
                body = self._get(path)
            except KubeRequestError as error:
                if error.status == 404 and monitor_said(error) is not None:
                    missing[step] = telemetry_tail(404, monitor_answer(error), where)[1]
                    continue
                if error.status == 404:
                    self._service = ""  # the Service went away since it was found: look again next time
                missing[step], note = refusal_reason(error)
                notes.append(note)
                continue
            except (OSError, urllib.error.URLError, ValueError) as error:
                missing[step] = f"not read: {type(error).__name__}"
                notes.append(f"telemetry of {step} not read through {where}: {error}")
                continue
            lines = "\n".join(json.dumps(r) for r in body.get("records", []) if isinstance(r, Mapping))
            parsed, why = telemetry_tail(0, lines, f"{step}.jsonl through {where}")
            if parsed is not None:
                telemetry[step] = parsed
            else:
                missing[step] = why
        log = self._log(service, where, notes) if want_log else None
        return LiveRead(steps, telemetry, missing, log, "; ".join(dict.fromkeys(notes)))

    def _log(self, service: str, where: str, notes: list[str]) -> LogTail:
        try:
            body = self._get(self._proxy(service, "/log?tail=2"))
        except KubeRequestError as error:
            if error.status == 404 and monitor_said(error) is not None:
                # The monitor says which: no training log at all, or none written yet.
                said = monitor_answer(error)
                return LogTail(unread=NO_LOG_RECORDS if "yet" in said else said)
            short, note = refusal_reason(error)
            notes.append(note)
            return LogTail(unread=short)
        except (OSError, urllib.error.URLError, ValueError) as error:
            notes.append(f"training log not read through {where}: {error}")
            return LogTail(unread=f"not read: {type(error).__name__}")
        return read_log_tail(list(body.get("records", [])))
