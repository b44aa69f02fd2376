"""infra.monitor: parsers on recorded and hand-written scheduler output, the poll interval under a
fake clock, the Kubernetes watch cache, and the three renderings of one snapshot.

The Kubernetes inputs are the comparison's recorded API documents (tests/unit/data/compare/),
so the monitor's step view is checked against the same Jobs and pods the report reads.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult
from infra.kinds import read_stack_outputs
from infra.monitor.build import Monitor
from infra.monitor.estimate import JobShape
from infra.monitor.hpc import HpcSource
from infra.monitor.hpc_reads import (
    iterations_per_second,
    parse_sections,
    parse_telemetry_tail,
    sections_script,
)
from infra.monitor.hpc_view import HpcEnvironmentSource
from infra.monitor.kube import GoneError, KubeCache
from infra.monitor.kube_view import KubeSource
from infra.monitor.reasons import SIMULATED
from infra.monitor.render import html_page, terminal_view, to_dict, to_json
from infra.outputs import HpcOutputs, KubernetesOutputs, read_environment
from infra.timeparse import rfc3339
from tests.support import hpc_outputs

REC = Path(__file__).parent / "data" / "compare"
# The Slurm side's status query, less its job ids (the scheduler's record query, as the report asks).
SQUEUE_QUERY = scheduler_for("slurm").record_query(["1"]).removesuffix(" 1")
OUTPUTS = json.loads((REC / "stack_outputs.json").read_text())
NAMESPACE = OUTPUTS["environments"]["openshift"]["namespace"]


def utc(text: str) -> float:
    value = rfc3339(text)
    assert value is not None
    return value


# --- sections: one SSH command, several answers --------------------------------------------------


def test_sections_script_runs_in_bash_and_reads_back_each_answer_and_exit_status() -> None:
    script = sections_script([("one", "echo a; echo b"), ("two", "echo oops >&2; exit 3"), ("three", "true")])
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    sections = parse_sections(out)
    assert sections == {"one": (0, "a\nb"), "two": (3, "oops"), "three": (0, "")}


# --- what the steps write (the schedulers' own parsers: test_hpc_monitor_reads.py) --------------


def test_telemetry_tail_and_training_log_give_the_step_s_current_use_and_rate() -> None:
    lines = (REC / "lsf_telemetry_train.jsonl").read_text().splitlines()
    tail = parse_telemetry_tail("\n".join(lines[-3:]), "recorded")
    assert tail is not None and len(tail.t) >= 1
    assert tail.cpu_percent[-1] > 0 and tail.rss_bytes[-1] > 0
    assert math.isnan(tail.gpu_util_percent[-1]) and dict(tail.not_measured)["gpu"].startswith("NVML")
    log = (REC / "lsf_probe-digits_log.jsonl").read_text().splitlines()
    rate, stamp = iterations_per_second("\n".join(log[-2:]))
    first, second = json.loads(log[-2]), json.loads(log[-1])
    assert rate == pytest.approx((second["itr"] - first["itr"]) / (second["_stamp"] - first["_stamp"]))
    assert stamp == second["_stamp"]
    assert iterations_per_second("") == (None, None)


# --- polling keeps to its interval ---------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def slurm_outputs(count: int) -> dict[str, Any]:
    return {
        "kind": "hpc",
        "scheduler": "slurm",
        "host": "127.0.0.1",
        "port": 22,
        "user": "atlas",
        "run_dir": "run",
        "steps": [{"name": f"s{i}", "job_id": str(100 + i)} for i in range(count)],
        "telemetry": {"path": "run/telemetry"},
        "logs": {"path": "run/logs"},
    }


def fake_slurm_runner(commands: list[str]) -> Any:
    squeue = (REC / "squeue_fields.txt").read_text()

    def run(command: str) -> RemoteResult:
        commands.append(command)
        if command.startswith(SQUEUE_QUERY):
            return RemoteResult(command, 0, squeue, "")
        return RemoteResult(command, 0, "", "")

    return run


def test_an_hpc_source_asks_twice_per_interval_whatever_the_number_of_jobs_and_readers() -> None:
    commands: list[str] = []
    clock = FakeClock()
    source = HpcSource("satori-slurm", hpc_outputs(slurm_outputs(200)), fake_slurm_runner(commands), 30.0, clock=clock)
    for _ in range(50):  # fifty readers within one interval
        source.poll()
    assert source.calls == 2 and source.polls == 1
    status = commands[0]
    assert status.startswith(SQUEUE_QUERY + " ") and status.split()[-1].count(",") == 199  # one batched query
    clock.now += 29.9
    source.poll()
    assert source.calls == 2
    clock.now += 0.2
    source.poll()
    assert source.calls == 4 and source.polls == 2


def test_a_site_that_fails_is_asked_again_after_one_then_two_then_four_intervals() -> None:
    clock, asked = FakeClock(), []
    down = {"now": True}
    healthy = fake_slurm_runner([])

    def runner(command: str) -> RemoteResult:
        asked.append(clock.now)
        if down["now"]:
            raise OSError("connect to 127.0.0.1 port 22: connection refused")
        return healthy(command)

    source = HpcSource("satori-slurm", hpc_outputs(slurm_outputs(2)), runner, 60.0, clock=clock)
    while clock.now < 1000.0 + 420.0:  # a reader every half second (the live view redraws each second)
        with pytest.raises(OSError, match="connection refused"):
            source.poll()
        clock.now += 0.5
    # Failed at 0, then retried after 60 s, 120 s more, 240 s more: never at the readers' pace.
    assert [round(t - 1000.0) for t in asked] == [0, 60, 180]
    assert source.failures == 3 and source.polls == 0
    clock.now = 1000.0 + 420.0
    down["now"] = False
    source.poll()  # back: asked at once (the wait is over), the failures forgotten
    assert source.failures == 0 and source.polls == 1
    calls = source.calls
    clock.now += 30.0
    source.poll()
    assert source.calls == calls  # and again at the site's interval


# --- Kubernetes: list, then watch events ---------------------------------------------------------


class RecordedApi:
    """A KubeClient stand-in answering LISTs from the comparison's recorded documents."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {"GET": 0}
        self.documents = {
            "/api/v1/nodes": json.loads((REC / "k8s_nodes.json").read_text()),
            "/api/v1/pods": json.loads((REC / "k8s_pods.json").read_text()),
            f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs": json.loads((REC / "k8s_jobs.json").read_text()),
        }

    def get(self, path: str) -> Any:
        self.calls["GET"] += 1
        document = copy.deepcopy(self.documents[path])
        document.setdefault("metadata", {})["resourceVersion"] = "100"
        return document


