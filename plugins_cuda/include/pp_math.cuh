// Per-element math of the fused preprocessing kernels, compiled twice from this one source:
// by nvcc/NVRTC for the GPU and by the host C++ compiler into the host reference library.
// Every rounding step is explicit (fmaf, floorf, rintf, the f16 conversion), so the two
// builds agree bit for bit as long as the host compiler does not contract (-ffp-contract=off).
// It reproduces sdk/preprocess/cpu.py: one inverse affine map per axis (geometry.py), bilinear
// sampling in float32 with clamped edges (BORDER_REPLICATE), colour pick, normalise, layout.
// No standard headers: NVRTC compiles this without a C library.
#ifndef PP_MATH_CUH
#define PP_MATH_CUH

#include "pp_params.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define PP_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#define PP_HD static inline
#endif

typedef unsigned char pp_u8;

// A product that the GPU compiler must not fuse into a following add (the host build does not either).
PP_HD float pp_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

PP_HD int pp_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// YUV -> 8-bit BGR in Q20 fixed point with the matrix and range in the parameter block (p.yuv).
// With BT.601 limited range (the default block) this is the integer arithmetic of OpenCV's
// COLOR_YUV2BGR_NV12 / _YUYV: the GPU path converts camera frames exactly as a host would.
#define PP_SHIFT 20

PP_HD void pp_yuv_to_bgr(const PpParams& p, int y, int u, int v, float* b, float* g, float* r) {
    const int half = 1 << (PP_SHIFT - 1);
    const int yy = (y > p.yuv[0] ? y - p.yuv[0] : 0) * p.yuv[1];
    u -= 128;
    v -= 128;
    *b = (float)pp_clamp((yy + half + p.yuv[2] * u) >> PP_SHIFT, 0, 255);
    *g = (float)pp_clamp((yy + half + p.yuv[4] * v + p.yuv[3] * u) >> PP_SHIFT, 0, 255);
    *r = (float)pp_clamp((yy + half + p.yuv[5] * v) >> PP_SHIFT, 0, 255);
}

// One source pixel (absolute frame coordinates, already clamped) as float B, G, R.
template <int FMT>
PP_HD void pp_fetch(const PpParams& p, int x, int y, float* b, float* g, float* r) {
    const pp_u8* src = (const pp_u8*)p.src;
    if (FMT == PP_FMT_BGR8 || FMT == PP_FMT_RGB8) {
        const pp_u8* px = src + (long long)y * p.src_pitch + 3 * x;
        *b = (float)px[FMT == PP_FMT_BGR8 ? 0 : 2];
        *g = (float)px[1];
        *r = (float)px[FMT == PP_FMT_BGR8 ? 2 : 0];
    } else if (FMT == PP_FMT_NV12) {
        const pp_u8* uv = (const pp_u8*)p.src_uv + (long long)(y >> 1) * p.uv_pitch + 2 * (x >> 1);
        pp_yuv_to_bgr(p, src[(long long)y * p.src_pitch + x], uv[0], uv[1], b, g, r);
    } else {  // YUYV: a macropixel of two pixels shares U and V
        const pp_u8* mp = src + (long long)y * p.src_pitch + 4 * (x >> 1);
        pp_yuv_to_bgr(p, mp[2 * (x & 1)], mp[1], mp[3], b, g, r);
    }
}

