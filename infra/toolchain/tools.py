"""The tools the toolchain builds from Go modules, each a step with a fetch and a compile stage.

Pulumi's CLI, the Python plugin launchers, the Kubernetes provider, etcd, KWOK, the Kubernetes
commands, containerd, the CNI plugins, Kubernetes' pause program and kube-router: `BINARY_STEPS`, in build
order. Each stage is `stage(pins, scratch, out, progress)`; bootstrap.py runs them. Standard
library only, as bootstrap.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from infra.toolchain.apptainer import RECIPE as APPTAINER_RECIPE
from infra.toolchain.apptainer import compile_apptainer, fetch_apptainer
from infra.toolchain.go import BuildStepFailed, go_build, go_env, go_get, module_dir, run, write_wrapper
from infra.toolchain.pins import Pins
from infra.toolchain.progress import Progress
from infra.toolchain.recipes import DYNAMIC_HOST_SHIM, KUBERNETES_PROVIDER_MAIN, LANGUAGE_HOST_SHIM
from infra.toolchain.store import BuildStep

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
        raise BuildStepFailed(f"no staging replaces found in {src / 'go.mod'}: the module layout changed")
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
        raise BuildStepFailed("gcc is needed for Kubernetes' pause program: apt-get install gcc libc6-dev")
    run(["gcc", "-Os", "-static", "-Wall", "-Werror", f"-DVERSION=v{pins.kubernetes}-atlas",
         "-o", str(out / "pause"), str(scratch / "pause.c")], progress=progress, label="pause (compile)")
    run(["strip", str(out / "pause")], progress=progress, label="pause (strip)")


KUBE_ROUTER_MODULE = "github.com/cloudnativelabs/kube-router/v2"


def fetch_kube_router(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    version = f"v{pins.kube_router}"
    write_wrapper(scratch, "kube-router", {KUBE_ROUTER_MODULE: version}, {})
    go_get(scratch, [f"{KUBE_ROUTER_MODULE}/cmd/kube-router"], version, go_env(scratch), progress, "kube-router")


def compile_kube_router(pins: Pins, scratch: Path, out: Path, progress: Progress) -> None:
    # Its own Kubernetes client (k8s.io/client-go v0.29) shares no compiled package with the
    # pinned Kubernetes build: the cold build compiles all of it.
    go_build(scratch, out / "kube-router", [f"{KUBE_ROUTER_MODULE}/cmd/kube-router"],
             {f"{KUBE_ROUTER_MODULE}/pkg/version.Version": f"v{pins.kube_router}",
              f"{KUBE_ROUTER_MODULE}/pkg/version.BuildDate": "atlas-bootstrap"},
             go_env(scratch), progress, "kube-router")


BINARY_STEPS: tuple[BuildStep, ...] = (
    BuildStep("pulumi", ("pulumi",), "the Pulumi CLI (engine)", ("pulumi",), fetch_pulumi, compile_pulumi),
    BuildStep(
        "python-plugins",
        ("pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"),
        "Python language runtime launcher and dynamic-provider shim",
        ("pulumi",),
        fetch_python_plugins,
        recipe=LANGUAGE_HOST_SHIM + DYNAMIC_HOST_SHIM,
    ),
    BuildStep(
        "pulumi-resource-kubernetes",
        ("pulumi-resource-kubernetes",),
        "Kubernetes provider plugin",
        ("pulumi_kubernetes",),
        fetch_kubernetes_provider,
        compile_kubernetes_provider,
    ),
    BuildStep("etcd", ("etcd",), "etcd", ("etcd",), fetch_etcd, compile_etcd),
    BuildStep("kwok", ("kwok",), "KWOK node and pod simulator", ("kwok",), fetch_kwok, compile_kwok),
    BuildStep(
        "kubernetes", KUBE_COMMANDS, "kube-apiserver, controller-manager, scheduler, kubectl, kubelet, kube-proxy",
        ("kubernetes",), fetch_kubernetes, compile_kubernetes,
    ),
    BuildStep("containerd", CONTAINERD_COMMANDS, "containerd, its runc shim and ctr (the local node's runtime)",
         ("containerd",), fetch_containerd, compile_containerd),
    BuildStep("cni-plugins", tuple(CNI_PLUGINS), "CNI plugins: bridge, host-local, loopback, portmap",
         ("cni_plugins",), fetch_cni_plugins, compile_cni_plugins),
    BuildStep("pause", ("pause",), "Kubernetes' pause program (pod sandboxes)", ("kubernetes",), fetch_pause,
         compile_pause, recipe="gcc -Os -static; strip"),
    # The local node's NetworkPolicy engine (localenv/netpol.py), which every `localenv up` starts:
    # built by default. Cold, 15 s fetch and 180 s compile (measured once by hand, 2026-12-05, on
    # this 2-core machine under `nice -n 19` and `go build -p 1` beside a test run: an upper bound).
    BuildStep("kube-router", ("kube-router",), "kube-router, the local node's NetworkPolicy controller",
              ("kube_router",), fetch_kube_router, compile_kube_router),
)

# Built only when asked (`scripts/bootstrap --with apptainer`): slow, and not on the cold path of
# the local environment. Once built, bootstrap links them like the others.
OPTIONAL_STEPS: tuple[BuildStep, ...] = (
    BuildStep("apptainer", ("apptainer",), "Apptainer, the HPC side's container runtime (cgo, about 5 min on 2 cores)",
              ("apptainer",), fetch_apptainer, compile_apptainer, recipe=APPTAINER_RECIPE),
)
