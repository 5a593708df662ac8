"""How the adapter maps a plan onto each TensorRT major's builder API, against a stand-in module.

The stand-in has only what the real API of that major has where it matters (11 has no
EXPLICIT_BATCH, no BuilderFlag.INT8/FP16, no calibrator base: the conformity test proves those
facts on the real wheels), so using a removed name fails here as it would on the device.
"""

from __future__ import annotations

import enum
import json
from types import SimpleNamespace

import pytest

from sdk.engine.build_plan import plan_build
from sdk.engine.platforms import TensorRTVersion
from sdk.engine.trt_adapter import _build
from sdk.errors import EngineBuildError
from sdk.spec.schema import DlaPlacement


class Tensor(SimpleNamespace):
    pass


LayerType = enum.Enum("LayerType", ["CONVOLUTION", "ACTIVATION", "CONSTANT", "SHUFFLE", "ELEMENTWISE", "GATHER"])


class Layer:
    def __init__(self, name, inputs, outputs, dla_ok=True, kind=LayerType.CONVOLUTION, weights=None):
        self.name, self.inputs, self.outputs, self.dla_ok = name, [Tensor(name=n) for n in inputs], [Tensor(name=n) for n in outputs], dla_ok
        self.num_inputs, self.num_outputs = len(self.inputs), len(self.outputs)
        self.type, self._weights = kind, weights

    def get_input(self, i):
        return self.inputs[i]

    def get_output(self, i):
        return self.outputs[i]

    def set_output_type(self, i, dtype):
        self.outputs[i].dtype = dtype


class IConstantLayer(Layer):
    """What `layer.__class__ = trt.IConstantLayer` makes of a constant: its weights become readable."""

    @property
    def weights(self):
        return SimpleNamespace(numpy=lambda: self._weights)


def fake_tensorrt(series: str, layers):
    calls = []
    flags = {"8.6": ["EXPLICIT_BATCH", "STRONGLY_TYPED"], "10": ["EXPLICIT_BATCH", "STRONGLY_TYPED"], "11": ["STRONGLY_TYPED"]}[series]
    builder_flags = ["GPU_FALLBACK", "PREFER_PRECISION_CONSTRAINTS", "SPARSE_WEIGHTS"] + ([] if series == "11" else ["INT8", "FP16"])

    class Network:
        num_layers = len(layers)

        def get_layer(self, i):
            return layers[i]

    class Config:
        def __setattr__(self, name, value):
            calls.append((name, value))

        def set_memory_pool_limit(self, pool, size):
            calls.append(("pool", pool.name, size))

        def set_flag(self, flag):
            calls.append(("flag", flag.name))

        def can_run_on_DLA(self, layer):
            return layer.dla_ok

        def create_timing_cache(self, data):
            return SimpleNamespace(serialize=lambda: b"timing")

        def set_timing_cache(self, cache, ignore_mismatch):
            calls.append(("timing_cache", ignore_mismatch))

        def add_optimization_profile(self, profile):
            calls.append(("profile", profile.shapes))

    class Builder:
        num_DLA_cores = 2

        def __init__(self, logger):
            pass

        def create_network(self, flags):
            calls.append(("network_flags", flags))
            return Network()

        def create_builder_config(self):
            return Config()

        def create_optimization_profile(self):
            profile = SimpleNamespace(shapes=[])
            profile.set_shape = lambda *shape: profile.shapes.append(shape)
            return profile

        def build_serialized_network(self, network, config):
            calls.append(("build",))
            return b"ftrt-engine"

    class Runtime:
        def __init__(self, logger):
            pass

        def __setattr__(self, name, value):
            calls.append((f"runtime.{name}", value))

        def deserialize_cuda_engine(self, serialized):
            calls.append(("deserialize", serialized))
            inspector = SimpleNamespace(get_engine_information=lambda fmt: json.dumps({"Layers": [{"Name": "conv", "Format": fmt.name}]}))
            return SimpleNamespace(create_engine_inspector=lambda: inspector)

    trt = SimpleNamespace(
        Logger=type("Logger", (), {"WARNING": 2, "__init__": lambda self, level: None}),
        Runtime=Runtime,
        ProfilingVerbosity=enum.Enum("ProfilingVerbosity", ["LAYER_NAMES_ONLY", "DETAILED", "NONE"]),
        LayerInformationFormat=enum.Enum("LayerInformationFormat", ["ONELINE", "JSON"]),
        Builder=Builder,
        OnnxParser=lambda network, logger: SimpleNamespace(parse_from_file=lambda path: True, num_errors=0),
        NetworkDefinitionCreationFlag=enum.IntEnum("NetworkDefinitionCreationFlag", {name: i for i, name in enumerate(flags)}),
        BuilderFlag=enum.Enum("BuilderFlag", builder_flags),
        MemoryPoolType=enum.Enum("MemoryPoolType", ["WORKSPACE", "DLA_MANAGED_SRAM"]),
        DeviceType=enum.Enum("DeviceType", ["GPU", "DLA"]),
        LayerType=LayerType,
        IConstantLayer=IConstantLayer,
        float16="float16",
    )
    if series != "11":
        trt.IInt8EntropyCalibrator2 = type("IInt8EntropyCalibrator2", (), {})
        trt.IInt8MinMaxCalibrator = type("IInt8MinMaxCalibrator", (), {})
    return trt, calls


