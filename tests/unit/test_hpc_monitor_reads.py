"""What the monitor reads of each scheduler beside its jobs, on recorded and hand-written output: the
nodes' GPUs (Slurm `sinfo`, LSF `lsload -gpu`/`-gpuload`) and every user's queue (`squeue`,
`bjobs -u all`). Moved here from test_monitor.py with the code it tests (infra/hpc/lsf/hosts.py,
infra/hpc/slurm/nodes.py).
"""

from __future__ import annotations

from infra.hpc.lsf.hosts import parse_bjobs_queue, parse_lsload_gpu
from infra.hpc.slurm.nodes import SINFO_FORMAT, parse_sinfo_nodes, parse_squeue_queue
from infra.monitor.model import NodeView
from infra.nodes.idle import judge_node
from infra.timeparse import rfc3339


def utc(text: str) -> float:
    value = rfc3339(text)
    assert value is not None
    return value


def test_sinfo_nodes_counts_gpus_and_allocation_once_per_node() -> None:
    # As `sinfo -N -h -O NodeList:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:` prints a node per partition.
    text = (
        "vm|mixed|3/5/0/8|gpu:v100:4|gpu:v100:2(IDX:0-1)\n"
        "vm|mixed|3/5/0/8|gpu:v100:4|gpu:v100:2(IDX:0-1)\n"
        "cpu1|idle|0/8/0/8|(null)|gpu:0\n"
    )
    nodes = {n.name: n for n in parse_sinfo_nodes(text)}
    assert (nodes["vm"].gpus_total, nodes["vm"].gpus_allocated, nodes["vm"].state) == (4, 2, "mixed")
    assert (nodes["cpu1"].gpus_total, nodes["cpu1"].gpus_allocated) == (0, 0)
    assert nodes["vm"].gpu_util_percent is None and "allocation, not use" in nodes["vm"].util_source


def test_lsload_gpu_reads_use_per_host_and_busy_gpus_as_allocated() -> None:
    gpu = (
        "HOST_NAME       status  ngpus  gpu_shared_avg_mut  gpu_shared_avg_ut  ngpus_physical\n"
        "hosta               ok      4                 12%                37%               4\n"
        "hostb               ok      2                  0%                 0%               2\n"
    )
    # LSF prints the host name on a host's first GPU only.
    gpuload = (
        "HOST_NAME       gpuid   gpu_model   gpu_mode  gpu_temp   gpu_ecc  gpu_ut  gpu_mut gpu_mtotal "
        "gpu_mused   gpu_pstate   gpu_status   gpu_error\n"
        "hosta               0 TeslaV100_SXM2_32GB  0.0  -  0.0     70%      20%        32G       4G 0 busy -\n"
        "                    1 TeslaV100_SXM2_32GB  0.0  -  0.0      4%       0%        32G       0M 0 busy -\n"
        "                    2 TeslaV100_SXM2_32GB  0.0  -  0.0      0%       0%        32G       0M 0 ok -\n"
        "                    3 TeslaV100_SXM2_32GB  0.0  -  0.0      0%       0%        32G       0M 0 ok -\n"
        "hostb               0 TeslaV100_SXM2_32GB  0.0  -  0.0      0%       0%        32G       0M 0 ok -\n"
        "                    1 TeslaV100_SXM2_32GB  0.0  -  0.0      0%       0%        32G       0M 0 ok -\n"
    )
    nodes = {n.name: n for n in parse_lsload_gpu(gpu, gpuload)}
    assert (nodes["hosta"].gpus_total, nodes["hosta"].gpus_allocated, nodes["hosta"].gpu_util_percent) == (4, 2, 37.0)
    assert (nodes["hostb"].gpus_total, nodes["hostb"].gpus_allocated, nodes["hostb"].gpu_util_percent) == (2, 0, 0.0)


