"""infra.compare: collectors on recorded real outputs, metrics against hand-computed values, renderers.

The recorded inputs in tests/unit/data/compare/ come from one `pulumi up -s local` (probe workload)
against the local environment: the Kubernetes API's Jobs, pods, events and nodes; LSF's
`bjobs -a -hms -o ... -json` and `bhist -l`; the sampler's JSONL and the training logs of the LSF
side. The Slurm side's (its steps in stack_outputs.json, `squeue -O` and `sacct -c`) come from a
later `scripts/demo` (2026-12-04), when the collector stopped asking `squeue --json`.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

from infra.cli import compare as cli
from infra.cli import stack_files
from infra.compare import cost_files, costs, metrics, render, report_model, telemetry
from infra.compare.charts import all_charts
from infra.compare.comparability import comparability
from infra.compare.hpc_collector import collect_hpc
from infra.compare.kube_collector import collect_kubernetes
from infra.compare.kube_records import records_from_api
from infra.compare.performance import _throughput, downsample
from infra.compare.records import (
    NO_TRAINING_LOG,
    EnvironmentRecords,
    Missing,
    ReportContract,
    TelemetryColumns,
    ThroughputReading,
    ThroughputSpec,
)
from infra.compare.remote_files import LocalFiles
from infra.compare.scalability import scalability
from infra.compare.seed_import import import_seed_logs
from infra.compare.training import training_log_from_text
from infra.config import parse_stack_config
from infra.hpc.registry import UnknownSchedulerError, scheduler_for
from infra.hpc.remote import RemoteResult
from infra.kinds import read_stack_outputs
from infra.timeparse import rfc3339
from tests.support import hpc_outputs, project_with_workloads

DATA = Path(__file__).parent / "data"
REC = DATA / "compare"
OUTPUTS = json.loads((REC / "stack_outputs.json").read_text())
ENVS = OUTPUTS["environments"]
# The Kubernetes side's records read typed outputs (the HPC side's still read the dict).
KUBE_OUTPUTS = read_stack_outputs(OUTPUTS).environments["openshift"]


def utc(text: str) -> float:
    return rfc3339(text) or math.nan


def result(name: str, code: int = 0, stderr: str = "") -> RemoteResult:
    return RemoteResult("recorded", code, (REC / name).read_text(), stderr)


def raw(stdout: str) -> RemoteResult:
    return RemoteResult("recorded", 0, stdout, "")


# The local Satori's node listings as its Slurm and its LSF command set print them (the formats of
# tests/unit/test_hpc_monitor_reads.py): four GPUs of GRES type mock_v100 (localenv/satori_config.py).
NODE_LISTINGS = {
    "sinfo": "vm|mixed|3/5/0/8|gpu:mock_v100:4|gpu:mock_v100:1(IDX:0)\n",
    "lsload-gpu": "HOST_NAME       status  ngpus  gpu_shared_avg_mut  gpu_shared_avg_ut  ngpus_physical\n"
    "vm                  ok      4                   -                  -               4\n",
    "lsload-gpuload": "HOST_NAME       gpuid   gpu_model   gpu_mode  gpu_temp   gpu_ecc  gpu_ut  gpu_mut gpu_mtotal "
    "gpu_mused   gpu_pstate   gpu_status   gpu_error\n"
    + "vm 0 Mock_TeslaV100_SXM2_32GB 0.0 - - - - 32G - - busy -\n"
    + "".join(f"   {i} Mock_TeslaV100_SXM2_32GB 0.0 - - - - 32G - - ok -\n" for i in (1, 2, 3)),
}
NODE_COMMANDS = {
    # The nodes' sections only: a queue query (every user's jobs) reaches the test's own runner and fails it.
    command: section
    for name in ("lsf", "slurm")
    for section, command in scheduler_for(name).node_sections()
}


def site(
    runner: Callable[[str], RemoteResult], listings: Mapping[str, str] = NODE_LISTINGS
) -> Callable[[str], RemoteResult]:
    """`runner`, with the node listings the report reads to tell mock GPUs answered beside it."""

    def answer(command: str) -> RemoteResult:
        if command in NODE_COMMANDS:
            return raw(listings.get(NODE_COMMANDS[command], ""))
        return runner(command)

    return answer


# --- telemetry ----------------------------------------------------------------------------------


def test_sampler_jsonl_loads_into_columns_with_reasons_for_what_was_not_measured() -> None:
    columns = telemetry.load_sampler_jsonl(REC / "lsf_telemetry_train.jsonl", "recorded")
    assert columns.rows == 2
    assert columns.step == "train" and columns.exit_code == 0 and columns.interval_s == 5.0
    assert columns.argv[:4] == ("python3", "-m", "workloads.probe", "train")
    assert columns.tree_cpu_percent.tolist() == [64.35, 104.2]
    assert columns.tree_rss_bytes[0] == 56463360
    assert np.isnan(columns.gpu_utilization_percent).all()
    assert dict(columns.not_measured)["gpu"] == "NVML: nvidia-ml-py is not installed; nvidia-smi is not on PATH"


def test_sampler_gpu_columns_average_utilization_and_sum_memory_over_devices() -> None:
    line = json.loads((DATA / "sampler_h200.jsonl").read_text().splitlines()[1])
    line["gpu"]["devices"] = [
        {"index": 0, "utilization_percent": 30, "memory_used_bytes": 100, "memory_total_bytes": 1000},
        {"index": 1, "utilization_percent": 50, "memory_used_bytes": 300, "memory_total_bytes": 1000},
    ]
    unmeasured = {**line, "t": line["t"] + 1, "gpu": {"measured": False, "reason": "no driver"}}
    text = "\n".join(json.dumps(r) for r in (line, unmeasured)) + '\n{"type":"sample","t":1'  # cut short
    columns = telemetry.load_sampler_jsonl(text.encode(), "recorded")
    assert columns.rows == 2 and columns.skipped_lines == 1
    assert columns.gpu_utilization_percent[0] == 40.0
    assert columns.gpu_memory_used_bytes[0] == 400.0 and columns.gpu_memory_total_bytes[0] == 2000.0
    assert columns.gpu_count.tolist()[0] == 2.0 and np.isnan(columns.gpu_count[1])
    assert dict(columns.not_measured)["gpu"] == "no driver"


def test_parallel_ranges_give_the_same_columns_as_one_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = (DATA / "sampler_h200.jsonl").read_text().splitlines()
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines * 40) + "\n")
    serial = telemetry.load_sampler_jsonl(path, "x", chunk_bytes=4096, workers=1)
    monkeypatch.setattr(telemetry, "PARALLEL_BYTES", 1)
    parallel = telemetry.load_sampler_jsonl(path, "x", chunk_bytes=4096, workers=3)
    assert parallel.rows == serial.rows == 11 * 40
    for name in telemetry.COLUMNS:
        assert np.array_equal(getattr(parallel, name), getattr(serial, name), equal_nan=True), name
    assert parallel.exit_code == serial.exit_code == 0


# --- Kubernetes ---------------------------------------------------------------------------------


def kube_records() -> EnvironmentRecords:
    recorded = {
        "/apis/batch/v1/namespaces/atlas-compare-rec/jobs": json.loads((REC / "k8s_jobs.json").read_text()),
        "/api/v1/namespaces/atlas-compare-rec/pods": json.loads((REC / "k8s_pods.json").read_text()),
        "/api/v1/namespaces/atlas-compare-rec/events": json.loads((REC / "k8s_events.json").read_text()),
    }
    for node in json.loads((REC / "k8s_nodes.json").read_text())["items"]:
        recorded[f"/api/v1/nodes/{node['metadata']['name']}"] = node
    return collect_kubernetes("openshift", KUBE_OUTPUTS, recorded.__getitem__)


def test_kubernetes_step_times_come_from_the_job_and_its_pod() -> None:
    records = kube_records()
    assert not isinstance(records.steps, Missing)
    train = {s.step: s for s in records.steps}["train"]
    assert train.job == "openshift-pipeline-train-9f60a934" and train.state == "Complete"
    assert train.requested_at == utc("2026-12-02T15:57:01Z")  # Job creationTimestamp
    assert train.scheduled_at == utc("2026-12-02T15:57:01Z")  # PodScheduled condition
    assert (train.started_at, train.finished_at) == (utc("2026-12-02T15:57:01Z"), utc("2026-12-02T15:57:06Z"))
    assert (train.exit_code, train.gpus_requested, train.gpus_allocated, train.node) == (0, 1, 1, "kwok-gpu-0")
    # The sampler wrapper is unwrapped: the step's own command line.
    assert train.argv is not None and train.argv[:4] == ("python3", "-m", "workloads.probe", "train")
    assert train.simulated


def test_kubernetes_on_kwok_says_telemetry_was_not_measured_and_why() -> None:
    records = kube_records()
    assert records.telemetry["train"] == Missing("not measured: simulated node, no container ran")
    assert isinstance(records.training, Missing) and "simulated" in records.training.reason
    gpu_node = next(n for n in records.nodes if n.name == "kwok-gpu-0")
    assert gpu_node.simulated and gpu_node.gpu_product == "Tesla-V100-SXM2-32GB" and gpu_node.gpus_allocatable == 4
    assert not isinstance(records.staging, Missing)
    (staging,) = records.staging
    assert staging.finished_at is not None and staging.started_at is not None
    assert staging.finished_at - staging.started_at == 6.0 and staging.simulated
    assert any(e.reason == "Scheduled" for e in records.events)


def test_a_job_gone_from_the_api_is_reported_not_invented() -> None:
    records = records_from_api("openshift", KUBE_OUTPUTS, {"items": []}, {"items": []}, {"items": []}, [])
    assert not isinstance(records.steps, Missing)
    assert all(s.state == "NotFound" and s.started_at is None for s in records.steps)
    assert records.provenance == (  # never "real" by default
        "not executed: no step's pod ran on a node; Kubernetes API on loopback (https://127.0.0.1:16443)"
    )


# --- LSF and Slurm through the collector (the schedulers' own records: test_hpc_records.py) ------


def test_lsf_asks_bhist_for_a_job_bjobs_answers_with_an_error_record(tmp_path: Path) -> None:
    document = json.loads((REC / "bjobs.json").read_text())
    document["RECORDS"] = [r for r in document["RECORDS"] if r["JOBID"] != "18"]
    document["RECORDS"].append({"JOBID": "18", "ERROR": "Job <18> is not found"})
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        if "bhist" in command:
            return result("bhist.txt")
        return RemoteResult(command, 255, json.dumps(document, separators=(",", ":")), "")  # as LSF prints

    records = collect_hpc("satori", hpc_outputs(ENVS["satori"]), site(runner), LocalFiles(tmp_path), tmp_path / "raw")
    # The scheduler's own record query, then its history for the job it forgot (the commands
    # themselves are pinned in test_hpc_records.py).
    lsf = scheduler_for("lsf")
    assert commands == [lsf.record_query(["14", "16", "18"]), *lsf.history_queries(["14", "16", "18"])]
    assert not isinstance(records.steps, Missing)
    sources = {s.step: s.source.split("`")[1].split()[1] for s in records.steps}
    assert sources == {"make-hdf5": "bjobs", "inception-moments": "bjobs", "train": "bhist"}


def test_slurm_asks_sacct_only_for_jobs_squeue_forgot(tmp_path: Path) -> None:
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        return result("squeue_fields.txt")

    collect_hpc("satori-slurm", hpc_outputs(ENVS["satori-slurm"]), site(runner), LocalFiles(tmp_path), tmp_path / "raw")
    assert commands == [scheduler_for("slurm").record_query(["1", "2", "3"])]  # squeue knows all three

    def forgetful(command: str) -> RemoteResult:
        commands.append(command)
        if command.startswith("squeue"):
            return RemoteResult(command, 1, "", "slurm_load_jobs error: Invalid job id specified")
        return result("sacct_c.txt", code=0 if " -c " in command else 1)

    commands.clear()
    slurm = hpc_outputs(ENVS["satori-slurm"])
    records = collect_hpc("satori-slurm", slurm, site(forgetful), LocalFiles(tmp_path), tmp_path / "raw")
    assert [c.split()[:3] for c in commands] == [
        ["TZ=UTC", "squeue", "-h"],
        ["TZ=UTC", "sacct", "-n"],
        ["TZ=UTC", "sacct", "-c"],  # no slurmdbd: the jobcomp file
    ]
    assert not isinstance(records.steps, Missing) and all(s.finished_at for s in records.steps)


def test_an_hpc_side_with_a_scheduler_atlas_does_not_drive_is_an_error(tmp_path: Path) -> None:
    outputs = dict(ENVS["satori"], scheduler="pbs")
    with pytest.raises(UnknownSchedulerError, match="unknown scheduler 'pbs'"):
        collect_hpc(
            "satori", hpc_outputs(outputs), lambda _c: result("bjobs.json"), LocalFiles(tmp_path), tmp_path / "raw"
        )


def mirror_run_dir(home: Path, run_dir: str) -> None:
    """The LSF side's run folder as the login node had it (recorded files)."""
    base = home / run_dir
    (base / "telemetry").mkdir(parents=True)
    (base / "logs" / "probe-digits").mkdir(parents=True)
    (base / ".atlas" / "jobs").mkdir(parents=True)
    shutil.copy(REC / "lsf_telemetry_train.jsonl", base / "telemetry" / "train.jsonl")
    shutil.copy(REC / "lsf_probe-digits_log.jsonl", base / "logs" / "probe-digits_log.jsonl")
    shutil.copy(REC / "lsf_G_loss.log", base / "logs" / "probe-digits" / "G_loss.log")
    shutil.copy(REC / "lsf_metalog.txt", base / "logs" / "probe-digits" / "metalog.txt")
    (base / ".atlas" / "jobs" / "train.lsf").write_text("#!/bin/bash\n" + "x" * 88)


