"""Every object the openshift-gpu configuration creates validates against OpenShift's official
OpenAPI document (openshift/api's openapi.json at the pinned commit, cut to the kinds Atlas
creates: infra/schemas/): OpenShift's own kinds and the Kubernetes kinds the document carries
(core/v1). A field name OpenShift does not know is a bug no local cluster shows.

The document has no batch/v1, apps/v1 or networking.k8s.io/v1 definitions. For Job and
Deployment the pod template is checked against the document's core/v1 PodTemplateSpec, and
the whole object against Kubernetes' own OpenAPI document (k8s.io/kubernetes's
api/openapi-spec/swagger.json at the pinned version, cut likewise).

The objects are the inputs the engine receives under Pulumi mocks, so what is checked is
what the provider sends. Checking uses localenv.crds (schema conversion and
`schema_violations`), the same code that builds the local cluster's OpenShift CRDs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pytest

from infra import schemas
from infra.openshift.environment import OpenShiftEnvironment, OpenShiftEnvironmentArgs
from infra.openshift.settings_parser import parse_openshift_settings
from localenv import crds
from tests.unit.openshift_fixtures import (
    KEY,
    RecordingMonitor,
    biggan,
    example_settings,
    install_mocks,
    local_raw,
    target_for,
)
from tests.unit.openshift_fixtures import Registered as RegisteredObject

# apiVersion group -> the definition-name prefix in the OpenAPI documents.
GROUP_PREFIXES = {
    "": "io.k8s.api.core",
    "batch": "io.k8s.api.batch",
    "apps": "io.k8s.api.apps",
    "networking.k8s.io": "io.k8s.api.networking",
}
POD_TEMPLATE = "io.k8s.api.core.v1.PodTemplateSpec"


def definition_name(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    if group.endswith(".openshift.io"):
        return f"com.github.openshift.api.{group.split('.')[0]}.{version}.{kind}"
    return f"{GROUP_PREFIXES[group]}.{version}.{kind}"


class SchemaBook:
    """Converted schemas by definition name, from OpenShift's document and optionally Kubernetes'."""

    def __init__(self, openshift: schemas.Definitions, kubernetes: schemas.Definitions) -> None:
        self.openshift = openshift
        self.kubernetes = kubernetes
        self._cache: dict[tuple[str, str], crds.Schema] = {}

    def schema(self, name: str, source: str) -> crds.Schema | None:
        definitions = self.openshift if source == "openshift" else self.kubernetes
        if name not in definitions:
            return None
        key = (source, name)
        if key not in self._cache:
            self._cache[key] = crds.structural_schema(definitions[name], definitions, name, (name,))
        return self._cache[key]


@pytest.fixture(scope="module")
def book() -> SchemaBook:
    return SchemaBook(schemas.openshift_definitions(), schemas.kubernetes_definitions())


def objects_of(monitor: RecordingMonitor) -> list[RegisteredObject]:
    return [r for r in monitor.registered if r.typ.startswith("kubernetes:") and r.kind]


def violations(book: SchemaBook, obj: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, what it was checked against): the whole object against OpenShift's document
    where it has the kind, else its pod template there and the whole object against Kubernetes'."""
    name = definition_name(obj["apiVersion"], obj["kind"])
    whole = book.schema(name, "openshift")
    if whole is not None:
        return crds.schema_violations(whole, obj), [f"openshift:{name}"]
    problems: list[str] = []
    checked: list[str] = []
    template = obj.get("spec", {}).get("template")
    if template is not None:
        pod_schema = book.schema(POD_TEMPLATE, "openshift")
        assert pod_schema is not None
        problems += [f"spec.template.{p}" for p in crds.schema_violations(pod_schema, template, "")]
        checked.append(f"openshift:{POD_TEMPLATE}")
    kubernetes_schema = book.schema(name, "kubernetes")
    if kubernetes_schema is not None:
        problems += crds.schema_violations(kubernetes_schema, obj)
        checked.append(f"kubernetes:{name}")
    return problems, checked


