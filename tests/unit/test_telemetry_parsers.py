"""The parsers on recorded samples of the real formats (tests/unit/data/)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from infra.telemetry.gpu import parse_nvidia_smi_query
from infra.telemetry.parsers import ParseError
from infra.telemetry.parsers.biggan_logs import parse_biggan_jsonl, parse_loss_log, parse_metalog
from infra.telemetry.parsers.nvidia_smi import parse_nvidia_smi_csv
from infra.telemetry.parsers.sampler_jsonl import parse_sampler_jsonl
from infra.telemetry.parsers.sar import parse_sar, sar_cpu, sar_memory

DATA = Path(__file__).parent / "data"
MIB = 1 << 20


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_sar_u_rows_header_and_average() -> None:
    report = parse_sar(read("sar_u_satori.txt"))
    assert report.header.host == "node0023"
    assert report.header.arch == "ppc64le"
    assert report.header.cpus == 160
    assert report.header.date == dt.date(2020, 3, 1)
    rows = sar_cpu(report)
    # The repeated column header is skipped, not read as a row.
    assert len(rows) == 5
    assert rows[0].time == dt.datetime(2020, 3, 1, 0, 0, 5)
    assert rows[0].busy_percent == pytest.approx(100 - 84.32)
    assert rows[3].user_percent == pytest.approx(18.90)
    assert dict(report.average or ())["%idle"] == "82.43"


def test_sar_r_old_sysstat_counts_cache_inside_kbmemused() -> None:
    rows = sar_memory(parse_sar(read("sar_r_satori.txt")))
    assert len(rows) == 3
    first = rows[0]
    assert first.total_bytes == (1100967680 + 99651840) * 1024  # 1145 GiB: Satori's node
    assert first.used_with_cache_bytes == 99651840 * 1024
    assert first.used_bytes == (99651840 - 2112 - 61234560) * 1024
    # 11:59:55 PM, then 12:00:00 AM: midnight passed.
    assert first.time == dt.datetime(2020, 3, 1, 23, 59, 55)
    assert rows[1].time == dt.datetime(2020, 3, 2, 0, 0, 0)


def test_sar_r_new_sysstat_with_kbavail_and_24_hour_clock() -> None:
    (row,) = sar_memory(parse_sar(read("sar_r_sysstat12.txt")))
    assert row.used_bytes == 40000000 * 1024
    assert row.total_bytes == (200000000 + 40000000 + 1000 + 24000000) * 1024
    assert row.time == dt.datetime(2026, 11, 20, 13, 0, 5)


def test_sar_rejects_text_without_a_header() -> None:
    with pytest.raises(ParseError, match="no sar header"):
        parse_sar("12:00:05 AM all 1 2 3\n")


def test_nvidia_smi_seed_query_names_memory_controller_activity_as_such() -> None:
    rows = parse_nvidia_smi_csv(read("nvidia_smi_seed.csv"))
    assert len(rows) == 6
    assert rows[0].name == "Tesla V100-SXM2-32GB"
    assert rows[0].pstate == "P0"
    assert rows[0].utilization_gpu_percent == 100
    assert rows[0].utilization_memory_percent == 45
    # The seed never asked for memory in use: it is absent, not zero.
    assert rows[0].memory_used_bytes is None
    assert rows[5].utilization_gpu_percent is None  # "[Not Supported]"


def test_nvidia_smi_memory_query_from_the_h200() -> None:
    rows = parse_nvidia_smi_csv(read("nvidia_smi_h200_memory.csv"))
    assert rows
    assert all(r.memory_total_bytes == 143771 * MIB for r in rows)
    assert rows[0].timestamp is not None and rows[0].timestamp.year == 2026
    assert rows[0].index == 0
    assert any(r.memory_used_bytes for r in rows)


def test_nvidia_smi_noheader_nounits_needs_the_columns() -> None:
    text = "0, 97, 8361, 143771\n"
    (row,) = parse_nvidia_smi_csv(text, columns=("index", "utilization.gpu", "memory.used", "memory.total"))
    assert (row.index, row.utilization_gpu_percent, row.memory_used_bytes) == (0, 97, 8361 * MIB)
    with pytest.raises(ParseError, match="no header"):
        parse_nvidia_smi_csv(text)
    assert parse_nvidia_smi_query(text)[0]["memory_total_bytes"] == 143771 * MIB


def test_sampler_jsonl_from_the_h200() -> None:
    run = parse_sampler_jsonl(read("sampler_h200.jsonl"))
    assert run.step == "train-light"
    assert run.interval_s == 1.0
    assert run.exit_code == 0
    assert len(run.samples) == 11
    gpu_sample = run.samples[-1]
    assert gpu_sample.gpus is not None
    assert gpu_sample.gpus[0].name == "NVIDIA H200"
    assert gpu_sample.gpus[0].memory_total_bytes == 150754820096
    assert gpu_sample.tree_rss_bytes and gpu_sample.tree_rss_bytes > 0
    assert gpu_sample.host_memory_total_bytes and gpu_sample.host_memory_total_bytes > 0


def test_sampler_jsonl_survives_a_cut_last_line_and_keeps_not_measured_reasons() -> None:
    text = (
        '{"type":"start","t":1.0,"step":"s","argv":["x"],"interval_s":5}\n'
        '{"type":"sample","t":6.0,"cpu":{"measured":true,"tree_percent":50.0,"host_percent":10.0},'
        '"memory":{"measured":true,"tree_rss_bytes":1024},'
        '"gpu":{"measured":false,"reason":"no NVIDIA driver: libnvidia-ml.so.1 not found"},'
        '"disk":{"measured":true,"host_read_bytes":1,"host_write_bytes":2},"network":{"measured":true,"rx_bytes":3,"tx_bytes":4}}\n'
        '{"type":"sample","t":11.0,"cpu":{"meas'
    )
    run = parse_sampler_jsonl(text)
    assert run.skipped_lines == 1
    assert run.exit_code is None  # no end record: the sampler was killed
    (sample,) = run.samples
    assert sample.gpus is None
    assert sample.gpu_reason == "no NVIDIA driver: libnvidia-ml.so.1 not found"
    assert ("gpu", "no NVIDIA driver: libnvidia-ml.so.1 not found") in sample.not_measured
    assert sample.tree_cpu_percent == 50.0


def test_biggan_jsonl_and_loss_log() -> None:
    records = parse_biggan_jsonl(read("biggan_log.jsonl"))
    assert [r.itr for r in records] == [2000, 4000, 6000]
    assert records[0].fid == pytest.approx(173.757, abs=1e-3)
    assert records[0].is_mean == pytest.approx(2.8067, abs=1e-4)
    assert records[0].stamp == pytest.approx(1551403232.04, abs=0.01)
    assert parse_loss_log(read("G_loss.log")) == ((1, 0.1534), (2, 0.1432), (3, -0.02019), (4, 3.77))
    with pytest.raises(ParseError, match="line 2"):
        parse_loss_log("1: 1.0e+00\nnot a loss\n")
    with pytest.raises(ParseError, match="line 1"):
        parse_biggan_jsonl('{"IS_mean": 1}\n')


def test_metalog() -> None:
    meta = parse_metalog("datetime: 2020-03-01 00:00:00\nconfig: {'a': 1}\nstate: {'itr': 0}\n")
    assert meta == {"datetime": "2020-03-01 00:00:00", "config": "{'a': 1}", "state": "{'itr': 0}"}


def test_sampler_jsonl_with_a_cgroup_v1_peak() -> None:
    """Recorded here: a parent that touched 200 MiB, then forked 4 children that share it.
    The RSS sum counts the shared pages five times; the cgroup's peak counts them once."""
    run = parse_sampler_jsonl(read("sampler_cgroup_v1.jsonl"))
    assert run.memory_cgroup == "v1 /atlas-record-22244"  # a cgroup made for the recording
    assert run.cgroup_peak_at_start_bytes == 12128256  # the sampler's own start-up
    assert [s.cgroup_peak_bytes for s in run.samples] == [229707776] * 3
    assert all(s.cgroup_peak_reason is None for s in run.samples)
    rss = run.samples[0].tree_rss_bytes
    assert rss is not None and rss > 4 * 229707776  # five processes' RSS over one cgroup's peak
    # A sampler from before the ownership check: no verdict, no memory_figure.
    assert (run.memory_cgroup_own, run.memory_source, run.memory_source_why) == (None, None, None)