def kube_monitor(now: float) -> tuple[Monitor, KubeCache, RecordedApi]:
    api = RecordedApi()
    cache = KubeCache(api, NAMESPACE)  # type: ignore[arg-type]
    cache.list_all()
    outputs = read_stack_outputs(
        {"atlas": OUTPUTS["atlas"], "environments": {"openshift": OUTPUTS["environments"]["openshift"]}}
    )
    kubernetes = outputs.environments["openshift"]
    assert isinstance(kubernetes, KubernetesOutputs)
    source = KubeSource("openshift", kubernetes, cache)
    monitor = Monitor(outputs.run, {"openshift": source}, JobShape("probe", 1), 30.0, wall=lambda: now)
    return monitor, cache, api


def hpc_source(name: str, outputs: dict[str, Any], runner: Any) -> HpcEnvironmentSource:
    """The monitor's source for a batch side, polling through `runner` (as infra.kinds.hpc makes it)."""
    typed = read_environment(HpcOutputs, outputs, name)
    return HpcEnvironmentSource(name, typed, HpcSource(name, typed, runner, 30.0))


def test_the_kubernetes_view_matches_the_recorded_jobs_pods_and_nodes() -> None:
    now = utc("2026-12-02T16:00:00Z")
    monitor, _cache, api = kube_monitor(now)
    snapshot = monitor.snapshot()
    (env,) = snapshot.environments
    assert not env.error and api.calls["GET"] == 3  # one LIST each; a snapshot asks nothing more
    steps = {s.name: s for s in env.steps}
    train = steps["train"]
    assert (train.job, train.phase, train.native_state, train.node) == (
        "openshift-pipeline-train-9f60a934",
        "succeeded",
        "Complete",
        "kwok-gpu-0",
    )
    assert train.elapsed_s == 5.0 and train.queue_wait_s == 0.0 and train.gpus == 1
    # Every live cell of a step on a KWOK node says why it is empty: no container ran there.
    assert dataclasses.asdict(train.reasons) == dict.fromkeys(
        ("iterations_per_s", "cpu_percent", "memory_bytes", "gpu_util_percent"), SIMULATED
    )
    nodes = {n.name: n for n in env.nodes}
    # The recorded train pod has Succeeded: it holds no GPU any more.
    assert (nodes["kwok-gpu-0"].gpus_total, nodes["kwok-gpu-0"].gpus_allocated) == (4, 0)
    assert nodes["kwok-gpu-0"].simulated and nodes["kwok-gpu-0"].gpu_util_percent is None
    # What the environment is comes from where its steps ran, never "real" by default.
    kwok = "simulated nodes: KWOK nodes (kwok.x-k8s.io/node=fake): no container ran"
    loopback = "Kubernetes API on loopback (https://127.0.0.1:16443)"
    assert nodes["kwok-gpu-0"].provenance == f"{kwok}; {loopback}" and env.provenance == f"{kwok}; {loopback}"
    assert env.estimate is not None and env.estimate.seconds is not None and env.estimate.free_gpus >= 4


