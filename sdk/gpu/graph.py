"""One frame of the CUDA path as one CUDA graph (`preprocess.cuda_graph: true`, off by default; decision 0451).

The frame's work on the pipeline's one stream (the frame's upload where the GPU cannot map it, the fused
preprocessing kernel into the engine's input binding, TensorRT's enqueueV3, the decode kernel, the copy of the
count and of the candidate buffers into pinned host memory, and the stage events) is captured once by stream
capture and then replayed with one launch per frame: the CPU issues one call instead of a dozen, and the GPU
runs the same nodes. Every pointer in it is fixed at open (the frame buffer, the bindings, the candidate
buffers), which is what makes one capture valid for every frame; a change of the frame size re-captures.

The adapter follows cuda-python's driver API (cuda.bindings.driver, 12.x and 13.x): cuStreamBeginCapture(hStream,
CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), cuStreamEndCapture(hStream) -> CUgraph,
cuGraphInstantiate(hGraph, flags) -> CUgraphExec, cuGraphLaunch(hGraphExec, hStream), cuGraphExecDestroy,
cuGraphDestroy (GRAPH_NAMES; a test checks them against the installed package). TensorRT's rules for capturing
enqueueV3 (TensorRT developer guide, "CUDA Graphs"): call enqueueV3 once before capturing (the first frame runs
un-captured); no capture where the engine has data-dependent shapes, loops or conditionals, or plugins that
synchronise; shapes and bound addresses must not change after capture. Where enqueueV3 or the capture fails, the
path runs un-captured and the report says why; never an error at run time. That holds for every step: a
capture that fails, a graph that does not instantiate (cuGraphInstantiate, e.g. CUDA_ERROR_NOT_SUPPORTED for a node
kind the device cannot run in a graph), or stage events the GPU refuses to time after a replay (the frame is then
timed as a whole, between events recorded outside the graph).

The stage events inside the capture are recorded with CU_EVENT_RECORD_EXTERNAL (sdk/gpu/session.py): a plain
cuEventRecord in a capturing stream becomes no graph node, replays never record it, and waiting on or timing it
afterwards is CUDA_ERROR_CAPTURED_EVENT (cuda.h 13.0; CUDA Programming Guide, "Prohibited and Unhandled
Operations"). On the emulated device (SDK_CUDA_EMULATION=host, sdk/gpu/emulated_stream.py) the same rules hold.
"""

from __future__ import annotations

from collections.abc import Callable

from sdk.errors import BackendError

GRAPH_NAMES = (
    "cuStreamBeginCapture",
    "cuStreamEndCapture",
    "CUstreamCaptureMode",
    "cuGraphInstantiate",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
)


class FrameGraph:
    """Capture once (after a warm-up frame), then replay; or the reason the frame could not be captured."""

    def __init__(self, gpu) -> None:
        self.gpu = gpu
        self._exec = None
        self.reason: str | None = None  # why the frame runs un-captured, once a capture failed
        self.captures = 0
        self.replayed = 0
        self.timing_problem: str | None = None  # why the stages of replayed frames are not timed (never seen so far)

    @property
    def ready(self) -> bool:
        return self._exec is not None

    @property
    def refused(self) -> bool:
        return self.reason is not None

    def capture(self, enqueue_frame: Callable[[], bool]) -> bool:
        """Capture what `enqueue_frame` enqueues on the stream (nothing runs). False, with `reason`, where the
        engine refused to be captured (enqueue_frame returned False) or the capture failed."""
        gpu = self.gpu
        gpu.begin_capture()
        try:
            enqueued = enqueue_frame()
        except BaseException as exc:
            try:
                gpu.end_capture()  # leave the stream usable
            except BackendError:
                pass
            if isinstance(exc, BackendError):
                self.reason = f"the frame cannot be captured: {exc.message}"
                return False
            raise
        try:
            graph = gpu.end_capture()
        except BackendError as exc:
            self.reason = f"the capture failed: {exc.message}"
            return False
        if not enqueued:
            self.reason = "TensorRT's enqueueV3 refused to run under stream capture (data-dependent shapes, loops, or a plugin)"
            return False
        try:
            self._exec = gpu.instantiate(graph)
        except BackendError as exc:  # an optimisation that falls back: the frames run un-captured
            self.reason = f"the captured graph could not be instantiated: {exc.message}"
            return False
        self.captures += 1
        return True

    def launch(self) -> None:
        self.gpu.launch_graph(self._exec)
        self.replayed += 1

    def invalidate(self) -> None:
        """The frame size changed: the buffers (and so the graph) are new; the next frame captures again."""
        self._exec = None

    def report(self, frame_ms: dict | None = None) -> dict:
        """`frame_ms`: a replayed frame's GPU time between events around the launch (sdk/gpu/session.py)."""
        out = {"requested": True, "captured": self.captures > 0 and self.reason is None, "replayed_frames": self.replayed}
        if self.reason is not None:
            out["reason"] = self.reason
        if frame_ms is not None:
            out["frame_ms"] = frame_ms
        if self.timing_problem is not None:
            out["timing"] = self.timing_problem
        return out


__all__ = ["GRAPH_NAMES", "FrameGraph"]
