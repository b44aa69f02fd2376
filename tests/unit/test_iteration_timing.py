"""The BigGAN patch's per-iteration timing (reason 7) read back: windows, shares, GPU busy."""

from __future__ import annotations

import json

import pytest

from infra.compare.iteration_timing import parse_timing, profile_kernel_seconds, steady, summarize, timing_report
from infra.telemetry.parsers import ParseError

SETUP = {"setup": {"matmul_allow_tf32": False, "cudnn_allow_tf32": True, "G_dtype": "torch.float32"}}


def line(itr: int, epoch: int, end: float, data: float, compute: float, after: float = 0.01, **extra: object) -> str:
    record = {
        "itr": itr, "epoch": epoch, "time": end, "data_s": data, "copy_s": 0.01, "compute_s": compute,
        "after_s": after, "profiled": False, "mem_allocated_peak": 1000 + itr, "mem_reserved_peak": 2000 + itr,
        **extra,
    }  # fmt: skip
    return json.dumps(record)


def run_text() -> str:
    # Epoch 0: two slow iterations (the workers' start); epoch 1: steady, one profiled, one checkpoint.
    rows = [
        line(1, 0, 110.0, 5.0, 4.98),
        line(2, 0, 111.0, 0.0, 0.99),
        line(3, 1, 112.0, 0.1, 0.89),
        line(4, 1, 113.5, 0.1, 1.39, profiled=True),
        line(5, 1, 114.5, 0.1, 0.89),
        line(6, 1, 117.5, 0.1, 0.89, after=2.01),
    ]
    return "\n".join([json.dumps(SETUP), *rows]) + "\n"


def test_parse_keeps_setup_and_every_iteration() -> None:
    timing = parse_timing(run_text())
    assert timing.setup["cudnn_allow_tf32"] is True
    assert [i.itr for i in timing.iterations] == [1, 2, 3, 4, 5, 6]
    assert timing.iterations[0].total_s == pytest.approx(10.0)
    assert timing.iterations[0].start_t == pytest.approx(100.0)


def test_a_last_line_cut_off_is_left_out_but_a_broken_middle_line_fails() -> None:
    text = run_text() + '{"itr": 7, "epo'
    assert len(parse_timing(text).iterations) == 6
    broken = run_text().replace(line(3, 1, 112.0, 0.1, 0.89), "{not json")
    with pytest.raises(ParseError, match="line 4"):
        parse_timing(broken)
    with pytest.raises(ParseError, match="KeyError"):
        parse_timing('{"itr": 1}\n{"itr": 2}\n')


def test_steady_is_from_the_second_epoch_without_profiled_iterations() -> None:
    assert [i.itr for i in steady(parse_timing(run_text()))] == [3, 5, 6]


@pytest.mark.parametrize(
    ("samples", "busy", "count"),
    [
        ([], None, 0),
        ([(111.5, 90.0), (112.5, 50.0)], 70.0, 2),  # both inside iterations 3 and 4's span
        ([(50.0, 10.0), (111.5, 80.0)], 80.0, 1),  # before training: not counted
        ([(111.5, float("nan"))], None, 0),  # NaN: not measured, not 0
    ],
)
def test_gpu_busy_counts_only_samples_inside_the_window(
    samples: list[tuple[float, float]], busy: float | None, count: int
) -> None:
    summary = summarize("w", parse_timing(run_text()).iterations[2:4], 512, samples)
    assert summary.gpu_busy_percent_mean == busy
    assert summary.gpu_busy_samples == count


def test_summary_sums_shares_and_images_per_second() -> None:
    iterations = parse_timing(run_text()).iterations[2:3] + parse_timing(run_text()).iterations[4:5]
    summary = summarize("w", iterations, 512)
    assert summary.sums_s["compute_s"] == pytest.approx(1.78)
    # Each iteration: data 0.1 + copy 0.01 + compute 0.89 + after 0.01 = 1.01 s.
    assert summary.share_percent["data_s"] == pytest.approx(100 * 0.2 / 2.02)
    assert summary.median_iteration_s == pytest.approx(1.01)
    assert summary.images_per_s_median == pytest.approx(512 / 1.01)
    assert summary.images_per_s_window == pytest.approx(512 / 1.01)
    assert summary.wall_s == pytest.approx(114.5 - 110.99)
    assert summary.mem_reserved_peak == 2005
    assert summarize("empty", [], 512).images_per_s_median is None


def test_report_windows_and_the_no_checkpoint_window() -> None:
    report = timing_report(parse_timing(run_text()), 512)
    every, first, steady_window, no_checkpoint = report["windows"]
    assert (every["iterations"], first["iterations"], steady_window["iterations"]) == (6, 2, 3)
    assert steady_window["window"].startswith("steady") and no_checkpoint["window"].startswith("steady, ")
    assert (no_checkpoint["first_itr"], no_checkpoint["last_itr"], no_checkpoint["iterations"]) == (3, 5, 2)
    assert report["iterations"][3][-1] is True and len(report["iterations_columns"]) == len(report["iterations"][0])


@pytest.mark.parametrize(
    ("table", "seconds"),
    [
        ("  Name  Self CUDA\n-----\nSelf CPU time total: 6.434s\nSelf CUDA time total: 5.725s\n", 5.725),
        ("Self CUDA time total: 812.5ms\n", 0.8125),
        ("Self CUDA time total: 40.0us", 4.0e-5),
        ("Self CPU time total: 6.434s\n", None),  # no GPU activity recorded: not measured, not 0
    ],
)
def test_profile_kernel_seconds_from_the_profilers_table(table: str, seconds: float | None) -> None:
    assert profile_kernel_seconds(table) == (pytest.approx(seconds) if seconds is not None else None)
