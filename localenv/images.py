"""Images for the local node: a registry on loopback, and the images nothing outside can give.

No image registry outside this machine is reachable, so:

- the registry is distribution (Debian's `docker-registry`, 2.8) on 127.0.0.1, which
  containerd pulls from like any registry (plain HTTP on loopback, `hosts.toml`);
- the base image is made from Debian's archive with mmdebstrap (bookworm, python3 and pip,
  libnss-wrapper, the CA certificates): the stand-in for `docker.io/library/python:3.11-slim`,
  the Containerfiles' default `BASE_IMAGE`. pip may install into its Python, as in that image;
- the pod sandbox image holds Kubernetes' own pause program, built by `scripts/bootstrap`
  from the pinned Kubernetes module (`registry.k8s.io/pause` cannot be pulled);
- images are built with buildah (Debian's, 1.28) from the Containerfiles as they are, with
  this machine's resolver, CA bundle and pip configuration mounted into RUN steps (package
  downloads go through them), layers cached in one store per machine
  (`~/.cache/atlas/containers`), so a rebuild with nothing changed takes seconds.

Every function takes its paths and ports from the Layout; `ensure_images` is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.image_check import LOCAL_BASE_IMAGE
from infra.toolchain.pins import cache_root, load_pins, toolchain_dir
from localenv.layout import LOOPBACK, Layout
from localenv.procs import Daemon, LocalEnvError, require_free_ports, wait_for

IMAGE_PACKAGES = ("runc", "buildah", "uidmap", "mmdebstrap", "docker-registry")
# The base image, as Atlas's image checks know it (infra/image_check.py: what this registry serves),
# made of the Debian suite its tag names (bookworm).
BASE_REPOSITORY, _, BASE_TAG = LOCAL_BASE_IMAGE.partition(":")
SUITE = BASE_TAG
MIRRORS = (
    f"deb http://deb.debian.org/debian {SUITE} main",
    f"deb http://deb.debian.org/debian {SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {SUITE}-security main",
)
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "libnss-wrapper", "ca-certificates")
PAUSE_REPOSITORY = "atlas/pause"
# What the mounted files give RUN steps: the resolver, the CA bundle (which a proxy's CA may be
# part of) and pip's configuration (which names that bundle).
BUILD_MOUNTS = ("/etc/resolv.conf", "/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf")


@dataclass(frozen=True)
class ImageStore:
    """buildah's storage, one per machine: layers built by any environment are reused by all."""

    root: Path

    @property
    def args(self) -> list[str]:
        return ["--root", str(self.root / "storage"), "--runroot", str(self.root / "run"),
                "--storage-driver", "overlay"]


def image_store() -> ImageStore:
    return ImageStore(cache_root() / "containers")


def registry_daemon(layout: Layout) -> Daemon:
    return Daemon("registry", layout.pids_dir, layout.logs_dir)


def registry_host(layout: Layout) -> str:
    return f"{LOOPBACK}:{layout.ports.registry}"


def registry_config(layout: Layout) -> str:
    return json.dumps({
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(layout.state_dir / "registry")},
                    "delete": {"enabled": True}},
        "http": {"addr": registry_host(layout)},
    }, indent=2)


def registry_ready(layout: Layout) -> bool:
    try:
        with urllib.request.urlopen(f"http://{registry_host(layout)}/v2/", timeout=1) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_registry(layout: Layout, say: Callable[[str], None]) -> None:
    daemon = registry_daemon(layout)
    if daemon.running() and registry_ready(layout):
        return
    require_free_ports({"registry": layout.ports.registry})
    binary = shutil.which("docker-registry")
    if binary is None:
        raise LocalEnvError("docker-registry (Debian's distribution) is not installed: `scripts/localenv up` "
                            "installs it as root (apt-get install docker-registry)")
    config = layout.state_dir / "registry.yml"
    config.write_text(registry_config(layout))  # JSON is YAML
    say(f"images: starting the registry on {registry_host(layout)}")
    daemon.start([binary, "serve", str(config)])
    wait_for(lambda: registry_ready(layout), "the registry to answer /v2/", 30, daemon)


