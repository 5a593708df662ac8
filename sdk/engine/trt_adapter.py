"""The thin adapter: a BuildPlan mapped onto the builder API of the installed TensorRT (8.6, 10.x, 11.x).

It decides nothing; every choice is in the plan. What differs between majors is isolated in the
step functions listed in SERIES_STEPS (tests/sdk/engine/test_tensorrt_conformity.py reads the names
each series uses from this file and checks them against the real TensorRT wheels from PyPI):
- 8.6 needs the EXPLICIT_BATCH network flag; 10.x implies it (the flag is deprecated); 11 removed it.
- 8.6 and 10.x take implicit INT8 (BuilderFlag.INT8 + an EntropyCalibration2 calibrator that
  replays the host's calibration cache) with FP16 allowed beside it; 11 removed both flags and
  calibrators: the Q/DQ model is built as a strongly typed network.
TensorRT is imported only here, lazily, and only after a CUDA driver and device were found.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdk.engine.build_plan import BuildPlan
from sdk.engine.calibration_cache import CalibrationCache, NetworkLayer, complete_for_network
from sdk.engine.cuda_check import require_cuda_device
from sdk.engine.placement import PlacementSummary, check_contract
from sdk.engine.platforms import TensorRTVersion
from sdk.errors import EngineBuildError, missing_dependency

COMMON_STEPS = (
    "_build",
    "_configure_memory",
    "_configure_profiles",
    "_configure_dla",
    "_configure_sparsity",
    "_placement",
    "_configure_timing_cache",
    "_engine_layers",
)
SERIES_STEPS = {
    "8.6": ("_network_flags_explicit_batch", "_configure_implicit_int8", "_network_layers", "_calibrator"),
    "10": ("_network_flags_default", "_configure_implicit_int8", "_network_layers", "_calibrator"),
    "11": ("_network_flags_strongly_typed",),
}


@dataclass(frozen=True)
class BuiltEngine:
    plan: bytes  # the serialized engine
    placement: PlacementSummary  # TensorRT's own answer (can_run_on_DLA per layer)
    timing_cache: bytes | None
    layers: str = ""  # the engine inspector's JSON: every layer of the built engine, as TensorRT fused it
    # Tensors of the parsed network the calibration cache and its completion left without an INT8 scale: TensorRT
    # keeps the layers that produce or consume them out of INT8 (on DLA that can split a loadable). Reported, never dropped.
    int8_unscaled: tuple[str, ...] = ()


def import_tensorrt():
    try:
        import tensorrt as trt
    except ImportError:
        raise missing_dependency("tensorrt", "JetPack's python3-libnvinfer (apt) or the TensorRT wheel matching the device") from None
    return trt


class TensorRTBuilder:
    """Lazy: the plan and the files now; the build (minutes on a Jetson) when called, on the device."""

    def __init__(self, plan: BuildPlan, onnx_model: Path, calibration_cache: Path | None = None, timing_cache: Path | None = None, contract=None):
        self.plan = plan
        self.onnx_model = Path(onnx_model)
        self.calibration_cache = calibration_cache
        self.timing_cache = timing_cache
        self.contract = contract  # the pipeline's model.dla, checked against TensorRT's answers

    def __call__(self) -> BuiltEngine:
        require_cuda_device(EngineBuildError)  # before TensorRT exists in this process
        trt = import_tensorrt()
        installed = TensorRTVersion.parse(trt.__version__)
        wanted = TensorRTVersion.parse(self.plan.tensorrt)
        if (installed.major, installed.minor, installed.patch) != (wanted.major, wanted.minor, wanted.patch):
            raise EngineBuildError(f"the plan is for TensorRT {wanted}, this device has TensorRT {installed}", hint="plan with the device's probe")
        return _build(trt, self.plan, self.onnx_model, self.calibration_cache, self.timing_cache, self.contract)


def _build(trt, plan: BuildPlan, onnx_model: Path, calibration_cache: Path | None, timing_cache: Path | None, contract) -> BuiltEngine:
    steps = {name: globals()[name] for name in SERIES_STEPS[plan.series]}
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = next(step for name, step in steps.items() if name.startswith("_network_flags"))(trt, plan)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_model)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EngineBuildError(f"{onnx_model}: TensorRT's ONNX parser refused the model: {errors}")
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # layer types, precisions, tactics in the inspector
    _configure_memory(trt, config, plan)
    _configure_profiles(builder, config, plan)
    unscaled: tuple[str, ...] = ()
    if "_configure_implicit_int8" in steps:
        unscaled = _configure_implicit_int8(trt, config, plan, calibration_cache, network)
        _constrain_precision(trt, network, config, plan)
    _configure_dla(trt, config, plan)
    _configure_sparsity(trt, config, plan)
    cache = _configure_timing_cache(config, plan, timing_cache)
    placement = _placement(builder, network, config, plan)
    check_contract(contract, placement, f"{onnx_model}: model.dla")  # before minutes of building
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EngineBuildError(f"{onnx_model}: TensorRT could not build the engine (see the build log)")
    layers = _engine_layers(trt, logger, bytes(serialized), plan)
    return BuiltEngine(bytes(serialized), placement, bytes(cache.serialize()) if cache is not None else None, layers, unscaled)


def _engine_layers(trt, logger, serialized: bytes, plan: BuildPlan) -> str:
    """The built engine's layers as the engine inspector reports them (JSON). Kept as TensorRT
    writes it, not classified: DLA loadables and GPU Myelin fusions share the `{ForeignNode[...]}`
    name form, and how the inspector types a DLA loadable has not been seen on hardware here."""
    runtime = trt.Runtime(logger)
    if plan.device == "DLA":
        runtime.DLA_core = plan.dla_core
    engine = runtime.deserialize_cuda_engine(serialized)
    if engine is None:
        raise EngineBuildError("TensorRT could not deserialize the engine it just built (see the build log)")
    return engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)


def _network_flags_explicit_batch(trt, plan: BuildPlan) -> int:
    return 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)


def _network_flags_default(trt, plan: BuildPlan) -> int:
    return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if plan.strongly_typed else 0


def _network_flags_strongly_typed(trt, plan: BuildPlan) -> int:
    return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)


def _configure_memory(trt, config, plan: BuildPlan) -> None:
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, plan.workspace_bytes)


def _configure_profiles(builder, config, plan: BuildPlan) -> None:
    profile = builder.create_optimization_profile()
    for item in plan.profiles:
        profile.set_shape(item.tensor, item.minimum, item.optimum, item.maximum)
    config.add_optimization_profile(profile)


def _configure_implicit_int8(trt, config, plan: BuildPlan, calibration_cache: Path | None, network=None) -> tuple[str, ...]:
    """The INT8 flag and the cache's calibrator; returns the tensors still without a scale after the completion."""
    missing: list[str] = []
    if plan.precision == "int8":
        if calibration_cache is None:
            raise EngineBuildError("an INT8 build for TensorRT 8.6/10 needs the calibration cache", hint="run `sdk calibrate PIPELINE --tensorrt V`")
        config.set_flag(trt.BuilderFlag.INT8)
        cache = Path(calibration_cache).read_bytes()
        if network is not None:  # scales for the tensors the parser made itself (sdk/engine/calibration_cache.py)
            completed, missing = complete_for_network(CalibrationCache.parse(cache.decode()), _network_layers(trt, network))
            cache = completed.render().encode()
        config.int8_calibrator = _calibrator(trt, plan.calibrator, cache)
    if plan.precision == "fp16" or plan.fp16_fallback:
        config.set_flag(trt.BuilderFlag.FP16)
    return tuple(missing)