def test_watch_events_move_the_cache_and_410_asks_for_a_new_list() -> None:
    now = utc("2026-12-02T16:00:00Z")
    monitor, cache, api = kube_monitor(now)
    gpu_pod = copy.deepcopy(next(p for p in cache.items("pods") if "train" in p["metadata"]["name"]))
    gpu_pod["metadata"]["name"] = "other-gpu-pod"
    gpu_pod["metadata"]["namespace"] = "someone-else"
    gpu_pod["metadata"]["resourceVersion"] = "101"
    gpu_pod["status"]["phase"] = "Running"
    cache.apply_event("pods", {"type": "ADDED", "object": gpu_pod})
    env = monitor.snapshot().environments[0]
    assert {n.name: n.gpus_allocated for n in env.nodes}["kwok-gpu-0"] == 1
    assert "someone-else/other-gpu-pod" in {n.name: n for n in env.nodes}["kwok-gpu-0"].workloads
    cache.apply_event("pods", {"type": "DELETED", "object": gpu_pod})
    env = monitor.snapshot().environments[0]
    assert {n.name: n.gpus_allocated for n in env.nodes}["kwok-gpu-0"] == 0
    with pytest.raises(GoneError):
        cache.apply_event("pods", {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}})
    assert api.calls["GET"] == 3


# --- rendering: terminal, JSON and HTML read the same numbers ------------------------------------


