"""The queue-wait estimate made before a run, beside the measured wait in the comparison report.

The report is built from the comparison's recorded local run (tests/unit/data/compare/), as in
test_compare.py; the estimate file is what `scripts/nodes --estimate` writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.compare import cost_files, metrics, report_model
from infra.compare.cost_files import load_estimates
from infra.compare.estimates import with_estimates
from infra.compare.render import render_markdown
from tests.unit.test_compare import hpc_records, kube_records


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> report_model.Report:
    envs = [kube_records(), hpc_records(tmp_path_factory.mktemp("hpc"))]
    return metrics.build_report(envs, cost_files.load_cost_profiles(), cost_files.load_rate_table(), {"stack": "local"})


def record(taken_at: float, seconds: dict[str, float | None]) -> dict[str, object]:
    return {
        "version": 1,
        "stack": "local",
        "taken_at": taken_at,
        "environments": {
            name: {
                "environment": name,
                "gpus": 1,
                "seconds": s,
                "basis": "test basis",
                "free_gpus": 4,
                "pending_ahead": 0,
                "recent_waits_s": [],
            }
            for name, s in seconds.items()
        },
    }


def test_the_estimate_sits_beside_the_measured_wait_with_its_error(report: report_model.Report) -> None:
    before = min(s.requested_at.value for e in report.environments for s in e.steps if s.requested_at.value) - 60
    kwok, hpc = (e.name for e in report.environments)
    simulated, scored = with_estimates(report.environments, record(before, {kwok: 3.0, hpc: 3.0}), {"stack": "local"})
    measured = scored.elasticity.time_to_add_gpus.value
    assert measured is not None and not scored.elasticity.time_to_add_gpus.simulated
    assert scored.elasticity.estimated_gpu_step_wait.value == 3.0
    assert scored.elasticity.estimated_gpu_step_wait.kind == "projection"
    assert scored.elasticity.estimate_error.value == pytest.approx(3.0 - measured)
    assert "not a forecast" not in scored.elasticity.estimated_gpu_step_wait.note
    # Against KWOK's simulated wait no error is scored: "off by 0" there would say nothing.
    assert simulated.elasticity.time_to_add_gpus.simulated
    assert simulated.elasticity.estimated_gpu_step_wait.value == 3.0
    assert simulated.elasticity.estimate_error.value is None
    assert "simulated" in simulated.elasticity.estimate_error.note
    text = render_markdown(report_model.Report(**{**report.__dict__, "environments": (simulated, scored)}), (), {})
    assert "estimated before the run" in text and "estimate minus measured" in text
    _, unestimable = with_estimates(report.environments, record(before, {kwok: 3.0, hpc: None}), {"stack": "local"})
    assert unestimable.elasticity.estimated_gpu_step_wait.value is None
    assert "not estimable then" in unestimable.elasticity.estimated_gpu_step_wait.note


def test_an_estimate_made_after_the_request_is_no_forecast_and_another_stack_s_is_ignored(
    report: report_model.Report,
) -> None:
    late = max(s.requested_at.value for e in report.environments for s in e.steps if s.requested_at.value) + 60
    name = report.environments[0].name
    (env, *_) = with_estimates(report.environments, record(late, {name: 1.0}), {"stack": "local"})
    assert "not a forecast" in env.elasticity.estimated_gpu_step_wait.note
    other = dict(record(late, {name: 1.0}), stack="elsewhere")
    (env, *_) = with_estimates(report.environments, other, {"stack": "local"})
    assert env.elasticity.estimated_gpu_step_wait.value is None and "elsewhere" in env.elasticity.estimate_error.note


def test_without_an_estimate_the_report_says_how_to_make_one(report: report_model.Report) -> None:
    env = report.environments[0]
    assert env.elasticity.estimated_gpu_step_wait.value is None
    assert "scripts/nodes" in env.elasticity.estimated_gpu_step_wait.note


def test_a_file_that_is_not_an_estimate_file_is_refused_naming_the_flag(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"nodes": []}))
    with pytest.raises(ValueError, match="--estimates"):
        load_estimates(bad)
