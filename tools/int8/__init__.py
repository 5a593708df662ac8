"""INT8: calibration frames (`calibration_frames.py`), activation statistics and range methods (`activation_stats.py`,
`histogram_kernel.py`, `range_methods.py`), `sdk calibrate` (`calibrate.py`), the per-layer sensitivity ranking
(`sensitivity.py`), the accuracy gate against FP32 (`accuracy.py`), and what a deploy does with all of it (`for_deploy.py`)."""