def _network_layers(trt, network) -> list[NetworkLayer]:
    """The parsed network as the cache completion reads it: kinds, tensor names, a float Constant's max |weight|."""
    layers = []
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        type_name = layer.type.name
        kind = type_name[:1] + type_name[1:].lower()  # LayerType.CONSTANT -> "Constant"
        constant = None
        if layer.type == trt.LayerType.CONSTANT:
            layer.__class__ = trt.IConstantLayer  # the Python API's cast to the subclass (TensorRT samples)
            values = layer.weights
            values = np.asarray(values.numpy() if hasattr(values, "numpy") else values)
            constant = float(np.abs(values).max()) if values.dtype.kind == "f" and values.size else None
        inputs = tuple(layer.get_input(i).name for i in range(layer.num_inputs) if layer.get_input(i) is not None)
        outputs = tuple(layer.get_output(i).name for i in range(layer.num_outputs))
        layers.append(NetworkLayer(kind, inputs, outputs, constant))
    return layers


def _constrain_precision(trt, network, config, plan: BuildPlan) -> None:
    """The accuracy fallback's layers in FP16 (implicit INT8 only; the ONNX parser names layers after their nodes)."""
    if not plan.higher_precision:
        return
    wanted = set(plan.higher_precision)
    found = set()
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if layer.name in wanted:
            layer.precision = trt.float16
            for output in range(layer.num_outputs):
                layer.set_output_type(output, trt.float16)
            found.add(layer.name)
    missing = wanted - found
    if missing:
        raise EngineBuildError(f"layers kept out of INT8 are not in the network: {sorted(missing)[:5]}", hint="plan with this model's precision.json")
    # PREFER, not OBEY: where TensorRT has no FP16 kernel it may choose, and the build still succeeds.
    config.set_flag(trt.BuilderFlag.PREFER_PRECISION_CONSTRAINTS)


