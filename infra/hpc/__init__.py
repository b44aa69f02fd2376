"""The HPC side: LSF and Slurm clusters driven over SSH, as Pulumi dynamic resources.

- `target.py`, `target_parser.py`: the SSH + scheduler target of a stack, and its validation from config (pure).
- `ssh.py`: pooled paramiko connections (one per host per process), `run_remote`, SFTP.
- `scheduler.py`, `lsf.py`, `slurm.py`: directives, command lines and output parsing (pure).
- `job_script.py`: the whole job script rendered from a `JobSpec` (pure).
- `pipeline.py`: a workload's job scripts and the resources that stage and submit them.
- `registry.py`: the schedulers by name; everything that takes a `scheduler` value asks it.
- `polling.py`: batched, rate-limited status queries (one query for many jobs per host).
- `providers.py`: the `StagedFiles` and `BatchJob` dynamic resources.
- `components.py`: `HpcEnvironment`, the component a stack builds.
"""
