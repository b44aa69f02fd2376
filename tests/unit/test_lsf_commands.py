"""Table-driven tests of the LSF command set's parsing and formatting (localenv/lsf/bsub_options.py,
localenv/lsf/job_views.py), and of its one rule: the standard library only."""

from __future__ import annotations

import json
import time

import pytest

from localenv.lsf import bsub_options, job_views
from localenv.lsf.errors import LsfError

SATORI_SCRIPT = """#!/bin/bash
#BSUB -L /bin/bash
#BSUB -J train
#BSUB -o train.%J
#BSUB -n 4
#BSUB -R "span[ptile=1]"
#BSUB -gpu "num=4"
#BSUB -q normal
#BSUB -W 1:30   # a trailing comment is not an option
python train.py
#BSUB -x
"""


def test_embedded_options_are_read_from_bsub_lines_anywhere() -> None:
    opts, command = bsub_options.parse_bsub_args(bsub_options.embedded_bsub_argv(SATORI_SCRIPT))
    assert command == []
    assert opts == {
        "-L": ["/bin/bash"],
        "-J": ["train"],
        "-o": ["train.%J"],
        "-n": ["4"],
        "-R": ["span[ptile=1]"],
        "-gpu": ["num=4"],
        "-q": ["normal"],
        "-W": ["1:30"],
        "-x": [""],
    }


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("#BSUB -J a\n", ["-J", "a"]),
        ("  #  BSUB -q debug\n", ["-q", "debug"]),
        ("#BSUB -R 'span[ptile=2]' -n 2\n", ["-R", "span[ptile=2]", "-n", "2"]),
        ("#BSUB -o out.%J \\\n  -e err.%J\n", ["-o", "out.%J", "-e", "err.%J"]),
        ("#BSUBX -J no\n#SBATCH -J no\n# BSUB comment without dash\n", []),
    ],
)
def test_embedded_bsub_argv(script: str, expected: list[str]) -> None:
    assert bsub_options.embedded_bsub_argv(script) == expected


@pytest.mark.parametrize(
    ("argv", "options", "command"),
    [
        (["-J", "x", "sleep", "1"], {"-J": ["x"]}, ["sleep", "1"]),
        (["-n4", "-qdebug", "true"], {"-n": ["4"], "-q": ["debug"]}, ["true"]),
        (
            ["-x", "-gpu", "num=2", "hostname", "-n", "3"],
            {"-x": [""], "-gpu": ["num=2"]},
            ["hostname", "-n", "3"],
        ),
        (["-R", "a", "-R", "span[ptile=1]"], {"-R": ["a", "span[ptile=1]"]}, []),
    ],
)
def test_parse_bsub_args(argv: list[str], options: dict[str, list[str]], command: list[str]) -> None:
    assert bsub_options.parse_bsub_args(argv) == (options, command)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(LsfError) as err:
        bsub_options.parse_bsub_args(["-Z", "x"])
    assert err.value.exit_code == 255
    assert "illegal option -- Z" in err.value.message


def test_command_line_options_win_over_embedded_ones() -> None:
    embedded, _ = bsub_options.parse_bsub_args(bsub_options.embedded_bsub_argv(SATORI_SCRIPT))
    cmdline, _ = bsub_options.parse_bsub_args(["-q", "debug", "-J", "override"])
    merged = bsub_options.merge_options(cmdline, embedded)
    assert bsub_options.single(merged, "-q") == "debug"
    assert bsub_options.single(merged, "-J") == "override"
    assert bsub_options.single(merged, "-n") == "4"  # untouched embedded options stay


@pytest.mark.parametrize(
    ("words", "command"),
    [
        (["sleep", "10"], "sleep 10"),
        (["sleep 1; echo hi"], "sleep 1; echo hi"),
        (["echo", "a b"], 'echo "a b"'),
        (["echo", "$HOME x"], "echo '$HOME x'"),
    ],
)
def test_job_command_from_args(words: list[str], command: str) -> None:
    assert bsub_options.job_command_from_args(words) == command


