"""What the monitor reads of a Slurm cluster beside its jobs: the nodes' GPUs (`sinfo -N -O ...`)
and every user's jobs in the queue (`squeue -t all -o ...`). Pure: the sections of one poll's
script in, `HpcNode`s and `QueueJob`s out.
"""

from __future__ import annotations

import re
import shlex

from infra.hpc.scheduler import PREEMPTIBLE_QUEUES, QUEUE_SECTION, Sections, no_answer
from infra.job_records import HpcNode, QueueJob
from infra.timeparse import iso_utc

# The fields the local LSF command set's lsload asks sinfo for too, so the local Satori answers
# both schedulers' monitors alike.
SINFO_FORMAT = "NodeList:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:"
SQUEUE_QUEUE = "TZ=UTC squeue -h -t all -o '%i|%T|%V|%S|%e|%b|%P'"
GPU_COUNT = re.compile(r"gpu(?::[^:,()]+)?:(\d+)")
# The poll script's sections for the nodes and the queue: (name, command).
SECTIONS = (("sinfo", f"sinfo -N -h -O {shlex.quote(SINFO_FORMAT)}"), (QUEUE_SECTION, SQUEUE_QUEUE))


GPU_TYPE = re.compile(r"gpu:([^:,()]+):\d+")
# How a node's GPU types are named in a label ("mock GPUs (Slurm GRES type mock_v100)").
GPU_TYPE_SOURCE = "Slurm GRES type"


def count_gpus(gres: str) -> int:
    """`gpu:v100:4`, `gpu:v100:2(IDX:0-1)`, `gpu:4(S:0)`: the GPUs named, 0 for `(null)`."""
    return sum(int(m.group(1)) for m in GPU_COUNT.finditer(re.sub(r"\([^)]*\)", "", gres)))


def gpu_types(gres: str) -> tuple[str, ...]:
    """`gpu:v100:4,gpu:mock_v100:2(S:0)`: the GPU types named, in order (none for `gpu:4`)."""
    found = GPU_TYPE.findall(re.sub(r"\([^)]*\)", "", gres))
    return tuple(dict.fromkeys(found))


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
            gpu_types=gpu_types(gres),
            gpu_type_source=GPU_TYPE_SOURCE,
        )
    return list(nodes.values())


def _iso(text: str) -> float | None:
    try:
        return iso_utc(text) if text and text[:1].isdigit() else None
    except ValueError:
        return None


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


def read_nodes(sections: Sections) -> tuple[list[HpcNode], str]:
    code, text = sections.get("sinfo", (-1, ""))
    return (parse_sinfo_nodes(text), "") if code == 0 else ([], no_answer("sinfo", text))


def read_queue(sections: Sections) -> tuple[list[QueueJob], str]:
    code, text = sections.get(QUEUE_SECTION, (-1, ""))
    return (parse_squeue_queue(text), "") if code == 0 else ([], no_answer("squeue", text))
