"""Static DLA analysis on the host: which ONNX nodes TensorRT can place on a DLA core, and why not."""