def hpc_records(tmp_path: Path) -> EnvironmentRecords:
    home = tmp_path / "home"
    mirror_run_dir(home, ENVS["satori"]["run_dir"])
    commands: list[str] = []

    def runner(command: str) -> RemoteResult:
        commands.append(command)
        assert command.startswith("TZ=UTC bjobs -a -hms")  # bjobs knows all three: no bhist
        return result("bjobs.json")

    records = collect_hpc("satori", hpc_outputs(ENVS["satori"]), site(runner), LocalFiles(home), tmp_path / "raw")
    assert len(commands) == 1
    return records


def test_hpc_collector_brings_scheduler_times_telemetry_logs_and_staging(tmp_path: Path) -> None:
    records = hpc_records(tmp_path)
    assert isinstance(records.telemetry["train"], TelemetryColumns)
    assert records.telemetry["make-hdf5"] == Missing(
        "not measured: no atlas-compare-rec/local/satori/probe/telemetry/make-hdf5.jsonl on atlas@127.0.0.1:16022 "
        "(SFTP) (the job did not start the sampler)"
    )
    assert not isinstance(records.steps, Missing)
    train = {s.step: s for s in records.steps}["train"]
    assert train.argv is not None and "--total_iters" in train.argv  # from the sampler's start record
    assert not isinstance(records.training, Missing)
    assert records.training.batch_size == 64 and records.training.iterations == 2000
    assert not isinstance(records.staging, Missing) and records.staging[0].bytes_moved == 100
    assert (tmp_path / "raw" / "telemetry-train.jsonl").exists()  # the report keeps what it read
    # What the stack says, and what the report saw: a login node on loopback, mock GPUs in lsload.
    assert records.gpu_mock
    assert records.provenance == (
        "local stand-in: LSF commands on Slurm, mock GPUs, CPU run (observed: login node on loopback (127.0.0.1); "
        "mock GPUs (LSF gpu_model Mock_TeslaV100_SXM2_32GB))"
    )


