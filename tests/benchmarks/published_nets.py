"""Public architectures rebuilt as ONNX graphs with the onnx helper API, for comparing `sdk predict` with published
Jetson figures (tests/benchmarks/bench_published.py; the figures: tools/perf/data/published.yaml).

Weights are random (latency does not depend on their values); a batch-norm is folded into its convolution's bias, as
every exporter the published figures used does. Each builder follows the architecture's reference description:
ResNet-50 v1.5 and ResNet-34 (He et al.; MLPerf's ResNet-50 v1.5 has its stride on the 3x3), ResNeXt-50 32x4d, the
RetinaNet FPN head (torchvision's, as MLPerf's RetinaNet), SSD-MobileNetV1 (TensorFlow's object-detection API
configuration that MLPerf uses) and YOLO11 (tests/benchmarks/published_yolo.py). Not a benchmark itself.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


class Net:
    """A graph under construction: each tensor's (channels, height, width) tracked for the weights it needs."""

    def __init__(self, name: str, channels: int, height: int, width: int, seed: int = 0) -> None:
        self.name = name
        self.nodes: list = []
        self.weights: list = []
        self.shapes: dict[str, tuple[int, int, int]] = {"images": (channels, height, width)}
        self.outputs: list[str] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0
        self.shared: dict[str, list[str]] = {}

    def _id(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def node(self, op: str, inputs: list[str], shape: tuple[int, int, int] | None = None, outputs: int = 1, **attrs) -> list[str]:
        from onnx import helper

        name = self._id(op.lower())
        names = [f"{name}_out{i}" if outputs > 1 else f"{name}_out" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=name, **attrs))
        if shape is not None:
            for out in names:
                self.shapes[out] = shape
        return names

    def constant(self, values: np.ndarray, kind: str = "w") -> str:
        from onnx import numpy_helper

        name = self._id(kind)
        self.weights.append(numpy_helper.from_array(np.asarray(values), name))
        return name

    def conv(self, x: str, c_out: int, k: int = 1, s: int = 1, g: int = 1, act: str | None = "relu", bias: bool = True,
             shared: str = "") -> str:  # fmt: skip
        """A convolution (and its activation); `shared`: a key whose weights every convolution that names it uses."""
        c_in, h, w = self.shapes[x]
        params = self.shared.get(shared) if shared else None
        if params is None:
            weight = self.constant((self.rng.standard_normal((c_out, c_in // g, k, k)) * 0.05).astype(np.float32))
            params = [weight] + ([self.constant(np.zeros(c_out, np.float32), "b")] if bias else [])
            if shared:
                self.shared[shared] = params
        inputs = [x, *params]
        pad = k // 2
        out_h, out_w = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
        (y,) = self.node("Conv", inputs, (c_out, out_h, out_w), kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4, group=g)
        return self.act(y, act)

    def act(self, x: str, act: str | None) -> str:
        if act is None:
            return x
        if act == "relu":
            return self.node("Relu", [x], self.shapes[x])[0]
        if act == "relu6":
            low, high = self.constant(np.float32(0.0), "c"), self.constant(np.float32(6.0), "c")
            return self.node("Clip", [x, low, high], self.shapes[x])[0]
        if act == "silu":
            (sig,) = self.node("Sigmoid", [x], self.shapes[x])
            return self.node("Mul", [x, sig], self.shapes[x])[0]
        raise ValueError(act)

    def add(self, a: str, b: str, act: str | None = None) -> str:
        return self.act(self.node("Add", [a, b], self.shapes[a])[0], act)

    def maxpool(self, x: str, k: int, s: int) -> str:
        c, h, w = self.shapes[x]
        pad = k // 2
        shape = (c, (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1)
        return self.node("MaxPool", [x], shape, kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)[0]

    def concat(self, xs: list[str]) -> str:
        c = sum(self.shapes[x][0] for x in xs)
        _, h, w = self.shapes[xs[0]]
        return self.node("Concat", xs, (c, h, w), axis=1)[0]

    def split(self, x: str, sizes: list[int]) -> list[str]:
        _, h, w = self.shapes[x]
        outs = self.node("Split", [x, self.constant(np.asarray(sizes, np.int64), "s")], None, outputs=len(sizes), axis=1)
        for out, c in zip(outs, sizes, strict=True):
            self.shapes[out] = (c, h, w)
        return outs

    def upsample(self, x: str, factor: int = 2) -> str:
        c, h, w = self.shapes[x]
        scales = self.constant(np.asarray([1, 1, factor, factor], np.float32), "scales")
        return self.node("Resize", [x, "", scales], (c, h * factor, w * factor), mode="nearest")[0]

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.node("Reshape", [x, self.constant(np.asarray(shape, np.int64), "shape")])[0]

    def output(self, x: str) -> None:
        self.outputs.append(x)

    def save(self, path: Path, batch: int = 1) -> Path:
        """The model with its batch dimension open (`sdk predict --batch` sets it) unless `batch` is given."""
        import onnx
        from onnx import TensorProto, helper

        c, h, w = self.shapes["images"]
        graph = helper.make_graph(self.nodes, self.name, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", c, h, w])],
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in self.outputs], self.weights)  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        done = onnx.shape_inference.infer_shapes(model).graph
        inferred = {v.name: v for v in (*done.value_info, *done.output) if v.type.tensor_type.HasField("shape")}
        for output in model.graph.output:  # each output's inferred type, its batch dimension left open
            output.CopyFrom(inferred.get(output.name, output))
        onnx.save(model, str(path))
        return path


def resnet(net: Net, x: str, blocks: tuple[int, ...], bottleneck: bool, groups: int = 1, width: int = 64) -> list[str]:
    """A ResNet (or ResNeXt: `groups`, `width` per group x groups at the first stage) after its stem; the outputs of
    each stage (C2..C5). Strides on the 3x3 (v1.5)."""
    x = net.maxpool(net.conv(x, 64, 7, 2), 3, 2)
    stages = []
    for stage, count in enumerate(blocks):
        planes = 64 * 2**stage
        inner = width * groups * 2**stage if bottleneck else planes
        out = planes * 4 if bottleneck else planes
        for i in range(count):
            stride = 2 if i == 0 and stage > 0 else 1
            shortcut = x
            if i == 0 and (stride != 1 or net.shapes[x][0] != out):
                shortcut = net.conv(x, out, 1, stride, act=None)
            if bottleneck:
                y = net.conv(net.conv(x, inner, 1), inner, 3, stride, g=groups)
                y = net.conv(y, out, 1, act=None)
            else:
                y = net.conv(net.conv(x, planes, 3, stride), planes, 3, act=None)
            x = net.add(y, shortcut, "relu")
        stages.append(x)
    return stages


def resnet50(folder: Path) -> Path:
    """ResNet-50 v1.5 at 224x224 to its 1000-class logits (MLPerf's ends in an ArgMax/TopK that both the DLA-SW
    preparation and this graph leave out)."""
    net = Net("resnet50", 3, 224, 224)
    c5 = resnet(net, "images", (3, 4, 6, 3), bottleneck=True)[-1]
    pooled = net.node("GlobalAveragePool", [c5], (2048, 1, 1))[0]
    flat = net.node("Flatten", [pooled], axis=1)[0]
    weight = net.constant((net.rng.standard_normal((2048, 1000)) * 0.01).astype(np.float32))
    net.output(net.node("Gemm", [flat, weight, net.constant(np.zeros(1000, np.float32), "b")])[0])
    return net.save(folder / "resnet50.onnx")


def resnet34_backbone(folder: Path, height: int = 768, width: int = 1280) -> Path:
    """ResNet-34 to C5 (the DLA-SW 'ResNet-34 backbone', 1280x768)."""
    net = Net("resnet34_backbone", 3, height, width)
    net.output(resnet(net, "images", (3, 4, 6, 3), bottleneck=False)[-1])
    return net.save(folder / "resnet34_backbone.onnx")


def retinanet_head(net: Net, levels: list[str], anchors: int, classes: int) -> None:
    """torchvision's RetinaNet heads on each FPN level: four 3x3 256 convolutions and ReLU, then the class
    (anchors x classes) and box (anchors x 4) convolutions; the same weights' shapes per level."""
    for level in levels:
        for head, outputs in (("class", anchors * classes), ("box", anchors * 4)):
            y = level
            for i in range(4):
                y = net.conv(y, 256, 3, shared=f"{head}{i}")
            net.output(net.conv(y, outputs, 3, act=None, shared=f"{head}_out"))


def fpn(net: Net, c3: str, c4: str, c5: str) -> list[str]:
    """P3-P5 from C3-C5 (1x1 laterals, nearest 2x top-down sums, 3x3 outputs), P6 from P5 and P7 from P6 (3x3 s2,
    ReLU between): torchvision's RetinaNet FPN, 256 channels."""
    lateral5 = net.conv(c5, 256, 1, act=None)
    lateral4 = net.add(net.conv(c4, 256, 1, act=None), net.upsample(lateral5))
    lateral3 = net.add(net.conv(c3, 256, 1, act=None), net.upsample(lateral4))
    p3, p4, p5 = (net.conv(t, 256, 3, act=None) for t in (lateral3, lateral4, lateral5))
    p6 = net.conv(p5, 256, 3, 2, act=None)
    p7 = net.conv(net.act(p6, "relu"), 256, 3, 2, act=None)
    return [p3, p4, p5, p6, p7]


def retinanet_resnext50(folder: Path) -> Path:
    """MLPerf's RetinaNet: ResNeXt-50 32x4d, FPN P3-P7, 9 anchors, 264 OpenImages classes, 800x800; NMS left out."""
    net = Net("retinanet_resnext50", 3, 800, 800)
    _, c3, c4, c5 = resnet(net, "images", (3, 4, 6, 3), bottleneck=True, groups=32, width=4)
    retinanet_head(net, fpn(net, c3, c4, c5), 9, 264)
    return net.save(folder / "retinanet_resnext50.onnx")


def retinanet_resnet34(folder: Path) -> Path:
    """DLA-SW's RetinaNet ResNet-34 at 1280x768: the FPN and heads above on ResNet-34; 9 anchors and 3 classes (its
    Waymo case study's vehicle, pedestrian, cyclist: an assumption, the class count is not published)."""
    net = Net("retinanet_resnet34", 3, 768, 1280)
    _, c3, c4, c5 = resnet(net, "images", (3, 4, 6, 3), bottleneck=False)
    retinanet_head(net, fpn(net, c3, c4, c5), 9, 3)
    return net.save(folder / "retinanet_resnet34.onnx")


def ssd_mobilenet_v1(folder: Path) -> Path:
    """TensorFlow's ssd_mobilenet_v1_coco at 300x300 (MLPerf's SSD-MobileNet): MobileNetV1 (ReLU6, depthwise
    separable), feature maps at conv11 (19x19) and conv13 (10x10), four extra 1x1/3x3-s2 pairs (5, 3, 2, 1), 1x1 box
    predictors with 3 anchors on the first map and 6 on the others, 91 classes; the NMS left out."""
    net = Net("ssd_mobilenet_v1", 3, 300, 300)
    x = net.conv("images", 32, 3, 2, act="relu6")
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    maps = []
    for i, (c_out, stride) in enumerate(plan):
        x = net.conv(x, net.shapes[x][0], 3, stride, g=net.shapes[x][0], act="relu6")
        x = net.conv(x, c_out, 1, act="relu6")
        if i in (10, 12):
            maps.append(x)
    for inner, c_out in ((256, 512), (128, 256), (128, 256), (64, 128)):
        x = net.conv(net.conv(x, inner, 1, act="relu6"), c_out, 3, 2, act="relu6")
        maps.append(x)
    for i, feature in enumerate(maps):
        anchors = 3 if i == 0 else 6
        net.output(net.conv(feature, anchors * 91, 1, act=None))
        net.output(net.conv(feature, anchors * 4, 1, act=None))
    return net.save(folder / "ssd_mobilenet_v1.onnx")


def build(name: str, folder: Path) -> Path:
    """The ONNX file of architecture `name` (a key of BUILDERS) in `folder`, built once."""
    from tests.benchmarks.published_yolo import yolo11

    builders = {
        "resnet50": resnet50,
        "resnet34_backbone": resnet34_backbone,
        "retinanet_resnext50": retinanet_resnext50,
        "retinanet_resnet34": retinanet_resnet34,
        "ssd_mobilenet_v1": ssd_mobilenet_v1,
        **{f"yolo11{scale}": (lambda f, s=scale: yolo11(f, s)) for scale in "nsml"},
    }
    path = folder / f"{name}.onnx"
    return path if path.is_file() else builders[name](folder)


def parameters(path: Path) -> int:
    import onnx

    return sum(math.prod(t.dims) for t in onnx.load(str(path)).graph.initializer)