# --- -R and -gpu ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ptile", "select", "rusage"),
    [
        ("span[ptile=1]", 1, "", {}),
        ("span[ptile=4]", 4, "", {}),
        ("select[mem>100] span[ptile=2]", 2, "mem>100", {}),
        ("mem>100 span[ptile=2]", 2, "mem>100", {}),
        ("rusage[mem=4000:ngpus_physical=2] span[hosts=1]", None, "", {"mem": "4000", "ngpus_physical": "2"}),
        ("", None, "", {}),
    ],
)
def test_parse_resreq(text: str, ptile: int | None, select: str, rusage: dict[str, str]) -> None:
    req = bsub_options.parse_resreq(text)
    assert (req.ptile, req.select, req.rusage) == (ptile, select, rusage)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("select[a] select[b]", 'Error near "select" : duplicate section. Job not submitted.'),
        ("span[ptile=1] span[ptile=2]", 'Error near "span" : duplicate section. Job not submitted.'),
        ("span[ptile=x]", "Error in span section. Job not submitted."),
        ("span[ptile=0]", "Error in span section. Job not submitted."),
        ("span[wrong=1]", "Error in span section. Job not submitted."),
        ("rusage[mem=]", "Error in rusage section. Job not submitted."),
        ("rusage[=5]", "Error in rusage section. Job not submitted."),
        ("span[ptile=1", "Bad resource requirement syntax. Job not submitted."),
        ("nosuch[1]", "Bad resource requirement syntax. Job not submitted."),
    ],
)
def test_resreq_errors(text: str, message: str) -> None:
    with pytest.raises(LsfError) as err:
        bsub_options.parse_resreq(text)
    assert (err.value.message, err.value.exit_code) == (message, 255)


@pytest.mark.parametrize(
    ("text", "num", "per_task", "mode"),
    [
        ("num=2", 2, False, "shared"),
        ("num=4:mode=exclusive_process", 4, False, "exclusive_process"),
        ("num=1/task:mps=yes,shared:j_exclusive=yes", 1, True, "shared"),
        ("num=2/host:gmodel=TeslaV100_SXM2_32GB:gmem=8G", 2, False, "shared"),
        ("mode=shared", 1, False, "shared"),
    ],
)
def test_parse_gpu_req(text: str, num: int, per_task: bool, mode: str) -> None:
    req = bsub_options.parse_gpu_req(text)
    assert req is not None
    assert (req.num, req.per_task, req.mode) == (num, per_task, mode)


def test_gpu_dash_means_no_job_level_requirement() -> None:
    assert bsub_options.parse_gpu_req("-") is None


@pytest.mark.parametrize(
    "text",
    [
        "num=x",
        "num=0",
        "num=2/node",
        "mode=fast",
        "num=2:num=3",
        "colour=red",
        "num",
        "mps=maybe",
        "gmem=lots",
    ],
)
def test_gpu_req_errors(text: str) -> None:
    with pytest.raises(LsfError) as err:
        bsub_options.parse_gpu_req(text)
    assert (err.value.message, err.value.exit_code) == (
        "Bad resource requirement syntax. Job not submitted.",
        255,
    )


@pytest.mark.parametrize(("value", "slots"), [("1", (1, 1)), ("4", (4, 4)), ("2,8", (2, 8))])
def test_parse_slots(value: str, slots: tuple[int, int]) -> None:
    assert bsub_options.parse_slots(value) == slots


@pytest.mark.parametrize(("value", "minutes"), [("10", 10), ("1:30", 90), ("0:5", 5), ("2:00/hostA", 120)])
def test_parse_run_limit(value: str, minutes: int) -> None:
    assert bsub_options.parse_run_limit(value) == minutes


@pytest.mark.parametrize("value", ["abc", "1:2:3", "0", ""])
def test_run_limit_errors(value: str) -> None:
    with pytest.raises(LsfError):
        bsub_options.parse_run_limit(value)


