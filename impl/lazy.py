"""Lazy re-exports for a package's ``__init__`` (PEP 562): a name is imported from its
submodule on first use, so that importing one light submodule of a package (its errors, its
wire types) does not load the heavy ones beside it (the trio shells, the storage stack).
The CLI's fast commands depend on it (tests/cli/test_import_budget.py measures the start).

    __getattr__ = lazy_exports(__name__, {"TabletClient": "tablet", ...}, globals())

Standard library only, and nothing but ``sys``: every package's start goes through here."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, submodule_of: Mapping[str, str],
                 namespace: dict[str, Any]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: ``name`` from ``package.submodule_of[name]``,
    cached in the package's ``namespace`` (its globals) after the first use."""

    def __getattr__(name: str) -> object:
        submodule = submodule_of.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__, not importlib.import_module: -X importtime nests only what the import
        # statement's machinery loads, and tests/cli/test_import_budget.py reads that nesting.
        __import__(f"{package}.{submodule}")
        value = getattr(sys.modules[f"{package}.{submodule}"], name)
        namespace[name] = value
        return value

    return __getattr__


__all__ = ["lazy_exports"]
