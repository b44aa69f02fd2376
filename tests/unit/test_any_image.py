"""Any image runs under Atlas: the tools Atlas brings into a step whose image it did not build (the
entrypoint and the sampler, infra/telemetry/bundle.py), the Job that mounts them, the entrypoint run
as such a pod runs it (with and without python3), and the reason an unsampled step reaches the report.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.compare.records import Missing, TelemetryColumns
from infra.compare.remote_files import LocalFiles
from infra.compare.run_files import collect_telemetry
from infra.openshift.manifests import step_jobs
from infra.openshift.manifests.labels import RunIdentity
from infra.openshift.manifests.pods import PodContext, pod_spec
from infra.openshift.manifests.volumes import (
    TOOLS_DIR,
    Claims,
    SourceFile,
    SourceVolume,
    source_config_map_data,
    tools_config_map_name,
)
from infra.telemetry import bundle
from infra.telemetry.bundle import ENTRYPOINT, ENTRYPOINT_NAME, MIN_PYTHON, pod_tools, unsampled_path
from infra.workload.load import load_workload
from infra.workload.model import Workload
from infra.workload.render import render_step
from tests.unit.openshift_fixtures import biggan, example_settings

REPO = Path(__file__).resolve().parents[2]
WORDFREQ = REPO / "workloads" / "wordfreq"
IDENTITY = RunIdentity(stack="local", run_id="1", workload="wordfreq")
TOOLS = SourceVolume("atlas-tools-wordfreq-local", (SourceFile("file-0000", ENTRYPOINT_NAME, 0o755),))
SOURCE = SourceVolume("wordfreq-source-abc", (SourceFile("file-0000", "steps/count.sh", 0o755),))


def context(tools: SourceVolume | None = TOOLS, source: SourceVolume | None = SOURCE,
            run_as_uid: int | None = None) -> PodContext:
    return PodContext(
        identity=IDENTITY, namespace="ns", image="registry.example/any/python:3.12", service_account="jobs",
        claims=Claims(data="data", results="results", logs="logs"), workdir="/work", openshift=False,
        source=source, tools=tools, run_as_uid=run_as_uid,
    )


def pod(workload: Workload, step: str, ctx: PodContext) -> dict[str, Any]:
    job = step_jobs.step_job(render_step(workload, step, "openshift"), workload, example_settings(), ctx)
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


# --- the tools ---------------------------------------------------------------------------------------


def test_the_tools_are_the_entrypoint_and_the_samplers_modules_well_within_a_configmap() -> None:
    files = pod_tools()
    assert files[0] == (ENTRYPOINT_NAME, ENTRYPOINT.read_bytes(), 0o755)
    paths = [path for path, _, _ in files[1:]]
    assert paths == [f"infra/{name}" for name in bundle.SAMPLER_FILES]
    assert "infra/telemetry/sampler.py" in paths and all(mode == 0o644 for _, _, mode in files[1:])
    data, _ = source_config_map_data(files)
    # The API server caps a ConfigMap at 1 MiB (base64 included): a quarter of that is plenty of room.
    assert sum(len(v) for v in data.values()) < 256 * 1024


def test_the_sampler_files_import_nothing_but_the_standard_library_and_each_other() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for name in bundle.SAMPLER_FILES:
        text = bundle.sampler_file(name).read_text()
        for module in re.findall(r"^\s*(?:from|import) ([a-zA-Z_][\w.]*)", text, re.MULTILINE):
            top = module.split(".")[0]
            # pynvml (nvidia-ml-py) is imported lazily, inside a try, and optional.
            assert top in stdlib or module.startswith("infra.telemetry") or top == "pynvml", (name, module)


def test_the_entrypoint_checks_the_python_the_bundle_names() -> None:
    text = ENTRYPOINT.read_text()
    assert f"sys.version_info < {MIN_PYTHON}" in text
    assert f"older than {MIN_PYTHON[0]}.{MIN_PYTHON[1]}" in text


def test_an_unsampled_steps_reason_lies_beside_its_telemetry() -> None:
    assert unsampled_path("telemetry/train.jsonl") == "telemetry/train.unsampled"
    assert unsampled_path("t/x") == "t/x.unsampled"


def test_the_tools_configmap_is_named_exactly_once_per_run_and_a_dns_name() -> None:
    assert tools_config_map_name(IDENTITY) == "atlas-tools-wordfreq-local"
    long = tools_config_map_name(RunIdentity(stack="s" * 80, run_id="1", workload="w"))
    assert len(long) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", long)


# --- the Job -------------------------------------------------------------------------------------------


def test_a_step_of_any_image_runs_atlass_entrypoint_from_the_tools_volume() -> None:
    workload = load_workload(WORDFREQ / "workload.yaml")
    spec = pod(workload, "count", context())
    (container,) = spec["containers"]
    assert container["command"] == ["/bin/sh", f"{TOOLS_DIR}/{ENTRYPOINT_NAME}"]
    args = container["args"]
    assert args[:5] == ["--sample", "telemetry/count.jsonl", "1", "count", "--"]
    assert args[5:] == list(render_step(workload, "count", "openshift").argv)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["atlas-tools"] == {"name": "atlas-tools", "configMap": {
        "name": "atlas-tools-wordfreq-local", "items": [{"key": "file-0000", "path": ENTRYPOINT_NAME, "mode": 0o755}]}}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[TOOLS_DIR] == {"name": "atlas-tools", "mountPath": TOOLS_DIR, "readOnly": True}
    # The folder source is copied into a working directory of the pod's own, under the PVCs' subPaths.
    assert volumes["workdir"] == {"name": "workdir", "emptyDir": {}}
    assert mounts["/work"]["name"] == "workdir" and mounts["/work/telemetry"]["subPath"] == "telemetry"


def test_a_step_of_any_image_whose_code_is_in_it_keeps_the_images_working_directory() -> None:
    workload = biggan()
    spec = pod(workload, "train", context(source=None))
    (container,) = spec["containers"]
    assert container["command"][1] == f"{TOOLS_DIR}/{ENTRYPOINT_NAME}"
    assert "workdir" not in {v["name"] for v in spec["volumes"]}


def test_a_step_of_atlass_own_image_is_as_before() -> None:
    workload = load_workload(WORDFREQ / "workload.yaml")
    spec = pod(workload, "count", context(tools=None))
    (container,) = spec["containers"]
    assert "command" not in container  # the image's own entrypoint runs first
    assert container["args"][:3] == ["python3", "-m", "infra.telemetry.sampler"]
    assert not {"atlas-tools", "workdir"} & {v["name"] for v in spec["volumes"]}
    assert "runAsUser" not in spec["securityContext"]


def test_off_openshift_any_image_runs_as_a_uid_in_group_0() -> None:
    spec = pod_spec(context(run_as_uid=1001), [], [])
    assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                                       "runAsUser": 1001, "runAsGroup": 0}


# --- the entrypoint, as such a pod runs it ---------------------------------------------------------------


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    """The tools volume as the kubelet lays it out: each item at its path, with its mode."""
    folder = tmp_path / "tools"
    for path, content, mode in pod_tools():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
    return folder


def run_step(tools: Path, work: Path, path: str, *argv: str) -> subprocess.CompletedProcess[str]:
    work.mkdir(exist_ok=True)
    env = {"PATH": path, "HOME": str(work), "PYTHONPATH": "/image/own/path"}
    return subprocess.run(
        ["/bin/sh", str(tools / ENTRYPOINT_NAME), "--sample", "telemetry/count.jsonl", "0.1", "count", "--", *argv],
        cwd=work, env=env, capture_output=True, text=True, check=False, timeout=60,
    )


def path_with(tmp_path: Path, programs: dict[str, str]) -> str:
    """A PATH holding only the named programs (links to this machine's), as an image would."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, real in programs.items():
        (folder / name).symlink_to(real)
    return str(folder)


SHELL_TOOLS = ("sh", "id", "getent", "dirname", "mkdir", "cp", "mktemp", "cat", "sleep", "env", "rm", "mv", "date")


def shell_only() -> dict[str, str]:
    found = {name: shutil.which(name) for name in SHELL_TOOLS}
    return {name: path for name, path in found.items() if path is not None}


def test_in_an_image_with_python3_the_step_is_sampled_under_it(tools: Path, tmp_path: Path) -> None:
    path = path_with(tmp_path, {**shell_only(), "python3": sys.executable})
    # An earlier run's, in an image without python3: gone, or the report would read it.
    (tmp_path / "work" / "telemetry").mkdir(parents=True)
    (tmp_path / "work" / "telemetry" / "count.unsampled").write_text("the image has no python3\n")
    proc = run_step(tools, tmp_path / "work", path, "sh", "-c", 'sleep 0.5; echo "PYTHONPATH=$PYTHONPATH"; exit 3')
    assert proc.returncode == 3, proc.stderr  # the step's own exit status, through the sampler
    # The step sees the environment as the image set it: the sampler's path is its own.
    assert "PYTHONPATH=/image/own/path" in proc.stdout
    records = [json.loads(line) for line in (tmp_path / "work" / "telemetry" / "count.jsonl").read_text().splitlines()]
    assert records[0]["type"] == "start" and records[0]["step"] == "count"
    assert records[-1]["type"] == "end" and records[-1]["exit_code"] == 3
    assert any(r["type"] == "sample" for r in records)
    assert not (tmp_path / "work" / "telemetry" / "count.unsampled").exists()


def test_in_an_image_without_python3_the_step_runs_unsampled_and_says_why(tools: Path, tmp_path: Path) -> None:
    path = path_with(tmp_path, shell_only())
    # An earlier run's telemetry, set aside so that it is not read as this run's.
    (tmp_path / "work" / "telemetry").mkdir(parents=True)
    (tmp_path / "work" / "telemetry" / "count.jsonl").write_text("{}\n")
    proc = run_step(tools, tmp_path / "work", path, "sh", "-c", "echo ran; exit 0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran\n"
    assert "step count runs unsampled: the image has no python3" in proc.stderr
    telemetry = tmp_path / "work" / "telemetry"
    assert (telemetry / "count.unsampled").read_text() == "the image has no python3\n"
    assert not (telemetry / "count.jsonl").exists()
    assert [f.read_text() for f in telemetry.glob("count.jsonl.*")] == ["{}\n"]


def test_in_an_image_with_too_old_a_python3_the_step_runs_unsampled(tools: Path, tmp_path: Path) -> None:
    old = tmp_path / "old-python3"
    old.write_text("#!/bin/sh\necho 3.6\nexit 1\n")
    old.chmod(0o755)
    path = path_with(tmp_path, {**shell_only(), "python3": str(old)})
    proc = run_step(tools, tmp_path / "work", path, "sh", "-c", "echo ran")
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    reason = (tmp_path / "work" / "telemetry" / "count.unsampled").read_text()
    assert "3.6" in reason and "older than 3.8" in reason


def test_the_entrypoint_refuses_a_sample_option_without_its_values(tools: Path, tmp_path: Path) -> None:
    proc = subprocess.run(["/bin/sh", str(tools / ENTRYPOINT_NAME), "--sample", "out.jsonl", "--", "true"],
                          cwd=tmp_path, capture_output=True, text=True, check=False, timeout=30,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert proc.returncode == 64 and "usage: atlas-entrypoint --sample OUT INTERVAL STEP" in proc.stderr


# --- the report --------------------------------------------------------------------------------------------


def test_the_report_says_why_a_step_was_not_sampled(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "telemetry").mkdir(parents=True)
    (run / "telemetry" / "count.unsampled").write_text("the image has no python3\n")
    telemetry, _ = collect_telemetry(["count", "top"], "telemetry", LocalFiles(run), tmp_path / "raw", "here")
    count, top = telemetry["count"], telemetry["top"]
    assert isinstance(count, Missing) and not isinstance(count, TelemetryColumns)
    assert count.reason == "not measured: the image has no python3 (telemetry/count.unsampled here)"
    # The raw folder keeps what the reason came from.
    assert (tmp_path / "raw" / "telemetry-count.unsampled").read_text() == "the image has no python3\n"
    assert isinstance(top, Missing) and "the job did not start the sampler" in top.reason
