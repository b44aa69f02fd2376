"""The options a script's argparse parser defines, read from its source text (nothing is run).

The data of the workload-vs-source test (tests/unit/test_biggan_source.py): `python3 -m
infra.workload_source flags` reads BigGAN-PyTorch's scripts at the pinned commit and writes what
`parser_flags` finds in them to workloads/biggan/biggan-argparse-flags.json.
"""

from __future__ import annotations

import ast


class UnknownParserError(ValueError):
    """A script that does not build its parser in a way this reader knows."""


def _add_argument_options(function: ast.FunctionDef) -> set[str]:
    options: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    options.add(arg.value)
    return options


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def parser_flags(sources: dict[str, str], script: str) -> tuple[set[str], list[str]]:
    """The options of the parser `script` builds, read from source text only (nothing is run).

    The parser is whatever `prepare_parser()` (the script's own, or `module.prepare_parser()`
    of a module beside it) returns, plus `add_*_parser(parser)` functions the script calls: how
    BigGAN-PyTorch's scripts build theirs. Returns the options and the files they came from."""
    script_tree = ast.parse(sources[script], filename=script)
    own = _functions(script_tree)
    flags: set[str] = set()
    used: list[str] = []
    for node in ast.walk(script_tree):
        if not isinstance(node, ast.Call):
            continue
        name, module = None, script
        if isinstance(node.func, ast.Name) and node.func.id in own:
            name = node.func.id
        elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            candidate = f"{node.func.value.id}.py"
            if candidate in sources:
                name, module = node.func.attr, candidate
        if name is None or not (name == "prepare_parser" or (name.startswith("add_") and name.endswith("_parser"))):
            continue
        functions = own if module == script else _functions(ast.parse(sources[module], filename=module))
        if name in functions:
            flags |= _add_argument_options(functions[name])
            if module not in used:
                used.append(module)
    if not used:
        raise UnknownParserError(f"{script}: no prepare_parser() call found; cannot tell which parser it uses")
    return flags, used
