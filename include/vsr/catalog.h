/* vsr/catalog.h: packages the runtime knows by name: the published vllm-sr/d3-*
 * packages (identity checked against their own manifest; no golden answers, so
 * their self-check reports `unverified`) and our built-in fixture packages
 * (identity and golden answers recorded here). */
#ifndef VSR_CATALOG_H
#define VSR_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsr/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_fixture_recipe {
    const char *size;     /* "tiny", "lite", "27b-shape", ... */
    const char *scheme;   /* "bf16", "fp8", "w4a16-gptq", "w4a16-awq", "nvfp4" */
    uint64_t seed;
    const char *attention_mode; /* "causal" or "noncausal_full_attention" */
    bool actorder;        /* w4a16-gptq: act-order g_idx (additive, fixture engineer) */
    int group_size;       /* int4 group; 0 = the size's default (additive, fixture engineer) */
} vsr_fixture_recipe;

typedef struct vsr_builtin {
    const char *repo;             /* "vllm-sr/d3-FP8" */
    const char *revision;         /* 40-hex commit */
    const char *family;           /* "decision3" */
    vsr_scheme scheme;
    const char *scheme_note;      /* "GPTQ, symmetric, group 128" */
    int64_t parameters;           /* loaded parameters; 0 when not recorded */
    const char *model_sha256;     /* NULL when not recorded (published packages: the manifest decides) */
    const char *manifest_sha256;  /* NULL when not recorded */
    bool published;               /* a real published package (no golden answers here) */
    const vsr_fixture_recipe *fixture; /* built-in fixture: how to write it; NULL otherwise */
    const char *golden_json;      /* recorded golden answers per device class, NULL if none */
} vsr_builtin;

size_t vsr_catalog_count(void);
const vsr_builtin *vsr_catalog_at(size_t i);
/* Exact repo and revision match; revision NULL matches the repo's first entry. */
const vsr_builtin *vsr_catalog_find(const char *repo, const char *revision);
/* The entry whose recorded identity (model_sha256) is `model_sha256`, or NULL: a local copy of
 * a built-in package carries the same bytes, so its recorded golden answers apply to it. */
const vsr_builtin *vsr_catalog_find_identity(const char *model_sha256);
/* The built-in default package (a fixture), used by the README's main job. */
const vsr_builtin *vsr_catalog_default(void);

#ifdef __cplusplus
}
#endif

#endif
