// SSD decode (TF Object Detection API box coder) per anchor, shared by the kernel and the host
// reference: scores above the threshold become candidates (box in network pixels, score, class)
// appended to a fixed-capacity list; NMS follows on the candidates (sdk/postprocess/nms.py).
// Mirrors sdk/postprocess/ssd.py step for step, in float32, the threshold too (numpy compares a float32
// array with a Python float in float32).
// expf differs between the GPU, glibc and numpy by an ulp or two: scores and boxes agree to ~1e-6
// relative, not bit for bit (the preprocessing kernels, which need no transcendental, do).
#ifndef SSD_DECODE_CUH
#define SSD_DECODE_CUH

#include "pp_math.cuh"

struct SsdParams {
    unsigned long long encodings;  // [count, 4] float: ty, tx, th, tw
    unsigned long long logits;     // [count, classes] float
    unsigned long long anchors;    // [count, 4] float: centre y, centre x, height, width (normalised)
    unsigned long long out_boxes;  // [capacity, 4] float: x1, y1, x2, y2 in network pixels
    unsigned long long out_scores; // [capacity] float
    unsigned long long out_classes;// [capacity] int: class index without the background
    unsigned long long out_count;  // one unsigned int: candidates found (may exceed capacity)
    int count;                     // anchors
    int classes;                   // logits per anchor, background included
    int first_class;               // 1 when class 0 is the background
    int capacity;
    int softmax;                   // 0: sigmoid per class; 1: softmax over all classes
    int clip;                      // clip normalised boxes to [0, 1] and drop empty ones
    float scale[4];                // box coder scale factors (y, x, h, w)
    float net_w, net_h;
    double threshold;              // sigmoid: on the logit (logit(t)); softmax: on the probability; used as float
};

PP_HD unsigned int pp_claim(unsigned int* counter) {
#if defined(__CUDA_ARCH__)
    return atomicAdd(counter, 1u);
#else
    return (*counter)++;
#endif
}

PP_HD float pp_clip01(float v) { return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }

PP_HD void ssd_anchor(const SsdParams& p, int i) {
    const float* logits = (const float*)p.logits + (long long)i * p.classes;
    float denominator = 0.0f, top = logits[0];
    if (p.softmax) {  // the CPU path's max-shifted softmax, summed in class order
        for (int c = 1; c < p.classes; ++c) top = logits[c] > top ? logits[c] : top;
        for (int c = 0; c < p.classes; ++c) denominator += expf(logits[c] - top);
    }
    bool decoded = false;
    float box[4];
    for (int c = p.first_class; c < p.classes; ++c) {
        float score;
        if (p.softmax) {
            score = expf(logits[c] - top) / denominator;
            if (!(score > (float)p.threshold)) continue;
        } else {
            if (!(logits[c] > (float)p.threshold)) continue;
            score = 1.0f / (1.0f + expf(-logits[c]));
        }
        if (!decoded) {
            const float* e = (const float*)p.encodings + 4LL * i;
            const float* a = (const float*)p.anchors + 4LL * i;
            const float ty = e[0] / p.scale[0], tx = e[1] / p.scale[1], th = e[2] / p.scale[2], tw = e[3] / p.scale[3];
            const float h = expf(th) * a[2], w = expf(tw) * a[3];
            const float cy = pp_mul(ty, a[2]) + a[0], cx = pp_mul(tx, a[3]) + a[1];
            box[0] = cx - pp_mul(0.5f, w);
            box[1] = cy - pp_mul(0.5f, h);
            box[2] = cx + pp_mul(0.5f, w);
            box[3] = cy + pp_mul(0.5f, h);
            if (p.clip) {
                for (int k = 0; k < 4; ++k) box[k] = pp_clip01(box[k]);
                if (!(box[2] > box[0] && box[3] > box[1])) return;  // empty after clipping: no class survives
            }
            box[0] *= p.net_w;
            box[2] *= p.net_w;
            box[1] *= p.net_h;
            box[3] *= p.net_h;
            decoded = true;
        }
        const unsigned int slot = pp_claim((unsigned int*)p.out_count);
        if (slot >= (unsigned int)p.capacity) continue;  // counted, not stored: the caller sees the overflow
        float* out = (float*)p.out_boxes + 4LL * slot;
        for (int k = 0; k < 4; ++k) out[k] = box[k];
        ((float*)p.out_scores)[slot] = score;
        ((int*)p.out_classes)[slot] = c - p.first_class;
    }
}

struct YoloParams {
    unsigned long long rows;        // the output tensor: v5 [N, 5 + C], v8 [4 + C, N] (float)
    unsigned long long out_boxes;   // [capacity, 4] float: x1, y1, x2, y2 in network pixels
    unsigned long long out_scores;  // [capacity] float
    unsigned long long out_classes; // [capacity] int
    unsigned long long out_count;   // one unsigned int
    int count;                      // candidate rows N
    int classes;
    int head;                       // 5 (v5: box + objectness) or 4 (v8)
    int row_stride, col_stride;     // element (i, k) is at i * row_stride + k * col_stride
    int capacity;
    int objectness;                 // v5: score = best class score x objectness
    float threshold;
};

// sdk/postprocess/yolo.py per row: first best class, its score (x objectness for v5), threshold, box.
PP_HD void yolo_row(const YoloParams& p, int i) {
    const float* row = (const float*)p.rows + (long long)i * p.row_stride;
    const long long cs = p.col_stride;
    int best = 0;
    float top = row[p.head * cs];
    for (int c = 1; c < p.classes; ++c) {
        const float v = row[(p.head + c) * cs];
        if (v > top) top = v, best = c;
    }
    const float score = p.objectness ? pp_mul(top, row[4 * cs]) : top;
    if (!(score > p.threshold)) return;
    const float cx = row[0], cy = row[cs], w = row[2 * cs], h = row[3 * cs];
    const unsigned int slot = pp_claim((unsigned int*)p.out_count);
    if (slot >= (unsigned int)p.capacity) return;
    float* out = (float*)p.out_boxes + 4LL * slot;
    out[0] = cx - pp_mul(0.5f, w);
    out[1] = cy - pp_mul(0.5f, h);
    out[2] = cx + pp_mul(0.5f, w);
    out[3] = cy + pp_mul(0.5f, h);
    ((float*)p.out_scores)[slot] = score;
    ((int*)p.out_classes)[slot] = best;
}

#endif
