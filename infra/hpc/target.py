"""The HPC target model: where and how to reach a cluster's login node and its scheduler.

`HpcTarget` is what infra/hpc/target_parser.py's `parse_hpc_target` returns once a config section
(`atlas:satori`) has passed its checks; `HpcConfigError` is what it raises otherwise. Reading a
configured known_hosts file is read by the parser's `load_known_hosts`, when the stack config is
loaded, so a missing file stops `pulumi preview` early; the model itself touches nothing. How the
login node is then reached (the user's OpenSSH config: a `Host` alias, ProxyJump, the agent) is
resolved from a target by infra/hpc/ssh/resolve.py into an `SshEndpoint`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from infra.errors import AtlasConfigError
from infra.hpc.scheduler import NO_SITE_DIRECTIVES, SiteDirectives
from infra.outputs import PROVENANCE_NOT_STATED


class HpcConfigError(AtlasConfigError):
    """An HPC target value that cannot be used; the message names the key and the fix."""


# A relative remote_work_dir is under the login user's home.
DEFAULT_REMOTE_WORK_DIR = "atlas-runs"
# Admins object to bjobs/squeue every few seconds; a minute is usual.
DEFAULT_POLL_INTERVAL_S = 60.0

# PROVENANCE_NOT_STATED (infra.outputs): what an HPC environment is when its config does not say
# (`atlas:hpc.<name>.provenance`): shown beside its name in every report, never taken for "real".
__all__ = [
    "DEFAULT_POLL_INTERVAL_S", "DEFAULT_REMOTE_WORK_DIR", "PROVENANCE_NOT_STATED", "ApptainerSettings",
    "HpcConfigError", "HpcTarget",
]


@dataclass(frozen=True)
class ApptainerSettings:
    """How a site runs the steps in the image (`runtime: apptainer`; infra/hpc/apptainer.py).

    The image is the stack's OpenShift image unless `image` names one (by digest); the login node
    converts it once per digest into `cache_dir` (`source: site`), or, where the site cannot reach
    the registry, this machine converts it and stages the SIF over SFTP (`source: here`)."""

    command: str = "apptainer"  # on the login node's PATH (a site's `module load apptainer`), or a path
    cache_dir: str = ".atlas/sif"  # on the shared filesystem; relative: under the login user's home
    image: str | None = None  # registry/repository@sha256:...; None: the stack's OpenShift image
    source: str = "site"  # "site": the login node pulls from the registry; "here": converted here, staged
    pull_registry: str | None = None  # the registry's name as the site reaches it, where it differs
    plain_http: bool = False  # the registry speaks plain HTTP (a registry on loopback)
    image_arch: str | None = None  # the image's architecture, where its registry cannot be read from here
    binds: tuple[str, ...] = ()  # the site's own folders (absolute), bound at the same path


@dataclass(frozen=True)
class HpcTarget:
    """Where and how to reach a cluster's login node and its scheduler.

    Secret fields (`private_key`, `private_key_passphrase`) are excluded from `repr`, so a
    target printed in a traceback or a log line never shows them. A program that builds one
    itself gives the host (a name, an address or a `Host` alias of the user's ssh config) and the
    scheduler; the user, the port, the host keys and the key to log in with where the ssh config
    (User, Port, UserKnownHostsFile, IdentityFile) or the agent does not provide them (Atlas never
    trusts a host key on first use); the rest defaults as a stack's config does.
    """

    host: str  # a host name, an address, or a Host alias of the ssh config
    user: str | None  # None: the ssh config's User for the host
    scheduler: str  # a name registry.py lists
    port: int | None = None  # None: the ssh config's Port for the host, else 22
    queue: str | None = None  # None: the scheduler's default queue or partition
    known_hosts: str | None = None  # OpenSSH known_hosts lines given inline in config
    known_hosts_file: Path | None = None  # neither: the ssh config's known_hosts files (~/.ssh/known_hosts)
    # The key to log in with; None: given as a Pulumi secret (HpcEnvironmentArgs.private_key), or
    # else the agent's keys and the ssh config's IdentityFile.
    private_key_file: Path | None = None
    remote_work_dir: str = DEFAULT_REMOTE_WORK_DIR  # absolute, or relative to the login user's home
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    # What only this target's scheduler reads (LSF: memory_unit), as its class's `parse_options`
    # returned them: validated, every default filled in.
    scheduler_options: Mapping[str, str] = field(default_factory=dict)
    directives: SiteDirectives = NO_SITE_DIRECTIVES
    private_key: str | None = field(default=None, repr=False)
    private_key_passphrase: str | None = field(default=None, repr=False)
    # The OpenSSH config to read (as `ssh -F`); None: ~/.ssh/config, then /etc/ssh/ssh_config.
    ssh_config: Path | None = None
    # How the steps run: "bare" (the login node's software) or "apptainer" (in the image, `apptainer`).
    runtime: str = "bare"
    apptainer: ApptainerSettings | None = None  # set when runtime is "apptainer"

    def __post_init__(self) -> None:
        if self.known_hosts is not None and self.known_hosts_file is not None:
            raise HpcConfigError(
                f"HpcTarget {self.host}: give at most one of known_hosts (the entries) or known_hosts_file (a path); "
                "with neither, the host keys come from the ssh config's known_hosts files"
            )

    @property
    def has_known_hosts(self) -> bool:
        """Whether the target gives the login node's host keys itself (inline or a file)."""
        return self.known_hosts is not None or self.known_hosts_file is not None

    @property
    def known_hosts_source(self) -> str:
        """How an error message names where the host keys came from."""
        return f"file {self.known_hosts_file}" if self.known_hosts_file is not None else "inline known_hosts"
