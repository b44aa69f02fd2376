"""`atlas sif-cache`: list or prune the SIF cache of a stack's Apptainer sites.

    scripts/sif-cache -s local                 # each SIF: digest, size, who converted it, in use by
    scripts/sif-cache -s local prune           # remove the SIFs no run directory links to
    scripts/sif-cache -s local prune --all     # remove every SIF (a run that needs one converts again)
    scripts/sif-cache -s local prune --dry-run # say what would go

`pulumi destroy` leaves the cache alone: it is a cache of images by digest, shared by the stacks
and runs of one login user, not a resource of one stack. A SIF is "in use" while some run
directory under the environment's `remote_work_dir` links to it (`.atlas/image.sif`, made by the
SifImage resource; destroy removes the link). Pruning takes each SIF's conversion lock without
waiting, so a SIF being converted or staged is skipped, never half removed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from infra.cli.common import UsageError, add_stack_config_arguments, project_of, read_stack
from infra.hpc.apptainer import RUN_DIR_SIF
from infra.hpc.remote import remote_path_expression

# One line per SIF: name, bytes, record (JSON or "-"), in use ("1"/"0"); tab-separated.
_LIST = r"""
cache={cache}
runs={runs}
[ -d "$cache" ] || exit 0
used=$(find "$runs" -maxdepth 8 -type l -path '*/{link}' -exec readlink -f {{}} \; 2>/dev/null | sort -u)
for sif in "$cache"/*.sif; do
  [ -e "$sif" ] || continue
  real=$(readlink -f -- "$sif")
  record=$(cat -- "$sif.json" 2>/dev/null | tr -d '\n' || true)
  if printf '%s\n' "$used" | grep -qxF -- "$real"; then inuse=1; else inuse=0; fi
  printf '%s\t%s\t%s\t%s\n' "$(basename -- "$sif")" "$(stat -c %s -- "$sif")" "${{record:--}}" "$inuse"
done
"""

# Removes the named SIFs, each under its lock taken without waiting; prints removed/busy per name.
# The lock file stays: a conversion waiting on it must lock the same file as one that starts later.
_PRUNE = r"""
cd {cache} || exit 0
for name in {names}; do
  exec 9>>".$name.lock"
  if flock -n 9; then rm -f -- "$name" "$name.json"; echo "removed $name"
  else echo "busy $name"; fi
  exec 9>&-
done
"""


@dataclass(frozen=True)
class CachedSif:
    name: str
    size_bytes: int
    seconds: float | None  # the conversion's wall time, as recorded beside it
    converted_at: str
    by: str
    in_use: bool


def list_script(cache_dir: str, remote_work_dir: str) -> str:
    cache, runs = remote_path_expression(cache_dir), remote_path_expression(remote_work_dir)
    return _LIST.format(cache=cache, runs=runs, link=RUN_DIR_SIF)


def prune_script(cache_dir: str, names: Sequence[str]) -> str:
    return _PRUNE.format(cache=remote_path_expression(cache_dir), names=" ".join(shlex.quote(n) for n in names))


def parse_listing(stdout: str) -> list[CachedSif]:
    """list_script's lines as CachedSif; a line that is not one (a login banner) is skipped."""
    found = []
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != 4 or not parts[0].endswith(".sif") or not parts[1].isdigit():
            continue
        record = json.loads(parts[2]) if parts[2].startswith("{") else {}
        seconds = record.get("seconds")
        found.append(
            CachedSif(
                name=parts[0],
                size_bytes=int(parts[1]),
                seconds=float(seconds) if isinstance(seconds, int | float) else None,
                converted_at=str(record.get("converted_at") or ""),
                by=str(record.get("by") or ""),
                in_use=parts[3] == "1",
            )
        )
    return found


def to_prune(cached: Sequence[CachedSif], everything: bool) -> list[str]:
    return [c.name for c in cached if everything or not c.in_use]


def render(environment: str, cache_dir: str, cached: Sequence[CachedSif]) -> str:
    lines = [f"{environment}: {cache_dir} ({len(cached)} SIF{'s' if len(cached) != 1 else ''})"]
    for c in cached:
        if c.seconds is not None:
            took = f"converted in {c.seconds:.1f} s, {c.converted_at or 'when not recorded'}, by {c.by or '?'}"
        else:
            took = "conversion not recorded (made outside Atlas)"
        lines.append(f"  {c.name}  {c.size_bytes / 1e6:.1f} MB  {took}  {'in use' if c.in_use else 'not in use'}")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atlas sif-cache", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_stack_config_arguments(p, "the stack whose Apptainer sites' caches to read (its config, through pulumi)")
    p.add_argument("action", nargs="?", choices=("list", "prune"), default="list")
    p.add_argument("--environment", action="append", default=[], help="only this HPC environment (repeatable)")
    p.add_argument("--all", action="store_true", help="prune: every SIF, in use or not")
    p.add_argument("--dry-run", action="store_true", help="prune: say what would be removed, remove nothing")
    p.set_defaults(outputs=None, ssh_key=[], known_hosts=[])
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not (args.stack or args.stack_file):
        p.error("give -s STACK (or --stack-file FILE)")
    from infra.hpc import ssh
    from infra.kinds.hpc import SECTION, target_endpoint

    try:
        stack = read_stack(args, project_of(args))
        if stack.config is None:
            raise UsageError(f"stack {args.stack or args.stack_file} declares no environment (no atlas: config)")
        sites = [h for h in stack.config.hpc if h.target.apptainer is not None
                 and (not args.environment or h.name in args.environment)]
        if not sites:
            raise UsageError("no HPC environment of this stack has runtime: apptainer (or none of --environment)")
    except UsageError as error:
        print(f"sif-cache: {error}", file=sys.stderr)
        return 2
    try:
        for site in sites:
            settings = site.target.apptainer
            assert settings is not None
            name = site.name
            conn = ssh.connection(target_endpoint(
                site.target, f"{SECTION}.{name}", stack.access.ssh_keys.get(name), stack.access.known_hosts.get(name)
            ))
            script = list_script(settings.cache_dir, site.target.remote_work_dir)
            listing = ssh.run_remote(conn, f"bash -c {shlex.quote(script)}", safe_to_retry=True)
            cached = parse_listing(listing.stdout)
            sys.stdout.write(render(name, settings.cache_dir, cached))
            if args.action != "prune":
                continue
            names = to_prune(cached, args.all)
            if not names or args.dry_run:
                print(f"  {'would remove' if args.dry_run else 'nothing to remove'}: {' '.join(names) or '-'}")
                continue
            done = ssh.run_remote(conn, f"bash -c {shlex.quote(prune_script(settings.cache_dir, names))}")
            for line in done.stdout.splitlines():
                print(f"  {line.replace('busy', 'skipped (being converted):')}")
    finally:
        ssh.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
