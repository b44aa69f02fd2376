"""CustomResourceDefinitions for the OpenShift kinds the stacks create, for a plain API server.

On OpenShift, Project/ProjectRequest, ImageStream and BuildConfig/Build are served by
openshift-apiserver and no CRDs for them are published; the local cluster therefore gets
CRDs written here. Their schemas are converted from OpenShift's own OpenAPI document
(openshift/api `openapi/openapi.json` at the pinned commit, cut to the kinds Atlas creates and
kept in the repository: `infra/schemas/`), so that an object OpenShift would refuse for an
unknown or misspelled field is refused locally too: the API server prunes unknown fields
from a structural schema, and with `fieldValidation=Strict` (what server-side apply from
pulumi-kubernetes and `kubectl apply --server-side` use) pruning becomes an error.

Everything here is pure: the definitions come in, the rest is dict to dict.
What a CRD cannot express the way openshift-apiserver does it:
- nothing behind the objects runs: no namespace appears for a Project, no build runs for a
  BuildConfig, no host is filled in for a Route;
- openshift-apiserver applies its defaults in Go; the OpenAPI `default` values are zero-value
  markers, so they are dropped, and the few defaults OpenShift applies to fields its OpenAPI
  lists as required are added back (`_OPENSHIFT_DEFAULTS`), otherwise the local cluster would
  refuse objects that OpenShift accepts (a Route `to` without `kind`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from infra import schemas

Schema = dict[str, Any]

# Deep enough for every OpenShift type used here (the deepest path is about 9 refs); a guard
# against self-referencing definitions, which are cut with preserve-unknown-fields anyway.
MAX_REF_DEPTH = 24

_K8S_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
# The regular expression controller-gen puts on resource.Quantity fields.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_INT_OR_STRING: Schema = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
}
_PRESERVE: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

# Definitions whose OpenAPI form is not what a CRD needs: their wire format is custom JSON
# (IntOrString, Quantity, Time) or free-form (RawExtension, FieldsV1). ObjectMeta nested inside
# a kind (templates) is left open: the API server only validates metadata at the top level.
_SPECIAL_DEFINITIONS: dict[str, Schema] = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": _INT_OR_STRING,
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {**_INT_OR_STRING, "pattern": QUANTITY_PATTERN},
    _K8S_META + "Time": {"type": "string", "format": "date-time"},
    _K8S_META + "MicroTime": {"type": "string", "format": "date-time"},
    _K8S_META + "Duration": {"type": "string"},
    _K8S_META + "ObjectMeta": _PRESERVE,
    _K8S_META + "FieldsV1": _PRESERVE,
    "io.k8s.apimachinery.pkg.runtime.RawExtension": _PRESERVE,
}

# JSONSchemaProps keys kept from the OpenAPI document. Everything else is dropped: `$ref` is
# resolved, `default` is replaced (module docstring), and x-kubernetes-patch-*/unions are
# OpenAPI-only extensions that apiextensions v1 does not know (Strict CRD creation refuses them).
_KEPT_KEYS = frozenset({
    "description", "type", "format", "enum", "required", "items", "properties",
    "additionalProperties", "maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "maxProperties", "minProperties",
    "multipleOf", "nullable", "anyOf", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type", "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
})
# Formats the OpenAPI document uses only as a hint for its own generators.
_DROPPED_FORMATS = frozenset({"int-or-string"})

# Defaults openshift-apiserver applies (openshift/api route/v1 CRD manifests and the image
# defaulters) to fields the OpenAPI marks required; CRD defaults run before validation.
_OPENSHIFT_DEFAULTS: dict[tuple[str, str], Any] = {
    ("com.github.openshift.api.route.v1.RouteTargetReference", "kind"): "Service",
    ("com.github.openshift.api.route.v1.RouteTargetReference", "weight"): 100,
    ("com.github.openshift.api.route.v1.RouteSpec", "wildcardPolicy"): "None",
    ("com.github.openshift.api.image.v1.TagReferencePolicy", "type"): "Source",
    ("com.github.openshift.api.image.v1.ImageLookupPolicy", "local"): False,
}


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"

    def to_crd(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type, "jsonPath": self.json_path}


_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class OpenShiftKind:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status_subresource: bool
    short_names: tuple[str, ...] = ()
    # OpenShift lists these kinds under `oc get all`.
    categories: tuple[str, ...] = ()
    columns: tuple[PrinterColumn, ...] = field(default_factory=tuple)

    @property
    def definition(self) -> str:
        """The OpenAPI definition name, e.g. com.github.openshift.api.route.v1.Route."""
        return f"com.github.openshift.api.{self.group.split('.')[0]}.{self.version}.{self.kind}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


OPENSHIFT_KINDS: tuple[OpenShiftKind, ...] = (
    OpenShiftKind("project.openshift.io", "v1", "Project", "projects", namespaced=False,
                  status_subresource=False,
                  columns=(PrinterColumn("Status", ".status.phase"), _AGE)),
    OpenShiftKind("project.openshift.io", "v1", "ProjectRequest", "projectrequests", namespaced=False,
                  status_subresource=False, columns=(_AGE,)),
    OpenShiftKind("image.openshift.io", "v1", "ImageStream", "imagestreams", namespaced=True,
                  status_subresource=True, short_names=("is",), categories=("all",),
                  columns=(PrinterColumn("Image Repository", ".status.dockerImageRepository"), _AGE)),
    OpenShiftKind("build.openshift.io", "v1", "BuildConfig", "buildconfigs", namespaced=True,
                  status_subresource=True, short_names=("bc",), categories=("all",),
                  columns=(PrinterColumn("Type", ".spec.strategy.type"),
                           PrinterColumn("Latest", ".status.lastVersion", "integer"), _AGE)),
    OpenShiftKind("build.openshift.io", "v1", "Build", "builds", namespaced=True,
                  status_subresource=True, categories=("all",),
                  columns=(PrinterColumn("Type", ".spec.strategy.type"),
                           PrinterColumn("Status", ".status.phase"), _AGE)),
    OpenShiftKind("route.openshift.io", "v1", "Route", "routes", namespaced=True,
                  status_subresource=True, categories=("all",),
                  columns=(PrinterColumn("Host", ".spec.host"),
                           PrinterColumn("Services", ".spec.to.name"), _AGE)),
)


class SchemaConversionError(ValueError):
    """The OpenAPI document does not have what a CRD needs; the message names the definition."""


def structural_schema(
    node: Mapping[str, Any],
    definitions: Mapping[str, Schema],
    owner: str | None = None,
    stack: tuple[str, ...] = (),
) -> Schema:
    """Convert one OpenAPI schema node to a structural apiextensions v1 schema node.

    `owner` is the definition `node` belongs to (for `_OPENSHIFT_DEFAULTS`), `stack` the chain
    of definitions being expanded (a definition met again is a cycle, cut with
    preserve-unknown-fields, as is anything deeper than MAX_REF_DEPTH).
    """
    if "$ref" in node:
        try:
            name = schemas.ref_name(node["$ref"])
        except schemas.SchemaDocumentError as bad:
            raise SchemaConversionError(str(bad)) from None
        resolved = _resolve(name, definitions, stack)
        # A field's own description says more than its type's.
        if "description" in node:
            resolved = {**resolved, "description": node["description"]}
        return resolved
    # Swagger 2 allows a sibling-free `allOf: [{$ref}]` wrapper for documented refs.
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return structural_schema({**all_of[0], **{k: v for k, v in node.items() if k != "allOf"}},
                                 definitions, owner, stack)

    out: Schema = {}
    for key, value in node.items():
        if key not in _KEPT_KEYS:
            continue
        if key == "properties":
            out[key] = {
                name: _with_default(structural_schema(prop, definitions, owner, stack), owner, name)
                for name, prop in value.items()
            }
        elif key == "items":
            if not isinstance(value, dict):
                raise SchemaConversionError(f"{owner}: tuple-typed `items` cannot be structural")
            out[key] = structural_schema(value, definitions, owner, stack)
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out[key] = structural_schema(value, definitions, owner, stack)
            # `additionalProperties: false` is forbidden in v1 and is the default anyway.
        elif key == "format" and value in _DROPPED_FORMATS:
            continue
        else:
            out[key] = value
    return _typed(out)


def _resolve(name: str, definitions: Mapping[str, Schema], stack: tuple[str, ...]) -> Schema:
    if name in _SPECIAL_DEFINITIONS:
        return dict(_SPECIAL_DEFINITIONS[name])
    if name in stack or len(stack) >= MAX_REF_DEPTH:
        return dict(_PRESERVE)
    if name not in definitions:
        raise SchemaConversionError(f"$ref to {name}, which the OpenAPI document does not define")
    return structural_schema(definitions[name], definitions, name, (*stack, name))


def _with_default(schema: Schema, owner: str | None, prop: str) -> Schema:
    if owner is None or (owner, prop) not in _OPENSHIFT_DEFAULTS:
        return schema
    return {**schema, "default": _OPENSHIFT_DEFAULTS[(owner, prop)]}


def _typed(schema: Schema) -> Schema:
    """Give a node the `type` a structural schema needs, inferring it where OpenAPI left it out."""
    if "type" in schema or schema.get("x-kubernetes-int-or-string") or schema.get(
        "x-kubernetes-preserve-unknown-fields"
    ):
        pass
    elif "properties" in schema or "additionalProperties" in schema:
        schema["type"] = "object"
    elif "items" in schema:
        schema["type"] = "array"
    else:
        # OpenAPI says nothing about the shape: keep whatever is sent rather than pruning it.
        schema.update(_PRESERVE)
    if (schema.get("type") == "object" and "properties" not in schema
            and "additionalProperties" not in schema):
        # An object with no declared fields would have every field pruned: openapi-gen emits
        # that for types it cannot describe, so keep their content.
        schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


def kind_schema(kind: OpenShiftKind, definitions: Mapping[str, Schema]) -> Schema:
    """The openAPIV3Schema of one kind: its definition converted, metadata left to the server."""
    if kind.definition not in definitions:
        raise SchemaConversionError(f"{kind.definition} is not in the OpenAPI document")
    schema = structural_schema(definitions[kind.definition], definitions, kind.definition, (kind.definition,))
    properties = schema.setdefault("properties", {})
    # The API server validates ObjectMeta itself; a CRD may only say `type: object` here.
    properties["metadata"] = {"type": "object"}
    for key in ("apiVersion", "kind"):
        properties.setdefault(key, {"type": "string"})
    return schema


def crd_for(kind: OpenShiftKind, definitions: Mapping[str, Schema]) -> dict[str, Any]:
    names: dict[str, Any] = {
        "kind": kind.kind,
        "listKind": f"{kind.kind}List",
        "plural": kind.plural,
        "singular": kind.kind.lower(),
    }
    if kind.short_names:
        names["shortNames"] = list(kind.short_names)
    if kind.categories:
        names["categories"] = list(kind.categories)
    version: dict[str, Any] = {
        "name": kind.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": kind_schema(kind, definitions)},
    }
    if kind.status_subresource:
        version["subresources"] = {"status": {}}
    if kind.columns:
        version["additionalPrinterColumns"] = [c.to_crd() for c in kind.columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {"app.kubernetes.io/part-of": "atlas", "app.kubernetes.io/component": "localenv"},
            "annotations": {"atlas.dev/source": f"openshift/api openapi.json {kind.definition}"},
        },
        "spec": {
            "group": kind.group,
            "names": names,
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": [version],
        },
    }


def openshift_crds(
    definitions: Mapping[str, Schema] | None = None, kinds: Iterable[OpenShiftKind] = OPENSHIFT_KINDS
) -> list[dict[str, Any]]:
    """CRDs for the OpenShift kinds, with schemas converted from OpenShift's OpenAPI document
    (by default the repository's cut of it, `infra.schemas`)."""
    if definitions is None:
        definitions = schemas.openshift_definitions()
    crds = [crd_for(kind, definitions) for kind in kinds]
    problems = [p for crd in crds for p in crd_problems(crd)]
    if problems:
        raise SchemaConversionError("converted CRDs are not valid:\n" + "\n".join(problems))
    return crds


def crds_yaml(crds: Iterable[Mapping[str, Any]]) -> str:
    """The CRDs as one multi-document YAML text (for `kubectl apply --server-side -f`)."""
    return yaml.safe_dump_all([dict(c) for c in crds], sort_keys=False)


# --- What the API server checks when a CRD is created (apiextensions-apiserver
# pkg/apiserver/schema/validation.go and pkg/apis/apiextensions/validation), as far as these
# converted schemas can get it wrong.

_FORBIDDEN_KEYS = frozenset({
    "$ref", "definitions", "id", "$schema", "patternProperties", "dependencies", "additionalItems",
    "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-unions",
})


def structural_problems(schema: Mapping[str, Any], path: str = "openAPIV3Schema",
                        level: str = "root") -> list[str]:
    """Why `schema` is not an acceptable structural apiextensions v1 schema (empty: it is)."""
    problems: list[str] = []
    for key in sorted(set(schema) & _FORBIDDEN_KEYS):
        problems.append(f"{path}: {key} is not allowed in a CRD schema")
    if schema.get("uniqueItems") is True:
        problems.append(f"{path}: uniqueItems cannot be true")
    if schema.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties: false is not allowed")
    int_or_string = bool(schema.get("x-kubernetes-int-or-string"))
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if "type" not in schema and not int_or_string and not preserve:
        problems.append(f"{path}: no type (required at {level} level)")
    if int_or_string and preserve:
        problems.append(f"{path}: int-or-string and preserve-unknown-fields exclude each other")
    if int_or_string and "type" in schema:
        problems.append(f"{path}: int-or-string must not have a type")
    if "anyOf" in schema and schema["anyOf"] != [{"type": "integer"}, {"type": "string"}]:
        problems.append(f"{path}: anyOf other than the int-or-string pattern")
    if level == "root":
        if schema.get("type") != "object":
            problems.append(f"{path}: the root must be type object")
        if "additionalProperties" in schema:
            problems.append(f"{path}: additionalProperties is not allowed at the root")
        metadata = schema.get("properties", {}).get("metadata")
        if metadata is not None and metadata != {"type": "object"}:
            problems.append(f"{path}.properties.metadata: must be just type object at the root")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: properties and additionalProperties exclude each other")
    if schema.get("type") == "array" and "items" not in schema:
        problems.append(f"{path}: an array needs items")
    problems += _list_type_problems(schema, path)
    for name, prop in schema.get("properties", {}).items():
        problems += structural_problems(prop, f"{path}.properties.{name}", "field")
    if isinstance(schema.get("items"), dict):
        problems += structural_problems(schema["items"], f"{path}.items", "item")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(
            schema["additionalProperties"], f"{path}.additionalProperties", "field"
        )
    return problems


def _list_type_problems(schema: Mapping[str, Any], path: str) -> list[str]:
    list_type = schema.get("x-kubernetes-list-type")
    if list_type is None:
        if "x-kubernetes-list-map-keys" in schema:
            return [f"{path}: list-map-keys without list-type map"]
        return []
    if list_type not in ("atomic", "set", "map"):
        return [f"{path}: unknown x-kubernetes-list-type {list_type!r}"]
    items = schema.get("items", {})
    scalar = items.get("type") in ("string", "integer", "number", "boolean")
    if list_type == "set" and not scalar and items.get("x-kubernetes-map-type") != "atomic":
        return [f"{path}: a set's items must be scalar or atomic"]
    if list_type != "map":
        return []
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if not keys:
        return [f"{path}: list-type map needs x-kubernetes-list-map-keys"]
    problems = []
    required = set(items.get("required", []))
    for key in keys:
        prop = items.get("properties", {}).get(key)
        if prop is None:
            problems.append(f"{path}: map key {key} is not a property of the items")
        elif key not in required and "default" not in prop:
            problems.append(f"{path}: map key {key} must be required or have a default")
    return problems


def crd_problems(crd: Mapping[str, Any]) -> list[str]:
    name = crd.get("metadata", {}).get("name", "?")
    spec = crd["spec"]
    problems = []
    if name != f"{spec['names']['plural']}.{spec['group']}":
        problems.append(f"{name}: the name must be <plural>.<group>")
    for version in spec["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        problems += [f"{name} {version['name']}: {p}" for p in structural_problems(schema)]
    return problems


# --- Checking objects against a converted schema, the way the API server's Strict field
# validation and schema validation would (a subset: no formats, patterns or CEL rules). For tests:
# the objects the stacks render can be checked against OpenShift's schema without a cluster.

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _type_ok(schema: Mapping[str, Any], value: Any) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, int | str) and not isinstance(value, bool)
    expected = schema.get("type")
    if expected is None:
        return True
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    return isinstance(value, _JSON_TYPES[expected])


def schema_violations(schema: Mapping[str, Any], value: Any, path: str = "") -> list[str]:
    """What the API server would refuse in `value` (a whole object when `path` is empty):
    unknown fields, wrong types, missing required fields (unless defaulted), values outside an
    enum. Top-level metadata is the server's business and is not looked into."""
    where = path or "<root>"
    if value is None:
        # Nulls in non-nullable fields are pruned by the API server, not refused.
        return []
    if not _type_ok(schema, value):
        return [f"{where}: expected {schema.get('type', 'int-or-string')}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    problems: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        open_object = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for name in schema.get("required", []):
            if name not in value and "default" not in properties.get(name, {}):
                problems.append(f"{path + '.' if path else ''}{name}: required")
        for key, item in value.items():
            child = f"{path}.{key}" if path else key
            if not path and key == "metadata":
                continue
            if key in properties:
                problems += schema_violations(properties[key], item, child)
            elif isinstance(additional, dict):
                problems += schema_violations(additional, item, child)
            elif not open_object:
                problems.append(f'{child}: unknown field "{key}"')
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += schema_violations(schema["items"], item, f"{path}[{i}]")
    return problems
