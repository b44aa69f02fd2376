"""Fill one workload data input on the data PVC: run by a staging Job from a ConfigMap.

    python3 stage_data.py --source https://host/ILSVRC2012_img_train.tar --dest /atlas/data/data/ImageNet/train
    python3 stage_data.py --source /atlas/source/imagenet/train --dest /atlas/data/data/ImageNet/train

A source is an HTTP(S) URL (downloaded; .tar, .tar.gz, .tgz, .tar.bz2 and .tar.xz archives
are unpacked into the destination, anything else is kept under its own name) or a path on a
mounted PVC (a directory is copied into the destination, a file into it). Standard library
only. Idempotent: a marker file records the source once everything is in place, so a re-run
(a replaced Job) with the same source does nothing; a half-finished run is redone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import time
import urllib.request
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

MARKER = ".atlas-staged.json"
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
ATTEMPTS = 4
CHUNK = 1 << 20


class StagingError(RuntimeError):
    pass


def already_staged(dest: Path, source: str) -> bool:
    marker = dest / MARKER
    if not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text()).get("source") == source)
    except (OSError, ValueError):
        return False


def _write_marker(dest: Path, source: str) -> None:
    marker = dest / MARKER
    partial = marker.with_suffix(".partial")
    partial.write_text(json.dumps({"source": source, "finished": time.time()}))
    partial.replace(marker)


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _safe_members(archive: tarfile.TarFile, dest: Path) -> list[tarfile.TarInfo]:
    """Members that stay inside `dest`: no absolute paths, no '..', no links, no devices."""
    root = dest.resolve()
    members = []
    for member in archive.getmembers():
        target = (root / member.name).resolve()
        if not target.is_relative_to(root) or PurePosixPath(member.name).is_absolute():
            raise StagingError(f"archive member {member.name!r} would land outside {dest}")
        if member.issym() or member.islnk() or member.isdev():
            raise StagingError(f"archive member {member.name!r} is a link or device; refusing it")
        members.append(member)
    return members


def unpack(archive_path: Path, dest: Path) -> None:
    with tarfile.open(archive_path) as archive:
        archive.extractall(dest, members=_safe_members(archive, dest))  # noqa: S202 (members checked above)


def download(url: str, target: Path) -> None:
    """Stream `url` into `target`, retrying with back-off (large files over shared links)."""
    partial = target.with_name(target.name + ".partial")
    for attempt in range(1, ATTEMPTS + 1):
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "atlas-stage-data/1"})  # noqa: S310
            with urllib.request.urlopen(request, timeout=60) as response, partial.open("wb") as out:  # noqa: S310
                shutil.copyfileobj(response, out, CHUNK)
            partial.replace(target)
            return
        except OSError as error:
            print(f"stage-data: attempt {attempt}/{ATTEMPTS} for {url} failed: {error}", file=sys.stderr, flush=True)
            if attempt == ATTEMPTS:
                raise StagingError(f"cannot download {url}: {error}") from error
            time.sleep(min(60, 5 * 2**attempt))


def stage(source: str, dest: Path) -> str:
    """Put `source` into `dest`; return what was done, for the Job's log."""
    if already_staged(dest, source):
        return f"{dest} already holds {source}"
    dest.mkdir(parents=True, exist_ok=True)
    scheme = urlsplit(source).scheme.lower()
    if scheme in ("http", "https"):
        name = PurePosixPath(unquote(urlsplit(source).path)).name or "download"
        if is_archive(name):
            archive = dest / f".{name}"
            download(source, archive)
            unpack(archive, dest)
            archive.unlink()
            result = f"unpacked {source} into {dest}"
        else:
            download(source, dest / name)
            result = f"downloaded {source} to {dest / name}"
    elif scheme == "":
        origin = Path(source)
        if origin.is_dir():
            shutil.copytree(origin, dest, dirs_exist_ok=True)
        elif origin.is_file():
            shutil.copy2(origin, dest / origin.name)
        else:
            raise StagingError(f"{source} does not exist on the source volume")
        result = f"copied {source} into {dest}"
    else:
        raise StagingError(f"unsupported source {source!r}: an http(s) URL or a path on a mounted volume")
    _write_marker(dest, source)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fill a workload data input on the data volume.")
    parser.add_argument("--source", required=True)
    parser.add_argument("--dest", required=True, type=Path)
    options = parser.parse_args(argv)
    started = time.monotonic()
    try:
        result = stage(options.source, options.dest)
    except (StagingError, OSError, tarfile.TarError) as error:
        print(f"stage-data: failed: {error}", file=sys.stderr, flush=True)
        return 1
    print(f"stage-data: {result} in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