// Bilinear sample of content pixel (u, v): crop position a*u + b per axis, edges replicated.
template <int FMT>
PP_HD void pp_sample(const PpParams& p, int u, int v, float* b, float* g, float* r) {
    const float sx = fmaf(p.ax, (float)u, p.bx);
    const float sy = fmaf(p.ay, (float)v, p.by);
    const float fx0 = floorf(sx), fy0 = floorf(sy);
    const float fx = sx - fx0, fy = sy - fy0;
    const int x0 = pp_clamp((int)fx0, 0, p.crop_w - 1) + p.crop_x;
    const int x1 = pp_clamp((int)fx0 + 1, 0, p.crop_w - 1) + p.crop_x;
    const int y0 = pp_clamp((int)fy0, 0, p.crop_h - 1) + p.crop_y;
    const int y1 = pp_clamp((int)fy0 + 1, 0, p.crop_h - 1) + p.crop_y;
    float c00[3], c01[3], c10[3], c11[3];
    pp_fetch<FMT>(p, x0, y0, &c00[0], &c00[1], &c00[2]);
    pp_fetch<FMT>(p, x1, y0, &c01[0], &c01[1], &c01[2]);
    pp_fetch<FMT>(p, x0, y1, &c10[0], &c10[1], &c10[2]);
    pp_fetch<FMT>(p, x1, y1, &c11[0], &c11[1], &c11[2]);
    float out[3];
    for (int c = 0; c < 3; ++c) {
        const float top = fmaf(fx, c01[c] - c00[c], c00[c]);
        const float bottom = fmaf(fx, c11[c] - c10[c], c10[c]);
        out[c] = fmaf(fy, bottom - top, top);
    }
    *b = out[0];
    *g = out[1];
    *r = out[2];
}

// float32 -> IEEE half bits, round to nearest even (the GPU's cvt.rn.f16.f32, numpy's astype).
PP_HD unsigned short pp_f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    union { float f; unsigned int u; } bits;
    bits.f = f;
    const unsigned int x = bits.u;
    const unsigned int sign = (x >> 16) & 0x8000u;
    const unsigned int mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));  // inf, nan
    if (mag >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds past 65504: inf
    if (mag < 0x38800000u) {  // subnormal half (or zero): shift the 24-bit mantissa, round to even
        if (mag < 0x33000000u) return (unsigned short)sign;  // below half the smallest subnormal
        const unsigned int e = mag >> 23;
        const unsigned int m = (mag & 0x7fffffu) | 0x800000u;
        const unsigned int shift = 126u - e;  // value = m * 2^(e-150); the subnormal unit is 2^-24
        unsigned int h = m >> shift;
        const unsigned int rest = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
        return (unsigned short)(sign | h);
    }
    unsigned int h = ((mag - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
    const unsigned int rest = mag & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may roll into the exponent: correct
    return (unsigned short)(sign | h);
#endif
}

template <int DT, int LAYOUT>
PP_HD void pp_store(const PpParams& p, int x, int y, int c, float value) {
    const long long index = LAYOUT == PP_LAYOUT_NCHW ? ((long long)c * p.out_h + y) * p.out_w + x
                                                      : ((long long)y * p.out_w + x) * p.channels + c;
    if (DT == PP_DT_U8) {  // raw pixel in [0, 255]: +0.5 and truncate, as the CPU path
        ((pp_u8*)p.dst)[index] = (pp_u8)(value + 0.5f);
        return;
    }
    const float normalised = fmaf(value, p.gain[c], p.offset[c]);
    if (DT == PP_DT_F32) {
        ((float*)p.dst)[index] = normalised;
    } else if (DT == PP_DT_F16) {
        ((unsigned short*)p.dst)[index] = pp_f32_to_f16(normalised);
    } else {  // INT8: QuantizeLinear with zero point 0: round half to even, saturate
        const float q = rintf(normalised / p.quant_scale);
        ((signed char*)p.dst)[index] = (signed char)(q < -128.0f ? -128.0f : (q > 127.0f ? 127.0f : q));
    }
}

// Everything one output pixel needs: sample (or pad), colour, normalise, store every channel.
template <int FMT, int DT, int LAYOUT>
PP_HD void pp_pixel(const PpParams& p, int x, int y) {
    float bgr[3];
    const int u = x - p.pad_x, v = y - p.pad_y;
    if (u < 0 || v < 0 || u >= p.content_w || v >= p.content_h) {
        bgr[0] = bgr[1] = bgr[2] = p.pad_value;
    } else {
        pp_sample<FMT>(p, u, v, &bgr[0], &bgr[1], &bgr[2]);
    }
    if (p.channels == 1) {  // OpenCV's float BGR2GRAY weights
        pp_store<DT, LAYOUT>(p, x, y, 0, fmaf(0.299f, bgr[2], fmaf(0.587f, bgr[1], 0.114f * bgr[0])));
        return;
    }
    for (int c = 0; c < 3; ++c) pp_store<DT, LAYOUT>(p, x, y, c, bgr[p.pick[c]]);
}

#endif
