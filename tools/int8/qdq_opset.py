"""The model as ONNX Runtime's quantizer is to read it: at opset 13 at least.

ONNX Runtime's quantizer writes per-channel DequantizeLinear nodes with an `axis` whatever the model's opset, and the
attribute (like TensorRT's explicit quantization) starts at opset 13: the Q/DQ model of an opset-11 graph (YOLOX's,
many exported detectors') would not load. Such a model is converted by ONNX's version converter, which keeps every
node and tensor name, so the ranges and the nodes kept out of INT8 still name them. A sensitivity search writes a
Q/DQ model per layer of one model: the conversion (0.4 s for YOLOX-Nano) is done once per file and kept in memory.
"""

from __future__ import annotations

import functools
from pathlib import Path

QDQ_OPSET = 13


def link_or_convert(model: Path, own: Path) -> None:
    """`own`: a link to `model` where its default-domain opset is 13 or later, else the model converted to 13."""
    stat = model.stat()
    converted = _converted(str(model), stat.st_mtime_ns, stat.st_size)
    if converted is None:
        own.symlink_to(model)
    else:
        own.write_bytes(converted)


@functools.lru_cache(maxsize=4)
def _converted(model: str, mtime_ns: int, size: int) -> bytes | None:
    """The serialized model at opset 13, or None where it is there already (cached per file and version of it)."""
    import onnx
    from onnx import version_converter

    opsets = onnx.load(model, load_external_data=False).opset_import
    if next((o.version for o in opsets if o.domain in ("", "ai.onnx")), QDQ_OPSET) >= QDQ_OPSET:
        return None
    return version_converter.convert_version(onnx.load(model), QDQ_OPSET).SerializeToString()


__all__ = ["QDQ_OPSET", "link_or_convert"]
