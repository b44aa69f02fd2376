"""The local environment's pure renderers: the node's configs (localenv/node_config.py),
the login node's sshd_config, slurm.conf and gres.conf (localenv/satori_config.py), the local
site's sshd configs, PAM stack and user ssh config (localenv/site_config.py) and the build
runner's objects (localenv/build_objects.py)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from infra.hpc.slurm.nodes import parse_sinfo_nodes
from infra.hpc.ssh import resolve_endpoint
from infra.hpc.target import HpcTarget
from infra.provenance import MOCK_GPUS, Fact, is_mock_gpu_type
from infra.telemetry import gpu
from localenv import build_objects, kube, node_config, satori_config, site_config
from localenv.layout import Layout, Ports
from localenv.lsf import slurm as lsf_slurm
from localenv.pki_files import Pki

LAYOUT = Layout(state_dir=Path("/tmp/atlas-test-env"), ports=Ports(16000))


@pytest.mark.parametrize(("lower", "restrict", "oom_score"), [(True, False, -999), (False, True, 0)])
def test_node_configs_follow_whether_root_may_lower_oom_scores(lower: bool, restrict: bool, oom_score: int) -> None:
    text = node_config.containerd_config(LAYOUT, pause_image="127.0.0.1:16510/pause:v1", cni_bin_dir=Path("/bin"),
                                         lower_oom_score=lower)
    runtime = tomllib.loads(text)["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is restrict
    assert runtime["cni"]["bin_dirs"] == ["/bin"]
    kubelet = node_config.kubelet_config(LAYOUT, Pki(Path("/pki")), "10.0.0.5", lower_oom_score=lower)
    assert kubelet["oomScoreAdj"] == oom_score
    assert kubelet["authentication"]["x509"]["clientCAFile"] == "/pki/ca.crt"


def test_pod_subnet_and_bridge_come_from_the_port_base() -> None:
    conflist = node_config.cni_conflist(LAYOUT)
    assert conflist["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.201.160.0/24"}]]
    assert len(node_config.NodePaths(LAYOUT).bridge) <= 15
    assert node_config.kube_proxy_config(LAYOUT)["clusterCIDR"] == "10.201.160.0/24"


def test_registry_hosts_toml_is_plain_http() -> None:
    assert node_config.registry_hosts_toml("127.0.0.1:16510") == (
        'server = "http://127.0.0.1:16510"\n\n[host."http://127.0.0.1:16510"]\n'
        '  capabilities = ["pull", "resolve", "push"]\n'
    )


def test_satori_configs_name_the_node_and_its_files() -> None:
    paths = satori_config.SatoriPaths(LAYOUT.satori_dir)
    sshd = satori_config.render_sshd_config(paths, 2222)
    assert "Port 2222\n" in sshd and f"SetEnv SLURM_CONF={paths.slurm_conf}\n" in sshd
    slurm = satori_config.render_slurm_conf(paths, LAYOUT, "node1")
    assert "ClusterName=atlas16000\n" in slurm
    assert "Gres=gpu:mock_v100:4" in slurm
    gres = satori_config.render_gres_conf("node1")
    assert gres.endswith("NodeName=node1 Name=gpu Type=mock_v100 File=/dev/fakegpu[0-3]\n")
    assert f"TaskProlog={paths.task_prolog}\n" in slurm


def test_the_local_satori_s_gpus_say_they_are_mock_to_the_scheduler_s_readers_and_to_each_job(
    tmp_path: Path,
) -> None:
    """What Atlas reads of the local Slurm and its LSF command set names the GPUs mock, and every
    job is told so (the sampler then reads no GPU of the host as the job's own)."""
    gres = f"gpu:{satori_config.GPU_TYPE}:{satori_config.GPU_COUNT}"
    (node,) = parse_sinfo_nodes(f"node1|mixed|1/7/0/8|{gres}|gpu:{satori_config.GPU_TYPE}:1(IDX:0)\n")
    assert node.gpu_fact == Fact(MOCK_GPUS, "mock GPUs (Slurm GRES type mock_v100)")
    assert is_mock_gpu_type(lsf_slurm.gpu_model(gres)) and not is_mock_gpu_type(lsf_slurm.gpu_model("gpu:v100:4"))
    prolog = tmp_path / "task_prolog.sh"
    prolog.write_text(satori_config.render_task_prolog())
    printed = subprocess.run(["sh", str(prolog)], capture_output=True, text=True, check=True).stdout
    assert printed == f"export {gpu.MOCK_ENV}={gpu.MOCK_VALUE}\n"
    assert gpu.open_gpu_reader("auto", {gpu.MOCK_ENV: gpu.MOCK_VALUE}).read() == {
        "measured": False, "reason": gpu.MOCK_REASON,
    }


def test_the_local_slurm_puts_each_job_in_cgroups_of_its_own() -> None:
    """proctrack/cgroup and task/cgroup with RAM constrained (the memory cgroup is made only then):
    each job's memory cgroup is its own, so the sampler trusts its peak (docs/telemetry.md). Job ids
    start per environment: Slurm's cgroup prefix is one for every environment on this host."""
    paths = satori_config.SatoriPaths(LAYOUT.satori_dir)
    slurm = satori_config.render_slurm_conf(paths, LAYOUT, "node1").splitlines()
    assert {"ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup", "FirstJobId=1600000"} <= set(slurm)
    other = satori_config.render_slurm_conf(paths, Layout(LAYOUT.state_dir, Ports(17000)), "node1").splitlines()
    assert "FirstJobId=1700000" in other
    cgroup = satori_config.render_cgroup_conf().splitlines()
    assert {"CgroupPlugin=autodetect", "ConstrainRAMSpace=yes", "ConstrainCores=no", "ConstrainDevices=no"} <= set(
        cgroup
    )
    assert paths.cgroup_conf.parent == paths.slurm_conf.parent  # Slurm reads it beside slurm.conf


def test_the_local_site_s_login_node_asks_a_code_after_the_key_and_the_bastion_only_forwards() -> None:
    satori, site = satori_config.SatoriPaths(LAYOUT.satori_dir), site_config.SitePaths(LAYOUT.site_dir)
    login = site_config.render_login_config(satori, site, LAYOUT).splitlines()
    mfa = site_config.render_login_mfa_config(satori, site, LAYOUT).splitlines()
    assert "AuthenticationMethods publickey" in login and "UsePAM no" in login and "Port 16025" in login
    assert "AuthenticationMethods publickey,keyboard-interactive" in mfa and "UsePAM yes" in mfa
    assert f"PidFile {site.pid_file('login-mfa')}" in mfa and f"HostKey {satori.host_key}" in mfa
    bastion = site_config.render_bastion_config(site, LAYOUT).splitlines()
    assert "PermitOpen 127.0.0.1:16025 127.0.0.1:16026" in bastion and "AllowUsers atlas-jump" in bastion
    pam = site_config.render_pam_service(site)
    assert f"auth required pam_exec.so expose_authtok quiet {site.code_check}\n" in pam
    assert site_config.sshd_program_name(LAYOUT) == "atlas-site-sshd-16000"


def test_the_local_site_s_user_config_resolves_to_the_login_node_through_the_bastion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    site = site_config.SitePaths(tmp_path / "site")
    site.ssh_config.parent.mkdir(parents=True)
    site.ssh_config.write_text(site_config.render_user_ssh_config(site, LAYOUT))
    site.known_hosts.write_text(site_config.render_known_hosts("ssh-ed25519 AAAAbastion", "ssh-ed25519 AAAAlogin",
                                                               LAYOUT))
    endpoint = resolve_endpoint(HpcTarget(host="satori-site", user=None, scheduler="slurm",
                                          ssh_config=site.ssh_config), "atlas:hpc.site")
    assert (endpoint.host, endpoint.port, endpoint.user, endpoint.name) == ("127.0.0.1", 16025, "atlas", "satori-site")
    (bastion,) = endpoint.jumps
    assert (bastion.name, bastion.port, bastion.user) == ("atlas-bastion", 16024, "atlas-jump")
    assert bastion.known_hosts == "[127.0.0.1]:16024 ssh-ed25519 AAAAbastion\n"
    assert endpoint.known_hosts == "[127.0.0.1]:16025 ssh-ed25519 AAAAlogin\n"
    assert endpoint.agent == "SSH_AUTH_SOCK" and endpoint.private_key_file is None


CONFIG = {
    "metadata": {"name": "app", "namespace": "ns", "uid": "u1", "labels": {"a": "b"}},
    "spec": {"runPolicy": "Serial", "strategy": {"type": "Docker"}, "triggers": [{"type": "ConfigChange"}],
             "output": {"to": {"kind": "ImageStreamTag", "name": "app:v2"}}},
}


@pytest.mark.parametrize(("status", "wanted"), [({}, True), ({"lastVersion": 1}, False)])
def test_a_config_change_trigger_builds_once(status: dict[str, int], wanted: bool) -> None:
    assert build_objects.wants_config_change_build({**CONFIG, "status": status}) is wanted


def test_new_build_is_owned_by_its_config() -> None:
    build = build_objects.new_build(CONFIG, 3)
    assert build["metadata"]["name"] == "app-3"
    annotations = {build_objects.BUILD_CONFIG_LABEL: "app", build_objects.BUILD_NUMBER: "3"}
    assert build["metadata"]["annotations"] == annotations
    assert build["spec"]["strategy"] == {"type": "Docker"} and "triggers" not in build["spec"]
    assert build_objects.Output.of(build) == build_objects.Output("app", "v2", "ns/app")


def test_a_tag_event_goes_on_top_of_the_tag_history() -> None:
    stream = {"metadata": {"namespace": "ns", "name": "app"},
              "status": {"tags": [{"tag": "v2", "items": [{"image": "sha256:old"}]}]}}
    status = build_objects.image_stream_status(stream, "reg:5000", "v2", "sha256:new", "2026-01-01T00:00:00Z")
    assert status["dockerImageRepository"] == "reg:5000/ns/app"
    assert [i["image"] for i in status["tags"][0]["items"]] == ["sha256:new", "sha256:old"]


def _link(name: str, *addresses: str) -> dict[str, object]:
    return {"ifname": name, "addr_info": [
        {"family": "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1])} for a in addresses
    ]}


@pytest.mark.parametrize(
    ("links", "holders"),
    [
        ([_link("lo", "127.0.0.1/8"), _link("eth0", "192.0.2.2/24")], []),
        ([_link("atlown00000", "10.201.160.1/24")], []),  # the node's own bridge
        ([_link("atlown00000", "10.201.160.1/24"), _link("atldead0000", "10.201.160.1/24")], ["atldead0000"]),
        ([_link("atlother000", "10.201.161.1/24")], []),  # another port base's subnet
        ([_link("docker0", "172.17.0.1/16", "10.201.160.77/24")], ["docker0"]),
        ([{"ifname": "veth1", "addr_info": []}, {"ifname": "x"}], []),
    ],
)
def test_the_interfaces_holding_the_pod_subnet_are_found(links: list[dict[str, object]], holders: list[str]) -> None:
    pod_cidr = node_config.Network.of(LAYOUT).pod_cidr
    assert str(pod_cidr) == "10.201.160.0/24"
    assert node_config.subnet_holders(links, pod_cidr, "atlown00000") == holders


def test_a_reset_forgets_the_clusters_objects_and_its_volumes_contents_but_keeps_its_certificates(
    tmp_path: Path,
) -> None:
    layout = Layout(state_dir=tmp_path, ports=Ports(18000))
    for kept_or_gone in ("etcd/member/snap/db", "volumes/rwx-03/checkpoint.pt", "pki/ca.crt"):
        (layout.kube_dir / kept_or_gone).parent.mkdir(parents=True, exist_ok=True)
        (layout.kube_dir / kept_or_gone).write_text("x")

    kube.reset(layout)

    assert not (layout.kube_dir / "etcd").exists()
    assert not (layout.kube_dir / "volumes").exists()
    assert (layout.kube_dir / "pki" / "ca.crt").read_text() == "x"
