"""Where a bench's figures came from, recorded in every raw file under bench/results/.

Each raw file holds, beside its samples: the commit the bench ran at and whether the tree had
uncommitted changes (and which tracked paths), the machine told apart from others (CPU model,
cores, memory, kernel, a host id and a boot id, both hashed), and the command line. Benches take
the record when they start (`run_record()`: a long run's tree may change under it) and write
through `write_result`, which refuses a result without one and never overwrites an earlier file.

Where the bench runs without git (the lent GPU machine gets a copy of the working tree, no
`.git`), the sending side writes the commit first and the bench reads it back:

    .venv/bin/python -m bench.provenance commit --out .device-carry/commit.json   # here
    ATLAS_BENCH_COMMIT_FILE=.device-carry/commit.json python3 -m bench.gpu_check ...  # there

and the record says so (`commit_source`). Nothing here guesses a commit it did not read.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COMMIT_FILE_ENV = "ATLAS_BENCH_COMMIT_FILE"
# The keys every raw file carries (write_result refuses a result without them).
REQUIRED = ("commit", "tree_dirty", "commit_source", "machine", "command_line")
CHANGED_PATHS_KEPT = 100
# systemd's advice for /etc/machine-id (machine-id(5)): never show it, derive an application-specific
# id from it with a keyed hash instead, so the id in a public file cannot be joined with others.
HOST_ID_KEY = b"atlas bench host id"
BOOT_ID_KEY = b"atlas bench boot id"
ID_HEX = 16


@dataclass(frozen=True)
class Commit:
    """The commit a bench ran at. `sha` None: not recorded, `source` says why."""

    sha: str | None
    dirty: bool | None
    changed_paths: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Machine:
    """What tells one machine from another. `host_id` is a keyed hash of /etc/machine-id: stable
    across boots, but shared by every VM made from one image that baked the file in, so `boot_id`
    (a keyed hash of the kernel's boot id, new at every boot) tells such machines apart as well."""

    cpu_model: str
    cpus: int | None
    memory_bytes: int | None
    kernel: str
    host_id: str | None
    boot_id: str | None
    python: str


# -- pure parts ----------------------------------------------------------------------------------


def cpu_model(cpuinfo: str, fallback: str = "") -> str:
    """The CPU's name from /proc/cpuinfo: x86's `model name`, else ARM's `Hardware` or `CPU part`."""
    for key in ("model name", "Hardware", "Processor", "cpu model", "CPU part"):
        found = re.search(rf"^{re.escape(key)}\s*:\s*(.+?)\s*$", cpuinfo, re.MULTILINE)
        if found:
            return found[1]
    return fallback or "unknown CPU"


def memory_bytes(meminfo: str) -> int | None:
    found = re.search(r"^MemTotal:\s+(\d+)\s*kB", meminfo, re.MULTILINE)
    return int(found[1]) * 1024 if found else None


def keyed_id(raw: str | None, key: bytes) -> str | None:
    """An id derived from a private one (machine id, boot id) that does not reveal it."""
    text = (raw or "").strip().replace("-", "").lower()
    if not text:
        return None
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:ID_HEX]


def changed_paths(porcelain: str) -> tuple[str, ...]:
    """Tracked paths with uncommitted changes, from `git status --porcelain=v1 -z --untracked-files=no`
    (a rename's entry is followed by its old name, which is skipped)."""
    entries = porcelain.split("\0")
    paths: list[str] = []
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":
            index += 1
    return tuple(paths)


def machine_label(machine: dict[str, Any] | None) -> str:
    """A short readable name of the machine a raw file was measured on, from what the file records."""
    machine = machine or {}
    parts: list[str] = []
    if machine.get("cpu_model"):
        parts.append(re.sub(r"\((R|TM)\)", "", str(machine["cpu_model"])).replace("  ", " ").strip())
    if machine.get("cpus") is not None:
        parts.append(f"{machine['cpus']} cores")
    if machine.get("memory_bytes"):
        parts.append(f"{machine['memory_bytes'] / 2**30:.0f} GiB")
    gpus = machine.get("gpus")
    if isinstance(gpus, list) and gpus:
        name = str(gpus[0]).split(",")[0].strip()
        parts.append(f"{len(gpus)}x {name}" if len(gpus) > 1 else name)
    if machine.get("host_id"):
        ids = f"host {str(machine['host_id'])[:6]}"
        if machine.get("boot_id"):
            ids += f", boot {str(machine['boot_id'])[:6]}"
        parts.append(ids)
    else:
        if machine.get("kernel"):
            parts.append(f"kernel {machine['kernel']}")
        if machine.get("boot_id"):
            parts.append(f"boot {str(machine['boot_id'])[:6]}")
        parts.append("CPU model and host id not recorded" if not machine.get("cpu_model") else "host id not recorded")
    return ", ".join(parts) if machine else "machine not recorded"