def manifest_digest(layout: Layout, repository: str, tag: str) -> str | None:
    """The digest the registry serves for repository:tag, or None when it has no such tag."""
    request = urllib.request.Request(
        f"http://{registry_host(layout)}/v2/{repository}/manifests/{tag}", method="HEAD",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                           "application/vnd.docker.distribution.manifest.v2+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:  # noqa: S310 - loopback
            digest = resp.headers.get("Docker-Content-Digest")
            return str(digest) if digest else None
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise LocalEnvError(f"the registry answered {err.code} for {repository}:{tag}") from err


def buildah(store: ImageStore, *args: str, check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(["buildah", *store.args, *args], input=stdin, capture_output=True, text=True,
                          check=False)
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise LocalEnvError(f"buildah {' '.join(args[:3])} failed (exit {proc.returncode}): {tail}")
    return proc.stdout.strip()


def local_image_id(store: ImageStore, name: str) -> str | None:
    out = buildah(store, "images", "--json", name, check=False)
    try:
        images = json.loads(out) if out else []
    except json.JSONDecodeError:
        return None
    return images[0]["id"] if images else None


def push(store: ImageStore, layout: Layout, local: str, repository: str, tag: str) -> str:
    """Push a local image to the environment's registry; return the digest it serves."""
    target = f"docker://{registry_host(layout)}/{repository}:{tag}"
    buildah(store, "push", "--tls-verify=false", "--format", "oci", local, target)
    digest = manifest_digest(layout, repository, tag)
    if digest is None:
        raise LocalEnvError(f"pushed {local} to {target} but the registry does not serve it")
    return digest


def base_key() -> str:
    """What the base image is made from: a change makes a new one."""
    recipe = json.dumps({"suite": SUITE, "packages": BASE_PACKAGES, "mirrors": MIRRORS})
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def build_base_image(store: ImageStore, say: Callable[[str], None]) -> str:
    """Debian bookworm from Debian's archive, made once per machine; returns the local name."""
    name = f"localhost/{BASE_REPOSITORY}:{BASE_TAG}-{base_key()}"
    if local_image_id(store, name) is not None:
        return name
    if shutil.which("mmdebstrap") is None:
        raise LocalEnvError("mmdebstrap is not installed: `scripts/localenv up` installs it as root")
    store.root.mkdir(parents=True, exist_ok=True)
    tarball = store.root / f"base-{base_key()}.tar"
    started = time.monotonic()
    say(f"images: making the base image from Debian's archive (mmdebstrap {SUITE}, about 2 minutes, once)")
    proc = subprocess.run(
        ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
         "--aptopt=Acquire::Check-Valid-Until \"false\"", SUITE, str(tarball), *MIRRORS],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        tarball.unlink(missing_ok=True)
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        raise LocalEnvError(f"mmdebstrap failed (exit {proc.returncode}); is the Debian archive reachable? {tail}")
    container = buildah(store, "from", "scratch")
    try:
        buildah(store, "add", container, str(tarball), "/")
        # As in python:3.11-slim, pip installs into the image's Python (PEP 668's marker removed).
        buildah(store, "run", "--network", "none", container, "--", "rm", "-f",
                "/usr/lib/python3.11/EXTERNALLY-MANAGED")
        buildah(store, "config", "--env", "LANG=C.UTF-8", "--cmd", "python3",
                "--label", f"org.opencontainers.image.description=Debian {SUITE} made with mmdebstrap by Atlas "
                           "(stands in for docker.io/library/python:3.11-slim)", container)
        buildah(store, "commit", "--rm", container, name)
    except LocalEnvError:
        buildah(store, "rm", container, check=False)
        raise
    finally:
        tarball.unlink(missing_ok=True)
    say(f"images: base image made in {time.monotonic() - started:.0f}s")
    return name


def build_pause_image(store: ImageStore) -> str:
    pause = toolchain_dir(load_pins()) / "bin" / "pause"
    if not pause.exists():
        raise LocalEnvError(f"{pause} is missing: run scripts/bootstrap")
    digest = hashlib.sha256(pause.read_bytes()).hexdigest()[:12]
    name = f"localhost/{PAUSE_REPOSITORY}:{load_pins().kubernetes}-{digest}"
    if local_image_id(store, name) is not None:
        return name
    container = buildah(store, "from", "scratch")
    try:
        buildah(store, "copy", "--chmod", "0755", container, str(pause.resolve()), "/pause")
        buildah(store, "config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container)
        buildah(store, "commit", "--rm", container, name)
    except LocalEnvError:
        buildah(store, "rm", container, check=False)
        raise
    return name


@dataclass(frozen=True)
class BuiltImage:
    reference: str  # registry/repository@sha256:...
    digest: str
    seconds: float
    cached: bool  # every layer came from the cache


class ImageBuildFailed(LocalEnvError):
    """A build or push failed; `reason` is the one OpenShift's Build status would give."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def build_image_from(
    context: Path, containerfile: Path, repository: str, tag: str, build_args: dict[str, str],
    log: Path, registry: str,
) -> BuiltImage:
    """Build a Containerfile (layers cached per machine) and push it to `registry`; the
    Containerfile's BASE_IMAGE defaults to the base image in that registry."""
    store = image_store()
    args = dict(build_args)
    args.setdefault("BASE_IMAGE", f"{registry}/{BASE_REPOSITORY}:{BASE_TAG}")
    mounts = [f"--volume={m}:{m}:ro" for m in BUILD_MOUNTS if os.path.exists(m)]
    local = f"localhost/{repository}:{tag}"
    started = time.monotonic()
    before = local_image_id(store, local)
    command = ["buildah", *store.args, "build", "--layers", "--network", "host", "--tls-verify=false",
               *mounts, *(f"--build-arg={k}={v}" for k, v in sorted(args.items())),
               "-f", str(containerfile), "-t", local, str(context)]
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        proc = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise ImageBuildFailed("DockerBuildFailed", f"buildah build of {containerfile.name} failed "
                                                    f"(exit {proc.returncode}); the build log: {log}")
    cached = before is not None and local_image_id(store, local) == before
    target = f"docker://{registry}/{repository}:{tag}"
    pushed = subprocess.run(["buildah", *store.args, "push", "--tls-verify=false", "--format", "oci",
                             "--digestfile", str(log.with_suffix(".digest")), local, target],
                            capture_output=True, text=True, check=False)
    with log.open("a") as out:
        out.write(pushed.stdout + pushed.stderr)
    if pushed.returncode != 0:
        raise ImageBuildFailed("PushImageToRegistryFailed", f"pushing to {target} failed (exit {pushed.returncode})")
    digest = log.with_suffix(".digest").read_text().strip()
    log.with_suffix(".digest").unlink()
    return BuiltImage(f"{registry}/{repository}@{digest}", digest, round(time.monotonic() - started, 2), cached)


def build_image(layout: Layout, context: Path, containerfile: Path, repository: str, tag: str,
                build_args: dict[str, str] | None = None, log: Path | None = None) -> BuiltImage:
    """`build_image_from` with the environment's registry and a log in its state folder."""
    log = log or layout.logs_dir / f"build-{repository.replace('/', '-')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return build_image_from(context, containerfile, repository, tag, dict(build_args or {}), log,
                            registry_host(layout))


def ensure_images(layout: Layout, say: Callable[[str], None]) -> dict[str, str]:
    """The registry, and the base and pause images in it; returns their references."""
    start_registry(layout, say)
    store = image_store()
    makers: list[tuple[str, str, Callable[[], str]]] = [
        (BASE_REPOSITORY, BASE_TAG, lambda: build_base_image(store, say)),
        (PAUSE_REPOSITORY, load_pins().kubernetes, lambda: build_pause_image(store)),
    ]
    refs = {}
    for repository, tag, make in makers:
        if manifest_digest(layout, repository, tag) is None:
            push(store, layout, make(), repository, tag)
            say(f"images: pushed {repository}:{tag}")
        refs[repository] = f"{registry_host(layout)}/{repository}:{tag}"
    return refs


def pause_image(layout: Layout) -> str:
    return f"{registry_host(layout)}/{PAUSE_REPOSITORY}:{load_pins().kubernetes}"


def stop_registry(layout: Layout) -> bool:
    return registry_daemon(layout).stop()


def registry_status(layout: Layout) -> dict[str, object]:
    return {"url": f"http://{registry_host(layout)}", "running": registry_daemon(layout).running(),
            "ready": registry_ready(layout), "store": str(image_store().root)}
