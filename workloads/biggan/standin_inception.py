"""Stand-in Inception v3 weights where the real ones cannot be downloaded.

    python3 workloads/biggan/standin_inception.py --torch-home .cache/torch

BigGAN-PyTorch's `inception_utils.load_inception_net` loads
`inception_v3_google-1a9a5a14.pth` through `torch.utils.model_zoo.load_url`, which reads
`$TORCH_HOME/hub/checkpoints/<file>` when it is there and downloads it otherwise. Where no
download is possible and no copy of the real file was staged (workload.yaml's
`inception-weights` input), this writes torchvision's Inception v3 with its own random
initialisation (seed 0) under that name, so the inception-moments and train steps run their
real code. Inception Score and FID computed with these weights mean nothing: the run's report
must say "not meaningful (weights: ...)" and never show them as scores. It refuses to
overwrite a file that is already there, so a staged real copy is never replaced.

Prints a JSON line saying what it wrote (or found), for the run's provenance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

FILE_NAME = "inception_v3_google-1a9a5a14.pth"
# The hash prefix torch.hub checks when asked to (check_hash): the real file's sha256 starts so.
REAL_SHA256_PREFIX = "1a9a5a14"
STANDIN = "torchvision inception_v3(weights=None, aux_logits=True, init_weights=True), torch.manual_seed(0)"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(path: Path) -> dict[str, object]:
    """What a weights file is: the real one only if its sha256 starts with the hash in its name."""
    digest = sha256(path)
    real = digest.startswith(REAL_SHA256_PREFIX)
    return {
        "path": str(path),
        "sha256": digest,
        "real": real,
        "weights": "the real inception_v3_google-1a9a5a14.pth (sha256 prefix matches)"
        if real
        else f"stand-in, not the real Inception weights: {STANDIN}",
    }


def write_standin(torch_home: Path) -> dict[str, object]:
    path = torch_home / "hub" / "checkpoints" / FILE_NAME
    if path.exists():
        return {**describe(path), "written": False}
    import torch
    import torchvision
    from torchvision.models import inception_v3

    torch.manual_seed(0)
    model = inception_v3(weights=None, aux_logits=True, init_weights=True, num_classes=1000)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return {**describe(path), "written": True, "torch": torch.__version__, "torchvision": torchvision.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--torch-home", type=Path, required=True, help="the steps' TORCH_HOME (workload.yaml env)")
    args = parser.parse_args(argv)
    print(json.dumps(write_standin(args.torch_home)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
