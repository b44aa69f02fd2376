"""A small labelled ImageFolder for BigGAN's make-hdf5 step, made at run time from data a package ships.

    python3 workloads/biggan/small_imagefolder.py --out data/ImageNet/train --images 1797 --size 128

The reduced-scale run (workload.yaml's `h200` overrides) cannot read ILSVRC2012 (not
downloadable here, 140 GB), so it reads scikit-learn's bundled handwritten digits
(`sklearn.datasets.load_digits`: 1,797 8x8 grey images in 10 classes, shipped inside the
package, no download). Each digit is scaled to `--size` pixels and written as an RGB PNG
under `<out>/<class>/`, the layout of `data/ImageNet/train` (workload.yaml's
`imagenet-train` input) that BigGAN's `ImageFolder` walks. More images than the package has
are made by cycling through them, each pass shifted by its own offset of up to two pixels, so
the set stays labelled and no image repeats within 25 passes. The PNGs are written by
`--processes` processes (all CPUs by default); the digest is over them in index order.

Prints a JSON line describing what it wrote, so the run keeps where its data came from.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

# Offsets of up to two pixels each way, (0, 0) left out: the first pass is the digits as shipped.
SHIFTS = [(dy, dx) for dy in (-1, 1, -2, 2, 0) for dx in (0, 1, -1, 2, -2) if (dy, dx) != (0, 0)]
SOURCE = "scikit-learn's bundled handwritten digits (sklearn.datasets.load_digits, 1,797 8x8 grey images, 10 classes)"


def render(start: int, stop: int, out: str, size: int) -> list[tuple[int, bytes]]:
    """Images start..stop-1 written as PNGs; returns (label, PNG bytes) in order, for the digest."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images  # (1797, 8, 8), values 0..16
    labels = digits.target
    made = []
    for n in range(start, stop):
        index = n % len(pixels)
        grey = (pixels[index] * (255 / 16)).astype(np.uint8)
        cycle = n // len(pixels)
        if cycle:
            # Each later pass shifts every digit by its own (rows, columns) offset, so no image
            # repeats within 25 passes (44,925 images).
            grey = np.roll(grey, shift=SHIFTS[(cycle - 1) % len(SHIFTS)], axis=(0, 1))
        image = Image.fromarray(grey, mode="L").resize((size, size), Image.Resampling.BILINEAR).convert("RGB")
        label = int(labels[index])
        folder = Path(out) / f"{label:02d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"{n:06d}.png"
        image.save(path)
        made.append((label, path.read_bytes()))
    return made


def make(out: Path, images: int, size: int, processes: int = 1) -> dict[str, object]:
    import sklearn

    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    per_class: dict[int, int] = {}
    # Chunks in order: the digest is over every PNG in index order, however many processes wrote them.
    step = max(1, -(-images // (processes * 8)))
    bounds = [(start, min(start + step, images)) for start in range(0, images, step)]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        chunks = pool.map(render, *zip(*bounds, strict=True), repeat(str(out)), repeat(size))
        for chunk in chunks:
            for label, png in chunk:
                digest.update(png)
                per_class[label] = per_class.get(label, 0) + 1
    return {
        "out": str(out),
        "images": images,
        "classes": len(per_class),
        "size_px": size,
        "source": SOURCE,
        "scikit_learn": sklearn.__version__,
        "sha256_of_pngs": digest.hexdigest(),
        "bytes_of_pngs": sum(p.stat().st_size for p in out.rglob("*.png")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the ImageFolder root, e.g. data/ImageNet/train")
    parser.add_argument("--images", type=int, default=1797, help="how many images (default: every digit once)")
    parser.add_argument("--size", type=int, default=128, help="side in pixels (default 128)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="processes writing PNGs")
    args = parser.parse_args(argv)
    if args.images < 1 or not 8 <= args.size <= 1024:
        parser.error("--images must be >= 1 and --size between 8 and 1024")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty: BigGAN would index what is there too; remove it first")
    print(json.dumps(make(args.out, args.images, args.size, args.processes)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
