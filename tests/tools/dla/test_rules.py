"""Each DLA restriction flips the verdict of one layer: the allowed variant runs on DLA, the other on
the GPU with the rule's reason. The layer under test sits between two convolutions."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto


def conv_kernel(b, ok):
    b.conv(kernel=5 if ok else 33, pads=[0] * 4)


def conv_stride(b, ok):
    b.conv(strides=[8, 8] if ok else [9, 9])


def conv_padding_range(b, ok):
    b.conv(kernel=32, pads=[31 if ok else 32] * 4)  # 32 also fails 'below the kernel'; 0-31 is what the guide states


def conv_padding_below_kernel(b, ok):
    b.conv(kernel=3, pads=[2 if ok else 3] * 4)


def conv_dilation(b, ok):
    b.conv(kernel=1, pads=[0] * 4, dilations=[32, 32] if ok else [33, 33])


def conv_output_channels(b, ok):
    b.conv(out_channels=8192 if ok else 8193, kernel=1)
    b.conv(in_channels=8192 if ok else 8193, kernel=1)


def pooling_window(b, ok):
    b.add("MaxPool", kernel_shape=[8, 8] if ok else [9, 9], strides=[1, 1])


def global_pool_is_a_reduce(b, ok):
    """onnx-tensorrt builds GlobalAveragePool / GlobalMaxPool as Reduce layers (builtin_op_importers.cpp 8.6-GA:1671-1704,
    onnxOpImporters.cpp 10.1-GA:2085-2133); DLA reduces with MAX only (TensorRT Operators, Reduce, DLA Support)."""
    b.add("GlobalMaxPool" if ok else "GlobalAveragePool")


def reduce_operation(b, ok):
    b.add("ReduceMax" if ok else "ReduceMean", axes=[2, 3], keepdims=1)


def reduce_batch(b, ok):
    b.add("ReduceMax", axes=[1] if ok else [0, 1], keepdims=1)


def activation_kind(b, ok):
    b.add("Sigmoid" if ok else "Elu")


def clip_minimum(b, ok):
    b.add("Clip", b.const(np.float32(0.0 if ok else -1.0)), b.const(np.float32(6.0)))


def clip_maximum(b, ok):
    b.add("Clip", b.const(np.float32(0.0)), b.const(np.float32(127.0 if ok else 200.0)))


def elementwise_operation(b, ok):
    """NvInfer.h 8.6.1:2941 / 10.3.0:2470: "DLA supports only kSUM, kPROD, kMAX, kMIN, and kSUB." """
    b.add("Sub" if ok else "Div", b.const(np.full((1, 8, 1, 1), 2.0, np.float32)))


def elementwise_power(b, ok):
    b.add("Mul" if ok else "Pow", b.const(np.full((1, 8, 1, 1), 2.0, np.float32)))


def unary_abs(b, ok):
    """NvInfer.h 8.6.1:3726 / 10.3.0:2808: "When running this layer on DLA, only UnaryOperation::kABS is supported." """
    b.add("Abs" if ok else "Exp")


def elementwise_broadcast(b, ok):
    b.add("Add", b.const(np.ones((1, 8, 1, 1) if ok else (1, 1, 40, 1), np.float32)))


def concat_axis(b, ok):
    first = b.last
    second = b.conv()
    b.add("Concat", inputs=[first, second], axis=1 if ok else 2)
    b.add("Conv", b.const(np.zeros((8, 16 if ok else 8, 1, 1), np.float32)))


def lrn_window(b, ok):
    b.add("LRN", size=5 if ok else 4)


def concat_inputs(b, ok):
    first = b.last
    b.add("Concat", inputs=[first, first] if ok else [first], axis=1)
    b.add("Conv", b.const(np.zeros((8, 16 if ok else 8, 1, 1), np.float32)))


def resize_scale(b, ok):
    b.add("Resize", "", b.const(np.array([1, 1, 2, 2] if ok else [1, 1, 1.5, 1.5], np.float32)), mode="nearest")


# NvInfer.h 8.6.1:4986-5046 / 10.3.0:4077-4137 (IResizeLayer on DLA).
def resize_sizes(b, ok):
    if ok:
        b.add("Resize", "", b.const(np.array([1, 1, 2, 2], np.float32)), mode="nearest")
    else:  # setOutputDimensions "is not supported" on DLA; the parser makes sizes a shape input
        b.add("Resize", "", "", b.const(np.array([1, 8, 80, 80], np.int64)), mode="nearest")


def resize_transform(b, ok):
    modes = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"} if ok else {"coordinate_transformation_mode": "align_corners"}
    b.add("Resize", "", b.const(np.array([1, 1, 2, 2], np.float32)), mode="nearest", **modes)


def resize_nearest_rounding(b, ok):
    rounding = "round_prefer_ceil" if ok else "ceil"  # kHALF_UP is listed for half_pixel, kCEIL is not
    b.add("Resize", "", b.const(np.array([1, 1, 2, 2], np.float32)), mode="nearest", nearest_mode=rounding)


def resize_linear_transform(b, ok):
    transform = "pytorch_half_pixel" if ok else "asymmetric"  # bilinear: kHALF_PIXEL with kFORMULA or kUPPER only
    b.add("Resize", "", b.const(np.array([1, 1, 2, 2], np.float32)), mode="linear", coordinate_transformation_mode=transform)


def resize_linear_scale(b, ok):
    b.add("Resize", "", b.const(np.array([1, 1, 4, 4] if ok else [1, 1, 8, 8], np.float32)), mode="linear")


def resize_nearest_scale(b, ok):
    b.shape_hw = (8, 8)
    b.add("Resize", "", b.const(np.array([1, 1, 32, 32] if ok else [1, 1, 33, 33], np.float32)), mode="nearest")


# NvInfer.h 8.6.1:2356-2364 / 10.3.0:1985-1993 (ISoftMaxLayer on DLA).
def softmax_axis(b, ok):
    b.add("Softmax", axis=1 if ok else 0)


def softmax_size(b, ok):
    b.shape_hw = (1, 1024 if ok else 1025)  # C = 8 > 1 beside the axis: at most 1024
    b.add("Softmax", axis=3)


def softmax_size_alone(b, ok):
    b.shape_hw = (1, 1)
    b.add("Conv", b.const(np.zeros((8192 if ok else 8193, 8, 1, 1), np.float32)))
    b.add("Softmax", axis=1)  # H = W = 1 beside the axis: up to 8192
    b.add("Conv", b.const(np.zeros((8, 8192 if ok else 8193, 1, 1), np.float32)))


# NvInfer.h 8.6.1:4232-4238 / 10.3.0:3285-3291 (ISliceLayer on DLA).
def slice_steps(b, ok):
    b.add("Slice", b.const(np.array([0])), b.const(np.array([40])), b.const(np.array([2])), b.const(np.array([1 if ok else 2])))


def slice_batch(b, ok):
    b.add("Conv", b.const(np.zeros((8, 8, 1, 1), np.float32)))
    if ok:
        b.add("Slice", b.const(np.array([0, 0])), b.const(np.array([1, 4])), b.const(np.array([0, 1])))
        b.add("Concat", inputs=[b.last, b.last], axis=1)
    else:  # two images in, one out: the first dimension is sliced
        b.add("Concat", inputs=[b.last, b.last], axis=0)
        b.add("Slice", b.const(np.array([1])), b.const(np.array([2])), b.const(np.array([0])))


# NvInfer.h 8.6.1:2753-2811 / 10.3.0:2279-2337 (IDeconvolutionLayer on DLA).
def deconv_padding(b, ok):
    b.add("ConvTranspose", b.const(np.zeros((8, 8, 2, 2), np.float32)), strides=[2, 2], pads=[0, 0, 0, 0] if ok else [1, 1, 1, 1])


def deconv_kernel(b, ok):
    kernel = (1, 64) if ok else (2, 64)  # 64 only with 1 in the other dimension
    b.add("ConvTranspose", b.const(np.zeros((8, 8, *kernel), np.float32)), strides=[1, 1])


def shuffle_rank(b, ok):
    b.add("Reshape", b.const(np.array([1, 8, 256, 1] if ok else [1, 8, 256])))
    b.add("Reshape", b.const(np.array([1, 8, 16, 16])))


CASES = {
    "conv_kernel": (conv_kernel, "kernel sizes are 1-32"),
    "conv_stride": (conv_stride, "strides are 1-8"),
    "conv_padding_range": (conv_padding_range, "padding is 0-31"),
    "conv_padding_below_kernel": (conv_padding_below_kernel, "padding must be smaller than the kernel"),
    "conv_dilation": (conv_dilation, "dilation is 1-32"),
    "conv_output_channels": (conv_output_channels, "at most 8192 output channels"),
    "pooling_window": (pooling_window, "pooling windows are 1-8"),
    "global_pool_is_a_reduce": (global_pool_is_a_reduce, "DLA reduces with MAX only"),
    "reduce_operation": (reduce_operation, "DLA reduces with MAX only"),
    "reduce_batch": (reduce_batch, "never the batch"),
    "activation_kind": (activation_kind, "Elu has no DLA layer"),
    "clip_minimum": (clip_minimum, "Clip only as clipped ReLU"),
    "clip_maximum": (clip_maximum, "maximum in [1, 127]"),
    "elementwise_operation": (elementwise_operation, "Div has no DLA layer"),
    "elementwise_power": (elementwise_power, "Pow has no DLA layer"),
    "unary_abs": (unary_abs, "Exp has no DLA layer"),
    "resize_sizes": (resize_sizes, "constant scales only"),
    "resize_transform": (resize_transform, "DLA resizes nearest with asymmetric/floor"),
    "resize_nearest_rounding": (resize_nearest_rounding, "DLA resizes nearest with asymmetric/floor"),
    "resize_linear_transform": (resize_linear_transform, "bilinear with half_pixel or pytorch_half_pixel"),
    "resize_linear_scale": (resize_linear_scale, "bilinear resize scales are 1-4"),
    "resize_nearest_scale": (resize_nearest_scale, "nearest resize scales are 1-32"),
    "softmax_axis": (softmax_axis, "channel or a spatial axis"),
    "softmax_size": (softmax_size, "at most 1024 long"),
    "softmax_size_alone": (softmax_size_alone, "at most 8192 long"),
    "slice_steps": (slice_steps, "stride 1"),
    "slice_batch": (slice_batch, "does not slice the first dimension"),
    "deconv_padding": (deconv_padding, "takes no padding"),
    "deconv_kernel": (deconv_kernel, "kernels are 1-32, or 1x64/96/128"),
    "lrn_window": (lrn_window, "LRN windows are 3, 5, 7 or 9"),
    "concat_inputs": (concat_inputs, "at least 2 inputs"),
    "elementwise_broadcast": (elementwise_broadcast, "same shape, N,C,1,1 or N,1,1,1"),
    "concat_axis": (concat_axis, "concatenates along channels only"),
    "resize_scale": (resize_scale, "resize scales are integers"),
    "shuffle_rank": (shuffle_rank, "shuffles produce 4-D tensors"),
}


def build(builder, case, ok):
    add_layers, _ = CASES[case]
    probe = builder()
    add_layers(probe, ok)  # a dry run learns the input plane a case needs
    b = builder(shape=(1, 8, *getattr(probe, "shape_hw", (40, 40))))
    b.conv()
    first = len(b.nodes)
    add_layers(b, ok)
    under_test = [node.name for node in b.nodes[first:]]
    b.conv(in_channels=b_channels(b), kernel=1)
    return b.model(), under_test


def b_channels(b) -> int:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(b.model())
    shapes = {v.name: v.type.tensor_type.shape.dim for v in (*inferred.graph.value_info, *inferred.graph.output)}
    return shapes[b.last][1].dim_value


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_restriction_flips_the_verdict(builder, analysis, case):
    expected_reason = CASES[case][1]
    allowed, names = build(builder, case, ok=True)
    report = analysis(allowed)
    assert all(v.device == "DLA" for v in report.layers), [(v.name, v.reason) for v in report.layers if v.device != "DLA"]
    assert len(report.subgraphs) == 1 and report.transitions == 0

    violating, names = build(builder, case, ok=False)
    report = analysis(violating)
    on_gpu = [v for v in report.layers if v.device == "GPU"]
    assert on_gpu and {v.name for v in on_gpu} <= set(names), [(v.name, v.reason) for v in on_gpu]
    assert any(expected_reason in v.reason for v in on_gpu), [v.reason for v in on_gpu]
    assert report.transitions >= 2  # DLA -> GPU -> DLA around the offending layer


def test_a_gather_between_convolutions_splits_the_subgraph_and_is_named(builder, analysis):
    b = builder()
    b.conv()
    b.add("Gather", b.const(np.arange(8)), axis=1)
    b.conv()
    report = analysis(b.model())
    assert [v.device for v in report.layers] == ["DLA", "GPU", "DLA"]
    assert len(report.subgraphs) == 2 and report.transitions == 2
    assert any("Gather gather_" in note and "splits DLA subgraphs [0] -> [1]" in note and "Slice" in note for note in report.recommendations)

    b = builder()
    b.conv()
    b.add("Relu")
    b.conv()
    report = analysis(b.model())
    assert len(report.subgraphs) == 1 and report.transitions == 0 and not report.recommendations


def test_a_subgraph_never_depends_on_itself_through_the_gpu(builder, analysis):
    """conv -> Gather (GPU) -> Add(conv, gather): the Add cannot join the conv's loadable."""
    for middle, subgraphs in (("Gather", 2), ("Relu", 1)):
        b = builder()
        first = b.conv()
        extra = (b.const(np.arange(8)),) if middle == "Gather" else ()
        side = b.add(middle, *extra, **({"axis": 1} if middle == "Gather" else {}))
        b.add("Add", inputs=[first, side])
        report = analysis(b.model())
        assert len(report.subgraphs) == subgraphs, middle


