"""Labels from facts (issue 34, item 5): what each environment is, derived from what Atlas observes,
and a stack's own words that may narrow a label but never make a stand-in real."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from infra.compare.device_records import device_provenance
from infra.compare.kube_records import NODES_UNREAD, NodeRecord, kube_provenance
from infra.config import parse_stack_config
from infra.errors import AtlasConfigError
from infra.hpc.lsf.hosts import parse_lsload_gpu
from infra.hpc.remote import SshEndpoint, SshHop
from infra.hpc.slurm.nodes import gpu_types, parse_sinfo_nodes
from infra.hpc.ssh.resolve import refuse_real_route, resolve_endpoint
from infra.hpc.target import HpcConfigError, HpcTarget
from infra.job_records import HpcNode, mock_gpu_nodes
from infra.loopback import reaches_loopback_host, reaches_loopback_url
from infra.monitor.hpc_view import HpcEnvironmentSource
from infra.monitor.model import HpcPoll, LogTail, StepRecord, StepTelemetry
from infra.monitor.reasons import MOCK_GPU
from infra.monitor.sources import ViewContext
from infra.outputs import AwsOutputs, HpcOutputs
from infra.provenance import (
    CLASSES,
    DEVICE_RUN,
    EMULATED,
    LOCAL_STAND_IN,
    MOCK_GPUS,
    NOT_EXECUTED,
    NOT_STATED,
    REAL,
    SIMULATED,
    Fact,
    label,
    loopback_host_fact,
    loopback_url_fact,
    mock_gpu_fact,
    refusal,
)
from tests.unit.test_outputs import AWS, HPC

LOOPBACK = Fact(LOCAL_STAND_IN, "login node on loopback (127.0.0.1)")
MOCK = Fact(MOCK_GPUS, "mock GPUs (Slurm GRES type mock_v100)")
KWOK = Fact(SIMULATED, "KWOK nodes (kwok.x-k8s.io/node=fake): no container ran")
MOTO = Fact(EMULATED, "moto, an AWS API stand-in at http://127.0.0.1:16500: its instances exist only as API records")
ONE_OF_EACH = [Fact(kind, f"{kind} seen") for kind in CLASSES]


# --- the derivation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stated", "facts", "expected"),
    [
        # Nothing observed: the stack's words, real only where it says so.
        ("real", [], REAL),
        (" Real ", [], REAL),
        ("", [], NOT_STATED),
        (NOT_STATED, [], NOT_STATED),
        ("local stand-in: Slurm on this host", [], "local stand-in: Slurm on this host"),
        ("a test cluster of the lab", [None], "a test cluster of the lab"),
        # Observed: the facts name the class, whatever the stack says.
        ("real", [LOOPBACK], "local stand-in: login node on loopback (127.0.0.1)"),
        ("REAL", [MOCK], "mock GPUs (Slurm GRES type mock_v100)"),
        (NOT_STATED, [MOCK, LOOPBACK], "local stand-in: login node on loopback (127.0.0.1); mock GPUs (Slurm GRES type "
                                       "mock_v100)"),
        # The stack's words narrow: kept beside what was observed, its own class prefix not repeated.
        ("local stand-in: LSF commands on Slurm", [LOOPBACK],
         "local stand-in: LSF commands on Slurm (observed: login node on loopback (127.0.0.1))"),
        ("a test cluster of the lab", [MOCK],
         "mock GPUs: a test cluster of the lab (observed: mock GPUs (Slurm GRES type mock_v100))"),
        # A fact seen twice is said once; the most telling class leads.
        ("real", [MOCK, LOOPBACK, MOCK, KWOK, None],
         "simulated nodes: KWOK nodes (kwok.x-k8s.io/node=fake): no container ran; login node on loopback "
         "(127.0.0.1); mock GPUs (Slurm GRES type mock_v100)"),
        ("real", [Fact(NOT_EXECUTED, "not executed: nothing ran"), MOTO],
         f"{MOTO.what}; not executed: nothing ran"),
    ],
)  # fmt: skip
def test_the_label_is_what_was_observed_and_what_the_stack_says(
    stated: str, facts: list[Fact | None], expected: str
) -> None:
    assert label(stated, facts) == expected


@pytest.mark.parametrize("fact", ONE_OF_EACH, ids=CLASSES)
@pytest.mark.parametrize("stated", ["real", "REAL", " real\n", "Real"])
def test_a_stack_cannot_upgrade_a_label(stated: str, fact: Fact) -> None:
    """Whatever class of stand-in was observed, a stack that says real is refused and never shown real."""
    assert label(stated, [fact]) != REAL and label(stated, [fact]).startswith(fact.kind)
    assert refusal(stated, [fact]).startswith(f"`real` is refused: Atlas observes a {fact.kind} here ({fact.what})")


@pytest.mark.parametrize("stated", ["local stand-in: mock GPUs", NOT_STATED, "", "not real at all"])
def test_a_stack_may_narrow_a_label(stated: str) -> None:
    for fact in (*ONE_OF_EACH, None):
        assert refusal(stated, [fact]) == ""
        assert label(stated, [fact]) != REAL
    assert refusal("real", []) == "" and refusal("real", [None]) == ""


def test_an_unknown_class_is_a_bug_here() -> None:
    with pytest.raises(ValueError, match="unknown provenance class 'cloudy'"):
        Fact("cloudy", "x")


# --- what is observed: loopback, mock GPU types ------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("LocalHost.", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost.example.com", False),
        ("127.0.0.1.evil.com", False),
        ("0x7f.1", True),  # glibc's resolver (inet_aton) connects it to 127.0.0.1
        ("10.0.0.1", False),
        ("satori-login-001.mit.edu", False),
        ("satori-site", False),  # an alias: its HostName decides (SshEndpoint.stand_in_facts)
        ("", False),
    ],
)
def test_loopback_is_the_host_itself_never_a_substring(host: str, loopback: bool) -> None:
    assert reaches_loopback_host(host) is loopback
    assert (loopback_host_fact("login node", host) is not None) is loopback


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("https://127.0.0.1:16443", True),
        ("http://localhost:16500/", True),
        ("http://[::1]:9000", True),
        ("http://user@localhost:1", True),
        ("http://localhost.example.com", False),
        ("http://127.0.0.1.evil.com", False),
        ("http://user@localhost@evil.example", False),
        ("https://api.cluster.example:6443", False),
        ("not a url", False),
        ("http://[::1", False),
    ],
)
def test_a_url_is_loopback_by_its_parsed_host(url: str, loopback: bool) -> None:
    assert reaches_loopback_url(url) is loopback
    assert (loopback_url_fact("Kubernetes API", url) is not None) is loopback


@pytest.mark.parametrize(
    ("gres", "types", "mock"),
    [
        ("gpu:mock_v100:4", ("mock_v100",), True),
        ("gpu:mock_v100:2(IDX:0-1)", ("mock_v100",), True),
        ("gpu:v100:4", ("v100",), False),
        ("gpu:v100:4,gpu:mock_v100:2(S:0)", ("v100", "mock_v100"), True),
        ("gpu:a100_3g.20gb:2", ("a100_3g.20gb",), False),
        ("gpu:4(S:0)", (), False),  # untyped: nothing says mock
        ("(null)", (), False),
    ],
)
def test_slurm_s_gres_types_say_which_gpus_are_mock(gres: str, types: tuple[str, ...], mock: bool) -> None:
    assert gpu_types(gres) == types
    (node,) = parse_sinfo_nodes(f"n1|idle|0/8/0/8|{gres}|(null)\n")
    assert (node.gpu_fact is not None) is mock
    if mock:
        assert node.gpu_fact == Fact(MOCK_GPUS, "mock GPUs (Slurm GRES type mock_v100)")


def test_lsf_s_gpu_model_says_which_gpus_are_mock() -> None:
    gpu = (
        "HOST_NAME status ngpus gpu_shared_avg_mut gpu_shared_avg_ut ngpus_physical\n"
        "hosta ok 2 - - 2\nhostb ok 1 - 5% 1\n"
    )
    gpuload = (
        "HOST_NAME gpuid gpu_model gpu_mode gpu_temp gpu_ecc gpu_ut gpu_mut gpu_mtotal gpu_mused gpu_pstate "
        "gpu_status gpu_error\n"
        "hosta 0 Mock_TeslaV100_SXM2_32GB 0.0 - - - - 32G - - busy -\n"
        "      1 Mock_TeslaV100_SXM2_32GB 0.0 - - - - 32G - - ok -\n"
        "hostb 0 TeslaV100_SXM2_32GB 0.0 - - 5% - 32G - - ok -\n"
    )
    nodes = {n.name: n for n in parse_lsload_gpu(gpu, gpuload)}
    assert nodes["hosta"].gpu_types == ("Mock_TeslaV100_SXM2_32GB",) and nodes["hosta"].gpus_allocated == 1
    assert nodes["hosta"].gpu_fact == Fact(MOCK_GPUS, "mock GPUs (LSF gpu_model Mock_TeslaV100_SXM2_32GB)")
    assert nodes["hostb"].gpu_fact is None
    # The nodes the steps ran on decide; before any ran, every node listed.
    assert mock_gpu_nodes(nodes.values(), {"hostb"}) is None
    assert mock_gpu_nodes(nodes.values(), {"hosta"}) == nodes["hosta"].gpu_fact
    assert mock_gpu_nodes(nodes.values()) == nodes["hosta"].gpu_fact
    assert mock_gpu_fact(["v100", "MOCK-a100"], "GPU type") == Fact(MOCK_GPUS, "mock GPUs (GPU type MOCK-a100)")


# --- HPC: the stack's words checked where the config is read and where the route is resolved --------


def hpc_values(host: str, provenance: str | None, tmp_path: Path) -> dict[str, Any]:
    env = {"host": host, "user": "u", "scheduler": "slurm", "known_hosts": f"{host} ssh-ed25519 AAAA",
           "private_key_file": str(tmp_path / "id_ed25519")}  # fmt: skip
    return {"hpc": {"satori": env | ({"provenance": provenance} if provenance is not None else {})}}


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.1.1"])
def test_real_for_a_login_node_on_loopback_is_refused_naming_the_key_and_the_fix(host: str, tmp_path: Path) -> None:
    with pytest.raises(AtlasConfigError) as refused:
        parse_stack_config("s", hpc_values(host, "real", tmp_path), Path("."))
    message = str(refused.value)
    assert message.startswith(
        f"atlas:hpc.satori.provenance: `real` is refused: Atlas observes a local stand-in here (login node on "
        f"loopback ({host})); a stack may narrow a label, never make a stand-in real; say what stands in instead"
    )
    assert "pulumi config set --path atlas:hpc.<name>.provenance 'local stand-in: Slurm on this host'" in message


@pytest.mark.parametrize(
    ("host", "provenance", "kept"),
    [
        ("127.0.0.1", "local stand-in: Slurm on this host", "local stand-in: Slurm on this host"),
        ("127.0.0.1", None, NOT_STATED),
        ("satori-login-001.mit.edu", "real", REAL),
        ("satori-login-001.mit.edu", " REAL ", REAL),
        ("localhost.example.com", "real", REAL),  # a remote host whose name begins with localhost
    ],
)
def test_what_a_stack_may_say(host: str, provenance: str | None, kept: str, tmp_path: Path) -> None:
    (hpc,) = parse_stack_config("s", hpc_values(host, provenance, tmp_path), Path(".")).hpc
    assert hpc.provenance == kept


def hop(host: str, name: str = "") -> SshHop:
    return SshHop(host=host, port=22, user="u", known_hosts="", known_hosts_source="test", name=name)


def endpoint(host: str, *jumps: SshHop) -> SshEndpoint:
    return SshEndpoint(host=host, port=22, user="u", known_hosts="", known_hosts_source="test", jumps=jumps)


@pytest.mark.parametrize(
    ("route", "facts"),
    [
        (endpoint("127.0.0.1"), ["login node on loopback (127.0.0.1)"]),
        (endpoint("login.example.org"), []),
        # The local site: a bastion on loopback, the login node on the bastion's loopback (this machine).
        (endpoint("127.0.0.1", hop("127.0.0.1", "atlas-bastion")),
         ["jump host atlas-bastion on loopback (127.0.0.1)", "login node on loopback (127.0.0.1)"]),
        # A remote bastion's own loopback is that machine, not this one.
        (endpoint("127.0.0.1", hop("gate.example.org", "gate")), []),
        # A tunnel on loopback to a remote site: never real either.
        (endpoint("login.example.org", hop("localhost", "tunnel")), ["jump host tunnel on loopback (localhost)"]),
    ],
)  # fmt: skip
def test_a_route_is_local_for_the_hops_reached_on_this_machine(route: SshEndpoint, facts: list[str]) -> None:
    assert [f.what for f in route.stand_in_facts()] == facts
    assert all(f.kind == LOCAL_STAND_IN for f in route.stand_in_facts())


def test_an_alias_that_resolves_to_loopback_cannot_be_called_real(home: Path) -> None:
    """The local site's shape: `satori-site` through `atlas-bastion`, both HostName 127.0.0.1."""
    (home / ".ssh" / "config").write_text(
        "Host atlas-bastion\n    HostName 127.0.0.1\n    Port 16023\n    User gate\n"
        "Host satori-site\n    HostName 127.0.0.1\n    Port 16022\n    User atlas\n    ProxyJump atlas-bastion\n"
        "    IdentityFile ~/.ssh/id\n"
    )
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIGZ0b2tlbnRvYmVyZXBsYWNlZGJ5YXJlYWxrZXk="
    (home / ".ssh" / "known_hosts").write_text(
        f"[127.0.0.1]:16023 ssh-ed25519 {key}\n[127.0.0.1]:16022 ssh-ed25519 {key}\n"
    )
    route = resolve_endpoint(HpcTarget(host="satori-site", user=None, scheduler="slurm"), "atlas:hpc.site")
    expected = (
        "atlas:hpc.site.provenance: `real` is refused: Atlas observes a local stand-in here (jump host atlas-bastion "
        "on loopback (127.0.0.1); login node on loopback (127.0.0.1))"
    )
    with pytest.raises(HpcConfigError) as refused:
        refuse_real_route("real", route, "atlas:hpc.site")
    assert str(refused.value).startswith(expected)
    refuse_real_route("local stand-in: the local site", route, "atlas:hpc.site")  # narrowing is fine


