"""The Q/DQ model of one weighted layer alone (a sensitivity probe), written without quantizing the whole model.

`write_qdq(model, out, ranges, method, only=[layer])` hands ONNX Runtime's quantizer the whole model: it infers
every shape, computes the quantization parameters of all its tensors, saves and reloads it (0.11 CPU-s a layer for
the example detector, 88 layers a search). Here the quantizer gets a model of the layer alone (its input, weights,
bias, and an Identity standing for whatever reads its output), and what it writes there is spliced into the whole
model: the new initializers (the weight and bias quantized, the scales), the new Q/DQ nodes, the layer's inputs and
every reader of its input and output tensors rewired, as the quantizer rewires them; ONNX Runtime's own topological
order and initializer cleanup finish it. The quantizer's numbers are its own, so the probe is the same model, byte for
byte (tests/tools/int8/test_probe_qdq.py compares it with `write_qdq(only=[layer])`).

Where the layer does not fit that shape (shared weights, a graph input or output of its own, an opset below 13, an
op other than Conv), `probe_bytes` returns None and the caller writes the probe the whole way.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tools.int8.qdq_opset import QDQ_OPSET


class OneLayerProbes:
    """The shape-inferred float model (ONNX Runtime's own `load_model_with_shape_infer`, once), and a probe per layer."""

    def __init__(self, model: Path, ort_ranges: Path, method: str, weight_scales: dict[str, list[dict]]) -> None:
        from onnxruntime.quantization.quant_utils import load_model_with_shape_infer

        self.model, self.ort_ranges, self.method, self.weight_scales = Path(model), Path(ort_ranges), method, weight_scales
        with tempfile.TemporaryDirectory(prefix=".probe-") as private:
            own = Path(private) / self.model.name
            own.symlink_to(self.model.resolve())
            self.base = load_model_with_shape_infer(own)
        opset = next((o.version for o in self.base.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.usable = opset >= QDQ_OPSET
        self.consumers: dict[str, list[int]] = {}
        for index, node in enumerate(self.base.graph.node):
            for name in node.input:
                self.consumers.setdefault(name, []).append(index)
        self.initializers = {init.name: init for init in self.base.graph.initializer}
        self.values = {v.name: v for v in (*self.base.graph.value_info, *self.base.graph.input, *self.base.graph.output)}
        self.graph_outputs = {o.name for o in self.base.graph.output}
        self.ranges = json.loads(self.ort_ranges.read_text())  # ONNX Runtime's format: {"CLS": ..., "data": {tensor: range}}

    def _fits(self, node) -> bool:
        if not self.usable or node.op_type != "Conv" or len(node.input) not in (2, 3) or len(node.output) != 1:
            return False
        x, *params = node.input
        if x in self.initializers or x not in self.values or node.output[0] in self.graph_outputs or x in self.graph_outputs:
            return False
        return all(p in self.initializers and len(self.consumers.get(p, [])) == 1 for p in params)

    def probe_bytes(self, layer: str) -> bytes | None:
        """The serialized Q/DQ model of `layer` alone, or None where it must be written the whole way."""
        nodes = list(self.base.graph.node)
        found = [i for i, n in enumerate(nodes) if n.name == layer]
        if len(found) != 1 or not self._fits(nodes[found[0]]):
            return None
        node = nodes[found[0]]
        small = self._quantized_alone(node)
        if small is None:
            return None
        return self._spliced(found[0], node, small)

    def _quantized_alone(self, node):
        """The quantizer's Q/DQ model of a graph of this node alone, its output read by an Identity."""
        import onnx

        from tools.int8.calibrate import write_qdq

        x, y = node.input[0], node.output[0]
        reader = onnx.helper.make_node("Identity", [y], [y + "__probe_read"], name=node.name + "__probe_read")
        graph = onnx.helper.make_graph(
            [node, reader],
            "probe",
            [self.values[x]],
            [onnx.helper.make_tensor_value_info(y + "__probe_read", self.values[y].type.tensor_type.elem_type, None)],
            [self.initializers[p] for p in node.input[1:]],
        )
        alone = onnx.helper.make_model(graph, opset_imports=list(self.base.opset_import), ir_version=self.base.ir_version)
        with tempfile.TemporaryDirectory(prefix=".probe-") as private:
            source, written, ranges = (Path(private) / name for name in ("alone.onnx", "alone.qdq.onnx", "ranges.json"))
            onnx.save(alone, str(source))
            # The ranges of this graph's tensors only: the quantizer computes parameters for every range it is given.
            ranges.write_text(json.dumps({**self.ranges, "data": {t: self.ranges["data"][t] for t in (x, y) if t in self.ranges["data"]}}))
            scales = {p: self.weight_scales[p] for p in node.input[1:] if p in self.weight_scales}
            write_qdq(source, written, ranges, self.method, only=[node.name], weight_scales=scales)
            return onnx.load(str(written))

    def _spliced(self, index: int, node, small) -> bytes | None:
        import onnx
        from onnxruntime.quantization.onnx_model import ONNXModel

        x, y = node.input[0], node.output[0]
        renamed = {}  # tensor -> what its readers read now (the quantizer rewires every reader of x and y)
        quantized_node = None
        added = []
        for n in small.graph.node:
            if n.name == node.name:
                quantized_node = n
            elif n.name != node.name + "__probe_read":
                added.append(n)
            else:
                renamed[y] = n.input[0]
        if quantized_node is None or y not in renamed:
            return None
        renamed[x] = quantized_node.input[0]
        model = onnx.ModelProto()
        model.CopyFrom(self.base)
        graph = model.graph
        for i, other in enumerate(graph.node):
            if i == index:
                other.CopyFrom(quantized_node)
                continue
            for k, name in enumerate(other.input):
                if name in renamed and name != renamed[name]:
                    other.input[k] = renamed[name]
        graph.node.extend(added)
        # The layer's float weight and bias make way for the quantized ones (ONNX Runtime removes them likewise).
        replaced = set(node.input[1:]) - {init.name for init in small.graph.initializer}
        for k in sorted((k for k, init in enumerate(graph.initializer) if init.name in replaced), reverse=True):
            del graph.initializer[k]
        graph.initializer.extend(init for init in small.graph.initializer if init.name not in self.initializers)
        wrapped = ONNXModel(model)  # as the quantizer finishes: unused initializers out, then its topological order
        wrapped.clean_initializers()
        wrapped.topological_sort()
        model.producer_name, model.producer_version = small.producer_name, small.producer_version
        return model.SerializeToString()
