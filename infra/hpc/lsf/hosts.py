"""What the monitor reads of an LSF cluster beside its jobs: the hosts' GPUs (`lsload -gpu`,
`lsload -gpuload`, `bhosts -w`) and every user's jobs in the queue (`bjobs -u all`). Pure: the
sections of one poll's script in, `HpcNode`s and `QueueJob`s out.
"""

from __future__ import annotations

from typing import Any

from infra.hpc.lsf.jobs import lsf_short
from infra.hpc.scheduler import PREEMPTIBLE_QUEUES, QUEUE_SECTION, Sections, no_answer
from infra.job_records import HpcNode, QueueJob

BJOBS_QUEUE = "TZ=UTC bjobs -u all -a -hms -noheader -o \"jobid stat submit_time start_time queue delimiter='^'\""
# How a host's GPU models are named in a label ("mock GPUs (LSF gpu_model Mock_TeslaV100_SXM2_32GB)").
GPU_TYPE_SOURCE = "LSF gpu_model"
# The poll script's sections for the hosts and the queue: (name, command).
SECTIONS = (
    ("lsload-gpu", "lsload -gpu"),
    ("lsload-gpuload", "lsload -gpuload"),
    ("bhosts", "bhosts -w"),
    (QUEUE_SECTION, BJOBS_QUEUE),
)


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
        hosts[cols[0]] = {"state": cols[1], "gpus": int(cols[2]), "ut": _percent(cols[4]), "busy": 0, "models": {}}
    current = ""
    lines = gpuload_text.splitlines()
    header = lines[0].split() if lines else []
    status_col = header.index("gpu_status") if "gpu_status" in header else None
    model_col = header.index("gpu_model") if "gpu_model" in header else None
    for line in lines[1:]:
        cols = line.split()
        if not cols:
            continue
        if not cols[0].isdigit():  # a row that starts with the host's name
            current, cols = cols[0], cols[1:]
        if current not in hosts:
            continue
        # The columns after HOST_NAME; a GPU whose status says busy is held by a job.
        if status_col is not None and len(cols) >= status_col and cols[status_col - 1] == "busy":
            hosts[current]["busy"] += 1
        if model_col is not None and len(cols) >= model_col:
            hosts[current]["models"][cols[model_col - 1]] = True
    return [
        HpcNode(
            name=name,
            state=info["state"],
            gpus_total=info["gpus"],
            gpus_allocated=info["busy"],
            gpu_util_percent=info["ut"],
            util_source="lsload -gpu (gpu_shared_avg_ut)",
            gpu_types=tuple(info["models"]),
            gpu_type_source=GPU_TYPE_SOURCE,
        )
        for name, info in hosts.items()
    ]


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


def read_hosts(sections: Sections) -> tuple[list[HpcNode], str]:
    gpu_code, gpu_text = sections.get("lsload-gpu", (-1, ""))
    load_code, load_text = sections.get("lsload-gpuload", (-1, ""))
    if gpu_code == 0 and load_code == 0:
        return parse_lsload_gpu(gpu_text, load_text), ""
    return [], no_answer("lsload -gpu", gpu_text)


def read_queue(sections: Sections, year: int) -> tuple[list[QueueJob], str]:
    code, text = sections.get(QUEUE_SECTION, (-1, ""))
    # bjobs says "No job found" (exit 0 or 255) on an empty queue: that is an answer.
    if code == 0 or "No job found" in text or "No unfinished job found" in text:
        return parse_bjobs_queue(text, year), ""
    return [], no_answer("bjobs", text)
