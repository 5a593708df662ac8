"""One pipeline's CUDA session: the device (real or emulated), the engine's bindings, one stream, event times.

Shared by the CUDA preprocessing stage (sdk/preprocess/cuda.py) and the decode-on-device stage
(sdk/postprocess/device.py): both enqueue on the same stream (the TensorRT backend's, on a GPU),
the kernel writes the engine's input binding in place and the decode kernel reads its outputs in
place. Stage times come from events recorded on that stream, never from host clocks:
preprocess = between the events around the preprocessing kernel; infer = between the events recorded
right before and after TensorRT's enqueueV3 (no host round trip in between: the host does not wait
between the preprocessing and the engine); decode = the decode kernel and the copy of the candidates.
The host's own time to enqueue the engine is kept apart (`infer_enqueue_ms`): where it exceeds the
engine's event time, the GPU waited for the host's launches and the event time is enqueue-bound.
Inside a stream capture the events are recorded as external event nodes (CU_EVENT_RECORD_EXTERNAL),
so every replay records them and they are read after the frame's one wait (decision 0411).
Nothing here imports cuda-python.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from sdk.errors import BackendError

STAGES = ("preprocess", "infer", "decode")
EVENTS = ("preprocess_start", "preprocess_end", "infer_start", "infer_end", "decode_start", "decode_end", "graph_start", "graph_end")
# The events each stage is timed between.
SPANS = {"preprocess": ("preprocess_start", "preprocess_end"), "infer": ("infer_start", "infer_end"), "decode": ("decode_start", "decode_end")}


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
        self.total = dict.fromkeys((*STAGES, "graph", "infer_enqueue"), 0.0)
        self.worst = dict.fromkeys(self.total, 0.0)
        self.frames = dict.fromkeys(self.total, 0)

    def mark(self, name: str) -> None:
        """Record an event on the stream; inside a capture as an external event node, which every replay records
        (a plain record there is no node: reading it afterwards is CUDA_ERROR_CAPTURED_EVENT)."""
        self.gpu.record(self.events[name], external=self.gpu.capturing)

    def read(self, start: str, stop: str) -> float:
        """Milliseconds between two recorded events (waits for the later one)."""
        return self.gpu.event_ms(self.events[start], self.events[stop])

    def count(self, stage: str, ms: float) -> float:
        self.total[stage] += ms
        self.worst[stage] = max(self.worst[stage], ms)
        self.frames[stage] += 1
        return ms

    def add(self, stage: str, start: str | None = None, stop: str | None = None) -> float:
        start, stop = (start, stop) if start is not None else SPANS[stage]
        return self.count(stage, self.read(start, stop))

    def _stats(self, stage: str) -> dict:
        return {"mean_ms": round(self.total[stage] / self.frames[stage], 4), "max_ms": round(self.worst[stage], 4), "frames": self.frames[stage]}

    def summary(self) -> dict:
        return {stage: self._stats(stage) for stage in STAGES if self.frames[stage]}

    def extra(self, stage: str) -> dict | None:
        """`graph` (a replayed frame, between events outside the graph) or `infer_enqueue` (host ms), where counted."""
        return self._stats(stage) if self.frames[stage] else None


class FrameRecord:
    """What the current frame did on the device, written by the session alone (one record, reused every frame).

    `replayed`: the frame ran as the captured graph (its stage times are read after it ends); `engine_unread`: the
    engine's events of this frame are recorded and not yet read (several cameras batched decode several slots after
    one engine call, and only the first slot's decode reads the engine's time; decision 0460)."""

    __slots__ = ("engine_unread", "replayed")

    def __init__(self) -> None:
        self.replayed = False
        self.engine_unread = False


class CudaSession:
    """The open device and the engine it feeds; `binding` gives the address a kernel reads or writes.

    The session owns the frame's device steps: the stages register their part of the frame when they are built
    (`register("preprocess" | "decode", enqueue)`, a device decoder through `add_decoder`), the frame's graph captures
    exactly what is registered (`enqueue_frame`), and `frame` is the one record of what the current frame did."""

    def __init__(self, choice: DeviceChoice, backend, kernels_dir: Path | None, memory: str | None = None, cuda_graph: bool = False) -> None:
        self.choice, self.backend = choice, backend
        if choice.emulated:
            from sdk.gpu.emulation import EmulatedCuda, emulated_memory

            self.gpu = EmulatedCuda(memory or emulated_memory())
        else:
            from sdk.gpu.driver import CudaModule

            self.gpu = CudaModule(kernels_dir, stream=backend.stream_handle)
        self.gpu.open()
        self.times = StreamTimes(self.gpu)
        self.steps: dict[str, list] = {"preprocess": [], "decode": []}  # each stage's enqueue, in the frame's order
        self.decoders: list = []  # the decoders on the device, one per batch slot
        self.decode_on_cpu = "the postprocessing decodes on the CPU"  # why not on the device, where it is not
        self.frame = FrameRecord()
        # preprocess.cuda_graph: the frame captured once and replayed (sdk/gpu/graph.py)
        from sdk.gpu.graph import FrameGraph

        self.graph = FrameGraph(self.gpu) if cuda_graph else None

    def register(self, stage: str, enqueue) -> None:
        """A stage's part of the frame on the stream (no wait inside): what the frame's graph captures."""
        self.steps[stage].append(enqueue)

    def add_decoder(self, decoder) -> None:
        """A batch slot decoded on the device: its report joins the session's, its enqueue the frame's steps."""
        self.decoders.append(decoder)
        self.register("decode", decoder.enqueue)

    @property
    def _decode_reads_engine(self) -> bool:
        """The decode on the device follows the engine inside the frame's captured work: it, not the infer step,
        reads the engine's time (the infer step does not wait)."""
        return self.graph is not None and bool(self.steps["decode"])

    def enqueue_frame(self) -> bool:
        """The whole frame's registered work, for the capture: preprocessing, the engine between its events, the
        decode. False where the engine refuses to be enqueued (TensorRT under capture)."""
        for enqueue in self.steps["preprocess"]:
            enqueue()
        if not self.engine_enqueue():
            return False
        for enqueue in self.steps["decode"]:
            enqueue()
        return True

    def read_engine_time(self) -> None:
        """The engine's time of this frame, read once (by the first batch slot decoded on the device)."""
        if self.frame.engine_unread:
            self.frame.engine_unread = False
            self.times.add("infer")

    def decode_report(self) -> dict:
        """The decode stage's report: the device decoder's (several slots added up), or why the CPU decodes."""
        if not self.decoders:
            return {"device": "cpu", "reason": self.decode_on_cpu}
        section = self.decoders[0].report()
        if len(self.decoders) > 1:
            section["slots"] = len(self.decoders)
            section["most_candidates"] = max(d.most_candidates for d in self.decoders)
            section["overflow_frames"] = sum(d.overflow_frames for d in self.decoders)
            section["candidates_lost"] = sum(d.candidates_lost for d in self.decoders)
        return section

    def engine_enqueue(self) -> bool:
        """The engine's launch on the stream between its events, without waiting: TensorRT's enqueueV3 (False
        where it refuses); on the emulated device the ONNX Runtime backend's inference, as one operation of the
        stream. The host's time to enqueue is counted apart (un-captured frames only)."""
        times = self.times
        times.mark("infer_start")
        began = time.perf_counter_ns()
        if self.choice.emulated:
            self.gpu.engine(self.backend.infer)
            enqueued = True
        else:
            enqueued = self.backend.enqueue(timed=False)  # no events of its own inside a capture
        if not self.gpu.capturing:
            times.count("infer_enqueue", (time.perf_counter_ns() - began) / 1e6)
        times.mark("infer_end")
        self.frame.engine_unread = True
        return enqueued

    def infer_step(self) -> None:
        """The runtime's infer stage on the CUDA path: the engine enqueued on the stream right after the
        preprocessing (no wait in between), unless this frame's graph already holds it. Where the CPU decodes,
        the engine's outputs must be on the host: the step waits for the engine's end."""
        if self.frame.replayed:
            if not self._decode_reads_engine:
                self.replayed_frame_done()
            return
        if not self.engine_enqueue():
            raise BackendError("TensorRT execution failed (see the TensorRT log)")
        if not self._decode_reads_engine:
            self.read_engine_time()

    def launch_graph(self) -> None:
        """Replay the captured frame, between two plain events outside the graph (its whole time on the GPU)."""
        self.times.mark("graph_start")
        self.graph.launch()
        self.times.mark("graph_end")
        self.frame.replayed = True

    def replayed_frame_done(self) -> None:
        """After a replayed frame: wait for it, then read its stage times from the events the graph recorded.
        Where a GPU refuses to time those (it never should: they are external event nodes), the frame's time
        between the events around the launch is still read, and the report says why the stages are not."""
        times, graph = self.times, self.graph
        self.gpu.synchronize()
        self.frame.replayed = False
        times.add("graph", "graph_start", "graph_end")
        stages = ("preprocess", "infer") + (("decode",) if self.steps["decode"] else ())
        if graph.timing_problem is None:
            try:
                measured = {stage: times.read(*SPANS[stage]) for stage in stages}
            except BackendError as exc:
                graph.timing_problem = f"the stage events inside the graph could not be read ({exc.message}); the graph is timed as a whole"
            else:
                for stage, ms in measured.items():
                    times.count(stage, ms)
        self.frame.engine_unread = False

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
            **({"infer_enqueue_ms": enqueue} if (enqueue := self.times.extra("infer_enqueue")) else {}),
            "decode": self.decode_report(),
            **({"cuda_graph": self.graph.report(self.times.extra("graph"))} if self.graph is not None else {}),
        }

    def close(self) -> None:
        self.gpu.close()