@pytest.mark.parametrize(
    ("recording", "own", "source", "why", "peaks"),
    [
        (
            "sampler_slurm_job_cgroup_v1.jsonl",
            True,
            "cgroup_peak",
            "v1 cgroup /slurm_vm/uid_1001/job_2600003/step_batch/task_0 is Slurm job 2600003's own",
            [227053568] * 3,
        ),
        (
            "sampler_slurm_no_cgroup_v1.jsonl",
            False,
            "tree_rss",
            "the step has no cgroup of its own on this site: Slurm job 2600005 runs in slurmd's v1 cgroup "
            "/process_api/01923d5499f1b9241da00a45fb1155bd (a path that names no job or pod); Slurm gives a job "
            "a memory cgroup of its own only with TaskPlugin=task/cgroup (or JobAcctGatherType=jobacct_gather/cgroup)",
            [None] * 3,
        ),
    ],
)
def test_sampler_jsonl_says_whose_cgroup_and_which_figure(
    recording: str, own: bool, source: str, why: str, peaks: list[int | None]
) -> None:
    """A real local Slurm job (tests/unit/data/shared_tree.py says how each was recorded), with and
    without task/cgroup: the start record's verdict and memory_figure, and peaks only from its own."""
    run = parse_sampler_jsonl(read(recording))
    assert (run.memory_cgroup_own, run.memory_source, run.memory_source_why) == (own, source, why)
    assert [s.cgroup_peak_bytes for s in run.samples] == peaks
    assert all(s.cgroup_peak_reason == (None if own else why) for s in run.samples)
    assert all((s.tree_rss_bytes or 0) > 1000 << 20 for s in run.samples)  # five processes sharing 200 MiB