def fresh_path(path: Path) -> Path:
    """`path` if free, else the first free of `<stem>b`, `<stem>c`, ... `<stem>z`, `<stem>-27`, ...:
    the files of one day's runs sort by name in the order they were made."""
    if not path.exists():
        return path
    for n in range(2, 10_000):
        suffix = chr(ord("a") + n - 1) if n <= 26 else f"-{n}"
        candidate = path.with_name(f"{path.stem}{suffix}{path.suffix}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(f"{path}: no free name left beside it")


def commit_from_record(record: dict[str, Any], where: str) -> Commit:
    """A commit the sending machine wrote (`python -m bench.provenance commit`), read on one without git."""
    sha = record.get("commit")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise ValueError(f"{where}: `commit` is {sha!r}, not a 40-digit commit id")
    return Commit(
        sha=sha,
        dirty=record.get("tree_dirty"),
        changed_paths=tuple(record.get("changed_paths", ())),
        source=f"recorded on the sending machine ({record.get('recorded_at', 'time not recorded')}), read from {where}",
    )


# -- reading this machine ------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def read_machine() -> Machine:
    machine_id = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    return Machine(
        cpu_model=cpu_model(_read("/proc/cpuinfo") or "", platform.processor() or platform.machine()),
        cpus=os.cpu_count(),
        memory_bytes=memory_bytes(_read("/proc/meminfo") or ""),
        kernel=platform.release(),
        host_id=keyed_id(machine_id, HOST_ID_KEY),
        boot_id=keyed_id(_read("/proc/sys/kernel/random/boot_id"), BOOT_ID_KEY),
        python=platform.python_version(),
    )


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def read_commit(repo: Path | None = None) -> Commit:
    """HEAD and the tree's uncommitted changes to tracked files (of this checkout, or `repo`); without
    git, the sender's record named by ATLAS_BENCH_COMMIT_FILE; else not recorded, with the reason."""
    repo = (repo or REPO).resolve()
    try:
        top = _git(repo, "rev-parse", "--show-toplevel")
        head = _git(repo, "rev-parse", "--verify", "HEAD")
    except OSError as error:
        top = head = subprocess.CompletedProcess([], 127, "", str(error))
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() != repo:
        # A copy of the tree inside another checkout (an ignored folder of it, carried to another
        # machine): that checkout's HEAD says nothing of the code that runs here.
        head = subprocess.CompletedProcess([], 1, "", f"{repo} is inside another checkout ({top.stdout.strip()})")
    if head.returncode == 0:
        status = _git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=no")
        if status.returncode != 0:
            return Commit(head.stdout.strip(), None, (), f"git in {repo}; `git status` failed: {status.stderr.strip()}")
        paths = changed_paths(status.stdout)
        return Commit(head.stdout.strip(), bool(paths), paths[:CHANGED_PATHS_KEPT], "git")
    record_file = os.environ.get(COMMIT_FILE_ENV)
    if record_file:
        where = Path(record_file)
        return commit_from_record(json.loads(where.read_text()), str(where))
    reason = (head.stderr or head.stdout).strip().splitlines()[-1:] or ["no output"]
    return Commit(None, None, (), f"not recorded: no git checkout here ({reason[0]}) and no {COMMIT_FILE_ENV}")


def run_record(argv: list[str] | None = None, commit: Commit | None = None) -> dict[str, Any]:
    """The provenance keys of a raw file, taken when the bench starts; `commit` where the bench
    measures another checkout than this one (a fresh clone)."""
    commit = commit or read_commit()
    return {
        "commit": commit.sha,
        "tree_dirty": commit.dirty,
        "changed_paths": list(commit.changed_paths),
        "commit_source": commit.source,
        "machine": asdict(read_machine()),
        "command_line": list(argv if argv is not None else sys.orig_argv),
    }


def write_result(result: dict[str, Any], out: Path, indent: int = 2, *, update: bool = False) -> Path:
    """Write a bench's raw JSON and return where it went: under a new name where `out` is taken
    (an earlier run's file is never overwritten), or, with `update`, over the file this same run
    wrote before (a bench that saves as it goes passes back the path it was given)."""
    missing = [key for key in REQUIRED if key not in result]
    if missing:
        raise ValueError(f"{out.name}: the result has no {', '.join(missing)}: add bench.provenance.run_record()")
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=indent) + "\n"
    if update:
        out.write_text(text)
        return out
    while True:
        target = fresh_path(out)
        try:
            with target.open("x") as handle:  # exclusive: a file made meanwhile is not overwritten either
                handle.write(text)
        except FileExistsError:
            continue
        return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    commit = sub.add_parser("commit", help="write this checkout's commit for a bench run on a machine without git")
    commit.add_argument("--out", type=Path, required=True)
    sub.add_parser("show", help="print what a raw file written here now would record")
    args = parser.parse_args(argv)
    if args.command == "show":
        print(json.dumps(run_record(), indent=2))
        return 0
    found = read_commit()
    if found.sha is None:
        raise SystemExit(f"bench.provenance: {found.source}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "commit": found.sha,
        "tree_dirty": found.dirty,
        "changed_paths": list(found.changed_paths),
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"bench.provenance: {found.sha[:12]}{' (uncommitted changes)' if found.dirty else ''} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
