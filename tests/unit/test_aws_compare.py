"""scripts/compare with an AWS environment beside the others: AWS's dated rate, and for runs that
were not executed (moto), every figure not measured with the reason, nothing invented."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from infra.cli import compare as cli
from infra.cli import stack_files
from infra.compare import economics, metrics, report_model
from infra.compare.access import Access
from infra.compare.cost_files import load_cost_profiles, load_rate_table
from infra.compare.records import EnvironmentRecords, Missing
from infra.compare.render import render_markdown, summary_table
from infra.config import parse_stack_config
from infra.kinds import collect_environments, read_stack_outputs
from infra.outputs import AwsOutputs, read_environment
from tests.support import project_with_workloads

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl atlas\n"

AWS_OUTPUTS: dict[str, Any] = {
    "kind": "aws",
    "region": "us-east-1",
    "endpoint_url": "http://127.0.0.1:16500",
    "emulated": True,
    "market": "on-demand",
    "instance_type": "p3.8xlarge",
    "instance_count": 1,
    "instance_ids": ["i-0abc"],
    "instances": [{"id": "i-0abc", "type": "p3.8xlarge", "state": "running"}],
    "gpus": 4,
    "gpus_total": 4,
    "gpu_product": "Tesla-V100-SXM2-16GB",
    "bucket": "atlas-local-hybrid-aws-1a2b3c4d",
    "staging": {"bucket": "atlas-local-hybrid-aws-1a2b3c4d", "prefix": "atlas/local-hybrid/aws/probe", "objects": 9},
    "executed": False,
    "not_executed_reason": "http://127.0.0.1:16500 is an AWS API stand-in (moto): its instances run nothing",
    "steps": [{"name": "train", "state": "not-executed"}],
}


def _numbers(value: Any) -> list[float]:
    """Every measured number inside a metrics dataclass tree."""
    found: list[float] = []
    if isinstance(value, report_model.Value):
        return [value.value] if value.value is not None else []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            found += _numbers(getattr(value, f.name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found += _numbers(item)
    return found


def test_not_executed_aws_is_reported_beside_the_others_with_its_rate_and_no_invented_numbers(
    tmp_path: Path,
) -> None:
    outputs = {
        "atlas": {"stack": "local-hybrid", "workload": "probe", "run_id": "1"},
        "environments": {"aws": AWS_OUTPUTS},
    }
    records = collect_environments(read_stack_outputs(outputs), Access(tmp_path), tmp_path / "raw")
    assert [r.kind for r in records] == ["aws"]
    aws = records[0]
    assert isinstance(aws.steps, Missing) and aws.steps.reason.startswith("not executed: ")
    assert "moto" in aws.platform and "not executed" in aws.platform and aws.cloud_rate == "aws-p3.8xlarge"

    report = metrics.build_report(records, load_cost_profiles(), load_rate_table(), outputs["atlas"])
    env = report.environments[0]
    economics = env.economics
    # AWS's price, from the dated table, marked as an assumption as the table says.
    assert economics.profile == "cloud rate aws-p3.8xlarge"
    assert economics.usd_per_gpu_hour.value == pytest.approx(3.06) and economics.usd_per_gpu_hour.kind == "assumption"
    assert "rates.yaml" in economics.usd_per_gpu_hour.source and "2024-06" in economics.usd_per_gpu_hour.source
    assert economics.cost_per_run.value is None and economics.cost_per_run.note.startswith("not executed")
    # The rate per GPU-hour is the only number about the AWS side: no time, throughput or cost of a run.
    assert _numbers(env) == [pytest.approx(3.06)]
    assert any(n.startswith("aws: not executed") for n in report.notes)

    markdown = render_markdown(report, (), {})
    assert "not executed: http://127.0.0.1:16500 is an AWS API stand-in (moto)" in markdown
    assert "cloud rate aws-p3.8xlarge" in markdown and "$3.06/GPU-h (rate assumed)" in markdown
    table = summary_table(report)
    assert table.row_count == 1


def test_executed_aws_records_are_priced_by_the_cloud_rate() -> None:
    from infra.compare import aws_collector

    hpc_like = EnvironmentRecords(
        name="aws",
        kind="hpc",
        platform="Slurm over SSH",
        gpus=4,
        gpu_product=None,
        steps=(),
        telemetry={},
        training=Missing("x"),
        staging=Missing("x"),
        cost_profile="satori",
    )
    outputs = read_environment(AwsOutputs, {**AWS_OUTPUTS, "executed": True, "emulated": False}, "aws")
    aws = aws_collector.as_aws(hpc_like, outputs)
    assert aws.kind == "aws" and aws.cost_profile == "" and aws.cloud_rate == "aws-p3.8xlarge"
    assert aws.platform == "Slurm over SSH on AWS EC2 1 x p3.8xlarge on-demand, us-east-1"
    step = report_model.StepMetrics(
        "train", "1", "COMPLETED", 0,
        *(report_model.Value(0.0, "Unix s", "squeue") for _ in range(4)),
        report_model.Value(5.0, "s", "squeue"), report_model.Value(1800.0, "s", "squeue"),
        report_model.Value(4.0, "GPUs", "squeue"), report_model.Value(4.0, "GPUs", "squeue"), "", "node", False,
    )  # fmt: skip
    iterations = report_model.missing("iterations", "no log")
    priced = economics.economics(None, [step], iterations, load_rate_table(), "aws-p3.8xlarge")
    assert priced.gpu_hours.value == pytest.approx(2.0)
    assert priced.cost_per_run.value == pytest.approx(2.0 * 3.06) and priced.cost_per_run.kind == "assumption"


def test_an_unknown_instance_type_rate_says_so() -> None:
    iterations = report_model.missing("iterations", "x")
    priced = economics.economics(None, [], iterations, load_rate_table(), "aws-g6.12xlarge")
    assert priced.usd_per_gpu_hour.value is None and "no rate 'aws-g6.12xlarge'" in priced.usd_per_gpu_hour.note


def test_stack_file_names_the_aws_key_and_the_cli_report_says_not_executed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_ed25519.pub").write_text(PUBLIC_KEY)
    aws = {"region": "us-east-1", "endpoint_url": "http://127.0.0.1:16500", "instance_type": "p3.8xlarge",
           "ami": "ami-1e749f67", "allowed_ssh_cidrs": ["127.0.0.1/32"],
           "ssh_public_key_file": "keys/id_ed25519.pub", "ssh_private_key_file": "keys/id_ed25519"}
    config = parse_stack_config("hybrid", {"workload": "probe", "aws": aws}, project_with_workloads(tmp_path))
    access = stack_files.access_from_stack_config(config, tmp_path)
    assert access.ssh_keys == {"aws": tmp_path / "keys" / "id_ed25519"}
    assert access.poll_intervals == {"aws": 30.0}  # atlas:aws.poll_interval_seconds' default

    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"atlas": {"stack": "local-hybrid"}, "environments": {"aws": AWS_OUTPUTS}}))
    assert cli.main(["--outputs", str(outputs), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "aws: not executed" in printed
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert data["environments"][0]["kind"] == "aws"
