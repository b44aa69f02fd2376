"""The probe workload: BigGAN-PyTorch's three steps on scikit-learn's digits, small enough to run anywhere.

    python -m workloads.probe make-hdf5 --dataset digits --resolution 8 --data_root data
    python -m workloads.probe inception-moments --dataset digits --resolution 8 --data_root data
    python -m workloads.probe train --dataset digits --resolution 8 --data_root data \
        --batch_size 64 --total_iters 2000 --test_every 200 --experiment_name probe-digits \
        [--resume --save_every 200]

The data set ships inside scikit-learn (sklearn/datasets/data/digits.csv.gz): nothing is
downloaded. `train` uses PyTorch where it is installed (CUDA if a GPU is visible) and a NumPy
implementation of the same GAN otherwise (`--backend` chooses).

`train` saves a checkpoint to weights/<experiment_name>/ (every --save_every iterations, and when
it stops, SIGTERM included); `--resume` continues from it exactly: the same parameters, Adam
moments, noise and data order as a run that was never stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):  # run as a script: make `workloads` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from workloads.probe import biggan_logs
from workloads.probe.features import (
    FeatureModel,
    class_probabilities,
    classifier_accuracy,
    features,
    fit_feature_model,
    frechet_distance,
    images_to_unit,
    inception_like_score,
    moments,
)

DATASETS = {"digits": 8}  # name -> native resolution


def hdf5_path(data_root: str, dataset: str, resolution: int) -> Path:
    """BigGAN's layout: data/ImageNet/ImageNet-128.hdf5 -> data/digits/digits-8.hdf5."""
    return Path(data_root) / dataset / f"{dataset}-{resolution}.hdf5"


def moments_path(data_root: str, dataset: str, resolution: int) -> Path:
    return Path(data_root) / dataset / f"{dataset}-{resolution}_feature_moments.npz"


def _check_dataset(args: argparse.Namespace) -> None:
    native = DATASETS.get(args.dataset)
    if native is None:
        raise SystemExit(f"--dataset {args.dataset!r}: the probe knows {', '.join(DATASETS)}")
    if args.resolution != native:
        raise SystemExit(
            f"--resolution {args.resolution}: {args.dataset} is {native}x{native}; use --resolution {native}"
        )


def make_hdf5(args: argparse.Namespace) -> int:
    import h5py
    from sklearn.datasets import load_digits

    _check_dataset(args)
    digits = load_digits()
    # 0..16 intensities -> uint8 0..255, channels first (N, 1, H, W) as BigGAN stores (N, 3, H, W).
    images = np.rint(digits.images * (255 / 16)).astype(np.uint8)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    out = hdf5_path(args.data_root, args.dataset, args.resolution)
    out.parent.mkdir(parents=True, exist_ok=True)
    compression = "lzf" if args.compression else None
    with h5py.File(out, "w") as f:
        f.create_dataset(
            "imgs",
            data=images,
            dtype="uint8",
            chunks=(min(args.chunk_size, len(images)), 1, 8, 8),
            compression=compression,
        )
        f.create_dataset(
            "labels", data=labels, dtype="int64", chunks=(min(args.chunk_size, len(labels)),), compression=compression
        )
    print(f"Wrote {len(images)} images {images.shape[1:]} uint8 and labels int64 to {out}")
    return 0


def load_hdf5(path: Path) -> tuple[np.ndarray[Any, np.dtype[np.uint8]], np.ndarray[Any, np.dtype[np.int64]]]:
    import h5py

    if not path.exists():
        raise SystemExit(f"{path}: not found; run the make-hdf5 step first")
    with h5py.File(path, "r") as f:
        return f["imgs"][...], f["labels"][...]


def inception_moments(args: argparse.Namespace) -> int:
    _check_dataset(args)
    images, labels = load_hdf5(hdf5_path(args.data_root, args.dataset, args.resolution))
    x = images_to_unit(images)
    print("Fitting the feature model (PCA features, softmax classifier)...")
    model = fit_feature_model(x, labels)
    print("Calculating means and covariances...")
    mu, sigma = moments(features(model, x))
    is_mean, is_std = inception_like_score(class_probabilities(model, x))
    accuracy = classifier_accuracy(model, x, labels)
    out = moments_path(args.data_root, args.dataset, args.resolution)
    np.savez(
        out,
        mu=mu,
        sigma=sigma,
        IS_mean=is_mean,
        IS_std=is_std,
        pca_mean=model.pca_mean,
        projection=model.projection,
        classifier_w=model.classifier_w,
        classifier_b=model.classifier_b,
        classifier_accuracy=accuracy,
    )
    print(
        f"Training data from dataset {args.dataset} has IS of {is_mean:5.5f} +/- {is_std:5.5f} "
        f"(classifier accuracy {accuracy:.3f})"
    )
    print(f"Saving calculated means and covariances to disk: {out}")
    return 0


