"""Timestamps as the environments print them, to Unix seconds (UTC unless the text says otherwise)."""

from __future__ import annotations

import datetime as dt
import re

LSF_SHORT = re.compile(r"^(?P<month>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d{2}:\d{2}(?::\d{2})?)")


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


def lsf_short(text: str | None, year: int) -> float | None:
    """bjobs' `Dec  2 15:56:43` (with -hms; `Dec  2 15:56` without), printed under TZ=UTC.

    LSF prints no year: the caller passes the year of the submission it knows (the stack
    output's `submitted_at`); a finish time in January of a December job rolls over.
    """
    if not text:
        return None
    match = LSF_SHORT.match(text.strip())
    if not match:
        return None
    clock = match["clock"] if match["clock"].count(":") == 2 else match["clock"] + ":00"
    value = dt.datetime.strptime(f"{year} {match['month']} {int(match['day'])} {clock}", "%Y %b %d %H:%M:%S")
    return value.replace(tzinfo=dt.UTC).timestamp()


def iso_text(epoch: float | None) -> str:
    if epoch is None:
        return ""
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
