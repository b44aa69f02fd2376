"""The configuration reference and JSON Schema, drawn from the models that validate a stack (`--write` redraws them).

`docs/configuration.md` lists every `atlas:` key the models read (infra/config_model.py's
`StackModel` and each section's model): its full path, type, default, description, example and
the rule a value must follow; `docs/atlas-config.schema.json` is the models' JSON Schema of the
`atlas:` values (keys without the prefix). `tests/unit/test_config_reference.py` fails when
either file differs from what the models draw, and when a key a stack file sets is not in them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from infra.config_model import OBJECT_KEYS, PROJECT, StackModel
from infra.config_schema import SECRET_FIELDS, _unwrap
from infra.hpc.registry import SCHEDULER_CLASSES

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = ROOT / "docs" / "configuration.md"
SCHEMA = ROOT / "docs" / "atlas-config.schema.json"
# How a key stands for a name the user chooses (an environment, a data input, a node label).
NAME_PARTS = {"hpc": "<name>", "sources": "<input>", "node_selector": "<label>"}


@dataclass(frozen=True)
class Row:
    key: str  # atlas:openshift.storage.data.size
    type: str
    default: str
    description: str
    example: str
    rule: str
    section: str  # the top-level key it belongs to


def _code(value: Any) -> str:
    return "`" + json.dumps(value, ensure_ascii=False) + "`" if not isinstance(value, str) else f"`{value}`"


def _type_of(schema: Mapping[str, Any]) -> str:
    options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    names = []
    for option in options:
        if "enum" in option:
            names.append("one of " + ", ".join(f"`{v}`" for v in option["enum"]))
        elif "$ref" in option:
            names.append("object")
        elif option.get("type") == "array":
            names.append("list")
        elif option.get("type") == "object":
            values = option.get("additionalProperties")
            names.append("object of text" if isinstance(values, dict) and values.get("type") == "string"
                         else "object")
        else:
            names.append({"integer": "whole number", "number": "number", "boolean": "true/false"}.get(
                str(option.get("type")), "text"))
    return " or ".join(dict.fromkeys(names)) or "any"


def _rule_of(schema: Mapping[str, Any], name: str) -> str:
    parts = []
    for option in schema.get("anyOf", [schema]):
        if "minimum" in option and "maximum" in option:
            parts.append(f"from {option['minimum']:g} to {option['maximum']:g}")
        elif "minimum" in option:
            parts.append(f">= {option['minimum']:g}")
        if "pattern" in option:
            parts.append(f"matches `{option['pattern']}`")
        if "maxLength" in option:
            parts.append(f"at most {option['maxLength']} characters")
    if name in SECRET_FIELDS:
        parts.append("a secret: set it with `pulumi config set --secret`; never shown in a message")
    return "; ".join(dict.fromkeys(parts))


def _field_schema(model: type[BaseModel], name: str) -> Mapping[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return dict(schema.get("properties", {}).get(name, {}))


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        made = info.default_factory()  # type: ignore[call-arg]
        if isinstance(made, BaseModel):
            return "(its keys' defaults)"
        return _code(made) if made not in ({}, []) else "none"
    if info.default is None or info.default is PydanticUndefined:
        return "none"
    return _code(info.default)


def rows(model: type[BaseModel] = StackModel, prefix: str = f"{PROJECT}:", section: str = "") -> Iterator[Row]:
    """Every key under `model`, depth first in the models' order."""
    for name, info in model.model_fields.items():
        key_name = info.alias or name
        key = f"{prefix}{key_name}" if prefix.endswith(":") else f"{prefix}.{key_name}"
        schema = _field_schema(model, key_name)
        inner = _unwrap(info.annotation)
        top = section or (key_name if key_name in OBJECT_KEYS else "top level")
        args = getattr(inner, "__args__", ())
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield Row(key, "object", _default(info), info.description or "", "", "", top)
            yield from rows(inner, key, top)
            continue
        element = _unwrap(args[-1]) if args else None
        if isinstance(element, type) and issubclass(element, BaseModel):
            below = f"{key}.{NAME_PARTS.get(key_name, '<name>')}" if "dict" in str(inner) else f"{key}[]"
            yield Row(key, "object of objects" if "dict" in str(inner) else "list of objects", _default(info),
                      info.description or "", "", "", top)
            yield Row(below, "object", "", " ".join((element.__doc__ or "").split()), "", "", top)
            yield from rows(element, below, top)
            continue
        example = _code(info.examples[0]) if info.examples else ""
        if key_name in SECRET_FIELDS:
            example = "(set with `--secret`)"
        yield Row(key, _type_of(schema), _default(info), info.description or "", example, _rule_of(schema, key_name),
                  top)
        if key_name == "scheduler_options":  # each scheduler's own, as its class describes them
            described: dict[str, list[tuple[str, str, str]]] = {}
            for cls in SCHEDULER_CLASSES.values():
                for option, (description, option_example) in cls.option_help.items():
                    described.setdefault(option, []).append((cls.label, description, option_example))
            for option, by in described.items():
                # An option more than one scheduler takes is one row, each one's meaning in it.
                text = " ".join(f"{label}: {meaning}" for label, meaning, _ in by)
                if len(by) == 1:
                    text = f"{by[0][0]} only. {by[0][1]}"
                yield Row(f"{key}.{option}", "text", "see description", text, _code(by[0][2]), "", top)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown() -> str:
    """docs/configuration.md as the models draw it."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- drawn from the models that validate a stack (infra/config_model.py) by "
        "`python -m infra.config_reference --write`; do not edit -->",
        "",
        "Every key of a stack file's `config:` that Atlas reads, under the `atlas:` namespace "
        "(`stacks/Pulumi.<stack>.yaml`). Set one with `pulumi config set --path atlas:openshift.namespace biggan` "
        "(a secret with `--secret`), or write it in the file. The same models validate the stack before "
        "`pulumi preview` creates anything, so this page is what the code accepts; the JSON Schema of the "
        "`atlas:` values is [atlas-config.schema.json](atlas-config.schema.json) (for an editor's YAML "
        "support).",
        "",
        "How a value is refused: one line, `<key>: <what is wrong>; <the fix>`, naming the full key "
        "(`atlas:openshift.storage.data.access_mode: the data volume must be ReadWriteMany; remove the key`), "
        "never a secret's value. Also refused, naming the key:",
        "",
        "- a key no model knows (`atlas:openshift.storage: unknown key(s) size; ... use one of: class, data, "
        "logs, results`), with the closest known key where one is close;",
        "- a template's or example's placeholder left in (a whole value `<...>`, or `REPLACE_WITH_...`): "
        "`atlas:openshift.namespace: still the template's placeholder <your OpenShift project>; set it with "
        "pulumi config set --path atlas:openshift.namespace ...`, before any other check;",
        "- a section with `enabled: false` is read no further (its placeholders stay unchecked);",
        "- `pulumi config set` stores scalars as text: `\"3\"` reads as a number and `\"true\"` as true.",
        "",
        "The sections: [the top-level keys](#the-top-level-keys), "
        + ", ".join(f"[`{PROJECT}:{n}`](#{PROJECT}{n.lower()})" for n in _sections() if n in OBJECT_KEYS) + ".",
    ]
    current = None
    for row in rows():
        if row.section != current:
            current = row.section
            if current == "top level":
                lines += ["", "## The top-level keys", "", "Scalars beside the sections (`atlas:workload`, ...).",
                          "", "| key | type | default | description | example | rule |",
                          "| --- | --- | --- | --- | --- | --- |"]
            else:
                lines += _section_head(current)
        lines.append("| " + " | ".join(_cell(c) for c in (
            f"`{row.key}`", row.type, row.default, row.description, row.example, row.rule)) + " |")
    return "\n".join(lines) + "\n"


def _section_head(current: str) -> list[str]:
    """A section's heading, what it is, and its table's header."""
    described = StackModel.model_fields[_python_name(current)]
    lines = ["", f"## `{PROJECT}:{current}`", "", described.description or ""]
    annotation = _unwrap(described.annotation)
    args = getattr(annotation, "__args__", ())
    model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else (
        _unwrap(args[-1]) if args else None)
    if isinstance(model, type) and issubclass(model, BaseModel) and model.__doc__:
        lines += ["", " ".join(model.__doc__.split())]
    lines += ["", "| key | type | default | description | example | rule |",
              "| --- | --- | --- | --- | --- | --- |"]
    return lines


def _sections() -> list[str]:
    return [info.alias or name for name, info in StackModel.model_fields.items()]


def _python_name(key: str) -> str:
    return next(name for name, info in StackModel.model_fields.items() if (info.alias or name) == key)


def render_schema() -> str:
    """docs/atlas-config.schema.json as the models draw it."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": "The atlas: values of a stack (keys without the prefix); drawn from infra/config_model.py by "
        "`python -m infra.config_reference --write`; do not edit.",
        **StackModel.model_json_schema(by_alias=True, mode="validation"),
    }
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write docs/configuration.md and the JSON Schema")
    args = parser.parse_args(argv)
    files = {MARKDOWN: render_markdown(), SCHEMA: render_schema()}
    if args.write:
        for path, text in files.items():
            path.write_text(text)
        return 0
    stale = [str(path.relative_to(ROOT)) for path, text in files.items()
             if not path.exists() or path.read_text() != text]
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m infra.config_reference --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