@pytest.mark.parametrize(
    ("memory", "peak", "reason"),
    [
        ('{"measured":true,"tree_rss_bytes":1,"cgroup_peak_bytes":4096}', 4096, None),
        (
            '{"measured":true,"tree_rss_bytes":1,"cgroup_peak_bytes":null,'
            '"cgroup_peak_reason":"/sys/fs/cgroup/job/memory.peak absent (a kernel before 5.19)"}',
            None,
            "/sys/fs/cgroup/job/memory.peak absent (a kernel before 5.19)",
        ),
        ('{"measured":true,"tree_rss_bytes":1}', None, "not recorded (a sampler from before cgroup peaks)"),
        ('{"measured":false,"reason":"PermissionError: /proc"}', None, "memory not measured: PermissionError: /proc"),
    ],
)
def test_sampler_cgroup_peak_or_why_not(memory: str, peak: int | None, reason: str | None) -> None:
    (sample,) = parse_sampler_jsonl(f'{{"type":"sample","t":1.0,"memory":{memory}}}\n').samples
    assert (sample.cgroup_peak_bytes, sample.cgroup_peak_reason) == (peak, reason)


def test_sampler_start_record_without_a_memory_cgroup_keeps_the_reason() -> None:
    text = '{"type":"start","t":1.0,"memory_cgroup":{"measured":false,"reason":"no memory cgroup: none mounted"}}\n'
    run = parse_sampler_jsonl(text)
    assert (run.memory_cgroup, run.memory_cgroup_reason) == (None, "no memory cgroup: none mounted")
    old = parse_sampler_jsonl(read("sampler_h200.jsonl"))
    assert old.memory_cgroup is None and old.memory_cgroup_reason == "not recorded (a sampler from before cgroup peaks)"
