"""The local cluster's volume recycler: makes Released pool volumes Available again.

A real cluster provisions a volume per claim and deletes it with the claim. The local
pool is static hostPath volumes with `Retain` (the controller manager deletes hostPath
volumes only with its test-only provisioner), so without this loop a pool drains as
stacks come and go. Like Kubernetes' old Recycle policy it empties the volume's folder
first, so the next claim starts clean.

Run by `scripts/localenv up` as the `pv-recycler` daemon:
    python -m infra.localenv.recycler <state dir> <api port> [interval seconds]
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from infra.localenv.layout import Layout, Ports

POOL_LABEL = "atlas.dev/pv-pool"


def released_pool_volumes(volumes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        v for v in volumes
        if v.get("status", {}).get("phase") == "Released" and POOL_LABEL in v["metadata"].get("labels", {})
    ]


def empty_folder(path: Path, pool_root: Path) -> None:
    """Remove a volume's contents, never anything outside the pool."""
    path = path.resolve()
    if pool_root.resolve() not in path.parents or not path.is_dir():
        return
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def recycle_once(layout: Layout) -> list[str]:
    from infra.localenv.kube import _ssl_context
    from infra.localenv.pki import Pki

    context = _ssl_context(Pki(layout.kube_dir / "pki"))
    url = f"{layout.api_url}/api/v1/persistentvolumes"
    with urllib.request.urlopen(url, context=context, timeout=5) as resp:  # noqa: S310 (loopback API)
        volumes = json.load(resp)["items"]
    recycled = []
    for volume in released_pool_volumes(volumes):
        name = volume["metadata"]["name"]
        empty_folder(Path(volume["spec"]["hostPath"]["path"]), layout.kube_dir / "volumes")
        patch = json.dumps([
            # Only if it is still the claim we saw: a volume bound meanwhile is left alone.
            {"op": "test", "path": "/spec/claimRef/uid", "value": volume["spec"]["claimRef"]["uid"]},
            {"op": "remove", "path": "/spec/claimRef"},
        ]).encode()
        request = urllib.request.Request(  # noqa: S310 (loopback API)
            f"{url}/{name}", data=patch, method="PATCH",
            headers={"Content-Type": "application/json-patch+json"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=5):  # noqa: S310
                recycled.append(name)
        except urllib.error.HTTPError as err:
            if err.code not in (404, 409, 422):  # gone, or changed since we looked
                raise
    return recycled


def main(argv: list[str]) -> int:
    state_dir, api_port = Path(argv[0]), int(argv[1])
    interval = float(argv[2]) if len(argv) > 2 else 2.0
    layout = Layout(state_dir=state_dir, ports=Ports(api_port - 443))
    while True:
        try:
            for name in recycle_once(layout):
                print(f"recycled {name}", flush=True)
        except (OSError, urllib.error.URLError, ValueError) as err:
            # The API server may be restarting: try again next round.
            print(f"recycler: {err}", flush=True)
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
