"""A stand-in for a PyTorch training step's process tree, busy on the CPU: one process per GPU,
each with a DataLoader's worker processes that make batches (NumPy work) and send them back over
queues, while the rank process runs a "train step" (a matrix product) on each batch.

    python3 -m bench.dataloader_tree --ranks 2 --workers 8 --batches 400 --report out.json

1 launcher + ranks + ranks x workers processes (19 with the defaults). The work is a fixed
number of batches, so the wall time says how fast the tree got through it. The launcher writes
its own wall time and the tree's CPU (its own and its reaped children's, getrusage) to --report,
then leaves with os._exit so that nothing after the reading costs CPU (interpreter teardown).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import time
from multiprocessing.queues import Queue
from pathlib import Path

import numpy as np

BATCH = 16  # images per batch, 3 x 32 x 32 float32: 192 KiB through the queue, as a small DataLoader batch
AUGMENT_ROUNDS = 6


def _worker(seed: int, tasks: Queue[int | None], results: Queue[np.ndarray]) -> None:
    rng = np.random.default_rng(seed)
    while tasks.get() is not None:
        images: np.ndarray = rng.random((BATCH, 3, 32, 32), dtype=np.float32)
        for _ in range(AUGMENT_ROUNDS):  # flips, a blur and normalisation: augmentation-like work
            images = (images[..., ::-1] + np.roll(images, 1, axis=-1) + np.roll(images, 1, axis=-2)) / 3
            images = (images - images.mean(axis=(2, 3), keepdims=True)) / (images.std() + 1e-6)
        results.put(images)


def _rank(rank: int, workers: int, batches: int) -> None:
    context = multiprocessing.get_context("fork")
    tasks: Queue[int | None] = context.Queue()
    results: Queue[np.ndarray] = context.Queue()
    pool = [context.Process(target=_worker, args=(rank * 100 + w, tasks, results)) for w in range(workers)]
    for process in pool:
        process.start()
    for index in range(batches):
        tasks.put(index)
    for _ in pool:
        tasks.put(None)
    weights = np.random.default_rng(rank).random((3 * 32 * 32, 256), dtype=np.float32)
    total = 0.0
    for _ in range(batches):
        batch = results.get()
        total += float((batch.reshape(BATCH, -1) @ weights).sum())
    for process in pool:
        process.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=2, help="processes, one per GPU")
    parser.add_argument("--workers", type=int, default=8, help="data loader workers per rank")
    parser.add_argument("--batches", type=int, default=400, help="batches per rank")
    parser.add_argument("--report", type=Path, required=True)
    args = parser.parse_args()
    start = time.time()
    context = multiprocessing.get_context("fork")
    ranks = [context.Process(target=_rank, args=(r, args.workers, args.batches)) for r in range(args.ranks)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join()
    end = time.time()
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    processes = 1 + args.ranks * (1 + args.workers)
    args.report.write_text(json.dumps({"start": start, "end": end, "cpu_s": cpu_s, "processes": processes}))
    os._exit(0 if all(p.exitcode == 0 for p in ranks) else 1)


if __name__ == "__main__":
    main()