# --- every reader: outputs, records, monitor, devices --------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "more", "expected"),
    [
        ({}, [], REAL),
        ({}, [MOCK], "mock GPUs (Slurm GRES type mock_v100)"),  # a stack's `real` never survives a fact
        ({"host": "127.0.0.1"}, [], "local stand-in: login node on loopback (127.0.0.1)"),
        # Outputs written by an older Atlas, or a program of the user's: the host itself is checked.
        ({"host": "127.0.0.1", "provenance": "local stand-in: LSF on Slurm"}, [MOCK],
         "local stand-in: LSF on Slurm (observed: login node on loopback (127.0.0.1); mock GPUs (Slurm GRES type "
         "mock_v100))"),
        # What the program observed of an alias's route, kept in the outputs.
        ({"host": "satori-site", "provenance": NOT_STATED,
          "observed": ("jump host atlas-bastion on loopback (127.0.0.1)", "login node on loopback (127.0.0.1)")}, [],
         "local stand-in: jump host atlas-bastion on loopback (127.0.0.1); login node on loopback (127.0.0.1)"),
    ],
)  # fmt: skip
def test_an_hpc_side_s_label_is_derived_by_every_reader(
    changes: dict[str, Any], more: list[Fact], expected: str
) -> None:
    outputs = dataclasses.replace(HPC, **changes)
    assert outputs.label(*more) == expected
    written = HpcOutputs(**{**vars(outputs)})
    assert written.label(*more) == expected


