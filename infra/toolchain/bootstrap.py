"""Build Atlas's toolchain from Go modules and PyPI, into a versioned cache.

Nothing here downloads a prebuilt binary: the Pulumi CLI, its Kubernetes provider, etcd,
the Kubernetes control plane and KWOK are all built with the ordinary `go` client from
the Go module proxy, each in a small wrapper module of its own so that one tool's
dependencies never raise another's.

Each step is built from the pins it names (its sections of toolchain/pins.toml) into a
store folder of its own, `<cache>/toolchain/steps/<step>-<key>`, and the toolchain's `bin/`
links each tool to its step's build: a changed pin rebuilds only the steps built from it.
A step builds into a scratch folder and moves its binaries into the store only when the
whole step succeeded; a stamp file written last marks it done. A binary without its stamp
is never trusted, so a failed or interrupted build is simply redone.

Every step has a fetch stage (the wrapper module and `go get`/`go mod download`: network)
and a compile stage (CPU). The fetch stages run one after another in a thread of their own,
ahead of the compiles, so downloads overlap the compiling of the step before; all steps
share Go's module and build caches.

Standard library only: this runs with the system Python before the venv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from infra.toolchain.pins import REPO_ROOT, Pins, cache_root, load_pins, toolchain_dir
from infra.toolchain.progress import Progress, elapsed_text
from infra.toolchain.recipes import (
    DYNAMIC_HOST_SHIM,
    KUBERNETES_PROVIDER_MAIN,
    LANGUAGE_HOST_SHIM,
    ldflags_text,
    wrapper_go_mod,
)
from infra.toolchain.store import Step, Toolchain

VENV_DIR = REPO_ROOT / ".venv"
MIN_GO = (1, 26)
HEARTBEAT_S = 20.0


class StepFailed(Exception):
    pass


def run(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    progress: Progress | None = None,
    label: str = "",
) -> str:
    """Run a command; on failure raise with the command, exit code and output tail.

    While it runs, print a heartbeat with the elapsed time and, for `go build -v`,
    how many packages have been compiled so far.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_S):
            if progress is not None:
                progress.say(
                    f"    {label or cmd[0]}: still running, {elapsed_text(started)}, "
                    f"{len(lines)} lines of output so far"
                )

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    done.set()
    output = "\n".join(lines)
    if code != 0:
        # `go build -v` interleaves package names with the errors: show the errors first.
        errors = [ln for ln in lines if re.search(r"\.go:\d+|error|cannot|not available|missing", ln)]
        shown = "\n".join(errors[:40]) if errors else "\n".join(lines[-40:])
        raise StepFailed(f"command failed (exit {code}): {' '.join(cmd)}\n{shown}")
    return output


def go_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CGO_ENABLED": "0",
            "GOFLAGS": "-mod=mod -buildvcs=false",
            "GOWORK": "off",
            "GOTOOLCHAIN": "local",
        }
    )
    env.pop("GOPATH_OVERRIDE", None)
    return env


def check_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise StepFailed("`go` is not on PATH: install Go 1.26 or newer (toolchain.md in the README)")
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    if not match or (int(match[1]), int(match[2])) < MIN_GO:
        raise StepFailed(f"Go {MIN_GO[0]}.{MIN_GO[1]}+ is needed, found: {out.strip()}")
    return out.strip()


def module_dir(module: str, version: str, workdir: Path, env: dict[str, str]) -> Path:
    out = run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=workdir, env=env)
    return Path(json.loads(out)["Dir"])


def download_module(module: str, version: str) -> Path:
    """The folder of a pinned Go module, from the module cache or the Go module proxy (the same
    place the toolchain's sources come from); raises StepFailed naming the module."""
    if shutil.which("go") is None:
        raise StepFailed(f"`go` is not on PATH, needed for {module}@{version}: install Go 1.26 or newer")
    with tempfile.TemporaryDirectory(prefix="atlas-gomod-") as tmp:
        write_wrapper(Path(tmp), "download", {}, {})
        return module_dir(module, version, Path(tmp), go_env(Path(tmp)))


def write_wrapper(
    workdir: Path, name: str, requires: dict[str, str], replaces: dict[str, str]
) -> None:
    """A throwaway go.mod that pins exactly what this one tool needs."""
    (workdir / "go.mod").write_text(wrapper_go_mod(name, requires, replaces))


