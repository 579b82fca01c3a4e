/* tests/pkgbuild.h: writes small, complete Decision 3.0 packages for the package-layer
 * tests (config, decision_config, tokenizer files, weights in any scheme, readout and a
 * manifest whose hashes and identity are computed from the files written). */
#ifndef VSR_TESTS_PKGBUILD_H
#define VSR_TESTS_PKGBUILD_H

#include <jansson.h>
#include <stdbool.h>

typedef struct tpkg_opts {
    const char *scheme;        /* bf16 (default), fp8, int4, int4-asym, int4-actorder, nvfp4, nvfp4a16 */
    bool sharded;              /* two shards + model.safetensors.index.json */
    bool vision;               /* vision_config, one visual tensor, preprocessor_config.json */
    const char *prefix;        /* default "model.language_model." */
    const char *readout_dtype; /* default "float32" */
    const char *skip_tensor;   /* full name of a tensor to leave out */
    const char *extra_tensor;  /* full name of an extra BF16 [4] tensor */
    const char *f32_tensor;    /* full name of a tensor written as F32 instead */
    const char *bad_shape_tensor; /* full name of a tensor whose first dim is one larger */
    const char *ignore;        /* extra entry for the quant config's ignore list */
} tpkg_opts;

/* Logical parameter counts of the package written last. */
extern long long tpkg_params_text, tpkg_params_vision, tpkg_params_readout;

int tpkg_write(const char *dir, const tpkg_opts *o);
/* (Re)writes MODEL_MANIFEST.json from the files in dir; `edit` may change it first. */
int tpkg_manifest(const char *dir, void (*edit)(json_t *manifest, void *ctx), void *ctx);
/* Loads dir/name as JSON, lets `edit` change it, writes it back (sorted keys). */
int tpkg_edit_json(const char *dir, const char *name, void (*edit)(json_t *doc, void *ctx), void *ctx);
/* Flips one byte of dir/name at offset (negative: from the end). */
int tpkg_flip_byte(const char *dir, const char *name, long offset);
/* Replaces the first two-space indent of a JSON file with a tab: same document, other bytes. */
int tpkg_tamper_json(const char *dir, const char *name);
/* Recursive copy of a package folder (regular files only). */
int tpkg_copy(const char *from, const char *to);

#endif
