"""Where this shell's Pulumi keeps stacks and secrets: the backend and passphrase you chose, else files in .state/.

`scripts/activate` asks `choose` and evaluates what `shell_code` prints. A choice the user made
is kept, never overridden:
- the backend: `PULUMI_BACKEND_URL`, else the `current` backend of a `pulumi login` (the
  credentials file in `PULUMI_HOME`, by default `~/.pulumi`), else Pulumi Cloud when
  `PULUMI_ACCESS_TOKEN` is set (what the pulumi CLI itself does in that order);
- the secrets: `PULUMI_CONFIG_PASSPHRASE`, else `PULUMI_CONFIG_PASSPHRASE_FILE` (pulumi reads
  them in that order); a stack made with another secrets provider (`--secrets-provider
  awskms://...`) names it in its stack file and needs neither.
Only where the user has no backend (or asks for it with `ATLAS_PULUMI_BACKEND=local`, as
scripts/demo and the local environment's stacks do) is the backend the file backend under
`.state/pulumi-backend`, and the passphrase (unless the user gave one) generated once into
`.state/passphrase`. `PULUMI_HOME` is never set: a `pulumi login` made later lands in the
user's own Pulumi home, where the next activate finds it. What activate set itself is named
in `ATLAS_ACTIVATE_SET`, so sourcing it again decides afresh instead of taking its own
defaults for the user's choice.

One line says which backend and which secrets source are used (`Choice.line`): where they come
from, never a passphrase or a token, and a URL without its password. `describe_backend` gives the
same words to the CLIs' error messages (infra/cli/pulumi_cli.py).

Standard library only, as the rest of infra/toolchain.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shlex
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

QUIET_VARIABLE = "ATLAS_ACTIVATE_QUIET"  # set: activate says nothing (scripts/compare, monitor, nodes)
FORCE_VARIABLE = "ATLAS_PULUMI_BACKEND"  # "local": the repository's file backend whatever the user has
SET_VARIABLE = "ATLAS_ACTIVATE_SET"  # the variables activate set to its own defaults, space-separated
PULUMI_CLOUD = "https://api.pulumi.com"
# Query parameters of a backend URL that may carry a credential (azblob's, a self-hosted service's).
SECRET_PARAMETERS = ("key", "secret", "token", "password", "sig", "credential")


@dataclass(frozen=True)
class Choice:
    """What activate sets for Pulumi, and the one line that says so."""

    backend: str  # the URL, as shown (no password)
    backend_source: str  # where it comes from, in words
    secrets: str  # the secrets source, in words (never the passphrase)
    local: bool  # the local file backend under .state/
    exports: Mapping[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    create_dirs: tuple[Path, ...] = ()
    passphrase_file: Path | None = None  # generated (mode 0600) when it does not exist

    def line(self) -> str:
        where = f"atlas: Pulumi backend {self.backend} ({self.backend_source}); secrets: {self.secrets}"
        if self.local:
            where += (
                "; deleting .state/ deletes these stacks and their passphrase (a real site's stack belongs "
                "in a backend of your own: `(unset PULUMI_BACKEND_URL; pulumi login URL)`, then source "
                "scripts/activate again)"
            )
        return where


def defaults(state: Path) -> dict[str, str]:
    """The values activate sets for the local default."""
    return {
        "PULUMI_BACKEND_URL": f"file://{state / 'pulumi-backend'}",
        "PULUMI_CONFIG_PASSPHRASE_FILE": str(state / "passphrase"),
    }


def users_own(environ: Mapping[str, str], state: Path) -> dict[str, str]:
    """The environment without what activate set itself earlier in this shell (a name it listed
    whose value is still its default): those are not the user's choice."""
    ours = set(environ.get(SET_VARIABLE, "").split())
    default = defaults(state)
    return {k: v for k, v in environ.items() if not (k in ours and default.get(k) == v)}


def pulumi_home(environ: Mapping[str, str]) -> Path:
    """`PULUMI_HOME`, else `.pulumi` in the login user's home as the system's user database gives
    it: the pulumi CLI does not read `$HOME` (Go's `user.Current`)."""
    home = environ.get("PULUMI_HOME")
    if home:
        return Path(home)
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pulumi"
    except KeyError:  # a user the database does not list: Go falls back to $HOME
        return Path(environ.get("HOME") or "/") / ".pulumi"


def logged_in_backend(environ: Mapping[str, str]) -> str | None:
    """The backend of the user's `pulumi login` (its credentials file's `current`), if any."""
    credentials = pulumi_home(environ) / "credentials.json"
    try:
        current = json.loads(credentials.read_text()).get("current")
    except (OSError, ValueError, AttributeError):
        return None
    return current if isinstance(current, str) and current else None


