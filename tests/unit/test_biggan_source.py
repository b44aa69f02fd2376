"""workloads/biggan against BigGAN-PyTorch's pinned commit, without its code and without a network.

`workloads/biggan/biggan-argparse-flags.json` holds the options each script's argument parser
defines at workload.yaml's source.commit, extracted from the source by
`python3 -m infra.workload_source flags` (the command is in the file): a flag a step passes that
the parser does not define would stop the step with "unrecognized arguments" on the first real
`up`. The patch file is checked for the shape every environment relies on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infra.workload.load import load_workload
from infra.workload.model import Workload
from infra.workload.options import is_option
from infra.workload.render import RenderedStep, render_step

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = load_workload(REPO / "workloads" / "biggan" / "workload.yaml")
FLAGS = json.loads((REPO / "workloads" / "biggan" / "biggan-argparse-flags.json").read_text())
# The definition as written (an environment with no overrides) and every environment that has some.
ENVIRONMENTS = ("(the definition)", *WORKLOAD.environments_with_overrides)


def unknown_flags(workload: Workload, rendered: RenderedStep, flags: dict[str, object]) -> list[str]:
    """Options in a rendered step's argv that its script's parser does not define."""
    script = rendered.argv[1]
    known = set(flags["scripts"][script]["flags"])  # type: ignore[index]
    options = [token.partition("=")[0] for token in rendered.argv[2:] if is_option(token)]
    return [option for option in options if option not in known]


def test_the_flags_file_is_for_the_pinned_commit_and_says_how_to_regenerate_it() -> None:
    assert FLAGS["commit"] == WORKLOAD.source.commit  # type: ignore[union-attr]
    assert FLAGS["repository"] == WORKLOAD.source.repository  # type: ignore[union-attr]
    assert FLAGS["generated_by"].startswith("python3 -m infra.workload_source flags ")
    assert FLAGS["scripts"]["main.py"]["parser_files"] == ["cfg.py"]


@pytest.mark.parametrize("environment", ENVIRONMENTS)
@pytest.mark.parametrize("step", [s.name for s in WORKLOAD.steps])
def test_every_flag_a_step_passes_exists_in_the_pinned_commits_parser(environment: str, step: str) -> None:
    rendered = render_step(WORKLOAD, step, environment)
    assert rendered.argv[0] == "python" and rendered.argv[1] in FLAGS["scripts"]
    assert unknown_flags(WORKLOAD, rendered, FLAGS) == []


def test_a_flag_the_parser_lacks_is_caught() -> None:
    rendered = render_step(WORKLOAD, "train", "(the definition)")
    wrong = RenderedStep("x", "train", (*rendered.argv, "--num_G_accumulation", "2", "--G_ch=8"), rendered.resources,
                         (), None)  # fmt: skip
    assert unknown_flags(WORKLOAD, wrong, FLAGS) == ["--num_G_accumulation"]


PATCH = (REPO / "workloads" / "biggan" / "biggan-torch2.patch").read_text()


def test_the_patch_has_one_reason_per_section_and_one_file_per_section() -> None:
    sections = re.split(r"^(?=diff --git )", PATCH, flags=re.MULTILINE)
    preamble, diffs = sections[0], sections[1:]
    assert diffs, "no diff in the patch"
    reasons = re.findall(r"^Reason (\d+) \(([^)]+)\):", PATCH, flags=re.MULTILINE)
    assert [int(n) for n, _ in reasons] == list(range(1, len(diffs) + 1))
    # Each reason stands right before its own section: text after a section is the next one's reason.
    for i, diff in enumerate(diffs):
        # One file per section (one or more hunks in it), so each change reads with its reason.
        assert len(re.findall(r"^@@ ", diff, flags=re.MULTILINE)) >= 1, f"section {i + 1} has no hunk"
        assert len(re.findall(r"^\+\+\+ ", diff, flags=re.MULTILINE)) == 1, f"section {i + 1} changes several files"
        before = preamble if i == 0 else diffs[i - 1]
        assert f"Reason {i + 1} (" in before
    assert WORKLOAD.source.patch == "workloads/biggan/biggan-torch2.patch"  # type: ignore[union-attr]
    assert WORKLOAD.source.commit in preamble  # type: ignore[union-attr]


def test_the_seed_scale_keeps_the_seeds_train_arguments_and_says_what_it_changes() -> None:
    from infra.workload.differences import step_differences
    from infra.workload.model import input_override
    from infra.workload.options import last_values

    full = last_values(render_step(WORKLOAD, "train", "(the definition)").argv)
    seed = last_values(render_step(WORKLOAD, "train", "h200-seed").argv)
    for flag in (
        "--G_ch",
        "--D_ch",
        "--batch_size",
        "--num_G_accumulations",
        "--num_D_accumulations",
        "--num_D_steps",
        "--G_lr",
        "--D_lr",
        "--save_every",
        "--test_every",
        "--num_workers",
    ):
        assert seed[flag] == full[flag], flag
    assert seed["--G_ch"] == ("96",) and seed["--batch_size"] == ("128",) and seed["--num_D_accumulations"] == ("4",)
    assert {k for k in seed if seed[k] != full.get(k)} == {"--num_epochs", "--num_inception_images"}
    data = input_override(WORKLOAD, "h200-seed", "make-hdf5", "imagenet-train")
    assert data is not None and data.images == 32768
    # Every change is reported with its reason (the report's "Differs from the full run" notes).
    changed = step_differences(WORKLOAD, "(the definition)", "h200-seed")
    assert len(changed) >= 4
