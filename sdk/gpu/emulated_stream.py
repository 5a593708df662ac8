"""The emulated stream: CUDA's rules for streams, events and stream capture, enforced on the host.

`EmulatedStream` is the half of the emulated device (sdk/gpu/emulation.py) that orders work. It refuses
what CUDA refuses, with the CUresult a GPU returns, so code that passes here does not fail on first
contact with a GPU. The rules and their sources (CUDA 13.0 `cuda.h`, the CUDA Programming Guide,
"CUDA Graphs" / "Prohibited and Unhandled Operations", the CUDA Driver API's "API synchronization
behavior", the TensorRT developer guide and `NvInferRuntime.h`):

1. **The stream is asynchronous.** An operation runs when the host waits for it (cuStreamSynchronize, or
   cuEventSynchronize / cuEventElapsedTime on an event recorded after it), not when it is enqueued; a host
   that reads a copy's destination without waiting reads what was there before.
2. **No waiting inside a capture.** "It is invalid to synchronize or query the execution status of a stream
   which is being captured or a captured event" (Programming Guide): stream and event synchronisation and
   elapsed time while capturing are CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900), which also invalidates the
   capture (cuStreamEndCapture then returns no graph: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901).
3. **No allocation inside a capture.** cuMemAlloc is "not enqueued asynchronously to a stream, and is not
   observed by stream capture"; in CU_STREAM_CAPTURE_MODE_THREAD_LOCAL (the mode sdk/gpu/graph.py captures
   in) such "potentially unsafe API calls" are prohibited (cuThreadExchangeStreamCaptureMode, cuda.h):
   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
4. **No copy between device memory and pageable host memory inside a capture.** For pageable memory "the
   function might be synchronous with respect to host" and "the driver may synchronize with the stream" to
   stage it (Driver API, "API synchronization behavior"); a capture cannot record a synchronisation, so only
   page-locked memory (cuMemHostAlloc) is copied in a graph: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED otherwise.
5. **A plain event record inside a capture is not a node.** It makes a "captured event", which graph
   launches never record; waiting on it or timing it afterwards is CUDA_ERROR_CAPTURED_EVENT (907, "the
   operation is not permitted on an event which was last recorded in a capturing stream"), until it is
   recorded again outside a capture. An event read after replays is recorded with CU_EVENT_RECORD_EXTERNAL
   ("captured in the graph as an external event node", cuEventRecordWithFlags), which every launch records
   (cuGraphAddEventRecordNode: "Each launch of the graph will record event"); that flag "is invalid outside
   of stream capture": CUDA_ERROR_INVALID_VALUE.
6. **Events must have been recorded.** cuEventElapsedTime on an event never recorded:
   CUDA_ERROR_INVALID_HANDLE.
7. **TensorRT warms up outside a capture.** enqueueV3 runs once un-captured after the engine's shapes are
   set, before the stream is captured (TensorRT developer guide, "CUDA Graphs": the first enqueue after a
   shape change updates internal state that a capture must not contain); an engine node captured without
   that warm-up is refused. (An engine with dynamic dimensions needs its input shapes set before enqueue:
   the TensorRT backend's rule, held by sdk/backends/tensorrt_shapes.py.)
"""

from __future__ import annotations

import time

from sdk.errors import BackendError

UNSUPPORTED = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
CAPTURED_EVENT = "CUDA_ERROR_CAPTURED_EVENT"


class EmulatedEvent:
    """An event's state: never recorded, pending on the stream, recorded (with its time), or captured."""

    __slots__ = ("state", "t_ns")

    def __init__(self) -> None:
        self.state = "never"
        self.t_ns = 0


class EmulatedGraph:
    """A captured stream: its operations in order, (name, run, event it records or None) each."""

    def __init__(self, nodes: list[tuple[str, object, object]]) -> None:
        self.nodes = tuple(nodes)

    @property
    def names(self) -> list[str]:
        return [node[0] for node in self.nodes]


def refused(call: str, code: str, why: str) -> BackendError:
    return BackendError(f"{call}: {code}: {why}")


