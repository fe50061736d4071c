"""A package's public names, each imported from its private module on first use (PEP 562).

A command that needs one outbound client should not pay for the server side of the same
package: ``internal.http`` holds both, and the server side brings in aiohttp's web
framework and YAML (docs/performance.md, "CLI start-up"). The package's ``__init__``
still lists every name under ``TYPE_CHECKING`` (so type checkers see the real types) and
in ``__all__``; tests/test_architecture.py checks the three lists agree.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]
                 ) -> tuple[list[str], Callable[[str], Any]]:
    """``modules``: private module name -> the names it exports. Returns ``__all__`` and
    the module's ``__getattr__``, which imports a name's module once and keeps the name
    in the package (later lookups do not come back here)."""
    where = {name: module for module, names in modules.items() for name in names}

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return sorted(where), getattr_
