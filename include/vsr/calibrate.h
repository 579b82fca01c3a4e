/* vsr/calibrate.h: calibrated int4 weight quantization (issue 22): calibration statistics
 * gathered by running prompts through OUR forward, GPTQ, and AWQ's per-channel scale search.
 * Outputs are exactly compressed-tensors' pack-quantized int4 layout (compressed-tensors-format.md
 * section 2.2; the same layout vsr_quantize_int4_rtn writes and vsr_dequant_int4_ref reads).
 *
 * Calibration statistics come from the BF16 model in one pass (all layers at once, as
 * llm-compressor's "basic" pipeline gathers them), not layer by layer from already-quantized
 * predecessors (its "sequential" pipeline). docs/quantize.md says why and what it changes. */
#ifndef VSR_CALIBRATE_H
#define VSR_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/model.h"
#include "vsr/package.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One linear layer's calibration statistics. Linears that read the same input (q,k,v of a
 * full-attention layer; gate,up; the DeltaNet in_proj_*) point at the SAME H and act_absmean
 * (owned by the vsr_calib; never free them). */
typedef struct vsr_calib_layer {
    char module[256];      /* "model.language_model.layers.3.mlp.gate_proj" (no ".weight") */
    int64_t N, K;          /* weight [N, K] */
    double *H;             /* GPTQ: K x K row-major, sum over calibration tokens of x x^T (FP64), or NULL */
    double *act_absmean;   /* AWQ: [K] per input channel mean |x| over tokens, or NULL */
    int64_t n_tokens;      /* tokens that reached this linear */
} vsr_calib_layer;

typedef struct vsr_calib vsr_calib; /* all layers */

/* The calibration file is JSONL, one sample per line, either
 *   {"text": "..."}                      tokenized as is (no template), or
 *   {"state": ..., "questions": [...]}   a decision request, rendered with the package's
 *                                        published prompt (the rows the decider would run).
 * Blank lines are skipped; anything else is refused with its line number. The first `samples`
 * lines are used (samples <= 0: all). The file's sha256 (of its raw bytes) and the number of
 * samples used are returned for the package's record.
 * Runs the BF16 package on `mo`'s device (CPU when mo is NULL), shows one progress line per
 * sample on a terminal. `bf16_pkg` must be verified and mapped. */
vsr_status vsr_calib_collect(const vsr_package *bf16_pkg, const char *calibration_jsonl, int samples,
                             bool want_hessian, bool want_act, const vsr_model_opts *mo, vsr_calib **out,
                             char sha256_hex[65], int *n_used, vsr_err *err);
const vsr_calib_layer *vsr_calib_find(const vsr_calib *c, const char *module);
int vsr_calib_count(const vsr_calib *c);
const vsr_calib_layer *vsr_calib_at(const vsr_calib *c, int i);
void vsr_calib_free(vsr_calib *c); /* NULL is a no-op */
/* Host memory vsr_calib_collect takes for Hessians: 8 K^2 bytes per distinct input among the Linear
 * modules named (siblings reading one input, such as q/k/v_proj, share one), all held until it
 * returns; *n_inputs gets the count of distinct inputs. */
uint64_t vsr_calib_hessian_bytes(const char *const *modules, const int64_t *K, int n, int *n_inputs);

/* ---- GPTQ ----
 * GPTQ (Frantar et al. 2022) on one [N,K] weight (bf16 bits in) with Hessian H [K,K] (any
 * positive multiple of sum x x^T; it is not modified). group: > 0 (multiple of 8 dividing K) or
 * -1 (one group per row = channel). Scales and zero points are those of round-to-nearest
 * (compressed-tensors' min-max arithmetic, vsr_quantize_int4_rtn) on the ORIGINAL weight, as
 * llm-compressor's observer computes them before GPTQ runs; GPTQ then chooses the integers.
 * actorder (vsr_actorder; a bool true means GROUP):
 *   NONE   columns in order;
 *   WEIGHT ("static", llm-compressor's default): columns processed by decreasing H diagonal, groups
 *          stay column ranges, no g_idx (every kernel runs it);
 *   GROUP  ("dynamic"): columns processed by decreasing H diagonal AND groups formed in that order,
 *          written as weight_g_idx (g_idx[k] = group of column k).
 * damp: fraction of mean(diag H) added to the diagonal (llm-compressor's dampening_frac, 0.01).
 * Dead columns (H[k][k] == 0) get H[k][k] = 1 and weight 0, as llm-compressor does. FP64 Cholesky;
 * a Hessian that stays indefinite after dampening is an error (no silent round-to-nearest).
 * Outputs (caller-allocated, shapes of vsr_dequant_int4_ref): packed [N, K/8], scale_bf16 [N, G],
 * zp_packed [ceil(N/8), G] (only when !symmetric; may be NULL when symmetric), g_idx [K] (only
 * when actorder == GROUP; may be NULL otherwise). */
