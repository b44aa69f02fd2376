"""Rewrite the committed schema documents from their sources: `python -m infra.schemas.regenerate`.

    python -m infra.schemas.regenerate --openshift-api ~/src/openshift-api   # a clone of openshift/api
    python -m infra.schemas.regenerate --openshift-api openapi.json          # or the file itself
    python -m infra.schemas.regenerate --check ...                           # compare, write nothing

OpenShift's document comes from openshift/api at the commit pinned in toolchain/pins.toml
(`[openshift_api]`): from a clone, `git show <commit>:openapi/openapi.json`; from a file, only
when its sha256 is the one recorded in that section (the file cannot say its commit). The Go
module proxy does not serve github.com/openshift/api at that commit, which is why the cut is
committed. Kubernetes' document comes from the pinned `k8s.io/kubernetes` module
(`go mod download`, the same module `scripts/bootstrap` builds the control plane from), or
from `--kubernetes-openapi FILE`.

Each output keeps only the definitions reachable from the roots in infra/schemas/__init__.py,
written one definition per line so that a regeneration's diff reads definition by definition.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from infra.schemas import (
    KUBERNETES_DOCUMENT,
    KUBERNETES_ROOTS,
    OPENSHIFT_DOCUMENT,
    OPENSHIFT_ROOTS,
    SchemaDocumentError,
    closure,
)
from infra.toolchain.go import BuildStepFailed, download_module
from infra.toolchain.pins import Pins, load_pins

OPENSHIFT_PATH_IN_REPO = "openapi/openapi.json"
KUBERNETES_PATH_IN_MODULE = "api/openapi-spec/swagger.json"
REGENERATE = "python -m infra.schemas.regenerate"


def render(source: dict[str, Any], roots: Iterable[str], provenance: dict[str, Any]) -> str:
    """The cut document as text: a Swagger 2 header, then one definition per line."""
    definitions = closure(source["definitions"], roots)
    info = {
        "title": source.get("info", {}).get("title", ""),
        "version": source.get("info", {}).get("version", ""),
        "x-atlas-source": provenance,
    }
    lines = [
        "{",
        f'"swagger": {json.dumps(source.get("swagger", "2.0"))},',
        f'"info": {json.dumps(info, sort_keys=True)},',
        '"definitions": {',
        ",\n".join(f"{json.dumps(name)}: {json.dumps(body, sort_keys=True)}" for name, body in definitions.items()),
        "}",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def openshift_source(path: Path, pins: Pins) -> bytes:
    """The pinned commit's openapi.json from a clone of openshift/api or from the file itself."""
    commit = pins.openshift_api_commit
    if path.is_dir():
        proc = subprocess.run(
            ["git", "-C", str(path), "show", f"{commit}:{OPENSHIFT_PATH_IN_REPO}"],
            capture_output=True, check=False,
        )
        if proc.returncode != 0:
            raise SchemaDocumentError(
                f"{path}: `git show {commit}:{OPENSHIFT_PATH_IN_REPO}` failed: {proc.stderr.decode().strip()} "
                "(is it a clone of openshift/api with that commit? `git fetch` it)"
            )
        return proc.stdout
    data = path.read_bytes()
    if _sha256(data) != pins.openshift_api_sha256:
        raise SchemaDocumentError(
            f"{path}: sha256 {_sha256(data)} is not the pinned commit's ({pins.openshift_api_sha256}); "
            "pass a clone of openshift/api instead, or move the pin in toolchain/pins.toml "
            "(commit and sha256 together)"
        )
    return data


def kubernetes_source(pins: Pins) -> bytes:
    """swagger.json from the pinned k8s.io/kubernetes module (module cache or Go module proxy)."""
    try:
        folder = download_module("k8s.io/kubernetes", f"v{pins.kubernetes}")
    except BuildStepFailed as exc:
        raise SchemaDocumentError(str(exc)) from None
    return (folder / KUBERNETES_PATH_IN_MODULE).read_bytes()


def documents(openshift: Path | None, kubernetes: Path | None, pins: Pins) -> dict[Path, str]:
    """The text each committed document should have; OpenShift's only when its source is given."""
    out: dict[Path, str] = {}
    if openshift is not None:
        data = openshift_source(openshift, pins)
        out[OPENSHIFT_DOCUMENT] = render(json.loads(data), OPENSHIFT_ROOTS, {
            "repository": pins.openshift_api_repository,
            "commit": pins.openshift_api_commit,
            "path": OPENSHIFT_PATH_IN_REPO,
            "sha256": _sha256(data),
            "regenerate": f"{REGENERATE} --openshift-api <clone of openshift/api>",
        })
    data = kubernetes.read_bytes() if kubernetes is not None else kubernetes_source(pins)
    out[KUBERNETES_DOCUMENT] = render(json.loads(data), KUBERNETES_ROOTS, {
        "module": "k8s.io/kubernetes",
        "version": f"v{pins.kubernetes}",
        "path": KUBERNETES_PATH_IN_MODULE,
        "sha256": _sha256(data),
        "regenerate": REGENERATE,
    })
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.splitlines()[0])
    parser.add_argument("--openshift-api", type=Path,
                        help="a clone of openshift/api, or its openapi/openapi.json at the pinned commit "
                             "(without it, the OpenShift document is left as it is)")
    parser.add_argument("--kubernetes-openapi", type=Path,
                        help="Kubernetes' swagger.json (default: from the pinned k8s.io/kubernetes module)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed document differs; write nothing")
    args = parser.parse_args(argv)
    try:
        wanted = documents(args.openshift_api, args.kubernetes_openapi, load_pins())
    except (SchemaDocumentError, OSError, ValueError) as exc:
        print(f"regenerate: {exc}", file=sys.stderr)
        return 2
    stale = []
    for path, text in wanted.items():
        current = path.read_text() if path.exists() else None
        if current == text:
            print(f"{path.name}: up to date")
            continue
        stale.append(path)
        if args.check:
            print(f"{path.name}: differs from what its source gives")
        else:
            path.write_text(text)
            print(f"{path.name}: written ({len(text)} bytes)")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
