"""Bring your own workflow: what `atlas:workload` may name, folder sources and their limits,
definitions outside Atlas's repository, the report section, `scripts/workload check`, and the
shipped shell pipeline (workloads/wordfreq) run for real by `sh`."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import workload_check
from infra.compare.contract import read_throughput, report_contract
from infra.compare.records import Missing, ThroughputReading, ThroughputSpec
from infra.openshift.manifests.volumes import SourceFile, source_config_map_data
from infra.workload.load import check_staged_size, folder_files, load_workload, locate_workload, shipped_workloads
from infra.workload.model import FOLDER_LIMITS, RUNTIME_BUILD, FolderSource, WorkloadError
from infra.workload.parse import parse_workload
from infra.workload.render import report_output

REPO = Path(__file__).resolve().parents[2]
WORDFREQ = REPO / "workloads" / "wordfreq"
ENTRYPOINT = REPO / "infra" / "telemetry" / "entrypoint.sh"


def folder_definition() -> dict[str, Any]:
    """A two-step shell workload with a folder source, as docs/workloads.md writes one."""
    return {
        "version": 1,
        "name": "mine",
        "source": {"folder": "."},
        "data": {"outputs": [{"name": "out", "path": "results/out.txt"}]},
        "steps": [
            {"name": "make", "command": ["sh", "make.sh"], "outputs": ["out"],
             "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "64Mi",
                           "walltime": "00:01:00"}},
            {"name": "use", "command": ["sh", "use.sh"], "inputs": ["out"],
             "resources": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "64Mi",
                           "walltime": "00:01:00"}},
        ],
        "logs": {"root": "logs"},
        "telemetry": {"root": "telemetry"},
    }


def write_workload(folder: Path, definition: dict[str, Any], files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    path = folder / "workload.yaml"
    path.write_text(yaml.safe_dump(definition))
    return path


# --- what atlas:workload names ------------------------------------------------------------------


def test_every_folder_under_workloads_with_a_definition_ships() -> None:
    expected = sorted(p.parent.name for p in (REPO / "workloads").glob("*/workload.yaml"))
    assert list(shipped_workloads()) == expected
    assert "wordfreq" in expected and "runtime" not in expected  # the runtime image is not a workload


def test_a_shipped_name_a_folder_and_a_file_all_locate_the_definition(tmp_path: Path) -> None:
    own = write_workload(tmp_path / "mine", folder_definition(), {"make.sh": "true\n", "use.sh": "true\n"})
    assert locate_workload("wordfreq", REPO) == WORDFREQ / "workload.yaml"
    assert locate_workload("mine", tmp_path / "x", shipped_root=tmp_path) == own
    assert locate_workload("./mine", tmp_path) == own.resolve()
    assert locate_workload(str(own), Path("/nonexistent")) == own.resolve()
    assert locate_workload("mine/workload.yaml", tmp_path) == own.resolve()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("resnet", "atlas:workload: 'resnet' is not a workload that ships with Atlas"),
        ("./missing", "atlas:workload: {tmp}/missing does not exist"),
        ("other.yaml", "atlas:workload: {tmp}/other.yaml does not exist"),
        ("", "atlas:workload: expected a workload name or path, found ''"),
        ("a\nb", "expected a workload name or path"),
        (3, "expected a workload name or path, found 3"),
        (["probe"], "expected a workload name or path"),
    ],
)
def test_a_workload_that_cannot_be_found_is_refused_naming_the_key(tmp_path: Path, value: Any, message: str) -> None:
    with pytest.raises(WorkloadError) as error:
        locate_workload(value, tmp_path)
    assert message.format(tmp=tmp_path) in str(error.value)
    assert "pulumi config set atlas:workload" in str(error.value)


# --- folder sources -----------------------------------------------------------------------------


def test_a_folder_source_stages_every_file_with_its_mode_and_nothing_of_version_control(tmp_path: Path) -> None:
    path = write_workload(
        tmp_path / "mine",
        folder_definition(),
        {"make.sh": "echo made\n", "lib/table.csv": "a,b\n", ".git/HEAD": "x\n", "__pycache__/m.pyc": "x"},
    )
    os.chmod(tmp_path / "mine" / "make.sh", 0o755)  # noqa: S103 (a script the owner runs)
    workload = load_workload(path)
    assert isinstance(workload.source, FolderSource) and workload.build == RUNTIME_BUILD
    files = {f.path: f.mode for f in folder_files(workload)}
    # The definition itself is read here, not staged.
    assert files == {"lib/table.csv": 0o644, "make.sh": 0o755}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({f"f{i}.txt": "x" for i in range(FOLDER_LIMITS.max_files + 1)}, "holds more than 256 files or 512 KiB"),
        ({"big.bin": "x" * (FOLDER_LIMITS.max_bytes + 1)}, "holds more than 256 files or 512 KiB"),
        ({}, "holds no file to stage"),
    ],
)
def test_a_folder_beyond_its_limits_is_refused(tmp_path: Path, files: dict[str, str], message: str) -> None:
    workload = load_workload(write_workload(tmp_path / "mine", folder_definition(), files))
    with pytest.raises(WorkloadError, match=rf"^source\.folder: .*{re.escape(message)}"):
        folder_files(workload)


def test_a_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("not for the cluster\n")
    path = write_workload(tmp_path / "mine", folder_definition(), {"make.sh": "true\n"})
    (tmp_path / "mine" / "leak").symlink_to(tmp_path / "secret")
    with pytest.raises(WorkloadError, match=r"^source\.folder: leak is a link out of"):
        folder_files(load_workload(path))


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    definition = folder_definition()
    definition["source"] = {"folder": "code"}
    with pytest.raises(WorkloadError, match=r"^source\.folder: .*/code is not a folder"):
        folder_files(load_workload(write_workload(tmp_path / "mine", definition, {})))


# --- definitions outside Atlas's repository --------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source": {"path": "workloads/probe"}, "build": {"containerfile": "C", "entrypoint": "e.sh"}},
         "source.path: names a Python package inside Atlas's repository"),
        ({"source": {"repository": "https://github.com/example/code", "branch": "main", "commit": "a" * 40,
                     "patch": "fix.patch"}, "build": {"containerfile": "C", "entrypoint": "e.sh"}},
         "source.patch: is read from Atlas's repository"),
        ({"build": {"containerfile": "Containerfile", "entrypoint": "e.sh"}},
         "build: the image is built from Atlas's repository"),
    ],
)
def test_outside_the_repository_only_what_does_not_need_atlas_s_tree_is_accepted(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = write_workload(tmp_path / "mine", {**folder_definition(), **change}, {"make.sh": "true\n"})
    with pytest.raises(WorkloadError) as error:
        load_workload(path, REPO)
    assert str(error.value).startswith(f"{path}: {message}")
    # Readers of a run that already stood up (compare, monitor, nodes) hold it to nothing more.
    assert load_workload(path).name == "mine"


# --- the definition's new keys -----------------------------------------------------------------------


def bad(change: dict[str, Any]) -> dict[str, Any]:
    definition = copy.deepcopy(folder_definition())
    for key, value in change.items():
        definition[key] = value
    return definition


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        (bad({"source": {}}), "source: names no code"),
        (bad({"source": {"folder": ".", "path": "x"}}), "source: names path and folder"),
        (bad({"source": {"folder": "../elsewhere"}}), "source.folder: '../elsewhere' contains '..'"),
        (bad({"source": {"folder": "/abs"}}), "source.folder: '/abs' is absolute"),
        (bad({"source": {"folder": "a;rm -rf b"}}), "source.folder: 'a;rm -rf b' contains a shell metacharacter"),
        (bad({"source": {"path": "workloads/mine"}}), "build: required but missing"),
        (bad({"report": {"step": "fit"}}), "report.step: 'fit' is not a step"),
        (bad({"report": {"mode": 1}}), "report: unknown key(s) mode"),
        (bad({"report": {"throughput": {"file": "logs/r.log", "pattern": "rate ([0-9.]+)", "unit": "x/s"}}}),
         "report.throughput.pattern: has no group named `value`"),
        (bad({"report": {"throughput": {"file": "logs/r.log", "pattern": "(?P<value>[0-9", "unit": "x/s"}}}),
         "report.throughput.pattern: is not a regular expression"),
        (bad({"report": {"throughput": {"file": "results/r.log", "pattern": "(?P<value>1)", "unit": "x/s"}}}),
         "report.throughput.file: 'results/r.log' is not under logs.root (logs)"),
        (bad({"report": {"throughput": {"file": "logs", "pattern": "(?P<value>1)", "unit": "x/s"}}}),
         "report.throughput.file: 'logs' is not under logs.root"),
        (bad({"report": {"throughput": {"file": "logs/r.log", "pattern": "(?P<value>1)", "unit": "$(id)"}}}),
         "report.throughput.unit: '$(id)' is not a unit"),
        (bad({"report": {"throughput": {"file": "logs/r.log", "pattern": "(?P<value>1)" * 100, "unit": "x/s"}}}),
         "report.throughput.pattern: is 1200 characters long"),
        (bad({"report": {"throughput": {"file": "logs/r.log", "unit": "x/s"}}}),
         "report.throughput.pattern: required but missing"),
        (bad({"logs": {"root": "logs", "experiment": "a b"}}), "logs.experiment: 'a b' contains a shell metacharacter"),
    ],
)
def test_malformed_new_keys_are_refused_naming_the_key(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as error:
        parse_workload(definition)
    assert message in str(error.value)


def test_a_git_source_without_build_runs_in_the_runtime_image_and_its_size_is_checked() -> None:
    definition = folder_definition()
    definition["source"] = {"repository": "https://github.com/example/code", "branch": "main", "commit": "a" * 40}
    workload = parse_workload(definition)
    assert workload.runs_in_runtime_image and workload.build == RUNTIME_BUILD
    check_staged_size([1024] * 10, "workload 'mine''s code")
    with pytest.raises(WorkloadError, match=r"^workload 'mine''s code holds more than 256 files or 512 KiB"):
        check_staged_size([FOLDER_LIMITS.max_bytes, 1], "workload 'mine''s code")


def test_the_report_defaults_to_the_last_step_and_no_training_log() -> None:
    workload = parse_workload(folder_definition())
    assert workload.measured_step == "use" and workload.logs.experiment is None
    assert report_output(workload) == {"step": "use", "training_log": False, "throughput": None}


def test_the_report_contract_travels_through_the_outputs_to_the_comparison() -> None:
    workload = load_workload(WORDFREQ / "workload.yaml")
    exported = report_output(workload)
    # Relative to the logs folder, where each side reads it.
    assert exported["throughput"] == {"file": "wordfreq.log", "pattern": "rate (?P<value>[0-9.]+) words/s",
                                      "unit": "words/s"}
    contract = report_contract({"atlas": {"report": exported}})
    assert contract.step == "count" and not contract.training_log
    assert contract.throughput == ThroughputSpec("wordfreq.log", "rate (?P<value>[0-9.]+) words/s", "words/s")
    # Outputs from before the report contract: BigGAN's train step and training log.
    old = report_contract({"atlas": {"workload": "probe"}})
    assert old.step == "train" and old.training_log and old.throughput is None


def test_the_last_matching_line_is_the_workload_s_throughput() -> None:
    spec = ThroughputSpec("r.log", r"rate (?P<value>[0-9.]+) words/s", "words/s")
    text = "warm-up\ncount: rate 10.5 words/s\nnoise rate x words/s\ncount: rate 20.25 words/s\ndone\n"
    reading = read_throughput(text, spec, "r.log here")
    assert reading == ThroughputReading(20.25, "words/s", "r.log here", "count: rate 20.25 words/s")
    missing = read_throughput("nothing\n", spec, "r.log here")
    assert isinstance(missing, Missing) and "no line of r.log here matches" in missing.reason


# --- on Kubernetes: the folder in a ConfigMap, copied in by the entrypoint ------------------------


def test_the_folder_travels_in_numbered_configmap_keys_with_paths_and_modes() -> None:
    data, items = source_config_map_data([("steps/a.sh", b"echo a\n", 0o755), ("t.txt", b"\x00\xff", 0o644)])
    assert items == (SourceFile("file-0000", "steps/a.sh", 0o755),
                     SourceFile("file-0001", "t.txt", 0o644))
    assert set(data) == {"file-0000", "file-0001"}
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]+", key) for key in data)  # what a ConfigMap key allows


def test_the_entrypoint_copies_a_configmap_volume_into_the_working_directory(tmp_path: Path) -> None:
    # A ConfigMap volume as the kubelet lays it out: files under a timestamped folder, `..data`
    # linking to it, and each top-level entry a link through `..data`.
    volume = tmp_path / "volume"
    stamped = volume / "..2026_12_03_23_00_00.000000001"
    (stamped / "steps").mkdir(parents=True)
    (stamped / "steps" / "run.sh").write_text("echo ran\n")
    os.chmod(stamped / "steps" / "run.sh", 0o755)  # noqa: S103 (a script the owner runs)
    (stamped / ".hidden").write_text("kept\n")
    (volume / "..data").symlink_to(stamped.name)
    for entry in ("steps", ".hidden"):
        (volume / entry).symlink_to(f"..data/{entry}")
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "ATLAS_SOURCE_DIR": str(volume)}
    proc = subprocess.run(["sh", str(ENTRYPOINT), "sh", "-c", "ls -A; ./steps/run.sh"], cwd=work, env=env,
                          capture_output=True, text=True, check=False, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [".hidden", "steps", "ran"]
    assert not (work / "steps").is_symlink() and (work / "steps" / "run.sh").stat().st_mode & 0o111


# --- scripts/workload check ---------------------------------------------------------------------------


def test_check_prints_every_step_for_both_schedulers_and_kubernetes(capsys: pytest.CaptureFixture[str]) -> None:
    assert workload_check.main(["check", str(WORDFREQ)]) == 0
    out = capsys.readouterr().out
    steps = [s.name for s in load_workload(WORDFREQ / "workload.yaml").steps]
    for step in steps:
        assert f"===== step {step}: lsf job script" in out
        assert f"===== step {step}: slurm job script" in out
        assert f"===== step {step}: Kubernetes Job" in out
    assert out.count("#BSUB -J atlas-") == len(steps) and out.count("#SBATCH --job-name=atlas-") == len(steps)
    parts = out.split("===== step ")[1:]
    jobs = [yaml.safe_load(part.split("=====\n", 1)[1]) for part in parts if "Kubernetes Job" in part]
    assert [job["kind"] for job in jobs] == ["Job"] * len(steps)
    assert "the workload writes no training log Atlas reads" in out
    assert "steps/count.sh" in out and "mode 755" in out


def test_check_refuses_a_bad_definition_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    definition = folder_definition()
    definition["steps"][1]["inputs"] = ["nothing"]
    path = write_workload(tmp_path / "mine", definition, {"make.sh": "true\n"})
    assert workload_check.main(["check", str(path.parent), "--quiet"]) == 1
    assert "steps[1].inputs[0]: 'nothing' is not declared" in capsys.readouterr().err


# --- the shipped shell pipeline, run by sh as each side runs it -------------------------------------------


def test_wordfreq_runs_as_its_definition_says_and_logs_a_rate_the_report_reads(tmp_path: Path) -> None:
    workload = load_workload(WORDFREQ / "workload.yaml")
    run = tmp_path / "run"
    for file in folder_files(workload):  # staged as the HPC side stages them
        (run / file.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(file.source, run / file.path)
    for step in workload.steps:
        proc = subprocess.run([*step.command, *step.args], cwd=run, capture_output=True, text=True, check=False,
                              timeout=120)
        assert proc.returncode == 0, f"{step.name}: {proc.stderr}"
    counts = dict(line.split("\t") for line in (run / "results" / "counts.tsv").read_text().splitlines())
    corpus_words = len(re.findall(r"[A-Za-z]+", (run / "data" / "corpus.txt").read_text()))
    assert sum(int(n) for n in counts.values()) == corpus_words
    assert (run / "results" / "top.tsv").read_text().splitlines()[0] == f"a\t{counts['a']}"
    contract = report_contract({"atlas": {"report": report_output(workload)}})
    assert contract.throughput is not None
    reading = read_throughput((run / "logs" / contract.throughput.file).read_text(), contract.throughput, "log")
    assert isinstance(reading, ThroughputReading) and reading.value > 0 and reading.unit == "words/s"
