"""Apptainer (formerly Singularity), the HPC side's container runtime, built from its Go module.

How it is built (found by hand on Debian bookworm, Go 1.26.8, 2 cores; docs/architecture.md,
"Apptainer"):

- Source: `go mod download -json github.com/apptainer/apptainer@v1.4.0` (the Go module proxy).
  The module zip is not a release tarball: it has no VERSION file (mconfig's
  scripts/get-version then stops with "Not inside a git repository and no VERSION file found"),
  and its scripts lose their exec bits (`./mconfig: Permission denied`). So the source is copied
  out of the read-only module cache, made writable, given a VERSION file and its `#!` scripts'
  exec bits back.
- `./mconfig -b <builddir> --prefix=<prefix> --without-suid` generates the Makefile and
  internal/pkg/buildcfg (the prefix's paths are compiled in, so the prefix is the final place).
  It checks for a C compiler, libseccomp's headers and libsubid's (optional, both used).
- `make -C <builddir>` builds the `apptainer` binary, the C/cgo `starter` and the CNI plugins,
  with cgo on; the Go modules come from the module proxy. `make -C <builddir> install` fills the
  prefix (bin/, libexec/apptainer/, etc/apptainer/apptainer.conf, var/apptainer/).
- Its Makefile runs `go clean -cache` before building the starter: the step gives the build a
  GOCACHE of its own (in its scratch folder) so the shared Go build cache is left alone.
- Run time: mksquashfs/unsquashfs (squashfs-tools) to build and read SIFs, squashfuse and
  fuse2fs for unprivileged mounts, fuse-overlayfs, newuidmap (uidmap) for user namespaces.
  The setuid starter is not installed (`--without-suid`): as root it is not needed, and
  unprivileged use goes through user namespaces.

Standard library only, as bootstrap.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from infra.toolchain.go import BuildStepFailed, go_env, module_dir, run, write_wrapper
from infra.toolchain.pins import Pins, cache_root
from infra.toolchain.progress import Progress

APPTAINER_MODULE = "github.com/apptainer/apptainer"

# Debian packages: to build (a C toolchain, pkg-config, libseccomp's and libsubid's headers) and
# to run (SIF images are squashfs; FUSE mounts and user namespaces for unprivileged use).
BUILD_PACKAGES: tuple[str, ...] = ("gcc", "libc6-dev", "make", "pkg-config", "libseccomp-dev", "libsubid-dev")
RUN_PACKAGES: tuple[str, ...] = ("squashfs-tools", "squashfuse", "fuse2fs", "fuse-overlayfs", "uidmap")

# What the step writes besides the pinned module: a change to it redoes the step (BuildStep.recipe).
MCONFIG_FLAGS: tuple[str, ...] = ("--without-suid",)
RECIPE = " ".join(("mconfig", *MCONFIG_FLAGS, "; make; make install;", *BUILD_PACKAGES, *RUN_PACKAGES))


def apptainer_prefix(pins: Pins) -> Path:
    """Where the pinned Apptainer is installed: its paths are compiled in, so this is final."""
    key = pins.digest_of("apptainer")
    return cache_root() / "toolchain" / "apptainer" / f"{pins.apptainer}-{key}"


def missing_packages(packages: tuple[str, ...]) -> list[str]:
    """The packages dpkg does not report as installed (all of them where there is no dpkg)."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *packages],
        capture_output=True, text=True, check=False,
    )
    installed = {ln.split(" ", 1)[0] for ln in result.stdout.splitlines() if ln.endswith(" install ok installed")}
    return [p for p in packages if p not in installed]


def ensure_packages(packages: tuple[str, ...], progress: Progress) -> list[str]:
    """Install the missing ones among `packages` with apt-get (as root); return them."""
    missing = missing_packages(packages)
    if not missing:
        return []
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise BuildStepFailed(
            f"Apptainer needs these Debian packages: {' '.join(missing)}. Install them "
            f"(`sudo apt-get install -y --no-install-recommends {' '.join(missing)}`) or run "
            "`scripts/bootstrap --with apptainer` as root."
        )
    progress.say(f"    apptainer: installing Debian packages: {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    run(["apt-get", *wait, "update"], env=env, progress=progress, label="apt-get update")
    run(["apt-get", *wait, "install", "-y", "--no-install-recommends", *missing], env=env, progress=progress,
        label="apt-get install")
    still = missing_packages(tuple(missing))
    if still:
        raise BuildStepFailed(f"apt-get reported success but these are still not installed: {' '.join(still)}")
    return missing


def prepare_source(module_src: Path, dest: Path, version: str) -> Path:
    """A writable copy of the module's source that mconfig accepts (VERSION file, exec bits)."""
    shutil.copytree(module_src, dest, symlinks=True)
    for path in dest.rglob("*"):
        if path.is_symlink() or not path.is_file():
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
            continue
        mode = 0o644
        with path.open("rb") as fh:
            if fh.read(2) == b"#!":
                mode = 0o755
        path.chmod(mode)
    (dest / "VERSION").write_text(version + "\n")
    return dest


def build_env(scratch: Path) -> dict[str, str]:
    """Go's environment for Apptainer: cgo on (its starter), the module's own go.mod as written,
    and a build cache of its own: Apptainer's Makefile runs `go clean -cache` before building the
    starter (mlocal/frags/build_runtime.mk, `.clean-starter`), which would otherwise empty the
    Go build cache every other tool's warm rebuild relies on."""
    env = go_env(scratch)
    env.update({"CGO_ENABLED": "1", "GOFLAGS": "-buildvcs=false", "GOCACHE": str(scratch / "gocache")})
    return env


def fetch_apptainer(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    """Debian packages, the module's source and the modules its build needs (network)."""
    ensure_packages(BUILD_PACKAGES + RUN_PACKAGES, progress)
    env = build_env(scratch)
    write_wrapper(scratch, "apptainer", {}, {})
    src = module_dir(APPTAINER_MODULE, f"v{pins.apptainer}", scratch, env)
    tree = prepare_source(src, scratch / "apptainer", pins.apptainer)
    run(["go", "mod", "download"], cwd=tree, env=env, progress=progress, label="apptainer (fetch)")


def compile_apptainer(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    """mconfig, make, make install into the prefix, and `out/apptainer` linking to it (CPU)."""
    env = build_env(scratch)
    tree, builddir, prefix = scratch / "apptainer", scratch / "builddir", apptainer_prefix(pins)
    run(["./mconfig", "-b", str(builddir), f"--prefix={prefix}", *MCONFIG_FLAGS], cwd=tree, env=env,
        progress=progress, label="apptainer (mconfig)")
    run(["make", "-C", str(builddir)], env=env, progress=progress, label="apptainer (compile)")
    # A half-installed prefix from an interrupted run is never reused: install afresh.
    shutil.rmtree(prefix, ignore_errors=True)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        run(["make", "-C", str(builddir), "install"], env=env, progress=progress, label="apptainer (install)")
        version = run([str(prefix / "bin" / "apptainer"), "version"], env=env)
    except BaseException:
        shutil.rmtree(prefix, ignore_errors=True)
        raise
    if pins.apptainer not in version.split():
        raise BuildStepFailed(f"the built apptainer says its version is {version.strip()!r}, not {pins.apptainer}")
    # An absolute link: the step counts as done only while the prefix it points at exists.
    (out / "apptainer").symlink_to(prefix / "bin" / "apptainer")
