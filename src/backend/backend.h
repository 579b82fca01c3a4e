/* src/backend/backend.h: the table of operations a backend offers the model code.
 *
 * Shaped like ggml's backend tables: a struct of function pointers plus an opaque
 * `ctx`. The model code (src/model/) calls only these; it never names a device API,
 * so the CPU backend (src/backend/cpu/ops_cpu.c) and a CUDA backend implement the
 * same table.
 *
 * Conventions
 *  - Activations are FP32, row-major, in device buffers from buf_alloc. A "row" is
 *    one token; row strides are in floats so ops can read a column slice of a wider
 *    buffer (e.g. the query half of q_proj's output) without a copy.
 *  - Weights stay as stored in the package (BF16, packed int4, ...). weight_upload
 *    gets a host view into the mapped file; the CPU backend keeps that view (no copy,
 *    no unpacking); a GPU backend copies the packed bytes to device memory.
 *  - Small per-channel parameters (norm weights, A_log, dt_bias, conv taps) are
 *    widened to FP32 on the host by the model code and uploaded with vec_upload.
 *  - Ops that work per sequence take `seg`: n_seg sequences packed back to back
 *    (padding never materialised; see docs/model.md for why that is exact).
 *  - Every op returns vsr_status and fills err; a device fault becomes an error,
 *    never an abort. */
#ifndef VSR_BACKEND_H
#define VSR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a linear weight [N, K] (out x in) is stored. */
typedef enum vsr_wkind {
    VSR_WK_BF16,  /* w: uint16 bf16 [N, K] */
    VSR_WK_F32,   /* w: float [N, K] (the FP32 readout) */
    VSR_WK_INT4,  /* pack-quantized W4A16: w: u32 [N, K/8], scale bf16 [N, G], zp u32 [N/8, G] or
                     NULL (symmetric), g_idx int32 [K] or NULL */
    VSR_WK_FP8,   /* float-quantized: w: e4m3fn [N, K], scale bf16 [N] */
    VSR_WK_NVFP4, /* nvfp4-pack-quantized: w: u8 [N, K/2], scale e4m3fn [N, K/16], global_scale */
    VSR_WK_COUNT
} vsr_wkind;

const char *vsr_wkind_name(vsr_wkind k); /* "bf16", "f32", "int4", "fp8", "nvfp4" */

/* Host view of one stored linear weight (pointers into the package mapping). */
typedef struct vsr_weight_view {
    vsr_wkind kind;
    int64_t N, K;
    const void *w;
    const void *scale;
    const void *zp;
    const int32_t *g_idx;
    int group;          /* int4: columns per group (K when the strategy is channel) */
    float global_scale; /* nvfp4 */
    const char *name;   /* tensor name, for messages */
} vsr_weight_view;

/* A weight as the backend holds it (opaque to the model). */
typedef struct vsr_bweight vsr_bweight;

/* Sequences packed back to back: sequence s holds rows [start[s], start[s] + len[s]) of a
 * token buffer; pos0[s] is the rotary position of its first token. keys (NULL: every row) gives
 * the rows of each sequence that attention reads as keys, its first keys[s] (a bucketed forward's
 * real tokens; the pad tokens after them are never attended to). `staged` (bucketed forwards,
 * rows_stage): the row table staged with the token ids holds pos0 at [0, n) and keys at [2n, 3n)
 * (the gathered indices between), and a backend that records forwards reads them from there, so
 * that a replay takes the next request's; pos0 and keys hold the same values (checks, backends
 * that do not record). */
typedef struct vsr_segs {
    int n;
    const int64_t *start;
    const int64_t *len;
    const int64_t *pos0;
    int staged;
    const int64_t *keys;
} vsr_segs;

