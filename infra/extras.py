"""The optional parts of the installed package: the extra each needs, and the error when it is missing.

`pip install atlas-infra` brings what the components need in a Pulumi program (Pulumi, its
Kubernetes SDK, paramiko, PyYAML); the rest comes with an extra: `aws` (AwsEnvironment),
`report` (the `atlas` command's compare, monitor and nodes), `gpu` (the telemetry sampler's NVML
readings), `local` (the repository's local environment and probe workload). A part that needs an
extra imports it where it is used and turns a missing module into `missing_extra`'s error.
"""

from __future__ import annotations

DISTRIBUTION = "atlas-infra"
# The modules each extra brings (what a ModuleNotFoundError names), as pyproject.toml lists them.
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "aws": frozenset({"boto3", "botocore", "cryptography"}),
    "report": frozenset({"matplotlib", "rich", "msgspec", "numpy"}),
    "gpu": frozenset({"pynvml"}),
    "local": frozenset({"moto", "h5py", "sklearn", "numpy", "cryptography"}),
}


def missing_extra(error: ModuleNotFoundError, extra: str, needed_by: str) -> ModuleNotFoundError:
    """The error to raise instead of `error`: one line naming what needs the module, the extra and the fix."""
    module = (error.name or "").split(".")[0] or "a module"
    return ModuleNotFoundError(
        f"{needed_by} needs the `{extra}` extra ({module} is not installed): pip install '{DISTRIBUTION}[{extra}]'",
        name=error.name,
    )


def extra_for(error: ModuleNotFoundError, extras: tuple[str, ...]) -> str | None:
    """Which of `extras` brings the module `error` names, or None when it is none of theirs."""
    module = (error.name or "").split(".")[0]
    return next((extra for extra in extras if module in EXTRA_MODULES[extra]), None)
