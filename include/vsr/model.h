/* vsr/model.h: the qwen3_5 text backbone plus the Decision 3.0 readout, behind
 * one call the decision layer uses. Backends (CPU, CUDA) sit behind
 * src/backend/backend.h; nothing here names a device API. */
#ifndef VSR_MODEL_H
#define VSR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "vsr/device.h"
#include "vsr/error.h"
#include "vsr/package.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_model vsr_model;

typedef struct vsr_model_opts {
    const vsr_device *device; /* where to run (from vsr_place); CPU when kind == VSR_DEV_CPU */
    int threads;              /* CPU worker threads; 0 = every online core */
    const char *dtype;        /* "auto" (default) or an explicit compute dtype */
    const char *autotune_cache; /* directory or NULL */
} vsr_model_opts;

/* `pkg` must be verified and mapped; it must outlive the model. */
vsr_status vsr_model_load(const vsr_package *pkg, const vsr_model_opts *opts, vsr_model **out,
                          vsr_err *err);
void vsr_model_free(vsr_model *m); /* NULL is a no-op */

int64_t vsr_model_hidden_size(const vsr_model *m);
/* Bytes the loaded weights take on the model's device. */
uint64_t vsr_model_memory_bytes(const vsr_model *m);

/* Runs n_rows unpadded token sequences (ids[i] has lens[i] tokens) as one batch:
 * left-padded with the pad id, attention mask applied, plain positions 0..len-1,
 * attention mode from the package (causal or noncausal_full_attention).
 * Writes the final-norm hidden state at each row's last position to
 * hidden[n_rows, hidden_size] (FP32) and, if logits != NULL, the readout
 * logits[n_rows, 255] (FP32; a bf16 readout is computed in bf16 then widened). */
vsr_status vsr_model_forward_last(vsr_model *m, int n_rows, const int32_t *const *ids,
                                  const int *lens, float *hidden, float *logits, vsr_err *err);

/* Runs n_rows unpadded token sequences with PLAIN positions 0..len-1 in every row (no padding
 * offset; attention mode as vsr_model_forward_last) and writes the final-norm hidden state of
 * row r's tokens pos[r][0..n_pos[r]) (0-based within the row, any order, repeats allowed) to
 * hidden[sum n_pos, hidden_size] (FP32), rows in order. Used by the Vela 2.0 trees (src/vela2),
 * whose blocks read words and label blocks at chosen positions. A position outside its row is
 * refused. */
vsr_status vsr_model_forward_gather(vsr_model *m, int n_rows, const int32_t *const *ids, const int *lens,
                                    const int *n_pos, const int32_t *const *pos, float *hidden, vsr_err *err);

/* Shape buckets (issue 25). Where forwards are recorded (CUDA graphs), forward_last pads each
 * Decision 3.0 batch to a bucket: every row to the length bucket of the longest row, the row count
 * to a row bucket, pad tokens after each row's own (read by nothing real: attention, causal or
 * not, reads only a row's real keys), so a bucket's recording replays for any batch that falls in it. Answers are those of the unpadded
 * rows computed at the bucket's shape. VSR_BUCKETS=0 turns this off; =1 turns it on for any
 * backend (the CPU then pads the same way: tests). */
int64_t vsr_model_bucket_len(int64_t tokens); /* 16..128 by 16, then 4 steps per octave */
int vsr_model_bucket_rows(int rows);          /* 1..4, then 2 steps per octave */
bool vsr_model_bucketed(const vsr_model *m);
int64_t vsr_model_padded_forwards(const vsr_model *m); /* forwards run padded to their bucket so far */
/* The tokens a batch of `rows` rows of at most `len` tokens is budgeted at: its bucket's rows x
 * length where the model pads, rows x len elsewhere (a NULL model: rows x len). */
int64_t vsr_model_shape_tokens(const vsr_model *m, int rows, int64_t len);
/* The buckets of at most max_tokens (rows x length) up to the package's longest input: writes
 * up to max_out {rows, length} pairs and returns how many there are (0 when not bucketed). */
int vsr_model_buckets(const vsr_model *m, int64_t max_tokens, int64_t (*out)[2], int max_out);
typedef void (*vsr_model_warm_fn)(void *ctx, int done, int total);
typedef struct vsr_model_warm_report {
    int buckets;        /* shapes run and recorded */
    int64_t max_tokens; /* the largest bucket's rows x length */
} vsr_model_warm_report;
/* Runs every bucket of at most max_tokens twice (a recording is made at the second sighting),
 * largest first, so that no later request pays planning, tuning or recording for them, and pads
 * only batches whose bucket is at most max_tokens from then on (8192 before any warm-up; larger
 * batches run unpadded, their launches a small part of their time). A model that does not bucket
 * does nothing (report zero). progress(ctx, done, total) after each. */
vsr_status vsr_model_warm(vsr_model *m, int64_t max_tokens, vsr_model_warm_fn progress, void *ctx,
                          vsr_model_warm_report *rep, vsr_err *err);

/* Activation tap (calibration, issue 22): when set, `fn` is called before every linear of the
 * backbone with that linear's module name (package prefix included, e.g.
 * "model.language_model.layers.3.mlp.gate_proj") and its FP32 input x [rows, K], copied to the
 * host. Linears that read one input (q,k,v; gate,up; the DeltaNet in_proj_*) are each called
 * with it. While a tap is set every layer runs on all tokens (the last layer too, whose
 * o_proj/out_proj and MLP otherwise see only each row's last token) and no forward is replayed
 * from a recording, so calibration sees what transformers' hooks see. fn == NULL removes it. */
typedef void (*vsr_model_tap_fn)(void *ctx, const char *module, const float *x, int64_t rows, int64_t K);
void vsr_model_set_tap(vsr_model *m, vsr_model_tap_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#endif
