"""Reads a stack's outputs (`pulumi stack output --json`, a file or stdin) and its stack file into Access.

The I/O behind scripts/compare, monitor and nodes' shared flags (-s, --outputs, --stack-file,
--kubeconfig, --context, --ssh-key, --known-hosts); infra.compare.access parses what is read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from infra.compare.access import Access, access_from_config, parse_pairs


def access_from_stack_file(path: Path, project_dir: Path) -> Access:
    config = (yaml.safe_load(path.read_text()) or {}).get("config", {})
    return access_from_config(config, project_dir)


def read_stack_outputs(args: argparse.Namespace) -> dict[str, Any] | None:
    """The outputs --outputs FILE|- or -s STACK names; None where neither is given."""
    if args.outputs == "-":
        return dict(json.load(sys.stdin))
    if args.outputs:
        return dict(json.loads(Path(args.outputs).read_text()))
    if args.stack:
        proc = subprocess.run(
            ["pulumi", "stack", "output", "--json", "-s", args.stack],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if proc.returncode != 0:
            raise SystemExit(f"compare: `pulumi stack output --json -s {args.stack}` failed: {proc.stderr.strip()}")
        return dict(json.loads(proc.stdout or "{}"))
    return None


def load_access(args: argparse.Namespace, project: Path) -> Access:
    """How to reach each environment: the stack's file (--stack-file, else stacks/Pulumi.<stack>.yaml),
    then --kubeconfig, --context, --ssh-key and --known-hosts over it (scripts/compare, monitor and
    nodes alike)."""
    stack_file = args.stack_file or (project / "stacks" / f"Pulumi.{args.stack}.yaml" if args.stack else None)
    access = access_from_stack_file(stack_file, project) if stack_file and stack_file.is_file() else Access(project)
    if args.kubeconfig:
        access.kubeconfig, access.kubeconfig_key = args.kubeconfig, "--kubeconfig"
    if getattr(args, "context", None):
        access.kube_context, access.kube_context_key = args.context, "--context"
    access.ssh_keys.update(parse_pairs(args.ssh_key, "--ssh-key"))
    access.known_hosts.update(parse_pairs(args.known_hosts, "--known-hosts"))
    return access
