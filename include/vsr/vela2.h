/* vsr/vela2.h: the span-capable family (Vela 2.0 decoder packages, model_type "vela2-decoder";
 * reference-profiles-spans.md section 3; issue #23).
 *
 * The contract between two layers:
 *   - the model layer (src/vela2/model.c, package and fixture code) loads a vela2-decoder package
 *     (backbone.* as a qwen3_5_text backbone, the candidate head head.*, set_bias, the router span
 *     head span2.*, the broad head span_broad.* from broad_head.safetensors) and runs TREES:
 *     one shared context followed by blocks, each block attending to the context and to itself only
 *     ("Every block attends to the parts and to itself only, so a question's answer does not depend
 *     on the other blocks of its tree"). It returns raw FP32 logits; it knows nothing of requests.
 *   - the decision layer (src/vela2/ request, layout, words, decode, answers) builds the token ids of
 *     the context and the blocks (decoder_layout), says which positions to read, and turns logits
 *     into answers, spans and thresholds.
 *
 * Positions are plain: the context holds positions 0..n_ctx-1 and a block's token j holds position
 * n_ctx + j. Attention within [context, block] follows the backbone's attention mode (causal unless
 * the package's config says otherwise); a block never sees another block. */
#ifndef VSR_VELA2_H
#define VSR_VELA2_H

#include <stdbool.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/model.h"
#include "vsr/package.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_v2_model vsr_v2_model;

typedef enum vsr_v2_block_kind {
    VSR_V2_BLOCK_SPAN,      /* word x label logits from a span head */
    VSR_V2_BLOCK_CANDIDATE, /* one logit per option from the candidate head (choice, noul, score, set) */
} vsr_v2_block_kind;

typedef enum vsr_v2_head { VSR_V2_HEAD_ROUTER, VSR_V2_HEAD_BROAD } vsr_v2_head;

typedef struct vsr_v2_block {
    vsr_v2_block_kind kind;
    const int32_t *ids; /* the block's own tokens (they follow the context) */
    int n_ids;

    /* VSR_V2_BLOCK_SPAN: all positions are block-relative (0 = the block's first token). */
    vsr_v2_head head;
    int n_words;
    const int32_t *word_pos;    /* each word's first sub-token, in the repeated target */
    int n_labels;
    const int32_t *label_begin; /* each label block's first token ... */
    const int32_t *label_end;   /* ... and last token (inclusive); read as the mean hidden state */
    float *span_logits;         /* out: [n_words][n_labels], raw (before the span temperature) */

    /* VSR_V2_BLOCK_CANDIDATE */
    int n_options;
    const int32_t *option_end;  /* the last token of each option segment (its endpoint) */
    int32_t query_pos;          /* the query token: the block's last token */
    bool set_bias;              /* add the package's set_bias (set questions) */
    float *option_logits;       /* out: [n_options], raw (before the type's temperature) */
} vsr_v2_block;

typedef struct vsr_v2_tree {
    const int32_t *ctx; /* the shared context: "Context:\n" + every part segment */
    int n_ctx;
    int n_blocks;
    vsr_v2_block *blocks;
} vsr_v2_tree;

/* What the package's config.json declares (section 3.8). */
typedef struct vsr_v2_info {
    const char *model_name;
    int64_t max_length;   /* tokens of one tree (context + longest block) */
    int32_t pad_token_id;
    int head_dim;         /* candidate head */
    int span_d, span_slots;
    int hybrid_rmax, window, stride, window_above; /* span_layout */
    bool has_broad_head;
    int64_t hidden_size;
} vsr_v2_info;

/* `pkg` must be a verified, mapped vela2-decoder package that outlives the model. */
vsr_status vsr_v2_model_load(const vsr_package *pkg, const vsr_model_opts *opts, vsr_v2_model **out,
                             vsr_err *err);
void vsr_v2_model_free(vsr_v2_model *m); /* NULL is a no-op */
const vsr_v2_info *vsr_v2_model_info(const vsr_v2_model *m);
uint64_t vsr_v2_model_memory_bytes(const vsr_v2_model *m);

/* Runs every block of every tree and fills the blocks' out arrays. A block asking for the broad
 * head on a model without one, a position outside its block, or a tree longer than max_length is
 * an error naming the tree and block; nothing is written then. */
vsr_status vsr_v2_forward(vsr_v2_model *m, const vsr_v2_tree *trees, int n_trees, vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
