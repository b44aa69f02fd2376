"""The pulumi CLI as the atlas commands run it: in the stack's project, quietly, a failure in one line with the fix.

The project is found as pulumi finds it, so a command run from any folder reads the stack that
`pulumi` run there would: `-C/--cwd DIR`, else the nearest folder at or above the working one
holding a Pulumi.yaml, else `$ATLAS_PROJECT` (the scripts/ wrappers set it to their repository).
Paths a user gives on the command line stay relative to where they ran the command; paths in
the stack's config are relative to the project, as for the stack program.

`run_pulumi` runs `pulumi <args> --non-interactive` in the project with the caller's environment
(the backend and passphrase that scripts/activate kept or chose, infra/toolchain/backend.py) and
returns its stdout, never printed here (`pulumi config --show-secrets` holds secrets). A failure
is a `PulumiError` whose message names what is wrong and the fix: the backend unreachable or not
logged in, the stack absent, the passphrase missing or wrong.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.toolchain.backend import describe_backend

PROJECT_VARIABLE = "ATLAS_PROJECT"
PROJECT_FILE = "Pulumi.yaml"
TIMEOUT_S = 300.0
ACTIVATE_HINT = "scripts/activate prints the backend and secrets this shell uses"


class ProjectError(Exception):
    """No Pulumi project where one is needed; the message says how to name one."""


class PulumiError(Exception):
    """A pulumi command failed; the message is one line naming the cause and the fix. `cause` says
    which: "backend" (unreachable), "login", "stack" (not in the backend), "passphrase", "cli"
    (no pulumi), "other"."""

    def __init__(self, message: str, cause: str = "other") -> None:
        super().__init__(message)
        self.cause = cause


def find_project(explicit: Path | None, cwd: Path, environ: Mapping[str, str]) -> Path | None:
    """The Pulumi project's folder: `explicit` (--cwd), else the nearest at or above `cwd`, else
    `$ATLAS_PROJECT`; None where there is none."""
    if explicit is not None:
        folder = (cwd / explicit.expanduser()).resolve()
        if not (folder / PROJECT_FILE).is_file():
            raise ProjectError(
                f"--cwd {explicit}: no {PROJECT_FILE} in {folder}; name the folder of the Pulumi project"
            )
        return folder
    for folder in (cwd, *cwd.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    named = environ.get(PROJECT_VARIABLE)
    if named and (Path(named) / PROJECT_FILE).is_file():
        return Path(named)
    return None


def require_project(project: Path | None, why: str) -> Path:
    if project is None:
        raise ProjectError(
            f"{why} needs the Pulumi project: run it in the project's folder (where {PROJECT_FILE} is) "
            "or give -C/--cwd DIR"
        )
    return project


def project_settings(project: Path) -> Mapping[str, Any]:
    try:
        settings = yaml.safe_load((project / PROJECT_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ProjectError(f"{project / PROJECT_FILE}: cannot be read ({error})") from None
    return settings if isinstance(settings, Mapping) else {}


def stack_file(project: Path, stack: str) -> Path:
    """Where the project keeps `stack`'s config (Pulumi.yaml's `stackConfigDir`, as pulumi reads it)."""
    folder = project_settings(project).get("stackConfigDir") or "."
    return project / str(folder) / f"Pulumi.{stack}.yaml"


def user_path(value: str) -> Path:
    """A path given on the command line: relative to the folder the command was run in."""
    return Path(value).expanduser().absolute()


def run_pulumi(args: Sequence[str], project: Path, timeout_s: float = TIMEOUT_S) -> str:
    """`pulumi <args> --non-interactive` in the project; its stdout (the caller's to keep quiet)."""
    command = ["pulumi", *args, "--non-interactive"]
    try:
        proc = subprocess.run(
            command, cwd=project, capture_output=True, text=True, check=False, timeout=timeout_s
        )
    except FileNotFoundError:
        raise PulumiError(
            "no `pulumi` command on PATH: `source scripts/activate` (Atlas's toolchain) or install the pulumi CLI",
            "cli",
        ) from None
    except subprocess.TimeoutExpired:
        raise PulumiError(
            f"`pulumi {' '.join(args[:2])}` did not answer in {timeout_s:.0f} s: is the backend "
            f"{describe_backend(os.environ)} reachable? ({ACTIVATE_HINT})",
            "backend",
        ) from None
    if proc.returncode != 0:
        cause, message = explain_failure(args, proc.stderr, os.environ)
        raise PulumiError(message, cause)
    return proc.stdout


def _stack_of(args: Sequence[str]) -> str:
    for flag in ("-s", "--stack"):
        if flag in args[:-1]:
            return args[list(args).index(flag) + 1]
    return ""


def _first_error(stderr: str) -> str:
    """pulumi's first `error:` line (else its last line), any password in a URL there masked."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    found = next((line[len("error:"):].strip() for line in lines if line.lower().startswith("error:")), None)
    text = found if found is not None else (lines[-1] if lines else "no message")
    return re.sub(r"(//[^/\s:@]+):[^@\s/]+@", r"\1:***@", text)


# What pulumi prints when it cannot reach its backend (file, S3-compatible, Pulumi Cloud or a
# self-hosted service): each a substring of its error line.
UNREACHABLE = (
    "unable to open state directory",
    "dial tcp",
    "connection refused",
    "no such host",
    "performing http request",
    "i/o timeout",
    "tls:",
    "x509:",
    "exceeded maximum number of attempts",
    "nocredentialproviders",
    "failed to refresh cached credentials",
    "accessdenied",
    "invalidaccesskeyid",
    "signaturedoesnotmatch",
    "could not read backend",
    "blob (key",
)


def explain_failure(args: Sequence[str], stderr: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """pulumi's error: its cause (PulumiError.cause) and one line with the fix (the backend named
    without credentials)."""
    detail = _first_error(stderr)
    low = detail.lower()
    stack = _stack_of(args)
    backend = describe_backend(environ)
    what = f"`pulumi {' '.join(a for a in args if a != '--show-secrets')}`"
    if "passphrase must be set" in low:
        return "passphrase", (
            f"stack {stack}'s secrets need its passphrase: set PULUMI_CONFIG_PASSPHRASE or "
            f"PULUMI_CONFIG_PASSPHRASE_FILE to the one it was made with ({ACTIVATE_HINT})"
        )
    if "incorrect passphrase" in low:
        return "passphrase", (
            f"the passphrase given does not open stack {stack}'s secrets: set PULUMI_CONFIG_PASSPHRASE or "
            f"PULUMI_CONFIG_PASSPHRASE_FILE to the one it was made with ({ACTIVATE_HINT})"
        )
    if "pulumi_config_passphrase_file" in low:
        return "passphrase", (
            f"{detail}: point PULUMI_CONFIG_PASSPHRASE_FILE at the stack's passphrase file, or unset it"
        )
    if re.search(r"no stack named|stack .* (not found|does not exist)", low):
        return "stack", (
            f"stack {stack or '(none)'} is not in the backend {backend}: check its name (`pulumi stack ls`), "
            f"or use the backend that holds it (PULUMI_BACKEND_URL, `pulumi login URL`; {ACTIVATE_HINT})"
        )
    if "pulumi_access_token must be set" in low or "not logged in" in low or "unauthorized" in low:
        return "login", (
            f"not logged in to the backend {backend}: `pulumi login` (or set PULUMI_ACCESS_TOKEN), or choose "
            f"another backend with PULUMI_BACKEND_URL ({ACTIVATE_HINT})"
        )
    if any(mark in low for mark in UNREACHABLE):
        fix = "check it (network, credentials)"
        if "no such file or directory" in low or "not a directory" in low:
            fix = "create the folder, or name the right one"
        return "backend", (
            f"the Pulumi backend {backend} cannot be reached ({detail}); {fix}, or choose another with "
            f"PULUMI_BACKEND_URL or `pulumi login URL` ({ACTIVATE_HINT})"
        )
    return "other", f"{what} failed: {detail}"
