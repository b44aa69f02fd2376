"""infra.compare.runtimes: what ran where. Each side's runtime and image digest (an HPC side's from
its outputs, outputs from before Atlas recorded one read as bare; the Kubernetes side's from the
nodes that ran its step pods), whether the digests are equal across the sides that ran in an
image, and each SIF conversion once per (site, digest), never a 0 for a time not recorded; then
the Markdown section (golden), HTML and JSON.

The golden file is rewritten by running this module with ATLAS_UPDATE_GOLDEN=1 (then review the
difference).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from infra.compare import cost_files, metrics, render
from infra.compare.kube_records import records_from_api
from infra.compare.records import EnvironmentRecords, Missing, NodeRecord, RuntimeRecord, without_records
from infra.compare.runtimes import (
    NO_CONVERSION_RECORD,
    NO_CONVERSION_TIME,
    bare_runtime,
    conversion_rows,
    hpc_runtime,
    kube_runtime,
    short_digest,
    what_ran_where,
)
from infra.kinds import read_stack_outputs
from infra.outputs import ContainerRuntime, HpcOutputs, KubernetesOutputs, SifConversion

DATA = Path(__file__).parent / "data" / "compare"
GOLDEN = Path(__file__).parent / "golden"
RECORDED = json.loads((DATA / "stack_outputs.json").read_text())

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
IMAGE = f"127.0.0.1:16510/atlas-local/probe@{DIGEST}"
KUBE = KubernetesOutputs(
    gpus_requested=1,
    flavour="kubernetes",
    namespace="atlas-local",
    steps=(),
    telemetry=read_stack_outputs(RECORDED).environments["openshift"].telemetry,  # type: ignore[attr-defined]
    logs=read_stack_outputs(RECORDED).environments["openshift"].logs,  # type: ignore[attr-defined]
    api_url="https://127.0.0.1:16443",
    image=IMAGE,
)


def node(name: str, runtime: str = "containerd://2.0.1", arch: str = "amd64", simulated: bool = False) -> NodeRecord:
    return NodeRecord(name, simulated, None, None, (), container_runtime=runtime, architecture=arch)


def hpc(name: str, runtime: ContainerRuntime, host: str = "127.0.0.1", port: int = 16022) -> HpcOutputs:
    return HpcOutputs(
        gpus_requested=1, scheduler="slurm", host=host, port=port, user="atlas", run_dir="r", steps=(),
        telemetry=KUBE.telemetry, logs=KUBE.logs, runtime=runtime,
    )  # fmt: skip


def apptainer(
    digest: str = DIGEST, conversion: SifConversion | None = None, version: str = "1.4.0"
) -> ContainerRuntime:
    return ContainerRuntime(
        "apptainer", image=f"127.0.0.1:16510/atlas-local/probe@{digest}", digest=digest, version=version,
        sif=f"/home/atlas/.atlas/sif/{digest.replace(':', '-')}.sif", arch="amd64", conversion=conversion,
    )  # fmt: skip


def side(name: str, runtime: RuntimeRecord) -> EnvironmentRecords:
    records = without_records(name, "hpc", "Slurm over SSH", "not executed: test", ())
    return dataclasses.replace(records, runtime=runtime)


# --- the Kubernetes side: its nodes' runtime, its image's digest ---------------------------------


@pytest.mark.parametrize(
    ("image", "used", "nodes", "unread", "expected"),
    [
        pytest.param(IMAGE, ["n1"], [node("n1")], "",
                     dict(name="containerd", version="2.0.1", arch="amd64", in_image=True, digest=DIGEST),
                     id="containerd-by-digest"),
        pytest.param(IMAGE, ["n1", "n2"], [node("n1", "cri-o://1.29.1"), node("n2", "cri-o://1.29.1")], "",
                     dict(name="cri-o", version="1.29.1", in_image=True), id="cri-o-on-two-nodes"),
        pytest.param("image-registry.svc:5000/ns/probe:abc", ["n1"], [node("n1")], "",
                     dict(digest="", digest_note="not known (image by tag)", in_image=True), id="image-by-tag"),
        pytest.param(IMAGE, ["n1"], [], "the identity may not get nodes (403)",
                     dict(name="", note="not read: the identity may not get nodes (403)", in_image=True, arch=""),
                     id="nodes-forbidden"),
        pytest.param(IMAGE, ["n1"], [node("n2")], "",
                     dict(name="", note="not read: node n1 is gone from the API", in_image=True), id="node-gone"),
        pytest.param(IMAGE, ["kwok-0"], [node("kwok-0", "kwok-v0.8.0", simulated=True)], "",
                     dict(name="simulated", note="simulated nodes (kwok-v0.8.0): no container ran", in_image=False),
                     id="kwok"),
        pytest.param(IMAGE, [], [], "",
                     dict(name="", note="not run: no step's pod ran on a node", in_image=False), id="nothing-ran"),
        pytest.param(IMAGE, ["n1"], [node("n1", runtime="")], "",
                     dict(name="", note="not read: the nodes' status.nodeInfo.containerRuntimeVersion is empty"),
                     id="empty-node-info"),
    ],
)  # fmt: skip
def test_the_kubernetes_runtime_is_what_the_step_pods_nodes_report(
    image: str, used: list[str], nodes: list[NodeRecord], unread: str, expected: dict[str, Any]
) -> None:
    record = kube_runtime("openshift", dataclasses.replace(KUBE, image=image), used, nodes, unread)
    assert {key: getattr(record, key) for key in expected} == expected


def test_the_kubernetes_records_read_the_runtime_from_the_nodes_that_ran_the_steps() -> None:
    """The recorded run's API answers, its nodes turned into one real node (kubelet, containerd)."""
    jobs = json.loads((DATA / "k8s_jobs.json").read_text())
    pods = json.loads((DATA / "k8s_pods.json").read_text())
    nodes = copy.deepcopy(json.loads((DATA / "k8s_nodes.json").read_text())["items"])
    for item in nodes:
        item["metadata"]["annotations"] = {}
        item["metadata"]["labels"] = {"atlas.dev/node-kind": "kubelet"}
        item["status"]["nodeInfo"]["containerRuntimeVersion"] = "containerd://2.0.1"
    outputs = dataclasses.replace(read_stack_outputs(RECORDED).environments["openshift"], image=IMAGE)  # type: ignore[type-var]
    records = records_from_api("openshift", outputs, jobs, pods, {"items": []}, nodes)
    assert not isinstance(records.steps, Missing)
    assert (records.runtime.name, records.runtime.version, records.runtime.arch) == ("containerd", "2.0.1", "amd64")
    assert records.runtime.digest == DIGEST and records.runtime.in_image
    assert "status.nodeInfo.containerRuntimeVersion" in records.runtime.source