# --- -J arrays and %J/%I --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "array", "indices"),
    [
        ("train", "train", None, ()),
        ("sweep[1-3]", "sweep", "1-3", (1, 2, 3)),
        ("sweep[1-10:3]%2", "sweep", "1-10:3%2", (1, 4, 7, 10)),
        ("s[1,3,5-6]", "s", "1,3,5-6", (1, 3, 5, 6)),
    ],
)
def test_parse_job_name(text: str, name: str, array: str | None, indices: tuple[int, ...]) -> None:
    assert bsub_options.parse_job_name(text) == bsub_options.JobName(name, array, indices)


@pytest.mark.parametrize("text", ["a[0-3]", "a[3-1]", "a[x]", "a[1-2", "a[1-2000]"])
def test_bad_arrays(text: str) -> None:
    with pytest.raises(LsfError):
        bsub_options.parse_job_name(text)


@pytest.mark.parametrize(
    ("path", "is_array", "pattern"),
    [
        ("train.%J", False, "train.%j"),
        ("out.%J.%I", True, "out.%A.%a"),
        ("out.%J.%I", False, "out.%j.0"),
        ("100%done.%J", False, "100%%done.%j"),
    ],
)
def test_output_patterns(path: str, is_array: bool, pattern: str) -> None:
    assert bsub_options.slurm_output_pattern(path, is_array) == pattern


# --- -w -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "conditions", "any_of"),
    [
        ("done(12)", [("done", "12", False, "")], False),
        ("12", [("done", "12", False, "")], False),
        ('ended("prep")', [("ended", "prep", True, "")], False),
        ("done(1) && exit(2)", [("done", "1", False, ""), ("exit", "2", False, "")], False),
        ("exit(5, !=0) || done(6)", [("exit", "5", False, "!=0"), ("done", "6", False, "")], True),
        ("(done(1) && done(2))", [("done", "1", False, ""), ("done", "2", False, "")], False),
        ("done(7[2])", [("done", "7[2]", False, "")], False),
        ("started(job*)", [("started", "job*", True, "")], False),
    ],
)
def test_parse_dependency(expr: str, conditions: list[tuple[str, str, bool, str]], any_of: bool) -> None:
    dep = bsub_options.parse_dependency(expr)
    assert [(c.kind, c.job, c.by_name, c.exit_test) for c in dep.conditions] == conditions
    assert dep.any_of is any_of


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("done(", "done(: Dependency condition syntax error. Job not submitted."),
        ("done(1) &&", "done(1) &&: Dependency condition syntax error. Job not submitted."),
        ("nosuch(1)", "nosuch(1): Dependency condition syntax error. Job not submitted."),
        ("done(1, 2)", "done(1, 2): Dependency condition syntax error. Job not submitted."),
        ("done(1) done(2)", "done(1) done(2): Dependency condition syntax error. Job not submitted."),
    ],
)
def test_dependency_syntax_errors(expr: str, message: str) -> None:
    with pytest.raises(LsfError) as err:
        bsub_options.parse_dependency(expr)
    assert (err.value.message, err.value.exit_code) == (message, 255)


@pytest.mark.parametrize("expr", ["done(1) && done(2) || done(3)", "!done(1)"])
def test_dependencies_slurm_cannot_express_are_refused_with_a_reason(expr: str) -> None:
    with pytest.raises(LsfError) as err:
        bsub_options.parse_dependency(expr)
    assert "README.md" in err.value.message and err.value.exit_code == 255


@pytest.mark.parametrize(
    ("expr", "resolve", "slurm"),
    [
        ("done(12)", {"12": ["12"]}, "afterok:12"),
        ("ended(12) && exit(13)", {"12": ["12"], "13": ["13"]}, "afterany:12,afternotok:13"),
        ("done(1) || started(2)", {"1": ["1"], "2": ["2"]}, "afterok:1?after:2"),
        ('done("prep")', {"prep": ["4", "7"]}, "afterok:4:7"),
    ],
)
def test_slurm_dependency(expr: str, resolve: dict[str, list[str]], slurm: str) -> None:
    assert bsub_options.slurm_dependency(bsub_options.parse_dependency(expr), resolve) == slurm


