"""What the host's preparation hands to the runtime: the prepared model and the tensors postprocessing needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sdk.errors import ModelError

if TYPE_CHECKING:
    import numpy as np

MODEL_FILE = "model.onnx"
TENSORS_FILE = "tensors.npz"
META_FILE = "prepare.json"
QDQ_FILE = "model.qdq.onnx"  # INT8: the calibrated Q/DQ model (what ONNX Runtime and TensorRT 11 run)
RANGES_FILE = "ranges.json"  # INT8: the ranges behind it, from which TensorRT 8.6/10 caches are made
TRT_CACHE_FILE = "calibration.cache"  # INT8: the cache for the target's own TensorRT, when it has one
ENGINE_FILE = "model.engine"  # a TensorRT engine built on the target (or its twin) for this release
PRECISION_FILE = "precision.json"  # INT8: layers kept out of INT8 by the accuracy fallback (FP16 on TensorRT 10)


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

    def model_for(self, precision: str) -> Path:
        """The model file a backend without its own precision control runs for `precision`."""
        if precision != "int8":
            return self.model_path
        qdq = self.folder / QDQ_FILE
        if not qdq.is_file():
            raise ModelError(
                f"{self.folder}: model.precision is int8 but the release has no {QDQ_FILE}",
                hint="deploy calibrates INT8 itself; or run `sdk calibrate PIPELINE` and deploy again",
            )
        return qdq

    @property
    def engine_path(self) -> Path:
        return self.folder / ENGINE_FILE

    def declared_tensors(self) -> tuple:
        """The prepared model's inputs and outputs (float32) as the preparation recorded them: what an engine must match."""
        import json

        import numpy as np

        from sdk.tensors import TensorSpec

        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return ()
        tensors = {**meta.get("inputs", {}), **meta.get("outputs", {})}
        return tuple(TensorSpec(name, tuple(shape), np.dtype(np.float32)) for name, shape in tensors.items())

    def files(self) -> list[Path]:
        return [self.model_path, self.tensors_path, self.meta_path]

    def load_tensors(self) -> dict[str, np.ndarray]:
        import numpy as np

        try:
            with np.load(self.tensors_path, allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read extracted tensors {self.tensors_path}: {exc}") from None