# --- the HPC side: its outputs' runtime; outputs from before it read as bare ---------------------


def test_hpc_outputs_written_before_the_runtime_was_recorded_read_as_bare() -> None:
    raw = RECORDED["environments"]["satori"]
    assert "runtime" not in raw  # written before this change
    outputs = read_stack_outputs(RECORDED).environments["satori"]
    assert isinstance(outputs, HpcOutputs) and outputs.runtime == ContainerRuntime()
    record = hpc_runtime("satori", outputs)
    assert (record.name, record.in_image, record.digest) == ("bare", False, "")


def test_an_apptainer_side_carries_its_digest_sif_and_conversion() -> None:
    conversion = SifConversion(41.5, "2026-12-05T17:00:00Z", "local", converted_now=True)
    record = hpc_runtime("satori", hpc("satori", apptainer(conversion=conversion)))
    assert (record.name, record.version, record.digest, record.arch) == ("apptainer", "1.4.0", DIGEST, "amd64")
    assert record.in_image and record.site == "127.0.0.1:16022" and record.conversion == conversion


# --- the digests line: equal, different, unknown, bare -------------------------------------------

KUBE_SIDE = RuntimeRecord("containerd", "2.0.1", IMAGE, DIGEST, arch="amd64", in_image=True, source="api")
BY_TAG = dataclasses.replace(KUBE_SIDE, image="r/probe:abc", digest="", digest_note="not known (image by tag)")


