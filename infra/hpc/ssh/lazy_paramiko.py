"""paramiko, imported when first used: the Pulumi program imports the SSH modules but never connects.

The program imports them for their types; its dynamic providers connect, in their own process.
paramiko with its cryptography is a fifth of the program's start-up. The modules of this package
take `paramiko` from here at run time (and the real module when type-checked).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


class _ImportedOnFirstUse(ModuleType):
    """Stands in for the paramiko module: the first attribute read imports it."""

    def __getattr__(self, name: str) -> Any:
        import paramiko as module

        value = getattr(module, name)
        # Kept on the stand-in: the next read of the name finds it without coming here.
        setattr(self, name, value)
        return value


paramiko = _ImportedOnFirstUse("paramiko")
