"""The DLA restrictions as data: one rule table per TensorRT series, read by tools/dla/analysis.py.

Sources, per rule (quoted in its `why`):
- TensorRT developer guide, "DLA Supported Layers and Restrictions" (8.6 and 10.x editions): the
  general restrictions and the per-layer list.
- The DLA notes in TensorRT's own header, include/NvInfer.h at the v8.6.1 and v10.3.0 tags of
  github.com/NVIDIA/TensorRT (JetPack 6.0 ships 8.6.2, JetPack 6.1 / 6.2 ship 10.3.0). The line numbers
  are cited as `NvInfer.h 8.6.1:L / 10.3.0:L`; where both headers say the same, one rule serves both tables.
- How the ONNX parser builds layers: onnx-tensorrt `builtin_op_importers.cpp` (release/8.6-GA) and
  `onnxOpImporters.cpp` (10.1-GA), and `onnx2trt_utils.cpp` (8.6-GA).
- TensorRT Operators documentation, Reduce, "DLA Support" (10.x).
- NVIDIA's DLA operator table (github.com/NVIDIA/Deep-Learning-Accelerator-SW, operators/README.md, "Orin DLA support
  through TensorRT", June 2024): GlobalMaxPool and ReduceMax native "as of TensorRT 8.6.12" (older releases:
  reconstruct with MaxPool), Greater and Less "as of TensorRT 8.6.12", Equal native, Gemm and MatMul native where
  "the second input must be a constant" ("TensorRT can translate this to a 1x1 Conv internally"). The patch level
  matters within 8.6 (JetPack 6.0 ships 8.6.2, DRIVE OS 6.0.9 ships 8.6.12): `rule_table` picks the table per release.
- TensorRT developer guide, "DLA Supported Layers and Restrictions", Comparison (Equal, Greater, Less): INT8 only,
  "Output must be cast to FP16/INT8 immediately".
A rule names a fact that tools/dla/graph.py reads off an ONNX node (kernel, stride, pads, ...) and the
values DLA accepts; the analysis code knows only the check kinds below, never a layer.
TensorRT 11 has a table for 11.4.1 on Jetson AGX Orin (sdk/engine/platforms.py says where DLA exists);
it holds the last documented (10.x) restrictions.

ONNX ops map onto TensorRT layers the way the ONNX parser builds them: Conv -> Convolution,
Relu/Clip/... -> Activation, Add/Mul/... -> ElementWise, BatchNormalization -> Scale,
Reshape/Transpose/Flatten/Squeeze/Unsqueeze -> Shuffle, GlobalAveragePool/GlobalMaxPool/Reduce* ->
Reduce (not Pooling), Abs -> Unary, Slice -> Slice. Constant nodes are weights, not layers.
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
    when: tuple[str, object] | None = None  # (fact, value): the check applies only where that fact has that value


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

# NvInfer.h 8.6.1:2753-2811 / 10.3.0:2279-2337: 2-D kernel and stride in [1,32], or 64, 96 or 128 in one
# dimension with 1 in the other; padding 0; 8.6.1:2595 / 10.3.0:2123: one group.
DECONV_LARGE = ((1, 64), (64, 1), (1, 96), (96, 1), (1, 128), (128, 1))
DECONVOLUTION = LayerRule(
    "Deconvolution",
    (
        SPATIAL_2D,
        Check("kernel_hw_class", "one_of", ("small", "long"), "DLA deconvolution kernels are 1-32, or 1x64/96/128 (NvInfer.h 10.3.0:2279)"),
        Check("stride_hw_class", "one_of", ("small", "long"), "DLA deconvolution strides are 1-32, or 1x64/96/128 (NvInfer.h 10.3.0:2306)"),
        Check("pads", "range", (0, 0), "DLA deconvolution takes no padding (NvInfer.h 10.3.0:2337)", "crop the output with a Slice, or no padding"),
        Check("dilation", "range", (1, 1), "DLA deconvolution has no dilation"),
        Check("groups", "range", (1, 1), "DLA deconvolution has one group (NvInfer.h 10.3.0:2123)"),
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
# NvInfer.h 8.6.1:2941 / 10.3.0:2470: "DLA supports only kSUM, kPROD, kMAX, kMIN, and kSUB." (no Div, no Pow)
ELEMENTWISE = LayerRule(
    "ElementWise",
    (
        FOUR_D,
        Check(
            "broadcast",
            "one_of",
            ("same", "per_channel", "per_tensor"),
            "DLA element-wise operands are the same shape, N,C,1,1 or N,1,1,1",
            "broadcast the operand to the full shape (a constant) or per channel",
        ),
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

# onnx-tensorrt builds GlobalAveragePool / GlobalMaxPool "via Reduce layers rather than Pooling layers"
# (builtin_op_importers.cpp 8.6-GA:1671-1704, onnxOpImporters.cpp 10.1-GA:2085-2133); DLA reduces with MAX
# only, "where any combination of the CHW is reduced" (TensorRT Operators, Reduce, DLA Support).
REDUCE = LayerRule(
    "Reduce",
    (
        FOUR_D,
        Check(
            "reduce_op",
            "equals",
            "max",
            "DLA reduces with MAX only; the ONNX parser builds this as a Reduce, not a Pooling layer",
            "use AveragePool with the whole plane as its window (at most 8x8) instead of GlobalAveragePool / ReduceMean",
        ),
        Check("reduce_batch", "equals", False, "DLA reduces over C, H and W, never the batch"),
    ),
)

# NvInfer.h 8.6.1:4986-5046 / 10.3.0:4077-4137. The parser maps ONNX attributes onto these settings
# (builtin_op_importers.cpp 8.6-GA:3767-3832): sizes -> a shape input (setOutputDimensions is "not supported"
# on DLA), constant scales -> setScales.
RESIZE_COMBINATIONS = (
    "nearest/kASYMMETRIC/kFORMULA/kFLOOR",
    "nearest/kHALF_PIXEL/kFORMULA/kHALF_DOWN",
    "nearest/kHALF_PIXEL/kFORMULA/kHALF_UP",
    "linear/kHALF_PIXEL/kFORMULA",
    "linear/kHALF_PIXEL/kUPPER",
)
RESIZE = LayerRule(
    "Resize",
    (
        FOUR_D,
        Check(
            "resize_input",
            "equals",
            "scales",
            "DLA resizes by constant scales only, not by sizes or computed scales (NvInfer.h 10.3.0:4099)",
            "give Resize constant scales instead of sizes",
        ),
        Check(
            "resize_combination",
            "one_of",
            RESIZE_COMBINATIONS,
            "DLA resizes nearest with asymmetric/floor or half_pixel/round_prefer_floor|ceil, bilinear with half_pixel or pytorch_half_pixel "
            "(NvInfer.h 10.3.0:4077)",
            "use mode nearest with coordinate_transformation_mode asymmetric and nearest_mode floor",
        ),
        Check("scales_nc", "range", (1.0, 1.0), "DLA resizes H and W only (NvInfer.h 10.3.0:4132)"),
        Check("scales_hw_integer", "equals", True, "DLA resize scales are integers (NvInfer.h 10.3.0:4132)", "use an integer upsampling factor"),
        Check("scales_hw", "range", (1.0, 32.0), "DLA nearest resize scales are 1-32 (NvInfer.h 10.3.0:4132)", when=("resize_mode", "nearest")),
        Check("scales_hw", "range", (1.0, 4.0), "DLA bilinear resize scales are 1-4 (NvInfer.h 10.3.0:4132)", when=("resize_mode", "linear")),
    ),
)

# NvInfer.h 8.6.1:2355-2364 (not on Xavier) / 10.3.0:1985-1993.
SOFTMAX = LayerRule(
    "SoftMax",
    (
        FOUR_D,
        Check(
            "softmax_flattened",
            "equals",
            False,
            "ONNX Softmax before opset 13 is flattened to 2-D by the parser (onnx2trt_utils.cpp addSoftmax)",
            "export with opset 13 or later",
        ),
        Check("axis", "one_of", (1, 2, 3), "DLA softmax runs along the channel or a spatial axis (NvInfer.h 10.3.0:1985)"),
        Check(
            "softmax_axis_size",
            "range",
            (1, 8192),
            "DLA softmax axes are at most 8192 long where the other C/H/W are 1 (NvInfer.h 10.3.0:1987)",
            when=("softmax_others_one", True),
        ),
        Check(
            "softmax_axis_size",
            "range",
            (1, 1024),
            "DLA softmax axes are at most 1024 long where another C/H/W exceeds 1 (NvInfer.h 10.3.0:1990)",
            when=("softmax_others_one", False),
        ),
    ),
)

# NvInfer.h 8.6.1:4232-4238 / 10.3.0:3285-3291.
SLICE = LayerRule(
    "Slice",
    (
        FOUR_D,
        Check("slice_constant", "equals", True, "DLA slices need build-time constant starts, ends, axes and steps (NvInfer.h 10.3.0:3286)"),
        Check("slice_steps", "range", (1, 1), "DLA slices have stride 1 (NvInfer.h 10.3.0:3289)"),
        Check("slice_batch", "equals", False, "DLA does not slice the first dimension (NvInfer.h 10.3.0:3290)"),
    ),
)

LAYERS_8_6 = {
    "Conv": CONVOLUTION,
    "ConvTranspose": DECONVOLUTION,
    "MaxPool": POOLING,
    "AveragePool": POOLING,
    "GlobalAveragePool": REDUCE,
    "GlobalMaxPool": REDUCE,
    "ReduceMax": REDUCE,
    "ReduceMean": REDUCE,
    "ReduceSum": REDUCE,
    "ReduceMin": REDUCE,
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
    # NvInfer.h 8.6.1:3726 / 10.3.0:2808: "When running this layer on DLA, only UnaryOperation::kABS is supported."
    "Abs": LayerRule("Unary", (FOUR_D,)),
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
    "Resize": RESIZE,
    "Softmax": SOFTMAX,
    "Slice": SLICE,
    "Reshape": SHUFFLE,
    "Transpose": SHUFFLE,
    "Flatten": SHUFFLE,
    "Squeeze": SHUFFLE,
    "Unsqueeze": SHUFFLE,
}

# Equal / Greater / Less (DLA operator table; developer guide, DLA Supported Layers, Comparison): INT8 only, and the
# boolean output cast to FP16/INT8 right away (the parser makes an ElementWise layer of kEQUAL, kGREATER, kLESS).
COMPARISON = LayerRule(
    "ElementWise",
    (
        FOUR_D,
        Check(
            "precision", "equals", "int8", "DLA compares in INT8 only (DLA Supported Layers: Comparison)", "build INT8, or compare after the DLA part"
        ),
        Check(
            "cast_after",
            "equals",
            True,
            "a DLA comparison's output must be cast to FP16/INT8 immediately (DLA Supported Layers: Comparison)",
            "follow the comparison with a Cast to float",
        ),
    ),
)
# MatMul / Gemm with a constant second input: a fully connected layer, "TensorRT can translate this to a 1x1 Conv
# internally" (DLA operator table: Native); with a computed second input there is no DLA layer.
MATRIX_MULTIPLY = LayerRule(
    "Convolution",
    (
        Check(
            "weights_constant",
            "equals",
            True,
            "DLA runs MatMul/Gemm only with a constant second input, as a 1x1 convolution (NVIDIA DLA operator table)",
            "make the second operand a constant (weights), or move the product after the DLA part",
        ),
    ),
)
LAYERS_8_6 |= {"Equal": COMPARISON, "MatMul": MATRIX_MULTIPLY, "Gemm": MATRIX_MULTIPLY}

NO_LAYER_FIX = {
    "Gather": "replace the Gather by a Slice, or move it behind the DLA part (after the last convolution)",
    # Element-wise operations DLA lacks (NvInfer.h 10.3.0:2470: only kSUM, kPROD, kMAX, kMIN, kSUB).
    "Div": "multiply by the reciprocal (Mul by a constant) instead of dividing",
    "Pow": "write x^2 as Mul(x, x), or move the power into the decoder",
    "Shape": "prepare the model with static shapes so the Shape folds away",
    "Cast": "keep the whole network in floating point",
    "Exp": "move the exponential into the decoder (host or GPU)",
}

DLA_GUIDE = "TensorRT developer guide, DLA Supported Layers and Restrictions"

RULE_TABLES = {
    "8.6": RuleTable("8.6", f"{DLA_GUIDE} (8.6)", GENERAL, dict(LAYERS_8_6), no_layer_fix=NO_LAYER_FIX),
    "10": RuleTable("10", f"{DLA_GUIDE} (10.x)", GENERAL, {**LAYERS_8_6, "Greater": COMPARISON, "Less": COMPARISON}, no_layer_fix=NO_LAYER_FIX),
    # 11.4.1 on Jetson AGX Orin: the last documented (10.x) restrictions.
    "11": RuleTable(
        "11",
        f"{DLA_GUIDE} (10.x; DLA on Jetson AGX Orin from 11.4.1)",
        GENERAL,
        {**LAYERS_8_6, "Greater": COMPARISON, "Less": COMPARISON},
        no_layer_fix=NO_LAYER_FIX,
    ),
}
# Within 8.6 the DLA layers grew with the patch release (DLA operator table): Reduce MAX (GlobalMaxPool, ReduceMax) and
# Greater / Less are native from 8.6.12 (DRIVE OS 6.0.9); JetPack 6.0's 8.6.2 and DRIVE OS 6.0.7/6.0.8's 8.6.10/8.6.11
# have neither.
REDUCE_MAX_FROM_8_6 = 12
BEFORE_8_6_12 = {
    "GlobalMaxPool": "TensorRT 8.6 before 8.6.12 has no DLA Reduce: decompose into MaxPool nodes (at most 8x8 windows each)",
    "ReduceMax": "TensorRT 8.6 before 8.6.12 has no DLA Reduce: decompose into MaxPool nodes (at most 8x8 windows each)",
    "Greater": "DLA compares with Greater from TensorRT 8.6.12: compare after the DLA part",
    "Less": "DLA compares with Less from TensorRT 8.6.12: compare after the DLA part",
}


def rule_table(tensorrt) -> RuleTable:
    """The rule table of one TensorRT release (sdk.engine.platforms.TensorRTVersion): its series' table, with the
    8.6 layers adjusted to the patch release."""
    table = RULE_TABLES[tensorrt.series]
    if tensorrt.series != "8.6":
        return table
    if tensorrt.patch >= REDUCE_MAX_FROM_8_6:
        layers = {**table.layers, "Greater": COMPARISON, "Less": COMPARISON}
        return RuleTable(f"8.6.{tensorrt.patch}", f"{table.source}, DLA operator table for 8.6.12", table.general, layers, no_layer_fix=NO_LAYER_FIX)
    layers = {op: rule for op, rule in table.layers.items() if op not in BEFORE_8_6_12}
    fixes = {**NO_LAYER_FIX, **BEFORE_8_6_12}
    return RuleTable(f"8.6.{tensorrt.patch}", f"{table.source}, DLA operator table before 8.6.12", table.general, layers, no_layer_fix=fixes)
