/* vsr/quant.h: the quantization schemes we serve, their config, and the scalar
 * reference (de)quantizers every kernel is tested against.
 *
 * Exactly one compressed-tensors config group of weights, in one of three
 * schemes (compressed-tensors-format.md sections 1-2); anything else is refused
 * with VSR_QUANT_REFUSAL_FORMATS (the seed's text) plus what was found. */
#ifndef VSR_QUANT_H
#define VSR_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VSR_QUANT_REFUSAL_FORMATS                                                                \
    "only compressed-tensors int4 (pack-quantized), FP8 (float-quantized) and NVFP4 "            \
    "(nvfp4-pack-quantized) weights are supported"

typedef enum vsr_scheme {
    VSR_SCHEME_BF16,   /* no quantization_config */
    VSR_SCHEME_FP8,    /* float-quantized: E4M3 weights, per-channel scale, dynamic per-token FP8 acts */
    VSR_SCHEME_INT4,   /* pack-quantized W4A16: GPTQ (sym) or AWQ (asym), groups, optional g_idx */
    VSR_SCHEME_NVFP4,  /* nvfp4-pack-quantized: E2M1 W (and A) in groups of 16, E4M3 block scales */
    VSR_SCHEME_COUNT
} vsr_scheme;

typedef struct vsr_scheme_traits {
    const char *name;        /* "bf16", "fp8", "int4", "nvfp4" */
    const char *ct_format;   /* compressed-tensors format string, NULL for bf16 */
    const char *label;       /* for humans: "FP8 W8A8 (E4M3, per-channel, dynamic per-token)" */
    double weight_bits;      /* average stored bits per weight element, scales included at group 128 */
} vsr_scheme_traits;

const vsr_scheme_traits *vsr_scheme_info(vsr_scheme s);
struct vsr_quant_config;
/* The scheme's description for this configuration: NVFP4 without input activations (NVFP4A16, what
 * `vllm-srun quantize --scheme nvfp4` writes) is weights-only, BF16 activations. */
const char *vsr_quant_description(const struct vsr_quant_config *q);
bool vsr_scheme_parse(const char *name, vsr_scheme *out); /* CLI --scheme names */

#define VSR_QUANT_MAX_IGNORE 1024 /* a 27B recipe expanded to module names: ~200 (issue 22's writer) */
#define VSR_QUANT_MAX_TARGETS 16

typedef struct vsr_quant_config {
    vsr_scheme scheme;
    int group_size;        /* int4: >0 multiple of 8, or -1 for channel; nvfp4: 16; fp8: -1 */
    bool symmetric;        /* int4: true = GPTQ style, false = AWQ style (zero points) */
    bool actorder_group;   /* int4: weight_g_idx present */
    bool input_activations;/* nvfp4: W4A4 (true) or W4A16 (false); fp8: always true */
    int n_ignore;
    char *ignore[VSR_QUANT_MAX_IGNORE]; /* module names or "re:" regexes; owned */
    char version[32];      /* compressed-tensors version that wrote it, "" if absent */
    /* Additions (quantization formats engineer): the one group's targets. A non-null
     * kv_cache_scheme is refused (no FP8 K/V cache here), so there is no KV field. */
    int n_targets;
    char *targets[VSR_QUANT_MAX_TARGETS]; /* class names ("Linear"), module names, "re:" regexes */
    char group_name[64];   /* the config group's name, e.g. "group_0" */
} vsr_quant_config;

/* Parses config.json's `quantization_config` (NULL or absent = BF16). `json` is a
 * jansson json_t* (void* to keep jansson out of public headers). Refuses other
 * methods, formats, several groups, static activations, bad group sizes and
 * unknown keys with the seed's text followed by ": " and the specific reason. */
vsr_status vsr_quant_config_parse(const void *quantization_config_json, vsr_quant_config *out,
                                  vsr_err *err);
void vsr_quant_config_free(vsr_quant_config *q);
/* Does `module` (e.g. "model.language_model.layers.0.mlp.up_proj") stay unquantized? */
bool vsr_quant_module_ignored(const vsr_quant_config *q, const char *module);
/* Does the group target `module` of class `class_name` (e.g. "Linear")? As vLLM's
 * find_matched_target: exact name or `re:` match on the module, then the class name by
 * case-insensitive substring (so "Linear" matches "QKVParallelLinear"). Ignoring wins:
 * callers check vsr_quant_module_ignored first. BF16 configs target nothing. */
bool vsr_quant_module_targeted(const vsr_quant_config *q, const char *module,
                               const char *class_name);

/* ---- scalar references (the oracle; slow and obviously right) ---- */
float vsr_e4m3fn_to_f32(uint8_t v);
uint8_t vsr_f32_to_e4m3fn(float f);     /* saturating to +-448, RNE */
float vsr_e4m3fnuz_to_f32(uint8_t v);
float vsr_e2m1_to_f32(uint8_t nibble);  /* low 4 bits: sign<<3 | idx */
uint8_t vsr_f32_to_e2m1(float f);       /* RNE on the E2M1 grid, saturating at 6 */

/* Dequantize a whole [N,K] linear weight to BF16 bits, exactly as compressed-tensors
 * decompresses it (product rounded once to BF16). */
/* FP8: w [N,K] e4m3fn, scale [N] bf16. */
void vsr_dequant_fp8_ref(const uint8_t *w, const uint16_t *scale_bf16, int64_t N, int64_t K,
                         uint16_t *out_bf16);
/* int4 pack-quantized: packed [N, K/8] u32, scale [N, G] bf16, zp packed [N/8, G] u32 or NULL
 * (symmetric), g_idx [K] or NULL. G = ceil(K/group) (group -1 => G = 1). */
void vsr_dequant_int4_ref(const uint32_t *packed, const uint16_t *scale_bf16, const uint32_t *zp,
                          const int32_t *g_idx, int64_t N, int64_t K, int group,
                          uint16_t *out_bf16);
/* NVFP4: packed [N, K/2] u8, scale [N, K/16] e4m3fn, global scale (a divisor). */
void vsr_dequant_nvfp4_ref(const uint8_t *packed, const uint8_t *scale_e4m3, float global_scale,
                           int64_t N, int64_t K, uint16_t *out_bf16);

/* ---- round-to-nearest quantizers (fixtures; calibration comes later) ----
 * Input is a BF16 [N,K] weight. Outputs are caller-allocated with the shapes above. */
void vsr_quantize_fp8_rtn(const uint16_t *w_bf16, int64_t N, int64_t K, uint8_t *w_out,
                          uint16_t *scale_bf16_out);
/* zp_out may be NULL when symmetric. g_idx may be NULL (column order); when given, column k
 * belongs to group g_idx[k]. */
void vsr_quantize_int4_rtn(const uint16_t *w_bf16, int64_t N, int64_t K, int group, bool symmetric,
                           const int32_t *g_idx, uint32_t *packed_out, uint16_t *scale_bf16_out,
                           uint32_t *zp_out);
void vsr_quantize_nvfp4_rtn(const uint16_t *w_bf16, int64_t N, int64_t K, uint8_t *packed_out,
                            uint8_t *scale_e4m3_out, float *global_scale_out);

#ifdef __cplusplus
}
#endif

#endif
