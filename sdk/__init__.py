"""On-device runtime of the perception deployment SDK, and the pipeline spec it shares with the host.

Importing `sdk` loads nothing heavy: OpenCV, ONNX Runtime, TensorRT and CUDA are imported
inside the stage or backend that needs them. `sdk` never imports `tools` or host-only
packages (paramiko, onnx-graphsurgeon): a release shipped to a vehicle carries `sdk/` only.
"""

__version__ = "0.1.0"