def load_moments(path: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], FeatureModel]:
    if not path.exists():
        raise SystemExit(f"{path}: not found; run the inception-moments step first")
    with np.load(path) as f:
        model = FeatureModel(f["pca_mean"], f["projection"], f["classifier_w"], f["classifier_b"])
        return f["mu"], f["sigma"], model


def choose_backend(requested: str, device: str) -> tuple[str, str]:
    """(backend, device): torch where it is installed, else numpy; CUDA where torch sees a GPU."""
    has_torch = importlib.util.find_spec("torch") is not None
    if requested == "torch" and not has_torch:
        raise SystemExit("--backend torch: PyTorch is not installed; use --backend numpy or auto")
    backend = "torch" if requested == "torch" or (requested == "auto" and has_torch) else "numpy"
    if backend == "numpy":
        if device == "cuda":
            raise SystemExit("--device cuda needs the torch backend")
        return backend, "cpu"
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    return backend, device


def make_gan(args: argparse.Namespace, backend: str, device: str, data_dim: int) -> Any:
    common: dict[str, Any] = dict(
        data_dim=data_dim,
        dim_z=args.dim_z,
        width=args.width,
        depth=args.depth,
        g_lr=args.G_lr,
        d_lr=args.D_lr,
        betas=(args.G_B1, args.G_B2, args.D_B1, args.D_B2),
        adam_eps=args.adam_eps,
        seed=args.seed,
    )
    if backend == "torch":
        from workloads.probe.gan_torch import TorchGan

        return TorchGan(**common, device=device)
    from workloads.probe.gan_numpy import NumpyGan

    return NumpyGan(**common)


def experiment_name(args: argparse.Namespace) -> str:
    if args.experiment_name:
        return str(args.experiment_name)
    # BigGAN derives the name from the configuration when none is given.
    return (
        f"Probe_{args.dataset}_seed{args.seed}_Gw{args.width}x{args.depth}_bs{args.batch_size}"
        f"_nDs{args.num_D_steps}_Glr{args.G_lr:2.1e}_Dlr{args.D_lr:2.1e}"
    )


def evaluate(gan: Any, n: int, mu: Any, sigma: Any, model: FeatureModel, seed: int) -> tuple[float, float, float]:
    # Noise of its own (the same at every evaluation): scoring never moves training's RNG, so a
    # run resumed from a checkpoint continues exactly as one that was never stopped.
    samples = gan.sample(n, seed=seed)
    fake_mu, fake_sigma = moments(features(model, samples))
    is_mean, is_std = inception_like_score(class_probabilities(model, samples))
    return is_mean, is_std, frechet_distance(fake_mu, fake_sigma, mu, sigma)


# --- checkpoints (BigGAN's weights_root/<experiment>/) -------------------------------------------

CHECKPOINT_FORMAT = 1
CHECKPOINT_SUFFIX = {"numpy": ".npz", "torch": ".pth"}
# A checkpoint is refused unless these match: the nets' shapes and the data they were trained on;
# batch_size too, since the saved position within the epoch counts batches of that size, and the
# device, since torch's CPU and CUDA noise generators have different states.
CHECKPOINT_CONFIG = ("backend", "device", "dataset", "resolution", "width", "depth", "dim_z", "batch_size")
LOSS_METRICS = ("G_loss", "D_loss_real", "D_loss_fake")
EVAL_STREAM = 1  # SeedSequence([seed, EVAL_STREAM]) seeds the evaluation noise


def checkpoint_path(weights_root: str, name: str, backend: str) -> Path:
    return Path(weights_root) / name / f"checkpoint{CHECKPOINT_SUFFIX[backend]}"


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through a temporary file in the same folder, fsync, then os.replace: a kill at any
    point leaves either the previous file or the new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(f.fileno(), 0o666 & ~umask)  # mkstemp's 0600 -> what open() would have made
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself, durable (POSIX)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def write_text_atomic(path: Path, text: str) -> None:
    def write(f: IO[bytes]) -> None:
        f.write(text.encode())

    atomic_write(path, write)


