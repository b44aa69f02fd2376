"""How the monitor reads an HPC login node in one command: a script of marked sections, and the pure
readers of what the steps write (the sampler's telemetry, BigGAN's log), which the Kubernetes side's
reads through the run's monitor (kube_live.py) share.

One poll asks two things (infra.monitor.hpc sends them): every step's status in one query, and
one script (`sections_script`) whose marked sections hold the nodes' GPUs, the queue and the
tails of the running steps' telemetry and training log. Which commands give the nodes and the
queue, and how their answers read, is the scheduler's own (`monitor_sections`, `read_nodes`,
`read_queue` on its class of infra.hpc.registry); what is here is the same for every scheduler.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from infra.compare.telemetry import load_sampler_jsonl
from infra.monitor.model import LogTail, StepTelemetry
from infra.monitor.reasons import SAMPLER_EMPTY, SAMPLER_NOT_STARTED

SECTION = "@@atlas-section"
EXIT = "@@atlas-exit"
TELEMETRY_LINES = 3


def sections_script(sections: Sequence[tuple[str, str]]) -> str:
    """One shell script that prints each command's output (stdout and stderr) and exit status
    between markers, so one SSH command answers several questions."""
    parts = [
        # A subshell each: a section's `exit` (or failure) ends that section only.
        f"printf '\\n{SECTION} %s\\n' {shlex.quote(name)}; ( {command} ) 2>&1; printf '\\n{EXIT} %s\\n' \"$?\""
        for name, command in sections
    ]
    return "; ".join(parts)


def parse_sections(text: str) -> dict[str, tuple[int, str]]:
    found: dict[str, tuple[int, str]] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(SECTION + " "):
            name, lines = line[len(SECTION) + 1 :].strip(), []
        elif line.startswith(EXIT + " ") and name is not None:
            code = line[len(EXIT) + 1 :].strip()
            found[name] = (int(code) if code.isdigit() else -1, "\n".join(lines).strip("\n"))
            name = None
        elif name is not None:
            lines.append(line)
    return found


def parse_telemetry_tail(text: str, source: str) -> StepTelemetry | None:
    """The last lines of a sampler file, through the comparison's own loader."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if not lines:
        return None
    columns = load_sampler_jsonl(("\n".join(lines) + "\n").encode(), source)
    return StepTelemetry(
        t=tuple(float(x) for x in columns.t),
        cpu_percent=tuple(float(x) for x in columns.tree_cpu_percent),
        rss_bytes=tuple(float(x) for x in columns.tree_rss_bytes),
        gpu_util_percent=tuple(float(x) for x in columns.gpu_utilization_percent),
        not_measured=columns.not_measured,
    )


def telemetry_tail(code: int, text: str, source: str) -> tuple[StepTelemetry | None, str]:
    """A `tail` of the sampler's file as the poll (or the monitor's endpoint) answered it: the
    readings, or why there are none (no file yet: the sampler has not started)."""
    if code != 0:
        return None, SAMPLER_NOT_STARTED if "No such file" in text or code == 404 else f"not read: {_first_line(text)}"
    parsed = parse_telemetry_tail(text, source)
    # Only the start record: the sampler runs but has not taken its first sample.
    return (parsed, "") if parsed is not None and parsed.t else (None, SAMPLER_EMPTY)


def read_log_tail(records: Sequence[object]) -> LogTail:
    """From the last records of BigGAN's `<experiment>_log.jsonl` (`itr`, `_stamp`): the rate
    between the last two, the last record's time and how many were read."""
    found = [
        (float(r["itr"]), float(r["_stamp"]))
        for r in records
        if isinstance(r, dict) and isinstance(r.get("itr"), int | float) and isinstance(r.get("_stamp"), int | float)
    ]
    if not found:
        return LogTail()
    stamp = found[-1][1]
    if len(found) < 2 or found[-1][1] <= found[-2][1]:
        return LogTail(None, stamp, len(found))
    (itr0, t0), (itr1, t1) = found[-2], found[-1]
    return LogTail((itr1 - itr0) / (t1 - t0), stamp, len(found))


def json_lines(text: str) -> list[object]:
    records: list[object] = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def iterations_per_second(log_tail: str) -> tuple[float | None, float | None]:
    """From the last two records of BigGAN's `<experiment>_log.jsonl` (`itr`, `_stamp`)."""
    tail = read_log_tail(json_lines(log_tail))
    return tail.iterations_per_s, tail.stamp


def _first_line(text: str) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line[:160] or "no answer"