@pytest.mark.parametrize(
    ("fact", "shape", "dtype", "reason"),
    [
        ("static", ("N", 8, 16, 16), TensorProto.FLOAT, "static shapes"),
        ("float", (1, 8, 16, 16), TensorProto.INT32, "FP16/INT8 tensors only"),
        ("max_rank", (1, 2, 8, 16, 16), TensorProto.FLOAT, "at most 4 dimensions"),
        ("max_chw", (1, 1, 1, 8193), TensorProto.FLOAT, "at most 8192"),
    ],
)
def test_general_restrictions(builder, analysis, fact, shape, dtype, reason):
    bad = builder(shape=shape, dtype=dtype)
    bad.add("Relu")
    report = analysis(bad.model())
    assert report.layers[0].device == "GPU" and reason in report.layers[0].reason
    good = builder(shape=(1, 8, 16, 16))
    good.add("Relu")
    assert analysis(good.model()).layers[0].device == "DLA"


def test_more_subgraphs_than_a_core_holds_are_flagged(builder, analysis):
    def chain(splits):
        b = builder()
        b.conv()
        for _ in range(splits):
            b.add("Gather", b.const(np.arange(8)), axis=1)
            b.conv()
        return analysis(b.model())

    within, beyond = chain(15), chain(16)
    assert len(within.subgraphs) == 16 and not any("loadables a core can hold" in n for n in within.recommendations)
    assert len(beyond.subgraphs) == 17 and any("17 DLA subgraphs exceed the 16" in n for n in beyond.recommendations)


