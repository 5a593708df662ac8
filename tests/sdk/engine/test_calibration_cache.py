"""TensorRT calibration cache: header per TensorRT version, scales bit for bit, clear refusals."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from sdk.engine.calibration_cache import CalibrationCache, hex_to_scale, scale_to_hex, tensorrt_version_code
from sdk.errors import ModelError


def test_known_values():
    assert scale_to_hex(1 / 127) == "3c010204"
    assert scale_to_hex(0.0) == "0"  # no padding, so zero is a single digit
    assert hex_to_scale("3c010204") == np.float32(1 / 127)


@pytest.mark.parametrize(
    ("version", "code"),
    [
        # TensorRT 8.6.1 include/NvInferRuntimeBase.h:85: kNV_TENSORRT_VERSION_IMPL = MAJOR * 1000 + MINOR * 100 + PATCH
        ("8.6.1", 8601),
        ("8.6.2", 8602),  # JetPack 6.0
        ("8.6.12", 8612),  # DRIVE OS 6.0.9.1: the patch has two digits, and the formula still adds it
        # TensorRT 10.3.0 include/NvInferRuntimeBase.h:89-93: NV_TENSORRT_VERSION_INT = MAJOR * 10000 + MINOR * 100 + PATCH
        ("10.3", 100300),  # the only 10.3 release
        ("10.3.0", 100300),
        ("10.3.0.30", 100300),  # what dpkg reports on JetPack 6.1 (the build number is not in the header)
        ("10.13.3", 101303),
        ("11.4.1", 110401),  # TensorRT 11.0 include/NvInferRuntimeBase.h:98-102: the same formula as 10.x
    ],
)
def test_the_header_number_is_nv_tensorrt_version_of_the_exact_release(version, code):
    assert tensorrt_version_code(version) == code
    assert CalibrationCache.from_amax({"x": 1.0}, version).render().startswith(f"TRT-{code}-EntropyCalibration2\n")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("8.6", "8.6.1 .*8.6.2 .*JetPack 6.0.*8.6.12"),  # a header without the patch would fit none of them
        ("9.9", "not a release the SDK knows"),
        ("10.3.1", "not a release the SDK knows"),
        ("10", "not like"),
        ("ten", "not like"),
        ("7.1.3", "not a release the SDK knows"),
        ("10.3.0.1.2", "not like"),
    ],
)
def test_versions_the_sdk_does_not_know_exactly_are_refused_with_the_known_list(bad, message):
    with pytest.raises(ModelError, match=message) as caught:
        tensorrt_version_code(bad)
    assert "8.6.2" in caught.value.hint and "10.3.0" in caught.value.hint  # the known list, in the hint


def test_round_trip_is_bit_exact_amax_over_127():
    rng = np.random.default_rng(0)
    amax = {f"tensor_{i}:0": float(v) for i, v in enumerate(rng.uniform(1e-4, 300, 500).astype(np.float32))}
    amax["zero:0"] = 0.0
    text = CalibrationCache.from_amax(amax, "10.3").render()
    assert text.splitlines()[0] == "TRT-100300-EntropyCalibration2"
    back = CalibrationCache.parse(text)
    for name, value in amax.items():
        expected = np.float32(value) / np.float32(127)  # float32 arithmetic, as TensorRT does it
        assert struct.pack(">f", back.scales[name]) == struct.pack(">f", expected), name
    assert CalibrationCache.parse(text).render() == text


def test_header_for_tensorrt_8_6_and_minmax():
    text = CalibrationCache.from_amax({"x": 1.0}, "8.6.1", "MinMaxCalibration").render()
    assert text == "TRT-8601-MinMaxCalibration\nx: 3c010204\n"


def test_a_cache_for_another_tensorrt_is_refused_by_name():
    cache = CalibrationCache.parse(CalibrationCache.from_amax({"x": 1.0}, "8.6.1").render())
    with pytest.raises(ModelError, match=r"written for TensorRT code 8601, the target runs TensorRT 10.3 \(100300\)"):
        cache.check_for("10.3", ["x"])


def test_missing_tensors_are_refused():
    cache = CalibrationCache.from_amax({"x": 1.0}, "10.3")
    with pytest.raises(ModelError, match="no scale for 2 tensor"):
        cache.check_for("10.3", ["x", "y", "z"])
    cache.check_for("10.3", ["x"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("TRT-100300-Mystery\nx: 3c010204\n", "not a TensorRT header"),
        ("garbage\n", "not a TensorRT header"),
        ("TRT-100300-EntropyCalibration2\nx 3c010204\n", "not `tensor: hex`"),
        ("TRT-100300-EntropyCalibration2\nx: zz\n", "not a float32 in hex"),
        ("TRT-100300-EntropyCalibration2\nx: 1ffffffff\n", "not a float32 in hex"),
        ("TRT-100300-EntropyCalibration2\nx: 1\nx: 2\n", "appears twice"),
    ],
)
def test_corrupted_caches_are_refused(text, message):
    with pytest.raises(ModelError, match=message):
        CalibrationCache.parse(text)


def test_invalid_ranges_are_refused():
    with pytest.raises(ModelError, match="not a finite"):
        CalibrationCache.from_amax({"x": float("nan")}, "10.3")


def test_ranges_tensorrt_fuses_are_tied():
    """Pooling: "the dynamic ranges for input and output tensors must be equal" (NvInfer.h 8.6.1:1735, 10.3.0:1450);
    concatenation: its inputs are written into the output, in the output's scale."""
    from sdk.engine.calibration_cache import fusion_ties, tie_ranges

    nodes = [
        ("Conv", ("x",), ("a",)),
        ("MaxPool", ("a",), ("p",)),
        ("Conv", ("x",), ("b",)),
        ("Concat", ("b", "c"), ("cat",)),
        ("Relu", ("cat",), ("r",)),
    ]
    ties = fusion_ties(nodes)
    assert ties == (("a", ("p",)), ("cat", ("b", "c")))
    amax = {"x": 1.0, "a": 6.0, "p": 5.5, "b": 2.0, "c": 9.0, "cat": 8.0, "r": 8.0}
    tied = tie_ranges(amax, ties)
    assert tied["p"] == tied["a"] == 6.0  # the pooling output takes its input's range
    assert tied["b"] == tied["c"] == tied["cat"] == 8.0  # the inputs take the concatenation's
    assert tied["x"] == 1.0 and tied["r"] == 8.0  # untouched
    # A pooled tensor that is also concatenated: one group, at the largest anchor's range.
    both = tie_ranges({"a": 6.0, "p": 5.5, "q": 1.0, "cat": 4.0}, fusion_ties([("MaxPool", ("a",), ("p",)), ("Concat", ("p", "q"), ("cat",))]))
    assert both == {"a": 6.0, "p": 6.0, "q": 6.0, "cat": 6.0}