def go_get(workdir: Path, packages: Sequence[str], version: str, env: dict[str, str], progress: Progress,
           label: str) -> None:
    """Fetch stage: record the packages' requirements and checksums in the wrapper module and
    download every module their build needs. The version must be explicit: a bare `go get pkg`
    upgrades its module to the latest."""
    run(
        ["go", "get", *(f"{p}@{version}" for p in packages)],
        cwd=workdir, env=env, progress=progress, label=f"{label} (fetch)",
    )


def go_build(
    workdir: Path,
    out: Path,
    packages: Sequence[str],
    ldflags: dict[str, str],
    env: dict[str, str],
    progress: Progress,
    label: str,
) -> None:
    """Compile stage: the modules are already in the module cache."""
    target = str(out) + os.sep if len(packages) > 1 else str(out)
    run(
        ["go", "build", "-v", "-trimpath", "-ldflags", f"-s -w {ldflags_text(ldflags)}", "-o", target, *packages],
        cwd=workdir,
        env=env,
        progress=progress,
        label=f"{label} (compile)",
    )


# --- the steps ---------------------------------------------------------------------
# Each step: `fetch(pins, scratch, out, progress)` writes its wrapper module and downloads
# (network), `compile(pins, scratch, out, progress)` builds into `out` (CPU).


def fetch_pulumi(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.pulumi}"
    write_wrapper(
        scratch,
        "pulumi",
        {"github.com/pulumi/pulumi/pkg/v3": version, "github.com/pulumi/pulumi/sdk/v3": version},
        # pkg/v3's own go.mod carries this replace; Go ignores a dependency's replaces.
        {"github.com/atotto/clipboard": "github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e"},
    )
    go_get(scratch, [PULUMI_PACKAGE], version, go_env(scratch), progress, "pulumi")


PULUMI_PACKAGE = "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"


def compile_pulumi(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.pulumi}"
    go_build(scratch, out / "pulumi", [PULUMI_PACKAGE],
             {"github.com/pulumi/pulumi/sdk/v3/go/common/version.Version": version},
             go_env(scratch), progress, "pulumi")


