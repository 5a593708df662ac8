"""What the host's preparation hands to the runtime: the prepared model and the tensors postprocessing needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import ModelError

MODEL_FILE = "model.onnx"
TENSORS_FILE = "tensors.npz"
META_FILE = "prepare.json"


@dataclass(frozen=True)
class ModelArtifacts:
    folder: Path

    @property
    def model_path(self) -> Path:
        return self.folder / MODEL_FILE

    @property
    def tensors_path(self) -> Path:
        return self.folder / TENSORS_FILE

    @property
    def meta_path(self) -> Path:
        return self.folder / META_FILE

    def files(self) -> list[Path]:
        return [self.model_path, self.tensors_path, self.meta_path]

    def load_tensors(self) -> dict[str, np.ndarray]:
        try:
            with np.load(self.tensors_path, allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read extracted tensors {self.tensors_path}: {exc}") from None
