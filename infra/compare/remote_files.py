"""Where a run's files are read from: SFTP on an HPC login node, a monitor's `/files` endpoint
on a Kubernetes namespace's volumes, or a local folder that mirrors either (tests, imports).

The collectors see only `RemoteFiles` (list a folder, fetch a file into the report's raw/
folder); what they fetch is decided in `infra.compare.run_files`.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import urllib.error
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ApiGet = Callable[[str], Any]  # a Kubernetes API GET: path -> the decoded JSON
# The run's monitor Service, as RunMonitor labels it (infra/openshift/manifests/labels.py): how the
# report and the live monitor find it in the run's namespace.
MONITOR_SELECTOR = "app.kubernetes.io/component=monitor,atlas.dev/run={run}"


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int  # -1 for a folder
    mtime: float


class RemoteFiles:
    """What the collectors need from a run's files; tests give a fake over a local folder."""

    def listdir(self, path: str) -> list[RemoteFile]:  # pragma: no cover - interface
        raise NotImplementedError

    def fetch(self, path: str, local: Path) -> bool:  # pragma: no cover - interface
        raise NotImplementedError


class SftpFiles(RemoteFiles):
    """RemoteFiles over a paramiko SFTP client (from infra.hpc.ssh's pooled connection)."""

    def __init__(self, sftp: Any) -> None:
        self.sftp = sftp

    def listdir(self, path: str) -> list[RemoteFile]:
        try:
            entries = self.sftp.listdir_attr(path)
        except OSError:
            return []
        return [
            RemoteFile(
                posixpath.join(path, e.filename),
                -1 if stat.S_ISDIR(e.st_mode or 0) else int(e.st_size or 0),
                float(e.st_mtime or 0),
            )
            for e in entries
        ]

    def fetch(self, path: str, local: Path) -> bool:
        try:
            self.sftp.get(path, str(local))
        except OSError:
            return False
        return True


class LocalFiles(RemoteFiles):
    """RemoteFiles over a local folder that mirrors the remote home (tests, and imported copies)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def listdir(self, path: str) -> list[RemoteFile]:
        folder = self.root / path
        if not folder.is_dir():
            return []
        return [
            RemoteFile(posixpath.join(path, p.name), -1 if p.is_dir() else p.stat().st_size, p.stat().st_mtime)
            for p in sorted(folder.iterdir())
        ]

    def fetch(self, path: str, local: Path) -> bool:
        source = self.root / path
        if not source.is_file():
            return False
        local.unlink(missing_ok=True)
        try:
            os.link(source, local)  # same file system: the report keeps it without a copy
        except OSError:
            shutil.copyfile(source, local)  # streamed: a telemetry file may be larger than memory
        return True


class MonitorFiles(RemoteFiles):
    """The run's files on its PVCs, read through the monitor's `/files` endpoint
    (infra/openshift/monitor_app.py) via the API server's service proxy: no pod is started,
    and the monitor mounts the volumes read-only. Paths are `telemetry/...` or `logs/...`."""

    def __init__(self, get: ApiGet, download: Callable[[str, Path], bool], namespace: str, service: str) -> None:
        self.get, self.download = get, download
        self.base = (
            f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/services/{urllib.parse.quote(service)}:http/proxy/files"
        )

    def _url(self, path: str) -> str:
        return f"{self.base}/{urllib.parse.quote(path.strip('/'))}"

    def listdir(self, path: str) -> list[RemoteFile]:
        try:
            listing = self.get(self._url(path))
        except urllib.error.HTTPError:
            return []
        return [
            RemoteFile(
                posixpath.join(path, e["name"]), -1 if e.get("directory") else int(e["bytes"]), float(e["modified"])
            )
            for e in listing.get("entries", [])
        ]

    def fetch(self, path: str, local: Path) -> bool:
        return self.download(self._url(path), local)
