// The parameter block of the preprocessing kernels, passed by value to every kernel and to the
// host reference. Python packs the same layout (sdk/gpu/params.py); a test compares the offsets.
// Only 8-byte addresses, then 4-byte fields: no padding on any ABI we target (x86-64, aarch64, PTX).
#ifndef PP_PARAMS_H
#define PP_PARAMS_H

// Input pixel formats (camera / decoder output).
#define PP_FMT_BGR8 0  // packed 3 bytes B, G, R
#define PP_FMT_RGB8 1  // packed 3 bytes R, G, B
#define PP_FMT_NV12 2  // Y plane, then interleaved U, V at half resolution in both axes (Argus, NVDEC)
#define PP_FMT_YUYV 3  // packed 4:2:2: Y0 U Y1 V per two pixels (USB/V4L2 cameras)

// Output element types.
#define PP_DT_F32 0
#define PP_DT_F16 1
#define PP_DT_U8 2  // raw pixels, rounded (no normalisation, as the CPU path)
#define PP_DT_I8 3  // normalised value quantized with the model input's scale (symmetric, TensorRT)

#define PP_LAYOUT_NCHW 0
#define PP_LAYOUT_NHWC 1

struct PpParams {
    unsigned long long src;     // packed pixels, or the Y plane of NV12
    unsigned long long src_uv;  // NV12 chroma plane; 0 for other formats
    unsigned long long dst;     // the output tensor
    int src_pitch;              // bytes per source row
    int uv_pitch;               // bytes per chroma row (NV12)
    int crop_x, crop_y, crop_w, crop_h;
    int out_w, out_h;
    int pad_x, pad_y, content_w, content_h;
    float ax, bx, ay, by;       // content pixel u samples crop position a*u + b, per axis
    float gain[3];              // scale / std per output channel
    float offset[3];            // -mean / std per output channel
    float pad_value;            // raw pixel value of the letterbox border
    float quant_scale;          // INT8 output: value = q * quant_scale
    int channels;               // 3, or 1 for gray
    int pick[3];                // output channel c takes B (0), G (1) or R (2)
    // YUV sources (NV12, YUYV): Q20 fixed-point conversion to BGR (sdk/gpu/colour.py computes them).
    // yuv[0] is the luma offset (16 limited range, 0 full range), then the coefficients of
    // Y, U->B, U->G, V->G, V->R; chroma is centred on 128. BT.601 limited range by default (OpenCV's).
    int yuv[6];
};

#endif
