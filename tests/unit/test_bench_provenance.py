"""bench/provenance.py: what every raw file under bench/results/ records of where it came from
(commit, uncommitted changes, machine, command line), and that writing one never overwrites another."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import provenance
from bench.provenance import Commit

BENCH = Path(provenance.__file__).resolve().parent

XEON = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu\n"
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 9454 48-Core Processor  \n\nprocessor\t: 1\nmodel name\t: AMD EPYC\n"
GRAVITON = "processor\t: 0\nBogoMIPS\t: 243.75\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"


@pytest.mark.parametrize(
    ("cpuinfo", "fallback", "expected"),
    [
        (XEON, "", "Intel(R) Xeon(R) Processor"),
        (EPYC, "", "AMD EPYC 9454 48-Core Processor"),  # the first processor's, trailing blanks cut
        (GRAVITON, "", "0xd0c"),  # ARM names no model: its part number
        ("", "x86_64", "x86_64"),
        ("", "", "unknown CPU"),
    ],
)
def test_cpu_model(cpuinfo: str, fallback: str, expected: str) -> None:
    assert provenance.cpu_model(cpuinfo, fallback) == expected


@pytest.mark.parametrize(
    ("meminfo", "expected"),
    [
        ("MemTotal:       24683792 kB\nMemFree:  1 kB\n", 24683792 * 1024),
        ("MemFree:  1 kB\n", None),
    ],
)
def test_memory_bytes(meminfo: str, expected: int | None) -> None:
    assert provenance.memory_bytes(meminfo) == expected


def test_the_host_id_is_stable_and_does_not_reveal_the_machine_id() -> None:
    raw = "3d1219c7c4c5404aaa1f6d2a48adfda4\n"
    host = provenance.keyed_id(raw, provenance.HOST_ID_KEY)
    assert host == provenance.keyed_id(raw.strip().upper(), provenance.HOST_ID_KEY)  # same machine, same id
    assert host is not None and re.fullmatch(r"[0-9a-f]{16}", host)
    assert host not in raw and raw.strip()[:16] != host
    assert provenance.keyed_id("0" * 32, provenance.HOST_ID_KEY) != host  # another machine, another id
    assert provenance.keyed_id(raw, provenance.BOOT_ID_KEY) != host  # keyed per use: ids cannot be joined
    # The kernel's boot id is written with dashes; the same id either way.
    boot = "fb010a3c-4a65-44f2-b40c-b9d6e526ff73"
    assert provenance.keyed_id(boot, provenance.BOOT_ID_KEY) == provenance.keyed_id(
        boot.replace("-", ""), provenance.BOOT_ID_KEY
    )
    assert provenance.keyed_id("", provenance.HOST_ID_KEY) is None
    assert provenance.keyed_id(None, provenance.HOST_ID_KEY) is None


@pytest.mark.parametrize(
    ("porcelain", "expected"),
    [
        ("", ()),
        (" M bench/stats.py\0", ("bench/stats.py",)),
        ("M  a.py\0MM b c.py\0", ("a.py", "b c.py")),  # names with spaces come whole with -z
        ("R  new.py\0old.py\0 D gone.py\0", ("new.py", "gone.py")),  # a rename's old name is skipped
    ],
)
def test_changed_paths(porcelain: str, expected: tuple[str, ...]) -> None:
    assert provenance.changed_paths(porcelain) == expected


FULL = {
    "cpu_model": "Intel(R) Xeon(R) Processor",
    "cpus": 2,
    "memory_bytes": 25276203008,
    "kernel": "6.18.44-fc-v1252",
    "host_id": "026cc04052275a41",
    "boot_id": "f6841de51fca8452",
    "python": "3.11.7",
}


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        (FULL, "Intel Xeon Processor, 2 cores, 24 GiB, host 026cc0, boot f6841d"),
        ({**FULL, "boot_id": None}, "Intel Xeon Processor, 2 cores, 24 GiB, host 026cc0"),
        (   # a machine without /etc/machine-id (the lent GPU machine): its kernel and boot tell it apart
            {**FULL, "host_id": None},
            "Intel Xeon Processor, 2 cores, 24 GiB, kernel 6.18.44-fc-v1252, boot f6841d, host id not recorded",
        ),
        (
            {**FULL, "host_id": None, "boot_id": None},
            "Intel Xeon Processor, 2 cores, 24 GiB, kernel 6.18.44-fc-v1252, host id not recorded",
        ),
        # Files from before the record: what they have, and what they lack.
        (
            {"cpus": 2, "kernel": "6.18.44-fc-v1147", "python": "3.11.7"},
            "2 cores, kernel 6.18.44-fc-v1147, CPU model and host id not recorded",
        ),
        (
            {"hostname": "vm", "cpus": 16, "kernel": "k-gpu", "gpus": ["NVIDIA H200, 143771 MiB, 580.159.04"]},
            "16 cores, NVIDIA H200, kernel k-gpu, CPU model and host id not recorded",
        ),
        ({**FULL, "gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB"] * 2}, "Intel Xeon Processor, 2 cores, 24 GiB, "
         "2x NVIDIA H100 80GB HBM3, host 026cc0, boot f6841d"),
        (None, "machine not recorded"),
        ({}, "machine not recorded"),
    ],
)
def test_machine_label(machine: dict[str, Any] | None, expected: str) -> None:
    assert provenance.machine_label(machine) == expected


def test_a_taken_name_gets_the_next_free_suffix(tmp_path: Path) -> None:
    first = tmp_path / "hpc-sweep-slurm-2026-12-05.json"
    assert provenance.fresh_path(first) == first
    first.write_text("{}")
    assert provenance.fresh_path(first).name == "hpc-sweep-slurm-2026-12-05b.json"
    (tmp_path / "hpc-sweep-slurm-2026-12-05b.json").write_text("{}")
    assert provenance.fresh_path(first).name == "hpc-sweep-slurm-2026-12-05c.json"
    for letter in "cdefghijklmnopqrstuvwxyz":
        (tmp_path / f"hpc-sweep-slurm-2026-12-05{letter}.json").write_text("{}")
    assert provenance.fresh_path(first).name == "hpc-sweep-slurm-2026-12-05-27.json"


def _record(**changes: Any) -> dict[str, Any]:
    return {"bench": "x", **provenance.run_record(["python", "-m", "bench.x"], Commit("a" * 40, False, (), "git")),
            "median_s": 1.0, **changes}  # fmt: skip


def test_write_result_never_overwrites_an_earlier_file(tmp_path: Path) -> None:
    out = tmp_path / "results" / "x-2026-12-05.json"
    first = provenance.write_result(_record(median_s=1.0), out)
    second = provenance.write_result(_record(median_s=2.0), out)
    assert (first, second.name) == (out, "x-2026-12-05b.json")
    assert json.loads(first.read_text())["median_s"] == 1.0
    assert json.loads(second.read_text())["median_s"] == 2.0
    # A bench that saves as it goes rewrites its own file, and only that one.
    provenance.write_result(_record(median_s=3.0), second, update=True)
    assert json.loads(second.read_text())["median_s"] == 3.0
    assert json.loads(first.read_text())["median_s"] == 1.0


@pytest.mark.parametrize("key", provenance.REQUIRED)
def test_write_result_refuses_a_result_without_its_provenance(tmp_path: Path, key: str) -> None:
    result = _record()
    del result[key]
    with pytest.raises(ValueError, match=rf"has no {key}: add bench.provenance.run_record\(\)"):
        provenance.write_result(result, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_run_record_reads_this_machine_and_keeps_the_command_line() -> None:
    record = provenance.run_record(["python3", "-m", "bench.hpc_sweep", "--rounds", "10"])
    assert record["command_line"] == ["python3", "-m", "bench.hpc_sweep", "--rounds", "10"]
    machine = record["machine"]
    assert set(machine) == {"cpu_model", "cpus", "memory_bytes", "kernel", "host_id", "boot_id", "python"}
    assert machine["cpus"] >= 1 and machine["memory_bytes"] > 0 and machine["cpu_model"]
    raw_id = Path("/etc/machine-id").read_text().strip() if Path("/etc/machine-id").exists() else ""
    assert raw_id == "" or raw_id not in json.dumps(record)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "bench.py").write_text("one\n")
    (root / "other.py").write_text("one\n")
    _git(root, "add", "bench.py", "other.py")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_read_commit_says_whether_the_tree_had_uncommitted_changes(repo: Path) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    clean = provenance.read_commit(repo)
    assert (clean.sha, clean.dirty, clean.changed_paths, clean.source) == (head, False, (), "git")
    (repo / "bench.py").write_text("two\n")
    (repo / "untracked.txt").write_text("not part of the tree\n")
    dirty = provenance.read_commit(repo)
    assert (dirty.sha, dirty.dirty, dirty.changed_paths) == (head, True, ("bench.py",))


def test_without_git_the_senders_record_is_read_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "copy"  # the device's copy of the tree: no .git
    copy.mkdir()
    monkeypatch.delenv(provenance.COMMIT_FILE_ENV, raising=False)
    missing = provenance.read_commit(copy)
    assert missing.sha is None and missing.dirty is None
    assert missing.source.startswith("not recorded: no git checkout here")
    assert provenance.COMMIT_FILE_ENV in missing.source
    record = tmp_path / "commit.json"
    record.write_text(json.dumps({"commit": "b" * 40, "tree_dirty": True, "changed_paths": ["bench/x.py"],
                                  "recorded_at": "2026-12-05T10:00:00+00:00"}))  # fmt: skip
    monkeypatch.setenv(provenance.COMMIT_FILE_ENV, str(record))
    sent = provenance.read_commit(copy)
    assert (sent.sha, sent.dirty, sent.changed_paths) == ("b" * 40, True, ("bench/x.py",))
    assert sent.source == f"recorded on the sending machine (2026-12-05T10:00:00+00:00), read from {record}"


def test_a_copy_inside_another_checkout_does_not_take_that_checkouts_commit(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on the lent GPU machine: a bench carried in an ignored folder of the lead's checkout read
    that checkout's HEAD, which said nothing of the code that ran."""
    (repo / ".git" / "info" / "exclude").write_text("/carried/\n")
    copy = repo / "carried" / "tree"
    copy.mkdir(parents=True)
    monkeypatch.delenv(provenance.COMMIT_FILE_ENV, raising=False)
    found = provenance.read_commit(copy)
    assert found.sha is None and f"{copy.resolve()} is inside another checkout ({repo.resolve()})" in found.source
    record = repo / "carried" / "commit.json"
    record.write_text(json.dumps({"commit": "d" * 40, "tree_dirty": False}))
    monkeypatch.setenv(provenance.COMMIT_FILE_ENV, str(record))
    assert provenance.read_commit(copy).sha == "d" * 40
    assert provenance.read_commit(repo).sha == _git(repo, "rev-parse", "HEAD")  # the checkout itself: git


