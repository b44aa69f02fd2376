"""infra/schemas: the official OpenAPI documents kept in the repository are whole (every
reference resolves, every kind Atlas creates is there), say where they come from, and are what
their sources give."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra import schemas
from infra.schemas import regenerate
from infra.toolchain.pins import REPO_ROOT, load_pins


@pytest.mark.parametrize(
    ("path", "roots"),
    [(schemas.OPENSHIFT_DOCUMENT, schemas.OPENSHIFT_ROOTS), (schemas.KUBERNETES_DOCUMENT, schemas.KUBERNETES_ROOTS)],
    ids=["openshift", "kubernetes"],
)
def test_each_document_is_closed_under_its_references(path: Path, roots: tuple[str, ...]):
    definitions = schemas.load_document(path)["definitions"]
    assert set(roots) <= set(definitions)
    dangling = {
        ref for body in definitions.values() for ref in schemas.references(body) if ref not in definitions
    }
    assert dangling == set()
    # Nothing beyond what the roots reach: the cut is exactly the closure.
    assert schemas.closure(definitions, roots) == definitions


def test_the_openshift_document_is_the_pinned_commits():
    source = schemas.source_of(schemas.OPENSHIFT_DOCUMENT)
    pins = load_pins()
    assert (source["repository"], source["commit"], source["sha256"]) == (
        pins.openshift_api_repository, pins.openshift_api_commit, pins.openshift_api_sha256,
    )


def test_the_kubernetes_document_is_what_the_pinned_module_gives():
    """Regenerated from k8s.io/kubernetes at the pinned version (the module bootstrap builds the
    control plane from; `go mod download` reads the module cache or the Go module proxy)."""
    assert shutil.which("go"), "Go is needed (it builds the toolchain): install Go 1.26 or newer"
    source = schemas.source_of(schemas.KUBERNETES_DOCUMENT)
    assert source["version"] == f"v{load_pins().kubernetes}"
    proc = subprocess.run([sys.executable, "-m", "infra.schemas.regenerate", "--check"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kubernetes-openapi.json: up to date" in proc.stdout


def test_regeneration_refuses_a_file_that_is_not_the_pinned_commits(tmp_path: Path):
    other = tmp_path / "openapi.json"
    other.write_text(json.dumps({"swagger": "2.0", "definitions": {}}))
    with pytest.raises(schemas.SchemaDocumentError, match="not the pinned commit's"):
        regenerate.openshift_source(other, load_pins())


def test_a_cut_names_a_root_its_source_lacks():
    with pytest.raises(schemas.SchemaDocumentError, match=r"does not define io\.k8s\.api\.core\.v1\.Nope"):
        schemas.closure({"a": {}}, ["io.k8s.api.core.v1.Nope"])
    with pytest.raises(schemas.SchemaDocumentError, match="\\$ref to b"):
        schemas.closure({"a": {"properties": {"x": {"$ref": "#/definitions/b"}}}}, ["a"])


def test_render_writes_one_definition_per_line():
    source = {"swagger": "2.0", "info": {"title": "t", "version": "v"},
              "definitions": {"b": {"type": "string"}, "a": {"properties": {"x": {"$ref": "#/definitions/b"}}},
                              "unused": {"type": "integer"}}}
    text = regenerate.render(source, ["a"], {"sha256": "0"})
    assert json.loads(text)["definitions"] == {"a": source["definitions"]["a"], "b": {"type": "string"}}
    assert text.splitlines()[4:6] == [
        '"a": {"properties": {"x": {"$ref": "#/definitions/b"}}},',
        '"b": {"type": "string"}',
    ]
