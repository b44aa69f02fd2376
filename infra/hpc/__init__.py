"""The HPC side: LSF and Slurm clusters driven over SSH, as Pulumi dynamic resources.

- `target.py`, `target_parser.py`: the SSH + scheduler target of a stack, and its validation from config (pure).
- `ssh/`: pooled paramiko connections (one per host per process), `run_remote`, SFTP.
- `scheduler.py`: the `Scheduler` interface (every operation a scheduler must provide) and what
  all schedulers share; `lsf/`, `slurm/`: everything Atlas knows of each, on its class (pure);
  `options.py`: the shared checks of a scheduler's own options (`scheduler_options`).
- `registry.py`: the schedulers by name; everything that takes a `scheduler` value asks it.
- `job_script.py`: the whole job script rendered from a `JobSpec` (pure).
- `pipeline.py`: a workload's job scripts and the resources that stage and submit them.
- `polling.py`: batched, rate-limited status queries (one query for many jobs per host).
- `providers/`: the `StagedFiles`, `BatchJob` and `BatchJobCompletion` dynamic resources.
- `components.py`: `HpcEnvironment`, the component a stack builds.
"""

from typing import TYPE_CHECKING

from infra.exports import lazy_exports

# For a user's own Pulumi program: `from infra.hpc import HpcEnvironment, HpcEnvironmentArgs, HpcTarget`.
# Lazy: the SSH pool and the config parsers import this package and must not import Pulumi.
_EXPORTS = {
    "HpcEnvironment": "infra.hpc.components",
    "HpcEnvironmentArgs": "infra.hpc.components",
    "workload_source_files": "infra.hpc.components",
    "StagedFile": "infra.hpc.pipeline",
    "HpcTarget": "infra.hpc.target",
    "HpcConfigError": "infra.hpc.target",
    "SiteDirectives": "infra.hpc.scheduler",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:  # the real types for type checkers; `X as X` marks a re-export
    from infra.hpc.components import HpcEnvironment as HpcEnvironment
    from infra.hpc.components import HpcEnvironmentArgs as HpcEnvironmentArgs
    from infra.hpc.components import workload_source_files as workload_source_files
    from infra.hpc.pipeline import StagedFile as StagedFile
    from infra.hpc.scheduler import SiteDirectives as SiteDirectives
    from infra.hpc.target import HpcConfigError as HpcConfigError
    from infra.hpc.target import HpcTarget as HpcTarget
