/* vsr/package.h: a model package, from its name to verified, mapped weights.
 *
 * Stages, each a separate call so the device gate sits between reading
 * metadata and reading weights:
 *   vsr_package_open    resolve name/revision or path; read config.json,
 *                       quantization_config, decision_config.json,
 *                       MODEL_MANIFEST.json and the safetensors headers.
 *                       No tensor byte is read.
 *   (caller gates the package on a device: vsr_package_gate_request + vsr_place)
 *   vsr_package_verify  sha256 and bytes of every manifest file (parallel,
 *                       streamed), identity.model_sha256, vsr_package_check (tensors
 *                       against config, readout, parameter counts, input limit),
 *                       built-in pins.
 *   vsr_package_map     maps the weight files for reading. */
#ifndef VSR_PACKAGE_H
#define VSR_PACKAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "vsr/device.h"
#include "vsr/error.h"
#include "vsr/model_config.h"
#include "vsr/quant.h"
#include "vsr/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vsr_family {
    VSR_FAMILY_DECISION3, /* qwen3_5 + decision_config.json + readout */
    VSR_FAMILY_SPAN,      /* qwen3_5 text encoder + token-classification head (Vela-style): refused */
    VSR_FAMILY_VELA2,     /* Vela 2.0 decoder package (config model_type "vela2-decoder"), vsr/vela2.h */
    VSR_FAMILY_UNKNOWN,
    VSR_FAMILY_COUNT
} vsr_family;
const char *vsr_family_name(vsr_family f); /* "decision3", "span", "vela2", "unknown" */

#define VSR_D3_CODES 255

typedef struct vsr_decision_config {
    int format_version;       /* 1 */
    char format_id[64];       /* "d3-code-readout-v1" */
    char prompt[16];          /* "d3" */
    char attention_mode[32];  /* "causal" | "noncausal_full_attention" */
    char pooling[16];         /* "last" */
    char readout_dtype[16];   /* "float32" | "bfloat16" */
    double temperature;       /* finite, > 0; 1.0 when absent */
    int64_t max_length;       /* -1 when null/absent */
    char *codes[VSR_D3_CODES];/* owned UTF-8 strings */
    int32_t token_ids[VSR_D3_CODES];
    void *json;               /* the parsed document (json_t*), for identity */
} vsr_decision_config;

typedef struct vsr_manifest_file {
    char *name;               /* relative path inside the package */
    char sha256[65];
    int64_t bytes;            /* -1 when files_bytes does not list it */
} vsr_manifest_file;

typedef struct vsr_manifest {
    char schema[64];          /* "d3-package-manifest/1" */
    char model_name[128];
    char model_sha256[65];    /* identity.model_sha256 as recorded */
    int n_files;
    vsr_manifest_file *files; /* files_sha256 (+ identity.files_sha256), sorted by name */
    int64_t params_text, params_vision, params_readout, params_loaded;
    char manifest_sha256[65]; /* sha256 of the manifest file's raw bytes */
} vsr_manifest;

struct vsr_builtin;

/* What a vela2-decoder package's config.json declares besides its backbone_config
 * (reference-profiles-spans.md 3.8), and its calibration.json (validated at open). */
typedef struct vsr_vela2_config {
    char model_name[128];
    int64_t max_length;        /* tokens of one tree (context + block) */
    int32_t pad_token_id;
    int head_dim;              /* candidate head projection */
    int span_d, span_slots;    /* span_head {d, slots}; 256 / 64 when absent */
    int hybrid_rmax, window, stride, window_above; /* span_layout */
    bool has_broad_head;       /* broad_head.safetensors present */
    int broad_d, broad_slots;  /* from span_broad.K.weight / span_broad.slot.weight */
    void *calibration;         /* json_t* of calibration.json (owned; types checked, see vela2_package.c) */
} vsr_vela2_config;

