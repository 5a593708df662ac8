"""The prepared model as numpy sees it: nodes, who produces and who reads each tensor, weights as arrays.

Edits go through `weights` (name -> array) and node attributes; `to_model` writes them back into a copy of the
ONNX model with stale intermediate shapes dropped, so ONNX shape inference recomputes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.errors import ModelError


@dataclass(frozen=True)
class ConvInfo:
    """A Conv node's parameters: weight [O, I/group, kh, kw], optional bias, and its geometry."""

    weight: str
    bias: str | None
    group: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    dilations: tuple[int, int]


class Graph:
    """A loaded model: `nodes` in order, `weights` (initializers and Constant outputs) as float arrays."""

    def __init__(self, model) -> None:
        from onnx import numpy_helper

        self.model = model
        self.nodes = list(model.graph.node)
        self.weights: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i).copy() for i in model.graph.initializer}
        for node in self.nodes:
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        self.weights[node.output[0]] = numpy_helper.to_array(attribute.t).copy()
        self.inputs = [i.name for i in model.graph.input if i.name not in self.weights]
        self.outputs = [o.name for o in model.graph.output]
        self.producer = {t: node for node in self.nodes for t in node.output if t}
        self.consumers: dict[str, list] = {}
        for node in self.nodes:
            for tensor in node.input:
                if tensor:
                    self.consumers.setdefault(tensor, []).append(node)
        self.changed: set[str] = set()  # weights written since loading
        self.groups: dict[str, int] = {}  # node name -> a new `group` attribute (depthwise convolutions after pruning)

    @classmethod
    def load(cls, path: Path) -> Graph:
        import onnx

        try:
            model = onnx.load(str(path))
        except Exception as exc:  # protobuf decode errors have no common base
            raise ModelError(f"{path}: not a readable ONNX model: {exc}") from None
        return cls(model)

    def copy(self) -> Graph:
        """An independent copy with the edits so far."""
        twin = Graph(self.to_model())
        return twin

    def activations(self, node) -> list[str]:
        """The node's inputs that are not weights."""
        return [t for t in node.input if t and t not in self.weights]

    def conv(self, node) -> ConvInfo:
        attributes = {a.name: a for a in node.attribute}
        weight = self.weights.get(node.input[1])
        if weight is None or weight.ndim != 4:
            raise ModelError(f"{node.name}: a Conv whose weight is not a constant 4-D tensor")
        kernel = tuple(weight.shape[2:])
        ints = {name: tuple(a.ints) for name, a in attributes.items() if a.ints}
        auto_pad = attributes["auto_pad"].s.decode() if "auto_pad" in attributes else "NOTSET"
        if auto_pad not in ("NOTSET", "VALID"):
            raise ModelError(f"{node.name}: auto_pad {auto_pad} (prepare the model with explicit pads)")
        pads = ints.get("pads", (0, 0, 0, 0))
        group = self.groups.get(node.name, attributes["group"].i if "group" in attributes else 1)
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        return ConvInfo(
            node.input[1], bias, group, kernel, ints.get("strides", (1, 1)), (pads[0], pads[1], pads[2], pads[3]), ints.get("dilations", (1, 1))
        )

    def is_depthwise(self, node) -> bool:
        if node.op_type != "Conv":
            return False
        info = self.conv(node)
        return info.group > 1 and self.weights[info.weight].shape[1] == 1 and self.weights[info.weight].shape[0] == info.group

    def set_weight(self, name: str, value: np.ndarray) -> None:
        self.weights[name] = np.ascontiguousarray(value, dtype=self.weights[name].dtype)
        self.changed.add(name)

    def to_model(self, metadata: dict[str, str] | None = None, infer: bool = True):
        """The ONNX model with every edit written back; intermediate shapes dropped (re-inferred on load)."""
        import onnx
        from onnx import numpy_helper

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for initializer in model.graph.initializer:
            if initializer.name in self.changed:
                initializer.CopyFrom(numpy_helper.from_array(self.weights[initializer.name], initializer.name))
        for node in model.graph.node:
            if node.op_type == "Constant" and node.output[0] in self.changed:
                for attribute in node.attribute:
                    if attribute.name == "value":
                        attribute.t.CopyFrom(numpy_helper.from_array(self.weights[node.output[0]], node.output[0]))
            if node.name in self.groups:
                for attribute in node.attribute:
                    if attribute.name == "group":
                        attribute.i = self.groups[node.name]
        del model.graph.value_info[:]
        for entry in metadata.items() if metadata else ():
            prop = model.metadata_props.add()
            prop.key, prop.value = entry
        return onnx.shape_inference.infer_shapes(model) if infer else model

    def save(self, path: Path, metadata: dict[str, str] | None = None) -> Path:
        import onnx

        onnx.save(self.to_model(metadata), str(path))
        return path


def model_bytes(model) -> bytes:
    """The serialized model (deterministic for the same proto)."""
    return model.SerializeToString(deterministic=True)
