"""Timestamps as the environments print them, to Unix seconds (UTC unless the text says otherwise).

Kubernetes' RFC 3339 and the ISO times Slurm prints under TZ=UTC; LSF's year-less times are the LSF
package's (infra/hpc/lsf/jobs.py). No NumPy: the schedulers, the report and the monitor share it.
"""

from __future__ import annotations

import datetime as dt


def rfc3339(text: str | None) -> float | None:
    """Kubernetes' `2026-12-02T15:56:44Z` (or with fractions, or an offset)."""
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def iso_utc(text: str | None) -> float | None:
    """sacct's `2026-12-02T15:56:44` printed under TZ=UTC, or an ISO time with Z/offset."""
    if not text or text in ("Unknown", "None"):
        return None
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def iso_text(epoch: float | None) -> str:
    if epoch is None:
        return ""
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
