"""A device run's folder (bench/biggan_h200.py) read back by Atlas's parsers into a report.

The folder is written here the way the driver writes it: atlas-run.json, the sampler's JSONL,
BigGAN's own logs and each step's console output in CRI format. What is checked: step times
come from the sampler's start and end records, images/s from the timed `itr:` lines times the
images one iteration consumes (from metalog.txt), IS/FID are never presented as scores with
stand-in weights, every difference from the full run is stated, and a GPU reading not taken
stays "not measured".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.compare.collect import import_folder
from infra.compare.cost_files import RATES_FILE, load_cost_profiles, load_rate_table
from infra.compare.device_records import images_per_iteration
from infra.compare.device_run import bench_result, import_device_run
from infra.compare.metrics import build_report
from infra.compare.records import TelemetryColumns, TrainingLog
from infra.telemetry.parsers.console_log import format_cri_line
from infra.workload.load import load_workload
from infra.workload.render import render_step

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = load_workload(REPO / "workloads" / "biggan" / "workload.yaml")
EXPERIMENT = WORKLOAD.logs.experiment
T0 = 1796300000.0
GIB = 1 << 30


def sample(t: float, util: float | None, memory: int, cpu_s: float = 0.1) -> dict[str, object]:
    gpu: dict[str, object] = (
        {"measured": True, "source": "nvml", "devices": [{"index": 0, "name": "NVIDIA H200",
         "utilization_percent": util, "memory_used_bytes": memory, "memory_total_bytes": 150754820096}]}
        if util is not None
        else {"measured": False, "reason": "NVMLError: not supported"}
    )  # fmt: skip
    return {
        "type": "sample", "t": t,
        "cpu": {"measured": True, "tree_percent": 150.0, "tree_processes": 10, "host_percent": 10.0, "host_cpus": 16},
        "memory": {"measured": True, "tree_rss_bytes": 3 * GIB, "host_used_bytes": 8 * GIB,
                   "host_total_bytes": 128 * GIB},
        "gpu": gpu,
        "disk": {"measured": True, "host_read_bytes": 0, "host_write_bytes": 0, "tree_read_bytes": 0,
                 "tree_write_bytes": 0},
        "network": {"measured": True, "rx_bytes": 0, "tx_bytes": 0},
        "sampler": {"cpu_s": cpu_s},
    }  # fmt: skip


def write_step(folder: Path, step: str, start: float, seconds: int, util: float | None) -> dict[str, object]:
    rendered = render_step(WORKLOAD, step, "h200")
    lines = [{"type": "start", "version": 1, "t": start, "step": step, "argv": list(rendered.argv), "pid": 2,
              "sampler_pid": 1, "host": "gpu-vm", "interval_s": 1.0, "gpu_source": "nvml"}]  # fmt: skip
    # The sampler's own CPU: 0.2 s of start-up, then 10 ms a sample.
    lines += [sample(start + i, util, (i + 1) * GIB, 0.2 + 0.01 * i) for i in range(1, seconds)]
    lines.append({"type": "end", "t": start + seconds, "exit_code": 0, "signal": None, "duration_s": seconds})
    (folder / "telemetry").mkdir(exist_ok=True)
    (folder / "telemetry" / f"{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return {
        "step": step, "argv": list(rendered.argv), "gpus": rendered.resources.gpus_per_node,
        "started_at": start - 0.5, "finished_at": start + seconds + 0.2, "exit_code": 0, "stopped_by_deadline": False,
        "sampler_cpu": {"source": "/proc", "readings": seconds, "own_s": 0.3, "children_s": 0.0, "wall_s": 60.0},
    }  # fmt: skip


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "raw"
    (folder / "logs" / EXPERIMENT).mkdir(parents=True)
    steps = [
        write_step(folder, "make-hdf5", T0, 10, None),  # a GPU reading not taken: stays not measured
        write_step(folder, "inception-moments", T0 + 12, 10, 30.0),
        write_step(folder, "train", T0 + 24, 60, 90.0),
    ]
    # 40 iterations, 0.25 s apart after a slow start, a pause after the save at 20.
    console, t = [], T0 + 30
    for itr in range(1, 41):
        t += 2.0 if itr <= 10 else (5.0 if itr == 21 else 0.25)
        console.append(format_cri_line(t, "stdout", f"\r{itr}/7 (1%) itr: {itr}, G_loss : +1.000, D_loss_real : +0.5"))
    console.insert(25, format_cri_line(t, "stdout", "Saving weights to weights/x..."))
    console.insert(0, format_cri_line(T0 + 30, "stdout", "Beginning training at epoch 0..."))
    (folder / "logs" / "train.console.log").write_text("\n".join(console) + "\n")
    (folder / "logs" / EXPERIMENT / "metalog.txt").write_text(
        "datetime: 2026-12-03\nconfig: {'batch_size': 64, 'num_D_steps': 1, 'num_D_accumulations': 4, "
        "'G_ch': 32}\nstate: {'itr': 0}\n"
    )
    (folder / "logs" / EXPERIMENT / "G_loss.log").write_text("".join(f"{i}: 1.000e+00\n" for i in range(1, 41)))
    (folder / "logs" / f"{EXPERIMENT}_log.jsonl").write_text(
        '{"itr": 20, "IS_mean": NaN, "IS_std": NaN, "FID": 123.0, "_stamp": 1796300070.0}\n'
    )
    manifest = {
        "format": "atlas-device-run/1", "run_id": "h200-x", "environment": "h200", "workload": "biggan",
        "machine": {"hostname": "gpu-vm", "cpus": 16, "gpus": ["NVIDIA H200, 143771 MiB, 580.159.04"],
                    "packages": {"torch": "2.11.0", "cuda": "13.0"}},
        "source": {"repository": WORKLOAD.source.repository, "commit": WORKLOAD.source.commit,  # type: ignore[union-attr]
                   "origin": "local bundle biggan.bundle", "patch": "biggan-torch2.patch"},
        "data": {"imagenet-train": {"images": 1797, "classes": 10, "size_px": 128, "source": "digits",
                                    "scikit_learn": "1.9"}},
        "inception_weights": {"real": False, "weights": "stand-in, not the real Inception weights: random",
                              "sha256": "ab" * 32},
        "sampler_interval_s": 1.0, "workload_interval_s": 5.0, "experiment": EXPERIMENT, "steps": steps,
    }  # fmt: skip
    (folder / "atlas-run.json").write_text(json.dumps(manifest))
    return folder


def test_the_run_reads_back_as_one_real_environment(run_folder: Path) -> None:
    records = import_device_run(run_folder, "h200", WORKLOAD)
    assert records.kind == "device" and records.gpu_product == "NVIDIA H200" and records.gpus == 1
    assert records.platform == "NVIDIA H200 x1, run on the device machine"
    # An import is labelled as one in every output, from what its manifest recorded.
    assert records.provenance.startswith(f"device run: imported from {run_folder}, run by bench/biggan_h200.py on ")
    assert records.provenance.endswith("GPUs as nvidia-smi named them: NVIDIA H200, 143771 MiB, 580.159.04")
    assert records.provenance == (
        f"device run: imported from {run_folder}, run by bench/biggan_h200.py on gpu-vm, no scheduler or cluster; "
        "GPUs as nvidia-smi named them: NVIDIA H200, 143771 MiB, 580.159.04"
    )
    steps = {s.step: s for s in records.steps}  # type: ignore[union-attr]
    assert steps["train"].started_at == T0 + 24 and steps["train"].finished_at == T0 + 84  # the sampler's records
    assert not any(s.simulated for s in steps.values())
    assert steps["train"].argv == render_step(WORKLOAD, "train", "h200").argv
    telemetry = records.telemetry["make-hdf5"]
    assert isinstance(telemetry, TelemetryColumns) and dict(telemetry.not_measured)["gpu"].startswith("NVMLError")
    training = records.training
    assert isinstance(training, TrainingLog) and training.images_per_iteration == 256
    assert len(training.iteration_marks) == 40


def test_the_report_gives_images_per_second_and_never_zero_for_what_was_not_read(run_folder: Path) -> None:
    records = import_device_run(run_folder, "h200", WORKLOAD)
    report = build_report([records], load_cost_profiles([], []), load_rate_table(RATES_FILE), {"workload": "biggan"})
    perf = report.environments[0].performance
    window = 9 * 2.0 + 10 * 0.25 + 5.0 + 19 * 0.25  # itr 1 -> 40: warm-up, steady, the pause, steady
    assert perf.iterations_per_s.value == pytest.approx(39 / window)
    assert perf.images_per_s.value == pytest.approx(39 / window * 256)
    assert perf.gpu_utilization_mean.value == pytest.approx(90.0)
    assert perf.gpu_memory_peak.value == pytest.approx(60 * GIB)  # the last sample: (59 + 1) GiB
    make = report.environments[0].steps[0]
    assert make.duration.value == pytest.approx(10.0)


def test_notes_state_the_weights_and_every_difference_from_the_full_run(run_folder: Path) -> None:
    notes = import_device_run(run_folder, "h200", WORKLOAD).notes
    text = "\n".join(notes)
    assert "IS and FID: not meaningful (weights: stand-in" in text and "not reported as scores" in text
    assert "--G_ch: 96 -> 32" in text and "gpus_per_node: 2 -> 1" in text
    assert "imagenet-train: data/ImageNet/train as defined" in text and "1797 images made by" in text
    assert "Sampler interval 1 s (the workload says 5 s)" in text
    assert "steady state: median 0.2500 s per iteration" in text and "1,024 images/s" in text
    assert "10.0 ms a sample" in text and "0.200 % at the workload's 5 s interval" in text


def test_bench_result_keeps_every_sample_and_the_samplers_cost(run_folder: Path) -> None:
    result = bench_result(run_folder, WORKLOAD)
    speed = result["train_speed"]
    assert speed["steady_median_s_per_iteration"] == pytest.approx(0.25)
    assert speed["steady_images_per_s"] == pytest.approx(1024.0)
    assert speed["left_out_iterations"] == list(range(2, 11))  # warm-up; itr 21 is no save point (save_every 100)
    # Overall: from train.py's "Beginning training" line (T0 + 30) to itr 40, 40 iterations in 32.25 s.
    assert speed["overall_window_start"] == "train.py's 'Beginning training at epoch 0...' line"
    assert speed["overall_window_s"] == pytest.approx(32.25) and speed["overall_iterations"] == 40
    assert speed["overall_images_per_s"] == pytest.approx(40 * 256 / 32.25)
    assert speed["first_iteration_after_start_s"] == pytest.approx(2.0)
    # Between the first and last logged iteration: the 2 s before itr 1 left out, 39 intervals.
    assert speed["logged_window_s"] == pytest.approx(30.25)
    assert speed["logged_window_images_per_s"] == pytest.approx(39 * 256 / 30.25)
    train = next(s for s in result["steps"] if s["step"] == "train")
    assert len(train["gpu_utilization_percent_samples"]) == 59
    assert train["sampler"]["percent_of_a_core"] == pytest.approx(0.5)  # the driver's /proc reading
    assert train["sampler"]["per_sample_ms"] == pytest.approx(10.0)
    assert train["sampler"]["start_up_s"] == pytest.approx(0.2)
    assert train["sampler"]["percent_of_a_core_at_workload_interval"] == pytest.approx(0.2)  # 10 ms / 5 s
    make = next(s for s in result["steps"] if s["step"] == "make-hdf5")
    assert make["gpu_utilization_percent_mean"] is None and "gpu" in make["not_measured"]


def test_bench_result_carries_the_drivers_commit_or_says_it_has_none(run_folder: Path) -> None:
    old = bench_result(run_folder, WORKLOAD)  # the fixture's manifest predates bench/provenance.py
    assert old["commit"] is None and old["command_line"] is None
    assert old["commit_source"].startswith("not recorded: the driver's atlas-run.json has no commit")
    assert old["machine"]["hostname"] == "gpu-vm"
    manifest = json.loads((run_folder / "atlas-run.json").read_text())
    recorded = {"commit": "c" * 40, "tree_dirty": False, "changed_paths": [],
                "commit_source": "recorded on the sending machine (t), read from commit.json",
                "command_line": ["python3", "-m", "bench.biggan_h200", "--out", "/out"]}  # fmt: skip
    (run_folder / "atlas-run.json").write_text(json.dumps({**manifest, **recorded}))
    new = bench_result(run_folder, WORKLOAD)
    assert {key: new[key] for key in recorded} == recorded


def test_compare_import_recognises_a_device_run(run_folder: Path, tmp_path: Path) -> None:
    assert import_folder(run_folder, "h200").kind == "device"


@pytest.mark.parametrize(
    ("metalog", "expected"),
    [
        ("config: {'batch_size': 64, 'num_D_steps': 1, 'num_D_accumulations': 4}\n", 256),
        ("config: {'batch_size': 128, 'num_D_steps': 2, 'num_D_accumulations': 8}\n", 2048),
        ("config: {'batch_size': 64}\n", None),
        (None, None),
    ],
)
def test_images_per_iteration(metalog: str | None, expected: int | None) -> None:
    assert images_per_iteration(metalog)[0] == expected
