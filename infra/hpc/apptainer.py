"""Apptainer on the HPC side: the image the OpenShift side runs, as a SIF on the site's shared
filesystem, and the `apptainer exec` line that runs a step in it.

Pure functions only (the provider, providers/apptainer_image.py, runs them over SSH):
- `parse_image_reference`: an image named by its digest (`registry/repo@sha256:...`); a tag alone
  is refused, since two pulls of one tag need not be one image.
- `ensure_sif_script`: the shell the login node runs to convert the image once per digest into
  `<cache>/sha256-<hex>.sif`, under a lock on the shared filesystem (`flock`), writing to a
  temporary name and renaming it, so two steps, two stacks or two `up`s at once never convert
  twice and never leave a half-written SIF under the digest's name; it records how long the
  conversion took beside the SIF (`<sif>.json`), which the report shows once, apart from the
  steps' times.
- `exec_argv`: the prefix a job script's command gets: `apptainer exec` with the run directory
  bound at the same path (the staged sampler, data, results and logs are under it), `--nv` for a
  step that asks for GPUs, the site's own binds, and the run directory's link to the SIF.
- `check_architecture`: an image built for another machine is refused before anything is
  submitted (Satori is ppc64le, the MOC x86_64), with the fix.
- `plain_http_registries`: the registries plain HTTP (`apptainer.plain_http`) would be spoken to,
  each of which must be a loopback one (infra/loopback.py).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.errors import ActionableError
from infra.hpc.remote import remote_path_expression
from infra.loopback import is_loopback_authority

RUNTIMES = ("bare", "apptainer")
# The run directory's link to the SIF its jobs run in (made by the SifImage resource): the job
# scripts name it, so they are rendered, and shown by `pulumi preview`, before the image is built.
RUN_DIR_SIF = ".atlas/image.sif"
DEFAULT_CACHE_DIR = ".atlas/sif"  # under the login user's home: a shared filesystem on a cluster
DIGEST = re.compile(r"^(sha256):([0-9a-f]{64})$")
_REFERENCE = re.compile(r"^(?P<name>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")
# `uname -m` on the login node as the OCI platform's architecture names it.
MACHINE_TO_OCI_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "ppc64le": "ppc64le",
    "aarch64": "arm64",
    "arm64": "arm64",
    "s390x": "s390x",
}
# Exit codes of ensure_sif_script, each with its own message in the provider.
EXIT_NO_CACHE_DIR = 70
EXIT_LOCK_TIMEOUT = 71
EXIT_PULL_FAILED = 72
LOCK_TIMEOUT_S = 3600  # a conversion of a large image (BigGAN's, with CUDA) takes minutes


class ApptainerError(ActionableError):
    """Apptainer cannot run the step's image on this site; the message says why and the fix."""


@dataclass(frozen=True)
class ImageReference:
    """An image by digest: `registry/repository@sha256:<hex>`."""

    registry: str
    repository: str
    digest: str

    @property
    def pinned(self) -> str:
        return f"{self.registry}/{self.repository}@{self.digest}"

    @property
    def docker_uri(self) -> str:
        """What `apptainer pull` reads: the image by digest from its registry."""
        return f"docker://{self.pinned}"

    @property
    def sif_name(self) -> str:
        return sif_name(self.digest)

    def on_registry(self, registry: str | None) -> ImageReference:
        """The same image pulled through another name of its registry (the site's route to it)."""
        return self if not registry else ImageReference(registry, self.repository, self.digest)


def parse_image_reference(text: str, key: str) -> ImageReference:
    """An image reference by digest; an ApptainerError naming `key` and the fix otherwise."""
    found = _REFERENCE.match(text.strip())
    if found is None:
        raise ApptainerError(
            f"{key}: {text!r} does not name its image by digest; Apptainer converts an image once per digest, "
            "so give it as registry/repository@sha256:<64 hex digits> (`skopeo inspect` or the registry's "
            "listing gives the digest)"
        )
    name = found["name"]
    registry, _, repository = name.partition("/")
    if not repository or ("." not in registry and ":" not in registry and registry != "localhost"):
        # docker.io's short names (`python@sha256:...`): Apptainer reads them as docker.io's too.
        registry, repository = "docker.io", name if "/" in name else f"library/{name}"
    repository = repository.split(":", 1)[0]  # a tag beside the digest is ignored, as by docker
    return ImageReference(registry, repository, found["digest"])