def _calibrator(trt, algorithm: str, cache: bytes):
    """A calibrator that never calibrates: it replays the host's cache. Its class must be the cache
    header's algorithm (EntropyCalibration2, the one DLA takes, or MinMaxCalibration)."""
    base = trt.IInt8EntropyCalibrator2 if algorithm == "EntropyCalibration2" else trt.IInt8MinMaxCalibrator

    class CacheReplay(base):
        def get_batch_size(self) -> int:
            return 1

        def get_batch(self, names):
            return None  # no frames on the device: the cache below is complete

        def read_calibration_cache(self) -> bytes:
            return cache

        def write_calibration_cache(self, data) -> None:
            return None

    return CacheReplay()


def _configure_dla(trt, config, plan: BuildPlan) -> None:
    if plan.device != "DLA":
        return
    config.default_device_type = trt.DeviceType.DLA
    config.DLA_core = plan.dla_core
    config.set_memory_pool_limit(trt.MemoryPoolType.DLA_MANAGED_SRAM, plan.dla_sram_bytes)
    if plan.gpu_fallback:
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)


def _configure_sparsity(trt, config, plan: BuildPlan) -> None:
    """2:4 weights (`sdk optimize`): let TensorRT choose sparse tactics (the flag exists in 8.6, 10 and 11)."""
    if plan.sparse_weights:
        config.set_flag(trt.BuilderFlag.SPARSE_WEIGHTS)


def _configure_timing_cache(config, plan: BuildPlan, timing_cache: Path | None):
    if not plan.timing_cache:
        return None
    data = Path(timing_cache).read_bytes() if timing_cache is not None and Path(timing_cache).is_file() else b""
    cache = config.create_timing_cache(data)
    config.set_timing_cache(cache, False)  # a mismatched cache is refused, not silently ignored
    return cache


def _placement(builder, network, config, plan: BuildPlan) -> PlacementSummary:
    """TensorRT's own answer per layer (can_run_on_DLA); transitions are edges between layers on
    different devices; DLA subgraphs are the connected groups of DLA layers. The engine inspector's
    final placement after the build is not read yet (issue #5 remainder)."""
    on_dla, producer = [], {}
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        on_dla.append(plan.device == "DLA" and bool(config.can_run_on_DLA(layer)))
        for output in range(layer.num_outputs):
            producer[layer.get_output(output).name] = index
    group = list(range(network.num_layers))

    def root(index: int) -> int:
        while group[index] != index:
            group[index] = group[group[index]]
            index = group[index]
        return index

    transitions = 0
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        inputs = (layer.get_input(i) for i in range(layer.num_inputs))
        for source in {producer.get(tensor.name) for tensor in inputs if tensor is not None} - {None}:
            if on_dla[source] != on_dla[index]:
                transitions += 1
            elif on_dla[index]:
                group[root(source)] = root(index)
    subgraphs = len({root(i) for i, dla in enumerate(on_dla) if dla})
    dla = sum(on_dla)
    return PlacementSummary(dla, len(on_dla) - dla, subgraphs, transitions, dla_cores=builder.num_DLA_cores, source="TensorRT")
