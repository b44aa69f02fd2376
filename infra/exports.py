"""Names a package exports lazily (PEP 562): imported on first use, so a light import stays light.

`import infra.hpc.ssh` runs infra/hpc/__init__.py, and the telemetry sampler, the SSH pool and the
config parsers must not pay for Pulumi there; a user's `from infra.hpc import HpcEnvironment`
still works, importing infra/hpc/components.py only then. Each package lists its names under
`TYPE_CHECKING` too, so type checkers see the real types.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: Mapping[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__` for `exports` ({name: the module that defines it});
    `namespace` is the package's `globals()`."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
