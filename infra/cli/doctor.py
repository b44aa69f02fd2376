"""`atlas doctor` (scripts/doctor): every environment a stack declares, checked before the first `pulumi up`.

    scripts/doctor -s local                 # one line per check: ok, FAIL (with the fix), skip (why)
    scripts/doctor -s mysite --json         # one object, for scripts
    scripts/doctor -s mysite --context 'proj/api-cluster:6443/me'

It reads the stack's config (not its outputs: there are none yet) through pulumi, secrets
included, parsed as the stack program parses it (stack_files.py), loads its workload, and asks
each environment's kind to check it (infra.kinds.doctor): an HPC login node reached through the
user's ssh config, its scheduler, queue and each step's request; the Kubernetes or OpenShift API,
the login, the project, the quota, the storage class, the GPU nodes, the image registry; AWS's
credentials, region and instance type. Nothing is created or submitted, nothing secret printed.
Exit status: 0 when every check passes, 1 when one fails, 2 when the command or the stack cannot
be read (the line names the flag or the key, and the fix).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from infra.cli.common import UsageError, add_stack_config_arguments, project_of, read_stack
from infra.doctor import render_text, to_json
from infra.workload.load import load_workload
from infra.workload.model import WorkloadError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atlas doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_stack_config_arguments(p, "the stack whose config to check (read through pulumi, secrets included)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    # What the shared readers (common.read_stack) look for, which doctor does not take.
    p.set_defaults(outputs=None, ssh_key=[], known_hosts=[])
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not (args.stack or args.stack_file):
        p.error("give -s STACK (or --stack-file FILE)")
    from infra.hpc import ssh
    from infra.kinds import doctor

    try:
        project = project_of(args)
        stack = read_stack(args, project)
        config = stack.config
        if config is None:
            raise UsageError(
                f"stack {args.stack or args.stack_file} declares no environment (no atlas: config); "
                "see stacks/Pulumi.local.yaml for one that does"
            )
        try:
            workload = load_workload(config.workload_file)
        except WorkloadError as error:
            raise UsageError(f"atlas:workload ({config.workload_file}): {error}") from None
    except UsageError as error:
        print(f"doctor: {error}", file=sys.stderr)
        return 2
    try:
        report = doctor(config, workload, stack.access)
    finally:
        ssh.close_all()
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        sys.stdout.write(render_text(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
