/* src/backend/cuda/quant_common.cu: state and knobs shared by the quantized linears
 * (quant_fp8.cu, quant_int4.cu) and the autotune cache (autotune.cu): the per-ctx workspaces, the forced
 * paths and the last path taken (for tests and bench/gemm_cuda.cu). No kernel of its own (no floor).
 * Test: tests/test_cuda_quant.c (the knobs and paths it reports). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/quant_internal.h"

static int g_force_fp8, g_force_int4, g_force_int4_cfg = -1;
static char g_last_path[160];

extern "C" int cuda_quant_force_fp8_path(int mode) {
    if (mode < 0 || mode > 2) return -1;
    int old = g_force_fp8;
    g_force_fp8 = mode;
    return old;
}
extern "C" int cuda_quant_force_int4_path(int mode) {
    if (mode < 0 || mode > 2) return -1;
    int old = g_force_int4;
    g_force_int4 = mode;
    return old;
}
extern "C" int cuda_quant_force_int4_cfg(int idx) {
    int old = g_force_int4_cfg;
    g_force_int4_cfg = idx < 0 ? -1 : idx;
    return old;
}
int quant_forced_int4_cfg(void) { return g_force_int4_cfg; }
/* the int4 streaming kernel (M <= 16): on unless VSR_CUDA_INT4_STREAM=0 (read once) or switched by the knob */
CUDA_ENV_KNOB(, quant_int4_stream_on, cuda_quant_force_int4_stream, "VSR_CUDA_INT4_STREAM", 1)
/* FP8 fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM, and the own sm_90a kernel's "fast"): the
 * tensor cores' partial sums go straight into the accumulator, without a promotion into FP32 every
 * K block, as vLLM's FP8 W8A8 GEMMs on Hopper run (CUTLASS's KernelTmaWarpSpecialized*FP8FastAccum).
 * OFF by default; VSR_CUDA_FP8_FAST_ACCUM=1 (read once) turns it on; the knob below overrides both.
 * On the H200 it makes the 27B-shaped FP8 forward ~8 % faster (bench/notes/2026-11-29-cuda-sessions.md "FP8 fast
 * accumulation"), but its error (~1e-3 relative, growing like sqrt(K)) depends on the algorithm
 * cuBLASLt picks for each row count, and FP8 activations re-quantized downstream amplify it: the FP8
 * tiny built-in's answers moved by 0.052 (past the self-check's 0.02), so a request's answer would
 * depend on its batch and on the autotune cache. Promoted sums differ by ~1e-7 between algorithms. */
static int g_fp8_fast = -1;
int quant_fp8_fast_accum(void) { return cuda_env_switch("VSR_CUDA_FP8_FAST_ACCUM", 0, &g_fp8_fast); }
extern "C" int cuda_quant_set_fp8_fast_accum(int on) {
    return cuda_env_switch_set("VSR_CUDA_FP8_FAST_ACCUM", 0, &g_fp8_fast, on ? 1 : 0, 1);
}
int quant_forced_fp8_path(void) { return g_force_fp8; }
int quant_forced_int4_path(void) { return g_force_int4; }

extern "C" const char *cuda_quant_last_path(void) { return g_last_path; }
extern "C" void quant_set_last_path(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_path, sizeof g_last_path, fmt, ap);
    va_end(ap);
}

extern "C" vsr_status cuda_quant_set_options(void *ctx, const char *dtype, const char *autotune_dir,
                                             vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!c) return vsr_err_set(err, VSR_E_INVALID, "cuda: no backend context");
    if (dtype) {
        if (strlen(dtype) >= sizeof c->dtype)
            return vsr_err_set(err, VSR_E_INVALID, "cuda:%d: dtype \"%s\" is too long", c->device, dtype);
        snprintf(c->dtype, sizeof c->dtype, "%s", dtype);
    }
    if (autotune_dir) {
        if (strlen(autotune_dir) >= sizeof c->autotune_dir)
            return vsr_err_set(err, VSR_E_INVALID, "cuda:%d: autotune cache directory path is longer than %zu bytes",
                               c->device, sizeof c->autotune_dir - 1);
        snprintf(c->autotune_dir, sizeof c->autotune_dir, "%s", autotune_dir);
    }
    return VSR_OK;
}

extern "C" int cuda_quant_test_fake_cc(void *ctx, int major, int minor) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    int old = c->cc_major * 10 + c->cc_minor;
    c->cc_major = major, c->cc_minor = minor;
    return old;
}

extern "C" int quant_dtype_auto(const cuda_ctx *c) { return c->dtype[0] == 0 || strcmp(c->dtype, "auto") == 0; }

extern "C" vsr_status quant_state_get(cuda_ctx *c, quant_state **out, vsr_err *err) {
    if (!c->quant_state) {
        c->quant_state = calloc(1, sizeof(quant_state));
        if (!c->quant_state) return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (quant state)", c->device);
    }
    *out = (quant_state *)c->quant_state;
    return VSR_OK;
}

extern "C" vsr_status quant_grow(cuda_ctx *c, void **buf, size_t *have, size_t need, const char *what,
                                 vsr_err *err) {
    if (need <= *have && *buf) return VSR_OK;
    size_t n = need + need / 4 + 4096; /* headroom: shapes grow by a few rows at a time */
    if (*buf) {
        /* kernels already enqueued may still read the old buffer */
        vsr_status st = cuda_check(c, cudaStreamSynchronize(c->stream), "quant workspace: synchronize", err);
        if (st) return st;
        cudaFree(*buf);
        *buf = NULL, *have = 0;
    }
    c->mem_gen++; /* recorded graphs hold the old address */
    void *p = NULL;
    vsr_status st = cuda_check(c, cudaMalloc(&p, n), "cudaMalloc", err);
    if (st) return vsr_err_prefix(err, "%zu bytes of %s workspace", n, what);
    *buf = p, *have = n;
    return VSR_OK;
}

extern "C" void cuda_quant_release(cuda_ctx *c, vsr_bweight *b) {
    (void)c;
    if (!b || !b->q) return;
    quant_wmeta *m = (quant_wmeta *)b->q;
    cudaFree(m->dev);
    free(m);
    b->q = NULL;
}

extern "C" void cuda_quant_ctx_free(cuda_ctx *c) {
    quant_state *q = (quant_state *)c->quant_state;
    if (!q) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    cudaFree(q->act), cudaFree(q->aux), cudaFree(q->wtmp), cudaFree(q->counters), cudaFree(q->tune_out);
    cudaFree(q->route_out);
    fp8_plans_free(q);
    autotune_free(q);
    free(q->i4memo);
    free(q);
    c->quant_state = NULL;
}