LAYERS = [Layer("conv", ["x"], ["a"]), Layer("relu", ["a"], ["b"]), Layer("gather", ["b"], ["c"], dla_ok=False), Layer("conv2", ["c"], ["y"])]


def build(series, tensorrt, precision, dla, tmp_path, contract=None, layers=LAYERS):
    plan = plan_build(TensorRTVersion.parse(tensorrt), {"x": (1, 3, 8, 8)}, precision, dla, dla_cores=2)
    (tmp_path / "calib.cache").write_bytes(b"TRT-100300-EntropyCalibration2\nx: 3c010204\n")
    trt, calls = fake_tensorrt(series, layers)
    built = _build(trt, plan, tmp_path / "m.onnx", tmp_path / "calib.cache", None, contract)
    return built, calls


@pytest.mark.parametrize(("series", "tensorrt", "network_flags"), [("8.6", "8.6.1", 1 << 0), ("10", "10.3", 0)])
def test_implicit_int8_on_dla_for_8_6_and_10(tmp_path, series, tensorrt, network_flags):
    built, calls = build(series, tensorrt, "int8", DlaPlacement(core=1), tmp_path)
    assert ("network_flags", network_flags) in calls
    assert ("flag", "INT8") in calls and ("flag", "FP16") in calls and ("flag", "GPU_FALLBACK") in calls
    calibrator = dict(c for c in calls if len(c) == 2 and c[0] == "int8_calibrator")["int8_calibrator"]
    assert calibrator.read_calibration_cache().startswith(b"TRT-100300-EntropyCalibration2") and calibrator.get_batch(["x"]) is None
    assert type(calibrator).__mro__[1].__name__ == "IInt8EntropyCalibrator2"
    assert ("DLA_core", 1) in calls and ("pool", "DLA_MANAGED_SRAM", 1 << 20) in calls and ("pool", "WORKSPACE", 1 << 30) in calls
    assert ("profile", [("x", (1, 3, 8, 8), (1, 3, 8, 8), (1, 3, 8, 8))]) in calls
    assert (built.placement.dla_layers, built.placement.gpu_layers, built.placement.subgraphs, built.placement.transitions) == (3, 1, 2, 2)
    assert built.plan == b"ftrt-engine" and built.timing_cache == b"timing"
    # The engine's own layer list, with the detail the inspector gives only at DETAILED verbosity.
    assert ("profiling_verbosity", trt_enum(calls, "profiling_verbosity")) in calls and trt_enum(calls, "profiling_verbosity").name == "DETAILED"
    assert ("runtime.DLA_core", 1) in calls and ("deserialize", b"ftrt-engine") in calls
    assert json.loads(built.layers) == {"Layers": [{"Name": "conv", "Format": "JSON"}]}


def trt_enum(calls, name):
    return dict(c for c in calls if len(c) == 2 and c[0] == name)[name]


def test_tensorrt_11_builds_strongly_typed_without_flags_or_calibrator(tmp_path):
    built, calls = build("11", "11.4", "int8", None, tmp_path)
    assert ("network_flags", 1 << 0) in calls  # STRONGLY_TYPED is member 0 of the stand-in
    assert not [c for c in calls if c[0] in ("flag", "int8_calibrator", "default_device_type")]
    assert built.placement.dla_layers == 0 and built.placement.gpu_layers == len(LAYERS)


def test_the_contract_is_checked_with_tensorrt_answers_before_building(tmp_path):
    with pytest.raises(EngineBuildError, match=r"TensorRT: 3 layers on DLA, 1 on GPU.*1 layers on the GPU with gpu_fallback: forbidden"):
        build("10", "10.3", "int8", DlaPlacement(core=0), tmp_path, contract=DlaPlacement(gpu_fallback="forbidden"))
    _, calls = build("10", "10.3", "int8", DlaPlacement(core=0), tmp_path, contract=DlaPlacement(max_gpu_layers=1))
    assert ("build",) in calls


def test_a_min_max_cache_is_replayed_through_the_min_max_calibrator(tmp_path):
    plan = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "int8", calibrator="MinMaxCalibration")
    (tmp_path / "calib.cache").write_bytes(b"TRT-100300-MinMaxCalibration\n")
    trt, calls = fake_tensorrt("10", LAYERS)
    _build(trt, plan, tmp_path / "m.onnx", tmp_path / "calib.cache", None, None)
    calibrator = dict(c for c in calls if len(c) == 2 and c[0] == "int8_calibrator")["int8_calibrator"]
    assert type(calibrator).__mro__[1].__name__ == "IInt8MinMaxCalibrator"


