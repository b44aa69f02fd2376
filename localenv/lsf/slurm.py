"""What the LSF commands ask Slurm: sbatch, squeue --json, scancel and sinfo runs, the queues, the jobs.

The one module of the command set that runs Slurm's commands (`run_slurm`); the LSF syntax and
formats it reads jobs with live in job_views.py. Stdlib only: it runs on the login node.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import socket
import subprocess
from dataclasses import dataclass
from typing import Any

from .errors import LsfError
from .job_views import LsfJob, expand_pending_array, lsf_job_from_slurm

SLURM_TIMEOUT_S = 30


def run_slurm(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if not os.environ.get("SLURM_CONF"):
        raise LsfError(
            "LSF is not configured for this session: SLURM_CONF is unset. Log in through the "
            "local Satori's sshd (it sets SLURM_CONF), or export SLURM_CONF=<satori_dir>/slurm.conf."
        )
    try:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LsfError(f"Cannot connect to LSF. Please wait ... ({argv[0]}: {exc})") from exc


def host_name() -> str:
    return socket.gethostname().split(".")[0]


def user_name() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


# --- Slurm facts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queue:
    name: str
    cpus_per_node: int
    gpus_per_node: int
    nodes: int
    default: bool
    up: bool


def queues() -> dict[str, Queue]:
    result = run_slurm(["sinfo", "-h", "-o", "%P|%c|%G|%D|%a"])
    if result.returncode != 0:
        raise LsfError(f"Cannot connect to LSF. Please wait ... (sinfo: {result.stderr.strip()})")
    queues: dict[str, Queue] = {}
    for line in result.stdout.splitlines():
        part, cpus, gres, nodes, avail = line.split("|")
        default = part.endswith("*")
        name = part.rstrip("*")
        gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))
        queues[name] = Queue(
            name, int(re.sub(r"\D", "", cpus) or 0), gpus, int(nodes or 0), default, avail == "up"
        )
    return queues


def slurm_records() -> list[dict[str, Any]]:
    result = run_slurm(["squeue", "--json", "-t", "all"])
    if result.returncode != 0:
        raise LsfError(f"Cannot connect to LSF. Please wait ... (squeue: {result.stderr.strip()})")
    document = json.loads(result.stdout)
    if document.get("errors") and not document.get("jobs"):
        # Slurm 22.05's squeue --json exits 0 with an "errors" list when slurmctld is down.
        detail = "; ".join(str(e.get("error") or e.get("description")) for e in document["errors"])
        raise LsfError(f"Cannot connect to LSF. Please wait ... (squeue: {detail})")
    return list(document.get("jobs", []))


def lsf_jobs(all_users: bool = False) -> list[tuple[LsfJob, dict[str, Any]]]:
    host, user = host_name(), user_name()
    jobs: list[tuple[LsfJob, dict[str, Any]]] = []
    for rec in slurm_records():
        if not all_users and rec.get("user_name") != user:
            continue
        job = lsf_job_from_slurm(rec, host)
        jobs.extend((j, rec) for j in expand_pending_array(job, rec))
    jobs.sort(key=lambda jr: (int(jr[0].jobid), jr[0].index))
    return jobs


def select_jobs(jobs: list[tuple[LsfJob, dict[str, Any]]], wanted: str) -> list[LsfJob]:
    """Jobs matching an LSF id: `12` (all elements of array 12) or `12[3]`."""
    m = re.fullmatch(r"(\d+)(?:\[(\d+)\])?", wanted.strip())
    if not m:
        return []
    return [
        j for j, _ in jobs if j.jobid == m.group(1) and (m.group(2) is None or j.index == int(m.group(2)))
    ]



def listed_by_default(jobs: list[tuple[LsfJob, dict[str, Any]]], flags: set[str]) -> list[LsfJob]:
    """What bjobs and bhist show when no job is named: unfinished jobs, finished ones with -d, all with -a."""
    if "-d" in flags:
        return [j for j, _ in jobs if j.finished]
    if "-a" in flags:
        return [j for j, _ in jobs]
    return [j for j, _ in jobs if not j.finished]


def node_usage() -> list[dict[str, str]]:
    result = run_slurm(["sinfo", "-h", "-N", "-O", "NodeList:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:"])
    if result.returncode != 0:
        raise LsfError(f"Cannot connect to LSF. Please wait ... (sinfo: {result.stderr.strip()})")
    nodes: dict[str, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 5:
            nodes[parts[0]] = {
                "name": parts[0],
                "state": parts[1],
                "cpus": parts[2],
                "gres": parts[3],
                "gres_used": parts[4],
            }
    return list(nodes.values())


def count_gpus(gres: str) -> int:
    return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,()]+)?:(\d+)", gres))


# The model LSF would print for the local Satori's V100s; a GRES type named mock (the local
# Slurm's `gpu:mock_v100`) keeps its word in front, so `lsload -gpuload` says the GPUs are mock
# as `sinfo` does (Atlas reads either: infra/provenance.py).
V100_MODEL = "TeslaV100_SXM2_32GB"


def gpu_model(gres: str) -> str:
    types = re.findall(r"gpu:([^:,()]+):\d+", gres)
    return f"Mock_{V100_MODEL}" if types and types[0].lower().startswith("mock") else V100_MODEL
