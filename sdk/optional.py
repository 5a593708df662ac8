"""Modules only some pipelines need, imported when such a pipeline runs: a missing one is one error naming the
package and its install line (sdk/probe.py PIPELINE_MODULES lists them; a deploy ships them only where needed)."""

from __future__ import annotations

import importlib
from types import ModuleType

from sdk.errors import SdkError


def need(module: str, package: str, what: str, error: type[SdkError] = SdkError) -> ModuleType:
    """`module`, imported, or `error` saying that `what` needs `package` and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise error(
            f"{what} needs the Python package {package} (module {module!r}: {exc})",
            hint=f"install it where the pipeline runs: python3 -m pip install '{package}' (a deploy ships it by itself)",
        ) from None