typedef struct vsr_backend_ops {
    const char *name; /* "cpu", "cuda" */
    void (*destroy)(void *ctx);

    /* ---- memory ---- */
    vsr_status (*buf_alloc)(void *ctx, size_t bytes, void **out, vsr_err *err);
    void (*buf_free)(void *ctx, void *buf); /* NULL is a no-op */
    vsr_status (*buf_set)(void *ctx, void *dst, const void *host_src, size_t bytes, vsr_err *err);
    vsr_status (*buf_get)(void *ctx, void *host_dst, const void *src, size_t bytes, vsr_err *err);

    /* ---- weights ---- */
    /* Refuses kinds this backend cannot run, with the reason. */
    vsr_status (*weight_upload)(void *ctx, const vsr_weight_view *v, vsr_bweight **out, vsr_err *err);
    void (*weight_free)(void *ctx, vsr_bweight *w);
    /* Bytes the weight occupies on the device as the backend holds it. */
    uint64_t (*weight_bytes)(void *ctx, const vsr_bweight *w);
    /* FP32 [n] host vector -> device buffer (copied; small per-channel parameters). */
    vsr_status (*vec_upload)(void *ctx, const float *host, int64_t n, float **out, vsr_err *err);

    /* ---- ops (x, y: device FP32) ---- */
    /* y[t, :] = bf16 table row ids[t], widened. ids are host int32 [n]. */
    vsr_status (*embed)(void *ctx, const vsr_bweight *table, const int32_t *ids, int64_t n, float *y,
                        vsr_err *err);
    /* y[M, N] (+)= x[M, K] . W[N, K]^T ; x row stride K, y row stride N. */
    vsr_status (*linear)(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *y,
                         int accumulate, vsr_err *err);
    /* y = x * rsqrt(mean(x^2) + eps) * (w_offset + w), per row of D, in FP32.
     * qwen3_5's RMSNorm is w_offset = 1 (weights stored zero-centred). In place allowed. */
    vsr_status (*rmsnorm)(void *ctx, const float *x, int64_t x_stride, int64_t M, int64_t D,
                          const float *w, float w_offset, float eps, float *y, int64_t y_stride,
                          vsr_err *err);
    /* DeltaNet output norm: y = w * (x * rsqrt(mean(x^2) + eps)) * silu(z), per row of D; x, y
     * contiguous [M, D]; z row r at z + (r / zh) * z_stride + (r % zh) * D (zh rows of D per token
     * at a token stride: a slice of a stacked projection's output; contiguous: zh 1, z_stride D). */
    vsr_status (*rmsnorm_gated)(void *ctx, const float *x, const float *z, int64_t zh, int64_t z_stride, int64_t M,
                                int64_t D, const float *w, float eps, float *y, vsr_err *err);
    /* Causal depthwise conv over each sequence, then silu:
     * y[t, c] = silu(sum_j w[c, j] * x[t - (Kc-1) + j, c]), x before the sequence = 0.
     * x: rows at stride x_stride >= C (the first C columns of a stacked projection's output);
     * y: [rows, C] contiguous (must not overlap x); w: [C, Kc]. */
    vsr_status (*conv1d_silu)(void *ctx, const float *x, int64_t x_stride, const vsr_segs *seg, int64_t C,
                              const float *w, int Kc, float *y, vsr_err *err);
    /* Gated delta rule, per sequence from a zero state, FP32 (transformers'
     * torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel=True):
     *   qkv row: [q (Hk*dk) | k (Hk*dk) | v (Hv*dv)] (after the conv), stride qkv_stride;
     *   q, k l2-normalised per head (eps 1e-6), q scaled by 1/sqrt(dk);
     *   value head h reads key head h / (Hv/Hk);
     *   beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)  (b, a: [rows, Hv]);
     *   S = S*exp(g); S += k (x) beta*(v - S^T k); o = S^T q.
     * b, a: row t at b + t*ba_stride (ba_stride >= Hv; Hv when contiguous).
     * out: [rows, Hv*dv]. state: scratch of n_seg * Hv*dk*dv floats (per-row state). */
    vsr_status (*deltanet)(void *ctx, const float *qkv, int64_t qkv_stride, const float *b,
                           const float *a, int64_t ba_stride, const float *A_log, const float *dt_bias,
                           const vsr_segs *seg, int Hk, int Hv, int dk, int dv, float *state,
                           float *out, vsr_err *err);
    /* Rotary embedding in place on the first rot_dim dims of every head (rotate_half form),
     * position = seg->pos0[s] + t; cos/sin tables [max_pos, rot_dim/2]. x row stride x_stride,
     * heads at x + h*head_stride. */
    vsr_status (*rope)(void *ctx, float *x, int64_t x_stride, const vsr_segs *seg, int H,
                       int64_t head_stride, int rot_dim, const float *cos_t, const float *sin_t,
                       int64_t max_pos, vsr_err *err);
    /* Scaled dot-product attention per sequence with GQA (query head h reads kv head
     * h / (H/Hkv)); q: [rows, H*d] stride q_stride, k, v: [rows, Hkv*d], out: [rows, H*d].
     * causal: key j <= query i; else every key of the sequence. Softmax in FP32. */
    vsr_status (*attention)(void *ctx, const float *q, int64_t q_stride, const float *k,
                            const float *v, const vsr_segs *seg, int H, int Hkv, int d,
                            float scale, int causal, float *out, vsr_err *err);
    /* y[M, D] = x[M, D] * sigmoid(g[M, D] at stride g_stride, heads of hd at g + h*g_head_stride).
     * Used for the attention output gate; y may alias x. */
    vsr_status (*mul_sigmoid)(void *ctx, float *x, int64_t M, int H, int hd, const float *g,
                              int64_t g_stride, int64_t g_head_stride, vsr_err *err);
    /* y[M, N] = silu(g[M, N]) * u[M, N] (SwiGLU). g and u rows at stride gu_stride >= N (2N for the
     * two halves of a fused gate|up product), y contiguous; y may alias g when gu_stride == N. */
    vsr_status (*swiglu)(void *ctx, const float *g, const float *u, int64_t gu_stride, int64_t M, int64_t N,
                         float *y, vsr_err *err);
    /* y[i] += x[i], n elements. */
    vsr_status (*add)(void *ctx, float *y, const float *x, int64_t n, vsr_err *err);
    /* dst row r = src row rows[r] (host indices), D floats each. */
    vsr_status (*gather_rows)(void *ctx, const float *src, const int64_t *rows, int64_t n, int64_t D,
                              float *dst, vsr_err *err);
    /* Decision readout: logits[M, N] = h[M, D] . R[N, D]^T. An FP32 R computes in FP32; a BF16 R
     * computes as torch does in bf16 (h rounded to bf16, FP32 accumulation, result rounded to
     * bf16) and the result is widened to FP32. */
    vsr_status (*readout)(void *ctx, const float *h, int64_t M, const vsr_bweight *R, float *logits,
                          vsr_err *err);

    /* ---- optional: NULL / 0 where a backend does not offer them; the model works without ---- */

    /* Most rows the model should give one MLP step (bounds its [rows, I] intermediates); 0 = the
     * model's default. A GPU wants large GEMMs; a CPU wants the intermediates in cache. */
    int64_t mlp_rows;
    /* Declares that the next op writing x[rows, K] (row-major, contiguous) makes the input of
     * linears. The backend may keep, made in that op's own pass, a copy in the precision its
     * linears read (BF16, or FP8 with per-row scales) and let linears on rows of x use it;
     * results are the same as without the hint. `readers` (n_readers, may be 0) are the weights
     * of every linear that will read x, when nothing else ever will (all rows, before any other
     * declared op): then, if each of them can read the copy, the FP32 x may be left unwritten. */
    void (*feed_linears)(void *ctx, const float *x, int64_t rows, int64_t K, const vsr_bweight *const *readers,
                         int n_readers);
    /* Replay of a forward whose shape repeats (CUDA graphs). `key` names everything the op
     * sequence depends on except the token ids and the staged row table (rows_stage). graph_begin either replays a recording of key
     * with these ids (*replayed = 1: the model skips its op calls and reads the outputs), or
     * returns *replayed = 0 and may start recording: the model then makes its op calls as usual
     * and calls graph_end(ops_status) whatever happened; graph_end runs what was recorded. When
     * it sets *rerun, nothing was run (the recording failed): the model makes the calls again,
     * unrecorded. Outputs are bit-identical to running the ops one by one. */
    vsr_status (*graph_begin)(void *ctx, uint64_t key, const int32_t *ids, int64_t n_ids, int *replayed,
                              vsr_err *err);
    vsr_status (*graph_end)(void *ctx, vsr_status ops_status, int *rerun, vsr_err *err);
    /* One weight of n stored weights of one kind and K, stacked along N (the fused gate|up
     * projection; a linear on it writes each part's outputs side by side in a row). Parts it cannot
     * stack are refused with VSR_E_UNSUPPORTED; the model then keeps them apart. */
    vsr_status (*weight_upload_cat)(void *ctx, const vsr_weight_view *parts, int n, vsr_bweight **out,
                                    vsr_err *err);
    /* The gated MLP's first half in one call: y[M, N] = silu(g) * u, where [g | u] = x . W^T and W is
     * a stacked gate|up weight of 2N outputs (weight_upload_cat of gate, up). `work` is the caller's
     * FP32 [M, 2N] buffer, which the backend may use for the product (its contents after the call are
     * unspecified). The backend may hold g and u in BF16 between the product and the activation (the
     * precision transformers keeps them in for a BF16 model): y is then within BF16 rounding of
     * linear + swiglu, never further. y is a producer output as swiglu's is (feed_linears applies). */
    vsr_status (*linear_swiglu)(void *ctx, const float *x, int64_t M, const vsr_bweight *w_gu, float *work, float *y,
                                vsr_err *err);
    /* Declares that the next linear, when it writes y [rows, N] (contiguous, not accumulating), may hold
     * its product only in BF16, because until y is written again the only ops reading it are among
     * those that read such a product: conv1d_silu's x, rmsnorm_gated's z, deltanet's b and a (the
     * DeltaNet input projection's consumers). They read it within BF16 rounding (the precision
     * transformers keeps a BF16 model's activations in). Any other op reading it is refused
     * (VSR_E_INTERNAL), as a read of memory never written. The declaration is for the next linear
     * only; a backend may ignore it (then y is FP32 as usual). */
    void (*keep_product_bf16)(void *ctx, const float *y, int64_t rows, int64_t N);
    /* Bucketed forwards (optional, with graph_begin): the values a recording must not bake in
     * (each row's rotary start, the gathered token indices) go in a row table of n int64 that the
     * backend copies to the device with the next embed's token ids, as a replay copies the ids. Called
     * before graph_begin; the table stays staged until the next call. */
    vsr_status (*rows_stage)(void *ctx, const int64_t *tab, int64_t n, vsr_err *err);
    /* gather_rows with its indices read from the staged row table at tab_off (rows: the same values,
     * for checks). */
    vsr_status (*gather_rows_staged)(void *ctx, const float *src, const int64_t *rows, int64_t tab_off, int64_t n,
                                     int64_t D, float *dst, vsr_err *err);
} vsr_backend_ops;

typedef struct vsr_backend {
    const vsr_backend_ops *ops;
    void *ctx;
} vsr_backend;

/* The CPU backend with `threads` workers (0 = every online core). */
vsr_status vsr_backend_cpu_new(int threads, vsr_backend *out, vsr_err *err);
static inline void vsr_backend_destroy(vsr_backend *b) {
    if (b && b->ops) b->ops->destroy(b->ctx);
    if (b) b->ops = NULL, b->ctx = NULL;
}

#ifdef __cplusplus
}
#endif

#endif
