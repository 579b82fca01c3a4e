/* vsr/model_config.h: the qwen3_5 text backbone's configuration, as config.json
 * spells it in transformers 4.x and 5.x (rope_theta at top level or inside
 * rope_parameters; torch_dtype or dtype; layer_types or full_attention_interval). */
#ifndef VSR_MODEL_CONFIG_H
#define VSR_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VSR_MAX_LAYERS 256

typedef enum vsr_layer_type {
    VSR_LAYER_LINEAR_ATTENTION, /* Gated DeltaNet: "linear_attention" */
    VSR_LAYER_FULL_ATTENTION,   /* gated full attention: "full_attention" */
} vsr_layer_type;

typedef struct vsr_text_config {
    char model_type[32];          /* "qwen3_5_text" */
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int head_dim;
    int linear_num_key_heads;
    int linear_num_value_heads;
    int linear_key_head_dim;
    int linear_value_head_dim;
    int linear_conv_kernel_dim;
    double rms_norm_eps;
    double rope_theta;
    double partial_rotary_factor;
    int mrope_section[3];
    bool mrope_interleaved;
    int64_t max_position_embeddings; /* 0 when config.json omits it */
    bool tie_word_embeddings;
    bool attention_bias;
    char hidden_act[16];          /* "silu" */
    char dtype[16];               /* "bfloat16" */
    vsr_layer_type layer_types[VSR_MAX_LAYERS];
} vsr_text_config;

/* Top-level config.json facts the package layer needs. */
typedef struct vsr_model_config {
    char model_type[32];          /* "qwen3_5" (decision3) or the text type itself */
    char architectures[128];      /* first entry of "architectures", "" if absent */
    bool has_vision;              /* vision_config present */
    char vision_model_type[32];
    vsr_text_config text;
    bool has_quantization_config;
} vsr_model_config;

/* Parses a config.json document (a jansson json_t*, as void*). `label` names the
 * file in messages. Unknown text keys are ignored (transformers adds many);
 * missing required ones and wrong types are refused by name. */
vsr_status vsr_model_config_parse(const void *config_json, const char *label, vsr_model_config *out,
                                  vsr_err *err);

/* Derived sizes. */
static inline int64_t vsr_text_linear_key_dim(const vsr_text_config *c) {
    return (int64_t)c->linear_num_key_heads * c->linear_key_head_dim;
}
static inline int64_t vsr_text_linear_value_dim(const vsr_text_config *c) {
    return (int64_t)c->linear_num_value_heads * c->linear_value_head_dim;
}
/* Number of layers of each kind. */
int vsr_text_count_layers(const vsr_text_config *c, vsr_layer_type t);

#ifdef __cplusplus
}
#endif

#endif
