"""BigGAN-format training logs (the probe writes the same): evaluations, losses, batch size."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING

from infra.compare.records import Missing, TrainingLog
from infra.telemetry.parsers import ParseError, parse_biggan_jsonl, parse_loss_log, parse_metalog

if TYPE_CHECKING:
    from infra.compare.hpc_collector import RemoteFiles

BATCH_IN_CONFIG = re.compile(r"'batch_size': (\d+)")


def batch_size_of(argv: tuple[str, ...] | None, metalog: str | None) -> int | None:
    """The batch size the run used: metalog.txt's config (what the program parsed), else its argv."""
    if metalog:
        match = BATCH_IN_CONFIG.search(parse_metalog(metalog).get("config", ""))
        if match:
            return int(match.group(1))
    if argv and "--batch_size" in argv:
        index = argv.index("--batch_size")
        if index + 1 < len(argv) and argv[index + 1].isdigit():
            return int(argv[index + 1])
    return None


def training_log_from_text(
    source: str,
    experiment: str,
    evaluations: str,
    g_loss: str | None,
    metalog: str | None,
    argv: tuple[str, ...] | None,
) -> TrainingLog:
    """Pure: the three files' text to a TrainingLog."""
    records = parse_biggan_jsonl(evaluations)
    losses = parse_loss_log(g_loss) if g_loss else ()
    iterations = max([r.itr for r in records] + [i for i, _ in losses], default=None)
    return TrainingLog(
        source=source,
        experiment=experiment,
        eval_itr=tuple(r.itr for r in records),
        eval_stamp=tuple(r.stamp for r in records),
        eval_is_mean=tuple(r.is_mean for r in records),
        eval_fid=tuple(r.fid for r in records),
        loss_itr=tuple(i for i, _ in losses),
        g_loss=tuple(v for _, v in losses),
        batch_size=batch_size_of(argv, metalog),
        iterations=iterations,
    )


def load_training_log(
    logs_dir: str, files: RemoteFiles, raw_dir: Path, where: str, argv: tuple[str, ...] | None
) -> TrainingLog | Missing:
    """Find `<logs>/<exp>_log.jsonl`, fetch it with `<exp>/G_loss.log` and `<exp>/metalog.txt`;
    `where` says where they were read, e.g. "on alex@satori:22 (SFTP)"."""
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
