"""The reference records' parsers (tests/references.py) on lines and files recorded from the
local environment: Slurm 22.05's jobcomp/filetxt log and containerd 2.x's CRI status files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests import references

DATA = Path(__file__).parent / "data"
# 12 jobs of a local run (2026-12-03, slurmctld in UTC): the six steps of an e2e run (LSF's
# stand-in and Slurm), then sbatch jobs made to show the other shapes (a name with a space, an
# exit code, a signal, an array, a job cancelled while pending).
JOBCOMP = (DATA / "slurm_jobcomp_filetxt.log").read_text()
LINES = {int(line.split()[0].removeprefix("JobId=")): line for line in JOBCOMP.splitlines()}
UTC = dt.UTC


def at(hh: int, mm: int, ss: int, zone: dt.tzinfo = UTC) -> float:
    return dt.datetime(2026, 12, 3, hh, mm, ss, tzinfo=zone).timestamp()


@pytest.mark.parametrize(
    ("job_id", "expected"),
    [
        (1, {"name": "atlas-make-hdf5-decd05fab7", "state": "COMPLETED", "submitted_at": at(17, 57, 56),
             "started_at": at(17, 57, 58), "ended_at": at(17, 58, 1), "node_list": "vm", "node_count": 1,
             "exit_status": 0, "exit_signal": 0, "array_job_id": None, "user": "atlas", "uid": 1001}),
        (6, {"name": "atlas-train-328313931a", "submitted_at": at(17, 57, 56), "eligible_at": at(17, 58, 4),
             "started_at": at(17, 58, 4), "ended_at": at(17, 58, 27), "partition": "normal"}),
        (7, {"name": "two words", "state": "COMPLETED", "started_at": at(17, 59, 53), "ended_at": at(17, 59, 55)}),
        (8, {"name": "fails", "state": "FAILED", "exit_status": 3, "exit_signal": 0}),
        (11, {"name": "killed", "state": "FAILED", "exit_status": 0, "exit_signal": 9}),
        (9, {"name": "arr", "array_job_id": 9, "array_task_id": 1}),
        (12, {"name": "arr", "array_job_id": 9, "array_task_id": 0}),
        # Never ran: Slurm logs StartTime=EndTime, no nodes; the parser says no start.
        (10, {"state": "CANCELLED", "node_list": None, "node_count": 0, "started_at": None,
              "ended_at": at(17, 59, 53), "eligible_at": at(18, 59, 53)}),
    ],
)  # fmt: skip
def test_jobcomp_recorded_lines(job_id: int, expected: dict[str, Any]) -> None:
    record = references.parse_jobcomp_line(LINES[job_id], UTC)
    assert record.job_id == job_id
    assert {k: getattr(record, k) for k in expected} == expected


def test_jobcomp_log_has_every_line_of_the_run() -> None:
    records = references.parse_jobcomp_log(JOBCOMP, UTC)
    assert sorted(records) == list(range(1, 13))
    assert records[4].fields["WorkDir"] == "/home/atlas/atlas-cmp-5fdb85/local/satori-slurm/probe"
    assert records[4].fields["ReservationName"] == ""


def test_jobcomp_times_are_slurmctlds_local_time() -> None:
    berlin = ZoneInfo("Europe/Berlin")  # UTC+1 in December
    record = references.parse_jobcomp_line(LINES[1], berlin)
    assert record.started_at == at(17, 57, 58, berlin) == at(16, 57, 58)


@pytest.mark.parametrize(
    ("edit", "field", "expected"),
    [
        # The plugin prints "Unknown" for a time never set and "unknown" for no submit time.
        (("StartTime=2026-12-03T17:57:58", "StartTime=Unknown"), "started_at", None),
        (("SubmitTime=2026-12-03T17:57:56", "SubmitTime=unknown"), "submitted_at", None),
        # Heterogeneous job components add two keys before DerivedExitCode.
        (("EligibleTime=2026-12-03T17:57:56", "EligibleTime=2026-12-03T17:57:56 HetJobId=1 HetJobOffset=0"),
         "fields", "HetJobId=1"),
    ],
)  # fmt: skip
def test_jobcomp_variants_of_a_recorded_line(edit: tuple[str, str], field: str, expected: Any) -> None:
    line = LINES[1].replace(*edit)
    assert line != LINES[1]
    record = references.parse_jobcomp_line(line, UTC)
    if field == "fields":
        key, value = expected.split("=")
        assert record.fields[key] == value
        assert record.started_at == at(17, 57, 58)
    else:
        assert getattr(record, field) is expected


def test_jobcomp_requeued_job_keeps_its_last_record() -> None:
    first = LINES[1].replace("JobState=COMPLETED", "JobState=NODE_FAIL")
    records = references.parse_jobcomp_log(first + "\n" + LINES[1] + "\n", UTC)
    assert records[1].state == "COMPLETED"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "JobId=1 UserId=atlas(1001)",
        LINES[1].replace("ExitCode=0:0 ", "ExitCode=0 "),
        LINES[1].replace("UserId=atlas(1001)", "UserId=atlas"),
        LINES[1].replace(" NodeCnt=1", ""),
    ],
)
def test_jobcomp_rejects_what_is_not_the_format(line: str) -> None:
    with pytest.raises(ValueError):
        references.parse_jobcomp_line(line, UTC)


@pytest.mark.parametrize(
    ("environ", "offset_h"),
    [
        ({}, 0),  # /etc/localtime given below: UTC
        ({"TZ": ""}, 0),
        ({"TZ": "Europe/Berlin"}, 1),
        ({"TZ": ":Asia/Tokyo"}, 9),
        ({"TZ": "/usr/share/zoneinfo/America/New_York"}, -5),
    ],
)
def test_process_zone(environ: dict[str, str], offset_h: int) -> None:
    zone = references.process_zone(environ, localtime=Path("/usr/share/zoneinfo/Etc/UTC"))
    offset = dt.datetime(2026, 12, 3, 12, tzinfo=zone).utcoffset()
    assert offset == dt.timedelta(hours=offset_h)


def test_process_zone_rejects_a_posix_rule() -> None:
    with pytest.raises(ValueError):
        references.process_zone({"TZ": "EST5EDT,M3.2.0,M11.1.0"})


def test_parse_environ() -> None:
    assert references.parse_environ(b"TZ=Europe/Berlin\0PATH=/bin:/usr/bin\0A=b=c\0") == {
        "TZ": "Europe/Berlin", "PATH": "/bin:/usr/bin", "A": "b=c"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # A pod whose container ran `sleep 1; exit 3` (the API server said startedAt 18:00:29Z,
        # finishedAt 18:00:30Z: these times truncated to the second).
        ("cri-status-exit3.json", {"created_at": 1796320829.059510062, "started_at": 1796320829.133136738,
                                   "finished_at": 1796320830.141538426, "exit_code": 3, "pid": 0}),
        ("cri-status-exit0.json", {"started_at": 1796320829.249834906, "finished_at": 1796320830.253529894,
                                   "exit_code": 0}),
        # Still running: no exit time yet (0 in the file), the task's pid.
        ("cri-status-running.json", {"started_at": 1796320848.768633195, "finished_at": None, "pid": 32763}),
    ],
)  # fmt: skip
def test_cri_status_recorded_files(name: str, expected: dict[str, Any]) -> None:
    status = references.parse_cri_status((DATA / "containerd" / name).read_text())
    assert {k: getattr(status, k) for k in expected} == pytest.approx(expected, abs=1e-6)


def test_cri_status_truncated_to_the_second_is_what_the_api_said() -> None:
    status = references.parse_cri_status((DATA / "containerd" / "cri-status-exit3.json").read_text())
    api_started = dt.datetime(2026, 12, 3, 18, 0, 29, tzinfo=UTC).timestamp()
    api_finished = dt.datetime(2026, 12, 3, 18, 0, 30, tzinfo=UTC).timestamp()
    assert status.started_at is not None and status.finished_at is not None
    assert (int(status.started_at), int(status.finished_at)) == (api_started, api_finished)


def test_cri_status_other_version_is_refused() -> None:
    text = (DATA / "containerd" / "cri-status-exit0.json").read_text().replace('"v1"', '"v2"')
    with pytest.raises(ValueError, match="v2"):
        references.parse_cri_status(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("containerd://" + "f0" * 32, "f0" * 32),
        ("cri-o://" + "f0" * 32, None),
        ("containerd://f0", None),
        ("f0" * 32, None),
    ],
)
def test_container_id(text: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ValueError):
            references.container_id(text)
    else:
        assert references.container_id(text) == expected


def test_cri_status_path() -> None:
    path = references.cri_status_path(Path("/n/containerd"), "ab" * 32)
    assert path == Path("/n/containerd/io.containerd.grpc.v1.cri/containers") / ("ab" * 32) / "status"
