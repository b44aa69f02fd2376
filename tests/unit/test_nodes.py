"""infra.nodes: under-used GPU nodes judged by use, and queue-wait estimates, on hand-made inputs
whose answers are worked out by hand in each test."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from infra.monitor.estimate import JobShape, RunningJob, estimate_wait, shape_of_workload
from infra.monitor.hpc_view import _idle_since
from infra.monitor.model import EnvironmentView, NodeView, Snapshot, StepTelemetry
from infra.nodes.idle import find_underused, judge_node, summarize
from infra.nodes.render import environment_label, estimates_record
from infra.outputs import HpcOutputs, KubernetesOutputs, read_environment
from infra.workload.load import load_workload

NOW = 10_000.0
REPO = Path(__file__).resolve().parents[2]


def node(
    name: str,
    total: int,
    allocated: int,
    util: float | None = None,
    idle_since: float | None = None,
    state: str = "idle",
) -> NodeView:
    return NodeView(
        name,
        state,
        total,
        allocated,
        util,
        "test" if util is not None else "not readable here",
        idle_since=idle_since,
        workloads=("job 7 (train)",) if allocated else (),
    )


# --- idle -----------------------------------------------------------------------------------------


def test_free_gpus_are_under_used_with_a_backfill_suggestion() -> None:
    finding = judge_node("satori-slurm", node("vm", 4, 1, util=80.0), NOW, "probe")
    assert (finding.gpus_free, finding.gpus_idle, finding.underused) == (3, 0, True)
    assert "3 of 4 GPUs free" in finding.suggestion
    empty = judge_node("openshift", node("kwok-gpu-0", 4, 0), NOW, "probe")
    assert "scripts/nodes --backfill probe" in empty.suggestion


def test_allocated_gpus_count_as_idle_only_below_the_threshold_for_longer_than_the_window() -> None:
    long_idle = judge_node(
        "satori", node("vm", 4, 4, util=1.0, idle_since=NOW - 900), NOW, "probe", idle_percent=5, idle_after_s=600
    )
    assert (long_idle.gpus_idle, long_idle.underused) == (4, True)
    assert "below 5% for 15 min" in long_idle.suggestion and "job 7 (train)" in long_idle.suggestion
    recent = judge_node(
        "satori", node("vm", 4, 4, util=1.0, idle_since=NOW - 60), NOW, "probe", idle_percent=5, idle_after_s=600
    )
    assert (recent.gpus_idle, recent.underused) == (0, False) and "watch" in recent.suggestion
    busy = judge_node("satori", node("vm", 4, 4, util=93.0), NOW, "probe")
    assert not busy.underused and busy.suggestion.startswith("busy")


def test_allocation_without_readable_use_is_reported_as_unknown_never_as_idle() -> None:
    finding = judge_node("openshift", node("kwok-gpu-1", 4, 4, util=None), NOW, "probe")
    assert (finding.gpus_idle, finding.underused) == (0, False)
    assert "use not readable" in finding.suggestion


def test_idle_since_comes_from_the_last_busy_sample() -> None:
    series = StepTelemetry(
        t=(0.0, 5.0, 10.0, 15.0),
        cpu_percent=(1, 1, 1, 1),
        rss_bytes=(1, 1, 1, 1),
        gpu_util_percent=(90.0, 40.0, 2.0, 1.0),
        not_measured=(),
    )
    assert _idle_since([series], 5.0) == 10.0
    busy_now = StepTelemetry((0.0, 5.0), (1, 1), (1, 1), (2.0, 80.0), ())
    assert _idle_since([busy_now], 5.0) is None
    never = StepTelemetry((0.0, 5.0), (1, 1), (1, 1), (math.nan, math.nan), ())
    assert _idle_since([never], 5.0) is None


def test_find_underused_lists_every_gpu_node_under_used_first_with_totals() -> None:
    env_a = EnvironmentView(
        "openshift", "kubernetes", "", (), (node("g0", 4, 4), node("g1", 4, 0), node("cpu", 0, 0)), NOW, ""
    )
    env_b = EnvironmentView(
        "satori-slurm", "hpc", "", (), (node("vm", 4, 4, util=0.0, idle_since=NOW - 3600),), NOW, ""
    )
    snapshot = Snapshot(NOW, "local", "probe", "1", 30.0, (env_a, env_b))
    findings = find_underused(snapshot, 5, 600)
    assert [f.node for f in findings] == ["g1", "vm", "g0"]  # cpu-only nodes are not GPU nodes
    assert summarize(findings) == {"nodes": 3, "underused_nodes": 2, "free_gpus": 4, "idle_gpus": 4}


# --- estimates ------------------------------------------------------------------------------------


SHAPE = JobShape("probe", 1)


def test_free_gpus_and_nothing_ahead_give_the_scheduler_s_own_pace() -> None:
    estimate = estimate_wait("satori-slurm", SHAPE, [node("vm", 4, 1)], [], [], [2.0, 4.0, 30.0], NOW)
    assert estimate.seconds == 4.0 and "median of 3 recent waits" in estimate.basis
    assert estimate_wait("x", SHAPE, [node("vm", 4, 1)], [], [], [], NOW).seconds == 0.0


def test_a_full_cluster_waits_for_running_jobs_to_reach_their_limits() -> None:
    running = [RunningJob(NOW + 600, 2), RunningJob(NOW + 120, 1), RunningJob(None, 1)]
    # One pending job asks 1 GPU; ours asks 1: two GPUs must free up. The 120 s job frees 1, the
    # 600 s job 2 more: enough once both ended, 600 s from now (+ the median wait of 10 s).
    estimate = estimate_wait("satori-slurm", SHAPE, [node("vm", 4, 4)], [1], running, [10.0], NOW)
    assert estimate.seconds == 610.0 and "2 running job(s)" in estimate.basis
    assert (estimate.free_gpus, estimate.pending_ahead) == (0, 1)


def test_gpus_held_by_backfill_that_yields_count_as_free() -> None:
    running = [RunningJob(NOW + 1800, 3, preemptible=True), RunningJob(NOW + 600, 1)]
    estimate = estimate_wait("satori-slurm", SHAPE, [node("vm", 4, 4)], [], running, [2.0], NOW)
    assert estimate.seconds == 2.0 and "backfill that yields" in estimate.basis and estimate.free_gpus == 3


def test_without_limits_the_recent_waits_decide_and_without_those_it_says_so() -> None:
    full = [node("vm", 4, 4)]
    assert estimate_wait("x", SHAPE, full, [None], [RunningJob(None, 4)], [50.0, 70.0], NOW).seconds == 60.0
    unknown = estimate_wait("x", SHAPE, full, [], [RunningJob(None, 4)], [], NOW)
    assert unknown.seconds is None and "neither time limits nor recent waits" in unknown.basis


def test_a_job_larger_than_any_node_never_starts() -> None:
    estimate = estimate_wait("x", JobShape("biggan", 8), [node("vm", 4, 0)], [], [], [], NOW)
    assert estimate.seconds is None and "no node here has 8 GPUs" in estimate.basis


def test_the_workload_shape_is_its_largest_gpu_step() -> None:
    shape = shape_of_workload(load_workload(REPO / "workloads" / "probe" / "workload.yaml"))
    assert (shape.workload, shape.gpus, shape.cpus, shape.memory_mib) == ("probe", 1, 1, 2048)


def test_the_estimate_record_keeps_each_environment_s_estimate_and_when_it_was_made() -> None:
    estimate = estimate_wait("satori-slurm", SHAPE, [node("vm", 4, 0)], [], [], [], NOW)
    env = EnvironmentView("satori-slurm", "hpc", "", (), (), NOW, "", estimate=estimate)
    record = estimates_record(Snapshot(NOW, "local", "probe", "1", 30.0, (env,)))
    assert record["taken_at"] == NOW and record["environments"]["satori-slurm"]["seconds"] == 0.0


@pytest.mark.parametrize(
    "bad", [["--interval", "0.1"], ["--idle-percent", "150"], ["--slots", "0", "--backfill", "probe"], ["--slots", "2"]]
)
def test_bad_flags_are_refused_naming_the_flag(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from infra.cli.nodes import main

    assert main(["--outputs", "/nonexistent", *bad]) == 2
    flag = next(b for b in bad if b.startswith("--") and b != "--backfill")
    assert flag in capsys.readouterr().err


def test_before_the_first_up_the_stack_file_names_the_environments() -> None:
    from infra.cli.nodes import outputs_from_stack_file

    outputs = outputs_from_stack_file(REPO / "stacks" / "Pulumi.local.yaml", "local")
    envs = outputs.environments
    openshift, satori, slurm = envs["openshift"], envs["satori"], envs["satori-slurm"]
    assert isinstance(openshift, KubernetesOutputs) and openshift.namespace == "atlas-local"
    assert isinstance(satori, HpcOutputs) and isinstance(slurm, HpcOutputs)
    assert (satori.scheduler, slurm.scheduler) == ("lsf", "slurm")
    assert all(e.steps == () for e in envs.values())  # type: ignore[attr-defined]
    assert outputs.run.workload == "probe"


def test_two_environments_on_one_login_node_count_its_gpus_once() -> None:
    shared = NodeView("vm", "idle", 4, 1, None, "", site="127.0.0.1:22")
    lsf = EnvironmentView("satori", "hpc", "", (), (shared,), NOW, "")
    slurm = EnvironmentView("satori-slurm", "hpc", "", (), (shared,), NOW, "")
    findings = find_underused(Snapshot(NOW, "local", "probe", "1", 30.0, (lsf, slurm)))
    assert len(findings) == 2  # each environment judges the node
    assert summarize(findings) == {"nodes": 1, "underused_nodes": 1, "free_gpus": 3, "idle_gpus": 0}


# --- provenance ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provenance", "label"),
    [
        ("real", "satori (real)"),
        ("simulated node", "satori (simulated node)"),
        (
            "local stand-in: LSF commands on Slurm, mock GPUs, CPU run",
            "satori (local stand-in: LSF commands on Slurm, mock GPUs, CPU run)",
        ),
        ("provenance not stated", "satori (provenance not stated)"),
    ],
)
def test_every_environment_says_what_it_is_real_included(provenance: str, label: str) -> None:
    finding = judge_node("satori", dataclasses.replace(node("vm", 4, 0), provenance=provenance), NOW, "probe")
    assert environment_label(finding) == label


def test_a_node_view_is_never_real_by_default() -> None:
    assert node("vm", 4, 0).provenance == "provenance not stated"
    recorded = json.loads((REPO / "tests/unit/data/compare/stack_outputs.json").read_text())["environments"]["satori"]
    unstated = {k: v for k, v in recorded.items() if k != "provenance"}
    assert read_environment(HpcOutputs, unstated, "satori").provenance == "provenance not stated"
    assert read_environment(HpcOutputs, {**unstated, "provenance": ""}, "satori").provenance == "provenance not stated"
    assert read_environment(HpcOutputs, {**unstated, "provenance": "real"}, "satori").provenance == "real"