@pytest.mark.parametrize(
    ("changes", "run", "expected"),
    [
        ({}, REAL, REAL),
        ({"executed": False, "not_executed_reason": "execute: false"}, "not executed: execute: false", REAL),
        ({"emulated": True, "endpoint_url": "http://127.0.0.1:16500", "executed": False,
          "not_executed_reason": "moto runs nothing"},
         f"{MOTO.what}; not executed: moto runs nothing", MOTO.what),
        # An endpoint on loopback is moto whatever the flag says.
        ({"endpoint_url": "http://localhost:16500"},
         "moto, an AWS API stand-in at http://localhost:16500: its instances exist only as API records",
         "moto, an AWS API stand-in at http://localhost:16500: its instances exist only as API records"),
        ({"endpoint_url": "https://ec2.us-east-1.amazonaws.com"}, REAL, REAL),
    ],
)  # fmt: skip
def test_an_aws_side_is_labelled_from_its_outputs(changes: dict[str, Any], run: str, expected: str) -> None:
    outputs: AwsOutputs = dataclasses.replace(AWS, **changes)
    assert outputs.label() == run and outputs.label(run=False) == expected


def node(name: str, *, kwok: bool = False, local: bool = False, mock: bool = False) -> NodeRecord:
    labels = (("atlas.dev/node-kind", "kubelet"),) if local else ()
    return NodeRecord(name, kwok, None, 4, labels, gpu_mock=mock)