def test_hpc_outputs_that_do_not_say_what_the_environment_is_are_not_taken_for_real(tmp_path: Path) -> None:
    home = tmp_path / "home"
    mirror_run_dir(home, ENVS["satori"]["run_dir"])
    # A login node elsewhere, GPUs its scheduler names as real: only the stack could say real.
    outputs = {k: v for k, v in ENVS["satori"].items() if k != "provenance"} | {"host": "satori-login-001.mit.edu"}
    records = collect_hpc(
        "satori",
        hpc_outputs(outputs),
        site(lambda _command: result("bjobs.json"), {}),
        LocalFiles(home),
        tmp_path / "raw",
    )
    assert records.provenance == "provenance not stated" and not records.gpu_mock


# --- training logs and the seed's logs ----------------------------------------------------------


def test_training_rate_is_iterations_between_first_and_last_evaluation_over_their_stamps() -> None:
    text = (REC / "lsf_probe-digits_log.jsonl").read_text()
    log = training_log_from_text(
        "recorded",
        "probe-digits",
        text,
        (REC / "lsf_G_loss.log").read_text(),
        (REC / "lsf_metalog.txt").read_text(),
        None,
    )
    first, last = json.loads(text.splitlines()[0]), json.loads(text.splitlines()[-1])
    iterations, it_per_s, images, _ = _throughput(log)
    expected = (last["itr"] - first["itr"]) / (last["_stamp"] - first["_stamp"])
    assert it_per_s.value == pytest.approx(expected)
    assert images.value == pytest.approx(expected * 64)
    assert iterations.value == 2000 and len(log.loss_itr) == 2000


