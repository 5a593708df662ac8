// The host reference: the kernels' own per-pixel function (pp_math.cuh) in a loop over the
// output, built by the host C++ compiler (x86-64, or aarch64 by cross-compiling). Tests call it
// through ctypes and compare it with the OpenCV CPU path; on a GPU, with the kernels.
#include <stddef.h>

#include "pp_math.cuh"
#include "ssd_decode.cuh"

template <int FMT, int DT, int LAYOUT>
static void pp_run(const PpParams& p) {
    for (int y = 0; y < p.out_h; ++y)
        for (int x = 0; x < p.out_w; ++x) pp_pixel<FMT, DT, LAYOUT>(p, x, y);
}

template <int FMT, int DT>
static int pp_layout(const PpParams& p, int layout) {
    if (layout == PP_LAYOUT_NCHW) pp_run<FMT, DT, PP_LAYOUT_NCHW>(p);
    else if (layout == PP_LAYOUT_NHWC) pp_run<FMT, DT, PP_LAYOUT_NHWC>(p);
    else return -1;
    return 0;
}

template <int FMT>
static int pp_dtype(const PpParams& p, int dtype, int layout) {
    switch (dtype) {
        case PP_DT_F32: return pp_layout<FMT, PP_DT_F32>(p, layout);
        case PP_DT_F16: return pp_layout<FMT, PP_DT_F16>(p, layout);
        case PP_DT_U8: return pp_layout<FMT, PP_DT_U8>(p, layout);
        case PP_DT_I8: return pp_layout<FMT, PP_DT_I8>(p, layout);
        default: return -1;
    }
}

extern "C" {

// 0 on success, -1 for an unknown format, type or layout.
int pp_reference(const PpParams* p, int format, int dtype, int layout) {
    switch (format) {
        case PP_FMT_BGR8: return pp_dtype<PP_FMT_BGR8>(*p, dtype, layout);
        case PP_FMT_RGB8: return pp_dtype<PP_FMT_RGB8>(*p, dtype, layout);
        case PP_FMT_NV12: return pp_dtype<PP_FMT_NV12>(*p, dtype, layout);
        case PP_FMT_YUYV: return pp_dtype<PP_FMT_YUYV>(*p, dtype, layout);
        default: return -1;
    }
}

// Anchors in order: the candidate list is the GPU's up to its (atomic) order.
void ssd_reference(const SsdParams* p) {
    for (int i = 0; i < p->count; ++i) ssd_anchor(*p, i);
}

void yolo_reference(const YoloParams* p) {
    for (int i = 0; i < p->count; ++i) yolo_row(*p, i);
}

unsigned int ssd_params_size(void) { return (unsigned int)sizeof(SsdParams); }

unsigned int yolo_params_size(void) { return (unsigned int)sizeof(YoloParams); }

unsigned short pp_half(float value) { return pp_f32_to_f16(value); }

// The struct layout as this compiler sees it: size, then each field's offset in declaration order.
int pp_params_layout(unsigned int* out, int capacity) {
    const unsigned int layout[] = {
        (unsigned int)sizeof(PpParams),
        offsetof(PpParams, src), offsetof(PpParams, src_uv), offsetof(PpParams, dst),
        offsetof(PpParams, src_pitch), offsetof(PpParams, uv_pitch),
        offsetof(PpParams, crop_x), offsetof(PpParams, crop_y), offsetof(PpParams, crop_w), offsetof(PpParams, crop_h),
        offsetof(PpParams, out_w), offsetof(PpParams, out_h),
        offsetof(PpParams, pad_x), offsetof(PpParams, pad_y), offsetof(PpParams, content_w), offsetof(PpParams, content_h),
        offsetof(PpParams, ax), offsetof(PpParams, bx), offsetof(PpParams, ay), offsetof(PpParams, by),
        offsetof(PpParams, gain), offsetof(PpParams, offset), offsetof(PpParams, pad_value), offsetof(PpParams, quant_scale),
        offsetof(PpParams, channels), offsetof(PpParams, pick), offsetof(PpParams, yuv),
    };
    const int n = (int)(sizeof(layout) / sizeof(layout[0]));
    for (int i = 0; i < n && i < capacity; ++i) out[i] = layout[i];
    return n;
}

}
