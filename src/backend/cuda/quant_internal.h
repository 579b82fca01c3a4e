/* src/backend/cuda/quant_internal.h: what quant_fp8.cu, quant_int4.cu and autotune.cu share,
 * plus a few C-callable knobs for tests and the GEMM benchmark.
 *
 * The first part (below VSR_QUANT_INTERNAL_CUDA) needs CUDA headers and is for .cu files only;
 * the knobs at the end use plain C types so tests/test_cuda_quant.c can call them.
 *
 * Paths (docs: PRODUCT.md "Kernel rules"):
 *  FP8 W8A8   x FP32 -> (one kernel: per-row amax, scale = amax/448, e4m3 RNE saturating) ->
 *             cuBLASLt FP8 matmul with outer-vector FP32 scales (per weight channel, per token),
 *             "scaled"; or the unscaled FP8 product into FP32 followed by an epilogue applying
 *             both scales, "unscaled" (the seed's Ada rule: capability 8.9, >= 256 rows,
 *             --dtype auto). Explicit --dtype keeps the scaled product.
 *  int4 W4A16 --dtype auto and M <= 256: a fused mma.sync kernel reading the packed nibbles
 *             (repacked once at upload into the tensor-core fragment order; at <= 16 rows the
 *             weight-streaming kernel, BF16 activations); otherwise the
 *             weight is unpacked to BF16 once per call into a workspace and multiplied by the
 *             BF16 cuBLASLt GEMM. */
#ifndef VSR_CUDA_QUANT_INTERNAL_H
#define VSR_CUDA_QUANT_INTERNAL_H

#include <stdint.h>

#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- knobs (process-wide; TEST/BENCH ONLY, not thread-safe against concurrent linears) ---- */

/* FP8 path: 0 automatic (the rules above), 1 scaled (row-wise scales inside the matmul),
 * 2 unscaled product + scale epilogue (the Ada rule's path, selectable on any FP8 GPU).
 * Returns the previous value, or -1 for an unknown value (nothing changed). */
int cuda_quant_force_fp8_path(int mode);
/* int4 path: 0 automatic, 1 fused (refused above 256 rows or for a layout the fused kernel
 * cannot take), 2 unpack to BF16 + cuBLASLt. Returns the previous value or -1. */
int cuda_quant_force_int4_path(int mode);
/* int4 fused kernel: force candidate configuration idx (>= 0) of the shape's autotune list instead of
 * the default or the cache (-1: off). A linear whose list is shorter fails with VSR_E_INVALID naming
 * the index ("no int4 fused candidate N"), so a test can walk every candidate. Returns the previous value. */
int cuda_quant_force_int4_cfg(int idx);
/* int4 streaming kernel (k_i4_stream, <= 16 rows): 1 allowed (the default, unless the environment has
 * VSR_CUDA_INT4_STREAM=0), 0 the previous fused kernels only (their own autotune list and key), so one
 * process can time old against new. Returns the previous value, or -1 for an unknown value. */
int cuda_quant_force_int4_stream(int on);
/* cuda_int4_linear_bf16 for C callers (tests, bench): xb device BF16 [M, K], ctx the backend's ctx. */
struct vsr_bweight;
vsr_status cuda_quant_int4_linear_bf16(void *ctx, const void *xb, int64_t M, const struct vsr_bweight *w, float *y,
                                       int accumulate, vsr_err *err);
/* FP8 fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM; the own kernel's "fast"), 1 on, 0 off (the
 * default, or VSR_CUDA_FP8_FAST_ACCUM=1: on), for tests and the bench; returns the previous setting. */
int cuda_quant_set_fp8_fast_accum(int on);
/* The FP8 linear's route on capability 9.0 when VSR_FP8_GEMM is unset (quant_fp8.cu): -1 automatic
 * (the default: timed with --autotune-cache, else cuBLASLt), 0 cuBLASLt, 1 / 2 the own sm_90a kernel
 * at tile width 128 / 256. Returns the previous setting, or -2 for a value out of range. */
int cuda_quant_force_fp8_route(int route);
/* 1 when this device's cuBLASLt offers outer-vector-scaled FP8 algorithms (FP32 and BF16 out: cuBLASLt
 * 13.1's "ovscale" kernels on the H200) and VSR_CUDA_FP8_OVSCALE is not 0; then FP8 linears take
 * (a), FP32 products scaled by cuBLASLt, and kept products (b), the scaled product in BF16
 * (quant_fp8.cu). ctx is the CUDA backend's ctx. */
int cuda_quant_fp8_ovscale(void *ctx);
/* Allows (1, the default unless VSR_CUDA_FP8_OVSCALE=0) or forbids (0) those algorithms, for tests;
 * returns the previous setting. */
int cuda_quant_set_fp8_ovscale(int on);
/* The path the last quantized linear took, e.g. "fp8:scaled(outer-vec)", "fp8:unscaled+epilogue",
 * "int4:fused(mt=2,w=4,ks=8,src=cache)", "int4:unpack+bf16". Static storage. */
const char *cuda_quant_last_path(void);
/* Tile timings done by this process (autotune runs), and loads from an autotune cache file. */
long cuda_quant_autotune_timings(void);
long cuda_quant_autotune_loads(void);
/* Sets the options the model layer would set on the backend (NULL leaves a field as it is):
 * dtype ("auto" or explicit) and the autotune cache directory ("" = none). ctx is the CUDA
 * backend's ctx (vsr_backend.ctx). */
vsr_status cuda_quant_set_options(void *ctx, const char *dtype, const char *autotune_dir, vsr_err *err);
/* TEST-ONLY: pretend the device has compute capability major.minor (gating tests, e.g. an
 * Ampere 8.0 for the FP8 refusal); returns the real one as major*10+minor. */