def test_seed_logs_import_as_a_past_run(tmp_path: Path) -> None:
    for name in ("sar_u_satori.txt", "sar_r_satori.txt", "nvidia_smi_seed.csv"):
        shutil.copy(DATA / name, tmp_path / name)
    records = import_seed_logs(tmp_path, "seed", gpus=1)
    columns = records.telemetry["train"]
    assert isinstance(columns, TelemetryColumns)
    assert np.nanmax(columns.gpu_utilization_percent) == 100.0
    assert columns.host_cpu_percent[0] == pytest.approx(100 - 84.32)
    assert isinstance(records.steps, Missing) and "no scheduler records" in records.steps.reason
    assert records.provenance == (
        f"imported: the seed's own sar and nvidia-smi logs from {tmp_path}, not a run Atlas observed"
    )


def test_a_workload_without_a_training_log_is_measured_by_its_own_step_and_rate(tmp_path: Path) -> None:
    """The same recorded run read as a workload whose definition names no BigGAN-style log and
    declares its own throughput line: the report measures its step and its rate, and says what
    it cannot read rather than reading the log anyway."""
    home = tmp_path / "home"
    mirror_run_dir(home, ENVS["satori"]["run_dir"])
    logs = home / ENVS["satori"]["run_dir"] / "logs"
    (logs / "rate.log").write_text("count: rate 900.5 words/s\ncount: rate 1234.5 words/s\n")
    rate = ThroughputSpec("rate.log", r"rate (?P<value>[0-9.]+) words/s", "words/s")
    contract = ReportContract(step="train", training_log=False, throughput=rate)
    records = collect_hpc("satori", hpc_outputs(ENVS["satori"]), site(lambda _: result("bjobs.json")), LocalFiles(home),
                          tmp_path / "raw", contract)  # fmt: skip
    assert records.training == Missing(NO_TRAINING_LOG)
    assert isinstance(records.throughput, ThroughputReading) and records.throughput.value == 1234.5
    built = metrics.build_report([records], cost_files.load_cost_profiles(), cost_files.load_rate_table(), {})
    performance = built.environments[0].performance
    assert performance.measured_step == "train"
    assert performance.iterations.value is None and performance.iterations.note == NO_TRAINING_LOG
    assert performance.images_per_s.note == NO_TRAINING_LOG
    assert performance.workload_throughput.value == 1234.5 and performance.workload_throughput.unit == "words/s"
    assert performance.cpu_tree_mean.value is not None  # the measured step's telemetry
    markdown = render.render_markdown(built, (), {})
    assert "| the workload's own throughput (report.throughput) | 1,234 words/s" in markdown
    assert "not measured (the workload writes no training log Atlas reads)" in markdown


