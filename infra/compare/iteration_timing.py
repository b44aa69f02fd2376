"""Where each train iteration's time went, from the training process itself (the BigGAN patch's
reason 7: `logs/<experiment>/timing.jsonl`), against the sampler's GPU utilization.

Each line the patch writes is one iteration of rank 0: `data_s` (blocked in the DataLoader's
next()), `copy_s` (the batch to the GPU), `compute_s` (train() up to a torch.cuda.synchronize),
`after_s` (logging, checkpoint, evaluation), the allocator's peaks, and `time` (wall clock at the
iteration's end). The first line, `{"setup": {...}}`, holds the precision settings in force.

Steady state: every iteration from the second epoch on (the first holds cuDNN's autotuning, the
workers' start and the first reads of the file), less the iterations torch.profiler ran over.
Pure: text in, dataclasses out.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infra.telemetry.parsers import ParseError

PARTS = ("data_s", "copy_s", "compute_s", "after_s")


@dataclass(frozen=True)
class Iteration:
    itr: int
    epoch: int
    end_t: float  # wall clock when the iteration (its logging, checkpoint, evaluation too) ended
    data_s: float
    copy_s: float
    compute_s: float
    after_s: float
    profiled: bool
    mem_allocated_peak: int
    mem_reserved_peak: int

    @property
    def total_s(self) -> float:
        return self.data_s + self.copy_s + self.compute_s + self.after_s

    @property
    def start_t(self) -> float:
        return self.end_t - self.total_s


@dataclass(frozen=True)
class IterationTiming:
    setup: dict[str, Any]
    iterations: tuple[Iteration, ...]


@dataclass(frozen=True)
class TimingSummary:
    """One window of iterations: sums and medians of each part, images/s, the sampler's GPU use."""

    window: str
    iterations: int
    first_itr: int | None
    last_itr: int | None
    wall_s: float
    sums_s: dict[str, float]
    medians_s: dict[str, float]
    share_percent: dict[str, float]  # each part's share of the window's summed time
    median_iteration_s: float | None
    images_per_s_median: float | None  # images an iteration / the median iteration
    images_per_s_window: float | None  # images of the window / its summed time
    gpu_busy_percent_mean: float | None  # the sampler's NVML utilization over the window
    gpu_busy_samples: int
    mem_allocated_peak: int | None
    mem_reserved_peak: int | None


def parse_timing(text: str) -> IterationTiming:
    """timing.jsonl as the patch writes it; a line cut off by a stopped run (the last) is left out."""
    setup: dict[str, Any] = {}
    iterations: list[Iteration] = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                break  # the run was stopped while writing its last line
            raise ParseError(f"timing.jsonl line {number}: not JSON ({error})") from error
        if "setup" in record:
            setup = dict(record["setup"])
            continue
        try:
            iterations.append(
                Iteration(
                    itr=int(record["itr"]),
                    epoch=int(record["epoch"]),
                    end_t=float(record["time"]),
                    data_s=float(record["data_s"]),
                    copy_s=float(record["copy_s"]),
                    compute_s=float(record["compute_s"]),
                    after_s=float(record["after_s"]),
                    profiled=bool(record.get("profiled", False)),
                    mem_allocated_peak=int(record["mem_allocated_peak"]),
                    mem_reserved_peak=int(record["mem_reserved_peak"]),
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ParseError(f"timing.jsonl line {number}: {error!r} in {line[:200]}") from error
    return IterationTiming(setup, tuple(iterations))


def steady(timing: IterationTiming) -> tuple[Iteration, ...]:
    """The steady-state iterations: from the second epoch on, the profiled ones left out."""
    return tuple(i for i in timing.iterations if i.epoch >= 1 and not i.profiled)


def summarize(
    window: str,
    iterations: Sequence[Iteration],
    images_per_iteration: int | None,
    gpu_samples: Sequence[tuple[float, float]] = (),
) -> TimingSummary:
    """`gpu_samples`: (t, utilization %) from the sampler; those inside an iteration of the window count."""
    if not iterations:
        return TimingSummary(window, 0, None, None, 0.0, {}, {}, {}, None, None, None, None, 0, None, None)
    sums = {part: sum(getattr(i, part) for i in iterations) for part in PARTS}
    total = sum(sums.values())
    medians = {part: statistics.median(getattr(i, part) for i in iterations) for part in PARTS}
    median_total = statistics.median(i.total_s for i in iterations)
    spans = sorted((i.start_t, i.end_t) for i in iterations)
    inside = [u for t, u in gpu_samples if u == u and any(a <= t <= b for a, b in spans)]
    images = images_per_iteration
    return TimingSummary(
        window=window,
        iterations=len(iterations),
        first_itr=iterations[0].itr,
        last_itr=iterations[-1].itr,
        wall_s=iterations[-1].end_t - iterations[0].start_t,
        sums_s=sums,
        medians_s=medians,
        share_percent={part: 100 * value / total for part, value in sums.items()} if total > 0 else {},
        median_iteration_s=median_total,
        images_per_s_median=images / median_total if images and median_total > 0 else None,
        images_per_s_window=images * len(iterations) / total if images and total > 0 else None,
        gpu_busy_percent_mean=statistics.fmean(inside) if inside else None,
        gpu_busy_samples=len(inside),
        mem_allocated_peak=max(i.mem_allocated_peak for i in iterations),
        mem_reserved_peak=max(i.mem_reserved_peak for i in iterations),
    )


def timing_report(
    timing: IterationTiming, images_per_iteration: int | None, gpu_samples: Sequence[tuple[float, float]] = ()
) -> dict[str, Any]:
    """The raw JSON's `iteration_timing`: the whole run, its first epoch, the steady state (with and
    without the iterations that checkpointed or evaluated), and every iteration's parts."""
    every = timing.iterations
    plain = [i for i in steady(timing) if i.after_s < 1.0]
    windows = [
        summarize("all iterations", every, images_per_iteration, gpu_samples),
        summarize("first epoch", [i for i in every if i.epoch == 0], images_per_iteration, gpu_samples),
        summarize("steady (epochs from the second, not profiled)", steady(timing), images_per_iteration, gpu_samples),
        summarize(
            "steady, iterations with no checkpoint or evaluation (after_s < 1 s)",
            plain,
            images_per_iteration,
            gpu_samples,
        ),
    ]
    return {
        "source": "logs/<experiment>/timing.jsonl written by main.py (biggan-torch2.patch, reason 7)",
        "setup": timing.setup,
        "images_per_iteration": images_per_iteration,
        "windows": [summary.__dict__ for summary in windows],
        "iterations": [
            [i.itr, i.epoch, round(i.end_t, 3), *(round(getattr(i, p), 5) for p in PARTS), i.profiled] for i in every
        ],
        "iterations_columns": ["itr", "epoch", "end_t", *PARTS, "profiled"],
    }


_TOTAL = re.compile(r"^Self CUDA time total: ([0-9.]+)(us|ms|s)\s*$", re.MULTILINE)
_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def profile_kernel_seconds(table: str) -> float | None:
    """The GPU's kernel time over the profiled iterations, as torch.profiler's own table totals it
    (`Self CUDA time total: 5.725s` under the table sorted by device time): user annotations such
    as DistributedDataParallel.forward, whose range spans kernels already counted, are not in it."""
    found = _TOTAL.search(table)
    return float(found.group(1)) * _UNIT[found.group(2)] if found else None
