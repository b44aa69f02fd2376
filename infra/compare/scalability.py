"""Scalability: the measured images/s, and a linear projection to more GPUs, labelled as an upper bound."""

from __future__ import annotations

from infra.compare.report_model import Scalability, Value, missing

PROJECTION_GPUS = (1, 2, 4, 8, 16, 32, 64)


def scalability(gpus: int | None, images_per_s: Value) -> Scalability:
    if not gpus or images_per_s.value is None:
        reason = images_per_s.note if images_per_s.value is None else "the run's GPU count is unknown"
        return Scalability((), tuple((n, missing("images/s", reason)) for n in PROJECTION_GPUS))
    per_gpu = images_per_s.value / gpus
    projection = tuple(
        (
            n,
            Value(
                per_gpu * n,
                "images/s",
                f"projection from the measured {images_per_s.value:.4g} images/s on {gpus} GPU(s)",
                "linear scaling assumed (no measured efficiency loss): an upper bound",
                "projection",
                images_per_s.simulated,
            ),
        )
        for n in PROJECTION_GPUS
    )
    return Scalability(((gpus, images_per_s),), projection)
