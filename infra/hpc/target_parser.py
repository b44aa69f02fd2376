"""Parsing of an HPC target's config section (login host, scheduler, credentials) into the `HpcTarget` model.

`parse_hpc_target` is pure: it takes the dict that `pulumi.Config.get_object` returns for a
key such as `atlas:satori` and either returns an `HpcTarget` or raises `HpcConfigError`
naming the key (`atlas:satori.queue`), what was found and what is expected. Every value
that later reaches a remote shell or a job script is checked here against a conservative
character set, so hostile input (`;`, `$(...)`, newlines, `..`) stops `pulumi preview`
before any resource exists. Quoting (shlex) still happens everywhere downstream: the
checks here are the first wall, not the only one.

A site's own job-script directives (`account`, `extra_directives`, `skip_directives`, as
dask-jobqueue's `account`, `job_extra_directives` and `job_directives_skip`) are checked
against the target's scheduler (infra/hpc/registry.py): what it renders, and what Atlas's own
bookkeeping needs (job name, log file, dependencies), which a site may neither skip nor set.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from infra.hpc.registry import SCHEDULER_CLASSES, SCHEDULER_NAMES
from infra.hpc.scheduler import Scheduler, SiteDirectives
from infra.hpc.target import DEFAULT_POLL_INTERVAL_S, DEFAULT_REMOTE_WORK_DIR, HpcConfigError, HpcTarget
from infra.validation import Fields

# RFC 1123 host names (dots allowed), or an IPv4/IPv6 literal (no brackets).
HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
IPV6 = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")
# A `Host` alias of the user's ssh config (resolved through it by infra/hpc/ssh/resolve.py): what
# people name their aliases with, no shell or ssh metacharacter, no leading dash.
HOST_ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
# POSIX portable user names (useradd's default NAME_REGEX, plus upper case some sites use).
USER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
# LSF queue and Slurm partition names: letters, digits, '_', '-', '.'; LSF allows 59 chars.
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,58}$")
# Remote paths: a conservative set that needs no quoting anywhere (job directives, SFTP, shell).
SAFE_PATH = re.compile(r"^[A-Za-z0-9._/+-]{1,255}$")
KNOWN_HOSTS_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
MAX_KNOWN_HOSTS_BYTES = 64 * 1024
MAX_PRIVATE_KEY_BYTES = 16 * 1024
MIN_POLL_INTERVAL_S = 1.0
MAX_POLL_INTERVAL_S = 3600.0
# LSF project and Slurm account names (Slurm lower-cases them; LSF allows more, sites rarely use it).
ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:+@-]{0,127}$")
MAX_SITE_DIRECTIVES = 32
MAX_DIRECTIVE_CHARS = 200
# An option, or the start of one, as a skip entry names it: `--mem`, `-R`, `--ntasks`.
OPTION_PREFIX = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]{0,40}$")
# Never meaningful in a directive line: expansions, escapes, a second command, `#` (which starts
# a comment there and would cut the line short).
NOT_IN_DIRECTIVES = "`$\\;#"
# Shell operators: inside quotes only, where sites need them (`-R "select[mem>4000]"`, Slurm
# `--constraint="a100|h100"`); bare, they read as the start of a command or a redirection.
QUOTED_ONLY = "|&<>()"

ALLOWED_KEYS = (
    "host",
    "port",
    "user",
    "scheduler",
    "queue",
    "known_hosts",
    "known_hosts_file",
    "private_key",
    "private_key_file",
    "private_key_passphrase",
    "ssh_config",
    "remote_work_dir",
    "poll_interval_seconds",
    "scheduler_options",
    "account",
    "extra_directives",
    "skip_directives",
    # Older spellings of a scheduler's options, which only that scheduler's target reads.
    *(legacy for cls in SCHEDULER_CLASSES.values() for legacy in cls.legacy_option_keys),
)


_fields = Fields(HpcConfigError)
_fail = _fields.fail


def _one_line_text(section: Mapping[str, Any], name: str, key: str, max_len: int) -> str | None:
    if name not in section or section[name] is None:
        return None
    value = section[name]
    if not isinstance(value, str) or not value:
        raise _fail(key, f"expected a non-empty string, found {type(value).__name__}", "write it as a string")
    if "\n" in value or "\r" in value or "\0" in value:
        raise _fail(key, "contains a newline or NUL character", "keep it on one line")
    if len(value) > max_len:
        raise _fail(key, f"is {len(value)} characters long", f"use at most {max_len}")
    return value


def validate_remote_path(value: str, key: str) -> str:
    """A remote directory or file path that every shell, directive and SFTP call takes as is."""
    if value.startswith("~"):
        raise _fail(key, f"{value!r} starts with '~', which SFTP does not expand", "write it relative to the home")
    if not SAFE_PATH.match(value):
        raise _fail(
            key,
            f"{value!r} contains characters outside letters, digits and . _ / + -",
            "use a plain path (at most 255 characters)",
        )
    parts = PurePosixPath(value).parts
    if ".." in parts:
        raise _fail(key, f"{value!r} contains '..'", "write a path that does not climb out of its directory")
    if value in ("/", ".") or value.rstrip("/") == "":
        raise _fail(key, f"{value!r} is a root directory", "use a directory of its own, e.g. atlas-runs")
    return str(PurePosixPath(value))


def validate_known_hosts(text: str, source: str) -> None:
    """Each non-comment line must be `hosts keytype base64-key` (hashed host names allowed)."""
    if len(text.encode()) > MAX_KNOWN_HOSTS_BYTES:
        raise HpcConfigError(
            f"{source}: known_hosts is larger than {MAX_KNOWN_HOSTS_BYTES} bytes; keep the entries for this host"
        )
    entries = 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        if fields[0].startswith("@"):  # @cert-authority / @revoked markers
            fields = fields[1:]
        if len(fields) < 3 or fields[1] not in KNOWN_HOSTS_KEY_TYPES:
            raise HpcConfigError(
                f"{source}: line {number} is not a known_hosts entry (expected `host keytype key`); "
                "generate entries with `ssh-keyscan -p PORT HOST` and check them out of band"
            )
        try:
            base64.b64decode(fields[2], validate=True)
        except binascii.Error:
            raise HpcConfigError(f"{source}: line {number}: the key is not valid base64") from None
        entries += 1
    if entries == 0:
        raise HpcConfigError(f"{source}: has no host key entries; add the login node's key (ssh-keyscan)")


def _port(section: Mapping[str, Any], key: str) -> int | None:
    value = section.get("port")
    if value is None:
        return None  # the ssh config's Port for the host, else 22
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _fail(f"{key}.port", f"expected a port number, found {value!r}", "use a number from 1 to 65535")
    return value


def _poll_interval(section: Mapping[str, Any], key: str) -> float:
    value = section.get("poll_interval_seconds", DEFAULT_POLL_INTERVAL_S)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"{key}.poll_interval_seconds", f"expected a number, found {value!r}", "write seconds, e.g. 60")
    if not MIN_POLL_INTERVAL_S <= float(value) <= MAX_POLL_INTERVAL_S:
        raise _fail(
            f"{key}.poll_interval_seconds",
            f"{value} is out of range",
            f"use {MIN_POLL_INTERVAL_S:g} to {MAX_POLL_INTERVAL_S:g} seconds (sites often require 60 or more)",
        )
    return float(value)


def _string_list(section: Mapping[str, Any], name: str, key: str, example: str) -> tuple[str, ...]:
    value = section.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(key, f"expected a list, found {type(value).__name__}", f"write a list, e.g. [{example}]")
    if len(value) > MAX_SITE_DIRECTIVES:
        raise _fail(key, f"has {len(value)} entries", f"use at most {MAX_SITE_DIRECTIVES}")
    entries = []
    for index, entry in enumerate(value):
        if not isinstance(entry, str) or not entry.strip():
            raise _fail(f"{key}[{index}]", f"expected a non-empty string, found {entry!r}", f"write e.g. {example}")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in entry):
            raise _fail(f"{key}[{index}]", "contains a newline or control character", "keep each entry on one line")
        if len(entry) > MAX_DIRECTIVE_CHARS:
            raise _fail(f"{key}[{index}]", f"is {len(entry)} characters long", f"use at most {MAX_DIRECTIVE_CHARS}")
        entries.append(entry.strip())
    return tuple(entries)


def _check_extra_directive(text: str, key: str, scheduler: type[Scheduler]) -> None:
    """One line a site adds after the scheduler's prefix (`--qos=high`): an option, plain values."""
    prefix = scheduler.directive_prefix
    if text.startswith("#"):
        raise _fail(key, f"{text!r} starts with '#'", f"write the option alone; Atlas adds `{prefix} ` itself")
    if not text.startswith("-"):
        raise _fail(key, f"{text!r} is not an option", "start it with the option's dash(es), e.g. --qos=high")
    bad = sorted({ch for ch in text if ch in NOT_IN_DIRECTIVES})
    if bad:
        raise _fail(
            key,
            f"{text!r} contains {' '.join(bad)}",
            f"directive values are plain text: {prefix} lines expand nothing and `#` would end the line",
        )
    quote: str | None = None
    for ch in text:
        if quote is not None:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in QUOTED_ONLY:
            raise _fail(key, f"{text!r} has a bare {ch!r}", 'put the value in quotes, e.g. -R "select[mem>4000]"')
    if quote is not None:
        raise _fail(key, f"{text!r} has an unclosed {quote}", "close the quotes")
    option = scheduler.option_of(text)
    if option in scheduler.reserved_options:
        raise _fail(
            key, f"{option} is Atlas's own ({scheduler.reserved_options[option]})", "remove this entry"
        )


