"""The records of local environments and what `up` removes or refuses (localenv/records.py)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from localenv import records
from localenv.layout import Layout, Ports, environment_id
from localenv.records import CleanupPlan, EnvRecord, Leftovers, Observed, plan_cleanup

OWN = Layout(state_dir=Path("/tmp/own-env"), ports=Ports(16000))


def record(state_dir: str, base: int) -> EnvRecord:
    return EnvRecord(Path(state_dir), base, "/work/some-checkout", "2026-12-05T00:00:00+00:00")


DEAD_SAME_SUBNET = record("/tmp/deleted-env", 16000)
LIVE_ELSEWHERE = record("/tmp/live-env", 18000)
LIVE_SAME_BASE = record("/tmp/live-same", 16000)
LIVE_NEAR_BASE = record("/tmp/live-near", 16050)  # same /24 (16000 // 100 == 16050 // 100), ports shifted by 50


PORT_COUNT = len(set(OWN.ports.all().values()))


def bridge(rec: EnvRecord | Layout) -> str:
    return f"atl{rec.id if isinstance(rec, EnvRecord) else environment_id(rec.state_dir)}"


@pytest.mark.parametrize(("observed", "leftovers", "expected"), [
    pytest.param([], Leftovers(), CleanupPlan(), id="nothing-recorded"),
    pytest.param([Observed(DEAD_SAME_SUBNET, (), False)], Leftovers(bridges=(bridge(DEAD_SAME_SUBNET),)),
                 CleanupPlan(abandoned=(DEAD_SAME_SUBNET,)), id="dead-env-folder-deleted: its down removes its bridge"),
    pytest.param([Observed(LIVE_ELSEWHERE, ("kube-apiserver",), True)],
                 Leftovers(bridges=(bridge(LIVE_ELSEWHERE), bridge(OWN))), CleanupPlan(),
                 id="live-env-elsewhere-and-own-bridge-kept"),
    pytest.param([], Leftovers(bridges=("atl0badc0de", "docker0", "atlantis"), cgroup_roots=("atlas-0badc0de",),
                               run_mounts=("/run/atlas/0badc0de/netns/x",)),
                 CleanupPlan(bridges=("atl0badc0de",), cgroup_roots=("atlas-0badc0de",),
                             run_mounts=("/run/atlas/0badc0de/netns/x",)),
                 id="unrecorded-leftovers-by-prefix"),
    pytest.param([], Leftovers(kube_proxy_owner=Path("/tmp/gone")), CleanupPlan(kube_proxy_cleanup=True),
                 id="kube-proxy-of-an-unrecorded-env"),
    pytest.param([Observed(LIVE_ELSEWHERE, ("kube-proxy",), True)],
                 Leftovers(kube_proxy_owner=LIVE_ELSEWHERE.state_dir), CleanupPlan(),
                 id="kube-proxy-of-a-live-env-kept"),
    pytest.param([Observed(DEAD_SAME_SUBNET, (), True)], Leftovers(kube_proxy_owner=DEAD_SAME_SUBNET.state_dir),
                 CleanupPlan(abandoned=(DEAD_SAME_SUBNET,)), id="kube-proxy-of-an-abandoned-env-left-to-its-down"),
    pytest.param([Observed(record("/tmp/own-env", 16000), (), True)], Leftovers(bridges=(bridge(OWN),)), CleanupPlan(),
                 id="own-record-never-touched"),
    pytest.param([], Leftovers(kube_router_owner=Path("/tmp/gone")), CleanupPlan(kube_router_cleanup=True),
                 id="kube-router-of-an-unrecorded-env"),
    pytest.param([Observed(LIVE_ELSEWHERE, ("kube-router",), True)],
                 Leftovers(kube_proxy_owner=Path("/tmp/gone"), kube_router_owner=LIVE_ELSEWHERE.state_dir),
                 CleanupPlan(kube_proxy_cleanup=True), id="live-kube-router-kept-gone-kube-proxy-not"),
    pytest.param([Observed(DEAD_SAME_SUBNET, (), True)], Leftovers(kube_router_owner=DEAD_SAME_SUBNET.state_dir),
                 CleanupPlan(abandoned=(DEAD_SAME_SUBNET,)), id="kube-router-of-an-abandoned-env-left-to-its-down"),
    pytest.param([], Leftovers(kube_router_owner=OWN.state_dir), CleanupPlan(), id="own-kube-router-kept"),
])
def test_plan_cleanup(observed: list[Observed], leftovers: Leftovers, expected: CleanupPlan) -> None:
    assert plan_cleanup(OWN, observed, leftovers) == expected


@pytest.mark.parametrize(("live", "exists", "wanted"), [
    pytest.param(LIVE_SAME_BASE, True,
                 [f"holds the pod subnet 10.201.160.0/24 and {PORT_COUNT} of this environment's ports"],
                 id="same-base"),
    pytest.param(LIVE_NEAR_BASE, False, ["(its state folder is gone)", "holds the pod subnet 10.201.160.0/24:"],
                 id="same-subnet-folder-gone"),
])
def test_plan_refuses_a_live_env_in_the_way(live: EnvRecord, exists: bool, wanted: list[str]) -> None:
    plan = plan_cleanup(OWN, [Observed(live, ("etcd", "kube-apiserver"), exists)], Leftovers())
    assert plan.abandoned == () and len(plan.refusals) == 1
    message = plan.refusals[0]
    assert f"the environment in {live.state_dir}" in message and "still runs (etcd, kube-apiserver)" in message
    assert f"`scripts/localenv down --state-dir {live.state_dir}` (from any checkout)" in message
    for fragment in wanted:
        assert fragment in message


def test_a_live_env_whose_folder_is_gone_and_not_in_the_way_is_noted() -> None:
    plan = plan_cleanup(OWN, [Observed(LIVE_ELSEWHERE, ("etcd",), False)], Leftovers())
    assert plan.refusals == ()
    assert plan.notes == (f"the environment in {LIVE_ELSEWHERE.state_dir} still runs but its state folder is gone; "
                          f"stop it with `scripts/localenv down --state-dir {LIVE_ELSEWHERE.state_dir}`",)


def test_pod_cidr_is_the_nodes() -> None:
    assert records.pod_cidr_of(16000) == ipaddress.IPv4Network("10.201.160.0/24")
    assert records.pod_cidr_of(18000) == ipaddress.IPv4Network("10.201.180.0/24")
    assert records.pod_cidr_of(25600 + 16000) == records.pod_cidr_of(16000)  # the block wraps at 256


def test_run_mounts_only_under_an_environment_id_deepest_first() -> None:
    mountinfo = "\n".join([
        "36 25 0:32 / /run/atlas/0badc0de rw - tmpfs tmpfs rw",
        "37 36 0:4 net:[4026532] /run/atlas/0badc0de/netns/cni-1 rw - nsfs nsfs rw",
        "38 25 0:33 / /run/atlas/envs rw - tmpfs tmpfs rw",
        "39 25 0:34 / /run/atlas/kube-proxy.owner rw - tmpfs tmpfs rw",
        "40 25 0:35 / /srv/run/atlas/0badc0de rw - tmpfs tmpfs rw",
    ])
    assert records.run_mounts(mountinfo) == ("/run/atlas/0badc0de/netns/cni-1", "/run/atlas/0badc0de")


def test_atlas_bridges_by_name_prefix_and_id() -> None:
    links = [{"ifname": "atl0badc0de"}, {"ifname": "atlantis"}, {"ifname": "cni0"}, {"ifname": "atl0BADC0DE"}]
    assert records.atlas_bridges(links) == ("atl0badc0de",)


def test_records_round_trip_and_keep_their_first_creation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATLAS_LOCALENV_RECORDS", str(tmp_path))
    layout = Layout(state_dir=tmp_path / "state", ports=Ports(21000))
    first = records.write_record(layout, Path("/work/checkout"))
    assert layout.record_dir == tmp_path / layout.id
    assert records.write_record(layout, Path("/work/checkout")) == first
    assert records.read_records() == [first]
    assert records.find_record(layout.state_dir) == first
    assert first.layout() == layout and first.bridge == bridge(layout)
    assert layout.pids_dir == tmp_path / layout.id / "pids"  # outside the state folder
    moved = Layout(state_dir=layout.state_dir, ports=Ports(22000))
    assert records.write_record(moved, Path("/work/checkout")).port_base == 22000
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "env.json").write_text("{not json")
    assert [r.port_base for r in records.read_records()] == [22000]
