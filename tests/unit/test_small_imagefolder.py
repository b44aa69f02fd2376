"""workloads/biggan/small_imagefolder.py: the labelled ImageFolder the device runs make at run time."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[2] / "workloads" / "biggan" / "small_imagefolder.py"
spec = importlib.util.spec_from_file_location("small_imagefolder", SCRIPT)
assert spec is not None and spec.loader is not None
small_imagefolder = importlib.util.module_from_spec(spec)
# Registered by its name, as `python3 small_imagefolder.py` has it: the pool pickles `render` by reference.
sys.modules["small_imagefolder"] = small_imagefolder
spec.loader.exec_module(small_imagefolder)


def test_shifts_are_distinct_and_leave_the_first_pass_as_shipped() -> None:
    shifts = small_imagefolder.SHIFTS
    assert len(shifts) == len(set(shifts)) == 24 and (0, 0) not in shifts


def test_later_passes_are_labelled_like_the_first_and_not_identical(tmp_path: Path) -> None:
    # Digit 0 of passes 0, 1 and 2 (indices 0, 1797, 3594): same label, three different images.
    made = [small_imagefolder.render(n, n + 1, str(tmp_path), 32)[0] for n in (0, 1797, 3594)]
    assert {label for label, _ in made} == {0}
    pixels = [np.asarray(Image.open(tmp_path / "00" / f"{n:06d}.png")).tobytes() for n in (0, 1797, 3594)]
    assert len(set(pixels)) == 3


def test_the_digest_does_not_depend_on_how_many_processes_wrote(tmp_path: Path) -> None:
    one = small_imagefolder.make(tmp_path / "one", 40, 16, processes=1)
    two = small_imagefolder.make(tmp_path / "two", 40, 16, processes=2)
    assert one["sha256_of_pngs"] == two["sha256_of_pngs"]
    assert one["images"] == 40 and one["classes"] == 10
    assert len(list((tmp_path / "two").rglob("*.png"))) == 40
    json.dumps(two)  # what main() prints
