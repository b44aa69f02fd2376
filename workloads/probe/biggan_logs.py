"""Writers for BigGAN-PyTorch's log formats (utils.MetricsLogger, utils.MyLogger, write_metadata).

Byte-for-byte the same shapes as the satori branch writes, so one parser
(`infra.telemetry.parsers`) reads BigGAN's runs and the probe's alike:
- `<logs_root>/<exp>_log.jsonl`: `{"itr": N, "IS_mean": .., "IS_std": .., "FID": .., "_stamp": time.time()}`
- `<logs_root>/<exp>/<metric>.log`: `"%d: %s" % (itr, "%3.3e" % value)` per iteration
- `<logs_root>/<exp>/metalog.txt`: `datetime:`, `config:`, `state:` lines
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any


class MetricsLogger:
    """One JSON object per evaluation, `_stamp` added last, appended (survives a kill)."""

    def __init__(self, path: Path, reinitialize: bool) -> None:
        self.path = path
        if reinitialize and path.exists():
            print(f"{path} exists, deleting...")
            path.unlink()

    def log(self, **record: Any) -> None:
        record["_stamp"] = time.time()
        with self.path.open("a") as f:
            f.write(json.dumps(record, ensure_ascii=True) + "\n")


class LossLogger:
    """One `<metric>.log` per metric, one `itr: value` line per iteration."""

    def __init__(self, root: Path, reinitialize: bool, logstyle: str = "%3.3e") -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.reinitialize = reinitialize
        self.logstyle = logstyle
        self.seen: set[str] = set()

    def log(self, itr: int, **metrics: float) -> None:
        for name, value in metrics.items():
            path = self.root / f"{name}.log"
            if name not in self.seen:
                self.seen.add(name)
                if self.reinitialize and path.exists():
                    path.unlink()
            with path.open("a") as f:
                f.write("%d: %s\n" % (itr, self.logstyle % value))  # noqa: UP031 (BigGAN's exact format)


def write_metadata(logs_root: Path, experiment_name: str, config: dict[str, Any], state: dict[str, Any]) -> None:
    with (logs_root / experiment_name / "metalog.txt").open("w") as f:
        f.write(f"datetime: {datetime.datetime.now()}\n")
        f.write(f"config: {config}\n")
        f.write(f"state: {state}\n")
