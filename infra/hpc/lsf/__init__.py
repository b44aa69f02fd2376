"""IBM Spectrum LSF 10.1: everything Atlas knows of it, on `LsfScheduler` (reached through infra/hpc/registry.py).

- `scheduler.py`: `LsfScheduler`: `#BSUB` directives, bsub/bjobs/bhist/bkill command lines, its
  options (`memory_unit`), each operation of infra.hpc.scheduler.Scheduler;
- `jobs.py`: bjobs and bhist answers read into job states, and LSF's times (pure);
- `records.py`: the report's step records from bjobs, then bhist (pure);
- `hosts.py`: the monitor's reads: the hosts' GPUs (lsload, bhosts) and the queue (pure).
"""

from infra.hpc.lsf.scheduler import LsfScheduler as LsfScheduler