def fetch_python_plugins(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    env = go_env(scratch)
    write_wrapper(scratch, "python-plugins", {}, {})
    sdk = module_dir("github.com/pulumi/pulumi/sdk/v3", f"v{pins.pulumi}", scratch, env)
    # The program executor is a script shipped in the SDK module.
    executor = sdk / "python" / "cmd" / "pulumi-language-python-exec"
    shutil.copyfile(executor, out / "pulumi-language-python-exec")
    (out / "pulumi-language-python-exec").chmod(0o755)
    for name, text in {
        "pulumi-language-python": LANGUAGE_HOST_SHIM,
        "pulumi-resource-pulumi-python": DYNAMIC_HOST_SHIM,
    }.items():
        (out / name).write_text(text)
        (out / name).chmod(0o755)


KUBERNETES_PROVIDER_MODULE = "github.com/pulumi/pulumi-kubernetes/provider/v4"


def fetch_kubernetes_provider(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    env = go_env(scratch)
    module = KUBERNETES_PROVIDER_MODULE
    write_wrapper(
        scratch,
        "pulumi-resource-kubernetes",
        {
            module: pins.pulumi_kubernetes_provider_module,
            "github.com/pulumi/pulumi-kubernetes/sdk/v4": pins.pulumi_kubernetes_sdk_module,
            "github.com/pulumi/pulumi/pkg/v3": pins.pulumi_kubernetes_pulumi_module,
            "github.com/pulumi/pulumi/sdk/v3": pins.pulumi_kubernetes_pulumi_module,
        },
        {},
    )
    src = module_dir(module, pins.pulumi_kubernetes_provider_module, scratch, env)
    cmd_dir = src / "cmd" / "pulumi-resource-kubernetes"
    schema = json.loads((cmd_dir / "schema.json").read_text())
    schema["version"] = pins.pulumi_kubernetes
    (scratch / "schema-embed.json").write_text(json.dumps(schema))
    shutil.copyfile(cmd_dir / "terraform-mapping.json", scratch / "terraform-mapping-embed.json")
    (scratch / "main.go").write_text(KUBERNETES_PROVIDER_MAIN)
    # Copy the upstream module's requirements so MVS sees the same dependency graph.
    upstream = (src / "go.mod").read_text()
    upstream_replaces = {
        m[1]: m[2].strip()
        for m in re.finditer(r"^\s*(?:replace\s+)?(\S+)\s+=>\s+(\S+ \S+|\S+)\s*$", upstream, re.M)
        if not m[2].startswith(".")
    }
    go_mod = (scratch / "go.mod").read_text()
    go_mod += "".join(f"replace {k} => {v}\n" for k, v in sorted(upstream_replaces.items()))
    (scratch / "go.mod").write_text(go_mod)
    run(["go", "mod", "tidy"], cwd=scratch, env=env, progress=progress, label="pulumi-resource-kubernetes (fetch)")


def compile_kubernetes_provider(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    run(
        [
            "go", "build", "-v", "-trimpath",
            "-ldflags", f"-s -w -X {KUBERNETES_PROVIDER_MODULE}/pkg/version.Version={pins.pulumi_kubernetes}",
            "-o", str(out / "pulumi-resource-kubernetes"), ".",
        ],
        cwd=scratch,
        env=go_env(scratch),
        progress=progress,
        label="pulumi-resource-kubernetes (compile)",
    )


ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"


def fetch_etcd(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.etcd}"
    siblings = ["api/v3", "client/pkg/v3", "client/v3", "pkg/v3"]
    write_wrapper(
        scratch,
        "etcd",
        {ETCD_PACKAGE: version, **{f"go.etcd.io/etcd/{s}": version for s in siblings}},
        {},
    )
    go_get(scratch, [ETCD_PACKAGE], version, go_env(scratch), progress, "etcd")


def compile_etcd(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    go_build(scratch, out / "etcd", [ETCD_PACKAGE], {}, go_env(scratch), progress, "etcd")


# One `go build` for all of them: they share most packages, compiled once.
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy")


def fetch_kubernetes(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    env = go_env(scratch)
    version = f"v{pins.kubernetes}"
    staging = pins.kubernetes_staging
    write_wrapper(scratch, "kubernetes", {"k8s.io/kubernetes": version}, {})
    src = module_dir("k8s.io/kubernetes", version, scratch, env)
    # k8s.io/kubernetes points its staging modules at ./staging/src/...; every one of
    # them is published on its own at v0.<minor>.<patch>.
    staged = sorted(
        set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", (src / "go.mod").read_text(), re.M))
    )
    if not staged:
        raise StepFailed(f"no staging replaces found in {src / 'go.mod'}: the module layout changed")
    served, missing = _served_modules(staged, staging, scratch, env)
    # A staging module the proxy does not serve (k8s.io/sample-cli-plugin) is needed only
    # for its go.mod during module resolution; none of the commands we build imports it.
    for mod in missing:
        stub = scratch / "stubs" / mod
        stub.mkdir(parents=True)
        (stub / "go.mod").write_text(f"module {mod}\n\ngo 1.26\n")
    write_wrapper(
        scratch,
        "kubernetes",
        {"k8s.io/kubernetes": version, **dict.fromkeys(served, staging)},
        {**{mod: f"{mod} {staging}" for mod in served}, **{mod: f"./stubs/{mod}" for mod in missing}},
    )
    go_get(scratch, _kube_packages(), version, env, progress, "kubernetes")


def _kube_packages() -> list[str]:
    return [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS]


def compile_kubernetes(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.kubernetes}"
    major, minor, _ = pins.kubernetes.split(".")
    stamp = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "gitCommit": "0000000000000000000000000000000000000000",
        "buildDate": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    ldflags = {}
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags.update({f"{pkg}.{k}": v for k, v in stamp.items()})
    go_build(scratch, out, _kube_packages(), ldflags, go_env(scratch), progress, "kubernetes")


def _served_modules(
    modules: Sequence[str], version: str, workdir: Path, env: dict[str, str]
) -> tuple[list[str], list[str]]:
    """Split modules into those the proxy serves at version and those it refuses."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", *(f"{m}@{version}" for m in modules)],
        cwd=workdir, env=env, capture_output=True, text=True, check=False,
    )
    decoder = json.JSONDecoder()
    text, pos, failed = proc.stdout, 0, set()
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        info, pos = decoder.raw_decode(text, pos)
        if info.get("Error"):
            failed.add(info["Path"])
    return [m for m in modules if m not in failed], [m for m in modules if m in failed]


KWOK_PACKAGE = "sigs.k8s.io/kwok/cmd/kwok"


def fetch_kwok(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.kwok}"
    write_wrapper(scratch, "kwok", {"sigs.k8s.io/kwok": version}, {})
    go_get(scratch, [KWOK_PACKAGE], version, go_env(scratch), progress, "kwok")


def compile_kwok(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    go_build(scratch, out / "kwok", [KWOK_PACKAGE], {"sigs.k8s.io/kwok/pkg/consts.Version": f"v{pins.kwok}"},
             go_env(scratch), progress, "kwok")


CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")


def fetch_containerd(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.containerd}"
    write_wrapper(scratch, "containerd", {CONTAINERD_MODULE: version}, {})
    go_get(scratch, [f"{CONTAINERD_MODULE}/cmd/{c}" for c in CONTAINERD_COMMANDS], version, go_env(scratch),
           progress, "containerd")


def compile_containerd(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    # CGO_ENABLED=0 leaves out the btrfs snapshotter (its files need cgo); overlayfs is what runs here.
    go_build(scratch, out, [f"{CONTAINERD_MODULE}/cmd/{c}" for c in CONTAINERD_COMMANDS],
             {f"{CONTAINERD_MODULE}/version.Version": f"v{pins.containerd}",
              f"{CONTAINERD_MODULE}/version.Revision": "atlas-bootstrap"},
             go_env(scratch), progress, "containerd")


CNI_MODULE = "github.com/containernetworking/plugins"
# The plugins the local node's network uses: a bridge with host-local addresses, the pod's
# loopback, and host ports.
CNI_PLUGINS = {"bridge": "plugins/main/bridge", "loopback": "plugins/main/loopback",
               "host-local": "plugins/ipam/host-local", "portmap": "plugins/meta/portmap"}


def fetch_cni_plugins(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.cni_plugins}"
    write_wrapper(scratch, "cni-plugins", {CNI_MODULE: version}, {})
    go_get(scratch, [f"{CNI_MODULE}/{p}" for p in CNI_PLUGINS.values()], version, go_env(scratch),
           progress, "cni-plugins")


def compile_cni_plugins(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    go_build(scratch, out, [f"{CNI_MODULE}/{p}" for p in CNI_PLUGINS.values()],
             {f"{CNI_MODULE}/pkg/utils/buildversion.BuildVersion": f"v{pins.cni_plugins}"},
             go_env(scratch), progress, "cni-plugins")


def fetch_pause(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    """Kubernetes' own pause program (build/pause/linux/pause.c in the pinned k8s.io/kubernetes
    module): the process that holds every pod sandbox. Its image cannot be pulled here."""
    write_wrapper(scratch, "pause", {}, {})
    src = module_dir("k8s.io/kubernetes", f"v{pins.kubernetes}", scratch, go_env(scratch))
    shutil.copyfile(src / "build" / "pause" / "linux" / "pause.c", scratch / "pause.c")


def compile_pause(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    if shutil.which("gcc") is None:
        raise StepFailed("gcc is needed for Kubernetes' pause program: apt-get install gcc libc6-dev")
    run(["gcc", "-Os", "-static", "-Wall", "-Werror", f"-DVERSION=v{pins.kubernetes}-atlas",
         "-o", str(out / "pause"), str(scratch / "pause.c")], progress=progress, label="pause (compile)")
    run(["strip", str(out / "pause")], progress=progress, label="pause (strip)")


def venv_key() -> str:
    """What the venv depends on: the declared dependencies, not lint settings."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    wanted = {"python": sys.version, "deps": project["dependencies"], "extras": project.get("optional-dependencies")}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def build_venv(pins: Pins, progress: Progress) -> None:
    python = os.environ.get("ATLAS_PYTHON", sys.executable)
    stamp = VENV_DIR / ".atlas-stamp"
    if VENV_DIR.exists():
        shutil.rmtree(VENV_DIR)
    run([python, "-m", "venv", str(VENV_DIR)], progress=progress, label="venv")
    pip = [str(VENV_DIR / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "-q", "--upgrade", "pip"], progress=progress, label="pip upgrade")
    run([*pip, "install", "-q", "-e", f"{REPO_ROOT}[dev]"], progress=progress, label="pip install")
    stamp.write_text(venv_key())


def compile_project_bytecode() -> None:
    """Bytecode for the project's own modules, refreshed where a source changed.

    Every `pulumi up` starts the program and the dynamic-provider plugin as new Python
    processes; where PYTHONDONTWRITEBYTECODE is set (as on the machines Atlas is built on),
    Python would compile each module from source in every one of them. The variable stops
    Python writing .pyc files, not reading them, and compileall writes them regardless.
    """
    import compileall

    for folder in ("infra", "stacks", "workloads"):
        compileall.compile_dir(str(REPO_ROOT / folder), quiet=1, workers=1)


BINARY_STEPS: tuple[Step, ...] = (
    Step("pulumi", ("pulumi",), "the Pulumi CLI (engine)", ("pulumi",), fetch_pulumi, compile_pulumi),
    Step(
        "python-plugins",
        ("pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"),
        "Python language runtime launcher and dynamic-provider shim",
        ("pulumi",),
        fetch_python_plugins,
        recipe=LANGUAGE_HOST_SHIM + DYNAMIC_HOST_SHIM,
    ),
    Step(
        "pulumi-resource-kubernetes",
        ("pulumi-resource-kubernetes",),
        "Kubernetes provider plugin",
        ("pulumi_kubernetes",),
        fetch_kubernetes_provider,
        compile_kubernetes_provider,
    ),
    Step("etcd", ("etcd",), "etcd", ("etcd",), fetch_etcd, compile_etcd),
    Step("kwok", ("kwok",), "KWOK node and pod simulator", ("kwok",), fetch_kwok, compile_kwok),
    Step(
        "kubernetes", KUBE_COMMANDS, "kube-apiserver, controller-manager, scheduler, kubectl, kubelet, kube-proxy",
        ("kubernetes",), fetch_kubernetes, compile_kubernetes,
    ),
    Step("containerd", CONTAINERD_COMMANDS, "containerd, its runc shim and ctr (the local node's runtime)",
         ("containerd",), fetch_containerd, compile_containerd),
    Step("cni-plugins", tuple(CNI_PLUGINS), "CNI plugins: bridge, host-local, loopback, portmap",
         ("cni_plugins",), fetch_cni_plugins, compile_cni_plugins),
    Step("pause", ("pause",), "Kubernetes' pause program (pod sandboxes)", ("kubernetes",), fetch_pause,
         compile_pause, recipe="gcc -Os -static; strip"),
)


def default_toolchain(pins: Pins) -> Toolchain:
    toolchain = Toolchain(cache_root() / "toolchain", pins)
    assert toolchain.bin.parent == toolchain_dir(pins)  # one place decides the folder
    return toolchain


def step_done(step: Step, toolchain: Toolchain) -> bool:
    store = toolchain.store(step)
    stamp = store / ".stamp"
    return (
        stamp.exists()
        and stamp.read_text() == step.key(toolchain.pins)
        and all((store / o).exists() for o in step.outputs)
    )


def link_step(step: Step, toolchain: Toolchain) -> None:
    """Point `bin/<tool>` at the step's build (relative links, so the cache can move)."""
    toolchain.bin.mkdir(parents=True, exist_ok=True)
    store = toolchain.store(step)
    for name in step.outputs:
        link = toolchain.bin / name
        target = os.path.relpath(store / name, toolchain.bin)
        if link.is_symlink() and os.readlink(link) == target:
            continue
        tmp = toolchain.bin / f".{name}.link"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, link)


class Prepared:
    """A step's scratch folders once its fetch stage ran (or the error it raised)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.scratch = tmp / "src"
        self.staged = tmp / "bin"
        self.done = threading.Event()
        self.error: BaseException | None = None


def fetch_step(step: Step, toolchain: Toolchain, progress: Progress, prepared: Prepared) -> None:
    started = time.monotonic()
    try:
        prepared.scratch.mkdir(parents=True)
        prepared.staged.mkdir(parents=True)
        step.fetch(toolchain.pins, prepared.scratch, prepared.staged, progress)
        progress.timed(f"{step.name} fetch", started)
    except BaseException as exc:  # noqa: BLE001 - handed to the compiling thread, which raises it
        prepared.error = exc
    finally:
        prepared.done.set()


def finish_step(step: Step, toolchain: Toolchain, progress: Progress, prepared: Prepared) -> None:
    """Compile a fetched step, move its outputs into its store folder, stamp it, link it."""
    prepared.done.wait()
    if prepared.error is not None:
        raise prepared.error
    if step.compile is not None:
        started = time.monotonic()
        step.compile(toolchain.pins, prepared.scratch, prepared.staged, progress)
        progress.timed(f"{step.name} compile", started)
    missing = [o for o in step.outputs if not (prepared.staged / o).exists()]
    if missing:
        raise StepFailed(f"the build finished but did not produce {', '.join(missing)}")
    store = toolchain.store(step)
    if store.exists():
        shutil.rmtree(store)
    store.parent.mkdir(parents=True, exist_ok=True)
    os.replace(prepared.staged, store)
    (store / ".stamp").write_text(step.key(toolchain.pins))
    link_step(step, toolchain)


def run_step(step: Step, toolchain: Toolchain, progress: Progress) -> None:
    """Fetch and compile one step in this thread (what `build_steps` does, without overlap)."""
    build_steps([step], toolchain, progress, announce=False)


def build_steps(steps: Sequence[Step], toolchain: Toolchain, progress: Progress, announce: bool = True) -> None:
    """Build `steps` in order: a thread runs their fetch stages one after another, ahead of
    the compiles, so a step's downloads overlap the compiling of the one before it."""
    work = toolchain.root / "work"
    work.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bootstrap-", dir=work))
    prepared = {s.name: Prepared(tmp / s.name) for s in steps}
    stop = threading.Event()

    def fetch_all() -> None:
        for s in steps:
            if stop.is_set():
                prepared[s.name].error = StepFailed("not fetched: an earlier step failed")
                prepared[s.name].done.set()
                continue
            fetch_step(s, toolchain, progress, prepared[s.name])

    fetcher = threading.Thread(target=fetch_all, name="bootstrap-fetch", daemon=True)
    fetcher.start()
    try:
        for s in steps:
            if announce:
                progress.step(s.name, f"building {s.what}")
            finish_step(s, toolchain, progress, prepared[s.name])
    finally:
        stop.set()
        fetcher.join()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bootstrap", description=__doc__.splitlines()[0])
    step_names = ",".join(["venv", *(s.name for s in BINARY_STEPS)])
    parser.add_argument("--only", help=f"comma-separated step names ({step_names})")
    parser.add_argument("--print-bin", action="store_true", help="print the toolchain's bin folder and exit")
    parser.add_argument("--timings", type=Path, default=os.environ.get("ATLAS_BOOTSTRAP_TIMINGS") or None,
                        help="write the seconds each phase took to this JSON file (or $ATLAS_BOOTSTRAP_TIMINGS)")
    args = parser.parse_args(argv)

    pins = load_pins()
    toolchain = default_toolchain(pins)
    if args.print_bin:
        print(toolchain.bin)
        return 0
    wanted = set(args.only.split(",")) if args.only else None
    unknown = (wanted or set()) - {"venv", *(s.name for s in BINARY_STEPS)}
    if unknown:
        parser.error(f"--only: unknown step(s) {', '.join(sorted(unknown))}; known: {step_names}")
    steps = [s for s in BINARY_STEPS if wanted is None or s.name in wanted]
    todo = [s for s in steps if not step_done(s, toolchain)]
    for step in steps:
        if step not in todo:
            link_step(step, toolchain)  # built by another pin set that shares this step's pins
    venv_wanted = wanted is None or "venv" in wanted
    venv_stale = venv_wanted and not (
        (VENV_DIR / ".atlas-stamp").exists() and (VENV_DIR / ".atlas-stamp").read_text() == venv_key()
    )
    progress = Progress(len(todo) + int(venv_stale))
    if venv_wanted and not venv_stale:
        compile_project_bytecode()
    if not todo and not venv_stale:
        progress.say(f"toolchain up to date in {toolchain.bin}")
        return 0
    started = time.monotonic()
    try:
        if todo:
            progress.say(check_go())
        if venv_stale:
            progress.step("venv", f"Python virtual environment in {VENV_DIR}")
            build_venv(pins, progress)
            compile_project_bytecode()
            progress.timed("venv", started)
        if todo:
            build_steps(todo, toolchain, progress)
    except StepFailed as exc:
        progress.say(f"FAILED at step {progress.index}/{progress.total}: {exc}")
        return 1
    except KeyboardInterrupt:
        progress.say("interrupted: the step in progress left nothing behind; run again to resume")
        return 130
    finally:
        progress.timed("total", started)
        if args.timings is not None:
            args.timings.write_text(json.dumps(progress.phases, indent=2) + "\n")
    phases = ", ".join(f"{k} {v:.0f}s" for k, v in progress.phases.items())
    progress.say(f"done; toolchain in {toolchain.bin} ({phases})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