def test_dependency_on_unknown_job_is_refused() -> None:
    with pytest.raises(LsfError) as err:
        bsub_options.slurm_dependency(bsub_options.parse_dependency("done(424242)"), {"424242": []})
    assert (err.value.message, err.value.exit_code) == (
        "424242: No matching job found. Job not submitted.",
        255,
    )


# --- job records and output formats ---------------------------------------------------------------

T0 = int(time.mktime((2020, 12, 28, 19, 56, 0, 0, 0, -1)))


def slurm_record(**over: object) -> dict[str, object]:
    rec: dict[str, object] = {
        "job_id": 22005,
        "array_job_id": 0,
        "array_task_id": None,
        "array_task_string": "",
        "name": "train",
        "user_name": "atlas",
        "job_state": "COMPLETED",
        "state_reason": "None",
        "exit_code": 0,
        "submit_time": T0,
        "start_time": T0 + 5,
        "end_time": T0 + 65,
        "partition": "normal",
        "nodes": "vm",
        "cpus": 1,
        "dependency": "",
        "command": "",
        "current_working_directory": "/home/atlas",
        "standard_output": "/home/atlas/train.22005",
        "standard_error": "",
        "time_limit": None,
    }
    rec.update(over)
    return rec


@pytest.mark.parametrize(
    ("over", "stat", "exit_code"),
    [
        ({}, "DONE", 0),
        ({"job_state": "FAILED", "exit_code": 3 << 8}, "EXIT", 3),
        ({"job_state": "CANCELLED", "exit_code": 15}, "EXIT", 143),
        ({"job_state": "CANCELLED", "exit_code": 0, "nodes": ""}, "EXIT", None),
        ({"job_state": "TIMEOUT", "exit_code": 15}, "EXIT", 140),
        ({"job_state": "PENDING", "start_time": 0, "end_time": 0, "nodes": ""}, "PEND", None),
        ({"job_state": "PENDING", "state_reason": "JobHeldUser", "nodes": ""}, "PSUSP", None),
        ({"job_state": "RUNNING", "end_time": 0}, "RUN", None),
        ({"job_state": "SUSPENDED"}, "USUSP", None),
    ],
)
def test_states_from_slurm(over: dict[str, object], stat: str, exit_code: int | None) -> None:
    job = job_views.lsf_job_from_slurm(slurm_record(**over), "vm")
    assert (job.stat, job.exit_code) == (stat, exit_code)


def test_array_elements_take_the_array_id_and_an_index() -> None:
    job = job_views.lsf_job_from_slurm(slurm_record(job_id=31, array_job_id=30, array_task_id=2), "vm")
    assert (job.jobid, job.index, job.name, job.display_id) == ("30", 2, "train[2]", "30[2]")
    pending = job_views.lsf_job_from_slurm(
        slurm_record(job_id=30, array_job_id=30, array_task_string="3-5", job_state="PENDING", nodes=""), "vm"
    )
    expanded = job_views.expand_pending_array(pending, slurm_record(array_task_string="3-5"))
    assert [j.display_id for j in expanded] == ["30[3]", "30[4]", "30[5]"]


@pytest.mark.parametrize(
    ("epoch", "seconds", "text"),
    [
        (T0, False, "Dec 28 19:56"),
        (T0 + 7, True, "Dec 28 19:56:07"),
        (int(time.mktime((2021, 1, 5, 9, 1, 0, 0, 0, -1))), False, "Jan  5 09:01"),
        (0, False, ""),
    ],
)
def test_lsf_time(epoch: int, seconds: bool, text: str) -> None:
    assert job_views.lsf_time(epoch, seconds) == text


def test_bjobs_json_matches_lsf_documented_shape() -> None:
    spec = job_views.parse_output_spec("jobid stat queue submit_time start_time finish_time exit_code")
    job = job_views.lsf_job_from_slurm(slurm_record(), "vm")
    text = job_views.format_bjobs_json(spec, [job], [], now=T0 + 100)
    data = json.loads(text)
    assert data == {
        "COMMAND": "bjobs",
        "JOBS": 1,
        "RECORDS": [
            {
                "JOBID": "22005",
                "STAT": "DONE",
                "QUEUE": "normal",
                "SUBMIT_TIME": "Dec 28 19:56",
                "START_TIME": "Dec 28 19:56",
                "FINISH_TIME": "Dec 28 19:57 L",
                "EXIT_CODE": "",
            }
        ],
    }
    assert '"COMMAND":"bjobs"' in text  # no space after the colon, as LSF prints it


