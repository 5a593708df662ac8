"""TensorRT engines on the device: platform facts, build plans, the placement contract, plan headers.

Everything here is plain Python and imports on any machine; only `trt_adapter` touches TensorRT,
lazily, and only after `cuda_check` has found a driver and a device.
"""
