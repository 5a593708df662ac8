// The fused preprocessing kernels: one thread per output pixel (all channels), reading only the
// source pixels its bilinear taps need and writing the output once. One kernel per (input format,
// output type, layout), with C names the runtime looks up (sdk/gpu/plan.py: kernel_name).
#include "pp_math.cuh"

#define PP_BLOCK_THREADS 256  // sdk/gpu/plan.py launches at most this many threads per block

template <int FMT, int DT, int LAYOUT>
__device__ __forceinline__ void pp_kernel_body(const PpParams& p) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < p.out_w && y < p.out_h) pp_pixel<FMT, DT, LAYOUT>(p, x, y);
}

#define PP_KERNEL(fmt, FMT, dt, DT, layout, LAYOUT) \
    extern "C" __global__ void __launch_bounds__(PP_BLOCK_THREADS) pp_##fmt##_##dt##_##layout(const PpParams p) { \
        pp_kernel_body<FMT, DT, LAYOUT>(p); \
    }

#define PP_LAYOUTS(fmt, FMT, dt, DT) \
    PP_KERNEL(fmt, FMT, dt, DT, nchw, PP_LAYOUT_NCHW) \
    PP_KERNEL(fmt, FMT, dt, DT, nhwc, PP_LAYOUT_NHWC)

#define PP_TYPES(fmt, FMT) \
    PP_LAYOUTS(fmt, FMT, f32, PP_DT_F32) \
    PP_LAYOUTS(fmt, FMT, f16, PP_DT_F16) \
    PP_LAYOUTS(fmt, FMT, u8, PP_DT_U8) \
    PP_LAYOUTS(fmt, FMT, i8, PP_DT_I8)

PP_TYPES(bgr8, PP_FMT_BGR8)
PP_TYPES(rgb8, PP_FMT_RGB8)
PP_TYPES(nv12, PP_FMT_NV12)
PP_TYPES(yuyv, PP_FMT_YUYV)

// SSD and YOLO decode: one thread per anchor / row, candidates appended with an atomic counter (order varies).
#include "ssd_decode.cuh"

extern "C" __global__ void __launch_bounds__(PP_BLOCK_THREADS) ssd_decode(const SsdParams p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.count) ssd_anchor(p, i);
}

extern "C" __global__ void __launch_bounds__(PP_BLOCK_THREADS) yolo_decode(const YoloParams p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.count) yolo_row(p, i);
}