# --- metrics ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> report_model.Report:
    tmp = tmp_path_factory.mktemp("hpc")
    envs = [kube_records(), hpc_records(tmp)]
    return metrics.build_report(envs, cost_files.load_cost_profiles(), cost_files.load_rate_table(), {"stack": "local"})


def env_of(report: report_model.Report, name: str) -> report_model.EnvironmentMetrics:
    return next(e for e in report.environments if e.name == name)


def test_elasticity_from_lsf_records_matches_hand_computed_values(report: report_model.Report) -> None:
    lsf = env_of(report, "satori")
    # make-hdf5 submitted 15:56:43; train submitted :51, started :52, finished 15:57:03;
    # inception-moments (the step before train) finished :50.
    assert lsf.elasticity.request_to_gpus_running.value == 9.0
    assert lsf.elasticity.time_to_add_gpus.value == 1.0  # max(:51, :50) -> :52
    assert lsf.elasticity.gpu_step_queue_wait.value == 1.0
    assert lsf.elasticity.total_queue_wait.value == 1.0 + 2.0 + 1.0
    assert {s.step: s.duration.value for s in lsf.steps} == {"make-hdf5": 2.0, "inception-moments": 1.0, "train": 11.0}
    assert lsf.performance.wall_time.value == 20.0
    assert lsf.performance.cpu_tree_mean.value == pytest.approx((64.35 + 104.2) / 2)


