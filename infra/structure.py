"""The package's structure measured from its source: modules, imports between modules and packages,
circles, file sizes.

`python -m infra.structure` prints the figures docs/architecture.md gives (`--json` for
scripts; `--root DIR` measures another checkout, e.g. an older commit's worktree, to compare).
tests/unit/test_structure.py holds the rules to it: no circle between modules or packages,
and the packages' one direction (`LAYERS`). Imports are read from the syntax tree, wherever
they stand (inside functions and `TYPE_CHECKING` blocks too): a deferred import is still a
dependency.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "infra"
# The packages of infra/, each layer importing only from the layers below it (and its own). A
# module at infra/'s top (config.py, outputs.py, ...) is a package of its own here.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("kinds",),
    ("workload_check", "config", "config_reference", "image_check"),
    ("config_model",),
    ("stack_config",),
    ("nodes",),
    ("monitor",),
    ("compare",),
    ("aws", "openshift"),
    ("hpc",),
    ("dynamic", "workload_source", "telemetry"),
    ("workload", "kubeapi", "kubeauth", "schemas", "config_schema"),
    (
        "validation", "errors", "kubeconfig", "outputs", "timeparse", "job_records", "toolchain", "structure", "maps",
        "exports", "extras", "doctor", "index_ranges", "provenance", "loopback",
    ),
)
LONG_FILE_LINES = 600  # a file past this is one to split (issue 29: files one can read)


@dataclass(frozen=True)
class Structure:
    modules: tuple[str, ...]
    imports: frozenset[tuple[str, str]]  # (importer, imported), modules of the package
    lines: Mapping[str, int]  # by module

    def package_of(self, module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    @property
    def package_imports(self) -> frozenset[tuple[str, str]]:
        found = {(self.package_of(a), self.package_of(b)) for a, b in self.imports}
        return frozenset((a, b) for a, b in found if a != b)

    def module_cycles(self) -> list[list[str]]:
        return cycles(self.modules, self.imports)

    def package_cycles(self) -> list[list[str]]:
        return cycles(sorted({self.package_of(m) for m in self.modules}), self.package_imports)

    def upward_imports(self, layers: Iterable[Iterable[str]] = LAYERS) -> list[tuple[str, str]]:
        """Package imports that go up the layers (or name a package no layer lists)."""
        rank = {package: index for index, layer in enumerate(layers) for package in layer}
        return sorted(
            (a, b) for a, b in self.package_imports if a not in rank or b not in rank or rank[b] < rank[a]
        )

    def long_files(self) -> dict[str, int]:
        return {m: n for m, n in sorted(self.lines.items()) if n > LONG_FILE_LINES}

    def figures(self) -> dict[str, object]:
        return {
            "modules": len(self.modules),
            "lines": sum(self.lines.values()),
            "module_imports": len(self.imports),
            "packages": len({self.package_of(m) for m in self.modules}),
            "package_imports": len(self.package_imports),
            "packages_importing_each_other": sorted(
                f"{a} <-> {b}" for a, b in self.package_imports if a < b and (b, a) in self.package_imports
            ),
            "module_cycles": len(self.module_cycles()),
            "package_cycles": len(self.package_cycles()),
            "upward_imports": [f"{a} -> {b}" for a, b in self.upward_imports()],
            "largest_file_lines": max(self.lines.values(), default=0),
            f"files_over_{LONG_FILE_LINES}_lines": self.long_files(),
        }


def measure(root: Path = ROOT, package: str = PACKAGE) -> Structure:
    """Every module under root/package and the imports between them."""
    paths = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        paths[name] = path
    imports = set()
    lines = {}
    for name, path in paths.items():
        source = path.read_text()
        lines[name] = len(source.splitlines())
        is_package = path.name == "__init__.py"
        for imported in _imported(ast.parse(source), name, is_package):
            # `from a.b import c`: the module a.b.c if there is one, else a.b itself (c is a name in it).
            target = imported if imported in paths else imported.rpartition(".")[0]
            if target in paths and target != name:
                imports.add((name, target))
    return Structure(tuple(paths), frozenset(imports), lines)


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    """Every dotted name an import statement brings in: `import a.b` gives a.b; `from a import b`
    gives a.b (read as the module a.b, or as the name b of module a where there is no such module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def cycles(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm), each sorted."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in nodes:
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.structure", description=__doc__)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.root).figures()
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
