"""Fixed host peaks for tests that check behaviour, not this machine's speed."""

from tools.perf.host_peaks import HostPeaks

FIXED = HostPeaks(
    cpu="test CPU",
    threads=2,
    spinning=False,
    runtime="onnxruntime test",
    gemm_gflops=50.0,
    conv_gflops=100.0,
    pointwise_gflops=95.0,
    depthwise_gflops=30.0,
    dram_gbs=10.0,
    llc_gbs=20.0,
    cache_gbs=40.0,
    launch_ms=0.004,
    gap_ms=0.004,
    node_ms=0.024,  # the hot chain's 2 MiB a node in 20 us beyond the launch: 100 GB/s, above the cache probe's 40
    node_gap_ms=0.008,  # 2 us more after a node of the hot chain's 2 MiB than after the parallel chain's
    big_node_ms=0.2,  # the big hot chain's 16 MiB a node in 0.18 ms beyond a threaded launch: about 93 GB/s
    parallel_launch_ms=0.015,
    parallel_gap_ms=0.006,
    narrow_gflops=45.0,
    vector_gflops=10.0,
    lrn_gflops=0.5,
    pool_gflops=18.0,
    dwnarrow_gflops=15.0,  # half the wide depthwise probe's rate on rows 10 wide: a row's fixed work of 14 pixels
    last_level_cache_bytes=32 << 20,
    resize_gelems=1.5,  # a nearest Resize's general loop: 0.67 ns an output element
    resize2x_gelems=6.0,  # its 2x copy: four times as fast
    plain_node_ms=0.001,  # a node in a run without the profiler: a fraction of its profiled launch and gap
    plain_parallel_ms=0.004,
    swish_gflops=7.0,  # x * Sigmoid(x), one QuickGelu: 5 FLOPs an element at 0.7 of the vector probe's rate
    big_gap_ms=0.036,  # 30 us more after the big hot chain's 16 MiB: 2 us a MiB beyond the hot chain's 1
)
