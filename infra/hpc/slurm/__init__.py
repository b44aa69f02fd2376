"""Slurm: everything Atlas knows of it, on `SlurmScheduler` (reached through infra/hpc/registry.py).

- `scheduler.py`: `SlurmScheduler`: `#SBATCH` directives, sbatch/squeue/sacct/scancel command
  lines, backfill in a preemptible partition, each operation of infra.hpc.scheduler.Scheduler;
- `jobs.py`: squeue and sacct answers read into job states (pure);
- `records.py`: the report's step records from squeue, then sacct (pure);
- `nodes.py`: the monitor's reads: the nodes' GPUs (sinfo) and the queue (squeue) (pure).
"""

from infra.hpc.slurm.scheduler import SlurmScheduler as SlurmScheduler
