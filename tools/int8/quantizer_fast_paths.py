"""ONNX Runtime's quantizer with four of its slow Python loops done the fast way, for the same model byte for byte.

Writing the example detector's Q/DQ model (`write_qdq`) took 2.4 CPU-s, most of it in loops that do per element in
Python what one NumPy or one C call does:

- `quantize_onnx_initializer` quantizes a per-channel weight channel by channel (`quantize_nparray` per channel,
  25,578 calls for the example): here the whole weight at once, with the scale and zero point broadcast along the
  axis. The same float32 division, rounding, addition, clip and cast per element, so the same integers.
- `find_by_name` builds the list of every initializer of that name to return the first: here the first is returned
  when found. `ONNXModel.replace_input_of_all_nodes` walks every input of every node in Python: here only the nodes
  whose inputs hold the name (a C-level membership test) are walked, the same way.
- `ONNXModel.initializer_extend` checks every initializer of the model again on each addition (`_check_init`, which
  only looks at FLOAT8E4M3FN initializers): here the added ones are checked, and a model holding an FLOAT8E4M3FN
  initializer is quantized without the fast paths.

The fast paths stand in for the functions whose source they were written against: `active()` compares each one's
source with the SHA-256 recorded here, and where ONNX Runtime changed any of them (another release), the quantizer
runs as it ships. They are installed for the duration of a `with fast_paths():` (nested or on several threads at once:
installed by the first, removed by the last) and nowhere else. tests/tools/int8/test_calibrate.py compares the Q/DQ
model `write_qdq` writes with ONNX Runtime's own, byte for byte, in every run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import threading
from pathlib import Path

import numpy as np

# The SHA-256 of the source of each function a fast path stands in for (ONNX Runtime 1.32.0).
VERIFIED_SOURCES = {
    "quant_utils.quantize_onnx_initializer": "3474ff8220db56d1fa550b9abce8db32ef4efc20fbfe70b720bb09e33e0f8790",
    "quant_utils.quantize_nparray": "364007f802236d9b350b520ad858c84b3edbdd54d37b4ff2db08dd605489d7b2",
    "quant_utils.find_by_name": "40cf7740b42609de15240e14403a0f99868e548fcd1a62ebea431e985cfb2c47",
    "onnx_model.ONNXModel.replace_input_of_all_nodes": "dc01c5a634a1e3c1742af4364c2840153550d8721af4025dd4eff1cd3a6dd6a5",
    "onnx_model.ONNXModel.replace_node_input": "161a2ad57d6b1ee74565d9dbf6b96b11c6b511edfd2c9696e53e1b544770010a",
    "onnx_model.ONNXModel.initializer_extend": "97d31496066309242623d2668e6d288316c11f6c31ab36e0a28842d7b9fad58a",
    "onnx_model.ONNXModel._check_init": "7ff484d0442990d9ae20d36130cfaf5e60e7b6adf7c6d83418e71786380480ac",
}


def _original(qualified: str):
    import importlib

    module, _, attribute = qualified.partition(".")
    value = importlib.import_module(f"onnxruntime.quantization.{module}")
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def source_digest(qualified: str) -> str:
    return hashlib.sha256(inspect.getsource(_original(qualified)).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def active() -> bool:
    """Whether this ONNX Runtime's functions are those the fast paths were written against."""
    try:
        return all(source_digest(name) == digest for name, digest in VERIFIED_SOURCES.items())
    except (ImportError, AttributeError, OSError, TypeError):
        return False


