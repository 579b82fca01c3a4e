/* vsr/fixture.h: deterministic Decision 3.0 packages in the exact on-disk format of
 * a real one, at any size. Same options -> byte-identical package on any machine
 * (integer PRNG, no libm in the weight stream, sorted JSON, fixed writer layout). */
#ifndef VSR_FIXTURE_H
#define VSR_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/model_config.h"
#include "vsr/progress.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_fixture_opts {
    const char *family;         /* "decision3" or "vela2" (src/fixture/vela2_fixture.c) */
    const char *size;           /* "tiny", "small", "lite", "27b-shape" */
    const char *scheme;         /* "bf16", "fp8", "w4a16-gptq", "w4a16-awq", "nvfp4" */
    uint64_t seed;
    const char *attention_mode; /* NULL = "noncausal_full_attention" */
    bool actorder;              /* w4a16-gptq: write weight_g_idx (act-order) */
    int group_size;             /* int4 group; 0 = 128 (or the size's default) */
    const char *tokenizer_dir;  /* NULL = the repo's data/tokenizers/qwen3 */
    /* additive (fixture engineer): */
    uint64_t max_shard_bytes;   /* 0 = 5,000,000,000 (Hugging Face's "5GB"); tests shard tiny */
    const char *model_name;     /* manifest model_name; NULL = "d3-<size><scheme suffix>" */
    /* additive (--like): the layout of a published package, "d3", "d3-flash", "d3-mini",
     * "d3-nano" or "d3-lite" (or "vllm-sr/<name>"); NULL = the fixture's own layout. It picks
     * the file set, the number of weight shards, a small qwen3_5_vision tower under
     * model.visual., vision_config, preprocessor_config.json and the default model_name;
     * `size` still picks the text model. BF16 only; no max_shard_bytes. */
    const char *like;
    /* additive (vela2 goldens): --family vela2 without broad_head.safetensors. With family
     * "vela2" the writer, the check, the recipe and the install take size, seed, model_name,
     * tokenizer_dir and this; scheme must be NULL or "bf16" (span packages stay BF16) and every
     * Decision 3.0 option unset. */
    bool no_broad_head;
} vsr_fixture_opts;

/* The published layouts --like accepts (short names), NULL-terminated; and the number of
 * weight shards of one (1 = model.safetensors, no index), 0 if `like` is unknown. */
const char *const *vsr_fixture_like_names(void);
int vsr_fixture_like_shards(const char *like);

/* The text config of a named size ("tiny", ...): false if unknown. */
bool vsr_fixture_size_config(const char *size, vsr_text_config *out);
const char *const *vsr_fixture_size_names(void); /* NULL-terminated */
const char *const *vsr_fixture_scheme_names(void); /* NULL-terminated */

vsr_status vsr_fixture_write(const char *out_dir, const vsr_fixture_opts *o, vsr_progress *p,
                             vsr_err *err);

/* ---- additive (fixture engineer) ---- */

/* What a write produced. */
typedef struct vsr_fixture_info {
    char model_name[128];
    char model_sha256[65];      /* identity.model_sha256 */
    char manifest_sha256[65];   /* sha256 of MODEL_MANIFEST.json's bytes */
    int64_t params_text, params_readout, params_loaded;
    int n_shards;               /* 1 = model.safetensors */
    uint64_t total_bytes;       /* all files written */
    int64_t params_vision;      /* additive (--like): the vision tower's elements; loaded counts them */
} vsr_fixture_info;

/* Validates `o` (unknown family/size/scheme/attention mode, --actorder without gptq, a group
 * size that is not a positive multiple of 8 or does not divide a quantized K) without writing. */
vsr_status vsr_fixture_check(const vsr_fixture_opts *o, vsr_err *err);
/* `out_dir` must not exist or be empty. `info` may be NULL. */
vsr_status vsr_fixture_write_ex(const char *out_dir, const vsr_fixture_opts *o, vsr_progress *p,
                                vsr_fixture_info *info, vsr_err *err);

/* The recipe string of `o` (every option that changes a byte) and the revision derived from
 * it: the first 40 hex digits of sha256(recipe). */
vsr_status vsr_fixture_recipe_string(const vsr_fixture_opts *o, char *buf, size_t n, vsr_err *err);
vsr_status vsr_fixture_revision(const vsr_fixture_opts *o, char out[41], vsr_err *err);

/* Writes the package into the store (Hugging Face hub cache layout, plain copies, no
 * symlinks): <store>/models--<org>--<name>/snapshots/<revision>/ and refs/main = revision.
 * `store_dir` NULL = vsr_store_dir(NULL). `snapshot` (may be NULL) receives the folder. */
vsr_status vsr_fixture_install(const char *store_dir, const char *repo, const vsr_fixture_opts *o,
                               vsr_progress *p, vsr_fixture_info *info, char revision[41],
                               char *snapshot, size_t snapshot_n, vsr_err *err);

/* The chat template every fixture package carries (Qwen-style, for decisions) and its
 * sha256: one of the known templates the tokenizer accepts. */
extern const char vsr_fixture_chat_template[];
#define VSR_FIXTURE_CHAT_TEMPLATE_SHA256 \
    "90fe4ebf04737041a41ce422bdaa6e24f12ad8128a001f60c678f162794e0ea7"

#ifdef __cplusplus
}
#endif

#endif