def test_softmax_before_opset_13_is_flattened_to_2d_by_the_parser(builder, analysis):
    """onnx2trt_utils.cpp (8.6-GA) addSoftmax: before opset 13 the input "will be coerced into" 2-D, so no 4-D DLA softmax."""
    import onnx

    b = builder()
    b.conv()
    b.add("Softmax", axis=1)
    b.conv()
    model = b.model()
    assert analysis(model).layers[1].device == "DLA"  # opset 17: one axis, 4-D
    model.opset_import[0].version = 12
    verdict = analysis(onnx.shape_inference.infer_shapes(model)).layers[1]
    assert verdict.device == "GPU" and "flattened to 2-D" in verdict.reason and "opset 13" in verdict.fix


@pytest.mark.parametrize(
    ("attributes", "combination"),
    [
        # builtin_op_importers.cpp 8.6-GA, Resize: ONNX attributes -> (transformation, selector, rounding)
        ({}, "nearest/kHALF_PIXEL/kFORMULA/kHALF_DOWN"),  # ONNX defaults: half_pixel, round_prefer_floor
        ({"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, "nearest/kASYMMETRIC/kFORMULA/kFLOOR"),
        ({"coordinate_transformation_mode": "tf_half_pixel_for_nn"}, "nearest/kHALF_PIXEL/kFORMULA/kCEIL"),
        ({"coordinate_transformation_mode": "pytorch_half_pixel"}, "nearest/kHALF_PIXEL/kUPPER/kHALF_DOWN"),
        ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, "linear/kALIGN_CORNERS/kFORMULA"),
    ],
)
def test_resize_attributes_map_onto_tensorrts_settings_as_the_parser_sets_them(builder, attributes, combination):
    from tools.dla.graph import graph_from_model

    b = builder()
    b.add("Resize", "", b.const(np.array([1, 1, 2, 2], np.float32)), **{"mode": "nearest", **attributes})
    assert graph_from_model(b.model()).nodes[0].facts["resize_combination"] == combination


def test_a_fact_that_cannot_be_known_keeps_its_layer_off_the_dla(builder, analysis):
    """A rule's fact the graph cannot show (here a Reshape's output shape, lost to shape inference) fails the rule:
    TensorRT would not place what cannot be shown to fit. The same layer with its shape known runs on DLA."""
    b = builder()
    b.conv()
    b.add("Reshape", b.const(np.array([1, 8, 256, 1])))
    reshaped = b.last
    b.add("Reshape", b.const(np.array([1, 8, 16, 16])))
    b.conv()
    known = b.model()
    report = analysis(known)
    assert all(v.device == "DLA" for v in report.layers), [(v.name, v.reason) for v in report.layers]
    unknown = onnx.ModelProto()
    unknown.CopyFrom(known)
    kept = [v for v in unknown.graph.value_info if v.name != reshaped]
    assert len(kept) == len(unknown.graph.value_info) - 1
    del unknown.graph.value_info[:]
    unknown.graph.value_info.extend(kept)
    layer = next(v for v in analysis(unknown).layers if v.name.startswith("reshape_") and v.name.endswith(reshaped.removeprefix("t")))
    assert layer.device == "GPU" and "out_rank = None" in layer.reason, layer.reason
