"""Where BigGAN's data loading spends its time: ImageHDF5 read paths, in and out of DataLoader workers.

Run after `bench.biggan_h200` on the same machine, against the HDF5 file its make-hdf5 step
wrote and the patched BigGAN tree it ran (`--tree`), so the figures are that run's data path:

- per image, in one process: the file opened for every image (BigGAN as written) against one
  handle per process (biggan-torch2.patch, reason 5);
- a DataLoader as train builds it (batch 256, shuffled, 8 workers forked from a process that
  holds a CUDA context): time to the first batch and to the end of an epoch, both read paths,
  ABBA order, --rounds rounds;
- one DataLoader worker's first batch (256 reads) under cProfile, both read paths: the top
  functions by own time.

    python3 -m bench.biggan_dataload --tree /tmp/atlas-biggan/biggan --out DIR [--rounds 4]

Writes DIR/biggan-dataload.json (every round) and prints a summary.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.provenance import run_record, write_result  # noqa: E402
from bench.stats import abba_order, now_utc  # noqa: E402

BATCH = 256
WORKERS = 8
PROFILED_READS = 256


def _datasets(tree: Path) -> Any:
    sys.path.insert(0, str(tree))
    import datasets  # BigGAN-PyTorch's own module, from the run's patched tree

    return datasets


def _reopening(datasets: Any) -> type:
    """ImageHDF5 reading as BigGAN wrote it: the file opened for every image."""
    import h5py

    class Reopening(datasets.ImageHDF5):  # type: ignore[misc]
        def __getitem__(self, index: int) -> tuple[Any, int]:
            with h5py.File(self.hdf5_file, "r") as f:
                img, target = f["imgs"][index], f["labels"][index]
            return self.transform(img), int(target)

    return Reopening


def _per_image_ms(dataset: Any, count: int = 256) -> float:
    import numpy as np

    order = [int(i) for i in np.random.default_rng(0).permutation(len(dataset))[:count]]
    started = time.perf_counter()
    for index in order:
        dataset[index]
    return 1000 * (time.perf_counter() - started) / count


def _epoch(dataset: Any) -> dict[str, float]:
    import torch

    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, shuffle=True, num_workers=WORKERS, pin_memory=True, drop_last=True
    )
    started = time.perf_counter()
    first = None
    for _ in loader:
        if first is None:
            first = time.perf_counter() - started
    return {"first_batch_s": round(first or 0.0, 3), "epoch_s": round(time.perf_counter() - started, 3)}


class _Profiled:
    """A dataset that profiles its own reads in each DataLoader worker, writing one file per worker."""

    def __init__(self, dataset: Any, out: Path) -> None:
        self.dataset, self.out = dataset, out
        self.profile: cProfile.Profile | None = None
        self.reads = 0

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        if self.profile is None:
            self.profile = cProfile.Profile()
            self.profile.enable()
        item = self.dataset[index]
        self.reads += 1
        if self.reads == BATCH:
            self.profile.disable()
            text = io.StringIO()
            pstats.Stats(self.profile, stream=text).sort_stats("tottime").print_stats(12)
            (self.out / f"profile-{os.getpid()}.txt").write_text(text.getvalue())
        return item


def _profile_in_workers(dataset: Any, work: Path) -> str:
    """One worker's profile of its first batch, read the way train reads (forked DataLoader workers)."""
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("profile-*.txt"):
        old.unlink()
    _epoch(_Profiled(dataset, work))
    found = sorted(work.glob("profile-*.txt"))
    return found[0].read_text() if found else "not measured: no worker wrote its profile"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="the patched BigGAN tree the run used")
    parser.add_argument("--hdf5", type=Path, help="default: TREE/data/ImageNet/ImageNet-128.hdf5")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    origin = run_record()
    hdf5 = args.hdf5 or args.tree / "data" / "ImageNet" / "ImageNet-128.hdf5"
    datasets = _datasets(args.tree)
    import h5py
    import torch

    torch.cuda.init()
    holder = torch.zeros(1 << 20, device="cuda")  # the workers fork from a process with a CUDA context, as in train
    with h5py.File(hdf5, "r") as f:
        layout = {
            "images": int(f["imgs"].shape[0]),
            "chunks": list(f["imgs"].chunks or ()),
            "compression": f["imgs"].compression,
            "compression_opts": f["imgs"].compression_opts,
        }
    filesystem = subprocess.run(["stat", "-f", "-c", "%T", str(hdf5)], capture_output=True, text=True).stdout.strip()
    print(f"dataload: {hdf5} on {filesystem}: {layout}", flush=True)
    paths = {
        "reopen per image": _reopening(datasets)(str(hdf5)),
        "one handle per process": datasets.ImageHDF5(str(hdf5)),
    }
    per_image = {name: round(_per_image_ms(ds), 3) for name, ds in paths.items()}
    print(f"dataload: per image, one process: {per_image} ms", flush=True)
    rounds: list[dict[str, Any]] = []
    for number, order in enumerate(abba_order(list(paths), args.rounds)):
        for name in order:
            result = {"round": number, "side": name, **_epoch(paths[name])}
            rounds.append(result)
            print(f"dataload: {result}", flush=True)
    profiles = {
        name: _profile_in_workers(ds, args.out / "profiles" / str(n)) for n, (name, ds) in enumerate(paths.items())
    }
    for name, text in profiles.items():
        print(f"dataload: profile of {PROFILED_READS} reads in a DataLoader worker, {name}:\n{text}", flush=True)
    summary = {
        name: {
            "first_batch_median_s": statistics.median(r["first_batch_s"] for r in rounds if r["side"] == name),
            "epoch_median_s": statistics.median(r["epoch_s"] for r in rounds if r["side"] == name),
        }
        for name in paths
    }
    del holder
    result = {
        "bench": "biggan_dataload",
        "date_utc": now_utc(),
        **origin,
        "hdf5": str(hdf5),
        "filesystem": filesystem,
        "layout": layout,
        "batch": BATCH,
        "workers": WORKERS,
        "per_image_ms_one_process": per_image,
        "rounds": rounds,
        "summary": summary,
        "profiles": profiles,
    }
    written = write_result(result, args.out / "biggan-dataload.json", indent=1)
    print(f"dataload: wrote {written}", flush=True)
    print(f"dataload: {json.dumps(summary)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
