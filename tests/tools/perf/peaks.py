"""Fixed host peaks for tests that check behaviour, not this machine's speed."""

from tools.perf.host_peaks import HostPeaks

FIXED = HostPeaks(
    "test CPU", 2, False, "onnxruntime test", 50.0, 100.0, 95.0, 30.0, 10.0, 40.0, 0.004, 0.004, 0.015, 0.006, 45.0, 10.0, 0.5, 32 << 20
)
