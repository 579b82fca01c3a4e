/* vsr/fixture.h: deterministic Decision 3.0 packages in the exact on-disk format of
 * a real one, at any size. Same options -> byte-identical package on any machine
 * (integer PRNG, no libm in the weight stream, sorted JSON, fixed writer layout). */
#ifndef VSR_FIXTURE_H
#define VSR_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/model_config.h"
#include "vsr/progress.h"

typedef struct vsr_fixture_opts {
    const char *family;         /* "decision3" */
    const char *size;           /* "tiny", "small", "lite", "27b-shape" */
    const char *scheme;         /* "bf16", "fp8", "w4a16-gptq", "w4a16-awq", "nvfp4" */
    uint64_t seed;
    const char *attention_mode; /* NULL = "noncausal_full_attention" */
    bool actorder;              /* w4a16-gptq: write weight_g_idx (act-order) */
    int group_size;             /* int4 group; 0 = 128 (or the size's default) */
    const char *tokenizer_dir;  /* NULL = the repo's data/tokenizers/qwen3 */
} vsr_fixture_opts;

/* The text config of a named size ("tiny", ...): false if unknown. */
bool vsr_fixture_size_config(const char *size, vsr_text_config *out);
const char *const *vsr_fixture_size_names(void); /* NULL-terminated */

vsr_status vsr_fixture_write(const char *out_dir, const vsr_fixture_opts *o, vsr_progress *p,
                             vsr_err *err);

#endif