def save_checkpoint(gan: Any, path: Path, meta: dict[str, Any]) -> None:
    print(f"Saving weights to {path}...")
    atomic_write(path, lambda f: gan.write_checkpoint(f, meta))


def load_checkpoint(gan: Any, path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Load `path` into `gan` after checking it was written for this configuration; its meta."""
    print(f"Loading weights from {path}...")
    try:
        meta, payload = gan.read_checkpoint(path)
    except (OSError, ValueError, KeyError, RuntimeError, zipfile.BadZipFile, pickle.UnpicklingError) as error:
        raise SystemExit(f"{path}: cannot read the checkpoint ({error}); move it away to start over") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise SystemExit(f"{path}: checkpoint format {meta.get('format')!r}, this probe reads {CHECKPOINT_FORMAT}")
    saved = meta.get("config", {})
    for key in CHECKPOINT_CONFIG:
        if saved.get(key) != config[key]:
            raise SystemExit(
                f"{path}: the checkpoint's {key} is {saved.get(key)!r} but this run's is {config[key]!r}; "
                f"resume with --{key} {saved.get(key)}, or use another --experiment_name or --weights_root"
            )
    try:
        gan.load_checkpoint(payload)
    except (ValueError, KeyError, RuntimeError) as error:
        raise SystemExit(f"{path}: the checkpoint does not fit the nets ({error})") from None
    return dict(meta)


def find_checkpoint(weights_root: str, name: str, backend: str) -> Path | None:
    path = checkpoint_path(weights_root, name, backend)
    if path.exists():
        return path
    for other in CHECKPOINT_SUFFIX:
        if other != backend and checkpoint_path(weights_root, name, other).exists():
            raise SystemExit(
                f"{checkpoint_path(weights_root, name, other)}: the checkpoint's backend is {other!r} "
                f"but this run's is {backend!r}; resume with --backend {other}, or use another --experiment_name"
            )
    return None


def drop_log_records_after(logs_root: Path, name: str, itr: int) -> int:
    """Remove what the logs hold beyond the checkpoint's iteration (written between the last save and
    the kill), so a resumed run's logs read as one run. The count of records dropped."""

    def keep(line: str, jsonl: bool) -> bool:
        try:
            at = int(json.loads(line)["itr"]) if jsonl else int(line.split(":", 1)[0])
        except (ValueError, KeyError, TypeError):
            return False  # a line cut short by the kill
        return at <= itr

    dropped = 0
    paths = [(logs_root / f"{name}_log.jsonl", True)]
    paths += [(logs_root / name / f"{metric}.log", False) for metric in LOSS_METRICS]
    for path, jsonl in paths:
        if not path.exists():
            continue
        lines = path.read_text().splitlines()
        kept = [line for line in lines if keep(line, jsonl)]
        if len(kept) < len(lines):
            dropped += len(lines) - len(kept)
            write_text_atomic(path, "".join(f"{line}\n" for line in kept))
    return dropped


