"""The toolchain pins (toolchain/pins.toml), read into one typed object.

Standard library only: `scripts/bootstrap` runs this with the system Python before
any virtual environment exists.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

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
    digest: str

    @property
    def kubernetes_staging(self) -> str:
        """The published version of the k8s.io/* staging modules (v1.36.3 -> v0.36.3)."""
        _major, minor, patch = self.kubernetes.split(".")
        return f"v0.{minor}.{patch}"


def load_pins(path: Path = PINS_FILE) -> Pins:
    raw = path.read_bytes()
    data = tomllib.loads(raw.decode())
    try:
        kube = data["pulumi_kubernetes"]
        return Pins(
            pulumi=data["pulumi"]["version"],
            pulumi_kubernetes=kube["version"],
            pulumi_kubernetes_provider_module=kube["provider_module"],
            pulumi_kubernetes_sdk_module=kube["sdk_module"],
            pulumi_kubernetes_pulumi_module=kube["pulumi_module"],
            kubernetes=data["kubernetes"]["version"],
            etcd=data["etcd"]["version"],
            kwok=data["kwok"]["version"],
            digest=hashlib.sha256(raw + BUILD_RECIPE_VERSION.encode()).hexdigest()[:12],
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
    return cache_root() / "toolchain" / pins.digest
