"""docs/configuration.md and docs/atlas-config.schema.json are what the config models draw, every
key a stack file sets is in them, and a template's placeholder is refused before anything else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra import config_reference
from infra.config import AtlasConfigError, parse_stack_config
from infra.config_schema import find_placeholder
from tests.support import REPO_ROOT

STACKS = sorted((REPO_ROOT / "stacks").glob("Pulumi.*.yaml"))
GOOD: dict[str, Any] = {
    "workload": "probe",
    "openshift": {"flavour": "kubernetes", "namespace": "atlas-local", "image": {"reference": "quay.io/atlas/probe:1"}},
}


def test_the_reference_and_the_schema_are_the_ones_the_models_draw() -> None:
    assert config_reference.MARKDOWN.read_text() == config_reference.render_markdown(), (
        "docs/configuration.md is out of step with the config models: run `python -m infra.config_reference --write`"
    )
    assert config_reference.SCHEMA.read_text() == config_reference.render_schema(), (
        "docs/atlas-config.schema.json is out of step with the models: run `python -m infra.config_reference --write`"
    )
    assert config_reference.main([]) == 0


def test_every_key_the_models_read_has_a_row_with_a_description() -> None:
    text = config_reference.MARKDOWN.read_text()
    keys = [row.key for row in config_reference.rows()]
    assert len(keys) == len(set(keys)) > 100
    for row in config_reference.rows():
        assert f"| `{row.key}` |" in text, row.key
        assert row.description, f"{row.key} has no description"
        if row.type not in ("object", "object of objects", "list of objects"):
            assert row.example, f"{row.key} has no example"
    # The keys the issue found documented nowhere.
    for key in ("atlas:openshift.gpu.check_product", "atlas:openshift.storage.data.access_mode",
                "atlas:openshift.monitor.ingress_class", "atlas:openshift.data.s3.credentials_secret",
                "atlas:hpc.<name>.private_key_passphrase"):
        assert key in keys, key


def _atlas_values(path: Path) -> dict[str, Any]:
    config = (yaml.safe_load(path.read_text()) or {}).get("config", {})
    return {k.partition(":")[2]: v for k, v in config.items() if k.startswith("atlas:")}


def _keys_set(value: Any, key: str, known: dict[str, str]) -> list[str]:
    """The reference's keys a stack's value sets: names the user chooses as `<name>`, list items as `[]`."""
    found = [key]
    kind = known.get(key, "")
    if isinstance(value, dict) and kind in ("object", "object of objects"):
        field = key.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
        for name, item in value.items():
            child = f"{key}.{name}" if kind == "object" else f"{key}.{config_reference.NAME_PARTS.get(field, '<name>')}"
            found += _keys_set(item, child, known)
    elif isinstance(value, list) and kind == "list of objects":
        for item in value:
            found += _keys_set(item, f"{key}[]", known)
    return found


@pytest.mark.parametrize("stack", STACKS, ids=[p.name for p in STACKS])
def test_every_key_a_stack_file_sets_is_in_the_reference_and_the_schema(stack: Path) -> None:
    known = {row.key: row.type for row in config_reference.rows()}
    values = _atlas_values(stack)
    for name, value in values.items():
        for key in _keys_set(value, f"atlas:{name}", known):
            assert key in known, f"{stack.name}: {key} is not in docs/configuration.md"
    if find_placeholder(values, "atlas") is None:  # a template's placeholders are not values yet
        jsonschema.validate(values, json.loads(config_reference.SCHEMA.read_text()))


def test_a_key_outside_the_schema_is_caught_by_it() -> None:
    schema = json.loads(config_reference.SCHEMA.read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**GOOD, "openshift": {**GOOD["openshift"], "nodeSelector": {}}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**GOOD, "openshift": {**GOOD["openshift"], "namespace": "Not_A_Name"}}, schema)


@pytest.mark.parametrize(
    ("values", "key", "placeholder"),
    [
        ({**GOOD, "openshift": {**GOOD["openshift"], "namespace": "<your OpenShift project>"}},
         "atlas:openshift.namespace", "<your OpenShift project>"),
        ({**GOOD, "hpc": {"site": {"host": "<your login node>", "scheduler": "slurm"}}},
         "atlas:hpc.site.host", "<your login node>"),
        ({**GOOD, "hpc": {"site": {"host": "h", "scheduler": "slurm", "private_key_passphrase": "<passphrase>"}}},
         "atlas:hpc.site.private_key_passphrase", "<passphrase>"),
        ({**GOOD, "workload": "<your workload>"}, "atlas:workload", "<your workload>"),
    ],
)
def test_a_template_placeholder_is_refused_first_naming_the_key_and_the_fix(
    values: dict[str, Any], key: str, placeholder: str
) -> None:
    with pytest.raises(AtlasConfigError) as refused:
        parse_stack_config("my-site", values, REPO_ROOT)
    secret = "--secret " if key.endswith("passphrase") else ""
    assert str(refused.value) == (
        f"{key}: still the template's placeholder {placeholder}; "
        f"set it with `pulumi config set {secret}--path {key} ...`"
    )


def test_a_placeholder_in_a_section_switched_off_is_not_read() -> None:
    values = {**GOOD, "aws": {"enabled": False, "region": "<your region>"}}
    assert parse_stack_config("my-site", values, REPO_ROOT).aws is None


def test_an_unknown_key_names_the_closest_known_one() -> None:
    values = {**GOOD, "openshift": {**GOOD["openshift"], "namespce": "x"}}
    with pytest.raises(AtlasConfigError) as refused:
        parse_stack_config("s", values, REPO_ROOT)
    assert str(refused.value).startswith("atlas:openshift: unknown key(s) namespce; did you mean namespace? ")


def test_a_secret_is_never_echoed_by_a_type_error() -> None:
    """pydantic's own messages are reworded without the input; a secret's key says to use --secret."""
    secret = "hunter2-DO-NOT-ECHO"
    values = {**GOOD, "hpc": {"site": {"host": "h", "scheduler": "slurm", "private_key_passphrase": {"x": secret}}}}
    with pytest.raises(AtlasConfigError) as refused:
        parse_stack_config("s", values, REPO_ROOT)
    assert refused.value.args[0].startswith("atlas:hpc.site.private_key_passphrase: ")
    assert secret not in str(refused.value)
