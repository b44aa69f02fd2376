"""What both collectors read from a run's files, through `RemoteFiles`: each step's sampler
telemetry, the training logs, and what Pulumi staged. Every file read is first fetched into the
report's raw/ folder, so the report keeps what it was computed from; the text is then handed to
the pure loaders (`infra.compare.telemetry`, `infra.compare.training`).

`where` says where the files were read, e.g. "on alex@satori:22 (SFTP)".
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path

from infra.compare.contract import read_throughput
from infra.compare.records import (
    NO_THROUGHPUT_LINE,
    NO_TRAINING_LOG,
    Missing,
    ReportContract,
    StagingRecord,
    TelemetryColumns,
    ThroughputReading,
    TrainingLog,
)
from infra.compare.remote_files import RemoteFile, RemoteFiles
from infra.compare.telemetry import load_sampler_telemetry
from infra.compare.training import training_log_from_text
from infra.telemetry.bundle import UNSAMPLED_SUFFIX, unsampled_path
from infra.telemetry.columns import SUFFIX as COLUMN_SUFFIX
from infra.telemetry.columns import columns_path
from infra.telemetry.parsers import ParseError


def collect_telemetry(
    steps: Sequence[str], telemetry_dir: str, files: RemoteFiles, raw_dir: Path, where: str
) -> tuple[dict[str, TelemetryColumns | Missing], dict[str, tuple[str, ...]]]:
    """Each step's sampler file (and its column file, where written), fetched into `raw_dir`;
    and the command line each step really ran, from the sampler's start record."""
    telemetry: dict[str, TelemetryColumns | Missing] = {}
    argv: dict[str, tuple[str, ...]] = {}
    raw_dir.mkdir(parents=True, exist_ok=True)
    for step in steps:
        remote = posixpath.join(telemetry_dir, f"{step}.jsonl")
        local = raw_dir / f"telemetry-{step}.jsonl"
        if not files.fetch(remote, local):
            telemetry[step] = _unsampled(step, remote, files, raw_dir, where)
            continue
        # The sampler's binary rows beside it, where it wrote them: the same columns, read in one go.
        rows_local = raw_dir / f"telemetry-{step}{COLUMN_SUFFIX}"
        rows_found = files.fetch(columns_path(remote), rows_local)
        columns = load_sampler_telemetry(local, f"the sampler's {remote} {where}", rows_local if rows_found else None)
        telemetry[step] = columns
        if columns.argv:
            argv[step] = columns.argv
    return telemetry, argv


def _unsampled(step: str, remote: str, files: RemoteFiles, raw_dir: Path, where: str) -> Missing:
    """Why a step has no telemetry: what the entrypoint wrote where it ran the step unsampled (an
    image without python3: infra/telemetry/entrypoint.sh), else that the sampler never started."""
    marker = unsampled_path(remote)
    local = raw_dir / f"telemetry-{step}{UNSAMPLED_SUFFIX}"
    if files.fetch(marker, local):
        reason = " ".join(local.read_text(errors="replace").split())[:300] or "the step ran without the sampler"
        return Missing(f"not measured: {reason} ({marker} {where})")
    return Missing(f"not measured: no {remote} {where} (the job did not start the sampler)")


def collect_logs(
    contract: ReportContract,
    logs_dir: str,
    files: RemoteFiles,
    raw_dir: Path,
    where: str,
    argv: dict[str, tuple[str, ...]],
) -> tuple[TrainingLog | Missing, ThroughputReading | Missing]:
    """What the workload's definition says its logs hold: a BigGAN-style training log (read for
    the measured step's command line) and its own throughput line."""
    training = (
        load_training_log(logs_dir, files, raw_dir, where, argv.get(contract.step))
        if contract.training_log
        else Missing(NO_TRAINING_LOG)
    )
    throughput: ThroughputReading | Missing = Missing(NO_THROUGHPUT_LINE)
    if contract.throughput is not None:
        remote = posixpath.join(logs_dir, contract.throughput.file)
        local = raw_dir / f"throughput-{posixpath.basename(remote)}"
        if files.fetch(remote, local):
            throughput = read_throughput(local.read_text(errors="replace"), contract.throughput, f"{remote} {where}")
        else:
            throughput = Missing(f"not measured: no {remote} {where} (the step did not write its throughput line)")
    return training, throughput


def load_training_log(
    logs_dir: str, files: RemoteFiles, raw_dir: Path, where: str, argv: tuple[str, ...] | None
) -> TrainingLog | Missing:
    """Find `<logs>/<exp>_log.jsonl`, fetch it with `<exp>/G_loss.log` and `<exp>/metalog.txt`."""
    candidates = [f for f in files.listdir(logs_dir) if f.path.endswith("_log.jsonl")]
    if not candidates:
        return Missing(f"not measured: no <experiment>_log.jsonl under {logs_dir} {where}")
    newest = max(candidates, key=lambda f: f.mtime)
    experiment = posixpath.basename(newest.path)[: -len("_log.jsonl")]
    texts: dict[str, str | None] = {}
    for key, remote in (
        ("evaluations", newest.path),
        ("g_loss", posixpath.join(logs_dir, experiment, "G_loss.log")),
        ("metalog", posixpath.join(logs_dir, experiment, "metalog.txt")),
    ):
        local = raw_dir / f"log-{key}-{posixpath.basename(remote)}"
        texts[key] = local.read_text() if files.fetch(remote, local) else None
    try:
        return training_log_from_text(
            f"{newest.path} and {experiment}/G_loss.log, metalog.txt {where}",
            experiment,
            texts["evaluations"] or "",
            texts["g_loss"],
            texts["metalog"],
            argv,
        )
    except ParseError as error:
        return Missing(f"not measured: {newest.path} {where} is not a BigGAN log ({error})")


def staged_files(run_dir: str, files: RemoteFiles, host: str) -> tuple[StagingRecord, ...] | Missing:
    """What Pulumi staged by SFTP into `<run_dir>/.atlas`: bytes, and the window of the files' mtimes."""
    staged: list[RemoteFile] = []
    pending = [posixpath.join(run_dir, ".atlas")]
    while pending:
        for entry in files.listdir(pending.pop()):
            if entry.size < 0:
                pending.append(entry.path)
            else:
                staged.append(entry)
    if not staged:
        return Missing(f"nothing staged under {run_dir}/.atlas on {host}")
    return (
        StagingRecord(
            name="job scripts and code (SFTP)",
            started_at=min(f.mtime for f in staged),
            finished_at=max(f.mtime for f in staged),
            bytes_moved=sum(f.size for f in staged),
            simulated=False,
            source=f"SFTP stat of {len(staged)} files under {run_dir}/.atlas on {host} "
            "(sizes; modification times, 1 s)",
        ),
    )