NODES = {
    "atlas-node": node("atlas-node", local=True, mock=True),
    "kwok-gpu-0": node("kwok-gpu-0", kwok=True),
    "gpu-7": node("gpu-7"),
    "mock-elsewhere": node("mock-elsewhere", mock=True),
}
REMOTE_API = "https://api.cluster.example:6443"
LOCAL_API = "https://127.0.0.1:16443"


@pytest.mark.parametrize(
    ("api", "used", "unread", "expected"),
    [
        (REMOTE_API, set(), "", "not executed: no step's pod ran on a node"),
        (REMOTE_API, {"gpu-7"}, "", REAL),
        (LOCAL_API, {"gpu-7"}, "", f"local stand-in: Kubernetes API on loopback ({LOCAL_API})"),
        (REMOTE_API, {"kwok-gpu-0"}, "", "simulated nodes: KWOK nodes (kwok.x-k8s.io/node=fake): no container ran"),
        (REMOTE_API, {"mock-elsewhere"}, "", "mock GPUs (node label atlas.dev/gpu-mock=true)"),
        (LOCAL_API, {"atlas-node"}, "",
         f"local stand-in: Kubernetes API on loopback ({LOCAL_API}); a node of Atlas's local environment (label "
         "atlas.dev/node-kind=kubelet); mock GPUs (node label atlas.dev/gpu-mock=true)"),
        (REMOTE_API, {"gpu-7", "kwok-gpu-0"}, "",
         "simulated nodes: KWOK nodes (kwok.x-k8s.io/node=fake): no container ran"),
        # A node Atlas cannot see, or nodes it may not read: never real.
        (REMOTE_API, {"gone"}, "", "node gone not listed: what ran the steps is not known"),
        (REMOTE_API, {"gpu-7"}, "forbidden", NODES_UNREAD),
        (LOCAL_API, {"gpu-7"}, "forbidden",
         f"local stand-in: {NODES_UNREAD} (observed: Kubernetes API on loopback ({LOCAL_API}))"),
    ],
)  # fmt: skip
def test_a_kubernetes_side_is_what_its_api_and_its_steps_nodes_are(
    api: str, used: set[str], unread: str, expected: str
) -> None:
    assert kube_provenance(api, used, NODES, unread) == expected


