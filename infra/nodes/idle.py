"""Under-used GPU nodes, judged by use where use is readable, with a suggestion for each node.

A node's GPUs fall into three groups:
- free: not allocated to any job or pod;
- allocated and idle: their utilisation (the sampler's NVML/nvidia-smi readings of the steps
  on the node, or the scheduler's own load index such as LSF's `lsload -gpu`) has stayed
  below `idle_percent` for longer than `idle_after_s` (a stalled loop that still holds its
  GPUs is the case requests alone never show);
- allocated, use unknown: nothing readable says how busy they are (KWOK's simulated nodes,
  Slurm without a sampler on the node); reported as such, never as idle.
Pure: takes the monitor's snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.hpc.target import PROVENANCE_NOT_STATED
from infra.monitor.model import IDLE_PERCENT, NodeView, Snapshot

__all__ = ["IDLE_AFTER_S", "IDLE_PERCENT", "NodeFinding", "find_underused", "judge_node", "summarize"]
IDLE_AFTER_S = 600.0


@dataclass(frozen=True)
class NodeFinding:
    environment: str
    node: str
    gpus_total: int
    gpus_allocated: int
    gpus_free: int
    gpus_idle: int  # allocated, below the threshold for longer than idle_after_s
    gpu_util_percent: float | None
    util_source: str
    idle_for_s: float | None
    underused: bool
    suggestion: str
    simulated: bool
    workloads: tuple[str, ...]
    site: str = ""
    provenance: str = PROVENANCE_NOT_STATED


def judge_node(
    environment: str,
    node: NodeView,
    now: float,
    workload: str,
    idle_percent: float = IDLE_PERCENT,
    idle_after_s: float = IDLE_AFTER_S,
) -> NodeFinding:
    free = node.gpus_free
    idle_for = now - node.idle_since if node.idle_since is not None else None
    idle = (
        node.gpus_allocated
        if node.gpus_allocated
        and node.gpu_util_percent is not None
        and node.gpu_util_percent < idle_percent
        and idle_for is not None
        and idle_for >= idle_after_s
        else 0
    )
    holders = ", ".join(node.workloads[:3]) + (" ..." if len(node.workloads) > 3 else "")
    parts = []
    if free and not node.gpus_allocated:
        parts.append(
            f"all {free} GPUs free: fill them with work that yields (`scripts/nodes --backfill {workload}`), "
            "or scale the node down"
        )
    elif free:
        parts.append(f"{free} of {node.gpus_total} GPUs free: room for {free} one-GPU backfill job(s)")
    if idle and idle_for is not None:
        parts.append(
            f"{idle} allocated GPU(s) below {idle_percent:g}% for {idle_for / 60:.0f} min ({holders}): "
            "look for a stalled job; its GPUs could go back to the queue"
        )
    elif node.gpus_allocated and node.gpu_util_percent is None:
        parts.append(f"{node.gpus_allocated} allocated GPU(s), use not readable ({node.util_source})")
    elif node.gpus_allocated and node.gpu_util_percent is not None and node.gpu_util_percent < idle_percent:
        since = f"{idle_for:.0f} s" if idle_for is not None else "this reading only"
        parts.append(
            f"{node.gpus_allocated} allocated GPU(s) at {node.gpu_util_percent:g}% ({since}, threshold "
            f"{idle_after_s / 60:g} min): watch"
        )
    if not parts:
        parts.append("busy: every GPU allocated and in use")
    return NodeFinding(
        environment=environment,
        node=node.name,
        gpus_total=node.gpus_total,
        gpus_allocated=node.gpus_allocated,
        gpus_free=free,
        gpus_idle=idle,
        gpu_util_percent=node.gpu_util_percent,
        util_source=node.util_source,
        idle_for_s=idle_for,
        underused=bool(free or idle),
        suggestion="; ".join(parts),
        simulated=node.simulated,
        workloads=node.workloads,
        site=node.site,
        provenance=node.provenance,
    )


def find_underused(
    snapshot: Snapshot, idle_percent: float = IDLE_PERCENT, idle_after_s: float = IDLE_AFTER_S
) -> list[NodeFinding]:
    """Every GPU node of every environment, judged (under-used ones first)."""
    findings: list[NodeFinding] = []
    for env in snapshot.environments:
        for node in env.nodes:
            if node.gpus_total <= 0:
                continue
            findings.append(
                judge_node(env.name, node, snapshot.taken_at, snapshot.workload, idle_percent, idle_after_s)
            )
    return sorted(findings, key=lambda f: (not f.underused, f.environment, f.node))


def summarize(findings: Sequence[NodeFinding]) -> dict[str, int]:
    """Totals over distinct nodes: two environments on one cluster (LSF and Slurm on one login
    node) see the same GPUs, which count once."""
    distinct = list({(f.site, f.node) if f.site else (f.environment, f.node): f for f in findings}.values())
    return {
        "nodes": len(distinct),
        "underused_nodes": sum(f.underused for f in distinct),
        "free_gpus": sum(f.gpus_free for f in distinct),
        "idle_gpus": sum(f.gpus_idle for f in distinct),
    }
