"""The HPC side: LSF and Slurm clusters driven over SSH, as Pulumi dynamic resources.

- `target.py`: the typed, validated SSH + scheduler target of a stack (pure).
- `ssh.py`: pooled paramiko connections (one per host per process), `run_remote`, SFTP.
- `scheduler.py`, `lsf.py`, `slurm.py`: job scripts, command lines and output parsing (pure).
- `registry.py`: the schedulers by name; everything that takes a `scheduler` value asks it.
- `polling.py`: batched, rate-limited status queries (one query for many jobs per host).
- `providers.py`: the `StagedFiles` and `BatchJob` dynamic resources.
- `components.py`: `HpcEnvironment`, the component a stack builds.
"""