def test_an_implicit_int8_build_without_its_cache_is_refused(tmp_path):
    plan = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "int8")
    trt, calls = fake_tensorrt("10", LAYERS)
    with pytest.raises(EngineBuildError, match="needs the calibration cache"):
        _build(trt, plan, tmp_path / "m.onnx", None, None, None)
    assert ("build",) not in calls


def test_layers_kept_out_of_int8_are_fp16_constraints_in_an_implicit_build(tmp_path):
    layers = [Layer("conv", ["x"], ["a"]), Layer("relu", ["a"], ["b"]), Layer("conv2", ["b"], ["y"])]
    plan = plan_build(
        TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "int8", predicted=(("conv", "Convolution", "GPU"),), higher_precision=("conv",)
    )
    assert plan.layers[0].precision == "fp16" and plan.higher_precision == ("conv",)
    (tmp_path / "calib.cache").write_bytes(b"TRT-100300-EntropyCalibration2\n")
    trt, calls = fake_tensorrt("10", layers)
    _build(trt, plan, tmp_path / "m.onnx", tmp_path / "calib.cache", None, None)
    assert layers[0].precision == "float16" and layers[0].outputs[0].dtype == "float16" and not hasattr(layers[2], "precision")
    assert ("flag", "PREFER_PRECISION_CONSTRAINTS") in calls
    stale = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "int8", higher_precision=("no_such_layer",))
    with pytest.raises(EngineBuildError, match="not in the network"):
        _build(trt, stale, tmp_path / "m.onnx", tmp_path / "calib.cache", None, None)


def test_in_a_strongly_typed_build_kept_layers_are_simply_float():
    plan = plan_build(
        TensorRTVersion.parse("11.4"), {"x": (1, 3, 8, 8)}, "int8", predicted=(("conv", "Convolution", "GPU"),), higher_precision=("conv",)
    )
    assert plan.layers[0].precision == "fp32" and plan.digest() != plan_build(TensorRTVersion.parse("11.4"), {"x": (1, 3, 8, 8)}, "int8").digest()


def test_the_cache_covers_the_tensors_the_parser_creates_itself(tmp_path):
    """An Add with a constant operand: the parser adds a Constant layer and a broadcasting Shuffle whose outputs
    TensorRT names "(Unnamed Layer* N) [...]_output"; no ONNX name, so no host range. The adapter gives the constant
    its weights' exact range and the shuffle its input's, before the calibrator replays the cache."""
    import numpy as np

    from sdk.engine.calibration_cache import CalibrationCache

    constant, shuffled = "(Unnamed Layer* 1) [Constant]_output", "(Unnamed Layer* 2) [Shuffle]_output"
    layers = [
        Layer("conv", ["x"], ["a"]),
        Layer("bias", [], [constant], kind=LayerType.CONSTANT, weights=np.array([-2.54, 1.0], np.float32)),
        Layer("bias_broadcast", [constant], [shuffled], kind=LayerType.SHUFFLE),
        Layer("add", ["a", shuffled], ["y"], kind=LayerType.ELEMENTWISE),
        Layer("shape", [], ["(Unnamed Layer* 4) [Constant]_output"], kind=LayerType.CONSTANT, weights=np.array([1, 8], np.int32)),
    ]
    plan = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "int8")
    (tmp_path / "calib.cache").write_bytes(b"TRT-100300-EntropyCalibration2\nx: 3c010204\na: 3c010204\ny: 3c010204\n")
    trt, calls = fake_tensorrt("10", layers)
    _build(trt, plan, tmp_path / "m.onnx", tmp_path / "calib.cache", None, None)
    calibrator = dict(c for c in calls if len(c) == 2 and c[0] == "int8_calibrator")["int8_calibrator"]
    cache = CalibrationCache.parse(calibrator.read_calibration_cache().decode())
    assert cache.scales[constant] == cache.scales[shuffled] == np.float32(np.float32(2.54) / np.float32(127))
    assert cache.scales["a"] == np.float32(1 / 127)  # calibrated scales are kept as they were
    assert "(Unnamed Layer* 4) [Constant]_output" not in cache.scales  # an INT32 shape constant is never INT8


def test_tensors_the_cache_completion_cannot_fill_are_reported_not_dropped(tmp_path):
    """A tensor neither the cache nor the completion scales (here a Gather's output) keeps its layers out of INT8:
    the build says which, in BuiltEngine.int8_unscaled (the device build prints it as a warning event)."""
    layers = [Layer("conv", ["x"], ["a"]), Layer("pick", ["a"], ["g"], kind=LayerType.GATHER), Layer("conv2", ["g"], ["y"])]
    plan = plan_build(TensorRTVersion.parse("10.3"), {"x": (1, 3, 8, 8)}, "int8")
    (tmp_path / "calib.cache").write_bytes(b"TRT-100300-EntropyCalibration2\nx: 3c010204\na: 3c010204\ny: 3c010204\n")
    trt, _ = fake_tensorrt("10", layers)
    built = _build(trt, plan, tmp_path / "m.onnx", tmp_path / "calib.cache", None, None)
    assert built.int8_unscaled == ("g",)
