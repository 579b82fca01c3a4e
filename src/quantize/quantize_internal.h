/* Internals shared by the package writer (writer.c), the load-time FP8 path (load_fp8.c) and
 * the round-to-nearest helpers (rtn.c). */
#ifndef VSR_QUANTIZE_INTERNAL_H
#define VSR_QUANTIZE_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "vsr/package.h"
#include "vsr/quantize_pkg.h"

/* ---- round to nearest (rtn.c) ---- */

/* max |w| over n BF16 values, as FP32 (exact). */
float qz_bf16_absmax(const uint16_t *w, int64_t n);
/* compressed-tensors' NVFP4 weight global scale for a tensor amax:
 * f32(bf16(bf16(1 / amax) * 448 * 6)), nan/inf -> 1 (see src/format/quantize.c). */
float qz_nvfp4_global_scale(float amax);
/* NVFP4 rows [rows, K] with a given global scale (the fused one for q/k/v and gate/up):
 * packed [rows, K/2], scale [rows, K/16]. With gs = qz_nvfp4_global_scale(amax(w)) this is
 * vsr_quantize_nvfp4_rtn bit for bit (tests/test_quantize_pkg.c). */
void qz_nvfp4_rows(const uint16_t *w, int64_t rows, int64_t K, float gs, uint8_t *packed,
                   uint8_t *scale);
/* Runs fn(ctx, t) for t in [0, ntasks) on up to `threads` threads (0 = online cores). */
void qz_parallel(int64_t ntasks, int threads, void (*fn)(void *ctx, int64_t t), void *ctx);
/* FP8 RTN of a whole [N, K] weight, rows in parallel (vsr_quantize_fp8_rtn per row block). */
void qz_fp8_parallel(const uint16_t *w, int64_t N, int64_t K, int threads, uint8_t *w8,
                     uint16_t *scale);

/* ---- the recipe: which Linear modules are quantized (writer.c) ---- */

typedef struct qz_linear {
    char module[256];        /* checkpoint name without ".weight" */
    const vsr_tensor *w;     /* the BF16 weight [N, K] */
    int64_t N, K;
    bool quantized;          /* targeted and not ignored */
    int layer;               /* text decoder layer, -1 outside them */
    int fuse;                /* NVFP4 global-scale group within the layer: 0 none, 1 q/k/v, 2 gate/up */
    long order;              /* transformers' named_modules() order (the ignore list's order) */
} qz_linear;

typedef struct qz_plan {
    vsr_qscheme scheme;
    int group;               /* int4 group size */
    bool actorder;
    qz_linear *lin;
    int n_lin, n_quant;
    int n_layers;            /* text decoder layers (for progress) */
    vsr_quant_config recipe; /* the recipe's ignore patterns, compiled by the config parser */
} qz_plan;

/* Finds every Linear weight of a mapped BF16 package and applies the recipe (default patterns
 * plus `extra`); refuses shapes the scheme cannot hold (K % 16 for NVFP4, K % group for int4). A refused
 * plan is freed here (qz_plan_free on it is a harmless no-op). */
vsr_status qz_plan_make(const vsr_package *p, vsr_qscheme s, int group, bool actorder,
                        const char *const *extra, int n_extra, qz_plan *out, vsr_err *err);
void qz_plan_free(qz_plan *pl);
/* The refusal when calibration's Hessians (need bytes for n_inputs Linear inputs) exceed the host's available
 * memory; VSR_OK when they fit (writer.c checks before the calibration forward). */
vsr_status qz_calib_memory_check(uint64_t need, int n_inputs, uint64_t avail, vsr_err *err);
/* The quantization_config object compressed-tensors 0.20.1 writes for the plan (new ref). */
json_t *qz_config_json(const qz_plan *pl);

#endif