def test_kwok_figures_are_labelled_simulated(report: report_model.Report) -> None:
    kube = env_of(report, "openshift")
    assert kube.simulated and kube.elasticity.request_to_gpus_running.simulated
    assert kube.elasticity.request_to_gpus_running.value == 12.0  # 15:56:49 -> 15:57:01
    assert kube.performance.cpu_host_mean.value is None
    assert kube.performance.cpu_host_mean.note == "not measured: simulated node, no container ran"


def test_on_premises_cost_model_matches_the_hand_computed_table() -> None:
    satori = costs.DEFAULT_PROFILES["satori"]
    annual = 4.4e6 / 5 + 4.4 * 25 * 8760 * 1.2 * 0.0839 + 140e3 * (0.25 + 0.25) + 4.4 * 3.3e3
    assert satori.annual_cost_usd() == pytest.approx(annual)  # 1,061,535.25
    assert satori.usd_per_gpu_hour() == pytest.approx(annual / (64 * 4 * 8760 * 0.9))
    moc = costs.DEFAULT_PROFILES["moc"]
    assert moc.usd_per_gpu_hour() == pytest.approx(
        (3e6 / 5 + 3 * 25 * 8760 * 1.2 * 0.0839 + 125e3 * 0.5 + 3 * 3.3e3) / (60 * 4 * 8760 * 0.6)
    )


def test_mock_gpus_are_counted_but_not_priced_and_their_use_not_read(report: report_model.Report) -> None:
    """The local Satori's GPUs are mock (its scheduler's listing says so): their GPU-hours count,
    no cost is given, and every cost and GPU reading says why."""
    satori = env_of(report, "satori")
    lsf = satori.economics
    assert lsf.gpu_hours.value == pytest.approx(1 * 11 / 3600)
    assert lsf.cost_per_run.value is None and lsf.cost_per_run.note == f"not priced: {report_model.MOCK_GPUS_UNPRICED}"
    assert lsf.cost_per_1000_iterations.value is None
    assert all(cost.value is None and "not priced" in cost.note for _, cost, _ in lsf.chargeback)
    assert satori.performance.gpu_utilization_mean.note == report_model.MOCK_GPU
    assert satori.provenance.startswith("local stand-in: ") and "mock GPUs (LSF gpu_model" in satori.provenance