def _check_skip_directive(text: str, key: str, scheduler: type[Scheduler]) -> None:
    """An option of Atlas's own directives, or the start of one (dask-jobqueue's job_directives_skip)."""
    rendered = ", ".join(sorted(scheduler.rendered_options))
    if not OPTION_PREFIX.match(text):
        raise _fail(key, f"{text!r} is not an option name", f"name one of the options Atlas writes: {rendered}")
    matched = sorted(o for o in scheduler.rendered_options if o.startswith(text))
    if not matched:
        raise _fail(
            key,
            f"{text!r} names no directive Atlas writes for {scheduler.label}",
            f"use one of (or the start of one of) {rendered}",
        )
    reserved = [o for o in matched if o in scheduler.reserved_options]
    if reserved:
        raise _fail(
            key,
            f"{text!r} would leave out {reserved[0]}, which {scheduler.reserved_options[reserved[0]]}",
            "remove this entry",
        )


def _site_directives(raw: Mapping[str, Any], key: str, scheduler: type[Scheduler]) -> SiteDirectives:
    account = _one_line_text(raw, "account", f"{key}.account", 128)
    if account is not None and not ACCOUNT_NAME.match(account):
        raise _fail(
            f"{key}.account",
            f"{account!r} is not an account or project name",
            f"use letters, digits, '_', '.', ':', '+', '@', '-' (at most 128); it becomes {scheduler.account_option}",
        )
    extra = _string_list(raw, "extra_directives", f"{key}.extra_directives", "--qos=high")
    for index, text in enumerate(extra):
        _check_extra_directive(text, f"{key}.extra_directives[{index}]", scheduler)
    skip = _string_list(raw, "skip_directives", f"{key}.skip_directives", "--mem")
    for index, text in enumerate(skip):
        _check_skip_directive(text, f"{key}.skip_directives[{index}]", scheduler)
    return SiteDirectives(account=account, extra=extra, skip=skip)