def test_json_and_html_carry_the_same_numbers_and_the_terminal_view_renders() -> None:
    from rich.console import Console

    now = utc("2026-12-02T16:00:00Z")
    monitor, _cache, _api = kube_monitor(now)
    snapshot = monitor.snapshot()
    data = json.loads(to_json(snapshot))
    assert data == json.loads(json.dumps(to_dict(snapshot)))
    page = html_page(snapshot)
    cells = dict(
        ((m["env"], m["row"], m["field"]), m["value"])
        for m in re.finditer(
            r'data-env="(?P<env>[^"]*)" data-row="(?P<row>[^"]*)" data-field="(?P<field>[^"]*)" '
            r'data-value="(?P<value>[^"]*)"',
            page,
        )
    )
    env = data["environments"][0]
    # Rows the two views must agree on are there (an empty list would make the loops below pass untested).
    assert env["steps"] and any(node["gpus_total"] for node in env["nodes"])
    for step in env["steps"]:
        assert cells[("openshift", step["name"], "elapsed_s")] == str(step["elapsed_s"])
        assert cells[("openshift", step["name"], "phase")] == step["phase"]
    for node in env["nodes"]:
        if node["gpus_total"]:
            assert cells[("openshift", node["name"], "gpus_free")] == str(node["gpus_free"])
    console = Console(record=True, width=200)
    console.print(terminal_view(snapshot))
    text = console.export_text()
    assert "openshift-pipeline-train-9f60a934" in text and "kwok-gpu-0" in text and "queue-wait estimate" in text
    assert data["environments"][0]["provenance"].startswith("simulated nodes: KWOK nodes")
    # Each node's row says what the node is, in every view.
    assert "(simulated nodes: KWOK nodes" in text and "(simulated nodes: KWOK nodes" in page
    assert cells[("openshift", "kwok-gpu-0", "provenance")].startswith("simulated nodes: KWOK nodes")


def test_an_environment_that_cannot_be_read_says_why_and_the_others_still_show() -> None:
    def broken(command: str) -> RemoteResult:
        return RemoteResult(command, 1, "", "slurm_load_jobs error: Unable to contact slurm controller")

    now = utc("2026-12-02T16:00:00Z")
    monitor, _cache, _api = kube_monitor(now)
    monitor.sources = {**monitor.sources, "satori-slurm": hpc_source("satori-slurm", slurm_outputs(2), broken)}
    views = {e.name: e for e in monitor.snapshot().environments}
    assert "Unable to contact slurm controller" in views["satori-slurm"].error
    assert not views["openshift"].error and views["openshift"].steps
    assert "cannot read" in html_page(monitor.snapshot())


def test_an_unknown_scheduler_is_an_error_not_slurm() -> None:
    commands: list[str] = []
    outputs = {**slurm_outputs(2), "scheduler": "pbs"}
    now = utc("2026-12-02T16:00:00Z")
    monitor, _cache, _api = kube_monitor(now)
    monitor.sources = {**monitor.sources, "site": hpc_source("site", outputs, fake_slurm_runner(commands))}
    views = {e.name: e for e in monitor.snapshot().environments}
    assert "unknown scheduler 'pbs'; use lsf or slurm" in views["site"].error
    assert commands == [] and not views["openshift"].error


def test_queue_wait_of_a_pending_step_grows_until_it_starts() -> None:
    from infra.compare.records import StepRecord
    from infra.hpc.scheduler import Phase
    from infra.monitor.sources import step_view

    record = StepRecord(
        "train", "7", "PENDING", 100.0, None, None, None, None, "Resources", 1, None, "", False, None, ""
    )
    view = step_view(record, Phase.PENDING, 160.0)
    assert (view.queue_wait_s, view.elapsed_s, view.reason) == (60.0, None, "Resources")


# --- AWS: every kind the stack has is shown -------------------------------------------------------


def aws_outputs(emulated: bool, executed: bool = False) -> dict[str, Any]:
    from tests.unit.test_outputs import AWS

    return {
        **AWS.to_dict(),
        "emulated": emulated,
        "executed": executed,
        "not_executed_reason": "" if executed else "http://127.0.0.1:16500 is an AWS API stand-in (moto)",
        # The first instance's host key, generated at launch: the outputs carry it.
        "batch": (
            # The instance's address, and its host key, generated at launch, under that address.
            {**AWS.to_dict()["batch"], "host": "203.0.113.9", "port": 22,
             "known_hosts": "203.0.113.9 ssh-ed25519 AAAAHOSTKEY"}
            if executed
            else None
        ),
    }