class EmulatedStream:
    """One in-order stream that runs its work when the host waits, and CUDA's capture rules (module docstring)."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, object, object]] = []  # (name, run, event recorded by it or None)
        self._capturing: list[tuple[str, object, object]] | None = None
        self._invalidated: str | None = None  # why the current capture can no longer end in a graph
        self.engine_warm = False  # TensorRT's enqueue ran un-captured since the engine's shapes were set

    @property
    def capturing(self) -> bool:
        return self._capturing is not None

    def _refuse_in_capture(self, call: str, why: str) -> None:
        """Rules 2-4: the call is refused and the capture invalidated, as CUDA does."""
        if self._capturing is not None:
            self._invalidated = self._invalidated or f"{call}: {why}"
            raise refused(call, UNSUPPORTED, f"{why} while the stream is being captured")

    def _stream(self, name: str, run, event: EmulatedEvent | None = None) -> None:
        """Enqueue an operation: recorded into the graph while capturing, else pending until the host waits."""
        (self._pending if self._capturing is None else self._capturing).append((name, run, event))

    def _run_until(self, event: EmulatedEvent | None = None) -> None:
        """Run pending work in order: all of it, or up to the operation that records `event`."""
        while self._pending:
            _, run, recorded = self._pending.pop(0)
            run()
            if event is not None and recorded is event:
                return

    def node(self, name: str, run) -> None:
        """Other work on the stream (the emulated engine stands for enqueueV3 here)."""
        self._stream(name, run)

    def engine(self, run) -> None:
        """The engine's launch (TensorRT's enqueueV3; the ONNX Runtime backend on this device), rule 7."""
        if self._capturing is not None and not self.engine_warm:
            self._invalidated = self._invalidated or "enqueueV3 under capture before a warm-up enqueue"
            raise BackendError(
                "enqueueV3 under stream capture before an un-captured enqueue: TensorRT updates its state on the first enqueue "
                "after the shapes are set, which a graph must not contain (TensorRT developer guide, 'CUDA Graphs')"
            )
        if self._capturing is None:
            self.engine_warm = True
        self._stream("engine", run)

    # Events --------------------------------------------------------------------------------------
    def event(self) -> EmulatedEvent:
        return EmulatedEvent()

    def record(self, event: EmulatedEvent, external: bool = False) -> None:
        """cuEventRecord, or cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL) where `external` (rule 5)."""
        if self._capturing is None:
            if external:
                raise refused("cuEventRecordWithFlags", "CUDA_ERROR_INVALID_VALUE", "CU_EVENT_RECORD_EXTERNAL outside a stream capture")
            event.state = "pending"
            self._stream("event", lambda: _stamp(event), event)
        elif external:
            self._stream("event record node", lambda: _stamp(event), event)
        else:
            event.state = "captured"  # not a node: graph launches never record it

    def _readable(self, event: EmulatedEvent, call: str) -> None:
        if event.state == "captured":
            raise refused(call, CAPTURED_EVENT, "the event was last recorded in a capturing stream (a plain record is no graph node)")
        if event.state == "never":
            raise refused(call, "CUDA_ERROR_INVALID_HANDLE", "the event was never recorded")

    def event_ms(self, start: EmulatedEvent, stop: EmulatedEvent) -> float:
        """cuEventSynchronize(stop) then cuEventElapsedTime(start, stop)."""
        self._refuse_in_capture("cuEventSynchronize", "waiting for an event")
        for event in (start, stop):
            self._readable(event, "cuEventElapsedTime")
        self._run_until(stop)
        return (stop.t_ns - start.t_ns) / 1e6

    def synchronize(self) -> None:
        self._refuse_in_capture("cuStreamSynchronize", "synchronising the stream")
        self._run_until()

    # Capture ---------------------------------------------------------------------------------------
    def begin_capture(self) -> None:
        if self._capturing is not None:
            raise refused("cuStreamBeginCapture", "CUDA_ERROR_ILLEGAL_STATE", "the stream is already being captured")
        self._capturing, self._invalidated = [], None

    def end_capture(self) -> EmulatedGraph:
        if self._capturing is None:
            raise refused("cuStreamEndCapture", "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "the stream is not being captured")
        nodes, self._capturing = self._capturing, None
        if self._invalidated is not None:
            why, self._invalidated = self._invalidated, None
            raise refused("cuStreamEndCapture", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", f"the capture was invalidated by {why}")
        return EmulatedGraph(nodes)

    def instantiate(self, graph: EmulatedGraph) -> EmulatedGraph:
        self._refuse_in_capture("cuGraphInstantiate", "instantiating a graph")
        return graph

    def launch_graph(self, graph: EmulatedGraph) -> None:
        self._refuse_in_capture("cuGraphLaunch", "launching a graph on the capturing stream")
        for name, run, event in graph.nodes:
            if event is not None:
                event.state = "pending"  # an event record node: recorded when the launch reaches it
            self._pending.append((name, run, event))

    def close(self) -> None:
        """cuStreamDestroy: work still pending completes; a capture in progress is dropped."""
        self._capturing = None
        self._run_until()


def _stamp(event: EmulatedEvent) -> None:
    event.t_ns = time.monotonic_ns()
    event.state = "recorded"


__all__ = ["CAPTURED_EVENT", "UNSUPPORTED", "EmulatedEvent", "EmulatedGraph", "EmulatedStream"]