def run_program(settings_raw: dict[str, Any] | None, stack: str) -> tuple[RecordingMonitor, OpenShiftEnvironment]:
    monitor = install_mocks()
    settings = example_settings() if settings_raw is None else parse_openshift_settings(settings_raw, KEY)
    env = OpenShiftEnvironment(
        "openshift",
        OpenShiftEnvironmentArgs(
            target=target_for(settings), stack=stack, workload="biggan", definition=biggan(), settings=settings
        ),
    )
    return monitor, env


@pulumi.runtime.test
def test_every_openshift_gpu_object_validates_against_the_official_schema(book: SchemaBook):
    monitor, env = run_program(None, "openshift-gpu")

    def check(_: Any) -> None:
        objects = objects_of(monitor)
        kinds = {o.kind for o in objects}
        # OpenShift's own kinds and Kubernetes' are both there.
        assert {"ProjectRequest", "ImageStream", "BuildConfig", "Route"} <= kinds
        assert {
            "ResourceQuota",
            "LimitRange",
            "ServiceAccount",
            "PersistentVolumeClaim",
            "ConfigMap",
            "Service",
            "NetworkPolicy",
        } <= kinds
        report = {}
        for obj in objects:
            problems, checked = violations(book, obj.inputs)
            assert checked, f"{obj.name}: {obj.kind} was checked against nothing"
            if problems:
                report[obj.name] = problems
        assert report == {}

    return env.outputs.apply(check)


@pulumi.runtime.test
def test_the_local_configurations_objects_validate_too(book: SchemaBook):
    monitor, env = run_program(local_raw(), "local")

    def check(_: Any) -> None:
        report = {}
        objects = objects_of(monitor)
        assert {"Deployment", "Job", "NetworkPolicy", "PersistentVolumeClaim"} <= {o.kind for o in objects}
        for obj in objects:
            problems, checked = violations(book, obj.inputs)
            assert checked, obj.name
            if problems:
                report[obj.name] = problems
        assert report == {}

    return env.outputs.apply(check)


def test_the_check_catches_a_misspelt_field_in_each_kind_of_object(book: SchemaBook):
    # The negative control: without it, a checker that accepts anything would pass the tests above.
    route = {
        "apiVersion": "route.openshift.io/v1",
        "kind": "Route",
        "metadata": {},
        "spec": {"to": {"kind": "Service", "name": "m", "weight": 100}, "tls": {"terminaton": "edge"}},
    }
    assert 'spec.tls.terminaton: unknown field "terminaton"' in violations(book, route)[0]
    build = {
        "apiVersion": "build.openshift.io/v1",
        "kind": "BuildConfig",
        "metadata": {},
        "spec": {"strategy": {"type": "Docker", "dockerStrategy": {"dockerFilePath": "x"}}},
    }
    assert any("dockerFilePath" in p for p in violations(book, build)[0])
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {},
        "spec": {"accessMode": ["ReadWriteMany"]},
    }
    assert violations(book, claim)[0] == ['spec.accessMode: unknown field "accessMode"']
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "resource": {}}]}}},
    }
    assert 'spec.template.spec.containers[0].resource: unknown field "resource"' in violations(book, job)[0]
    request = {"apiVersion": "project.openshift.io/v1", "kind": "ProjectRequest", "metadata": {}, "displayname": "x"}
    assert violations(book, request)[0] == ['displayname: unknown field "displayname"']
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {},
        "spec": {"podSelector": {}, "policyType": ["Ingress"]},
    }
    assert violations(book, policy)[0] == ['spec.policyType: unknown field "policyType"']


def test_the_batch_apps_and_networking_kinds_are_checked_whole():
    book = SchemaBook(schemas.openshift_definitions(), schemas.kubernetes_definitions())
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": {"template": {"spec": {"containers": []}}}}
    _, checked = violations(book, job)
    assert checked == [f"openshift:{POD_TEMPLATE}", "kubernetes:io.k8s.api.batch.v1.Job"]
    # A misspelt field outside the pod template is caught by Kubernetes' document.
    job["spec"]["backofLimit"] = 2
    assert 'spec.backofLimit: unknown field "backofLimit"' in violations(book, job)[0]
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {}, "spec": {"rule": []}}
    assert violations(book, ingress) == (['spec.rule: unknown field "rule"'],
                                         ["kubernetes:io.k8s.api.networking.v1.Ingress"])
