"""How the monitor reads an HPC scheduler: the commands of one poll and the pure parsers of their answers.

One poll asks two things (infra.monitor.hpc sends them): every step's status in one query, and
one script (`sections_script`) whose marked sections hold the nodes' GPUs, the queue and the
tails of the running steps' telemetry and training log. What differs between the schedulers is
data: `SchedulerReads`, one per scheduler class of infra.hpc.registry.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.compare.hpc_records import BJOBS_QUERY, SQUEUE_QUERY, lsf_steps, slurm_steps
from infra.compare.records import StepRecord
from infra.compare.telemetry import load_sampler_jsonl
from infra.timeparse import iso_utc, lsf_short
from infra.hpc.lsf import LsfScheduler
from infra.hpc.registry import scheduler_class
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import Scheduler
from infra.hpc.slurm import SlurmScheduler
from infra.monitor.model import HpcNode, QueueJob, StepTelemetry

SECTION = "@@atlas-section"
EXIT = "@@atlas-exit"
SINFO_FORMAT = "NodeList:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:"
GPU_COUNT = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")
TELEMETRY_LINES = 3
SQUEUE_QUEUE = "TZ=UTC squeue -h -t all -o '%i|%T|%V|%S|%e|%b|%P'"
BJOBS_QUEUE = "TZ=UTC bjobs -u all -a -hms -noheader -o \"jobid stat submit_time start_time queue delimiter='^'\""
# Where backfill that yields runs (infra/nodes/backfill.py): its jobs give way to any real job.
PREEMPTIBLE_QUEUES = frozenset({"backfill"})


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


def count_gpus(gres: str) -> int:
    """`gpu:v100:4`, `gpu:v100:2(IDX:0-1)`, `gpu:4(S:0)`: the GPUs named, 0 for `(null)`."""
    return sum(int(m.group(1)) for m in GPU_COUNT.finditer(re.sub(r"\([^)]*\)", "", gres)))


def parse_sinfo_nodes(text: str) -> list[HpcNode]:
    """`sinfo -N -h -O NodeList:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:` (a node once per partition)."""
    nodes: dict[str, HpcNode] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 5 or not parts[0]:
            continue
        name, state, cpus, gres, used = parts[:5]
        nodes[name] = HpcNode(
            name=name,
            state=state,
            gpus_total=count_gpus(gres),
            gpus_allocated=count_gpus(used),
            gpu_util_percent=None,
            util_source="not readable from Slurm (it reports allocation, not use)",
            cpus=cpus,
        )
    return list(nodes.values())


def _percent(text: str) -> float | None:
    text = text.strip().rstrip("%")
    try:
        return float(text)
    except ValueError:
        return None


def parse_lsload_gpu(gpu_text: str, gpuload_text: str) -> list[HpcNode]:
    """`lsload -gpu` (per host: ngpus, gpu_shared_avg_ut) and `lsload -gpuload` (per GPU; the
    host name is printed on a host's first GPU only). A GPU whose gpu_status is `busy` is
    counted as allocated to a job."""
    hosts: dict[str, dict[str, Any]] = {}
    for line in gpu_text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 5 or not cols[2].isdigit():
            continue
        hosts[cols[0]] = {"state": cols[1], "gpus": int(cols[2]), "ut": _percent(cols[4]), "busy": 0}
    current = ""
    lines = gpuload_text.splitlines()
    header = lines[0].split() if lines else []
    status_col = header.index("gpu_status") if "gpu_status" in header else None
    for line in lines[1:]:
        cols = line.split()
        if not cols:
            continue
        if not cols[0].isdigit():  # a row that starts with the host's name
            current, cols = cols[0], cols[1:]
        # The columns after HOST_NAME; a GPU whose status says busy is held by a job.
        if status_col is not None and current in hosts and len(cols) >= status_col and cols[status_col - 1] == "busy":
            hosts[current]["busy"] += 1
    return [
        HpcNode(
            name=name,
            state=info["state"],
            gpus_total=info["gpus"],
            gpus_allocated=info["busy"],
            gpu_util_percent=info["ut"],
            util_source="lsload -gpu (gpu_shared_avg_ut)",
        )
        for name, info in hosts.items()
    ]


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


def iterations_per_second(log_tail: str) -> tuple[float | None, float | None]:
    """From the last two records of BigGAN's `<experiment>_log.jsonl` (`itr`, `_stamp`)."""
    records = []
    for line in log_tail.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "itr" in record and "_stamp" in record:
            records.append((float(record["itr"]), float(record["_stamp"])))
    if not records:
        return None, None
    if len(records) < 2 or records[-1][1] <= records[-2][1]:
        return None, records[-1][1]
    (itr0, t0), (itr1, t1) = records[-2], records[-1]
    return (itr1 - itr0) / (t1 - t0), t1


def parse_squeue_queue(text: str) -> list[QueueJob]:
    """`TZ=UTC squeue -h -t all -o '%i|%T|%V|%S|%e|%b|%P'`."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 7 or not parts[0].isdigit():
            continue
        job_id, state, submitted, started, ends, tres, partition = parts
        phase = (
            "pending"
            if state == "PENDING"
            else "running"
            if state in ("RUNNING", "COMPLETING", "CONFIGURING")
            else "finished"
        )
        # A job cancelled while pending shows its cancel time as start and end: it never started.
        never_started = state.startswith("CANCELLED") and started == ends
        jobs.append(
            QueueJob(
                job_id,
                phase,
                _iso(submitted),
                _iso(started) if phase != "pending" and not never_started else None,
                _iso(ends) if phase == "running" else None,
                count_gpus(tres) if tres not in ("N/A", "(null)", "") else 0,
                partition in PREEMPTIBLE_QUEUES,
            )
        )
    return jobs


def parse_bjobs_queue(text: str, year: int) -> list[QueueJob]:
    """`TZ=UTC bjobs -u all -a -hms -noheader -o "jobid stat submit_time start_time queue delimiter='^'"`."""
    jobs = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("^")]
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        job_id, stat, submitted, started, queue = parts
        phase = "pending" if stat in ("PEND", "PSUSP", "WAIT") else "running" if stat == "RUN" else "finished"
        jobs.append(
            QueueJob(
                job_id,
                phase,
                lsf_short(submitted if submitted != "-" else None, year),
                lsf_short(started if started != "-" else None, year),
                None,
                None,
                queue in PREEMPTIBLE_QUEUES,
            )
        )
    return jobs


def _iso(text: str) -> float | None:
    try:
        return iso_utc(text) if text and text[:1].isdigit() else None
    except ValueError:
        return None


Sections = Mapping[str, tuple[int, str]]


@dataclass(frozen=True)
class SchedulerReads:
    """What the monitor asks one scheduler and how it reads the answers.

    `read_steps` raises RuntimeError when the status query did not answer; `read_nodes` and
    `read_queue` return what they read and an error note (empty when they read an answer).
    """

    status_command: Callable[[Sequence[str]], str]
    read_steps: Callable[[Mapping[str, Any], RemoteResult, str], tuple[StepRecord, ...]]
    node_sections: tuple[tuple[str, str], ...]  # the nodes' and the queue's sections of the poll script
    read_nodes: Callable[[Sections], tuple[list[HpcNode], str]]
    read_queue: Callable[[Sections, int], tuple[list[QueueJob], str]]  # the year: bjobs prints none


def _no_answer(tool: str, text: str) -> str:
    return f"{tool}: {text.strip()[:300] or 'no answer'}"


def _status_failed(command: str, status: RemoteResult) -> RuntimeError:
    return RuntimeError(f"`{command}` exited {status.exit_code}: {status.stderr.strip()[:500]}")


def _lsf_steps(outputs: Mapping[str, Any], status: RemoteResult, command: str) -> tuple[StepRecord, ...]:
    if not status.stdout.strip().startswith("{"):
        raise _status_failed(command, status)
    return lsf_steps(outputs, status, None, {})


def _slurm_steps(outputs: Mapping[str, Any], status: RemoteResult, command: str) -> tuple[StepRecord, ...]:
    if status.exit_code != 0 and "Invalid job id" not in status.stderr:
        raise _status_failed(command, status)
    return slurm_steps(outputs, status, None, {})


def _lsf_nodes(sections: Sections) -> tuple[list[HpcNode], str]:
    gpu_code, gpu_text = sections.get("lsload-gpu", (-1, ""))
    load_code, load_text = sections.get("lsload-gpuload", (-1, ""))
    if gpu_code == 0 and load_code == 0:
        return parse_lsload_gpu(gpu_text, load_text), ""
    return [], _no_answer("lsload -gpu", gpu_text)


def _slurm_nodes(sections: Sections) -> tuple[list[HpcNode], str]:
    code, text = sections.get("sinfo", (-1, ""))
    return (parse_sinfo_nodes(text), "") if code == 0 else ([], _no_answer("sinfo", text))


def _lsf_queue(sections: Sections, year: int) -> tuple[list[QueueJob], str]:
    code, text = sections.get("queue", (-1, ""))
    # bjobs says "No job found" (exit 0 or 255) on an empty queue: that is an answer.
    if code == 0 or "No job found" in text or "No unfinished job found" in text:
        return parse_bjobs_queue(text, year), ""
    return [], _no_answer("bjobs", text)


def _slurm_queue(sections: Sections, year: int) -> tuple[list[QueueJob], str]:
    code, text = sections.get("queue", (-1, ""))
    return (parse_squeue_queue(text), "") if code == 0 else ([], _no_answer("squeue", text))


# One entry per scheduler class of infra.hpc.registry (a unit test checks none is missing).
SCHEDULER_READS: dict[type[Scheduler], SchedulerReads] = {
    LsfScheduler: SchedulerReads(
        status_command=lambda ids: f"{BJOBS_QUERY} {shlex.join(ids)}",
        read_steps=_lsf_steps,
        node_sections=(
            ("lsload-gpu", "lsload -gpu"),
            ("lsload-gpuload", "lsload -gpuload"),
            ("bhosts", "bhosts -w"),
            ("queue", BJOBS_QUEUE),
        ),
        read_nodes=_lsf_nodes,
        read_queue=_lsf_queue,
    ),
    SlurmScheduler: SchedulerReads(
        status_command=lambda ids: f"{SQUEUE_QUERY} {','.join(ids)}",
        read_steps=_slurm_steps,
        node_sections=(("sinfo", f"sinfo -N -h -O {shlex.quote(SINFO_FORMAT)}"), ("queue", SQUEUE_QUEUE)),
        read_nodes=_slurm_nodes,
        read_queue=_slurm_queue,
    ),
}


def reads_for(scheduler: str) -> SchedulerReads:
    """The monitor's reads of a `scheduler` output value; UnknownSchedulerError for a name
    infra.hpc.registry does not list."""
    cls = scheduler_class(scheduler)
    reads = SCHEDULER_READS.get(cls)
    if reads is None:
        raise RuntimeError(f"the monitor has no reads for {cls.label}; add them to SCHEDULER_READS")
    return reads
