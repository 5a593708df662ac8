"""Host cache entries appear whole or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def build_folder(final: Path, build: Callable[[Path], None]) -> None:
    """Run `build` into a temporary folder beside `final`, then rename it into place: a crash or an
    error leaves no half-built entry under the final name (an older incomplete one is replaced)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(staging)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
