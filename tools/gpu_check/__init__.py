"""The one prepared check for a lent GPU machine: `python -m tools.gpu_check` (`check.py`; its steps in `steps.py`, the
runtime's CUDA path in `runtime.py`, ONNX Runtime as its inference step in `engine.py`)."""
