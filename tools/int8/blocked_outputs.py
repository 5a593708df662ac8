"""An ONNX Runtime session that hands the observed tensors over in its own blocked layout.

On x86 ONNX Runtime runs convolutions in a blocked channel layout (NCHWc: channels in blocks of 8
or 16, the innermost dimension). Every tensor made a graph output leaves that layout through a
`ReorderOutput` copy into NCHW: for the example detector's 105 observed activations those copies
made the statistics pass cost 1.9-2.2x FP32 inference instead of 1.2-1.4x (measured side by side).
A histogram, a minimum and a maximum do not depend on the order of the values, so the copy buys
nothing here. This session is ONNX Runtime's own optimized graph with those reorders taken out:
the blocked tensors themselves become the outputs, the same values in another order.

A blocked tensor holds padding lanes when its channel count is not a multiple of the block, and
those lanes are not the tensor's values; such a tensor keeps its reorder. That is decided without
knowing the block size: a first run on a zero frame compares each blocked output's size with the
NCHW tensor's, and any that differ go back to their reorder. With no blocked layout (a CPU without
it, another ONNX Runtime) the graph has no reorder to take out and every output is a plain one.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NCHWC_DOMAIN = "com.microsoft.nchwc"
# Block sizes of ONNX Runtime's NCHWc kernels are 8 (AVX2) and 16 (AVX-512): a channel count that is
# a multiple of this has no padding lane in either, so it is tried blocked (and checked by size).
LARGEST_BLOCK = 16
PROBE_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}


@dataclass(frozen=True)
class BlockedSession:
    """`session.run(outputs)` returns, for each name in `tensors`, its values (in some order)."""

    session: object  # onnxruntime.InferenceSession
    tensors: tuple[str, ...]  # the observed tensors, in output order
    outputs: tuple[str, ...]  # what to ask the session for, one per tensor
    blocked: frozenset[str]  # tensors handed over in the blocked layout

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(list(self.outputs), feed)


def session_options(threads: int | None, *, spinning: bool):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle ONNX Runtime threads spin by default, on the cores the counting threads need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return options


def blocked_session(model, shapes: dict[str, tuple[int, ...]], *, threads: int | None, spinning: bool) -> BlockedSession:
    """`model`: an ONNX model whose graph outputs are the observed tensors (`shapes`, NCHW)."""
    import onnx
    import onnxruntime as ort

    tensors = tuple(o.name for o in model.graph.output)
    with tempfile.TemporaryDirectory(prefix="calibration-graph-") as folder:
        optimized_path = Path(folder) / "optimized.onnx"
        options = session_options(threads, spinning=spinning)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(optimized_path)
        # Weights beside the graph, so a model past protobuf's 2 GB serializes too.
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        source = Path(folder) / "observed.onnx"
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # saving with external data empties the tensors it writes out
        onnx.save(copy, str(source), save_as_external_data=True, location="observed.bin")
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(str(optimized_path), load_external_data=False)
        candidates = _reorders_to_skip(optimized, shapes)

        def load(skipped: dict[str, str]):
            graph = _without_reorders(optimized, tensors, skipped)
            path = Path(folder) / "blocked.onnx"
            onnx.save(graph, str(path))
            plain = session_options(threads, spinning=spinning)
            plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # optimized already
            return ort.InferenceSession(str(path), plain, providers=["CPUExecutionProvider"])

        session = load(candidates)
        if candidates:
            feed = {i.name: np.zeros(i.shape, PROBE_DTYPES[i.type]) for i in session.get_inputs()}  # static shapes (the plan's)
            outputs = [candidates.get(name, name) for name in tensors]
            sizes = {name: value.size for name, value in zip(tensors, session.run(outputs, feed), strict=True)}
            padded = {name for name in candidates if sizes[name] != math.prod(shapes[name])}
            if padded:
                candidates = {name: blocked for name, blocked in candidates.items() if name not in padded}
                session = load(candidates)
    outputs = tuple(candidates.get(name, name) for name in tensors)
    return BlockedSession(session, tensors, outputs, frozenset(candidates))


def _reorders_to_skip(optimized, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Observed tensor -> the blocked tensor its `ReorderOutput` reads, where no lane can be padding."""
    outputs = {o.name for o in optimized.graph.output}
    skipped = {}
    for node in optimized.graph.node:
        if node.domain != NCHWC_DOMAIN or node.op_type != "ReorderOutput" or node.output[0] not in outputs:
            continue
        attributes = {a.name: a.i for a in node.attribute}
        name = node.output[0]
        shape = shapes.get(name)
        if shape is None or len(shape) < 3 or attributes.get("channels_last", 0) != 0:
            continue
        if attributes.get("channels") == shape[1] and shape[1] % LARGEST_BLOCK == 0:
            skipped[name] = node.input[0]
    return skipped


def _without_reorders(optimized, tensors: tuple[str, ...], skipped: dict[str, str]):
    """A copy of the optimized graph whose outputs are the blocked tensors for `skipped`; a reorder
    that nothing else reads is removed."""
    import onnx
    from onnx import TensorProto, helper

    graph = onnx.ModelProto()
    graph.CopyFrom(optimized)
    read = {name for node in graph.graph.node for name in node.input}
    kept = [n for n in graph.graph.node if not (n.op_type == "ReorderOutput" and n.output[0] in skipped and n.output[0] not in read)]
    del graph.graph.node[:]
    graph.graph.node.extend(kept)
    del graph.graph.output[:]
    graph.graph.output.extend(helper.make_tensor_value_info(skipped.get(name, name), TensorProto.FLOAT, None) for name in tensors)
    return graph
