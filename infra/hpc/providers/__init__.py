"""Pulumi dynamic resources for the HPC side: `StagedFiles`, `BatchJob` and `BatchJobCompletion`.

- `staged_files.py`: `StagedFiles`, the scripts and inputs uploaded over SFTP;
- `batch_job.py`: `BatchJob`, one scheduler job per workload step, and what each provider call
  needs (`JobCall`) and the wait for a job's end;
- `job_completion.py`: `BatchJobCompletion`, that wait as a resource of its own;
- `common.py`: the code version every resource carries, the `ssh` input, the shared base.

Lifecycle, as architecture.md asks of batch jobs:
- preview: `script` is an input, so `pulumi preview --diff` prints the job script that will run;
- up: `StagedFiles` uploads scripts and inputs over SFTP, checked by sha256; `BatchJob`
  submits with a name derived from the resource, after looking that name up, so a retry
  after a dropped connection (or an interrupted `pulumi up`) adopts the job it already
  submitted instead of submitting it twice;
- refresh: `read` asks the scheduler, so jobs finished, killed or moved (queue) outside
  Atlas show up in state; a job cancelled outside is replaced by the next `up`;
- destroy: `delete` cancels a pending or running job (already gone is fine) and marks its id
  retired, so a later `up` never adopts it; `StagedFiles` removes what it staged.

Providers hold no live objects (dill pickles them into state): SSH connections come from the
pool in infra/hpc/ssh/, status from the per-host boards in infra/hpc/polling.py. Credentials
travel in the `ssh_secret` input, which the component marks secret; it is never logged, and
`additional_secret_outputs` keeps it encrypted in state. Their inputs are read, checked and
typed in infra/hpc/provider_inputs.py; what every dynamic provider shares is in infra/dynamic/.

Every name importable from `infra.hpc.providers` before the split is re-exported here on purpose:
dill pickles a provider into state by module and class name, and states written before the split
name them `infra.hpc.providers.<Class>` (`JobCompletionProvider` is `BatchJobCompletionProvider`'s
name from then); refresh and destroy of those resources unpickle that name.
"""

from infra.hpc.provider_inputs import endpoint_from
from infra.hpc.providers.batch_job import (
    BATCH_JOB_OUTPUTS,
    JOB_DEFINING_INPUTS,
    LOG_TAIL_LINES,
    RETIRED_JOBS_FILE,
    STEP_NAME,
    BatchJob,
    BatchJobProvider,
)
from infra.hpc.providers.common import (
    PROVIDER_VERSION,
    HpcProviderError,
    endpoint_inputs,
    ssh_inputs,
    target_ssh_inputs,
    utc_now,
)
from infra.hpc.providers.job_completion import (
    COMPLETION_OUTPUTS,
    BatchJobCompletion,
    BatchJobCompletionProvider,
)
from infra.hpc.providers.staged_files import SHA256, StagedFiles, StagedFilesProvider

# The provider's name in state written before the rename (its resource's Pulumi type is still
# hpc:JobCompletion). The resource class itself is not pickled: it keeps one name, BatchJobCompletion.
JobCompletionProvider = BatchJobCompletionProvider

__all__ = [
    "BATCH_JOB_OUTPUTS",
    "COMPLETION_OUTPUTS",
    "JOB_DEFINING_INPUTS",
    "LOG_TAIL_LINES",
    "PROVIDER_VERSION",
    "RETIRED_JOBS_FILE",
    "SHA256",
    "STEP_NAME",
    "BatchJob",
    "BatchJobCompletion",
    "BatchJobCompletionProvider",
    "BatchJobProvider",
    "HpcProviderError",
    "JobCompletionProvider",
    "StagedFiles",
    "StagedFilesProvider",
    "endpoint_from",
    "endpoint_inputs",
    "ssh_inputs",
    "target_ssh_inputs",
    "utc_now",
]
