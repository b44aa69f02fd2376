"""Reads scripts/compare's input files: cost-model overrides, the dated rate table, queue-wait estimates.

Where the cost model's numbers come from: override files and `--cost` flags over the
defaults (`infra.compare.costs`), and the dated rate table (rates.yaml); and the estimate file
`scripts/nodes --estimate` wrote (`infra.compare.estimates` sets it beside the measured wait)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.compare.costs import DEFAULT_PROFILES, CostConfigError, CostProfile, Rate, RateTable, apply_overrides

RATES_FILE = Path(__file__).with_name("rates.yaml")


def load_cost_profiles(files: Sequence[Path] = (), flags: Sequence[str] = ()) -> dict[str, CostProfile]:
    """Defaults, then each override file (YAML or JSON: {profile: {parameter: value}}), then flags."""
    profiles = dict(DEFAULT_PROFILES)
    for path in files:
        text = path.read_text()
        document = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(document, dict) or not all(isinstance(v, dict) for v in document.values()):
            raise CostConfigError(f"{path}: expected {{profile: {{parameter: value}}}}")
        profiles = apply_overrides(profiles, document, str(path))
    for flag in flags:
        key, sep, value = flag.partition("=")
        profile, dot, parameter = key.partition(".")
        if not sep or not dot:
            raise CostConfigError(f"--cost {flag!r}: expected PROFILE.PARAMETER=VALUE, e.g. satori.utilization=0.7")
        profiles = apply_overrides(profiles, {profile: {parameter: value}}, f"--cost {flag}")
    return profiles


def load_rate_table(path: Path = RATES_FILE) -> RateTable:
    document = yaml.safe_load(path.read_text())
    return RateTable(
        path=str(path),
        date=str(document["date"]),
        currency=str(document.get("currency", "USD")),
        rates=tuple(
            Rate(
                name=str(r["name"]),
                description=str(r.get("description", "")),
                per_gpu_hour=float(r["per_gpu_hour"]),
                source=str(r["source"]),
                read_on=str(r.get("read_on", "")),
                assumption=r.get("assumption"),
            )
            for r in document["rates"]
        ),
    )


def load_estimates(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"--estimates {path}: cannot be read as an estimate file ({error})") from None
    if not isinstance(record, dict) or not isinstance(record.get("environments"), dict):
        raise ValueError(f"--estimates {path}: not an estimate file (no `environments`); write one with scripts/nodes")
    return record
