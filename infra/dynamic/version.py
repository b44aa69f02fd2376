"""The `provider_version` input every dynamic resource carries: a digest of the providers' source.

A code change then shows in `pulumi preview` as an update in place of every resource the
changed providers serve (and nothing else), and `up` runs the new code's `update`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

_DYNAMIC_DIR = Path(__file__).resolve().parent


def provider_version(sources: Iterable[Path]) -> str:
    """`1+<12 hex digits>` over the given source files and this shared plumbing's own."""
    shared = sorted(_DYNAMIC_DIR.glob("*.py"))
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in (*sources, *shared)))
    return "1+" + digest.hexdigest()[:12]