def current_backend(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The backend the pulumi CLI uses with this environment and where that comes from; None
    where it has none (pulumi would ask to log in)."""
    if environ.get("PULUMI_BACKEND_URL"):
        return environ["PULUMI_BACKEND_URL"], "PULUMI_BACKEND_URL"
    logged_in = logged_in_backend(environ)
    if logged_in is not None:
        return logged_in, f"your `pulumi login`, {pulumi_home(environ) / 'credentials.json'}"
    if environ.get("PULUMI_ACCESS_TOKEN"):
        return PULUMI_CLOUD, "Pulumi Cloud, PULUMI_ACCESS_TOKEN"
    return None


def redact(url: str) -> str:
    """A backend URL as it may be shown: no password, no parameter that may hold a credential."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "(a backend URL that cannot be parsed)"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':')[0]}:***@{host}" if ":" in user else f"{user}@{host}"
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    shown = [(k, "***" if any(s in k.lower() for s in SECRET_PARAMETERS) else v) for k, v in query]
    return urllib.parse.urlunsplit(
        (parts.scheme, netloc, parts.path, urllib.parse.urlencode(shown, safe="/:,"), parts.fragment)
    )


def describe_backend(environ: Mapping[str, str]) -> str:
    """`<url> (from <where>)` for an error message; the URL without credentials."""
    found = current_backend(environ)
    if found is None:
        return "(none: not logged in and PULUMI_BACKEND_URL unset)"
    url, source = found
    return f"{redact(url)} (from {source})"


def _secrets(environ: Mapping[str, str]) -> str | None:
    if environ.get("PULUMI_CONFIG_PASSPHRASE"):
        return "the passphrase in PULUMI_CONFIG_PASSPHRASE"
    file = environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
    if file:
        missing = "" if Path(file).is_file() else " (missing: create it, or unset the variable)"
        return f"the passphrase file {file} (PULUMI_CONFIG_PASSPHRASE_FILE){missing}"
    return None


def choose(environ: Mapping[str, str], state: Path) -> Choice:
    """The backend and secrets source for a shell with `environ`, the repository's state folder
    being `state` (.state/)."""
    own = users_own(environ, state)
    forced = own.get(FORCE_VARIABLE, "").strip().lower()
    if forced not in ("", "local"):
        raise ValueError(f"{FORCE_VARIABLE}={forced!r}: use `local` (the file backend under .state/) or leave it unset")
    dropped = tuple(sorted(k for k in environ.keys() - own.keys()))
    found = None if forced == "local" else current_backend(own)
    secrets_source = _secrets(own)
    if found is not None:
        url, source = found
        return Choice(
            backend=redact(url),
            backend_source=source,
            secrets=secrets_source
            or "each stack's own provider (a stack with a passphrase needs PULUMI_CONFIG_PASSPHRASE or "
            "PULUMI_CONFIG_PASSPHRASE_FILE)",
            local=False,
            unset=dropped + ((SET_VARIABLE,) if SET_VARIABLE in environ else ()),
        )
    default = defaults(state)
    exports = {"PULUMI_BACKEND_URL": default["PULUMI_BACKEND_URL"]}
    passphrase_file = None
    if secrets_source is None:
        exports["PULUMI_CONFIG_PASSPHRASE_FILE"] = default["PULUMI_CONFIG_PASSPHRASE_FILE"]
        passphrase_file = Path(default["PULUMI_CONFIG_PASSPHRASE_FILE"])
        secrets_source = f"the passphrase file {passphrase_file} (generated once, mode 0600)"
    exports[SET_VARIABLE] = " ".join(k for k in exports if k in default)
    why = f"{FORCE_VARIABLE}=local" if forced else "no backend of yours: no PULUMI_BACKEND_URL, no `pulumi login`"
    return Choice(
        backend=exports["PULUMI_BACKEND_URL"],
        backend_source=f"the local default, {why}",
        secrets=secrets_source,
        local=True,
        exports=exports,
        unset=tuple(k for k in dropped if k not in exports),
        create_dirs=(state / "pulumi-backend",),
        passphrase_file=passphrase_file,
    )


def apply_files(choice: Choice) -> None:
    """Make the local default's folders and its passphrase (once, mode 0600; never printed)."""
    for folder in choice.create_dirs:
        folder.mkdir(parents=True, exist_ok=True)
    path = choice.passphrase_file
    if path is not None and not (path.is_file() and path.stat().st_size > 0):
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")


def shell_code(choice: Choice) -> str:
    """What activate evaluates: the variables to unset and to export, then the line."""
    lines = [f"unset {name}" for name in choice.unset]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in choice.exports.items()]
    # On stderr, so a script that sources activate keeps its stdout; none where the wrappers ask.
    lines.append(f"[ -n \"${{{QUIET_VARIABLE}:-}}\" ] || printf '%s\\n' {shlex.quote(choice.line())} >&2")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.toolchain.backend", description=__doc__.split("\n\n")[0])
    p.add_argument("--state", type=Path, required=True, help="the repository's state folder (.state/)")
    args = p.parse_args(argv)
    try:
        choice = choose(os.environ, args.state)
        apply_files(choice)
    except (ValueError, OSError) as error:
        print(f"atlas: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(shell_code(choice))
    return 0


if __name__ == "__main__":
    sys.exit(main())