@pytest.mark.parametrize(
    ("sides", "same", "lines"),
    [
        pytest.param(
            {"openshift": KUBE_SIDE, "satori": hpc_runtime("satori", hpc("satori", apptainer())),
             "satori-slurm": hpc_runtime("satori-slurm", hpc("satori-slurm", apptainer()))},
            True,
            [f"Same image on openshift, satori, satori-slurm: {short_digest(DIGEST)}; "
             "between them the comparison is of platforms."],
            id="one-digest",
        ),
        pytest.param(
            {"openshift": KUBE_SIDE, "satori": hpc_runtime("satori", hpc("satori", apptainer(OTHER))),
             "aws": bare_runtime("aws")},
            False,
            [f"Digests differ: {short_digest(DIGEST)} on openshift; {short_digest(OTHER)} on satori. Only sides of "
             "one digest compare platforms alone; across digests the software stack differs too.",
             "Ran bare (the site's own Python and libraries): aws; a comparison with it is of the platform and "
             "the software stack together."],
            id="two-digests-and-bare",
        ),
        pytest.param(
            {"openshift": BY_TAG, "satori": hpc_runtime("satori", hpc("satori", apptainer()))},
            None,
            ["Only satori ran in an image of known digest: no two sides to compare digests.",
             "Digest not known: openshift (not known (image by tag))."],
            id="by-tag",
        ),
        pytest.param(
            {"openshift": dataclasses.replace(KUBE_SIDE, name="simulated", note="simulated nodes (kwok): no "
                                              "container ran", in_image=False)},
            None,
            ["No side ran in an image of known digest: no digests to compare.",
             "Not counted (no step known to have run in its image): openshift (simulated nodes (kwok): no "
             "container ran)."],
            id="simulated",
        ),
    ],
)  # fmt: skip
def test_the_digests_line_says_which_sides_ran_one_image(
    sides: dict[str, RuntimeRecord], same: bool | None, lines: list[str]
) -> None:
    found = what_ran_where([side(name, record) for name, record in sides.items()], "local")
    assert found.same_image is same
    assert list(found.digests) == lines


# --- SIF conversions: once per (site, digest), never 0 for a time not recorded -------------------


@pytest.mark.parametrize(
    ("runtimes", "expected"),
    [
        pytest.param(
            # Both environments of one login node share the SIF: one converted it, the other waited.
            [("satori", apptainer(conversion=SifConversion(41.5, "2026-12-05T17:00:00Z", "local", True)), 16022),
             ("satori-slurm", apptainer(conversion=SifConversion(41.5, "2026-12-05T17:00:00Z", "local", False)),
              16022)],
            [("127.0.0.1:16022", ("satori", "satori-slurm"), 41.5, None, "converted by this stack's `up` (local)")],
            id="one-site-two-environments",
        ),
        pytest.param(
            [("satori", apptainer(conversion=SifConversion(40.0, "2026-12-04T09:00:00Z", "other", False)), 16022)],
            [("127.0.0.1:16022", ("satori",), 40.0, None,
              "found in the cache: this `up` did not convert it (converted earlier by other)")],
            id="found-in-the-cache",
        ),
        pytest.param(
            [("satori", apptainer(conversion=SifConversion(None, "", "", False)), 16022)],
            [("127.0.0.1:16022", ("satori",), None, NO_CONVERSION_TIME,
              "found in the cache: this `up` did not convert it (who converted it is not recorded)")],
            id="sif-made-by-hand",
        ),
        pytest.param(
            [("satori", apptainer(conversion=None), 16022)],
            [("127.0.0.1:16022", ("satori",), None, NO_CONVERSION_RECORD, "not recorded")],
            id="no-record-in-the-outputs",
        ),
        pytest.param(
            [("satori", apptainer(conversion=SifConversion(41.5, "t", "local", True)), 16022),
             ("moc-slurm", apptainer(conversion=SifConversion(12.0, "t", "local", True)), 22)],
            [("127.0.0.1:16022", ("satori",), 41.5, None, "converted by this stack's `up` (local)"),
             ("127.0.0.1:22", ("moc-slurm",), 12.0, None, "converted by this stack's `up` (local)")],
            id="two-sites",
        ),
    ],
)  # fmt: skip
def test_each_sif_conversion_is_reported_once_per_site_and_digest(
    runtimes: list[tuple[str, ContainerRuntime, int]], expected: list[tuple[Any, ...]]
) -> None:
    envs = [side(name, hpc_runtime(name, hpc(name, runtime, port=port))) for name, runtime, port in runtimes]
    rows = conversion_rows(envs, "local")
    found = [(r.site, r.environments, r.seconds.value, r.seconds.note or None, r.origin) for r in rows]
    assert found == expected
    for row in rows:
        assert row.digest == DIGEST
        assert row.seconds.value is None or row.seconds.value > 0  # a missing reading is never a 0
        text = render.format_value(row.seconds, render.Sources())
        assert text.startswith("not recorded: ") if row.seconds.value is None else text.endswith(" s [1]")


