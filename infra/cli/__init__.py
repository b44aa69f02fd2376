"""`atlas`: one command for Atlas's tools, each subcommand handed to its own module's `main(argv)`.

    atlas compare -s local          # the comparison report (compare.py)
    atlas monitor -s local          # a live view of a stack's runs (monitor.py)
    atlas nodes -s local            # under-used GPU nodes, queue-wait estimates, backfill (nodes.py)
    atlas doctor -s local           # before the first up: every environment checked, with fixes (doctor.py)
    atlas workload check PATH       # a workload definition as each side would run it (infra/workload_check.py)
    atlas sif-cache -s local prune  # the Apptainer sites' SIF caches, listed or pruned (sif_cache.py)

compare, monitor and nodes read a stack's outputs through the kinds router (infra.kinds), its config
through the pulumi CLI parsed by the stack program's parsers, and reach each environment as its kind
does; doctor reads the config alone (there are no outputs before the first `pulumi up`); common.py,
stack_files.py and pulumi_cli.py are what they share.

Installed as a console script (pyproject.toml's `[project.scripts]`); scripts/compare, monitor,
nodes, doctor and workload call it. The dispatcher is a table: a subcommand's module is imported only
when it runs, so `atlas workload` needs no extra, and a subcommand whose extra is missing says
which one in one line (infra/extras.py). A failure the user fixes (infra.errors.ActionableError:
credentials the cluster refuses, a kubeconfig context that is not there) ends any command in one
line naming the fix, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from infra.errors import ActionableError
from infra.extras import extra_for, missing_extra


@dataclass(frozen=True)
class Subcommand:
    module: str  # its `main(argv) -> int` does the work
    summary: str
    extras: tuple[str, ...] = ()  # what it needs beyond the base install


SUBCOMMANDS: dict[str, Subcommand] = {
    "compare": Subcommand(
        "infra.cli.compare", "the comparison report of every environment a stack's outputs name", ("report",)
    ),
    "monitor": Subcommand("infra.cli.monitor", "a live view of a stack's runs in every environment", ("report",)),
    "nodes": Subcommand(
        "infra.cli.nodes", "under-used GPU nodes, queue-wait estimates and backfill", ("report",)
    ),
    "doctor": Subcommand(
        "infra.cli.doctor", "before the first `pulumi up`: every environment of a stack checked, with fixes", ("aws",)
    ),
    "sif-cache": Subcommand("infra.cli.sif_cache", "list or prune the SIF cache of a stack's Apptainer sites"),
    "workload": Subcommand("infra.workload_check", "check a workload definition: `atlas workload check PATH`"),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atlas",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="`atlas <command> --help` shows a command's own options.",
    )
    commands = p.add_subparsers(dest="command", title="commands", metavar="<command>")
    for name, sub in SUBCOMMANDS.items():
        commands.add_parser(name, help=sub.summary, add_help=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        parser().error("name a command (atlas --help lists them)")
    if args[0].startswith("-"):
        # Only the dispatcher's own options here (--help); a command's come after its name.
        parser().parse_args(args)
        return 2
    name, rest = args[0], args[1:]
    parser().parse_args([name])  # an unknown command: argparse's "invalid choice" and exit 2
    sub = SUBCOMMANDS[name]
    # A command's parser that names no `prog` of its own shows usage as `atlas <command>`.
    sys.argv[0] = f"atlas {name}"
    try:
        module = importlib.import_module(sub.module)
        return int(module.main(rest))
    except ModuleNotFoundError as missing:
        extra = extra_for(missing, sub.extras)
        if extra is None:
            raise
        print(f"atlas: {missing_extra(missing, extra, f'atlas {name}')}", file=sys.stderr)
        return 2
    except ActionableError as refused:
        # Credentials refused, a context that is not there, ...: its one line names the fix.
        print(f"atlas {name}: {refused}", file=sys.stderr)
        return 1
