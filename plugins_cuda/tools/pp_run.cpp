// The host reference as a program: pp_run PARAMS FORMAT DTYPE LAYOUT SRC UV|- OUT_BYTES OUT
// PARAMS holds a PpParams as Python packed it; the addresses in it are replaced by this
// process's buffers. Used to run the aarch64 build under qemu, where there is no Python.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_params.h"

extern "C" int pp_reference(const PpParams* p, int format, int dtype, int layout);

static unsigned char* read_file(const char* path, long* size) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* data = (unsigned char*)malloc(*size > 0 ? *size : 1);
    const size_t got = fread(data, 1, (size_t)*size, f);
    fclose(f);
    if ((long)got != *size) { free(data); return NULL; }
    return data;
}

int main(int argc, char** argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: pp_run PARAMS FORMAT DTYPE LAYOUT SRC UV|- OUT_BYTES OUT\n");
        return 2;
    }
    long size = 0, src_size = 0, uv_size = 0;
    unsigned char* raw = read_file(argv[1], &size);
    if (!raw || size != (long)sizeof(PpParams)) {
        fprintf(stderr, "pp_run: %s is not a %u-byte PpParams\n", argv[1], (unsigned)sizeof(PpParams));
        return 1;
    }
    PpParams p;
    memcpy(&p, raw, sizeof p);
    unsigned char* src = read_file(argv[5], &src_size);
    unsigned char* uv = strcmp(argv[6], "-") ? read_file(argv[6], &uv_size) : NULL;
    const long out_bytes = atol(argv[7]);
    unsigned char* out = (unsigned char*)calloc(out_bytes > 0 ? out_bytes : 1, 1);
    if (!src || !out || (strcmp(argv[6], "-") && !uv)) {
        fprintf(stderr, "pp_run: cannot read the inputs\n");
        return 1;
    }
    p.src = (unsigned long long)(size_t)src;
    p.src_uv = (unsigned long long)(size_t)uv;
    p.dst = (unsigned long long)(size_t)out;
    if (pp_reference(&p, atoi(argv[2]), atoi(argv[3]), atoi(argv[4])) != 0) {
        fprintf(stderr, "pp_run: unknown format, dtype or layout\n");
        return 1;
    }
    FILE* f = fopen(argv[8], "wb");
    if (!f || fwrite(out, 1, (size_t)out_bytes, f) != (size_t)out_bytes) return 1;
    fclose(f);
    return 0;
}
