"""The toolchain pins (toolchain/pins.toml), read into one typed object.

Standard library only: `scripts/bootstrap` runs this with the system Python before
any virtual environment exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
PINS_FILE = REPO_ROOT / "toolchain" / "pins.toml"

# Bump when the way binaries are built changes, so caches built the old way are not trusted.
BUILD_RECIPE_VERSION = "2"


@dataclass(frozen=True)
class Pins:
    pulumi: str
    pulumi_kubernetes: str
    pulumi_kubernetes_provider_module: str
    pulumi_kubernetes_sdk_module: str
    pulumi_kubernetes_pulumi_module: str
    kubernetes: str
    etcd: str
    kwok: str
    containerd: str
    cni_plugins: str
    openshift_api_repository: str
    openshift_api_commit: str
    openshift_api_sha256: str
    apptainer: str
    kube_router: str
    # Every section as written, for the per-step cache keys (`digest_of`).
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    def digest_of(self, *names: str) -> str:
        """A key over the named sections' values only: a step is rebuilt when what it is built
        from changes, not when another tool's pin or a comment does."""
        chosen = {name: dict(self.sections[name]) for name in names}
        text = json.dumps(chosen, sort_keys=True) + BUILD_RECIPE_VERSION
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def kubernetes_staging(self) -> str:
        """The published version of the k8s.io/* staging modules (v1.36.3 -> v0.36.3)."""
        _major, minor, patch = self.kubernetes.split(".")
        return f"v0.{minor}.{patch}"


def load_pins(path: Path = PINS_FILE) -> Pins:
    data = tomllib.loads(path.read_text())
    try:
        kube = data["pulumi_kubernetes"]
        openshift_api = data["openshift_api"]
        return Pins(
            pulumi=data["pulumi"]["version"],
            pulumi_kubernetes=kube["version"],
            pulumi_kubernetes_provider_module=kube["provider_module"],
            pulumi_kubernetes_sdk_module=kube["sdk_module"],
            pulumi_kubernetes_pulumi_module=kube["pulumi_module"],
            kubernetes=data["kubernetes"]["version"],
            etcd=data["etcd"]["version"],
            kwok=data["kwok"]["version"],
            containerd=data["containerd"]["version"],
            cni_plugins=data["cni_plugins"]["version"],
            openshift_api_repository=openshift_api["repository"],
            openshift_api_commit=openshift_api["commit"],
            openshift_api_sha256=openshift_api["sha256"],
            apptainer=data["apptainer"]["version"],
            kube_router=data["kube_router"]["version"],
            sections=data,
        )
    except KeyError as missing:
        raise SystemExit(f"{path}: missing key {missing}; see the comments in that file") from None


def cache_root() -> Path:
    """Where built toolchains live: outside the repository, shared by every clone."""
    base = os.environ.get("ATLAS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "atlas"
    )
    return Path(base)


def toolchain_dir(pins: Pins) -> Path:
    """The toolchain of these pins: `bin/` links each tool to the build of its step."""
    return cache_root() / "toolchain" / pins.digest_of(*BUILT_SECTIONS)


# The sections binaries are built from (the rest is data, such as the schema source). The optional
# steps' sections (apptainer) and kube_router (a default step added after the others) are left out:
# their own step keys rebuild them, and a change to them must not move every other tool's `bin/`
# folder (a toolchain already built keeps its folder and gains the new tool at the next bootstrap).
BUILT_SECTIONS = ("pulumi", "pulumi_kubernetes", "kubernetes", "etcd", "kwok", "containerd", "cni_plugins")
