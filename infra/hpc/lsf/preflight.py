"""What `atlas doctor` asks LSF before the first `pulumi up`, and how it reads the answers: the
queues (`bqueues -w`) and the hosts' GPUs (`lsload -gpu`). Pure: answers in, findings out.

LSF has no dry run of a submission (bsub either queues a job or refuses it), so the GPU request
is judged against what the hosts offer: every GPU step's GPUs per node on as many hosts as it asks
for, each host available. Formats are IBM Spectrum LSF 10.1's documented ones (bqueues: QUEUE_NAME
PRIO STATUS ..., STATUS one of Open:Active, Open:Inact, Closed:Active, Closed:Inact; an unknown
queue is `<queue>: No such queue`; lsload -gpu: HOST_NAME status ngpus ...), which the local
stand-in (localenv/lsf) prints too. Which hosts a queue dispatches to (`bqueues -l`'s HOSTS) is
not read: every host counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from infra.doctor import Finding
from infra.hpc.lsf.hosts import parse_lsload_gpu
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import JobSpec, StepRequest

QUEUES_QUERY = "bqueues -w"
GPU_HOSTS_QUERY = "lsload -gpu"
MAX_LISTED = 12
# lsload's host statuses of a host that runs no job now.
UNAVAILABLE = ("unavail", "unlicensed")


def queues(stdout: str) -> dict[str, str]:
    """`bqueues -w`: each queue's STATUS (Open:Active, Closed:Inact, ...)."""
    found = {}
    lines = stdout.splitlines()
    header = lines[0].split() if lines else []
    status_at = header.index("STATUS") if "STATUS" in header else 2
    for line in lines[1:]:
        cols = line.split()
        if len(cols) > status_at:
            found[cols[0]] = cols[status_at]
    return found


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def judge_queue(queue: str | None, key: str, result: RemoteResult) -> Finding:
    """The target's queue exists and is open (None: the cluster's default queue)."""
    found = queues(result.stdout) if result.exit_code == 0 else {}
    if not found:
        said = (result.stderr or result.stdout).strip().splitlines()
        return Finding.fail(
            f"`{QUEUES_QUERY}` listed no queue (exit {result.exit_code}: {said[-1] if said else 'no output'})",
            "check that LSF answers from the login node (`bqueues`), or ask the site",
        )
    names = sorted(found)
    if queue is None:
        return Finding.ok(f"no queue named: LSF's default queue (DEFAULT_QUEUE); bqueues lists {_listing(names)}")
    if queue not in found:
        return Finding.fail(
            f"queue {queue!r} does not exist (bqueues lists {_listing(names)})", f"set {key}.queue to one of them"
        )
    status = found[queue]
    if status.startswith("Closed"):
        open_ones = [n for n in names if found[n].startswith("Open")]
        return Finding.fail(
            f"queue {queue!r} is {status}: it takes no jobs now",
            f"choose an open queue for {key}.queue ({_listing(open_ones) or 'none is open'}), or ask the site",
        )
    note = " (Inact: it takes jobs but dispatches none now: a run window, or the site's choice)"
    if "Inact" not in status:
        note = ""
    return Finding.ok(f"queue {queue!r} is {status}{note}")


def gpu_steps(steps: Sequence[StepRequest]) -> list[JobSpec]:
    return [s.spec for s in steps if s.spec.gpus_per_node > 0]


def judge_gpu_hosts(specs: Sequence[JobSpec], key: str, environment: str, result: RemoteResult) -> Finding:
    """`lsload -gpu`: some available hosts offer each GPU step's GPUs per node, as many hosts as it
    asks for nodes."""
    if result.exit_code != 0:
        said = (result.stderr or result.stdout).strip().splitlines()
        return Finding.fail(
            f"`{GPU_HOSTS_QUERY}` exited {result.exit_code}: {said[-1] if said else 'no output'}",
            "check that the cluster's LSF reports GPUs (LSF_GPU_AUTOCONFIG=Y in lsf.conf), or ask the site",
        )
    hosts = [h for h in parse_lsload_gpu(result.stdout, "") if h.state not in UNAVAILABLE]
    most = max((h.gpus_total for h in hosts), default=0)
    for spec in sorted(specs, key=lambda s: (s.gpus_per_node, s.nodes), reverse=True):
        offering = [h.name for h in hosts if h.gpus_total >= spec.gpus_per_node]
        if len(offering) < spec.nodes:
            where = (
                f"{len(offering)} host(s) offer {spec.gpus_per_node} GPUs ({_listing(offering)})"
                if offering
                else f"no available host offers {spec.gpus_per_node} GPUs (the most: {most}, of {len(hosts)} host(s))"
            )
            return Finding.fail(
                f"step {spec.step} asks for {spec.nodes} node(s) x {spec.gpus_per_node} GPUs: {where} (lsload -gpu)",
                f"lower it (overrides.{environment}.{spec.step}.resources in the workload definition), or run on a "
                f"cluster or queue whose hosts have them ({key})",
            )
    largest = max(specs, key=lambda s: (s.gpus_per_node, s.nodes))
    offering = [h.name for h in hosts if h.gpus_total >= largest.gpus_per_node]
    return Finding.ok(
        f"step {largest.step} asks for {largest.nodes} node(s) x {largest.gpus_per_node} GPUs: "
        f"{len(offering)} available host(s) offer that many ({_listing(offering)}; lsload -gpu)"
    )
