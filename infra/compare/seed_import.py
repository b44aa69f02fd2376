"""A past run from the seed's own logs (`sar -u 5`, `sar -r 5`, `nvidia-smi --query-gpu=... -l 5`).

Files are recognised by their content, not their names: a sar header with `%idle` is CPU, one
with `kbmemused` is memory, a CSV whose header names `utilization.gpu` is the GPU log. The
seed's nvidia-smi query printed no timestamps: its rows are placed `interval_s` apart from the
start of the sar log (the seed ran both with a 5-second interval), and the report says so.
"""

from __future__ import annotations

import calendar
from pathlib import Path

import numpy as np

from infra.compare.records import CGROUP_PEAK, EnvironmentRecords, Missing, TelemetryColumns
from infra.telemetry.parsers import ParseError
from infra.telemetry.parsers.nvidia_smi import NvidiaSmiRow, parse_nvidia_smi_csv
from infra.telemetry.parsers.sar import SarCpu, SarMemory, parse_sar, sar_cpu, sar_memory

NAN = np.nan


def import_seed_logs(
    folder: Path, name: str, interval_s: float = 5.0, gpus: int | None = None, cost_profile: str = "satori"
) -> EnvironmentRecords:
    cpu_rows: tuple[SarCpu, ...] = ()
    memory_rows: tuple[SarMemory, ...] = ()
    gpu_rows: tuple[NvidiaSmiRow, ...] = ()
    cpus: int | None = None
    sources: list[str] = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        text = path.read_text(errors="replace")
        if text.startswith("Linux "):
            try:
                report = parse_sar(text)
            except ParseError:
                continue
            if "%idle" in report.columns:
                cpu_rows, cpus = sar_cpu(report), report.header.cpus
                sources.append(f"{path.name} (sar -u)")
            elif "kbmemused" in report.columns:
                memory_rows = sar_memory(report)
                sources.append(f"{path.name} (sar -r)")
        elif "utilization.gpu" in text.splitlines()[0] if text else False:
            try:
                gpu_rows = parse_nvidia_smi_csv(text)
            except ParseError:
                continue
            sources.append(f"{path.name} (nvidia-smi CSV)")
    if not sources:
        raise FileNotFoundError(f"{folder}: no sar -u, sar -r or nvidia-smi CSV file found")
    # sar prints the node's local clock; with no zone in the file, it is read as UTC.
    times = [calendar.timegm(r.time.timetuple()) for r in cpu_rows] or [
        calendar.timegm(r.time.timetuple()) for r in memory_rows
    ]
    start = float(times[0]) if times else 0.0
    t_cpu = np.array(times, dtype=np.float64)
    t_memory = np.array([calendar.timegm(r.time.timetuple()) for r in memory_rows], dtype=np.float64)
    per_sample = max(gpus or 1, 1)
    gpu_samples = len(gpu_rows) // per_sample
    t_gpu = start + interval_s * np.arange(gpu_samples, dtype=np.float64)
    t = np.unique(np.concatenate([t_cpu, t_memory, t_gpu]))

    def on(times_of: np.ndarray, values: list[float]) -> np.ndarray:
        column = np.full(t.size, NAN)
        if len(values):
            column[np.searchsorted(t, times_of)] = values
        return column

    gpu_util = np.array(
        [
            r.utilization_gpu_percent if r.utilization_gpu_percent is not None else NAN
            for r in gpu_rows[: gpu_samples * per_sample]
        ],
        dtype=np.float64,
    )
    gpu_util = gpu_util.reshape(gpu_samples, per_sample).mean(axis=1) if gpu_samples else gpu_util
    not_measured = [
        ("gpu memory", "the seed queried utilization.memory (controller activity), not memory.used"),
        (CGROUP_PEAK, "the seed's sar -r has the host's memory only"),
    ]
    if not gpu_rows:
        not_measured.append(("gpu", "no nvidia-smi CSV in the folder"))
    columns = TelemetryColumns(
        step="train",
        source=f"the seed's logs in {folder}: " + ", ".join(sources),
        argv=(),
        start_t=start,
        end_t=float(t[-1]) if t.size else None,
        exit_code=None,
        interval_s=interval_s,
        t=t,
        tree_cpu_percent=np.full(t.size, NAN),
        host_cpu_percent=on(t_cpu, [r.busy_percent for r in cpu_rows]),
        tree_rss_bytes=np.full(t.size, NAN),
        host_memory_used_bytes=on(t_memory, [float(r.used_bytes) for r in memory_rows]),
        host_memory_total_bytes=on(t_memory, [float(r.total_bytes) for r in memory_rows]),
        gpu_count=on(t_gpu, [float(per_sample)] * gpu_samples),
        gpu_utilization_percent=on(t_gpu, list(gpu_util)),
        gpu_memory_used_bytes=np.full(t.size, NAN),
        gpu_memory_total_bytes=np.full(t.size, NAN),
        tree_read_bytes=np.full(t.size, NAN),
        host_read_bytes=np.full(t.size, NAN),
        cgroup_peak_bytes=np.full(t.size, NAN),
        not_measured=tuple(not_measured),
        skipped_lines=0,
    )
    return EnvironmentRecords(
        name=name,
        kind="import",
        platform=f"seed logs ({cpus} CPUs)" if cpus else "seed logs",
        gpus=gpus,
        gpu_product=gpu_rows[0].name if gpu_rows else None,
        steps=Missing("not recorded: the seed's logs hold no scheduler records"),
        telemetry={"train": columns},
        training=Missing("not recorded: the seed kept no training log beside sar and nvidia-smi"),
        staging=Missing("not recorded in the seed's logs"),
        notes=(
            f"Imported from {folder}. nvidia-smi rows carry no timestamps: placed {interval_s:g} s apart from "
            "the sar start."
            if gpu_rows
            else f"Imported from {folder}.",
            "sar's clock times have no zone; read as UTC.",
        ),
        cost_profile=cost_profile,
        # What Atlas can tell of it: files it was handed, not a run it observed (never "real").
        provenance=f"imported: the seed's own sar and nvidia-smi logs from {folder}, not a run Atlas observed",
    )
