"""What the calibration frames tell about a layer: its input Hessian, and features of two models side by side.

A convolution computes W @ patches: each output pixel is the weight matrix [O, C*kh*kw] times that pixel's input
patch (im2col), plus the bias. With a constant 1 appended to every patch (so the bias is one more column), the
least-squares problems of reconstruction and of 2:4 sparsity need only H = sum of patch patch^T over the
calibration pixels (the "input Hessian" of OBS/SparseGPT, up to the factor 2). It is accumulated frame by frame in
float64; a frame's large maps contribute a fixed, seeded subset of their pixels (`max_positions`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tools.optimize.graph import ConvInfo, Graph

DEFAULT_MAX_POSITIONS = 2048


@dataclass(frozen=True)
class Probe:
    """One convolution whose input statistics are wanted."""

    node: str
    tensor: str  # its input activation
    info: ConvInfo


def im2col(x: np.ndarray, info: ConvInfo) -> np.ndarray:
    """[C, H, W] -> [C*kh*kw, Ho*Wo], rows in the order of the weight's flattened [C, kh, kw]."""
    kh, kw = info.kernel
    if (kh, kw) == (1, 1) and info.strides == (1, 1) and not any(info.pads):
        return x.reshape(x.shape[0], -1)
    top, left, bottom, right = info.pads
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right)))
    sh, sw = info.strides
    dh, dw = info.dilations
    ho = (padded.shape[1] - dh * (kh - 1) - 1) // sh + 1
    wo = (padded.shape[2] - dw * (kw - 1) - 1) // sw + 1
    taps = [padded[:, i * dh : i * dh + sh * (ho - 1) + 1 : sh, j * dw : j * dw + sw * (wo - 1) + 1 : sw] for i in range(kh) for j in range(kw)]
    return np.stack(taps, axis=1).reshape(x.shape[0] * kh * kw, ho * wo)


def augmented(columns: np.ndarray) -> np.ndarray:
    """Patches with the constant 1 appended (the bias column)."""
    return np.vstack([columns, np.ones((1, columns.shape[1]), columns.dtype)])


def positions(count: int, limit: int, key: int) -> np.ndarray | None:
    """A fixed subset of `limit` of `count` pixels (None: all), the same for the same key."""
    if count <= limit:
        return None
    return np.sort(np.random.default_rng(key).choice(count, limit, replace=False))


def session(model, threads: int | None = None):
    """An ONNX Runtime CPU session of a model proto or file (quiet)."""
    import onnxruntime as ort

    from sdk.backends.onnxruntime_cpu import session_options

    options = session_options(threads, spinning=False)
    options.log_severity_level = 3
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def with_outputs(graph: Graph, tensors: list[str], keep_outputs: bool = False):
    """The graph's model with these tensors as its outputs (only the nodes they need are kept)."""
    import onnx

    model = graph.to_model(infer=False)
    wanted = list(dict.fromkeys(([o.name for o in model.graph.output] if keep_outputs else []) + list(tensors)))
    needed, stack = set(), list(wanted)
    producer = {t: node for node in model.graph.node for t in node.output}
    while stack:
        tensor = stack.pop()
        node = producer.get(tensor)
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        stack.extend(t for t in node.input if t)
    kept = [node for node in model.graph.node if id(node) in needed]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    used = {t for node in kept for t in node.input}
    initializers = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    del model.graph.output[:]
    model.graph.output.extend([onnx.ValueInfoProto(name=t) for t in wanted])
    return model


def input_hessians(graph: Graph, probes: list[Probe], frames: Iterable[np.ndarray], threads: int | None = None,
                   max_positions: int = DEFAULT_MAX_POSITIONS) -> dict[str, np.ndarray]:  # fmt: skip
    """node -> H [D+1, D+1] (float64) of its augmented input patches over the frames."""
    tensors = list(dict.fromkeys(p.tensor for p in probes))
    run = session(with_outputs(graph, tensors), threads)
    (input_name,) = graph.inputs
    hessians: dict[str, np.ndarray] = {}
    for index, frame in enumerate(frames):
        values = dict(zip(tensors, run.run(tensors, {input_name: frame}), strict=True))
        for number, probe in enumerate(probes):
            columns = im2col(values[probe.tensor][0], probe.info)
            chosen = positions(columns.shape[1], max_positions, index * 1009 + number)
            patch = augmented(columns if chosen is None else columns[:, chosen])
            gram = (patch @ patch.T).astype(np.float64)
            hessians[probe.node] = hessians[probe.node] + gram if probe.node in hessians else gram
    return hessians


def paired_features(student: Graph, teacher: Graph, tensors: list[tuple[str, str]], frames: Iterable[np.ndarray],
                    threads: int | None = None) -> Iterable[dict[str, tuple[np.ndarray, np.ndarray]]]:  # fmt: skip
    """Per frame: name -> (student tensor, teacher tensor) for each (student name, teacher name) pair."""
    ours = session(with_outputs(student, [s for s, _ in tensors]), threads)
    theirs = session(with_outputs(teacher, [t for _, t in tensors]), threads)
    (input_name,) = student.inputs
    for frame in frames:
        a = ours.run([s for s, _ in tensors], {input_name: frame})
        b = theirs.run([t for _, t in tensors], {input_name: frame})
        yield {s: (x, y) for (s, _), x, y in zip(tensors, a, b, strict=True)}