@pytest.mark.parametrize("commit", [None, "", "abc1234", "B" * 40, "z" * 40])
def test_a_senders_record_without_a_full_commit_id_is_refused(commit: Any) -> None:
    with pytest.raises(ValueError, match=r"commit\.json: `commit` is .*, not a 40-digit commit id"):
        provenance.commit_from_record({"commit": commit}, "commit.json")


def test_the_commit_command_writes_what_a_device_run_reads(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provenance, "REPO", repo)
    (repo / "other.py").write_text("changed\n")
    out = tmp_path / "carry" / "commit.json"
    assert provenance.main(["commit", "--out", str(out)]) == 0
    back = provenance.commit_from_record(json.loads(out.read_text()), str(out))
    assert (back.sha, back.dirty, back.changed_paths) == (_git(repo, "rev-parse", "HEAD"), True, ("other.py",))


def test_every_bench_writes_its_raw_file_through_write_result() -> None:
    """A bench writing its JSON by hand would skip the record and could overwrite an earlier file."""
    for module in sorted(BENCH.glob("*.py")):
        if module.name == "provenance.py":
            continue
        text = module.read_text()
        assert not re.search(r"write_text\(json\.dumps\((result|summary|record)\b", text), module.name
        if "RESULTS /" in text or "write_result(" in text:
            assert "from bench.provenance import" in text and "run_record" in text, module.name
