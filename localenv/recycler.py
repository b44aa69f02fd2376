"""The local cluster's volume recycler: makes Released pool volumes Available again.

A real cluster provisions a volume per claim and deletes it with the claim. The local
pool is static hostPath volumes with `Retain` (the controller manager deletes hostPath
volumes only with its test-only provisioner), so without this loop a pool drains as
stacks come and go. Like Kubernetes' old Recycle policy it empties the volume's folder
first, so the next claim starts clean.

Run by `scripts/localenv up` as the `pv-recycler` daemon:
    python -m localenv.recycler <state dir> <api port> [interval seconds]
"""

from __future__ import annotations

import shutil
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

from infra.kubeapi import KubeRequestError
from localenv.layout import Layout, Ports
from localenv.pki import admin_api

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
    api = admin_api(layout, timeout_s=5)
    path = "/api/v1/persistentvolumes"
    recycled = []
    for volume in released_pool_volumes(api.get(path)["items"]):
        name = volume["metadata"]["name"]
        empty_folder(Path(volume["spec"]["hostPath"]["path"]), layout.kube_dir / "volumes")
        patch = [
            # Only if it is still the claim we saw: a volume bound meanwhile is left alone.
            {"op": "test", "path": "/spec/claimRef/uid", "value": volume["spec"]["claimRef"]["uid"]},
            {"op": "remove", "path": "/spec/claimRef"},
        ]
        try:
            api.request("PATCH", f"{path}/{name}", patch, content_type="application/json-patch+json")
        except KubeRequestError as err:
            if err.status not in (404, 409, 422):  # gone, or changed since we looked
                raise
        else:
            recycled.append(name)
    return recycled


def main(argv: list[str]) -> int:
    state_dir, api_port = Path(argv[0]), int(argv[1])
    interval = float(argv[2]) if len(argv) > 2 else 2.0
    layout = Layout(state_dir=state_dir, ports=Ports(api_port - 443))
    while True:
        try:
            for name in recycle_once(layout):
                print(f"recycled {name}", flush=True)
        except (OSError, urllib.error.URLError, KubeRequestError, ValueError) as err:
            # The API server may be restarting: try again next round.
            print(f"recycler: {err}", flush=True)
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
