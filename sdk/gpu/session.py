"""One pipeline's CUDA session: the device (real or emulated), the engine's bindings, one stream, event times.

Shared by the CUDA preprocessing stage (sdk/preprocess/cuda.py) and the decode-on-device stage
(sdk/postprocess/device.py): both enqueue on the same stream (the TensorRT backend's, on a GPU),
the kernel writes the engine's input binding in place and the decode kernel reads its outputs in
place. Stage times come from events recorded on that stream, never from host clocks:
preprocess = between the events around the preprocessing kernel; infer = from the end of the
preprocessing to the start of the decode (what the stream ran between them: enqueueV3);
decode = the decode kernel and the copy of the candidates. Nothing here imports cuda-python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdk.errors import BackendError

STAGES = ("preprocess", "infer", "decode")
EVENTS = ("preprocess_start", "preprocess_end", "decode_start", "decode_end")


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # "cpu" or "cuda"
    reason: str
    emulated: bool = False
    detail: str = ""

    def as_dict(self) -> dict:
        out = {"device": self.device, "reason": self.reason, "emulated": self.emulated}
        if self.detail:
            out["detail"] = self.detail
        return out


class StreamTimes:
    """Per-stage milliseconds from event pairs: sums, maxima and counts, no allocation per frame."""

    def __init__(self, gpu) -> None:
        self.gpu = gpu
        self.events = {name: gpu.event() for name in EVENTS}
        self.total = dict.fromkeys(STAGES, 0.0)
        self.worst = dict.fromkeys(STAGES, 0.0)
        self.frames = dict.fromkeys(STAGES, 0)
        # The engine time since the last preprocess_end is not yet read: several cameras batched decode several
        # slots after one engine call, and only the first slot's decode measures the engine (decision 0460).
        self.infer_pending = False

    def mark(self, name: str) -> None:
        self.gpu.record(self.events[name])
        if name == "preprocess_end":
            self.infer_pending = True

    def add(self, stage: str, start: str, stop: str) -> float:
        ms = self.gpu.event_ms(self.events[start], self.events[stop])
        self.total[stage] += ms
        self.worst[stage] = max(self.worst[stage], ms)
        self.frames[stage] += 1
        return ms

    def summary(self) -> dict:
        return {
            stage: {"mean_ms": round(self.total[stage] / self.frames[stage], 4), "max_ms": round(self.worst[stage], 4), "frames": self.frames[stage]}
            for stage in STAGES
            if self.frames[stage]
        }


class CudaSession:
    """The open device and the engine it feeds; `binding` gives the address a kernel reads or writes."""

    def __init__(self, choice: DeviceChoice, backend, kernels_dir: Path | None, memory: str | None = None, cuda_graph: bool = False) -> None:
        self.choice, self.backend = choice, backend
        if choice.emulated:
            from sdk.gpu.emulation import EmulatedCuda

            self.gpu = EmulatedCuda(memory or "mapped")
        else:
            from sdk.gpu.driver import CudaModule

            self.gpu = CudaModule(kernels_dir, stream=backend.stream_handle)
        self.gpu.open()
        self.times = StreamTimes(self.gpu)
        # The decode stage's report: a dict where the CPU decodes, the device decoder's `report` where the GPU does.
        self.decode = {"device": "cpu", "reason": "the postprocessing decodes on the CPU"}
        # preprocess.cuda_graph: the frame captured once and replayed (sdk/gpu/graph.py). The decode stage on the
        # device sets `decode_enqueue` (its part of the frame); `launched` says the current frame ran as the graph.
        from sdk.gpu.graph import FrameGraph

        self.graph = FrameGraph(self.gpu) if cuda_graph else None
        self.decode_enqueue = None
        self.launched = False

    def engine_enqueue(self) -> bool:
        """The engine's launch on the stream, without waiting: TensorRT's enqueueV3 (False where it refuses);
        on the emulated device the ONNX Runtime backend's inference, as one operation of the stream."""
        if self.choice.emulated:
            self.gpu.node("engine", self.backend.infer)
            return True
        return self.backend.enqueue()

    def infer_step(self) -> None:
        """The runtime's infer stage on the CUDA path: the engine, unless this frame's graph already holds it."""
        if not self.launched:
            self.backend.infer()
            return
        if self.decode_enqueue is None:  # the CPU decodes: the engine's outputs must be on the host now
            self.gpu.synchronize()
            self.times.add("preprocess", "preprocess_start", "preprocess_end")
            self.launched = False

    def binding(self, name: str) -> int:
        """The device address of one of the engine's tensors, which then stays on the device."""
        backend = self.backend
        array = backend.inputs.get(name)
        if array is None:
            array = backend.outputs.get(name)
        if array is None:
            raise BackendError(f"the engine has no tensor {name!r}")
        if self.choice.emulated:
            return self.gpu.bind(array, f"the engine's binding {name!r}")
        backend.keep_on_device(name)
        return backend.device_address(name)

    def report(self) -> dict:
        return {
            **self.choice.as_dict(),
            "runtime": self.gpu.describe(),
            "memory": self.gpu.memory,
            "stream": "one stream: preprocessing, inference and decoding in order",
            "event_ms": self.times.summary(),
            "decode": self.decode() if callable(self.decode) else self.decode,
            **({"cuda_graph": self.graph.report()} if self.graph is not None else {}),
        }

    def close(self) -> None:
        self.gpu.close()