def test_an_hpc_monitor_reads_no_use_of_mock_gpus_and_says_what_they_are() -> None:
    """A sampler's reading beside mock GPUs is not their use: the node says why, and the label says mock."""

    class Poller:
        interval_s = 30.0

        def poll(self) -> HpcPoll:
            step = StepRecord("train", "1", "RUNNING", 10.0, 11.0, 11.0, None, None, "", 1, 1, "vm", False, None, "t")
            telemetry = StepTelemetry((12.0,), (50.0,), (1.0,), (97.0,), ())
            nodes = parse_sinfo_nodes("vm|mixed|1/7/0/8|gpu:mock_v100:4|gpu:mock_v100:1(IDX:0)\n")
            return HpcPoll(20.0, (step,), tuple(nodes), {"train": telemetry}, LogTail(), ("squeue",))

    outputs = dataclasses.replace(HPC, host="127.0.0.1", provenance="local stand-in: Slurm on this host")
    view = HpcEnvironmentSource("satori", outputs, Poller()).view(20.0, ViewContext(None))  # type: ignore[arg-type]
    (train,) = view.steps
    assert train.gpu_util_percent is None and train.reasons.gpu_util_percent == MOCK_GPU
    assert train.cpu_percent == 50.0  # what the sampler read of the step's own processes stands
    (vm,) = view.nodes
    assert vm.gpu_util_percent is None and vm.util_source == "not measured: mock GPUs (Slurm GRES type mock_v100)"
    expected = ("local stand-in: Slurm on this host (observed: login node on loopback (127.0.0.1); mock GPUs (Slurm "
                "GRES type mock_v100))")  # fmt: skip
    assert vm.provenance == expected and view.provenance == expected


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        ({"hostname": "gpu-vm", "gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB, 580.1"]},
         "device run: imported from run-1, run by bench/biggan_h200.py on gpu-vm, no scheduler or cluster; GPUs as "
         "nvidia-smi named them: NVIDIA H100 80GB HBM3, 81559 MiB, 580.1"),
        ({"hostname": "cpu-vm"},
         "device run: imported from run-1, run by bench/biggan_h200.py on cpu-vm, no scheduler or cluster; no GPU "
         "recorded (nvidia-smi named none)"),
        ({}, "device run: imported from run-1, run by bench/biggan_h200.py on an unnamed machine, no scheduler or "
             "cluster; no GPU recorded (nvidia-smi named none)"),
    ],
)  # fmt: skip
def test_a_device_run_is_labelled_an_import_from_what_its_manifest_recorded(
    machine: dict[str, Any], expected: str
) -> None:
    assert device_provenance(machine, "run-1") == expected
    assert expected.startswith(DEVICE_RUN)


def test_hpc_nodes_carry_their_gpu_types() -> None:
    assert HpcNode("n", "idle", 4, 0, None, "x").gpu_fact is None