def test_aws_instances_that_ran_nothing_are_shown_with_why_and_a_stand_ins_are_no_nodes() -> None:
    from infra.compare.access import Access
    from infra.kinds import monitor_sources

    outputs = read_stack_outputs({"atlas": OUTPUTS["atlas"], "environments": {"aws": aws_outputs(emulated=True)}})
    sources = monitor_sources(outputs, Access(), 30.0)
    (env,) = Monitor(outputs.run, sources, JobShape("probe", 1)).snapshot().environments
    assert env.kind == "aws" and not env.error and "not executed" in env.platform
    assert [s.phase for s in env.steps] == ["not executed"] and "moto" in env.steps[0].reason
    assert env.nodes == () and "exist only as records of the API stand-in" in env.notes[0]
    assert "moto" in env.provenance

    real = read_stack_outputs({"atlas": OUTPUTS["atlas"], "environments": {"aws": aws_outputs(emulated=False)}})
    (env,) = Monitor(real.run, monitor_sources(real, Access(), 30.0), None).snapshot().environments
    # Real instances that run nothing are GPUs paid for and idle: the node listing's business.
    assert [(n.name, n.gpus_total, n.gpus_allocated) for n in env.nodes] == [("i-1", 4, 0), ("i-2", 4, 0)]
    assert all(n.gpu_util_percent is None and n.util_source.startswith("not measured") for n in env.nodes)
    # The instances are real; the run on them is not executed (infra.provenance).
    assert all(n.provenance == "real" for n in env.nodes)
    assert env.provenance == "not executed: http://127.0.0.1:16500 is an AWS API stand-in (moto)"
    text = json.loads(to_json(Monitor(real.run, monitor_sources(real, Access(), 30.0), None).snapshot()))
    assert text["environments"][0]["name"] == "aws"


def test_aws_steps_that_ran_are_polled_on_the_first_instance_checked_against_its_own_host_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.compare.access import Access
    from infra.hpc import ssh
    from infra.kinds import monitor_sources
    from infra.monitor.sources import ErrorSource

    outputs = read_stack_outputs({"atlas": OUTPUTS["atlas"], "environments": {"aws": aws_outputs(False, True)}})
    # No agent, no ssh config, no default key files: nothing of the user's to log in with.
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    source = monitor_sources(outputs, Access(), 30.0)["aws"]
    # Without a key there is no login; the view says how to give one (the host key is the outputs').
    assert isinstance(source, ErrorSource) and "--ssh-key aws=PATH" in source.error and source.kind == "aws"

    endpoints: list[ssh.SshEndpoint] = []
    commands: list[str] = []
    runner = fake_slurm_runner(commands)
    monkeypatch.setattr(ssh, "connection", lambda endpoint: endpoints.append(endpoint) or object())
    monkeypatch.setattr(ssh, "run_remote", lambda _connection, command, **_: runner(command))
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    sources = monitor_sources(outputs, Access(tmp_path, ssh_keys={"aws": key}), 30.0)
    (env,) = Monitor(outputs.run, sources, None).snapshot().environments
    assert not env.error, env.error
    (endpoint,) = endpoints
    batch = outputs.environments["aws"].batch  # type: ignore[attr-defined]
    assert (endpoint.host, endpoint.user, endpoint.private_key_file) == (batch.host, batch.user, str(key))
    assert endpoint.known_hosts == batch.known_hosts + "\n" and "outputs' known_hosts" in endpoint.known_hosts_source
    assert env.kind == "aws" and not env.error and "Slurm over SSH on AWS EC2 2 x p3.8xlarge" in env.platform
    assert commands[0].startswith(SQUEUE_QUERY) and [s.name for s in env.steps] == ["train"]
