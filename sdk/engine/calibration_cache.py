"""TensorRT's calibration cache (implicit INT8, TensorRT 8.6 and 10.x; the only INT8 route onto DLA).

Format, as TensorRT writes and reads it:

    TRT-<NV_TENSORRT_VERSION>-<Algorithm>
    <tensor name>: <hex>

where NV_TENSORRT_VERSION is major*1000 + minor*100 + patch up to TensorRT 9 (8.6.1 -> 8601) and
major*10000 + minor*100 + patch from TensorRT 10 (10.3.0 -> 100300), and <hex> is the bit pattern
of the float32 scale = amax / 127, big-endian, lowercase, without leading zeros (0.0 is "0").
TensorRT refuses a cache whose version or algorithm differs from the builder's, so the header is
written for the target's exact TensorRT and checked again when read.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

from sdk.engine.platforms import known_tensorrt
from sdk.errors import ConfigError, ModelError

ALGORITHMS = ("EntropyCalibration2", "EntropyCalibration", "MinMaxCalibration", "LegacyCalibration")
HEADER = re.compile(r"^TRT-(\d+)-([A-Za-z0-9]+)$")


def tensorrt_version_code(version: str) -> int:
    """NV_TENSORRT_VERSION of a release the SDK knows: `8.6.2` -> 8602, `10.3` -> 100300 (10.3.0).

    NvInferRuntimeBase.h composes it as major * 1000 + minor * 100 + patch in TensorRT 8.6.1
    (kNV_TENSORRT_VERSION_IMPL) and as NV_TENSORRT_VERSION_INT(major, minor, patch) = major * 10000 +
    minor * 100 + patch from TensorRT 10.0 (10.3.0 and 11.0 headers). TensorRT reads a cache only when
    the header's number is its own, so the patch level must be the target's: `8.6` is refused (8.6.1,
    8.6.2 of JetPack 6.0 and 8.6.12 of DRIVE OS 6 differ), as is a release the SDK does not know."""
    try:
        known = known_tensorrt(version)
    except ConfigError as error:
        raise ModelError(f"calibration cache: {error.message}", hint=error.hint) from None
    major, minor, patch = known.major, known.minor, known.patch
    return major * (10000 if major >= 10 else 1000) + minor * 100 + patch


def scale_to_hex(scale: float) -> str:
    (bits,) = struct.unpack(">I", struct.pack(">f", scale))
    return format(bits, "x")


def hex_to_scale(text: str) -> float:
    bits = int(text, 16)
    if bits >= 1 << 32:
        raise ValueError(f"{text!r} is longer than a float32")
    (scale,) = struct.unpack(">f", struct.pack(">I", bits))
    return scale


@dataclass(frozen=True)
class CalibrationCache:
    version_code: int
    algorithm: str
    scales: dict[str, float]  # tensor name -> float32 scale (amax / 127)

    @classmethod
    def from_amax(cls, amax: dict[str, float], tensorrt: str, algorithm: str = "EntropyCalibration2") -> CalibrationCache:
        if algorithm not in ALGORITHMS:
            raise ModelError(f"calibration algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
        scales = {}
        for name, value in amax.items():
            if not math.isfinite(value) or value < 0:
                raise ModelError(f"calibration range of {name!r} is {value}: not a finite, non-negative amax")
            # In float32, as TensorRT computes it (amax / 127), so that the bits are the ones it would write.
            scales[name] = _float32(_float32(value) / 127.0)
        return cls(tensorrt_version_code(tensorrt), algorithm, scales)

    def render(self) -> str:
        lines = [f"TRT-{self.version_code}-{self.algorithm}"]
        lines += [f"{name}: {scale_to_hex(scale)}" for name, scale in sorted(self.scales.items())]
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str, *, where: str = "calibration cache") -> CalibrationCache:
        lines = [line.rstrip("\r") for line in text.splitlines() if line.strip()]
        if not lines:
            raise ModelError(f"{where}: empty")
        match = HEADER.match(lines[0])
        if match is None or match.group(2) not in ALGORITHMS:
            raise ModelError(f"{where}: first line {lines[0][:80]!r} is not a TensorRT header like TRT-100300-EntropyCalibration2")
        scales: dict[str, float] = {}
        for number, line in enumerate(lines[1:], start=2):
            name, sep, value = line.rpartition(": ")
            if not sep or not name:
                raise ModelError(f"{where}:{number}: {line[:80]!r} is not `tensor: hex`")
            if name in scales:
                raise ModelError(f"{where}:{number}: tensor {name!r} appears twice")
            try:
                scales[name] = hex_to_scale(value)
            except ValueError:
                raise ModelError(f"{where}:{number}: {value!r} is not a float32 in hex") from None
        return cls(int(match.group(1)), match.group(2), scales)

    def check_for(self, tensorrt: str, tensors: list[str], *, where: str = "calibration cache") -> None:
        """Refuse a cache TensorRT would reject or silently under-use: other version, missing tensors."""
        expected = tensorrt_version_code(tensorrt)
        if self.version_code != expected:
            raise ModelError(
                f"{where}: written for TensorRT code {self.version_code}, the target runs TensorRT {tensorrt} ({expected})",
                hint="calibrate again for the target's TensorRT (`sdk calibrate PIPELINE --tensorrt VERSION`)",
            )
        missing = [t for t in tensors if t not in self.scales]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ModelError(f"{where}: no scale for {len(missing)} tensor(s) of the model: {shown}", hint="calibrate again")


def _float32(value: float) -> float:
    return struct.unpack(">f", struct.pack(">f", value))[0]


# Ranges TensorRT needs equal because it fuses the layers between them (implicit INT8):
# - a pooling layer's input and output: "When running pooling layer with DeviceType::kDLA in Int8 mode, the
#   dynamic ranges for input and output tensors must be equal" (NvInfer.h 8.6.1:1735, 10.3.0:1450);
# - a concatenation's inputs and output: TensorRT eliminates the concatenation by having each input's producer
#   write into the output buffer, in the output's scale.
# Each tie is (anchor, tied): the tied tensors take the anchor's range (the largest anchor's, where ties meet).
POOLING_OPS = ("MaxPool", "AveragePool")
# ElementWise layers DLA runs (NvInfer.h IElementWiseLayer, 8.6.1 and 10.3.0: "When running this layer on the DLA with
# Int8 data type, the dynamic ranges of two input tensors shall be equal. If the dynamic ranges are generated using
# calibrator, the largest value shall be used."): for a DLA build both inputs take the larger of their two ranges.
ELEMENTWISE_OPS = ("Add", "Sub", "Mul", "Max", "Min")


def elementwise_ties(nodes) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """From (op_type, inputs, outputs): each two-input ElementWise's inputs tied both ways, so the group takes the
    larger range (tie_ranges: the largest anchor's). Only for DLA builds: the GPU takes different input scales."""
    ties = []
    for op, inputs, _ in nodes:
        if op in ELEMENTWISE_OPS and len(inputs) == 2 and inputs[0] != inputs[1]:
            ties += [(inputs[0], (inputs[1],)), (inputs[1], (inputs[0],))]
    return tuple(ties)


def fusion_ties(nodes) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """From (op_type, inputs, outputs) of a model's nodes: pooling output := input, concat inputs := output."""
    ties = []
    for op, inputs, outputs in nodes:
        if op in POOLING_OPS and inputs and outputs:
            ties.append((inputs[0], (outputs[0],)))
        elif op == "Concat" and inputs and outputs:
            ties.append((outputs[0], tuple(inputs)))
    return tuple(ties)


def tie_ranges(amax: dict[str, float], ties) -> dict[str, float]:
    """amax with every tied group at one value: the largest of its anchors' ranges (never clipping more than
    any anchor's own calibration). Tensors without a range stay without one."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        parent.setdefault(name, name)
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    anchors: dict[str, float] = {}
    for anchor, tied in ties:
        for name in tied:
            parent[root(name)] = root(anchor)
    for anchor, _ in ties:
        if anchor in amax:
            group = root(anchor)
            anchors[group] = max(anchors.get(group, 0.0), amax[anchor])
    tied_amax = dict(amax)
    for name in list(parent):
        group = root(name)
        if group in anchors and name in amax:
            tied_amax[name] = anchors[group]
    return tied_amax


@dataclass(frozen=True)
class NetworkLayer:
    """One layer of the network TensorRT's ONNX parser built, as the device reads it before building."""

    kind: str  # "Constant", "Shuffle", ... (TensorRT's LayerType, capitalised)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constant_amax: float | None = None  # a float Constant layer's max |weight|


def complete_for_network(cache: CalibrationCache, layers) -> tuple[CalibrationCache, list[str]]:
    """Scales for tensors the ONNX parser creates itself, which no ONNX name (and so no host calibration) has:
    the output of a Constant layer it adds for a constant operand ("(Unnamed Layer* N) [Constant]_output") gets
    its weights' exact range, and a Shuffle's output (a reshape or the broadcast of such a constant) its input's.
    Existing scales are kept. Returns the completed cache and the tensors still without a scale."""
    scales = dict(cache.scales)
    missing = []
    for layer in layers:
        for output in layer.outputs:
            if output in scales:
                continue
            if layer.kind == "Constant" and layer.constant_amax is not None and math.isfinite(layer.constant_amax):
                scales[output] = _float32(_float32(layer.constant_amax) / 127.0)
            elif layer.kind == "Shuffle" and layer.inputs and layer.inputs[0] in scales:
                scales[output] = scales[layer.inputs[0]]
            else:
                missing.append(output)
    return CalibrationCache(cache.version_code, cache.algorithm, scales), missing
