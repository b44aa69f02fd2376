"""infra.outputs: each kind's typed outputs are written and read back unchanged; outputs of version 1
(before the typed contract) are read with their one `gpus` field mapped to the named fields; an
unknown version, a missing field or a wrong type is refused naming the key and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.kinds import read_stack_outputs
from infra.outputs import (
    OUTPUTS_VERSION,
    AwsInstance,
    AwsOutputs,
    AwsStaging,
    BatchStep,
    ContainerRuntime,
    FilesAt,
    HpcOutputs,
    KubernetesOutputs,
    KubeStep,
    OutputsError,
    RunOutputs,
    SifConversion,
    read_environment,
)

RECORDED = json.loads((Path(__file__).parent / "data" / "compare" / "stack_outputs.json").read_text())

HPC = HpcOutputs(
    gpus_requested=2,
    run_id="7",
    scheduler="slurm",
    host="login.example.org",
    port=22,
    user="alice",
    run_dir="atlas-runs/s/satori/probe",
    steps=(BatchStep("train", "123", "normal", "ab" * 32, "2026-12-04T10:00:00Z"),),
    telemetry=FilesAt("atlas-runs/s/satori/probe/telemetry"),
    logs=FilesAt("atlas-runs/s/satori/probe/logs"),
    provenance="real",
)
KUBE = KubernetesOutputs(
    gpus_requested=1,
    run_id="7",
    flavour="openshift",
    namespace="atlas-probe",
    steps=(KubeStep("train", "openshift-pipeline-train-1a2b", "uid-1"),),
    telemetry=FilesAt("telemetry/", "openshift-results-1a2b"),
    logs=FilesAt("logs/", "openshift-logs-1a2b"),
    api_url="https://api.example.org:6443",
    gpu_product="Tesla-V100-SXM2-32GB",
)
AWS = AwsOutputs(
    gpus_requested=1,
    run_id="7",
    region="us-east-1",
    instance_type="p3.8xlarge",
    instances=(AwsInstance("i-1", "p3.8xlarge", "running"), AwsInstance("i-2", "p3.8xlarge", "running")),
    gpus_per_instance=4,
    steps=HPC.steps,
    executed=True,
    staging=AwsStaging("b", "atlas/s/aws/probe", 9),
    batch=HPC,
)


# An HPC side that ran its steps under Apptainer: the image by digest, its SIF and the conversion.
HPC_APPTAINER = HpcOutputs(
    **{
        **{f: getattr(HPC, f) for f in ("gpus_requested", "run_id", "scheduler", "host", "port", "user", "run_dir",
                                        "steps", "telemetry", "logs", "provenance")},
        "runtime": ContainerRuntime(
            "apptainer", "r.example.org/atlas/probe@sha256:" + "ab" * 32, "sha256:" + "ab" * 32, "1.4.0",
            "/home/alice/.atlas/sif/sha256-" + "ab" * 32 + ".sif", "ppc64le",
            SifConversion(41.5, "2026-12-05T17:00:00Z", "s", converted_now=True),
        ),
    }
)  # fmt: skip


@pytest.mark.parametrize(
    "outputs", [HPC, HPC_APPTAINER, KUBE, AWS], ids=["hpc-bare", "hpc-apptainer", "kubernetes", "aws"]
)
def test_each_kind_reads_back_what_its_component_writes(outputs: Any) -> None:
    written = json.loads(json.dumps(outputs.to_dict()))  # as `pulumi stack output --json` gives it
    assert written["kind"] == outputs.kind and written["version"] == OUTPUTS_VERSION
    atlas = {"stack": "s", "workload": "probe", "version": 2}
    stack = read_stack_outputs({"atlas": atlas, "environments": {"e": written}})
    assert stack.environments["e"] == outputs
    assert stack.run == RunOutputs(stack="s", workload="probe")


def test_the_gpus_a_workload_asks_for_and_the_gpus_an_instance_has_are_two_fields() -> None:
    assert (AWS.gpus_requested, AWS.gpus_per_instance, AWS.gpus_total) == (1, 4, 8)
    assert "gpus" not in AWS.to_dict() and "gpus" not in HPC.to_dict()


def test_version_1_outputs_are_read_with_gpus_named_by_what_they_were() -> None:
    stack = read_stack_outputs(RECORDED)
    kube, lsf = stack.environments["openshift"], stack.environments["satori"]
    assert isinstance(kube, KubernetesOutputs) and isinstance(lsf, HpcOutputs)
    assert kube.gpus_requested == RECORDED["environments"]["openshift"]["gpus"]
    assert lsf.gpus_requested == RECORDED["environments"]["satori"]["gpus"] and lsf.run_id == ""
    assert [s.job_id for s in lsf.steps] == [s["job_id"] for s in RECORDED["environments"]["satori"]["steps"]]
    # Version 1's AWS `gpus` was the instance type's; its flat SSH fields become the batch side.
    v1_aws = {**{k: v for k, v in AWS.to_dict().items() if k not in ("version", "batch", "gpus_requested")},
              "gpus": 4, "scheduler": "slurm", "host": "203.0.113.9", "port": 22, "user": "ubuntu",
              "known_hosts": "203.0.113.9 ssh-ed25519 AAAA", "run_dir": "r", "telemetry": {"path": "r/t"},
              "logs": {"path": "r/l"}}  # fmt: skip
    aws = read_environment(AwsOutputs, v1_aws, "aws")
    assert (aws.gpus_per_instance, aws.gpus_requested) == (4, 0)
    assert aws.batch is not None and aws.batch.host == "203.0.113.9" and aws.batch.steps == aws.steps


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 3}, r"environments\.e\.version: outputs of version 3, this Atlas reads versions 1, 2; use the "
                         r"Atlas that wrote them, or run `pulumi up` with this one"),
        ({"version": "2"}, r"environments\.e\.version: outputs of version '2'"),
        ({"host": None}, r"environments\.e\.host: missing"),
        ({"port": "twenty-two"}, r"environments\.e\.port: expected a whole number, found 'twenty-two'"),
        ({"steps": {"name": "train"}}, r"environments\.e\.steps: expected a list"),
        ({"steps": [{"job_id": "1"}]}, r"environments\.e\.steps\[0\]\.name: missing"),
        ({"telemetry": "t/"}, r"environments\.e\.telemetry: expected an object"),
    ],
)
def test_outputs_it_cannot_read_are_refused_naming_the_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(OutputsError, match=message):
        read_stack_outputs({"environments": {"e": {**HPC.to_dict(), **change}}})


def test_the_stacks_own_version_applies_where_an_environment_says_none() -> None:
    bare = {k: v for k, v in HPC.to_dict().items() if k != "version"}
    with pytest.raises(OutputsError, match=r"atlas\.version: outputs of version 9"):
        read_stack_outputs({"atlas": {"version": 9}, "environments": {"e": bare}})
    assert read_stack_outputs({"atlas": {"version": 2}, "environments": {"e": bare}}).environments["e"] == HPC


def test_hpc_outputs_without_a_runtime_read_as_bare_and_a_conversion_may_be_absent() -> None:
    """Outputs written before Atlas recorded a runtime (the recorded stack's) ran bare; an Apptainer
    side whose SIF has no conversion record exports `conversion: null`."""
    satori = read_stack_outputs(RECORDED).environments["satori"]
    assert "runtime" not in RECORDED["environments"]["satori"]
    assert isinstance(satori, HpcOutputs) and satori.runtime == ContainerRuntime() and satori.runtime.name == "bare"
    written = json.loads(json.dumps(HPC_APPTAINER.to_dict()))
    written["runtime"]["conversion"] = None
    read = read_environment(HpcOutputs, written, "satori")
    assert read.runtime.conversion is None and read.runtime.digest == HPC_APPTAINER.runtime.digest
    written["runtime"]["conversion"] = {"seconds": "slow"}
    with pytest.raises(OutputsError, match=r"satori\.runtime\.conversion\.seconds: expected a number"):
        read_environment(HpcOutputs, written, "satori")