typedef enum vsr_actorder { VSR_ACTORDER_NONE = 0, VSR_ACTORDER_GROUP = 1, VSR_ACTORDER_WEIGHT = 2 } vsr_actorder;
vsr_status vsr_gptq_quantize(const uint16_t *w_bf16, int64_t N, int64_t K, const double *H, int group,
                             int actorder, double damp, bool symmetric, uint32_t *packed, uint16_t *scale_bf16,
                             uint32_t *zp_packed, int32_t *g_idx, vsr_err *err);

/* Output error of a quantized weight on calibration statistics: sqrt(tr(E H E^T) / n_tokens)
 * with E = W - dequant(Wq) diag(in_ratio) in FP64, i.e. the RMS over tokens of ||W x - Wq x'||
 * where the quantized model's input is x' = x * in_ratio (AWQ: in_ratio = 1/s as folded; NULL
 * means x' = x). wq_bf16 is the dequantized weight (vsr_dequant_int4_ref). */
double vsr_quant_output_error(const uint16_t *w_bf16, const uint16_t *wq_bf16, const float *in_ratio, int64_t N,
                              int64_t K, const double *H, int64_t n_tokens);

/* ---- AWQ ----
 * AWQ (Lin et al. 2023) for the linears that share one input x [*, K] (the "balance layers" of
 * one mapping, e.g. gate_proj and up_proj after post_attention_layernorm). Candidates as
 * llm-compressor's AWQModifier makes them: with xm = act_absmean and wm[k] = mean over the rows of
 * every balance layer of |w| / (its group's max |w|),
 *   duo:   s = clamp(xm^r / (wm^(1-r) + 1e-4), 1e-4)   r = i/(n_grid-2), i = 0..n_grid-2
 *   plain: s = clamp(xm^r, 1e-4)                        r = i/(n_grid-1)
 * each normalised by sqrt(max s * min s); VSR_AWQ_DUO tries s = 1 and the duo grid (its default),
 * VSR_AWQ_PLAIN the plain grid, VSR_AWQ_BOTH both grids. For each candidate every balance weight
 * becomes bf16(W diag(s)), quantized round-to-nearest (vsr_quantize_int4_rtn, as the final
 * quantization is), and the loss is sum over balance layers of ||X W^T - (X diag(1/s)) Q(W s)^T||^2
 * computed exactly from H = sum x x^T (llm-compressor measures the parent module's output
 * instead: docs/quantize.md). The best candidate's s is returned in scales_out [K]; the caller
 * folds 1/s into the op producing x (vsr_awq_fold_*) and stores each lin[i]'s quantized W*s. */
typedef struct vsr_awq_linear {
    const uint16_t *w_bf16; /* [N, K], the original BF16 weight */
    int64_t N;
    /* outputs: the quantized bf16(W diag(s)) (pack-quantized; zp_packed NULL when symmetric) */
    uint32_t *packed;       /* [N, K/8] */
    uint16_t *scale_bf16;   /* [N, G] */
    uint32_t *zp_packed;    /* [ceil(N/8), G] */
    double loss;            /* this layer's share of the best loss (sum over tokens) */
} vsr_awq_linear;

typedef struct vsr_awq_result {
    double best_ratio;
    bool best_duo;
    double best_loss;   /* summed over the balance layers */
    double rtn_loss;    /* s = 1: plain round-to-nearest */
    int candidates;     /* how many were tried */
} vsr_awq_result;

typedef enum vsr_awq_scaling { VSR_AWQ_DUO = 0, VSR_AWQ_PLAIN = 1, VSR_AWQ_BOTH = 2 } vsr_awq_scaling;
#define VSR_AWQ_GRID 20 /* llm-compressor's n_grid */
vsr_status vsr_awq_search(const double *H, const double *act_absmean, int64_t K, vsr_awq_linear *lin, int n_lin,
                          int group, bool symmetric, int scaling, int n_grid, float *scales_out,
                          vsr_awq_result *res, vsr_err *err);

/* Folding 1/s into the producer of x (so the model's function is unchanged before quantization):
 * qwen3_5's RMSNorm multiplies by (1 + w): w' = (1 + w)/s - 1, computed in FP32, rounded to BF16. */
void vsr_awq_fold_norm_offset1(uint16_t *norm_w_bf16, const float *s, int64_t K);
/* A linear producing x (up_proj before down_proj, v_proj before o_proj): row k of W_prev [K, Kp]
 * divided by s[k] (rows are output channels of the producer), rounded to BF16. */
void vsr_awq_fold_linear_rows(uint16_t *w_prev_bf16, int64_t Kp, const float *s, int64_t K);

#ifdef __cplusplus
}
#endif

#endif
