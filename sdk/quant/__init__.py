"""INT8 artifacts the TensorRT builder consumes on the device: the implicit-quantization calibration cache."""
