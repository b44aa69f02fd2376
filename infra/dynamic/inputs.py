"""Reading a dynamic provider's props: unknowns during preview, changed inputs, check failures.

Pure functions over the props dicts the engine passes to `check`, `diff`, `create` and friends;
each provider parses its own inputs once into a frozen dataclass with these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi.dynamic
from pulumi.runtime import rpc


def is_unknown(value: Any) -> bool:
    """During preview an input computed from another resource's output is not known yet."""
    # The engine sends a top-level unknown as rpc.UNKNOWN and one nested in a list or map as an
    # `Unknown` object (seen with the real CLI: `after_job_ids: [<unknown>]`).
    if isinstance(value, pulumi.output.Unknown) or (isinstance(value, str) and value == rpc.UNKNOWN):
        return True
    if isinstance(value, Mapping):
        return any(is_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(is_unknown(v) for v in value)
    return False


def changed(olds: Mapping[str, Any], news: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    """The keys whose new value differs from the old one, or is not known yet (preview)."""
    return [k for k in keys if is_unknown(news.get(k)) or olds.get(k) != news.get(k)]


class CheckFailures(list[pulumi.dynamic.CheckFailure]):
    """The failures one `check` collects, in the order found."""

    def fail(self, prop: str, reason: str) -> None:
        self.append(pulumi.dynamic.CheckFailure(prop, reason))


def number(props: Mapping[str, Any], key: str, default: float) -> float:
    """A numeric input; absent, None or 0 (an older state's value) means the default."""
    return float(props.get(key) or default)
