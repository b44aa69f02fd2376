"""A parent touches 200 MiB, then forks 4 children that keep it shared (copy-on-write) for 1.5 s:
the RSS sum counts the block 5 times, the memory cgroup once.

Recorded (2026-12-05, Slurm 22.05 of Debian 12, cgroup v1) as a batch job of the local Satori,
`sbatch --mem=1G` of `python3 -m infra.telemetry.sampler --out OUT --interval 0.5 --step shared-tree
--gpu off -- python3 shared_tree.py`: sampler_slurm_job_cgroup_v1.jsonl with the local Slurm's
task/cgroup (localenv/satori_config.py), sampler_slurm_no_cgroup_v1.jsonl with the earlier
proctrack/linuxproc and task/none, where the job stays in slurmd's cgroup.
"""

import os
import time

block = bytearray(200 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        time.sleep(1.5)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
