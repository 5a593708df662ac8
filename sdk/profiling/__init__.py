"""Per-layer profiling on the device: raw per-node times of the model on its backend, from a run of its own.

`python -m sdk profile` (sdk/profiling/cli.py) runs the release's model (or a prepared model) frame after frame with
the backend's own profiler on: ONNX Runtime's (`SessionOptions.enable_profiling`) or a TensorRT `IProfiler` with the
engine inspector's layer information. It writes `profile.json` (RAW_FILE: the raw per-node times, per frame) and, for
ONNX Runtime, the graph the session really ran (OPTIMIZED_FILE). Nothing here analyses: the host maps the nodes back
to the prepared model's layers and predicts (tools/perf/). A profile never feeds a verdict: profiling changes timings.
"""

RAW_FILE = "profile.json"
OPTIMIZED_FILE = "optimized.onnx"
RAW_FORMAT = 1
