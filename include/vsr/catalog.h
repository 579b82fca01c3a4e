/* vsr/catalog.h: packages the runtime knows by name (reference-runtime.md 3, published-d3.md):
 *  - the published BF16 vllm-sr/d3-* packages at the revisions the reference table pins, with
 *    the sha256 of every file, model_sha256, manifest_sha256, loaded parameters and minimum
 *    device memory (data/catalog/published-d3-pins.json);
 *  - their v3.1.0 revisions with the reference's golden answers for `cpu` and `rocm`
 *    (data/catalog/published-d3-golden.json);
 *  - the published quantized packages of the seeds (identity from their own manifest, no
 *    golden answers: their self-check reports `unverified`);
 *  - our built-in fixture packages, Decision 3.0 and Vela 2.0 (identity and golden answers
 *    recorded here). */
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
    bool no_broad_head;   /* vela2: no broad_head.safetensors (additive, vela2 goldens) */
} vsr_fixture_recipe;

/* One pinned file of a published package. */
typedef struct vsr_pinned_file {
    const char *name;             /* relative path inside the package */
    const char *sha256;           /* 64 lowercase hex */
} vsr_pinned_file;

typedef struct vsr_builtin {
    const char *repo;             /* "vllm-sr/d3-FP8" */
    const char *revision;         /* 40-hex commit */
    const char *family;           /* "decision3" or "vela2" */
    vsr_scheme scheme;
    const char *scheme_note;      /* "GPTQ, symmetric, group 128" */
    int64_t parameters;           /* loaded parameters; 0 when not recorded */
    const char *model_sha256;     /* NULL when not recorded (published packages: the manifest decides) */
    const char *manifest_sha256;  /* NULL when not recorded */
    bool published;               /* a real published package (no golden answers here) */
    const vsr_fixture_recipe *fixture; /* built-in fixture: how to write it; NULL otherwise */
    const char *golden_json;      /* recorded golden answers per device class, NULL if none */
    /* Added with the published catalogue: */
    const char *release;          /* "pinned", "v3.1.0", "seed" or "fixture" */
    bool default_revision;        /* the revision `serve REPO` loads without --revision */
    int min_device_memory_gib;    /* 0 when not recorded */
    int n_files;                  /* pinned files (0: the package's own manifest decides) */
    const vsr_pinned_file *files;
} vsr_builtin;

size_t vsr_catalog_count(void);
const vsr_builtin *vsr_catalog_at(size_t i);
/* Exact repo and revision match; revision NULL matches the repo's default revision (the
 * pinned one where there is one, else its first entry). */
const vsr_builtin *vsr_catalog_find(const char *repo, const char *revision);
/* The entry whose recorded identity (model_sha256) is `model_sha256`, or NULL: a local copy of
 * a built-in package carries the same bytes, so its recorded golden answers apply to it. */
const vsr_builtin *vsr_catalog_find_identity(const char *model_sha256);
/* The revision `serve REPO` loads when none is given, or NULL when the catalogue does not
 * know REPO (then the store's refs/main decides). */
const char *vsr_catalog_default_revision(const char *repo);
/* The pinned sha256 of `name` in entry b, or NULL when b pins no such file. */
const char *vsr_catalog_pinned_sha256(const vsr_builtin *b, const char *name);
/* The built-in default package (a fixture), used by the README's main job. */
const vsr_builtin *vsr_catalog_default(void);

#ifdef __cplusplus
}
#endif

#endif
