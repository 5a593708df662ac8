"""Small ONNX graphs built by hand for the optimisation math: convolutions, a residual add, a concat, a depthwise
convolution, detection-head-like outputs. Every weight is seeded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed: int = 0, channels: int = 3, size: int = 12) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.weights: list = []
        self.input = helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, channels, size, size))
        self.count = 0

    def _name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def weight(self, name: str, value: np.ndarray) -> str:
        self.weights.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def conv(self, x: str, c_in: int, c_out: int, kernel: int = 1, group: int = 1, weight: np.ndarray | None = None,
             bias: np.ndarray | None = None, name: str | None = None, stride: int = 1) -> str:  # fmt: skip
        name = name or self._name("conv")
        w = weight if weight is not None else self.rng.normal(0, 1 / np.sqrt(c_in // group * kernel * kernel), (c_out, c_in // group, kernel, kernel))
        b = bias if bias is not None else self.rng.normal(0, 0.1, c_out)
        pad = kernel // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, self.weight(f"{name}.w", w), self.weight(f"{name}.b", b)],
                [f"{name}.y"],
                name=name,
                group=group,
                pads=[pad] * 4,
                strides=[stride, stride],
                kernel_shape=[kernel, kernel],
            )  # fmt: skip
        )
        return f"{name}.y"

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        name = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [f"{name}.y"], name=name, **attrs))
        return f"{name}.y"

    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def model(self, outputs: list[str]):
        graph = helper.make_graph(
            self.nodes, "synthetic", [self.input], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], self.weights
        )
        built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        built.ir_version = 8
        return onnx.shape_inference.infer_shapes(built)

    def save(self, outputs: list[str], path: Path) -> Path:
        onnx.save(self.model(outputs), str(path))
        return path


def run(model, frames: list[np.ndarray], outputs: list[str] | None = None) -> list[list[np.ndarray]]:
    import onnxruntime as ort

    source = model if isinstance(model, (str, Path)) else model.SerializeToString()
    session = ort.InferenceSession(str(source) if isinstance(source, Path) else source, providers=["CPUExecutionProvider"])
    names = outputs or [o.name for o in session.get_outputs()]
    return [session.run(names, {"x": frame}) for frame in frames]


def frames(count: int, channels: int = 3, size: int = 12, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1, (1, channels, size, size)).astype(np.float32) for _ in range(count)]