def _local_path(value: str, project_dir: Path | None) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute() and project_dir is not None:
        path = project_dir / path
    return path


def parse_hpc_target(
    raw: Mapping[str, Any] | Any,
    key_prefix: str,
    project_dir: Path | None = None,
    private_key_from_secret: bool = False,
) -> HpcTarget:
    """Validate one HPC target section (`atlas:satori`); local paths resolve against `project_dir`.

    The section needs neither private_key nor private_key_file: the key may arrive separately as a
    Pulumi secret (`private_key_from_secret`: `config.require_secret`, passed to
    `HpcEnvironmentArgs.private_key`), or come from the user's agent and ssh config
    (infra/hpc/ssh/resolve.py checks, when the stack config is loaded, that some key is there).
    """
    key = key_prefix
    raw = _fields.mapping(raw, key)
    _fields.reject_unknown(raw, ALLOWED_KEYS, key)

    host = _one_line_text(raw, "host", f"{key}.host", 253)
    if host is None:
        raise _fail(
            f"{key}.host",
            "required but missing",
            f"set it: pulumi config set --path {key}.host login.example.org (or a Host alias of your ssh config)",
        )
    if not (HOST_NAME.match(host) or HOST_ALIAS.match(host) or (":" in host and IPV6.match(host))):
        raise _fail(
            f"{key}.host",
            f"{host!r} is not a host name, an IP address or an ssh config Host alias",
            "write e.g. satori-login-001.mit.edu, or the alias your ~/.ssh/config gives it",
        )

    # Optional: the ssh config's User for the host (infra/hpc/ssh/resolve.py says so when it has none).
    user = _one_line_text(raw, "user", f"{key}.user", 32)
    if user is not None and not USER_NAME.match(user):
        raise _fail(f"{key}.user", f"{user!r} is not a login name", "use letters, digits, '_', '.', '-'")

    scheduler = raw.get("scheduler")
    if not isinstance(scheduler, str) or scheduler not in SCHEDULER_CLASSES:
        raise _fail(
            f"{key}.scheduler",
            f"expected one of {', '.join(SCHEDULER_NAMES)}, found {scheduler!r}",
            f"set {' or '.join(SCHEDULER_NAMES)}",
        )
    scheduler_class = SCHEDULER_CLASSES[scheduler]

    queue = _one_line_text(raw, "queue", f"{key}.queue", 59)
    if queue is not None and not QUEUE_NAME.match(queue):
        raise _fail(
            f"{key}.queue",
            f"{queue!r} is not a queue or partition name",
            "use letters, digits, '_', '-', '.' (at most 59)",
        )

    known_hosts_text = raw.get("known_hosts")
    known_hosts_file = _one_line_text(raw, "known_hosts_file", f"{key}.known_hosts_file", 4096)
    if known_hosts_text is not None and known_hosts_file is not None:
        raise _fail(
            f"{key}.known_hosts",
            "give at most one of known_hosts (the entries) or known_hosts_file (a path)",
            "with neither, the host keys come from your ssh config's known_hosts files (~/.ssh/known_hosts)",
        )
    if known_hosts_text is not None:
        if not isinstance(known_hosts_text, str):
            raise _fail(
                f"{key}.known_hosts", f"expected a string, found {type(known_hosts_text).__name__}", "paste the lines"
            )
        validate_known_hosts(known_hosts_text, f"{key}.known_hosts")

    # Both optional (with private_key_from_secret too): the agent's keys and the ssh config's
    # IdentityFile then log in; infra/hpc/ssh/resolve.py's check_endpoint refuses a target with none.
    private_key = raw.get("private_key")
    private_key_file = _one_line_text(raw, "private_key_file", f"{key}.private_key_file", 4096)
    if private_key is not None and private_key_file is not None:
        raise _fail(
            f"{key}.private_key",
            "give at most one of private_key (secret config) or private_key_file (a path)",
            "remove one of them (with neither, your ssh-agent's keys and your ssh config's IdentityFile are used)",
        )
    if private_key is not None:
        # Never echo the value: a key pasted into the wrong field must not end up in a log.
        if not isinstance(private_key, str) or "PRIVATE KEY-----" not in private_key:
            raise _fail(
                f"{key}.private_key", "is not a PEM/OpenSSH private key (value not shown)", "paste the whole key file"
            )
        if len(private_key.encode()) > MAX_PRIVATE_KEY_BYTES:
            raise _fail(
                f"{key}.private_key", f"is larger than {MAX_PRIVATE_KEY_BYTES} bytes (value not shown)", "paste one key"
            )
    ssh_config = _one_line_text(raw, "ssh_config", f"{key}.ssh_config", 4096)
    passphrase = raw.get("private_key_passphrase")
    if passphrase is not None and (not isinstance(passphrase, str) or not passphrase or "\n" in passphrase):
        raise _fail(
            f"{key}.private_key_passphrase", "expected a one-line string (value not shown)", "set it with --secret"
        )

    work_dir = _one_line_text(raw, "remote_work_dir", f"{key}.remote_work_dir", 255) or DEFAULT_REMOTE_WORK_DIR
    work_dir = validate_remote_path(work_dir, f"{key}.remote_work_dir")

    for other in SCHEDULER_CLASSES.values():
        for legacy_key in other.legacy_option_keys:
            if legacy_key in raw and legacy_key not in scheduler_class.legacy_option_keys:
                raise _fail(
                    f"{key}.{legacy_key}",
                    f"only applies to {other.label}",
                    f"remove it for a {scheduler_class.label} target",
                )
    # The scheduler reads its own options (and their older spellings); nothing here names one.
    legacy = {name: raw[name] for name in scheduler_class.legacy_option_keys if name in raw}
    scheduler_options = scheduler_class.parse_options(raw.get("scheduler_options"), key, legacy)

    return HpcTarget(
        host=host,
        port=_port(raw, key),
        user=user,
        scheduler=scheduler,
        queue=queue,
        known_hosts=known_hosts_text,
        known_hosts_file=_local_path(known_hosts_file, project_dir) if known_hosts_file else None,
        private_key_file=_local_path(private_key_file, project_dir) if private_key_file else None,
        remote_work_dir=work_dir,
        poll_interval_s=_poll_interval(raw, key),
        scheduler_options=scheduler_options,
        directives=_site_directives(raw, key, scheduler_class),
        private_key=private_key,
        private_key_passphrase=passphrase,
        ssh_config=_local_path(ssh_config, project_dir) if ssh_config else None,
    )


def load_known_hosts(target: HpcTarget) -> str:
    """The target's known_hosts text: inline, or read from its file and checked like inline text.
    A target that gives neither takes its host keys from the ssh config (infra/hpc/ssh/resolve.py)."""
    if target.known_hosts is not None:
        return target.known_hosts
    if target.known_hosts_file is None:
        raise HpcConfigError(f"HpcTarget {target.host}: gives no known_hosts of its own")
    try:
        text = target.known_hosts_file.read_text()
    except OSError as error:
        raise HpcConfigError(
            f"known_hosts file {target.known_hosts_file} cannot be read ({error.strerror}); "
            "point known_hosts_file at an OpenSSH known_hosts file (ssh-keyscan -p PORT HOST > file)"
        ) from None
    validate_known_hosts(text, str(target.known_hosts_file))
    return text