def sif_name(digest: str) -> str:
    """The SIF's file name in the cache: the digest, so one image is one file, whoever pulls it."""
    found = DIGEST.match(digest)
    if found is None:
        raise ValueError(f"{digest!r} is not a sha256 digest")
    return f"{found[1]}-{found[2]}.sif"


def oci_architecture(machine: str) -> str:
    """`uname -m`'s answer as OCI names the architecture (x86_64 -> amd64); unknown ones as given."""
    return MACHINE_TO_OCI_ARCH.get(machine.strip(), machine.strip())


def check_architecture(image: ImageReference, image_archs: Sequence[str], machine: str, environment: str) -> None:
    """Refuse an image built for none of the login node's machine (`uname -m`): Apptainer would
    convert it and the step would fail with `exec format error` on the compute node. An index
    lists an architecture per platform; a single image, its own."""
    site_arch = oci_architecture(machine)
    if site_arch not in image_archs:
        built_for = ", ".join(f"linux/{a}" for a in image_archs if a) or "an unknown platform"
        raise ApptainerError(
            f"atlas:hpc.{environment}: the image {image.pinned} is built for {built_for}, but the site's "
            f"login node is {machine.strip()} (linux/{site_arch}); nothing was submitted. Fix: build the image for "
            f"linux/{site_arch} (e.g. `podman build --platform linux/{site_arch}`, or a BuildConfig on "
            f"{site_arch} nodes) and give it as atlas:hpc.{environment}.apptainer.image, or set "
            f"atlas:hpc.{environment}.runtime: bare"
        )


def plain_http_registries(
    image_registry: str | None, pull_registry: str | None, source: str, image_arch: str | None
) -> list[tuple[str, str]]:
    """(who, registry) for each registry `apptainer.plain_http` makes Atlas speak plain HTTP to:
    this machine reads the image's own registry for its platform (unless `image_arch` says it) and
    pulls from it with `source: here`; the login node pulls from `pull_registry` (else the image's)
    with `source: site`. A registry not known yet (the image is the OpenShift side's, built during
    `up`) is left out; the provider asks again once it is."""
    found: list[tuple[str, str]] = []
    if image_registry is not None and (image_arch is None or source == "here"):
        found.append(("this machine", image_registry))
    site_registry = pull_registry or image_registry
    if source == "site" and site_registry is not None:
        found.append(("the login node", site_registry))
    return found


def remote_plain_http(
    image_registry: str | None, pull_registry: str | None, source: str, image_arch: str | None
) -> tuple[str, str] | None:
    """The first (who, registry) of `plain_http_registries` that is not on loopback, or None."""
    return next(((who, registry) for who, registry in plain_http_registries(
        image_registry, pull_registry, source, image_arch) if not is_loopback_authority(registry)), None)