def test_bjobs_json_escapes_slashes_and_reports_unknown_ids() -> None:
    spec = job_views.parse_output_spec("jobid output_file")
    job = job_views.lsf_job_from_slurm(slurm_record(), "vm")
    text = job_views.format_bjobs_json(spec, [job], ["Job <9> is not found"], now=T0)
    assert r'"OUTPUT_FILE":"\/home\/atlas\/train.22005"' in text
    records = json.loads(text)["RECORDS"]
    assert records[1] == {"JOBID": "9", "ERROR": "Job <9> is not found"}


@pytest.mark.parametrize(
    ("over", "line"),
    [
        ({}, "22005^DONE^vm^-"),
        ({"job_state": "FAILED", "exit_code": 2 << 8}, "22005^EXIT^vm^2"),
        ({"job_state": "PENDING", "nodes": "", "start_time": 0, "end_time": 0}, "22005^PEND^-^-"),
        ({"cpus": 4}, "22005^DONE^4*vm^-"),
    ],
)
def test_bjobs_noheader_delimited(over: dict[str, object], line: str) -> None:
    spec = job_views.parse_output_spec("jobid stat exec_host exit_code delimiter='^'")
    job = job_views.lsf_job_from_slurm(slurm_record(**over), "vm")
    assert job_views.format_bjobs_text(spec, [job], now=T0, header=False) == line


def test_bjobs_text_with_header_pads_to_default_widths() -> None:
    spec = job_views.parse_output_spec("jobid stat queue")
    job = job_views.lsf_job_from_slurm(slurm_record(), "vm")
    assert job_views.format_bjobs_text(spec, [job], now=T0, header=True).splitlines() == [
        "JOBID   STAT  QUEUE",
        "22005   DONE  normal",
    ]


@pytest.mark.parametrize("spec", ["jobid nosuch", ""])
def test_bad_output_spec(spec: str) -> None:
    with pytest.raises(LsfError):
        job_views.parse_output_spec(spec)


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ("killed", ("Job <11> is being terminated", "", 0)),
        ("finished", ("", "Job <11>: Job has already finished", 255)),
        ("unknown", ("", "Job <11>: No matching job found", 255)),
    ],
)
def test_bkill_messages(outcome: str, expected: tuple[str, str, int]) -> None:
    assert job_views.bkill_message("11", outcome) == expected


def test_bhist_short_summary() -> None:
    job = job_views.lsf_job_from_slurm(slurm_record(), "vm")
    lines = job_views.format_bhist_short([job], now=T0 + 100).splitlines()
    assert lines[0] == "Summary of time in seconds spent in various states:"
    assert lines[1].split() == [
        "JOBID",
        "USER",
        "JOB_NAME",
        "PEND",
        "PSUSP",
        "RUN",
        "USUSP",
        "SSUSP",
        "UNKWN",
        "TOTAL",
    ]
    assert lines[2].split() == ["22005", "atlas", "train", "5", "0", "60", "0", "0", "0", "65"]


@pytest.mark.parametrize(
    ("over", "line"),
    [
        ({}, "Done successfully."),
        ({"job_state": "FAILED", "exit_code": 3 << 8}, "Exited with exit code 3."),
    ],
)
def test_bhist_long_result_line(over: dict[str, object], line: str) -> None:
    job = job_views.lsf_job_from_slurm(slurm_record(**over), "vm")
    assert line in job_views.format_bhist_long(job, now=T0 + 100)


def test_the_command_set_imports_the_standard_library_and_itself_only() -> None:
    # It is copied onto the login node and run by the system `python3 -I`: nothing else is there.
    import ast
    import sys
    from pathlib import Path

    folder = Path(bsub_options.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) >= 7
    imported = set()
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                imported.add(node.module)
    assert {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names} == set()