class Termination:
    """SIGTERM (a preempted pod, Slurm requeueing a job) asks the loop to stop after the current
    iteration and save; Kubernetes and Slurm allow about 30 s before SIGKILL."""

    def __init__(self) -> None:
        self.requested = False
        self.previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __enter__(self) -> Termination:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def train(args: argparse.Namespace) -> int:
    _check_dataset(args)
    images, _labels = load_hdf5(hdf5_path(args.data_root, args.dataset, args.resolution))
    mu, sigma, model = load_moments(moments_path(args.data_root, args.dataset, args.resolution))
    data = images_to_unit(images)
    backend, device = choose_backend(args.backend, args.device)
    gan = make_gan(args, backend, device, data.shape[1])
    name = experiment_name(args)
    print(f"Experiment name is {name}")
    print(f"Backend {backend} on {device}; {len(data)} images of {data.shape[1]} values")

    batches_per_epoch = len(data) // args.batch_size
    if batches_per_epoch == 0:
        raise SystemExit(f"--batch_size {args.batch_size}: larger than the data set ({len(data)} images)")
    config = {k: v for k, v in sorted(vars(args).items()) if k != "func"}
    config.update(experiment_name=name, backend=backend, device=device)
    state: dict[str, Any] = {"itr": 0, "epoch": 0, "best_IS": 0, "best_FID": 999999}
    order_rng = np.random.default_rng(args.seed)
    batch = 0  # the next batch of the current epoch
    path = checkpoint_path(args.weights_root, name, backend)
    found = find_checkpoint(args.weights_root, name, backend) if args.resume else None
    if found is not None:
        meta = load_checkpoint(gan, found, config)
        state = dict(meta["state"])
        order_rng.bit_generator.state = meta["order_rng"]
        batch = int(meta["batch"])
        print(f"Resuming at itr {state['itr']} (epoch {state['epoch']}, batch {batch} of {batches_per_epoch})")
    elif args.resume:
        print(f"--resume: no checkpoint at {path}; starting from iteration 0")

    logs_root = Path(args.logs_root)
    logs_root.mkdir(parents=True, exist_ok=True)
    # As BigGAN: reinitialize=(not resume); a run that starts from iteration 0 starts its logs afresh.
    resumed = found is not None
    if resumed:
        dropped = drop_log_records_after(logs_root, name, state["itr"])
        if dropped:
            print(f"Dropped {dropped} log record(s) after itr {state['itr']} (written after that checkpoint)")
    test_log = biggan_logs.MetricsLogger(logs_root / f"{name}_log.jsonl", reinitialize=not resumed)
    train_log = biggan_logs.LossLogger(logs_root / name, reinitialize=not resumed)
    biggan_logs.write_metadata(logs_root, name, config, state)

    total = args.total_iters if args.total_iters else args.num_epochs * batches_per_epoch
    eval_seed = int(np.random.SeedSequence([args.seed, EVAL_STREAM]).generate_state(1)[0])
    checkpoint_config = {key: config[key] for key in CHECKPOINT_CONFIG}
    epoch_start = order_rng.bit_generator.state

    def save() -> None:
        # The data position: the order RNG at the start of the epoch in progress and the next batch;
        # after an epoch's last batch, the next epoch's start.
        position = (order_rng.bit_generator.state, 0) if batch == batches_per_epoch else (epoch_start, batch)
        meta = {"format": CHECKPOINT_FORMAT, "config": checkpoint_config, "state": state}
        save_checkpoint(gan, path, {**meta, "order_rng": position[0], "batch": position[1]})

    def test() -> None:
        is_mean, is_std, fid = evaluate(gan, args.num_inception_images, mu, sigma, model, eval_seed)
        print(
            f"Itr {itr}: PROBE Inception-like Score is {is_mean:3.3f} +/- {is_std:3.3f}, "
            f"PROBE Frechet distance (FID-like) is {fid:5.4f}"
        )
        state["best_IS"] = max(state["best_IS"], is_mean)
        state["best_FID"] = min(state["best_FID"], fid)
        test_log.log(itr=itr, IS_mean=is_mean, IS_std=is_std, FID=fid)

    start = time.perf_counter()
    start_itr = itr = int(state["itr"])
    saved_itr = itr if resumed else -1
    print(f"Beginning training at epoch {state['epoch']}...")
    deadline = start + args.time_limit if args.time_limit > 0 else float("inf")
    with Termination() as termination:

        def stopping() -> bool:
            return itr >= total or termination.requested or time.perf_counter() >= deadline

        while not stopping():
            epoch_start = order_rng.bit_generator.state
            order = order_rng.permutation(len(data))  # --shuffle: a new order each epoch
            while batch < batches_per_epoch and not stopping():
                # num_D_steps D updates per G update, each on the next real batch (BigGAN does the same).
                for d_step in range(args.num_D_steps):
                    index = order[((batch + d_step) % batches_per_epoch) * args.batch_size :][: args.batch_size]
                    d_real, d_fake = gan.discriminator_step(data[index])
                g_loss = gan.generator_step(args.batch_size)
                itr += 1
                batch += 1
                state["itr"] = itr
                if batch == batches_per_epoch:
                    state["epoch"] += 1
                metrics = {"G_loss": g_loss, "D_loss_real": d_real, "D_loss_fake": d_fake}
                train_log.log(itr, **metrics)
                if itr == start_itr + 1:
                    # Wall-clock time of the first iteration's end: request -> first iteration, per environment.
                    print(f"First iteration done at {time.time():.3f} (Unix s)", flush=True)
                if itr % args.log_every == 0:
                    print(", ".join([f"itr: {itr}"] + [f"{key} : {value:+4.3f}" for key, value in metrics.items()]))
                if itr % args.test_every == 0:
                    test()
                if args.save_every and itr % args.save_every == 0:
                    save()
                    saved_itr = itr
            if batch == batches_per_epoch:
                batch = 0
                epoch_start = order_rng.bit_generator.state
        if saved_itr != itr:
            save()  # before the closing evaluation, so the checkpoint is what an unstopped run has here
        if termination.requested:
            print(f"SIGTERM at itr {itr}: checkpoint saved; rerun with --resume to continue")
        elif itr > start_itr and itr % args.test_every != 0:
            test()  # the closing evaluation
    elapsed = time.perf_counter() - start
    biggan_logs.write_metadata(logs_root, name, config, state)
    done = itr - start_itr
    print(
        f"Probe: {done} iterations in {elapsed:.2f} s ({done / elapsed:.1f} it/s, "
        f"{done * args.batch_size * (args.num_D_steps + 1) / elapsed:.0f} images/s), backend {backend} on {device}"
        + (f"; resumed at itr {start_itr}, now at {itr}" if resumed else "")
    )
    return 128 + signal.SIGTERM if termination.requested else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workloads.probe", description=__doc__.split("\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dataset", default="digits")
        p.add_argument("--resolution", type=int, default=8)
        p.add_argument("--data_root", default="data")

    p = steps.add_parser("make-hdf5", help="pack the digits into HDF5 (imgs uint8, labels int64)")
    common(p)
    p.add_argument("--batch_size", type=int, default=256, help="accepted for BigGAN parity; unused")
    p.add_argument("--chunk_size", type=int, default=500)
    p.add_argument("--compression", action="store_true", help="LZF, as BigGAN's --compression")
    p.set_defaults(func=make_hdf5)

    p = steps.add_parser("inception-moments", help="fit the feature model; write mu, sigma, IS of the real data")
    common(p)
    p.add_argument("--batch_size", type=int, default=64, help="accepted for BigGAN parity; unused")
    p.set_defaults(func=inception_moments)

    p = steps.add_parser("train", help="train the GAN, logging in BigGAN's formats")
    common(p)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--num_epochs", type=int, default=100)
    p.add_argument("--total_iters", type=int, default=0, help="stop after this many G iterations (0: num_epochs)")
    p.add_argument("--time_limit", type=float, default=0, help="stop after this many seconds (0: no limit)")
    p.add_argument("--num_D_steps", type=int, default=1)
    p.add_argument("--G_lr", type=float, default=2e-4)
    p.add_argument("--D_lr", type=float, default=2e-4)
    p.add_argument("--G_B1", type=float, default=0.5)
    p.add_argument("--G_B2", type=float, default=0.999)
    p.add_argument("--D_B1", type=float, default=0.5)
    p.add_argument("--D_B2", type=float, default=0.999)
    p.add_argument("--adam_eps", type=float, default=1e-8)
    p.add_argument("--dim_z", type=int, default=16)
    p.add_argument("--width", type=int, default=128, help="hidden units per layer of G and D")
    p.add_argument("--depth", type=int, default=2, help="hidden layers of G and D")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--logs_root", default="logs")
    p.add_argument("--weights_root", default="weights", help="checkpoints go to WEIGHTS_ROOT/<experiment_name>/")
    p.add_argument("--experiment_name", default="")
    p.add_argument(
        "--save_every",
        type=int,
        default=0,
        help="save a checkpoint every N G iterations; one is always saved when training stops (total_iters, "
        "num_epochs or time_limit reached, or SIGTERM). 0, the default: only then",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from WEIGHTS_ROOT/<experiment_name>/'s checkpoint, appending to the logs; "
        "where there is none, start from iteration 0 (so a requeued job reruns the same command)",
    )
    p.add_argument("--test_every", type=int, default=200)
    p.add_argument("--log_every", type=int, default=1, help="print the losses every N iterations")
    p.add_argument("--num_inception_images", type=int, default=1000)
    p.add_argument("--backend", choices=("auto", "torch", "numpy"), default="auto")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.set_defaults(func=train)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("batch_size", "test_every", "log_every", "num_D_steps", "num_inception_images"):
        if name in vars(args) and getattr(args, name) < 1:
            raise SystemExit(f"--{name}: must be at least 1")
    if getattr(args, "save_every", 0) < 0:
        raise SystemExit("--save_every: must be 0 (only when training stops) or more")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
