"""How scripts/compare, monitor and nodes reach each environment: the Access model, what the stack's config says of it.

`infra.cli.stack_files` fills it from the stack's config, read through Pulumi (secrets included)
and parsed by the stack program's own parsers (`infra.config`), then puts the command line's
overrides over it (--kubeconfig, --context, --ssh-key, --known-hosts, --interval). The kinds
(`infra.kinds`) connect with it: an HPC side through its parsed target, as the stack's own
providers do; the Kubernetes side as the stack program resolves it (`Access.kube_request`,
infra/kubeconfig.py): the stack's kubeconfig or --kubeconfig, else KUBECONFIG merged, else
~/.kube/config; the stack's context or --context, else the current one.

Pure data: nothing here opens a file or a connection. A target's key (a Pulumi secret) stays in
the target, out of every repr.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infra.hpc.target import DEFAULT_POLL_INTERVAL_S, HpcTarget
from infra.kubeconfig import KubeconfigRequest


@dataclass
class Access:
    """How to reach each environment: its target as the stack's config gives it, and the
    command line's overrides."""

    project_dir: Path = field(default_factory=Path.cwd)
    kubeconfig: Path | None = None  # None: as kubectl finds it ($KUBECONFIG, ~/.kube/config)
    ssh_keys: dict[str, Path] = field(default_factory=dict)  # by environment: a key file over the target's
    known_hosts: dict[str, Path] = field(default_factory=dict)  # by environment: a known_hosts file over the target's
    kube_context: str | None = None  # None: the kubeconfig's current context
    hpc: dict[str, HpcTarget] = field(default_factory=dict)  # by environment, as the stack program parses it
    # Seconds between two scheduler queries, by environment (`atlas:hpc.<name>.poll_interval_seconds`,
    # `atlas:aws.poll_interval_seconds`): what the site allows.
    poll_intervals: dict[str, float] = field(default_factory=dict)
    kube_insecure_tls: bool = False  # atlas:openshift.insecure_skip_tls_verify
    # Which flag or key named the file and the context, for messages.
    kubeconfig_key: str = "atlas:openshift.kubeconfig"
    kube_context_key: str = "atlas:openshift.context"

    def kube_request(self, flavour: str | None = None) -> KubeconfigRequest:
        """The cluster's kubeconfig as the stack program resolves it (infra.kubeconfig.resolve_context)."""
        return KubeconfigRequest(
            file=self.kubeconfig,
            context=self.kube_context,
            allow_insecure_tls=self.kube_insecure_tls,
            flavour=flavour,
            file_key=self.kubeconfig_key,
            context_key=self.kube_context_key,
        )

    def poll_interval_s(self, environment: str) -> float:
        """How often the environment's scheduler may be asked: its config's interval, else the
        default every HPC target has (60 s: sites ask for a query a minute)."""
        return self.poll_intervals.get(environment, DEFAULT_POLL_INTERVAL_S)


def parse_pairs(values: Sequence[str], flag: str) -> dict[str, Path]:
    """`ENV=PATH` flag values (--ssh-key, --known-hosts) by environment; a relative PATH is
    relative to the folder the command runs in."""
    result = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{flag} {value!r}: expected ENVIRONMENT=PATH")
        result[name] = Path(path).expanduser().absolute()
    return result
