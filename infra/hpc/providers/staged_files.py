"""`StagedFiles`: files uploaded into a remote run directory over SFTP, each checked by sha256 on
the login node; refresh sees a file changed or removed there, and destroy removes what it staged."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed, is_unknown
from infra.hpc import ssh
from infra.hpc.provider_inputs import check_relative_path, check_remote_dir, check_ssh, endpoint_from, same_login
from infra.hpc.providers.common import HpcProviderError, SshResource, join_remote, over_ssh

SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _file_bytes(entry: Mapping[str, Any]) -> bytes:
    if entry.get("content_base64") is not None:
        return base64.b64decode(str(entry["content_base64"]))
    if entry.get("content") is not None:
        return str(entry["content"]).encode()
    source = entry.get("source")
    if source is None:
        raise HpcProviderError(f"staged file {entry.get('path')!r} has neither content nor source")
    try:
        return Path(str(source)).read_bytes()
    except OSError as error:
        raise HpcProviderError(f"cannot read {source} to stage it as {entry.get('path')}: {error.strerror}") from None


class StagedFilesProvider(pulumi.dynamic.ResourceProvider):
    """Uploads files into a remote run directory; each checked by sha256 on the remote side."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures: list[pulumi.dynamic.CheckFailure] = []
        check_ssh(news, failures)
        check_remote_dir(news.get("run_dir"), "run_dir", failures)
        files = news.get("files")
        if not is_unknown(files):
            if not isinstance(files, list):
                failures.append(pulumi.dynamic.CheckFailure("files", "expected a list"))
            else:
                seen: set[str] = set()
                for i, entry in enumerate(files):
                    if is_unknown(entry):
                        continue
                    check_relative_path(entry.get("path"), f"files[{i}].path", failures)
                    if entry.get("path") in seen:
                        failures.append(pulumi.dynamic.CheckFailure(f"files[{i}].path", "staged twice"))
                    seen.add(entry.get("path"))
                    if not SHA256.match(str(entry.get("sha256", ""))):
                        failures.append(pulumi.dynamic.CheckFailure(f"files[{i}].sha256", "expected 64 hex digits"))
        for i, directory in enumerate(news.get("directories") or []):
            check_relative_path(directory, f"directories[{i}]", failures)
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = [k for k in ("run_dir",) if olds.get(k) != news.get(k)]
        if is_unknown(news.get("ssh")) or not same_login(olds, news):
            replaces.append("ssh")
        differs = bool(replaces or changed(olds, news, ("files", "directories", "provider_version", "ssh_secret")))
        if _remote_drifted(olds):
            differs = True  # refresh saw a file changed or removed on the cluster: upload again
        return pulumi.dynamic.DiffResult(changes=differs, replaces=replaces, delete_before_replace=True)

    def _stage(self, props: Mapping[str, Any], previous: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        conn = ssh.connection(endpoint_from(props))
        run_dir = str(props["run_dir"])
        files = list(props.get("files") or [])
        directories = [run_dir] + [join_remote(run_dir, d) for d in props.get("directories") or []]
        directories += sorted({str(PurePosixPath(join_remote(run_dir, f["path"])).parent) for f in files})
        ssh.make_directories(conn, directories)
        paths = [join_remote(run_dir, f["path"]) for f in files]
        remote = ssh.remote_sha256(conn, paths)
        for entry, path in zip(files, paths, strict=True):
            if remote[path] == entry["sha256"]:
                continue  # already there (a retry, or only another file changed)
            content = _file_bytes(entry)
            if ssh.sha256_hex(content) != entry["sha256"]:
                raise HpcProviderError(
                    f"{entry.get('source') or entry['path']} changed since `pulumi preview` computed its sha256; "
                    "run `pulumi up` again so the preview and the upload agree"
                )
            ssh.upload_bytes(conn, content, path, int(entry.get("mode", 0o644)))
        stale = {join_remote(run_dir, f["path"]) for f in previous} - set(paths)
        ssh.remove_files(conn, stale)
        return {
            **props,
            "remote_sha256": {f["path"]: f["sha256"] for f in files},
            "staged_paths": paths,
        }

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        outs = self._stage(props)
        target = props["ssh"]
        return pulumi.dynamic.CreateResult(
            f"{target['user']}@{target['host']}:{target['port']}:{props['run_dir']}", outs
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(self._stage(news, previous=olds.get("files") or []))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        conn = ssh.connection(endpoint_from(props))
        run_dir = str(props["run_dir"])
        files = list(props.get("files") or [])
        remote = ssh.remote_sha256(conn, [join_remote(run_dir, f["path"]) for f in files])
        # A missing or edited file shows as a differing sha256: the next `up` uploads it again.
        observed = {f["path"]: remote[join_remote(run_dir, f["path"])] or "missing" for f in files}
        return pulumi.dynamic.ReadResult(id_, {**props, "remote_sha256": observed})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        conn = ssh.connection(endpoint_from(props))
        ssh.remove_files(conn, props.get("staged_paths") or [])


def _remote_drifted(olds: Mapping[str, Any]) -> bool:
    observed = olds.get("remote_sha256") or {}
    return any(observed.get(f["path"]) != f["sha256"] for f in olds.get("files") or [] if isinstance(f, Mapping))


class StagedFiles(SshResource, module="hpc", name="StagedFiles"):
    remote_sha256: pulumi.Output[dict[str, str]]
    staged_paths: pulumi.Output[list[str]]
    run_dir: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        ssh_target: pulumi.Input[dict[str, Any]],
        ssh_secret: pulumi.Input[dict[str, Any]],
        run_dir: str,
        files: Sequence[Mapping[str, Any]],
        directories: Sequence[str] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        inputs = {
            **over_ssh(ssh_target, ssh_secret),
            "run_dir": run_dir,
            "files": [dict(f) for f in files],
            "directories": list(directories),
        }
        super().__init__(StagedFilesProvider(), name, inputs, ("remote_sha256", "staged_paths"), opts)