int cuda_quant_test_fake_cc(void *ctx, int major, int minor);

#ifdef __cplusplus
}
#endif

#ifdef VSR_QUANT_INTERNAL_CUDA
#include "backend/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-ctx private state of the quant paths (cuda_ctx.quant_state). Grow-only device buffers
 * owned here, so the quant hooks never depend on how the op files use c->scratch. */
typedef struct quant_state {
    void *act;        /* staged activations (bf16 fragments / bf16 rows / e4m3 rows) */
    size_t act_bytes;
    void *aux;        /* per-token scales (FP8 products read later), partial sums of split-K */
    size_t aux_bytes;
    void *wtmp;       /* unpacked BF16 weights / unscaled FP8 products */
    size_t wtmp_bytes;
    unsigned *counters; /* split-K arrival counters (zero between launches) */
    size_t counters_n;
    void *tune_out;   /* autotune: output of timed candidates (never the caller's y) */
    size_t tune_out_bytes;
    void *route_out;  /* FP8 route timing's own output (a route may tune cuBLASLt inside, growing tune_out) */
    size_t route_out_bytes;
    struct fp8_plan *plans; /* cuBLASLt FP8 plans (quant_fp8.cu) */
    int n_plans, next_plan;
    int fp8_ov; /* outer-vector-scaled FP8 algorithms in cuBLASLt: 0 not probed yet, 1 none, 2 offered */
    struct tune_entry *tune; /* autotune choices known to this ctx (autotune.cu) */
    int n_tune, cap_tune;
    struct i4_memo *i4memo; /* the int4 fused configuration each key resolved to (quant_int4.cu) */
    int n_i4memo, cap_i4memo;
} quant_state;

/* What a quant upload keeps beside vsr_bweight's device pointers (vsr_bweight.q; host memory).
 * FP8:  w e4m3 [N, Kp] (rows zero-padded to Kp = K rounded up to 16, cuBLASLt's FP8 rule),
 *       scale FP32 [N] (the stored BF16 scales widened once).
 * int4: w u32 tiles [Np/16][Kp/64][32 lanes][4] in mma.m16n8k16 A-fragment order (see
 *       int4_kernels.cuh), scale u32 [G][Np] = bf16(128 + zero point) | bf16(scale) << 16,
 *       g_idx = the column permutation (int32 [Kp], -1 = padding) when act-order groups were
 *       sorted, dev = int32 [Kp/16] group of each 16-column block of the (permuted) K. */
typedef struct quant_wmeta {
    int64_t Np, Kp;
    int G;
    int fused_ok;  /* every 16-column block lies in one group: the fused int4 kernel applies */
    int gchunks;   /* int4: > 0 when the group of 64-column chunk kc is min(kc / gchunks, G - 1) (groups of
                    * a multiple of 64 columns in column order, or act-order sorted into equal groups; channel-wise:
                    * KC), so the fused kernels compute it instead of loading it; 0: look it up in dev */
    void *dev;     /* extra device allocation (int4: block groups), freed by cuda_quant_release */
} quant_wmeta;

vsr_status quant_state_get(cuda_ctx *c, quant_state **out, vsr_err *err);
/* Grow-only device buffer (synchronises the stream before freeing a smaller one). */
vsr_status quant_grow(cuda_ctx *c, void **buf, size_t *have, size_t need, const char *what, vsr_err *err);
/* dtype "auto" (or empty)? */
int quant_dtype_auto(const cuda_ctx *c);
void quant_set_last_path(const char *fmt, ...);
void fp8_plans_free(quant_state *q); /* quant_fp8.cu */

/* ---- autotune (autotune.cu) ----
 * A choice is an int config index into the caller's candidate list, recorded per
 * (kernel, device name, key). With c->autotune_dir set, the first process that needs a key times
 * the candidates and records the winner in DIR/<kernel>-<device>-<key>.json (created atomically:
 * a second process racing it loads the first one's file); later processes load the file and
 * never time. Without a directory, the caller's default is used and nothing is timed
 * (deterministic).
 * Timing: autotune_choose calls launch(c, cand, arg, out) in timed windows between two events on
 * c->stream (a warm-up launch before each; an estimate of 5 launches, then 3 interleaved rounds of
 * about 2 ms each per candidate, the median round counts: autotune.cu); `out` is a private buffer of out_bytes (never the caller's y).
 * launch returns 0 when it launched, TUNE_SKIP for a candidate that cannot run here (it counts
 * as very slow), or -1 with err set. */
#define TUNE_SKIP 1
typedef int (*tune_launch_fn)(cuda_ctx *c, int cand, void *arg, void *out, vsr_err *err);
vsr_status autotune_choose(cuda_ctx *c, const char *kernel, const char *key, int n_cand,
                           const char *const *cand_names, int default_cand, tune_launch_fn launch, void *arg,
                           size_t out_bytes, int *choice, const char **source, vsr_err *err);
/* The same for candidates that are positions in a list (cuBLASLt's heuristic algorithms), named
 * "a0".."a<n-1>" in the cache; n_cand <= AUTOTUNE_INDEXED_MAX. Default: the first. */
#define AUTOTUNE_INDEXED_MAX 64
vsr_status autotune_choose_indexed(cuda_ctx *c, const char *kernel, const char *key, int n_cand, tune_launch_fn launch,
                                   void *arg, size_t out_bytes, int *choice, const char **source, vsr_err *err);
void autotune_free(quant_state *q);

#ifdef __cplusplus
}
#endif
#endif /* VSR_QUANT_INTERNAL_CUDA */

#endif
