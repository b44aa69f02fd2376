"""Kubeconfig parsing: which cluster and user entries a context names, and where kubectl finds the file.

Pure lookups on the parsed document; infra/kubeapi.py reads the file, turns the entries'
credentials into an ssl context and makes the requests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class KubeConfigError(Exception):
    """The kubeconfig is missing, unreadable or lacks the context asked for."""


def default_kubeconfig() -> Path:
    """Where kubectl looks when no file is named: the first file of $KUBECONFIG, or ~/.kube/config."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return Path(listed[0]) if listed else Path.home() / ".kube" / "config"


def context_entries(
    config: Mapping[str, Any], context: str | None, where: str
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The cluster and user entries of `context` (default: the current one); no user is `{}`."""
    context_name = context or config.get("current-context")
    try:
        ctx = next(c["context"] for c in config.get("contexts") or () if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config.get("clusters") or () if c["name"] == ctx["cluster"])
        users = config.get("users") or ()
        user: Mapping[str, Any] = next((u["user"] for u in users if u["name"] == ctx.get("user")), {})
    except (StopIteration, KeyError, TypeError):
        raise KubeConfigError(
            f"the kubeconfig {where} has no usable context {context_name!r} (with its cluster)"
        ) from None
    return cluster, user
