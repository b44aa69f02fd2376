"""A small labelled ImageFolder for BigGAN's make-hdf5 step, made at run time from data a package ships.

    python3 workloads/biggan/small_imagefolder.py --out data/ImageNet/train --images 1797 --size 128

The reduced-scale run (workload.yaml's `h200` overrides) cannot read ILSVRC2012 (not
downloadable here, 140 GB), so it reads scikit-learn's bundled handwritten digits
(`sklearn.datasets.load_digits`: 1,797 8x8 grey images in 10 classes, shipped inside the
package, no download). Each digit is scaled to `--size` pixels and written as an RGB PNG
under `<out>/<class>/`, the layout of `data/ImageNet/train` (workload.yaml's
`imagenet-train` input) that BigGAN's `ImageFolder` walks. More images than the package has
are made by cycling through them with a one-pixel shift, so the set stays labelled.

Prints a JSON line describing what it wrote, so the run keeps where its data came from.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

SOURCE = "scikit-learn's bundled handwritten digits (sklearn.datasets.load_digits, 1,797 8x8 grey images, 10 classes)"


def make(out: Path, images: int, size: int) -> dict[str, object]:
    import numpy as np
    import sklearn
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images  # (1797, 8, 8), values 0..16
    labels = digits.target
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    per_class: dict[int, int] = {}
    for n in range(images):
        index = n % len(pixels)
        grey = (pixels[index] * (255 / 16)).astype(np.uint8)
        cycle = n // len(pixels)
        if cycle:
            # A later pass shifts by a pixel so a repeated digit is not the identical image.
            grey = np.roll(grey, shift=cycle % 3 - 1, axis=cycle % 2)
        image = Image.fromarray(grey, mode="L").resize((size, size), Image.Resampling.BILINEAR).convert("RGB")
        label = int(labels[index])
        folder = out / f"{label:02d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"{n:06d}.png"
        image.save(path)
        digest.update(path.read_bytes())
        per_class[label] = per_class.get(label, 0) + 1
    return {
        "out": str(out),
        "images": images,
        "classes": len(per_class),
        "size_px": size,
        "source": SOURCE,
        "scikit_learn": sklearn.__version__,
        "sha256_of_pngs": digest.hexdigest(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the ImageFolder root, e.g. data/ImageNet/train")
    parser.add_argument("--images", type=int, default=1797, help="how many images (default: every digit once)")
    parser.add_argument("--size", type=int, default=128, help="side in pixels (default 128)")
    args = parser.parse_args(argv)
    if args.images < 1 or not 8 <= args.size <= 1024:
        parser.error("--images must be >= 1 and --size between 8 and 1024")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty: BigGAN would index what is there too; remove it first")
    print(json.dumps(make(args.out, args.images, args.size)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
