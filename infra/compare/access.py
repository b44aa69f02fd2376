"""How scripts/compare, monitor and nodes reach each environment: the Access model, parsed from a stack's config.

Pure: the stack file's `config` mapping in, paths and names out (never a key's or kubeconfig's
contents); infra.cli.stack_files reads the files and the flags. The Kubernetes side is resolved as
the stack program resolves it (`Access.kube_request`, infra/kubeconfig.py): the stack's
kubeconfig or --kubeconfig, else KUBECONFIG merged, else ~/.kube/config; the stack's context or
--context, else the current one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.kubeconfig import KubeconfigRequest
from infra.validation import config_path


@dataclass
class Access:
    """How to reach each environment: paths to keys and kubeconfigs, never their contents."""

    project_dir: Path = field(default_factory=Path.cwd)
    # The one kubeconfig file to read; None: KUBECONFIG (merged), else ~/.kube/config.
    kubeconfig: Path | None = None
    ssh_keys: dict[str, Path] = field(default_factory=dict)
    known_hosts: dict[str, Path] = field(default_factory=dict)
    kube_context: str | None = None  # atlas:openshift.context or --context; None: the current one
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


def access_from_config(config: Mapping[str, Any], project_dir: Path) -> Access:
    """The keys, known_hosts files and kubeconfig a stack file's `config:` names."""
    access = Access(project_dir=project_dir)

    def local(value: Any) -> Path | None:
        if not isinstance(value, str) or not value:
            return None
        return config_path(value, project_dir)

    openshift = config.get("atlas:openshift") or {}
    if isinstance(openshift, dict):
        access.kubeconfig = local(openshift.get("kubeconfig"))
        context = openshift.get("context")
        access.kube_context = context if isinstance(context, str) and context else None
        access.kube_insecure_tls = openshift.get("insecure_skip_tls_verify") in (True, "true")
    aws = config.get("atlas:aws")
    if isinstance(aws, dict) and (key := local(aws.get("ssh_private_key_file"))) is not None:
        access.ssh_keys["aws"] = key
    for name, section in (config.get("atlas:hpc") or {}).items():
        if isinstance(section, dict):
            if (key := local(section.get("private_key_file"))) is not None:
                access.ssh_keys[name] = key
            if (hosts := local(section.get("known_hosts_file"))) is not None:
                access.known_hosts[name] = hosts
    return access


def parse_pairs(values: Sequence[str], flag: str) -> dict[str, Path]:
    """`ENV=PATH` flag values (--ssh-key, --known-hosts) by environment."""
    result = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            raise SystemExit(f"compare: {flag} {value!r}: expected ENVIRONMENT=PATH")
        result[name] = Path(path).expanduser()
    return result