def test_lsload_gpu_with_no_reading_is_unknown_not_zero() -> None:
    # LSF prints "-" for a load index it has no value for (the local stand-in's mock GPUs too).
    gpu = (
        "HOST_NAME       status  ngpus  gpu_shared_avg_mut  gpu_shared_avg_ut  ngpus_physical\n"
        "vm                  ok      4                   -                  -               4\n"
    )
    gpuload = (
        "HOST_NAME       gpuid   gpu_model   gpu_mode  gpu_temp   gpu_ecc  gpu_ut  gpu_mut gpu_mtotal "
        "gpu_mused   gpu_pstate   gpu_status   gpu_error\n"
        "vm                  0 TeslaV100_SXM2_32GB  0.0  -  -  -  -  32G  -  -  busy  -\n"
        "                    1 TeslaV100_SXM2_32GB  0.0  -  -  -  -  32G  -  -  ok  -\n"
    )
    (node,) = parse_lsload_gpu(gpu, gpuload)
    assert (node.gpus_total, node.gpus_allocated) == (4, 1)
    assert node.gpu_util_percent is None
    view = NodeView(node.name, node.state, node.gpus_total, node.gpus_allocated, node.gpu_util_percent,
                    node.util_source, idle_since=0.0)
    finding = judge_node("satori", view, now=3600.0, workload="probe")
    # An hour with no reading is not an hour idle: the busy GPU is never called idle.
    assert finding.gpus_idle == 0 and "use not readable" in finding.suggestion


def test_queue_listings_give_pending_gpus_waits_and_expected_ends() -> None:
    squeue = (
        "7|RUNNING|2026-12-02T15:00:00|2026-12-02T15:00:10|2026-12-02T15:30:10|gres/gpu:2|normal\n"
        "8|PENDING|2026-12-02T15:01:00|N/A|N/A|gres/gpu:1|normal\n"
        "9|COMPLETED|2026-12-02T14:00:00|2026-12-02T14:00:03|2026-12-02T14:10:00|N/A|debug\n"
        "10|CANCELLED|2026-12-02T14:00:00|2026-12-02T14:05:00|2026-12-02T14:05:00|gres/gpu:1|normal\n"
        "11|RUNNING|2026-12-02T15:00:00|2026-12-02T15:00:01|2026-12-02T15:30:01|gres/gpu:1|backfill\n"
    )
    jobs = {j.job_id: j for j in parse_squeue_queue(squeue)}
    assert jobs["7"].state == "running" and jobs["7"].gpus == 2
    assert jobs["7"].expected_end == utc("2026-12-02T15:30:10Z")
    assert jobs["7"].started_at is not None and jobs["7"].submitted_at is not None
    assert jobs["7"].started_at - jobs["7"].submitted_at == 10
    assert (jobs["8"].state, jobs["8"].started_at, jobs["8"].gpus) == ("pending", None, 1)
    assert (jobs["9"].state, jobs["9"].gpus) == ("finished", 0)
    assert jobs["10"].started_at is None  # cancelled while pending: no wait to learn from
    assert jobs["11"].preemptible and not jobs["7"].preemptible
    bjobs = "11^RUN^Dec  2 15:00:00^Dec  2 15:00:04^normal\n12^PEND^Dec  2 15:01:00^-^backfill\n"
    lsf = {j.job_id: j for j in parse_bjobs_queue(bjobs, 2026)}
    assert lsf["11"].started_at is not None and lsf["11"].submitted_at is not None
    assert lsf["11"].started_at - lsf["11"].submitted_at == 4
    assert lsf["12"].state == "pending" and lsf["12"].gpus is None and lsf["12"].preemptible


def test_sinfo_format_is_the_one_the_lsf_command_set_reads() -> None:
    # The same -O fields as the local LSF command set's lsload asks sinfo for, so the local Satori
    # answers both alike.
    assert SINFO_FORMAT == "NodeList:|,StateLong:|,CPUsState:|,Gres:|,GresUsed:"
