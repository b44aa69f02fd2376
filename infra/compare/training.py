"""BigGAN-format training logs (the probe writes the same): evaluations, losses, batch size.

Pure: the files' text in, a TrainingLog out (`infra.compare.run_files` fetches the files)."""

from __future__ import annotations

import re

from infra.compare.records import TrainingLog
from infra.telemetry.parsers.biggan_logs import parse_biggan_jsonl, parse_loss_log, parse_metalog
from infra.workload.options import last_values

BATCH_IN_CONFIG = re.compile(r"'batch_size': (\d+)")


def batch_size_of(argv: tuple[str, ...] | None, metalog: str | None) -> int | None:
    """The batch size the run used: metalog.txt's config (what the program parsed), else its argv."""
    if metalog:
        match = BATCH_IN_CONFIG.search(parse_metalog(metalog).get("config", ""))
        if match:
            return int(match.group(1))
    values = last_values(argv or ()).get("--batch_size", ())
    if values and values[0].isdigit():
        return int(values[0])
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

