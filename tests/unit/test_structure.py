"""infra.structure: the package's imports have no circle, between modules or between packages, and
run one way down the layers infra/structure.py lists; the measure itself is checked on a made-up tree."""

from __future__ import annotations

from pathlib import Path

from infra.structure import LAYERS, ROOT, cycles, measure

STRUCTURE = measure()


def test_no_module_imports_itself_through_others() -> None:
    assert STRUCTURE.module_cycles() == []


def test_no_two_packages_import_each_other_and_no_package_circle() -> None:
    assert STRUCTURE.package_cycles() == []


def test_every_package_import_runs_down_the_layers() -> None:
    listed = {package for layer in LAYERS for package in layer}
    measured = {STRUCTURE.package_of(m) for m in STRUCTURE.modules} - {"infra"}
    assert measured <= listed, f"packages no layer lists: {sorted(measured - listed)}"
    assert STRUCTURE.upward_imports() == []


def test_the_components_packages_know_nothing_of_their_readers() -> None:
    readers = {"cli", "kinds", "compare", "monitor", "nodes", "config", "stack_config"}
    for components in ("openshift", "hpc", "aws", "outputs"):
        imported = {b for a, b in STRUCTURE.package_imports if a == components}
        assert not imported & readers, (components, imported & readers)


def test_the_measure_finds_circles_and_upward_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "high" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("from pkg.high import b\n")  # up: low imports high
    (package / "high" / "b.py").write_text("def f():\n    from . import c  # deferred still counts\n")
    (package / "high" / "c.py").write_text("import pkg.high.b\n")
    found = measure(tmp_path, "pkg")
    assert found.module_cycles() == [["pkg.high.b", "pkg.high.c"]]
    assert ("low", "high") in found.package_imports
    assert found.upward_imports([("high",), ("low",)]) == [("low", "high")]
    assert found.upward_imports([("low",), ("high",)]) == []
    assert cycles("abc", [("a", "b"), ("b", "c"), ("c", "a")]) == [["a", "b", "c"]]


def test_each_class_name_means_one_thing() -> None:
    # Two classes of one name (a Kubernetes JobCompletion and an HPC one) read as one thing in a
    # traceback, a search or a review.
    import ast
    from collections import defaultdict

    defined: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "infra").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined[node.name].append(path.relative_to(ROOT).as_posix())
    assert {name: paths for name, paths in defined.items() if len(paths) > 1} == {}