typedef struct vsr_package {
    char path[4096];          /* real path of the package folder (snapshot) */
    char repo[256];           /* "org/name", or "" for a local path */
    char revision[41];        /* resolved 40-hex commit, or "" for a local path */
    char requested_revision[256]; /* what the user asked for (branch, tag, commit) */
    vsr_family family;
    vsr_model_config config;
    vsr_quant_config quant;
    vsr_decision_config decision; /* decision3 only */
    vsr_manifest manifest;
    bool has_manifest;
    vsr_weights *weights;     /* headers after open, mapped after vsr_package_map */
    char text_prefix[64];     /* "model.language_model." or "language_model." */
    int64_t params_text;      /* counted from headers */
    uint64_t weight_file_bytes;   /* bytes of the weight files on disk */
    uint64_t device_weight_bytes; /* bytes the weights take on a device (packed as stored) */
    char model_sha256[65];    /* computed identity (after verify) */
    bool verified;
    const struct vsr_builtin *builtin; /* catalogue entry for repo@revision, or NULL */
    /* Added by the package layer: */
    vsr_st_file *readout;     /* decision3 readout.safetensors: header after open, mapped after map */
    int64_t params_vision;    /* counted from headers (not loaded) */
    int64_t params_readout;   /* 255 x hidden for decision3 */
    /* Added for Vela 2.0 (issue 23): */
    vsr_vela2_config *vela2;  /* vela2 only */
    vsr_st_file *broad_head;  /* vela2 broad_head.safetensors: header after open, mapped after map */
    int64_t params_heads;     /* vela2: head.*, set_bias, span2.* and span_broad.* elements */
} vsr_package;

/* Parameters the runtime loads: text + readout + heads (the vision tower is never loaded). */
static inline int64_t vsr_package_params_loaded(const vsr_package *p) {
    return p->params_text + p->params_readout + p->params_heads;
}

typedef struct vsr_progress vsr_progress;

/* `model`: "org/name", "org/name@rev" or an absolute path. `revision` may be NULL
 * (then "@rev", else "main"). `store_dir` may be NULL ($HF_HUB_CACHE, $HF_HOME/hub,
 * ~/.cache/huggingface/hub). */
vsr_status vsr_package_open(const char *model, const char *revision, const char *store_dir,
                            vsr_package **out, vsr_err *err);
/* Fills the gate request for this package (scheme, family rules, bytes, reserve). */
void vsr_package_gate_request(const vsr_package *p, vsr_gate_request *out);
vsr_status vsr_package_verify(vsr_package *p, int threads, vsr_progress *progress, vsr_err *err);
/* The bytes vsr_package_verify hashes, as the manifest records them (every listed file, the tokenizer
 * too; the weight files' bytes without a manifest): the total of a progress passed to it. */
uint64_t vsr_package_verify_bytes(const vsr_package *p);
/* The checks a load runs that read no file bytes beyond the headers opened: tensors against
 * config and scheme (names, dtypes, shapes), the readout, the manifest's parameter counts
 * and the input limit. vsr_package_verify runs them after hashing; `inspect` runs them
 * alone to report what a load would refuse. */
vsr_status vsr_package_check(const vsr_package *p, vsr_err *err);
vsr_status vsr_package_map(vsr_package *p, vsr_err *err);
void vsr_package_close(vsr_package *p);

/* ---- the package store (Hugging Face hub cache layout) ---- */
/* Writes the store folder in use into buf. */
const char *vsr_store_dir(const char *override, char *buf, size_t n);
/* Resolves repo + revision (commit, branch or tag) to the snapshot folder and commit.
 * Unknown repos/revisions get a message that lists what the store holds. */
vsr_status vsr_store_resolve(const char *store_dir, const char *repo, const char *revision,
                             char *snapshot, size_t snapshot_n, char commit[41], vsr_err *err);

/* ---- identity ---- */
/* model_sha256 exactly as reference-runtime.md section 4.1 step 6 computes it.
 * files: name->sha256 pairs; decision: the decision_config json_t*. */
vsr_status vsr_identity_model_sha256(int n, const char *const *names, const char *const *sha256,
                                     const void *decision_json, char out[65], vsr_err *err);
/* The Vela 2.0 identity (reference registry/artifacts.py sha256_json): sha256 of
 * json.dumps({name: sha256}, sort_keys=True, separators=(",",":"), ensure_ascii=False). */
vsr_status vsr_identity_files_sha256(int n, const char *const *names, const char *const *sha256, char out[65],
                                     vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
