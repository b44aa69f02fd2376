"""LSF-compatible command set (a stand-in; see localenv/lsf/README.md). Stdlib only: it runs on the login node.

- `errors.py`: `LsfError`, the failure every command reports (stderr, LSF's exit code).
- `bsub_options.py`: what bsub accepts and what it means on Slurm (pure).
- `job_views.py`: LSF's view of Slurm's jobs and what bjobs, bhist and bkill print (pure).
- `slurm.py`: the Slurm commands the LSF commands run, and the queues and jobs they read.
- `bsub.py`: bsub; `queries.py`: bjobs, bkill, bhist, bqueues, bhosts, lsload.
- `cli.py`: `main(<command>, argv)`, what each installed command calls.
"""