def test_run_cost_is_gpu_hours_times_rate(tmp_path: Path) -> None:
    # The same run as on real GPUs (the site's listing names none mock): priced.
    home = tmp_path / "home"
    mirror_run_dir(home, ENVS["satori"]["run_dir"])
    records = collect_hpc(
        "satori",
        hpc_outputs(ENVS["satori"]),
        site(lambda _: result("bjobs.json"), {}),
        LocalFiles(home),
        tmp_path / "raw",
    )
    assert not records.gpu_mock
    report = metrics.build_report([records], cost_files.load_cost_profiles(), cost_files.load_rate_table(), {})
    lsf = env_of(report, "satori").economics
    assert lsf.gpu_hours.value == pytest.approx(1 * 11 / 3600)  # one GPU asked for, 11 s
    assert lsf.cost_per_run.value == pytest.approx(11 / 3600 * costs.DEFAULT_PROFILES["satori"].usd_per_gpu_hour())
    assert lsf.cost_per_1000_iterations.value == pytest.approx(lsf.cost_per_run.value / 2000 * 1000)
    aws = next(c for name, c, _ in lsf.chargeback if name == "aws-p3.2xlarge")
    assert aws.value == pytest.approx(3.06 * 11 / 3600) and aws.kind == "assumption"


def test_cost_overrides_from_file_and_flags(tmp_path: Path) -> None:
    override = tmp_path / "costs.yaml"
    override.write_text("satori:\n  utilization: 0.5\n  amortization_years: 4\n")
    profiles = cost_files.load_cost_profiles([override], ["moc.nodes=30"])
    assert profiles["satori"].utilization == 0.5 and profiles["moc"].nodes == 30
    assert "amortization_years" not in dict(profiles["satori"].assumptions)  # the user's number now
    assert profiles["satori"].overridden == ("amortization_years", "utilization")
    with pytest.raises(costs.CostConfigError, match="unknown cost parameter 'utilisation'"):
        cost_files.load_cost_profiles(flags=["satori.utilisation=0.5"])
    with pytest.raises(costs.CostConfigError, match="must be positive"):
        cost_files.load_cost_profiles(flags=["satori.nodes=0"])


def test_runs_with_different_arguments_are_flagged_naming_the_arguments(report: report_model.Report) -> None:
    assert report.comparability.comparable  # the recorded run: same arguments everywhere
    kube = kube_records()
    assert not isinstance(kube.steps, Missing)
    changed = [
        s if s.step != "train" else type(s)(**{**vars(s), "argv": (*(s.argv or ()), "--batch_size", "1")})
        for s in kube.steps
    ]
    other = EnvironmentRecords(**{**vars(kube), "name": "moc", "steps": tuple(changed)})
    result = comparability([kube, other])
    assert not result.comparable
    assert [(d.step, d.argument) for d in result.differences] == [("train", "--batch_size")]
    # A repeated option: the last one wins, as argparse reads it.
    assert dict(result.differences[0].values) == {"moc": "1", "openshift": "64"}


def test_downsampling_keeps_charts_bounded_and_means_exact() -> None:
    x = np.arange(10_000, dtype=np.float64)
    bx, by = downsample(x, x * 2, points=100)
    assert bx.size == 100 and by[0] == pytest.approx(2 * x[:100].mean())


def test_projection_is_labelled_and_linear() -> None:
    measured = report_model.Value(100.0, "images/s", "log")
    result = scalability(2, measured)
    eight = dict(result.projection)[8]
    assert eight.value == 400.0 and eight.kind == "projection" and "linear" in eight.note


# --- rendering ----------------------------------------------------------------------------------


