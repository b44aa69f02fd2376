"""The probe trains for real (NumPy backend, CPU) and writes BigGAN-PyTorch's log formats."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from infra.telemetry.parsers.biggan_logs import parse_biggan_jsonl, parse_loss_log, parse_metalog
from workloads.probe import probe
from workloads.probe.features import frechet_distance, inception_like_score
from workloads.probe.gan_numpy import Mlp, NumpyGan

ITERATIONS = 40
STDOUT_LINE = re.compile(
    r"^itr: (\d+), G_loss : [+-]\d+\.\d{3}, D_loss_real : [+-]\d+\.\d{3}, D_loss_fake : [+-]\d+\.\d{3}$"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    work = tmp_path_factory.mktemp("probe")
    common = ["--data_root", str(work / "data")]
    assert probe.main(["make-hdf5", *common, "--compression"]) == 0
    assert probe.main(["inception-moments", *common]) == 0
    return work, str(work / "logs")


def test_make_hdf5_writes_bigGANs_datasets(trained: tuple[Path, str]) -> None:
    work, _ = trained
    with h5py.File(work / "data" / "digits" / "digits-8.hdf5") as f:
        assert f["imgs"].dtype == np.uint8 and f["imgs"].shape == (1797, 1, 8, 8)
        assert f["labels"].dtype == np.int64 and f["labels"].shape == (1797,)
        assert int(f["imgs"][...].max()) == 255
    with np.load(work / "data" / "digits" / "digits-8_feature_moments.npz") as moments:
        assert moments["mu"].shape == (16,) and moments["sigma"].shape == (16, 16)
        assert float(moments["IS_mean"]) > 5  # ten well-separated classes
        assert float(moments["classifier_accuracy"]) > 0.9


def test_training_changes_the_losses_and_writes_biggan_logs(
    trained: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    work, logs = trained
    argv = ["train", "--data_root", str(work / "data"), "--logs_root", logs, "--experiment_name", "probe-test",
            "--total_iters", str(ITERATIONS), "--test_every", "20", "--backend", "numpy", "--batch_size", "32",
            "--num_inception_images", "200", "--weights_root", str(work / "weights")]  # fmt: skip
    assert probe.main(argv) == 0
    stdout = capsys.readouterr().out.splitlines()
    loss_lines = [line for line in stdout if line.startswith("itr: ")]
    assert len(loss_lines) == ITERATIONS
    assert all(STDOUT_LINE.match(line) for line in loss_lines), loss_lines[:2]

    root = Path(logs)
    evaluations = parse_biggan_jsonl((root / "probe-test_log.jsonl").read_text())
    assert [e.itr for e in evaluations] == [20, 40]
    assert all(e.fid is not None and e.fid > 0 and e.is_mean is not None and e.is_mean >= 1 for e in evaluations)
    assert evaluations[0].stamp <= evaluations[1].stamp

    for name in ("G_loss", "D_loss_real", "D_loss_fake"):
        text = (root / "probe-test" / f"{name}.log").read_text()
        assert re.match(r"^1: -?\d\.\d{3}e[+-]\d{2}$", text.splitlines()[0])
        points = parse_loss_log(text)
        assert [itr for itr, _ in points] == list(range(1, ITERATIONS + 1))
        values = [value for _, value in points]
        assert len(set(values)) > ITERATIONS // 2, f"{name} barely changes"
    # The discriminator learns: its loss on real data falls from the hinge's starting point near 1.
    d_real = [v for _, v in parse_loss_log((root / "probe-test" / "D_loss_real.log").read_text())]
    assert np.mean(d_real[-10:]) < np.mean(d_real[:5])

    meta = parse_metalog((root / "probe-test" / "metalog.txt").read_text())
    assert "'backend': 'numpy'" in meta["config"]
    assert f"'itr': {ITERATIONS}" in meta["state"]


def test_numpy_backprop_matches_finite_differences() -> None:
    rng = np.random.default_rng(1)
    mlp = Mlp([5, 7, 7, 3], tanh_output=True, rng=rng)
    x = rng.standard_normal((4, 5))
    weights = rng.standard_normal((4, 3))

    def loss() -> float:
        return float((mlp.forward(x)[0] * weights).sum())

    out, cache = mlp.forward(x)
    grad_x, grads = mlp.backward(out, cache, weights)
    for param, grad in zip(mlp.params, grads, strict=True):
        index = tuple(rng.integers(0, s) for s in param.shape)
        saved = param[index]
        param[index] = saved + 1e-6
        up = loss()
        param[index] = saved - 1e-6
        down = loss()
        param[index] = saved
        assert grad[index] == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-7)
    x[0, 0] += 1e-6
    up = loss()
    x[0, 0] -= 2e-6
    down = loss()
    x[0, 0] += 1e-6
    assert grad_x[0, 0] == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-7)


def test_frechet_distance_and_score_against_known_values() -> None:
    from scipy import linalg

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((500, 6)), rng.standard_normal((500, 6)) * 1.5 + 0.3
    mu1, s1, mu2, s2 = a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False)
    covmean = linalg.sqrtm(s1 @ s2).real  # BigGAN's (and the reference FID's) formula
    expected = float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, rel=1e-6)
    assert frechet_distance(mu1, s1, mu1, s1) == pytest.approx(0, abs=1e-6)
    uniform = np.full((100, 10), 0.1)
    assert inception_like_score(uniform)[0] == pytest.approx(1.0)
    certain = np.eye(10)[np.arange(100) % 10]
    assert inception_like_score(certain)[0] == pytest.approx(10.0, rel=1e-6)


def test_wrong_resolution_is_refused_with_the_fix() -> None:
    with pytest.raises(SystemExit, match="use --resolution 8"):
        probe.main(["make-hdf5", "--resolution", "128"])


# --- checkpoints and --resume --------------------------------------------------------------------

# Small and fast: 1797 // 64 = 28 batches an epoch, so 70 iterations run into a third epoch and 40
# stops in the middle of the second (its order drawn from the data-order RNG's saved state); two D
# steps per G step use the wrap-around batches.
TOTAL, STOP, BATCHES = 70, 40, 28
SMALL = ["--backend", "numpy", "--batch_size", "64", "--width", "16", "--depth", "1", "--dim_z", "8",
         "--num_D_steps", "2", "--test_every", "20", "--log_every", "10", "--num_inception_images", "100"]  # fmt: skip


def run(work: Path, name: str, *extra: str) -> int:
    argv = ["train", "--data_root", str(work.parent / "data"), "--logs_root", str(work / "logs"),
            "--weights_root", str(work / "weights"), "--experiment_name", name, *SMALL, *extra]  # fmt: skip
    return probe.main(argv)


def checkpoint(work: Path, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
    return NumpyGan.read_checkpoint(work / "weights" / name / "checkpoint.npz")


def assert_same_training(a: tuple[Path, str], b: tuple[Path, str]) -> None:
    """Parameters, Adam moments and steps, both RNGs, data position and state: all equal, exactly."""
    (meta_a, arrays_a), (meta_b, arrays_b) = checkpoint(*a), checkpoint(*b)
    assert meta_a == meta_b
    assert sorted(arrays_a) == sorted(arrays_b)
    assert any(key.startswith("G_optim.first.") for key in arrays_a)
    for key in arrays_a:
        assert np.array_equal(arrays_a[key], arrays_b[key]), key
    for metric in ("G_loss", "D_loss_real", "D_loss_fake"):
        log_a = (a[0] / "logs" / a[1] / f"{metric}.log").read_text()
        assert log_a == (b[0] / "logs" / b[1] / f"{metric}.log").read_text(), metric
        assert len(log_a.splitlines()) == meta_a["state"]["itr"]


def final_metrics_line(stdout: str) -> str:
    return [line for line in stdout.splitlines() if line.startswith("Itr ")][-1]


@pytest.fixture
def work(trained: tuple[Path, str], tmp_path: Path) -> Path:
    # The module's data (data_root is work.parent / "data"), this test's own logs and weights.
    path = trained[0] / tmp_path.name
    path.mkdir()
    return path


@pytest.mark.parametrize("stop", [STOP, BATCHES], ids=["mid-epoch", "at-an-epoch-end"])
def test_a_run_stopped_and_resumed_equals_one_never_stopped(
    work: Path, capsys: pytest.CaptureFixture[str], stop: int
) -> None:
    assert run(work, "whole", "--total_iters", str(TOTAL)) == 0
    whole = capsys.readouterr().out
    assert run(work, "split", "--total_iters", str(stop)) == 0
    first = capsys.readouterr().out
    meta, _ = checkpoint(work, "split")
    assert (meta["state"]["itr"], meta["state"]["epoch"], meta["batch"]) == (stop, *divmod(stop, BATCHES))
    assert run(work, "split", "--total_iters", str(TOTAL), "--resume") == 0
    resumed = capsys.readouterr().out
    assert "Saving weights to" in first and "Loading weights from" in resumed
    epoch, batch = divmod(stop, BATCHES)
    assert f"Resuming at itr {stop} (epoch {epoch}, batch {batch} of {BATCHES})" in resumed
    # Appended, not reinitialized: the loss logs run from 1 to TOTAL once, as the whole run's do.
    assert_same_training((work, "whole"), (work, "split"))
    assert final_metrics_line(resumed) == final_metrics_line(whole) and final_metrics_line(whole).startswith("Itr 70:")
    meta, _ = checkpoint(work, "split")
    assert (meta["state"]["epoch"], meta["batch"]) == divmod(TOTAL, BATCHES)
    metalog = parse_metalog((work / "logs" / "split" / "metalog.txt").read_text())
    assert metalog["state"] == parse_metalog((work / "logs" / "whole" / "metalog.txt").read_text())["state"]


def test_sigterm_saves_and_a_resumed_run_continues_exactly(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(work, "whole", "--total_iters", str(TOTAL)) == 0
    step = NumpyGan.generator_step
    calls = []

    def preempted(self: NumpyGan, n: int) -> float:
        calls.append(n)
        if len(calls) == 45:  # what Kubernetes and Slurm send a preempted job first
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self, n)

    handler = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        patch.setattr(NumpyGan, "generator_step", preempted)
        assert run(work, "preempted", "--total_iters", str(TOTAL), "--save_every", "20") == 128 + signal.SIGTERM
    out = capsys.readouterr().out
    assert "SIGTERM at itr 45: checkpoint saved" in out
    assert checkpoint(work, "preempted")[0]["state"]["itr"] == 45
    assert signal.getsignal(signal.SIGTERM) == handler  # put back
    assert run(work, "preempted", "--total_iters", str(TOTAL), "--save_every", "20", "--resume") == 0
    assert_same_training((work, "whole"), (work, "preempted"))


def test_a_kill_between_checkpoints_resumes_from_the_last_and_drops_the_later_log_lines(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(work, "whole", "--total_iters", str(TOTAL)) == 0
    step = NumpyGan.generator_step
    calls = []

    def killed(self: NumpyGan, n: int) -> float:
        calls.append(n)
        if len(calls) == 38:  # SIGKILL: nothing saved after itr 28's checkpoint (an epoch's last batch)
            raise KeyboardInterrupt
        return step(self, n)

    with monkeypatch.context() as patch:
        patch.setattr(NumpyGan, "generator_step", killed)
        with pytest.raises(KeyboardInterrupt):
            run(work, "killed", "--total_iters", str(TOTAL), "--save_every", "14")
    meta, _ = checkpoint(work, "killed")
    assert (meta["state"]["itr"], meta["state"]["epoch"], meta["batch"]) == (BATCHES, 1, 0)  # the next epoch's start
    assert len((work / "logs" / "killed" / "G_loss.log").read_text().splitlines()) == 37
    capsys.readouterr()
    assert run(work, "killed", "--total_iters", str(TOTAL), "--save_every", "14", "--resume") == 0
    # 29..37 of the 3 loss logs
    assert f"Dropped 27 log record(s) after itr {BATCHES}" in capsys.readouterr().out
    assert_same_training((work, "whole"), (work, "killed"))
    evaluations = parse_biggan_jsonl((work / "logs" / "killed_log.jsonl").read_text())
    assert [e.itr for e in evaluations] == [20, 40, 60, 70]


def test_resume_without_a_checkpoint_starts_at_iteration_0(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(work, "fresh", "--total_iters", "12", "--resume") == 0
    out = capsys.readouterr().out
    expected = work / "weights" / "fresh" / "checkpoint.npz"
    assert f"--resume: no checkpoint at {expected}; starting from iteration 0" in out
    assert "Loading weights" not in out
    assert [itr for itr, _ in parse_loss_log((work / "logs" / "fresh" / "G_loss.log").read_text())] == list(
        range(1, 13)
    )
    assert checkpoint(work, "fresh")[0]["state"]["itr"] == 12
    # The same command again: it continues, and with nothing left to do saves nothing new.
    assert run(work, "fresh", "--total_iters", "12", "--resume") == 0
    out = capsys.readouterr().out
    assert "Resuming at itr 12" in out and "Saving weights" not in out and "Probe: 0 iterations" in out


@pytest.mark.parametrize(
    ("option", "value", "key"),
    [("--width", "8", "width"), ("--depth", "2", "depth"), ("--dim_z", "4", "dim_z"),
     ("--batch_size", "32", "batch_size")],
)  # fmt: skip
def test_a_checkpoint_of_another_configuration_is_refused_naming_the_key(
    work: Path, option: str, value: str, key: str
) -> None:
    assert run(work, "config", "--total_iters", "5") == 0
    path = work / "weights" / "config" / "checkpoint.npz"
    with pytest.raises(SystemExit) as error:
        run(work, "config", "--total_iters", "10", "--resume", option, value)
    message = str(error.value)
    assert message.startswith(f"{path}: the checkpoint's {key} is ") and f"this run's is {int(value)}" in message
    assert checkpoint(work, "config")[0]["state"]["itr"] == 5  # untouched


def test_a_checkpoint_of_the_other_backend_is_refused(work: Path) -> None:
    torch_checkpoint = work / "weights" / "other" / "checkpoint.pth"
    torch_checkpoint.parent.mkdir(parents=True)
    torch_checkpoint.write_bytes(b"written by the torch backend")
    with pytest.raises(SystemExit, match=rf"^{re.escape(str(torch_checkpoint))}: the checkpoint's backend is 'torch'"):
        run(work, "other", "--total_iters", "5", "--resume")


@pytest.mark.parametrize("failure", ["savez", "replace"])
def test_a_failed_save_leaves_the_previous_checkpoint(
    work: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    assert run(work, "atomic", "--total_iters", "10") == 0
    path = work / "weights" / "atomic" / "checkpoint.npz"
    before = path.read_bytes()

    def half_written(file: Any, **arrays: Any) -> None:
        file.write(b"PK\x03\x04 half a zip")  # the kill (or a full disk) comes mid-write
        raise OSError(28, "No space left on device")

    def no_rename(src: Any, dst: Any) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        if failure == "savez":
            patch.setattr(np, "savez", half_written)
        else:
            patch.setattr(os, "replace", no_rename)
        with pytest.raises(OSError):
            run(work, "atomic", "--total_iters", "20", "--resume", "--save_every", "5")
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.npz"]  # no temporary file left
    meta, arrays = checkpoint(work, "atomic")
    assert meta["state"]["itr"] == 10 and "G.0" in arrays
    assert run(work, "atomic", "--total_iters", "20", "--resume") == 0
    assert checkpoint(work, "atomic")[0]["state"]["itr"] == 20


def test_the_checkpoint_is_npz_without_pickles(work: Path) -> None:
    assert run(work, "format", "--total_iters", "3") == 0
    with np.load(work / "weights" / "format" / "checkpoint.npz", allow_pickle=False) as f:
        assert all(f[key].dtype != object for key in f.files)
        meta = json.loads(str(f["meta"]))
    assert meta["config"] == {"backend": "numpy", "device": "cpu", "dataset": "digits", "resolution": 8,
                              "width": 16, "depth": 1, "dim_z": 8, "batch_size": 64}  # fmt: skip
    assert set(meta["state"]) == {"itr", "epoch", "best_IS", "best_FID"}
