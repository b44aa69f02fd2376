"""stacks/Pulumi.my-site.yaml, the template for one's own site (issue 31, item 2): every site-specific
value a whole `<...>` placeholder with a comment saying what to put there, the template refused as
shipped with an error naming a key and the placeholder, and accepted once every placeholder is filled.
The stacks tied to one site (MOC's OpenShift, MIT's Satori) say they are examples of one site."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import AtlasConfigError, parse_stack_config

PROJECT_DIR = Path(__file__).resolve().parents[2]
TEMPLATE = PROJECT_DIR / "stacks" / "Pulumi.my-site.yaml"
EXAMPLES_OF_ONE_SITE = ("openshift-gpu", "satori", "satori-slurm", "hybrid")
PLACEHOLDER = re.compile(r"^<[^<>]+>$")
# Values a user at a site might write for each placeholder (the end-to-end test fills them with
# the local site's: tests/e2e/test_user_path.py).
FILLED = {
    "<your OpenShift project>": "my-project",
    "<your oc login context>": "my-project/api-cluster-example-org:6443/alex",
    "<a ReadWriteMany StorageClass>": "ocs-storagecluster-cephfs",
    "<your GPU nodes' nvidia.com/gpu.product>": "NVIDIA-A100-SXM4-40GB",
    "<the Git URL of your Atlas clone>": "https://github.com/example/atlas.git",
    "<a commit or branch of that repository>": "main",
    "<a Python 3.11 base image your cluster can pull>": "docker.io/library/python:3.11-slim",
    "<slurm or lsf>": "slurm",
    "<the Host alias of your login node>": "mylogin",
    "<your GPU partition or queue>": "gpu",
}


def atlas_values(document: dict[str, Any]) -> dict[str, Any]:
    """A stack file's `atlas:` keys as the program's parser takes them (without the prefix)."""
    return {key.partition(":")[2]: value for key, value in document["config"].items() if key.startswith("atlas:")}


def placeholders(value: Any) -> list[str]:
    """Every string in `value` that is a placeholder, through objects and lists."""
    if isinstance(value, dict):
        return [p for item in value.values() for p in placeholders(item)]
    if isinstance(value, list):
        return [p for item in value for p in placeholders(item)]
    return [value] if isinstance(value, str) and PLACEHOLDER.match(value) else []


def filled(value: Any, fill: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: filled(v, fill) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, fill) for v in value]
    return fill.get(value, value) if isinstance(value, str) else value


def test_every_site_specific_value_is_a_whole_placeholder_with_a_comment() -> None:
    lines = TEMPLATE.read_text().splitlines()
    document = yaml.safe_load(TEMPLATE.read_text())
    found = placeholders(document["config"])
    assert sorted(found) == sorted(FILLED), "the template's placeholders and this test's list differ"
    for number, line in enumerate(lines):
        if line.lstrip().startswith("#") or "<" not in line:
            continue
        assert re.search(r':\s*"<[^<>"]+>"\s*(#.*)?$', line), f"line {number + 1}: a '<' that is no whole value: {line}"
        assert lines[number - 1].lstrip().startswith("#"), f"line {number + 1} has no comment above it: {line}"
    assert "REPLACE_WITH" not in TEMPLATE.read_text()


def test_the_template_as_shipped_is_refused_naming_a_key_and_the_placeholder() -> None:
    """Holds once the config loader refuses `<...>` values (issue 31, item 1's models): not skipped."""
    with pytest.raises(AtlasConfigError) as refused:
        parse_stack_config("my-site", atlas_values(yaml.safe_load(TEMPLATE.read_text())), PROJECT_DIR)
    message = str(refused.value)
    assert re.match(r"^atlas:[\w.\-\[\]]+", message), message
    assert "placeholder" in message, message


def test_the_template_filled_in_is_accepted() -> None:
    values = filled(atlas_values(yaml.safe_load(TEMPLATE.read_text())), FILLED)
    assert placeholders(values) == []
    config = parse_stack_config("my-site", values, PROJECT_DIR)
    assert config.openshift is not None and config.openshift.namespace == "my-project"
    assert config.openshift.context == FILLED["<your oc login context>"]
    ((hpc),) = config.hpc
    assert (hpc.target.host, hpc.target.scheduler, hpc.target.queue) == ("mylogin", "slurm", "gpu")
    assert hpc.provenance == "real"


@pytest.mark.parametrize("stack", EXAMPLES_OF_ONE_SITE)
def test_the_stacks_of_one_site_say_they_are_examples_and_name_the_template(stack: str) -> None:
    header = []
    for line in (PROJECT_DIR / "stacks" / f"Pulumi.{stack}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    text = " ".join(line.lstrip("# ") for line in header)
    assert "an example of one site" in text, f"Pulumi.{stack}.yaml's header does not say it is an example"
    assert "stacks/Pulumi.my-site.yaml" in text, f"Pulumi.{stack}.yaml's header does not name the template"
