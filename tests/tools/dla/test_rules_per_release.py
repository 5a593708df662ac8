"""DLA rules that depend on the TensorRT patch release, and the matrix products and comparisons NVIDIA's DLA operator
table (Deep-Learning-Accelerator-SW, operators/README.md) lists (decision 0415)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
@pytest.mark.parametrize("tensorrt", ["8.6.2", "10.3"])
def test_a_matrix_product_with_constant_weights_runs_on_dla_a_computed_one_does_not(builder, analysis, op, tensorrt):
    """NVIDIA's DLA operator table: Gemm and MatMul are native where "the second input must be a constant" (TensorRT
    translates them to a 1x1 convolution); two activations multiplied have no DLA layer."""
    b = builder(shape=(1, 8))
    b.add(op, b.const(np.zeros((8, 4), np.float32)))
    verdict = analysis(b.model(), tensorrt=tensorrt).layers[0]
    assert verdict.device == "DLA" and verdict.layer == "Convolution", verdict.reason
    b = builder(shape=(1, 8))
    if op == "MatMul":
        b.add(op, inputs=["x", b.add("Transpose", perm=[1, 0])])
    else:
        b.add(op, inputs=["x", "x"], transB=1)
    verdict = next(layer for layer in analysis(b.model(), tensorrt=tensorrt).layers if layer.op == op)
    assert verdict.device == "GPU" and "constant second input" in verdict.reason and "constant" in verdict.fix


@pytest.mark.parametrize(
    ("op", "tensorrt", "device"),
    [
        ("GlobalMaxPool", "8.6.2", "GPU"),  # JetPack 6.0
        ("GlobalMaxPool", "8.6.11", "GPU"),  # DRIVE OS 6.0.8.1
        ("GlobalMaxPool", "8.6.12", "DLA"),  # DRIVE OS 6.0.9: native from here (DLA operator table)
        ("GlobalMaxPool", "10.3", "DLA"),
        ("ReduceMax", "8.6.1", "GPU"),
        ("ReduceMax", "8.6.12", "DLA"),
    ],
)
def test_reduce_max_runs_on_dla_from_tensorrt_8_6_12(builder, analysis, op, tensorrt, device):
    b = builder()
    b.conv()
    b.add(op, **({"axes": [2, 3]} if op == "ReduceMax" else {}))
    verdict = analysis(b.model(), tensorrt=tensorrt).layers[1]
    assert verdict.device == device, verdict.reason
    if device == "GPU":
        assert "before 8.6.12" in verdict.fix and "MaxPool" in verdict.fix


def comparison(builder, op: str, cast: bool):
    b = builder()
    b.conv()
    b.add(op, b.const(np.zeros((1, 8, 1, 1), np.float32)))
    if cast:
        b.add("Cast", to=TensorProto.FLOAT)
    b.conv()
    return b.model()


@pytest.mark.parametrize(
    ("op", "tensorrt", "device"),
    [("Equal", "8.6.2", "DLA"), ("Greater", "8.6.2", "GPU"), ("Less", "8.6.11", "GPU"), ("Greater", "8.6.12", "DLA"), ("Less", "10.3", "DLA")],
)
def test_comparisons_run_on_dla_in_int8_when_cast_right_after(builder, analysis, op, tensorrt, device):
    """DLA operator table: Equal native, Greater and Less from 8.6.12; developer guide (Comparison): INT8 only and the
    output "must be cast to FP16/INT8 immediately"."""
    verdict = analysis(comparison(builder, op, cast=True), tensorrt=tensorrt).layers[1]
    assert verdict.device == device, verdict.reason
    if device == "DLA":
        uncast = analysis(comparison(builder, op, cast=False), tensorrt=tensorrt).layers[1]
        assert uncast.device == "GPU" and "cast to FP16/INT8 immediately" in uncast.reason
        fp16 = analysis(comparison(builder, op, cast=True), tensorrt=tensorrt, precision="fp16").layers[1]
        assert fp16.device == "GPU" and "INT8 only" in fp16.reason