def test_a_bare_side_has_no_conversion() -> None:
    envs = [side("satori", hpc_runtime("satori", hpc("satori", ContainerRuntime())))]
    assert conversion_rows(envs, "local") == ()


# --- rendering ----------------------------------------------------------------------------------


def _report() -> Any:
    envs = [
        side("openshift", KUBE_SIDE),
        side("satori", hpc_runtime("satori", hpc("satori", apptainer(conversion=SifConversion(
            41.5, "2026-12-05T17:00:00Z", "local", True))))),
        side("satori-slurm", hpc_runtime("satori-slurm", hpc("satori-slurm", apptainer(conversion=SifConversion(
            41.5, "2026-12-05T17:00:00Z", "local", False))))),
        side("aws", bare_runtime("aws")),
    ]  # fmt: skip
    return metrics.build_report(
        envs, cost_files.load_cost_profiles(), cost_files.load_rate_table(), {"stack": "local"}
    )


def test_the_markdown_section_matches_its_golden_file() -> None:
    markdown = render.render_markdown(_report(), (), {})
    section = markdown[markdown.index("## What ran where") :]
    section = section[: section.index("\n## ", 1) + 1]
    golden = GOLDEN / "what-ran-where-section.md"
    if os.environ.get("ATLAS_UPDATE_GOLDEN") == "1":
        golden.write_text(section)
    assert section == golden.read_text(), f"{golden} differs; if intended, rerun with ATLAS_UPDATE_GOLDEN=1"


def test_html_and_json_carry_the_same_table_the_json_the_full_digest() -> None:
    report = _report()
    page = render.render_html(report, ())
    assert "<h2>What ran where</h2>" in page and "<th>image digest</th>" in page
    assert f"<td>{short_digest(DIGEST)}</td>" in page and "Apptainer 1.4.0" in page
    assert "<h3>SIF conversions" in page and "41.5 s" in page
    data = json.loads(render.render_json(report))
    rows = {r["environment"]: r for r in data["what_ran_where"]["rows"]}
    assert rows["satori"]["digest"] == DIGEST and rows["satori"]["digest_text"] == short_digest(DIGEST)
    assert rows["aws"]["runtime"].startswith("bare") and rows["aws"]["digest"] == ""
    assert data["what_ran_where"]["same_image"] is True
    (conversion,) = data["what_ran_where"]["conversions"]
    assert conversion["seconds"]["value"] == 41.5 and conversion["environments"] == ["satori", "satori-slurm"]
    lines = render.summary_renderables(report)
    same = "Same image on openshift, satori, satori-slurm"
    assert any(isinstance(line, str) and line.startswith(same) for line in lines)