def _quantize_onnx_initializer(original):
    from onnx import TensorProto, numpy_helper
    from onnxruntime.quantization import quant_utils

    def quantize(weight, quant_type, zero_point, scale, axis=None, quant_weight_name=None, block_size=0):
        if axis is None or block_size > 0 or quant_type not in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16):
            return original(weight, quant_type, zero_point, scale, axis, quant_weight_name, block_size)
        data = quant_utils.tensor_proto_to_array(weight)
        along = [1] * data.ndim
        along[axis] = data.shape[axis]
        scale, zero_point = np.asarray(scale), np.asarray(zero_point)
        shaped = scale.shape == zero_point.shape == (data.shape[axis],)
        if not shaped or scale.dtype != np.float32 or data.dtype != np.float32 or zero_point.dtype.kind not in "iu":
            # Another promotion than the channel loop's float32 arithmetic (NumPy 1 promotes a scalar by value).
            return original(weight, quant_type, zero_point, scale, axis, quant_weight_name, block_size)
        # quantize_nparray of each channel, all channels at once: (x / scale).round() + zero_point, clipped, cast.
        qmin, qmax = quant_utils.get_qmin_qmax_for_qType(quant_type, reduce_range=False, symmetric=False)
        quantized = np.asarray((data.astype(np.float32) / scale.reshape(along)).round() + zero_point.reshape(along))
        np.clip(quantized, qmin, qmax, out=quantized)
        dtype = quant_utils.ONNX_TYPE_TO_NP_TYPE[quant_type]
        name = quant_weight_name if quant_weight_name else f"{weight.name}{quant_utils.TENSOR_NAME_QUANT_SUFFIX}"
        return numpy_helper.from_array(np.asarray(quantized.astype(dtype), dtype=dtype).reshape(weight.dims), name)

    return quantize


def _find_by_name(item_name, item_list):
    for item in item_list:
        if item.name == item_name:
            return item
    return None


def _replace_input_of_all_nodes(self, old_input_name, new_input_name):
    for node in self.model.graph.node:
        if old_input_name in node.input:
            self.replace_node_input(node, old_input_name, new_input_name)


def _initializer_extend(self, inits):
    if len(inits) == 0:
        raise ValueError("Can add an empty list.")
    for init in inits:
        self._check_init(init)
        self.model.graph.initializer.append(init)


_lock = threading.Lock()
_depth = 0
_saved: list[tuple[object, str, object]] = []


def _install() -> None:
    from onnxruntime.quantization import base_quantizer, onnx_model, onnx_quantizer, qdq_quantizer, quant_utils

    def put(owner, name, value) -> None:
        _saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    quantize = _quantize_onnx_initializer(quant_utils.quantize_onnx_initializer)
    for module in (quant_utils, qdq_quantizer, base_quantizer, onnx_quantizer):
        if "quantize_onnx_initializer" in module.__dict__:
            put(module, "quantize_onnx_initializer", quantize)
    for module in (quant_utils, qdq_quantizer, base_quantizer, onnx_quantizer, onnx_model):
        if "find_by_name" in module.__dict__:
            put(module, "find_by_name", _find_by_name)
    put(onnx_model.ONNXModel, "replace_input_of_all_nodes", _replace_input_of_all_nodes)
    put(onnx_model.ONNXModel, "initializer_extend", _initializer_extend)


def _remove() -> None:
    while _saved:
        owner, name, value = _saved.pop()
        setattr(owner, name, value)


@functools.lru_cache(maxsize=8)
def _holds_float8(model: str, mtime_ns: int, size: int) -> bool:
    import onnx
    from onnx import TensorProto

    graph = onnx.load(model, load_external_data=False).graph
    return any(i.data_type == TensorProto.FLOAT8E4M3FN for i in graph.initializer)


@contextlib.contextmanager
def fast_paths(model: Path):
    """ONNX Runtime's quantizer with the fast paths while in the block, where `active()` and the model file holds no
    FLOAT8E4M3FN initializer (yields whether they are on); as it ships otherwise."""
    global _depth
    stat = Path(model).stat()
    if not active() or _holds_float8(str(model), stat.st_mtime_ns, stat.st_size):
        yield False
        return
    with _lock:
        if _depth == 0:
            _install()
        _depth += 1
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _remove()