def test_the_parsers_own_tensors_get_scales_where_their_values_are_known():
    from sdk.engine.calibration_cache import NetworkLayer, complete_for_network

    cache = CalibrationCache.from_amax({"a": 1.0}, "10.3")
    layers = [
        NetworkLayer("Constant", (), ("(Unnamed Layer* 0) [Constant]_output",), 127.0),
        NetworkLayer("Shuffle", ("(Unnamed Layer* 0) [Constant]_output",), ("(Unnamed Layer* 1) [Shuffle]_output",)),
        NetworkLayer("Shuffle", ("a",), ("a_reshaped",)),
        NetworkLayer("Gather", ("a",), ("g",)),
    ]
    completed, missing = complete_for_network(cache, layers)
    assert completed.scales["(Unnamed Layer* 0) [Constant]_output"] == 1.0 == completed.scales["(Unnamed Layer* 1) [Shuffle]_output"]
    assert completed.scales["a_reshaped"] == completed.scales["a"]
    assert missing == ["g"]  # no value known: left out, as TensorRT then warns and keeps it out of INT8


def test_a_dla_build_ties_each_elementwise_layers_two_inputs_at_the_larger_range():
    """NvInfer.h, IElementWiseLayer: "When running this layer on the DLA with Int8 data type, the dynamic ranges of two
    input tensors shall be equal. If the dynamic ranges are generated using calibrator, the largest value shall be used.\""""
    from sdk.engine.calibration_cache import elementwise_ties, fusion_ties, tie_ranges

    nodes = [("Conv", ("x",), ("a",)), ("Conv", ("x",), ("b",)), ("Add", ("a", "b"), ("s",)), ("Mul", ("s", "w"), ("m",)), ("Relu", ("m",), ("r",))]
    assert fusion_ties(nodes) == ()  # the GPU takes each input's own scale
    amax = {"x": 1.0, "a": 2.0, "b": 7.0, "s": 8.0, "m": 3.0, "r": 3.0}
    tied = tie_ranges(amax, elementwise_ties(nodes))
    assert tied["a"] == tied["b"] == 7.0  # the larger of the two
    assert tied["s"] == 8.0 and tied["m"] == 3.0 and "w" not in tied  # a constant operand has no calibrated range
