"""The probe trains for real (NumPy backend, CPU) and writes BigGAN-PyTorch's log formats."""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from infra.telemetry.parsers import parse_biggan_jsonl, parse_loss_log, parse_metalog
from workloads.probe import probe
from workloads.probe.features import frechet_distance, inception_like_score
from workloads.probe.gan_numpy import Mlp

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
            "--num_inception_images", "200"]  # fmt: skip
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
