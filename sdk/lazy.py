"""Names of a package loaded from their modules on first use (PEP 562), so that importing the package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_attributes(package: str, modules: dict[str, str]) -> Callable[[str], object]:
    """A package's `__getattr__`: each name in `modules` is read from its module, imported when first asked for."""

    def __getattr__(name: str) -> object:
        if name in modules:
            return getattr(importlib.import_module(modules[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