def test_markdown_html_json_carry_units_sources_and_simulated_labels(
    report: report_model.Report, tmp_path: Path
) -> None:
    charts = all_charts(report)
    assert {c.name for c in charts} == {
        "elasticity-lifecycle",
        "elasticity",
        "performance",
        "economics",
        "data-access",
        "scalability",
    }
    assert all(c.png.startswith(b"\x89PNG") for c in charts)
    markdown = render.render_markdown(report, charts, {c.name: f"{c.name}.png" for c in charts})
    assert "| request to GPUs running | 12 s (simulated) [" in markdown
    # Every column says what its environment is; an HPC side whose stack says nothing is not "real".
    header = next(line for line in markdown.splitlines() if line.startswith("| metric |"))
    for env in report.environments:
        assert f"{env.name} (" in header and (env.provenance or "simulated") in header, header
    assert "9 s [" in markdown and "## Sources" in markdown and "bjobs -a -hms" in markdown
    assert "not measured: simulated node, no container ran" in markdown
    page = render.render_html(report, charts)
    assert page.count("data:image/png;base64,") == 6 and "src='http" not in page
    data = json.loads(render.render_json(report))
    lsf = next(e for e in data["environments"] if e["name"] == "satori")
    assert lsf["elasticity"]["request_to_gpus_running"] == {
        "value": 9.0,
        "unit": "s",
        "source": lsf["elasticity"]["request_to_gpus_running"]["source"],
        "note": "",
        "kind": "computed",
        "simulated": False,
    }


def test_cli_writes_a_report_from_imported_seed_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    for name in ("sar_u_satori.txt", "sar_r_satori.txt", "nvidia_smi_seed.csv"):
        shutil.copy(DATA / name, seed / name)
    out = tmp_path / "report"
    assert cli.main(["--import", f"{seed}=seed-satori", "--out", str(out), "--cost", "satori.utilization=0.8"]) == 0
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.html", "report.json", "performance.png"}
    printed = capsys.readouterr().out
    assert "seed-satori" in printed and str(out) in printed


def test_access_comes_from_the_stack_config(tmp_path: Path) -> None:
    known_hosts = tmp_path / "abs" / "kh"
    known_hosts.parent.mkdir()
    known_hosts.write_text("login ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    values = {
        "openshift": {
            "flavour": "kubernetes",
            "namespace": "atlas-x",
            "kubeconfig": ".state/k",
            "context": "atlas-x/api-crc-testing:6443/developer",
            "image": {"reference": "quay.io/a/b:1"},
        },
        "hpc": {
            "satori": {
                "scheduler": "lsf",
                "host": "login",
                "user": "alex",
                "private_key_file": "keys/id",
                "known_hosts_file": str(known_hosts),
                "poll_interval_seconds": 90,
            }
        },
    }
    config = parse_stack_config("local", values, project_with_workloads(tmp_path))
    access = stack_files.access_from_stack_config(config, tmp_path)
    assert access.kubeconfig == tmp_path / ".state/k"
    assert access.kube_context == "atlas-x/api-crc-testing:6443/developer"
    assert access.hpc["satori"].private_key_file == tmp_path / "keys/id"
    assert access.poll_intervals == {"satori": 90.0} and access.poll_interval_s("elsewhere") == 60.0
    # The flags the command line gives (relative to where it runs) go over the config.
    args = argparse.Namespace(
        kubeconfig=tmp_path / "other", context=None, ssh_key=["satori=k2"], known_hosts=["satori=kh2"]
    )
    access = stack_files.load_access(args, tmp_path, config)
    assert access.kubeconfig == tmp_path / "other" and access.kube_context == "atlas-x/api-crc-testing:6443/developer"
    assert access.ssh_keys == {"satori": Path.cwd() / "k2"} and access.known_hosts == {"satori": Path.cwd() / "kh2"}


def test_blank_lines_and_a_last_line_without_newline_are_read(tmp_path: Path) -> None:
    lines = (REC / "lsf_telemetry_train.jsonl").read_text().splitlines()
    path = tmp_path / "t.jsonl"
    path.write_text(lines[0] + "\n\n" + lines[1] + "\n" + "\n".join(lines[2:]))  # no final newline
    columns = telemetry.load_sampler_jsonl(path, "x", chunk_bytes=64)  # chunks smaller than a line
    assert (columns.rows, columns.skipped_lines, columns.exit_code) == (2, 0, 0)


def test_cli_refuses_outputs_that_name_no_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "outputs.json"
    empty.write_text("{}")
    assert cli.main(["--outputs", str(empty), "--out", str(tmp_path / "r")]) == 1
    assert "name no environment" in capsys.readouterr().err
