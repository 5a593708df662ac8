"""The decode stage of a run: the decoder (and its NMS) per batch slot, bound to that slot's views of the engine's
output buffers once. B = the camera count: camera i is decoded from slot i; B = 1: every frame from slot 0."""

from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from sdk.postprocess import create_postprocessor, describe
from sdk.spec.loader import PipelineFile


class Decoding:
    """The decoder (and its NMS) per batch slot, bound to that slot's views of the output buffers."""

    name = "postprocess"

    def __init__(self, pipeline: PipelineFile, outputs: dict[str, np.ndarray], tensors: dict[str, np.ndarray], batch: int, session=None) -> None:
        spec = pipeline.spec
        net_size = (spec.preprocess.resize.width, spec.preprocess.resize.height)
        self.by_slot = []
        for slot in range(batch):
            views = {name: array[slot : slot + 1] if batch > 1 else array for name, array in outputs.items()}
            self.by_slot.append(
                create_postprocessor(
                    spec.postprocess,
                    views,
                    net_size,
                    tensors,
                    pipeline.class_names(),
                    session=session,  # the CUDA session: the decode kernel reads this slot of the outputs in place
                    plugin_folder=pipeline.plugin_folder(),
                    slot=slot,
                )
            )
        self._stack = ExitStack()

    def __enter__(self) -> Decoding:
        for decoder in self.by_slot:
            if hasattr(decoder, "__enter__"):
                self._stack.enter_context(decoder)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def describe(self) -> str:
        """What decoded the frames and where NMS ran, for the report."""
        return describe(self.by_slot[0])


def create_decoding(pipeline: PipelineFile, outputs: dict[str, np.ndarray], tensors: dict[str, np.ndarray], batch: int, session=None) -> Decoding:
    """The decode stage for `batch` slots of the engine's outputs (`session`: the CUDA session decoding on the device)."""
    return Decoding(pipeline, outputs, tensors, batch, session)


__all__ = ["Decoding", "create_decoding"]
