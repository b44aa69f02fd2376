"""An HPC target's config section (login node, scheduler, credentials): its pydantic model, validated into `HpcTarget`.

`HpcTargetModel` gives each key its type, default, description, example and rule;
`parse_hpc_target` is pure: it validates the dict that `pulumi.Config.get_object` returns for a
section such as `atlas:hpc.satori` and either returns an `HpcTarget` (the dataclass the
providers, the doctor and the report take) or raises `HpcConfigError` naming the key
(`atlas:hpc.satori.queue`), what was found and what is expected. Every value
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
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    StringConstraints,
    WithJsonSchema,
    create_model,
    model_validator,
)

from infra.config_schema import Bool, ConfigSection, Number, Problem, Rule, relative, validate_section
from infra.hpc.apptainer import RUNTIMES, ApptainerError, parse_image_reference, remote_plain_http
from infra.hpc.registry import SCHEDULER_CLASSES, SCHEDULER_NAMES
from infra.hpc.scheduler import Scheduler, SiteDirectives
from infra.hpc.target import (
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_REMOTE_WORK_DIR,
    ApptainerSettings,
    HpcConfigError,
    HpcTarget,
)
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
            f"remove {' '.join(bad)}: directive values are plain text ({prefix} lines expand nothing and `#` would "
            "end the line)",
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
            f"{text!r} would leave out {reserved[0]}, Atlas's own ({scheduler.reserved_options[reserved[0]]})",
            "remove this entry",
        )


def _site_directives(model: HpcTargetModel, scheduler: type[Scheduler]) -> SiteDirectives:
    account = model.account
    if account is not None and not ACCOUNT_NAME.match(account):
        raise Problem(
            f"{account!r} is not an account or project name",
            f"use letters, digits, '_', '.', ':', '+', '@', '-' (at most 128); it becomes {scheduler.account_option}",
            ".account",
        )
    raw = {"extra_directives": model.extra_directives, "skip_directives": model.skip_directives}
    extra = _string_list(raw, "extra_directives", ".extra_directives", "--qos=high")
    for index, text in enumerate(extra):
        _check_extra_directive(text, f".extra_directives[{index}]", scheduler)
    skip = _string_list(raw, "skip_directives", ".skip_directives", "--mem")
    for index, text in enumerate(skip):
        _check_skip_directive(text, f".skip_directives[{index}]", scheduler)
    return SiteDirectives(account=account, extra=extra, skip=skip)


def _local_path(value: str, project_dir: Path | None) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute() and project_dir is not None:
        path = project_dir / path
    return path


# ---------------------------------------------------------------------------------------------
# The model: one HPC target, each key with its rule


def _text(max_len: int) -> Rule:
    """One line of text (the value is not echoed: a key pasted into a path field must not be shown)."""

    def check(value: Any) -> Any:
        if value is None:
            return None
        try:
            return _one_line_text({"v": value}, "v", "", max_len)
        except HpcConfigError as error:
            raise relative(error) from None

    return Rule(check, StringConstraints(min_length=1, max_length=max_len))


def _line(value: Any, max_len: int) -> Any:
    try:
        return _one_line_text({"v": value}, "v", "", max_len)
    except HpcConfigError as error:
        raise relative(error) from None


def _host(value: Any) -> Any:
    value = _line(value, 253)
    if isinstance(value, str) and not (HOST_NAME.match(value) or HOST_ALIAS.match(value)
                                       or (":" in value and IPV6.match(value))):
        raise Problem(
            f"{value!r} is not a host name, an IP address or an ssh config Host alias",
            "write e.g. satori-login-001.mit.edu, or the alias your ~/.ssh/config gives it",
        )
    return value


def _user(value: Any) -> Any:
    value = _line(value, 32)
    if value is not None and not USER_NAME.match(value):
        raise Problem(f"{value!r} is not a login name", "use letters, digits, '_', '.', '-'")
    return value


def _scheduler(value: Any) -> Any:
    if not isinstance(value, str) or value not in SCHEDULER_CLASSES:
        raise Problem(f"expected one of {', '.join(SCHEDULER_NAMES)}, found {value!r}",
                      f"set {' or '.join(SCHEDULER_NAMES)}")
    return value


def _queue(value: Any) -> Any:
    value = _line(value, 59)
    if value is not None and not QUEUE_NAME.match(value):
        raise Problem(f"{value!r} is not a queue or partition name", "use letters, digits, '_', '-', '.' (at most 59)")
    return value


def _port(value: Any) -> Any:
    if value is None:
        return None  # the ssh config's Port for the host, else 22
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise Problem(f"expected a port number, found {value!r}", "use a number from 1 to 65535")
    return value


def _known_hosts(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Problem(f"expected a string, found {type(value).__name__}", "paste the lines")
    try:
        validate_known_hosts(value, "")
    except HpcConfigError as error:
        raise relative(error) from None
    return value


def _private_key(value: Any) -> Any:
    # Never echo the value: a key pasted into the wrong field must not end up in a log.
    if value is None:
        return None
    if not isinstance(value, str) or "PRIVATE KEY-----" not in value:
        raise Problem("is not a PEM/OpenSSH private key (value not shown)", "paste the whole key file")
    if len(value.encode()) > MAX_PRIVATE_KEY_BYTES:
        raise Problem(f"is larger than {MAX_PRIVATE_KEY_BYTES} bytes (value not shown)", "paste one key")
    return value


def _passphrase(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not value or "\n" in value):
        raise Problem("expected a one-line string (value not shown)", "set it with --secret")
    return value


def _remote_dir(value: Any) -> Any:
    try:
        text = _one_line_text({"v": value}, "v", "", 255)
        return validate_remote_path(text or DEFAULT_REMOTE_WORK_DIR, "")
    except HpcConfigError as error:
        raise relative(error) from None


def _runtime(value: Any) -> Any:
    if value not in RUNTIMES:
        raise Problem(f"{value!r} is not a runtime", f"use one of {', '.join(RUNTIMES)}")
    return value


def _arch(value: Any) -> Any:
    if value is not None and value not in ("amd64", "ppc64le", "arm64", "s390x"):
        raise Problem(f"{value!r} is not an architecture", "use amd64, ppc64le, arm64 or s390x (OCI's names)")
    return value


def _options(value: Any) -> Any:
    if value is not None and not isinstance(value, Mapping):
        raise Problem(f"expected an object, found {type(value).__name__}", "write it as `key: value` lines")
    return value


def _directives(value: Any) -> Any:
    if value is not None and not isinstance(value, list):
        raise Problem(f"expected a list, found {type(value).__name__}", "write a list, e.g. [--qos=high]")
    return value


def _command(value: Any) -> Any:
    if not isinstance(value, str) or not SAFE_PATH.match(value):
        raise Problem(f"{value!r} is not a command name or path", "use letters, digits and . _ / + - (e.g. apptainer)")
    return value


def _image(value: Any) -> Any:
    if value is None:
        return value
    if not isinstance(value, str):
        raise Problem(f"expected a string, found {type(value).__name__}", "give registry/repository@sha256:<digest>")
    try:
        parse_image_reference(value, "")
    except ApptainerError:
        raise Problem(f"{value!r} does not name its image by digest",
                      "give registry/repository@sha256:<64 hex digits>; Apptainer converts an image once per "
                      "digest") from None
    return value


def _registry(value: Any) -> Any:
    if value is None:
        return value
    if not isinstance(value, str) or not re.match(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$", value):
        raise Problem(f"{value!r} is not a registry host", "give host or host:port, e.g. registry.example.org:5000")
    return value


def _binds(value: Any) -> Any:
    if value is None:
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) and v.startswith("/") and SAFE_PATH.match(v)
                                              and ".." not in v.split("/") for v in value):
        raise Problem(f"{value!r} is not a list of absolute folders",
                      "list absolute paths of letters, digits and . _ / + -, e.g. [/nobackup/users/alex]")
    return value


class ApptainerModel(ConfigSection):
    """How the site runs each step in the image with Apptainer (runtime: apptainer)."""

    command: Annotated[str, BeforeValidator(_command)] = Field(
        "apptainer", description="Apptainer on the login and compute nodes: a command on the login shell's PATH "
        "(after your site's `module load apptainer`) or an absolute path.", examples=["/opt/apptainer/bin/apptainer"])
    cache_dir: Annotated[str, BeforeValidator(_remote_dir)] = Field(
        ".atlas/sif", description="Where SIFs are kept, one per image digest, on the shared filesystem: absolute, or "
        "under the login user's home. `pulumi destroy` leaves it; `scripts/sif-cache prune` empties it.",
        examples=["/nobackup/users/alex/sif"])
    image: Annotated[str | None, BeforeValidator(_image)] = Field(
        None, description="The image by digest; default: the image the stack's OpenShift side runs (one image, "
        "both sides).", examples=["quay.io/alex/biggan@sha256:0123...cdef"])
    source: Literal["site", "here"] = Field(
        "site", description="site: the login node pulls the image from its registry and converts it; here: this "
        "machine converts it (Apptainer from `scripts/bootstrap --with apptainer`) and stages the SIF over SFTP, "
        "for a site that cannot reach the registry.", examples=["here"])
    pull_registry: Annotated[str | None, BeforeValidator(_registry)] = Field(
        None, description="The registry's host as the site reaches it, where it differs from the image's (an "
        "OpenShift registry's external route).", examples=["default-route-openshift-image-registry.apps.example.org"])
    plain_http: Bool = Field(
        False, description="The registry speaks plain HTTP (apptainer pull --no-https); a loopback registry only.",
        examples=[True])
    image_arch: Annotated[str | None, BeforeValidator(_arch)] = Field(
        None, description="The image's architecture (amd64, ppc64le, arm64), where its registry cannot be read "
        "from this machine; otherwise read from the registry.", examples=["ppc64le"])
    binds: Annotated[list[str] | None, BeforeValidator(_binds)] = Field(
        None, description="The site's own folders to bind at the same path (the run directory always is).",
        examples=[["/nobackup/users/alex"]])

    @model_validator(mode="after")
    def _plain_http_on_loopback_only(self) -> ApptainerModel:
        if not self.plain_http:
            return self
        registry = parse_image_reference(self.image, "").registry if self.image else None
        remote = remote_plain_http(registry, self.pull_registry, self.source, self.image_arch)
        if remote is not None:
            who, host = remote
            raise Problem(f"true, but {who} would pull from {host} over plain HTTP, and {host} is not this "
                          "machine's loopback (localhost, 127.0.0.0/8 or [::1]): the image would cross the network "
                          "unencrypted", "remove plain_http (the registry speaks HTTPS), or pull from a registry on "
                          "loopback", ".plain_http")
        return self

    def settings(self) -> ApptainerSettings:
        return ApptainerSettings(
            command=self.command,
            cache_dir=self.cache_dir,
            image=self.image,
            source=self.source,
            pull_registry=self.pull_registry,
            plain_http=self.plain_http,
            image_arch=self.image_arch,
            binds=tuple(self.binds or ()),
        )


_SCHEDULER_OPTIONS = "; ".join(
    f"{cls.label}: {', '.join(cls.option_help) or 'none'}" for cls in SCHEDULER_CLASSES.values()
)


class _HpcTargetBase(ConfigSection):
    """An HPC login node and its batch scheduler, reached over SSH as the user's ssh config says."""

    # What the scheduler made of its options and the site's directives, once checked.
    _checked: tuple[dict[str, str], SiteDirectives] = PrivateAttr(default=({}, SiteDirectives()))

    host: Annotated[str, BeforeValidator(_host)] = Field(
        description="The login node: a host name, an address, or a Host alias of your ssh config (its HostName, "
        "User, Port, ProxyJump, IdentityFile and IdentityAgent then apply).", examples=["login.example.org"])
    port: Annotated[int, Rule(_port, Ge(1), Le(65535))] | None = Field(
        None, description="The SSH port; default: the ssh config's Port for the host, else 22.", examples=[22])
    user: Annotated[str, BeforeValidator(_user)] | None = Field(
        None, description="The login name; default: the ssh config's User for the host.", examples=["alex"])
    scheduler: Annotated[str, Rule(_scheduler, WithJsonSchema({"enum": list(SCHEDULER_NAMES)}))]\
        = Field(description=f"The batch scheduler: {' or '.join(SCHEDULER_NAMES)}.", examples=["slurm"])
    queue: Annotated[str, BeforeValidator(_queue)] | None = Field(
        None, description="The LSF queue or Slurm partition; default: the scheduler's.", examples=["normal"])
    known_hosts: Annotated[str, BeforeValidator(_known_hosts)] | None = Field(
        None, description="The login node's host keys, OpenSSH known_hosts lines (`ssh-keyscan -p PORT HOST`, "
        "checked out of band); at most one of known_hosts and known_hosts_file; neither: the ssh config's "
        "known_hosts files. Atlas never trusts a host key on first use.",
        examples=["login.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA..."])
    known_hosts_file: Annotated[str, _text(4096)] | None = Field(
        None, description="A known_hosts file with the login node's keys, relative to the project folder.",
        examples=["~/.ssh/known_hosts"])
    private_key: Annotated[str, BeforeValidator(_private_key)] | None = Field(
        None, description="The private key to log in with, a Pulumi secret (`pulumi config set --secret --path "
        "... < ~/.ssh/id_ed25519`); at most one of private_key and private_key_file; neither: your ssh-agent's "
        "keys and the ssh config's IdentityFile.", examples=["<set with --secret>"],
        json_schema_extra={"x-atlas-secret": True})
    private_key_file: Annotated[str, _text(4096)] | None = Field(
        None, description="The private key file to log in with, on this machine.", examples=["~/.ssh/id_ed25519"])
    private_key_passphrase: Annotated[str, BeforeValidator(_passphrase)] | None = Field(
        None, description="The private key's passphrase, a Pulumi secret; none: the key is not encrypted or the "
        "agent holds it.", examples=["<set with --secret>"], json_schema_extra={"x-atlas-secret": True})
    ssh_config: Annotated[str, _text(4096)] | None = Field(
        None, description="The OpenSSH config to read (as `ssh -F`); default ~/.ssh/config, then "
        "/etc/ssh/ssh_config. Bastions (ProxyJump), the agent (IdentityAgent) and a master connection "
        "(ControlPath) are set there.", examples=["~/.ssh/config"])
    remote_work_dir: Annotated[str, BeforeValidator(_remote_dir)] = Field(
        DEFAULT_REMOTE_WORK_DIR, description="Where runs are staged on the login node: absolute, or under the "
        "login user's home; letters, digits and . _ / + - only.", examples=["/nobackup/users/alex/atlas-runs"])
    poll_interval_seconds: Annotated[float, Number(MIN_POLL_INTERVAL_S, MAX_POLL_INTERVAL_S, 60,
                                  f"use {MIN_POLL_INTERVAL_S:g} to {MAX_POLL_INTERVAL_S:g} seconds (sites often "
                                  "require 60 or more)")] = Field(
        DEFAULT_POLL_INTERVAL_S, description="Seconds between job-status queries (one query for all the run's "
        "jobs).", examples=[60])
    scheduler_options: Annotated[dict[str, Any], BeforeValidator(_options)] | None = Field(
        None, description=f"The scheduler's own options ({_SCHEDULER_OPTIONS}), below.",
        examples=[{o: e for cls in SCHEDULER_CLASSES.values() for o, (_, e) in cls.option_help.items()}])
    account: Annotated[str, _text(128)] | None = Field(
        None, description="The account (Slurm) or project (LSF) jobs are charged to.", examples=["lab-gpu"])
    extra_directives: Annotated[list[Any], BeforeValidator(_directives)] | None = Field(
        None, description=f"Directive lines a site adds to every job script, the option alone (at most "
        f"{MAX_SITE_DIRECTIVES}, no shell syntax); Atlas's own (job name, log, dependencies) may not be set.",
        examples=[["--qos=high"]])
    runtime: Annotated[Literal["bare", "apptainer"], Rule(_runtime, WithJsonSchema({"enum": list(RUNTIMES)}))] = Field(
        "bare", description="How the steps run: bare (on the nodes' own software: Python, libraries) or apptainer "
        "(in the image the OpenShift side runs, converted to a SIF; see apptainer).", examples=["apptainer"])
    apptainer: ApptainerModel | None = Field(
        None, description="Apptainer's settings, for runtime: apptainer.", examples=[{"cache_dir": ".atlas/sif"}])
    skip_directives: Annotated[list[Any], BeforeValidator(_directives)] | None = Field(
        None, description="Options of Atlas's own directives to leave out (or the start of one), e.g. where the "
        "site refuses --mem.", examples=[["--mem"]])

    @model_validator(mode="after")
    def _consistent(self) -> Any:
        if self.known_hosts is not None and self.known_hosts_file is not None:
            raise Problem(
                "give at most one of known_hosts (the entries) or known_hosts_file (a path)",
                "remove one of them (with neither, the host keys come from your ssh config's known_hosts files, "
                "~/.ssh/known_hosts)",
                ".known_hosts",
            )
        if self.private_key is not None and self.private_key_file is not None:
            raise Problem(
                "give at most one of private_key (secret config) or private_key_file (a path)",
                "remove one of them (with neither, your ssh-agent's keys and your ssh config's IdentityFile are used)",
                ".private_key",
            )
        if self.apptainer is not None and self.runtime != "apptainer":
            raise Problem("is set, but runtime is bare", "set runtime: apptainer, or remove apptainer", ".apptainer")
        scheduler_class = SCHEDULER_CLASSES[self.scheduler]
        given = self.model_dump(exclude_unset=True)
        for other in SCHEDULER_CLASSES.values():
            for legacy_key in other.legacy_option_keys:
                if legacy_key in given and legacy_key not in scheduler_class.legacy_option_keys:
                    raise Problem(f"only applies to {other.label}", f"remove it for a {scheduler_class.label} target",
                                  f".{legacy_key}")
        try:
            options = scheduler_class.parse_options(
                self.scheduler_options, "",
                {name: given[name] for name in scheduler_class.legacy_option_keys if name in given},
            )
            directives = _site_directives(self, scheduler_class)  # type: ignore[arg-type]
        except HpcConfigError as error:
            raise relative(error) from None
        self._checked = (options, directives)
        return self

    def target(self, project_dir: Path | None) -> HpcTarget:
        """The `HpcTarget` the components take; local paths resolve against `project_dir`."""
        options, directives = self._checked
        return HpcTarget(
            host=self.host,
            port=self.port,
            user=self.user,
            scheduler=self.scheduler,
            queue=self.queue,
            known_hosts=self.known_hosts,
            known_hosts_file=_local_path(self.known_hosts_file, project_dir) if self.known_hosts_file else None,
            private_key_file=_local_path(self.private_key_file, project_dir) if self.private_key_file else None,
            remote_work_dir=self.remote_work_dir,
            poll_interval_s=self.poll_interval_seconds,
            scheduler_options=options,
            directives=directives,
            private_key=self.private_key,
            private_key_passphrase=self.private_key_passphrase,
            ssh_config=_local_path(self.ssh_config, project_dir) if self.ssh_config else None,
            runtime=self.runtime,
            apptainer=(self.apptainer or ApptainerModel()).settings() if self.runtime == "apptainer" else None,
        )


