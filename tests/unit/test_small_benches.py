"""Pure parts of the small benches whose files feed the results table (docs/results.md): what they
compute from their samples, and how they read `du` and spawn the language plugin."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bench import compare_rows, language_host_start, warm_bootstrap


def _run(side: str, number: int, total: float, rss: float = 300.0) -> dict[str, Any]:
    return {
        "side": side,
        "round": number,
        "rows": 1e6,
        "total_s": total,
        "import_s": 0.7,
        "collect_and_load_s": total - 1.4,
        "metrics_s": 0.1,
        "render_s": 0.6,
        "peak_rss_mb": rss,
        "peak_reader_rss_mb": 100.0,
    }


def test_compare_summary_pairs_each_round_and_judges_the_goal_on_time_and_memory() -> None:
    runs = [_run("columns", k, 1.5 + 0.1 * k) for k in range(10)]
    runs += [_run("jsonl-only", k, 3.0 + 0.2 * k, rss=450.0) for k in range(10)]
    summary = compare_rows.summarise(runs, 10)
    columns, jsonl = summary["sides"]["columns"], summary["sides"]["jsonl-only"]
    assert columns["median"]["total_s"] == pytest.approx(1.95)
    assert columns["memory_bound_mb"] == 400.0 and columns["goal_met"] is True
    assert jsonl["goal_met"] is False  # 3.9 s and 550 MB: both over
    assert summary["jsonl_only_over_columns"]["pairs"] == [2.0] * 10
    assert summary["jsonl_only_over_columns"]["rounds"] == 10


def test_compare_summary_needs_every_round_of_both_sides() -> None:
    runs = [_run("columns", k, 1.5) for k in range(10)] + [_run("jsonl-only", k, 3.0) for k in range(9)]
    with pytest.raises(KeyError):
        compare_rows.summarise(runs, 10)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("681234567\t/root/.cache/atlas/toolchain/x/bin\n", 681234567),
        ("12\t/a\n34\t/b\n", 12),  # one path asked, one line read
        ("", None),
        ("du: cannot access '/nope': No such file or directory\n", None),
    ],
)
def test_parse_du(output: str, expected: int | None) -> None:
    assert warm_bootstrap.parse_du(output) == expected


def test_du_of_a_missing_folder_is_not_measured_not_zero(tmp_path: Path) -> None:
    entry = warm_bootstrap.du_bytes(tmp_path / "missing")
    assert entry["bytes"] is None and str(entry["reason"]).startswith("not measured")


def test_du_counts_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 5000)
    size = warm_bootstrap.du_bytes(tmp_path)["bytes"]
    assert isinstance(size, int) and size >= 5000


@pytest.mark.parametrize(
    ("side", "expected_head"),
    [
        ("launcher", ["/tc/bin/pulumi-language-python"]),
        ("full-sdk", [sys.executable, "-u", "-c", language_host_start.FULL_SDK]),
    ],
)
def test_language_plugin_sides_end_with_the_engine_address(side: str, expected_head: list[str]) -> None:
    argv = language_host_start.command(side, Path("/tc/bin/pulumi-language-python"))
    assert argv[:-1] == expected_head
    assert argv[-1] == language_host_start.ENGINE_ADDRESS


def test_full_sdk_side_imports_pulumi_before_the_launcher() -> None:
    # The launcher trims its imports only when `pulumi` is not yet imported: the side must import it first.
    assert language_host_start.FULL_SDK.index("import pulumi") < language_host_start.FULL_SDK.index("run_module")


def test_an_unknown_side_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown side"):
        language_host_start.command("upstream", Path("/x"))