def ensure_sif_script(
    command: str, cache_dir: str, image: ImageReference, plain_http: bool, stack: str
) -> str:
    """The login node's shell to make `<cache_dir>/<sif name>` from `image`, once.

    Prints one JSON line: `{"converted": true|false, "seconds": ..., "converted_at": ..., "by": ...}`
    (`converted` false: it was already there, and the figures are those of whoever converted it).
    The lock file lives beside the SIF, so it is on the same (shared) filesystem; `flock` on
    GPFS, Lustre and NFSv4 locks across nodes. The pull writes to a name of its own and is renamed
    into place only once whole: a failed or interrupted pull leaves no SIF under the digest."""
    cache = remote_path_expression(cache_dir)
    name = image.sif_name
    pull = [command, "pull"]
    if plain_http:
        pull.append("--no-https")  # Apptainer 1.4's spelling (Singularity's was --nohttps)
    record = {"by": stack}
    lines = [
        f"cache={cache}",
        f'sif="$cache"/{shlex.quote(name)}',
        f'mkdir -p -- "$cache" || exit {EXIT_NO_CACHE_DIR}',
        f'exec 9>>"$cache"/.{shlex.quote(name)}.lock || exit {EXIT_NO_CACHE_DIR}',
        f"flock -w {LOCK_TIMEOUT_S} 9 || exit {EXIT_LOCK_TIMEOUT}",
        'if [ -s "$sif" ] && [ -s "$sif.json" ]; then',
        '  printf \'{"converted": false, "record": %s}\\n\' "$(cat -- "$sif.json")"; exit 0',
        "fi",
        'partial="$sif.partial.$$"',
        'rm -f -- "$partial"',
        "start=$(date +%s.%N)",
        f'if ! {shlex.join(pull)} "$partial" {shlex.quote(image.docker_uri)} >"$partial.log" 2>&1; then',
        f'  cat -- "$partial.log" >&2; rm -f -- "$partial" "$partial.log"; exit {EXIT_PULL_FAILED}',
        "fi",
        "end=$(date +%s.%N)",
        'rm -f -- "$partial.log"',
        'chmod a+r -- "$partial"',
        'mv -f -- "$partial" "$sif"',
        # The record is written after the SIF: a SIF without one is converted again (above).
        'seconds=$(awk -v a="$start" -v b="$end" \'BEGIN { printf "%.3f", b - a }\')',
        'at=$(date -u +%Y-%m-%dT%H:%M:%SZ)',
        "printf '{\"seconds\": %s, \"converted_at\": \"%s\", \"by\": %s}\\n' "
        f'"$seconds" "$at" {shlex.quote(json.dumps(record["by"]))} >"$sif.json.partial"',
        'mv -f -- "$sif.json.partial" "$sif.json"',
        'printf \'{"converted": true, "record": %s}\\n\' "$(cat -- "$sif.json")"',
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Conversion:
    """What ensure_sif_script printed: whether this call converted, and the conversion's record."""

    converted: bool
    seconds: float | None
    converted_at: str
    by: str


def parse_conversion(stdout: str) -> Conversion:
    """ensure_sif_script's JSON line (the last non-empty one: a login banner may precede it)."""
    lines = [line for line in stdout.splitlines() if line.strip().startswith("{")]
    if not lines:
        raise ValueError(f"no conversion record in {stdout!r}")
    found = json.loads(lines[-1])
    return conversion_of(bool(found.get("converted")), found.get("record") or {})


def conversion_of(converted: bool, record: Mapping[str, Any]) -> Conversion:
    """A Conversion from the record kept beside a SIF (`<sif>.json`)."""
    seconds = record.get("seconds")
    return Conversion(
        converted=converted,
        seconds=float(seconds) if isinstance(seconds, int | float) else None,
        converted_at=str(record.get("converted_at") or ""),
        by=str(record.get("by") or ""),
    )


def probe_command(command: str) -> str:
    """What the provider asks the login node first: its machine, and Apptainer's version (or that
    the command is not found: exit code 127 with the PATH it searched)."""
    quoted = shlex.quote(command)
    return (
        "uname -m; "
        f"if command -v {quoted} >/dev/null 2>&1; then {quoted} --version; "
        'else echo "PATH=$PATH"; exit 127; fi'
    )


def searched_path(stdout: str) -> str:
    """The `PATH=...` line probe_command prints where the command is not found ("PATH unknown")."""
    return next((line for line in stdout.splitlines() if line.startswith("PATH=")), "PATH unknown")


def parse_probe(stdout: str) -> tuple[str, str]:
    """(machine, apptainer version) from probe_command's output."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if len(lines) < 2:
        raise ValueError(f"unexpected answer {stdout!r}")
    machine, version = lines[-2], lines[-1]
    return machine, version.removeprefix("apptainer version ").strip()


@dataclass(frozen=True)
class ContainerExec:
    """How a job script runs its command in the image: `apptainer exec` and its options."""

    command: str = "apptainer"
    binds: tuple[str, ...] = ()  # the site's own folders (absolute), bound at the same path
    sif: str = RUN_DIR_SIF

    def argv(self, gpus: bool) -> tuple[str, ...]:
        words = [self.command, "exec"]
        if gpus:
            words.append("--nv")  # the host's NVIDIA driver libraries and devices, as the GPU operator does
        for path in self.binds:
            words += ["--bind", path]
        return (*words, self.sif)

    def script_lines(self, gpus: bool, command_text: str) -> list[str]:
        """The script's last lines: the SIF checked (a pruned cache fails the step with why), the
        command as a bash array (on a line of its own, as a bare script has it: `pulumi preview`
        cuts a shown line at 150 characters, so the exec line's prefix must not push the command
        out of sight), then that command run in the image, the run directory bound at its own
        path and the working directory."""
        sif = shlex.quote(self.sif)
        words = self.argv(gpus)
        prefix = shlex.join(words[:-1])
        return [
            # Host ~/.local site-packages would shadow the image's (the home is bound by default);
            # APPTAINERENV_<NAME> is <NAME> inside the container only.
            "export APPTAINERENV_PYTHONNOUSERSITE=1",
            f"if [ ! -r {sif} ]; then",
            f'  echo "atlas: {self.sif} (the image as a SIF) is missing: it was pruned or never made; '
            'run pulumi up again" >&2',
            "  exit 1",
            "fi",
            f"atlas_command=({command_text})",
            f'{prefix} --bind "$PWD" --pwd "$PWD" {sif} "${{atlas_command[@]}}"',
        ]


# --- the image's platform, from its registry ----------------------------------------------------

_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def registry_architectures(image: ImageReference, plain_http: bool, timeout_s: float = 30.0) -> tuple[str, ...]:
    """The architectures `image` is built for, read from its registry (the distribution API):
    an index lists one per platform, a single manifest's config names its own. Anonymous pulls,
    with the bearer token a registry's challenge offers (docker.io's, quay.io's); a registry that
    wants credentials answers an ApptainerError whose fix is `apptainer.image_arch`."""
    base = f"{'http' if plain_http else 'https'}://{image.registry}/v2/{image.repository}"
    manifest = _registry_json(f"{base}/manifests/{image.digest}", _MANIFEST_TYPES, image, timeout_s)
    entries = manifest.get("manifests")
    if isinstance(entries, list):
        platforms = [entry.get("platform") or {} for entry in entries if isinstance(entry, dict)]
        return tuple(str(p.get("architecture") or "") for p in platforms if p.get("os", "linux") == "linux")
    config = manifest.get("config")
    config_digest = config.get("digest") if isinstance(config, dict) else None
    if not config_digest:
        raise ApptainerError(f"{image.pinned}: its manifest names no config; is it an image?")
    blob = _registry_json(f"{base}/blobs/{config_digest}", "*/*", image, timeout_s)
    return (str(blob.get("architecture") or ""),)


def _registry_json(url: str, accept: str, image: ImageReference, timeout_s: float) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    headers = {"Accept": accept, "User-Agent": "atlas-apptainer/1"}
    for attempt in (0, 1):
        request = urllib.request.Request(url, headers=headers)  # noqa: S310 (http(s) only)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
                found = json.loads(response.read())
                if not isinstance(found, dict):
                    raise ApptainerError(f"{url}: expected a JSON object")
                return found
        except urllib.error.HTTPError as error:
            challenge = error.headers.get("WWW-Authenticate", "")
            if error.code == 401 and attempt == 0 and challenge.lower().startswith("bearer "):
                headers["Authorization"] = f"Bearer {_anonymous_token(challenge, timeout_s)}"
                continue
            raise ApptainerError(
                f"cannot read {image.pinned}'s platform from its registry ({url}: HTTP {error.code}). Fix: make the "
                "registry readable from this machine, or state the image's architecture as apptainer.image_arch "
                "(e.g. amd64)"
            ) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ApptainerError(
                f"cannot reach the registry of {image.pinned} ({url}: {reason}). Fix: make it reachable from this "
                "machine (plain HTTP registries need apptainer.plain_http: true), or state the image's "
                "architecture as apptainer.image_arch"
            ) from None
    raise AssertionError("unreachable")


def _anonymous_token(challenge: str, timeout_s: float) -> str:
    import urllib.parse
    import urllib.request

    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = fields.pop("realm", "")
    if not realm.startswith("https://") and not realm.startswith("http://"):
        raise ApptainerError(f"registry challenge without a usable realm: {challenge!r}")
    url = f"{realm}?{urllib.parse.urlencode(fields)}"
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
        found = json.loads(response.read())
    return str(found.get("token") or found.get("access_token") or "")
