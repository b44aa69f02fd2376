"""Benchmark: the local node's start-up and the image cache.

- `localenv up` of the Kubernetes side with the real node, warm (binaries, certificates, images
  in the registry and the node's state present; processes stopped): down, then up, timed until
  the node is Ready with its mock GPUs. Goal: <= 30 s.
- The probe image rebuilt with nothing changed (buildah's layer cache, then the push of an
  image the registry already has). Goal: <= 10 s.

    .venv/bin/python -m bench.local_node [--runs 5]

Writes bench/results/local-node-<date>.json with every sample. Own local environment (ports
19000+, state under /tmp), started and stopped here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from bench.local_stack import timed
from bench.provenance import run_record, write_result
from bench.stats import RESULTS, now_utc
from infra.toolchain.pins import REPO_ROOT
from localenv import images, kube, node
from localenv.layout import Layout, Ports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    origin = run_record()
    quiet: Callable[[str], None] = lambda _line: None  # noqa: E731
    root = Path(os.environ.get("ATLAS_BENCH_DIR", "/tmp/atlas-bench-node"))  # noqa: S108 - sockets need short paths
    layout = Layout(state_dir=root / "localenv", ports=Ports(int(os.environ.get("ATLAS_BENCH_PORT_BASE", "19000"))))

    def up() -> None:
        kube.up(layout, kube.KubeSettings(), quiet)
        node.up(layout, quiet)

    def down() -> None:
        node.down(layout, quiet)
        kube.down(layout, quiet)

    first = timed(up)
    print(f"bench: first localenv up (this state folder's first: certificates, etcd, node registration): "
          f"{first:.1f}s", flush=True)
    warm: list[float] = []
    rebuilds: list[dict[str, object]] = []
    try:
        for i in range(args.runs):
            down()
            warm.append(timed(up))
            print(f"bench: warm localenv up (kube + node) #{i + 1}: {warm[-1]:.1f}s", flush=True)
        context, containerfile = REPO_ROOT, REPO_ROOT / "workloads/probe/Containerfile"
        initial = images.build_image(layout, context, containerfile, "atlas/probe", "bench-node")
        print(f"bench: probe image built once ({initial.seconds:.1f}s, cached={initial.cached})", flush=True)
        for i in range(args.runs):
            again = images.build_image(layout, context, containerfile, "atlas/probe", "bench-node")
            rebuilds.append({"seconds": again.seconds, "cached": again.cached, "digest": again.digest})
            print(f"bench: probe image rebuilt with no change #{i + 1}: {again.seconds:.1f}s "
                  f"(cached={again.cached})", flush=True)
    finally:
        down()
    result = {
        "bench": "local_node",
        "date": now_utc(),
        **origin,
        "provenance": "local node: kubelet, containerd, runc, mock GPUs; buildah and distribution from Debian",
        "localenv_up_first_s": round(first, 2),
        "localenv_up_warm_s": [round(w, 2) for w in warm],
        "localenv_up_warm_median_s": round(statistics.median(warm), 2),
        "image_rebuild_no_change_s": [r["seconds"] for r in rebuilds],
        "image_rebuild_no_change_median_s": round(statistics.median(float(str(r["seconds"])) for r in rebuilds), 2),
        "image_rebuilds_all_cached": all(r["cached"] for r in rebuilds),
        "image_digest_stable": len({r["digest"] for r in rebuilds}) == 1,
        "goals": {"localenv_up_warm_s": 30, "image_rebuild_no_change_s": 10},
    }
    out = write_result(result, RESULTS / f"local-node-{dt.date.today().isoformat()}.json")
    print(json.dumps({k: v for k, v in result.items() if "median" in k or k.startswith("image_")}, indent=2))
    print(f"bench: wrote {out.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
