"""A stack as the atlas commands read it: its outputs, and its config (secrets too) parsed by the program's parsers.

- Outputs: `pulumi stack output --json -s STACK` in the project, or a file (`--outputs FILE`, `-`
  for stdin).
- Config: `pulumi config --show-secrets --json -s STACK` (with `--config-file` for `--stack-file`),
  parsed by `infra.config` exactly as `pulumi up` parses it, so a key held as a Pulumi secret
  (`atlas:hpc.<name>.private_key`), the kubeconfig and `atlas:openshift.context`, and each site's
  `poll_interval_seconds` reach the commands. The secrets stay in this process's memory: never
  printed, never written to disk. A stack file read without Pulumi (no project, or a stack not
  in the backend) is read as it is, and refused where it holds secrets only Pulumi can decrypt.
- Access: the parsed config, then the command line's overrides (`--kubeconfig`, `--context`,
  `--ssh-key ENV=PATH`, `--known-hosts ENV=PATH`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from infra.cli.pulumi_cli import ProjectError, PulumiError, require_project, run_pulumi, stack_file
from infra.compare.access import Access, parse_pairs
from infra.config import PROJECT, config_values, stack_config_from_values
from infra.errors import AtlasConfigError
from infra.stack_config import StackConfig


class StackReadError(Exception):
    """The stack's outputs or config cannot be read; the message names why and the fix, `cause`
    which (PulumiError's causes, or "other")."""

    def __init__(self, message: str, cause: str = "other") -> None:
        super().__init__(message)
        self.cause = cause


def read_stack_outputs(args: argparse.Namespace, project: Path | None) -> dict[str, Any] | None:
    """The outputs --outputs FILE|- or -s STACK names; None where neither is given."""
    if args.outputs == "-":
        return dict(json.load(sys.stdin))
    if args.outputs:
        return dict(json.loads(Path(args.outputs).read_text()))
    if args.stack:
        try:
            text = run_pulumi(
                ["stack", "output", "--json", "-s", args.stack], require_project(project, "-s STACK")
            )
        except PulumiError as error:
            raise StackReadError(str(error), error.cause) from None
        except ProjectError as error:
            raise StackReadError(str(error)) from None
        return dict(json.loads(text or "{}"))
    return None


def _has_secure_values(value: Any) -> bool:
    if isinstance(value, Mapping):
        return (set(value) == {"secure"}) or any(_has_secure_values(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secure_values(v) for v in value)
    return False


def _plain_values(path: Path) -> dict[str, Any]:
    """A stack file's `atlas:` values as they are written (no Pulumi, so no secret decrypted)."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise StackReadError(f"--stack-file {path}: cannot be read ({error})") from None
    config = document.get("config") or {} if isinstance(document, Mapping) else {}
    return {str(k).partition(":")[2]: v for k, v in config.items() if str(k).partition(":")[0] == PROJECT}


def read_stack_config(
    project: Path | None, stack: str | None, file: Path | None = None
) -> StackConfig | None:
    """The stack's config, parsed as the stack program parses it (secrets read through Pulumi);
    None where the stack names no `atlas:` key. `file` (--stack-file) is read instead of the
    project's stack file; without `stack` its name gives the stack (`Pulumi.<stack>.yaml`)."""
    name = stack or (file.name.removeprefix("Pulumi.").removesuffix(".yaml") if file is not None else None)
    if name is None:
        return None
    if project is None and file is None:
        try:
            require_project(project, f"-s {name}")
        except ProjectError as error:
            raise StackReadError(str(error)) from None
    where = file or (stack_file(project, name) if project is not None else None)
    values: dict[str, Any] | None = None
    secret_keys: frozenset[str] = frozenset()
    why_plain = "no Pulumi project here"
    if project is not None:
        args = ["config", "--show-secrets", "--json", "-s", name]
        if file is not None:
            args += ["--config-file", str(file)]
        try:
            values, secret_keys = config_values(json.loads(run_pulumi(args, project) or "{}"))
        except PulumiError as error:
            # Only a stack the backend does not hold yet (`atlas nodes` before `pulumi stack init`)
            # is read as written; a backend or passphrase that fails is the answer.
            if error.cause != "stack" or where is None or not where.is_file():
                raise StackReadError(str(error), error.cause) from None
            why_plain = str(error)
        except (ValueError, AtlasConfigError) as error:
            raise StackReadError(f"stack {name}'s config: {error}") from None
    if values is None:
        if where is None or not where.is_file():
            return None
        values = _plain_values(where)
        if _has_secure_values(values):
            raise StackReadError(
                f"{where} holds secrets only Pulumi can decrypt, and Pulumi could not read stack {name} "
                f"({why_plain}); fix that first"
            )
        print(f"atlas: reading {where} as written ({why_plain})", file=sys.stderr)
    if not values:
        return None
    # Relative paths in config are the project's, as for the stack program; without a project,
    # the stack file's folder's.
    base = project if project is not None else where.parent if where is not None else Path.cwd()
    try:
        return stack_config_from_values(name, values, secret_keys, base)
    except AtlasConfigError as error:
        raise StackReadError(f"stack {name}'s config: {error}") from None


def access_from_stack_config(config: StackConfig | None, project: Path) -> Access:
    """How to reach each environment, as the stack's parsed config says."""
    access = Access(project_dir=project)
    if config is None:
        return access
    if config.openshift is not None:
        access.kubeconfig = config.openshift.kubeconfig_path
        access.kube_context = config.openshift.context
        access.kube_insecure_tls = config.openshift.insecure_skip_tls_verify
    for hpc in config.hpc:
        access.hpc[hpc.name] = hpc.target
        access.poll_intervals[hpc.name] = hpc.target.poll_interval_s
    if config.aws is not None:
        access.poll_intervals["aws"] = config.aws.poll_interval_s
        if config.aws.ssh_private_key_file is not None:
            access.ssh_keys["aws"] = config.aws.ssh_private_key_file
    return access


def load_access(args: argparse.Namespace, project: Path, config: StackConfig | None) -> Access:
    """The stack config's Access with the command line's overrides over it (scripts/compare,
    monitor and nodes alike)."""
    access = access_from_stack_config(config, project)
    if args.kubeconfig:
        access.kubeconfig, access.kubeconfig_key = args.kubeconfig, "--kubeconfig"
    if args.context:
        access.kube_context, access.kube_context_key = args.context, "--context"
    try:
        access.ssh_keys.update(parse_pairs(args.ssh_key, "--ssh-key"))
        access.known_hosts.update(parse_pairs(args.known_hosts, "--known-hosts"))
    except ValueError as error:
        raise StackReadError(str(error)) from None
    return access
