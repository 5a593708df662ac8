"""The DLA restrictions as data: one rule table per TensorRT series, read by tools/dla/analysis.py.

Source: TensorRT developer guide, "DLA Supported Layers and Restrictions" (8.6 and 10.x editions),
General Restrictions and the per-layer list (docs.nvidia.com/deeplearning/tensorrt/latest/
inference-library/dla-layer-restrictions.html, Table "DLA Layer Support Summary"). A rule names a fact that tools/dla/graph.py reads off
an ONNX node (kernel, stride, pads, ...) and the values DLA accepts; the analysis code knows only
the four check kinds below, never a layer. Where no difference between 8.6 and 10.x was found in
the guides, the two tables hold the same rules (copied by construction, so a change is one line).
TensorRT 11 has a table for completeness, but no DLA on any platform this SDK targets
(sdk/engine/platforms.py says why), so its verdicts are "GPU: no DLA in TensorRT 11".

ONNX ops map onto TensorRT layers the way the ONNX parser builds them: Conv -> Convolution,
Relu/Clip/... -> Activation, Add/Mul/... -> ElementWise, BatchNormalization -> Scale,
Reshape/Transpose/Flatten/Squeeze/Unsqueeze -> Shuffle. Constant nodes are weights, not layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Check:
    """One restriction: `fact` must satisfy `kind` with `value`.

    kinds: `range` (every element in [lo, hi]), `one_of` (in a set), `below` (every element
    strictly below the same element of another fact), `equals`.
    """

    fact: str
    kind: str
    value: object
    why: str  # what the guide says, shown as the reason when the check fails
    fix: str = ""  # what to change in the model


@dataclass(frozen=True)
class LayerRule:
    layer: str  # the TensorRT layer the ONNX op becomes
    checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class RuleTable:
    series: str
    source: str
    general: tuple[Check, ...]
    layers: dict[str, LayerRule] = field(default_factory=dict)
    loadables_per_core: int = 16
    no_layer_fix: dict[str, str] = field(default_factory=dict)  # ops without a DLA layer -> recommendation


FOUR_D = Check("rank", "equals", 4, "DLA layers take 4-D (NCHW) tensors", "keep the tensor 4-D (NCHW)")
SPATIAL_2D = Check("spatial_rank", "equals", 2, "DLA supports 2-D spatial layers only")

GENERAL = (
    Check("static", "equals", True, "DLA needs static shapes (min = opt = max)", "prepare the model with static input shapes"),
    Check("float", "equals", True, "DLA runs FP16/INT8 tensors only (no INT32/INT64/bool)", "compute indices and shapes outside the network"),
    Check("max_rank", "range", (0, 4), "DLA tensors have at most 4 dimensions", "fold extra dimensions into the batch or channels"),
    Check("batch", "range", (1, 4096), "the DLA batch size is at most 4096"),
    Check("max_chw", "range", (1, 8192), "DLA non-batch dimensions are at most 8192"),
)

CONVOLUTION = LayerRule(
    "Convolution",
    (
        SPATIAL_2D,
        Check("kernel", "range", (1, 32), "DLA convolution kernel sizes are 1-32", "split a large kernel into smaller ones"),
        Check("stride", "range", (1, 8), "DLA convolution strides are 1-8", "use a smaller stride followed by pooling"),
        Check("pads", "range", (0, 31), "DLA convolution padding is 0-31"),
        Check("pads", "below", "kernel", "DLA convolution padding must be smaller than the kernel", "pad explicitly or use a larger kernel"),
        Check("dilation", "range", (1, 32), "DLA convolution dilation is 1-32"),
        Check("out_channels", "range", (1, 8192), "DLA convolutions have at most 8192 output channels"),
    ),
)

DECONVOLUTION = LayerRule(
    "Deconvolution",
    (
        SPATIAL_2D,
        Check("kernel", "range", (1, 32), "DLA deconvolution kernel sizes are 1-32"),
        Check("stride", "range", (1, 32), "DLA deconvolution strides are 1-32"),
        Check("pads", "range", (0, 0), "DLA deconvolution takes no padding", "crop the output with a Slice outside DLA or change the padding"),
        Check("dilation", "range", (1, 1), "DLA deconvolution has no dilation"),
        Check("groups", "range", (1, 1), "DLA deconvolution has no groups"),
    ),
)

POOLING = LayerRule(
    "Pooling",
    (
        SPATIAL_2D,
        Check("window", "range", (1, 8), "DLA pooling windows are 1-8", "pool in several smaller steps"),
        Check("stride", "range", (1, 16), "DLA pooling strides are 1-16"),
        Check("pads", "range", (0, 7), "DLA pooling padding is 0-7"),
    ),
)

ACTIVATION = LayerRule("Activation", (FOUR_D,))
CLIP = LayerRule(
    "Activation",
    (
        FOUR_D,
        Check("clip_min", "equals", 0.0, "DLA takes Clip only as clipped ReLU (min 0)", "use Relu, or a Clip with min 0"),
        Check("clip_max", "range", (1.0, 127.0), "DLA clipped ReLU needs a maximum in [1, 127]"),
    ),
)
ELEMENTWISE = LayerRule(
    "ElementWise",
    (
        FOUR_D,
        Check("broadcast", "one_of", ("same", "per_channel", "per_tensor"), "DLA element-wise operands are the same shape, N,C,1,1 or N,1,1,1",
              "broadcast the operand to the full shape (a constant) or per channel"),
    ),
)
SHUFFLE = LayerRule(
    "Shuffle",
    (
        FOUR_D,
        Check("out_rank", "equals", 4, "DLA shuffles produce 4-D tensors", "reshape to a 4-D tensor and leave the final reshape to the decoder"),
        Check("batch_kept", "equals", True, "DLA shuffles keep the batch dimension"),
    ),
)

LAYERS_8_6 = {
    "Conv": CONVOLUTION,
    "ConvTranspose": DECONVOLUTION,
    "MaxPool": POOLING,
    "AveragePool": POOLING,
    "GlobalAveragePool": POOLING,  # a pooling layer with the whole plane as its window
    "GlobalMaxPool": POOLING,
    "Relu": ACTIVATION,
    "Sigmoid": ACTIVATION,
    "Tanh": ACTIVATION,
    "LeakyRelu": ACTIVATION,
    "Clip": CLIP,
    "PRelu": LayerRule("ParametricReLU", (FOUR_D,)),
    "Add": ELEMENTWISE,
    "Sub": ELEMENTWISE,
    "Mul": ELEMENTWISE,
    "Max": ELEMENTWISE,
    "Min": ELEMENTWISE,
    "Div": ELEMENTWISE,  # the guide's ElementWise list: Sum, Sub, Product, Max, Min, Div, Pow
    "Pow": ELEMENTWISE,
    "LRN": LayerRule("LRN", (FOUR_D, Check("size", "one_of", (3, 5, 7, 9), "DLA LRN windows are 3, 5, 7 or 9 (across channels)"))),
    "BatchNormalization": LayerRule("Scale", (FOUR_D,)),
    "Concat": LayerRule(
        "Concatenation",
        (
            FOUR_D,
            Check("axis", "equals", 1, "DLA concatenates along channels only", "concatenate along channels, or after the DLA part"),
            Check("inputs", "range", (2, 1 << 16), "DLA concatenations take at least 2 inputs", "drop the single-input Concat"),
        ),
    ),
    "Resize": LayerRule(
        "Resize",
        (
            FOUR_D,
            Check("resize_mode", "one_of", ("nearest", "linear"), "DLA resizes nearest or bilinear only"),
            Check("scales_nc", "range", (1.0, 1.0), "DLA resizes H and W only"),
            Check("scales_hw_integer", "equals", True, "DLA resize scales are integers", "use an integer upsampling factor"),
            Check("scales_hw", "range", (1.0, 32.0), "DLA resize scales are 1-32"),
        ),
    ),
    "Softmax": LayerRule("SoftMax", (FOUR_D, Check("axis", "equals", 1, "DLA softmax runs along channels (Orin only)"))),
    "Reshape": SHUFFLE,
    "Transpose": SHUFFLE,
    "Flatten": SHUFFLE,
    "Squeeze": SHUFFLE,
    "Unsqueeze": SHUFFLE,
}

NO_LAYER_FIX = {
    "Gather": "replace the Gather by a Slice, or move it behind the DLA part (after the last convolution)",
    "Shape": "prepare the model with static shapes so the Shape folds away",
    "Cast": "keep the whole network in floating point",
    "Exp": "move the exponential into the decoder (host or GPU)",
}

DLA_GUIDE = "TensorRT developer guide, DLA Supported Layers and Restrictions"

RULE_TABLES = {
    "8.6": RuleTable("8.6", f"{DLA_GUIDE} (8.6)", GENERAL, dict(LAYERS_8_6), no_layer_fix=NO_LAYER_FIX),
    "10": RuleTable("10", f"{DLA_GUIDE} (10.x)", GENERAL, dict(LAYERS_8_6), no_layer_fix=NO_LAYER_FIX),
    # Kept for the day DLA returns: the last documented (10.x) restrictions.
    "11": RuleTable("11", f"{DLA_GUIDE} (10.x; 11.0-11.4 have no DLA on JetPack/DRIVE OS)", GENERAL, dict(LAYERS_8_6), no_layer_fix=NO_LAYER_FIX),
}
