"""Modules only some pipelines need, imported when such a pipeline runs: a missing one is one error naming what needs
it, the package and its install line (sdk/probe.py PIPELINE_MODULES lists them; a deploy ships them only where needed)."""

from __future__ import annotations

import importlib
from types import ModuleType

from sdk.errors import MissingDependencyError, missing_dependency


def need(module: str, package: str, what: str) -> ModuleType:
    """`module`, imported, or a MissingDependencyError saying that `what` needs `package` and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        missing = missing_dependency(module, f"python3 -m pip install '{package}'")
        raise MissingDependencyError(f"{what} needs the Python package {package}: {missing.message}", hint=missing.hint) from None
