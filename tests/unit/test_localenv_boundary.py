"""The installed package stands without the local environment: no module under `infra/` imports
`localenv` (the top-level package of the tests', benches' and scripts' local environment, left out
of the distribution), while `localenv` may import `infra`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def localenv_imports(source: str) -> list[str]:
    """The `localenv` modules a source file imports, at any depth (lazy imports in functions too)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names.append(node.module)
    return [name for name in names if name.split(".")[0] == "localenv"]


def test_no_module_of_infra_imports_localenv() -> None:
    modules = sorted(p for p in (ROOT / "infra").rglob("*.py") if "__pycache__" not in p.parts)
    assert len(modules) > 100  # the walk found the package
    offending = {
        p.relative_to(ROOT).as_posix(): names for p in modules if (names := localenv_imports(p.read_text()))
    }
    assert offending == {}, f"infra/ must not import localenv (it is not installed): {offending}"


@pytest.mark.parametrize(
    "line",
    [
        "import localenv",
        "import localenv.satori as satori",
        "from localenv import kube",
        "from localenv.layout import Layout",
        "def f():\n    from localenv.lsf import core\n",
    ],
)
def test_the_check_sees_every_way_of_importing_it(line: str) -> None:
    assert localenv_imports(line) != []


@pytest.mark.parametrize(
    "line", ["import infra.localenvironment", "from infra.hpc import lsf", "from . import localenv"]
)
def test_the_check_leaves_other_imports_alone(line: str) -> None:
    assert localenv_imports(line) == []