# Older spellings of a scheduler's options, which only that scheduler's target reads: fields of
# their own, named by the scheduler classes (generic code names none).
HpcTargetModel: type[_HpcTargetBase] = create_model(  # type: ignore[call-overload]
    "HpcTargetModel",
    __base__=_HpcTargetBase,
    __doc__=_HpcTargetBase.__doc__,
    **{
        legacy: (Any, Field(None, description=f"The older spelling of {cls.label}'s scheduler_options "
                            f"(read by {cls.label} targets only).", examples=[None]))
        for cls in SCHEDULER_CLASSES.values()
        for legacy in cls.legacy_option_keys
    },
)


def parse_hpc_target(
    raw: Mapping[str, Any] | Any,
    key_prefix: str,
    project_dir: Path | None = None,
    private_key_from_secret: bool = False,
) -> HpcTarget:
    """Validate one HPC target section (`atlas:hpc.satori`) by `HpcTargetModel`; local paths
    resolve against `project_dir`.

    The section needs neither private_key nor private_key_file: the key may arrive separately as a
    Pulumi secret (`private_key_from_secret`: `config.require_secret`, passed to
    `HpcEnvironmentArgs.private_key`), or come from the user's agent and ssh config
    (infra/hpc/ssh/resolve.py checks, when the stack config is loaded, that some key is there).
    """
    return validate_section(HpcTargetModel, raw, key_prefix, HpcConfigError).target(project_dir)


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
