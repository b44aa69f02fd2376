"""The submitit side of bench/hpc_sweep.py: the sweep a researcher runs on the login node with submitit.

This file is not run by Atlas's venv: bench/hpc_sweep.py uploads it to the login node and runs it
there with the login user's python that has submitit (bench/requirements-login-node.txt).

`executor.map_array` over the parameter sets 1..N: submitit pickles one call per set into its job
folder (submitit/<job id>/ under the working directory) and submits them all as ONE Slurm job array
(one `sbatch` of the sbatch file it renders). Each array task runs, through submitit's own
`srun ... python -u -m submitit.core._submit <folder>`, the same staged job script every other side
of the bench submits: `bash <script> <i>` in the working directory (a CommandFunction). The
resources are those the staged script asks for (`#SBATCH --cpus-per-task=1 --nodes=1
--ntasks-per-node=1`, the job name); submitit also always sets a time limit (here 60 min).

    python submitit_sweep.py --jobs 50 --script .atlas/jobs/sweep.sbatch [--name NAME] [--wait]

Prints submitit's version, then the job ids (`<array id>_<index>`) one a line. With --wait it then
waits for every job's result (a job whose script fails raises here) and prints `ok <id>` for each.
"""

from __future__ import annotations

import argparse
import os
import sys

import submitit
from submitit.helpers import CommandFunction


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--script", required=True, help="the staged job script, relative to the working directory")
    parser.add_argument("--name", default="atlas-bench-sweep")
    parser.add_argument("--wait", action="store_true", help="wait for every job and check it succeeded")
    args = parser.parse_args()

    # Explicit cluster: AutoExecutor would pick Slurm here anyway (it finds srun), and failing
    # loudly beats falling back to running the jobs locally.
    executor = submitit.AutoExecutor(folder="submitit/%j", cluster="slurm")
    executor.update_parameters(name=args.name, nodes=1, tasks_per_node=1, cpus_per_task=1, timeout_min=60)
    command = CommandFunction(["bash", args.script], cwd=os.getcwd(), verbose=False)
    jobs = executor.map_array(command, range(1, args.jobs + 1))
    print(f"submitit {submitit.__version__}")
    for job in jobs:
        print(job.job_id)
    sys.stdout.flush()
    if args.wait:
        for job in jobs:
            job.result()  # raises with the job's stderr when `bash <script>` exits non-zero
            print(f"ok {job.job_id}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
