"""localenv/crds.py: OpenShift CRDs converted from OpenShift's OpenAPI document (the
repository's cut of it, infra/schemas/) are structural, keep OpenShift's field names, and refuse
misspelled fields."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from infra import schemas
from localenv import crds


@pytest.fixture(scope="module")
def definitions() -> dict[str, Any]:
    return schemas.openshift_definitions()


@pytest.fixture(scope="module")
def by_kind() -> dict[str, dict[str, Any]]:
    return {c["spec"]["names"]["kind"]: c for c in crds.openshift_crds()}


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def spec_props(crd: dict[str, Any]) -> set[str]:
    return set(schema_of(crd)["properties"]["spec"]["properties"])


def walk(node: Any) -> Any:
    """Every dict and list in a nested structure."""
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        yield from walk(child)


# --- Shape of the CRDs


def test_the_six_kinds_with_openshift_names_and_scope(by_kind):
    assert sorted(c["metadata"]["name"] for c in by_kind.values()) == [
        "buildconfigs.build.openshift.io", "builds.build.openshift.io", "imagestreams.image.openshift.io",
        "projectrequests.project.openshift.io", "projects.project.openshift.io", "routes.route.openshift.io",
    ]
    scopes = {kind: c["spec"]["scope"] for kind, c in by_kind.items()}
    assert scopes == {"Project": "Cluster", "ProjectRequest": "Cluster", "ImageStream": "Namespaced",
                      "BuildConfig": "Namespaced", "Build": "Namespaced", "Route": "Namespaced"}
    assert by_kind["ImageStream"]["spec"]["names"]["shortNames"] == ["is"]
    assert by_kind["BuildConfig"]["spec"]["names"]["shortNames"] == ["bc"]
    for crd in by_kind.values():
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1" and version["served"] and version["storage"]


def test_status_subresource_where_openshift_has_one(by_kind):
    with_status = {k for k, c in by_kind.items() if "subresources" in c["spec"]["versions"][0]}
    assert with_status == {"ImageStream", "BuildConfig", "Build", "Route"}
    assert by_kind["Route"]["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_every_crd_is_structural(by_kind):
    for kind, crd in by_kind.items():
        assert crds.crd_problems(crd) == [], kind


def test_no_openapi_leftovers(by_kind):
    text = json.dumps(list(by_kind.values()))
    for leftover in ("$ref", "#/definitions", "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key",
                     "x-kubernetes-unions", '"int-or-string"'):
        assert leftover not in text, leftover


def test_every_node_is_typed_or_an_allowed_exception(by_kind):
    # Independent of crds.structural_problems: follow properties/items/additionalProperties.
    def nodes(schema: dict[str, Any], path: str):
        yield path, schema
        for name, prop in schema.get("properties", {}).items():
            yield from nodes(prop, f"{path}.{name}")
        if isinstance(schema.get("items"), dict):
            yield from nodes(schema["items"], f"{path}[]")
        if isinstance(schema.get("additionalProperties"), dict):
            yield from nodes(schema["additionalProperties"], f"{path}{{}}")

    for kind, crd in by_kind.items():
        count = 0
        for path, node in nodes(schema_of(crd), kind):
            count += 1
            assert ("type" in node or node.get("x-kubernetes-int-or-string")
                    or node.get("x-kubernetes-preserve-unknown-fields")), path
            assert not ("properties" in node and "additionalProperties" in node), path
        assert count > 5, kind


def test_top_level_metadata_is_left_to_the_server(by_kind):
    for crd in by_kind.values():
        props = schema_of(crd)["properties"]
        assert props["metadata"] == {"type": "object"}
        assert props["apiVersion"]["type"] == props["kind"]["type"] == "string"


def test_printer_columns_are_few_and_end_with_age(by_kind):
    for crd in by_kind.values():
        columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        assert 1 <= len(columns) <= 3
        assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


# --- Field names come from OpenShift's definitions


def test_buildconfig_and_route_spec_fields(by_kind):
    assert {"strategy", "source", "output", "triggers", "runPolicy"} <= spec_props(by_kind["BuildConfig"])
    assert {"host", "to", "port", "tls"} <= spec_props(by_kind["Route"])
    assert {"tags", "lookupPolicy"} <= spec_props(by_kind["ImageStream"])
    assert {"displayName", "description"} <= set(schema_of(by_kind["ProjectRequest"])["properties"])


@pytest.mark.parametrize("kind", [k.kind for k in crds.OPENSHIFT_KINDS])
def test_properties_match_the_openapi_definition(kind, by_kind, definitions):
    (meta,) = [k for k in crds.OPENSHIFT_KINDS if k.kind == kind]
    definition = definitions[meta.definition]
    schema = schema_of(by_kind[kind])
    assert set(schema["properties"]) == set(definition["properties"])
    for part in ("spec", "status"):
        if part not in definition["properties"]:
            continue
        ref = definition["properties"][part]["$ref"].split("/")[-1]
        assert set(schema["properties"][part]["properties"]) == set(definitions[ref]["properties"]), part


def test_nested_definitions_are_resolved(by_kind):
    strategy = schema_of(by_kind["BuildConfig"])["properties"]["spec"]["properties"]["strategy"]["properties"]
    assert {"type", "dockerStrategy", "sourceStrategy", "customStrategy"} <= set(strategy)
    env_item = strategy["sourceStrategy"]["properties"]["env"]["items"]
    assert {"name", "value", "valueFrom"} <= set(env_item["properties"])
    assert env_item["required"] == ["name"]


def test_special_kubernetes_types(by_kind):
    bc_spec = schema_of(by_kind["BuildConfig"])["properties"]["spec"]["properties"]
    limits = bc_spec["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True
    assert limits["pattern"] == crds.QUANTITY_PATTERN
    assert "type" not in limits
    route_spec = schema_of(by_kind["Route"])["properties"]["spec"]["properties"]
    target_port = route_spec["port"]["properties"]["targetPort"]
    assert target_port["x-kubernetes-int-or-string"] is True
    build_status = schema_of(by_kind["Build"])["properties"]["status"]["properties"]
    assert build_status["startTimestamp"]["type"] == "string"
    assert build_status["startTimestamp"]["format"] == "date-time"


def test_openapi_zero_defaults_dropped_and_openshift_defaults_added(by_kind):
    route = schema_of(by_kind["Route"])["properties"]["spec"]["properties"]
    assert route["to"]["properties"]["kind"]["default"] == "Service"
    assert route["to"]["properties"]["weight"]["default"] == 100
    defaults = [n["default"] for n in walk(list(by_kind.values())) if isinstance(n, dict) and "default" in n]
    expected = [False, "None", "Service", 100, "Service", 100, "Source"]
    assert sorted(map(str, defaults)) == sorted(map(str, expected))


# --- The point of it all: what OpenShift refuses is refused here


ROUTE = {
    "apiVersion": "route.openshift.io/v1", "kind": "Route",
    "metadata": {"name": "tensorboard", "namespace": "atlas", "labels": {"app": "biggan"}},
    "spec": {"to": {"kind": "Service", "name": "tensorboard", "weight": 100},
             "port": {"targetPort": "http"}, "tls": {"termination": "edge",
                                                     "insecureEdgeTerminationPolicy": "Redirect"}},
}
BUILD_CONFIG = {
    "apiVersion": "build.openshift.io/v1", "kind": "BuildConfig",
    "metadata": {"name": "biggan"},
    "spec": {
        "runPolicy": "Serial",
        "source": {"type": "Git", "contextDir": ".",
                   "git": {"uri": "https://github.com/ajbrock/BigGAN-PyTorch", "ref": "master"}},
        "strategy": {"type": "Docker", "dockerStrategy": {
            "dockerfilePath": "Dockerfile", "env": [{"name": "CUDA", "value": "11.8"}],
            "from": {"kind": "DockerImage", "name": "pytorch/pytorch:2.1.0-cuda11.8-cudnn8-runtime"}}},
        "output": {"to": {"kind": "ImageStreamTag", "name": "biggan:latest"}},
        "triggers": [{"type": "ConfigChange"}, {"type": "ImageChange", "imageChange": {}}],
        "resources": {"limits": {"cpu": 2, "memory": "8Gi"}},
    },
}
IMAGE_STREAM = {"apiVersion": "image.openshift.io/v1", "kind": "ImageStream", "metadata": {"name": "biggan"},
                "spec": {"lookupPolicy": {"local": True},
                         "tags": [{"name": "latest", "from": {"kind": "DockerImage", "name": "x/y:1"},
                                   "referencePolicy": {"type": "Local"}}]}}
PROJECT_REQUEST = {"apiVersion": "project.openshift.io/v1", "kind": "ProjectRequest",
                   "metadata": {"name": "atlas"}, "displayName": "Atlas", "description": "BigGAN"}


@pytest.mark.parametrize(("kind", "obj"), [
    ("Route", ROUTE), ("BuildConfig", BUILD_CONFIG), ("ImageStream", IMAGE_STREAM),
    ("ProjectRequest", PROJECT_REQUEST),
])
def test_valid_objects_pass(kind, obj, by_kind):
    assert crds.schema_violations(schema_of(by_kind[kind]), obj) == []


def with_change(obj: dict[str, Any], path: list[Any], value: Any = None, *, rename: str | None = None):
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    if rename is not None:
        node[rename] = node.pop(path[-1])
    else:
        node[path[-1]] = value
    return out


@pytest.mark.parametrize(("kind", "obj", "path", "rename", "expected"), [
    ("Route", ROUTE, ["spec", "to"], "too", 'spec.too: unknown field "too"'),
    ("Route", ROUTE, ["spec", "tls", "termination"], "terminaton", 'spec.tls.terminaton: unknown field'),
    ("BuildConfig", BUILD_CONFIG, ["spec", "runPolicy"], "runpolicy", 'spec.runpolicy: unknown field'),
    ("BuildConfig", BUILD_CONFIG, ["spec", "strategy", "dockerStrategy", "env", 0, "value"], "valeu",
     "spec.strategy.dockerStrategy.env[0].valeu: unknown field"),
    ("ImageStream", IMAGE_STREAM, ["spec", "tags", 0, "referencePolicy"], "refPolicy", "refPolicy: unknown"),
    ("ProjectRequest", PROJECT_REQUEST, ["displayName"], "display_name", 'display_name: unknown field'),
])
def test_misspelled_fields_are_refused(kind, obj, path, rename, expected, by_kind):
    problems = crds.schema_violations(schema_of(by_kind[kind]), with_change(obj, path, rename=rename))
    assert any(expected in p for p in problems), problems


def test_types_and_required_fields_are_checked(by_kind):
    route = schema_of(by_kind["Route"])
    assert crds.schema_violations(route, with_change(ROUTE, ["spec", "port", "targetPort"], 8080)) == []
    assert crds.schema_violations(route, with_change(ROUTE, ["spec", "port", "targetPort"], True))
    assert "spec.to: required" in crds.schema_violations(route, {**ROUTE, "spec": {"host": "x"}})
    # OpenShift defaults `to.kind` to Service: leaving it out is fine there, and here.
    assert crds.schema_violations(route, with_change(ROUTE, ["spec", "to"], {"name": "svc"})) == []
    assert crds.schema_violations(schema_of(by_kind["BuildConfig"]), {**BUILD_CONFIG, "spec": {}}) == [
        "spec.strategy: required"
    ]


# --- The conversion itself, on small synthetic documents


def test_self_reference_is_cut_with_preserve_unknown_fields():
    definitions = {
        "a.Node": {"type": "object", "properties": {
            "name": {"type": "string"}, "child": {"$ref": "#/definitions/a.Node"},
            "children": {"type": "array", "items": {"$ref": "#/definitions/a.Node"}}}},
    }
    schema = crds.structural_schema(definitions["a.Node"], definitions, "a.Node", ("a.Node",))
    assert schema["properties"]["child"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert schema["properties"]["children"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    assert crds.structural_problems(schema) == []


def test_untyped_and_shapeless_nodes_become_open_objects():
    definitions = {"a.Free": {"description": "anything"}, "a.Empty": {"type": "object"}}
    node = {"type": "object", "properties": {
        "free": {"$ref": "#/definitions/a.Free"},
        "empty": {"$ref": "#/definitions/a.Empty"},
        "raw": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.runtime.RawExtension"},
        "meta": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
        "inferred": {"properties": {"x": {"type": "string"}}},
    }}
    schema = crds.structural_schema(node, definitions)
    for name in ("free", "empty", "raw", "meta"):
        assert schema["properties"][name]["x-kubernetes-preserve-unknown-fields"] is True, name
    assert schema["properties"]["inferred"]["type"] == "object"
    assert crds.structural_problems(schema) == []


def test_a_missing_definition_is_an_error():
    with pytest.raises(crds.SchemaConversionError, match=r"a\.Missing"):
        crds.structural_schema({"$ref": "#/definitions/a.Missing"}, {})


def test_the_checker_finds_what_the_api_server_refuses():
    bad = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"x": {"type": "string"}}},
            "untyped": {"description": "no type"},
            "ref": {"$ref": "#/definitions/x"},
            "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "list": {"type": "array"},
            "mapList": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                        "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "ios": {"x-kubernetes-int-or-string": True, "x-kubernetes-preserve-unknown-fields": True},
            "unique": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
    }
    problems = "\n".join(crds.structural_problems(bad))
    for expected in ("metadata: must be just type object", "untyped: no type", "ref: $ref is not allowed",
                     "both: properties and additionalProperties", "list: an array needs items",
                     "map key k must be required or have a default", "ios: int-or-string and preserve",
                     "unique: uniqueItems"):
        assert expected in problems, expected


def test_crds_yaml_is_multi_document(by_kind):
    docs = list(yaml.safe_load_all(crds.crds_yaml(by_kind.values())))
    assert docs == list(by_kind.values())
