"""The Kubernetes side of the monitor: list once, then follow watches; never poll.

`KubeClient` is the shared REST client (infra.kubeapi.KubeApi), its GETs raising the API's
message. `KubeCache` keeps nodes, pods and the run's Jobs current: one LIST each, then one
WATCH each in a thread (resourceVersion from the list, bookmarks on, a fresh LIST only after
`410 Gone`). A snapshot reads the cache.

Where the user may not list nodes or pods cluster-wide (a project on a shared OpenShift
cluster), the cache keeps to the run's namespace and says so: per-node numbers then only
count the run's own pods.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.kubeapi import KubeApi, KubeAuthError, KubeRequestError


class KubeClient(KubeApi):
    """KubeApi whose GET, like its writes, raises KubeRequestError with the API's status and
    message (the cache falls back on a 403); requests are counted by kind in `calls`."""

    def get(self, path: str) -> Any:
        return self.request("GET", path)


class GoneError(Exception):
    """The watch's resourceVersion is too old (410): list again."""


@dataclass
class _Collection:
    path: str
    items: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    resource_version: str = ""
    synced_at: float | None = None
    error: str = ""


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class KubeCache:
    """Nodes, pods and the run namespace's Jobs, kept current by watches."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        ns = urllib.parse.quote(namespace)
        self._collections = {
            "nodes": _Collection("/api/v1/nodes"),
            "pods": _Collection("/api/v1/pods"),
            "jobs": _Collection(f"/apis/batch/v1/namespaces/{ns}/jobs"),
        }
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- listing ------------------------------------------------------------------------------

    def _list(self, name: str) -> None:
        collection = self._collections[name]
        try:
            document = self.client.get(collection.path)
        except KubeRequestError as error:
            if error.status != 403 or name == "jobs":
                raise
            if name == "pods":
                # No cluster-wide pod list: the run's own namespace still tells its steps.
                collection.path = f"/api/v1/namespaces/{urllib.parse.quote(self.namespace)}/pods"
                self.notes.append("pods: listing all namespaces is forbidden; node numbers count this run's pods only")
                document = self.client.get(collection.path)
            else:
                collection.error = f"not readable: {error}"
                self.notes.append(f"nodes: {collection.error}")
                return
        with self._lock:
            collection.items = {_key(i): i for i in document.get("items", [])}
            collection.resource_version = str((document.get("metadata") or {}).get("resourceVersion", ""))
            collection.synced_at = time.time()

    def list_all(self) -> None:
        for name in self._collections:
            self._list(name)

    # --- watching -----------------------------------------------------------------------------

    def apply_event(self, name: str, event: Mapping[str, Any]) -> None:
        """One watch event into the cache (pure apart from the lock; tests feed recorded events)."""
        collection = self._collections[name]
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise GoneError(str(obj.get("message", "")))
            raise KubeRequestError("WATCH", collection.path, int(obj.get("code") or 0), str(obj.get("message", "")))
        with self._lock:
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                collection.resource_version = str(version)
            if kind in ("ADDED", "MODIFIED"):
                collection.items[_key(obj)] = obj
            elif kind == "DELETED":
                collection.items.pop(_key(obj), None)
            collection.synced_at = time.time()

    def _follow(self, name: str) -> None:
        collection = self._collections[name]
        while not self._stop.is_set():
            try:
                for event in self.client.watch(collection.path, collection.resource_version, self._stop):
                    self.apply_event(name, event)
            except GoneError:
                self._list(name)
            except KubeAuthError as error:
                # Asking again cannot help until the user logs in again: the view says how.
                with self._lock:
                    collection.error = str(error)
                return
            except (OSError, urllib.error.URLError, KubeRequestError, ValueError) as error:
                with self._lock:
                    collection.error = f"watch interrupted ({error}); retrying"
                self._stop.wait(2.0)
                try:
                    self._list(name)
                    collection.error = ""
                except (OSError, urllib.error.URLError, KubeRequestError, ValueError):
                    continue

    def start(self) -> None:
        """List everything, then follow each collection in a daemon thread."""
        self.list_all()
        for name, collection in self._collections.items():
            if collection.error:
                continue
            thread = threading.Thread(target=self._follow, args=(name,), name=f"watch-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()

    # --- reading ------------------------------------------------------------------------------

    def items(self, name: str) -> list[Mapping[str, Any]]:
        with self._lock:
            return list(self._collections[name].items.values())

    def synced_at(self) -> float | None:
        with self._lock:
            times = [c.synced_at for c in self._collections.values() if c.synced_at is not None]
        return min(times) if times else None

    def error(self, name: str) -> str:
        return self._collections[name].error
