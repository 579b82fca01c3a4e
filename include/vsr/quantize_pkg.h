/* vsr/quantize_pkg.h: BF16 package -> compressed-tensors package (`vllm-srun quantize`), and
 * dynamic FP8 at load time (`vllm-srun serve --quantize fp8-dynamic`).
 *
 * The written package is what llm-compressor + compressed-tensors 0.20.1 write for the same
 * recipe: config.json gains a `quantization_config` with one config group targeting "Linear"
 * and an `ignore` list of the unquantized Linear modules by name (compressed-tensors expands the
 * recipe's patterns to module names when it saves); every other tensor and file is copied
 * byte for byte; a fresh MODEL_MANIFEST.json carries the new identity, and
 * quantization_record.json (listed in the manifest) records scheme, tool version, the source
 * package's identity and the calibration data's sha256 and sample count.
 *
 * The default recipe (the published packages' one) keeps in BF16: embeddings, lm_head, the
 * vision tower and the Gated DeltaNet input projections in_proj_qkv|z|a|b. docs/quantize.md
 * shows how that gives about 31.9 GB for an FP8 27B package. */
#ifndef VSR_QUANTIZE_PKG_H
#define VSR_QUANTIZE_PKG_H

#include <stdbool.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/package.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The compressed-tensors release whose on-disk format the writer reproduces (the oracle in
 * tools/ct_load_check.py checks it), and the writer's own version (the record's tool_version). */
#define VSR_QUANTIZE_CT_VERSION "0.20.1"
#define VSR_QUANTIZE_TOOL_VERSION "vllm-srun quantize 1"
#define VSR_QUANTIZE_RECORD_NAME "quantization_record.json"

typedef enum vsr_qscheme {
    VSR_Q_FP8_DYNAMIC, /* FP8_DYNAMIC: E4M3 weights per channel (RTN), FP8 per-token activations */
    VSR_Q_W4A16_GPTQ,  /* W4A16 symmetric, groups, GPTQ on calibration Hessians */
    VSR_Q_W4A16_AWQ,   /* W4A16_ASYM, groups, AWQ scale search on calibration activations */
    VSR_Q_NVFP4,       /* NVFP4A16: E2M1 weights in groups of 16 (RTN), E4M3 scales, global scale */
    VSR_Q_COUNT
} vsr_qscheme;

const char *vsr_qscheme_name(vsr_qscheme s); /* "fp8-dynamic", ... */
bool vsr_qscheme_parse(const char *name, vsr_qscheme *out);
const char *vsr_qscheme_names(void); /* "fp8-dynamic|w4a16-gptq|w4a16-awq|nvfp4" */

#define VSR_QUANTIZE_MAX_IGNORE 32

typedef struct vsr_quantize_opts {
    const char *scheme;          /* required */
    const char *calibration;     /* JSONL file; required for w4a16-*, refused for the RTN schemes */
    int samples;                 /* calibration samples; 0 = 256 (only with --calibration) */
    int group_size;              /* w4a16-*: 0 = 128; others: must stay 0 */
    bool actorder;               /* w4a16-gptq only: act-order groups (weight_g_idx) */
    const char *ignore[VSR_QUANTIZE_MAX_IGNORE]; /* extra recipe patterns ("re:..." or names) */
    int n_ignore;
    const char *device;          /* calibration forward: "cpu" (default), "cuda[:N]", ... */
    const char *model_name;      /* manifest model_name; NULL = source name + scheme suffix */
    int threads;                 /* 0 = every online core */
    bool progress;               /* progress bar per layer on a terminal */
} vsr_quantize_opts;

typedef struct vsr_quantize_info {
    char model_name[128];
    char model_sha256[65];       /* the new package's identity */
    char manifest_sha256[65];
    char source_model_sha256[65];
    int n_quantized;             /* Linear modules quantized */
    int n_ignored;               /* Linear modules kept in BF16 (the config's ignore list) */
    int n_shards;
    uint64_t weight_bytes_in;    /* tensor bytes of the source weights */
    uint64_t weight_bytes_out;
    char calibration_sha256[65]; /* "" without calibration */
    int samples_used;
} vsr_quantize_info;

/* Option checks that need no package (unknown scheme, group size, actorder, calibration). */
vsr_status vsr_quantize_check_opts(const vsr_quantize_opts *o, vsr_err *err);
/* `src`: an absolute package path or org/name[@rev] from the store (store_dir may be NULL).
 * `out_dir` must not exist. Verifies the source (manifest and identity) before reading a
 * weight, streams shard by shard (one shard's quantized layers in memory at a time). */
vsr_status vsr_quantize_package(const char *src, const char *store_dir, const char *out_dir,
                                const vsr_quantize_opts *o, vsr_quantize_info *info, vsr_err *err);

/* The recipe's default ignore patterns, in the order the writer applies them (NULL-terminated);
 * "re:model.visual.*" is "re:visual.*" for packages whose vision tower is under "visual.". */
const char *const *vsr_quantize_default_ignore(void);

/* ---- dynamic FP8 at load time ----
 * Quantizes a verified, mapped BF16 Decision 3.0 package's Linear weights to FP8 in memory
 * exactly as `vllm-srun quantize --scheme fp8-dynamic` writes them (same recipe, same bytes),
 * and makes the package look like that FP8 package to the model loader: p->weights holds the
 * FP8 `.weight` and `.weight_scale` tensors, p->quant the FP8_DYNAMIC config. The package's
 * identity (model_sha256, manifest) stays the BF16 package's. threads 0 = every core. */
vsr_status vsr_package_quantize_fp8_at_load(vsr_package *p, int threads, vsr_err *err);
/* The bytes the weights will take on the device after it (for the device gate, before loading). */
uint64_t vsr_fp8_at_load_weight_bytes(const vsr_package *p);

#ifdef __cplusplus
}
#endif

#endif
