/* Tests for the quantization formats: config parsing and refusals (src/format/quant_config.c),
 * the small float formats (fp_formats.c, against tables torch wrote: tools/make_fp8_tables.py),
 * the reference dequantizers (dequant.c) and RTN quantizers (quantize.c) against packages the
 * compressed-tensors library itself wrote and decompressed (tools/make_ct_samples.py). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "test.h"
#include "vsr/dtype.h"
#include "vsr/quant.h"
#include "vsr/safetensors.h"

static char data_path[1024];
static const char *data(const char *rel) {
    const char *repo = getenv("VSR_REPO");
    snprintf(data_path, sizeof data_path, "%s/tests/data/%s", repo && *repo ? repo : ".", rel);
    return data_path;
}

static bool same_f32(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0; /* distinguishes -0 */
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ================================================================ float formats */

TEST(e4m3_decode_matches_torch_all_256) {
    FILE *f = fopen(data("fp/e4m3.tsv"), "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[256];
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        unsigned code, fn, fnuz;
        if (sscanf(line, "%x %x %x", &code, &fn, &fnuz) != 3) continue;
        rows++;
        float got = vsr_e4m3fn_to_f32((uint8_t)code), want = f32_from_bits(fn);
        CHECK_MSG(same_f32(got, want), "fn code %02x: got %a want %a", code, got, want);
        got = vsr_e4m3fnuz_to_f32((uint8_t)code), want = f32_from_bits(fnuz);
        CHECK_MSG(same_f32(got, want), "fnuz code %02x: got %a want %a", code, got, want);
    }
    fclose(f);
    CHECK(rows == 256);
    /* Spot values from the spec's definitions. */
    CHECK(vsr_e4m3fn_to_f32(0x7e) == 448.0f);
    CHECK(vsr_e4m3fn_to_f32(0x01) == 0x1p-9f);
    CHECK(isnan(vsr_e4m3fn_to_f32(0xff)));
    CHECK(vsr_e4m3fnuz_to_f32(0x7f) == 240.0f);
    CHECK(isnan(vsr_e4m3fnuz_to_f32(0x80)));
    CHECK(vsr_e4m3fnuz_to_f32(0x40) * 2.0f == vsr_e4m3fn_to_f32(0x40)); /* fnuz = half of fn */
}

TEST(e4m3_encode_matches_torch_for_every_bf16) {
    size_t n = 0;
    char *tab = test_read_file(data("fp/bf16_to_e4m3fn.bin"), &n);
    CHECK(tab && n == 65536);
    if (!tab || n != 65536) return free(tab);
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float x = vsr_bf16_to_f32((uint16_t)b);
        uint8_t got = vsr_f32_to_e4m3fn(x), want = (uint8_t)tab[b];
        if (isnan(x)) {
            if ((got & 0x7f) != 0x7f) bad++; /* any NaN code */
        } else if (got != want && bad++ < 5) {
            fprintf(stderr, "bf16 %04x (%g): got %02x want %02x\n", b, x, got, want);
        }
    }
    CHECK_MSG(bad == 0, "%d BF16 values encode differently from torch", bad);
    free(tab);
    /* Saturation and round trip of every finite code. */
    CHECK(vsr_f32_to_e4m3fn(1e9f) == 0x7e && vsr_f32_to_e4m3fn(-1e9f) == 0xfe);
    CHECK(vsr_f32_to_e4m3fn(INFINITY) == 0x7e);
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        CHECK_MSG(vsr_f32_to_e4m3fn(vsr_e4m3fn_to_f32((uint8_t)c)) == c, "code %02x", c);
    }
}

TEST(e2m1_decode_and_encode_match_compressed_tensors) {
    static const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < 16; i++) CHECK_MSG(same_f32(vsr_e2m1_to_f32((uint8_t)i), want[i]), "nibble %x", i);
    CHECK(vsr_e2m1_to_f32(0xf7) == 6.0f); /* only the low 4 bits count */
    size_t n = 0;
    char *tab = test_read_file(data("fp/bf16_to_e2m1.bin"), &n);
    CHECK(tab && n == 65536);
    if (!tab || n != 65536) return free(tab);
    int bad = 0, compared = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        if ((uint8_t)tab[b] == 0xff) continue; /* NaN: not compared */
        float x = vsr_bf16_to_f32((uint16_t)b);
        x = x < -6.0f ? -6.0f : x > 6.0f ? 6.0f : x;
        uint8_t got = vsr_f32_to_e2m1(x);
        compared++;
        if (got != (uint8_t)tab[b] && bad++ < 5)
            fprintf(stderr, "bf16 %04x (%g): got %x want %x\n", b, x, got, (uint8_t)tab[b]);
    }
    CHECK(compared > 65000);
    CHECK_MSG(bad == 0, "%d BF16 values encode differently from compressed-tensors", bad);
    free(tab);
    /* The ties, RNE on the grid. */
    static const float tie_in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 100.0f};
    static const uint8_t tie_out[] = {0, 2, 2, 4, 4, 6, 6, 7};
    for (int i = 0; i < 8; i++) CHECK_MSG(vsr_f32_to_e2m1(tie_in[i]) == tie_out[i], "%g", tie_in[i]);
}

/* ================================================================ config parsing */

/* A config in each scheme, in the newer spelling compressed-tensors writes. */
static const char *const FP8_CFG =
    "{\"config_groups\":{\"group_0\":{\"format\":\"float-quantized\","
    "\"input_activations\":{\"actorder\":null,\"block_structure\":null,\"dynamic\":true,\"group_size\":null,"
    "\"num_bits\":8,\"observer\":null,\"observer_kwargs\":{},\"scale_dtype\":null,\"zp_dtype\":null,"
    "\"strategy\":\"token\",\"symmetric\":true,\"type\":\"float\"},"
    "\"output_activations\":null,\"targets\":[\"Linear\"],"
    "\"weights\":{\"actorder\":null,\"block_structure\":null,\"dynamic\":false,\"group_size\":null,"
    "\"num_bits\":8,\"observer\":\"minmax\",\"observer_kwargs\":{},\"scale_dtype\":null,\"zp_dtype\":null,"
    "\"strategy\":\"channel\",\"symmetric\":true,\"type\":\"float\"}}},"
    "\"format\":\"float-quantized\",\"global_compression_ratio\":null,\"ignore\":[\"lm_head\"],"
    "\"kv_cache_scheme\":null,\"quant_method\":\"compressed-tensors\",\"quantization_status\":\"compressed\","
    "\"sparsity_config\":{},\"transform_config\":{},\"version\":\"0.12.2\"}";

static const char *const INT4_CFG =
    "{\"config_groups\":{\"group_0\":{\"format\":\"pack-quantized\",\"input_activations\":null,"
    "\"output_activations\":null,\"targets\":[\"Linear\"],"
    "\"weights\":{\"actorder\":\"static\",\"block_structure\":null,\"dynamic\":false,\"group_size\":128,"
    "\"num_bits\":4,\"observer\":\"memoryless_minmax\",\"observer_kwargs\":{},\"scale_dtype\":null,"
    "\"zp_dtype\":null,\"strategy\":\"group\",\"symmetric\":true,\"type\":\"int\"}}},"
    "\"format\":\"pack-quantized\",\"global_compression_ratio\":null,\"ignore\":[\"lm_head\"],"
    "\"kv_cache_scheme\":null,\"quant_method\":\"compressed-tensors\",\"quantization_status\":\"compressed\","
    "\"sparsity_config\":{},\"transform_config\":{},\"version\":\"0.14.0\"}";

static const char *const NVFP4_CFG =
    "{\"config_groups\":{\"group_0\":{\"format\":\"nvfp4-pack-quantized\",\"targets\":[\"Linear\"],"
    "\"output_activations\":null,"
    "\"weights\":{\"actorder\":null,\"block_structure\":null,\"dynamic\":false,\"group_size\":16,\"num_bits\":4,"
    "\"observer\":\"minmax\",\"observer_kwargs\":{},\"scale_dtype\":\"torch.float8_e4m3fn\",\"strategy\":\"tensor_group\","
    "\"symmetric\":true,\"type\":\"float\",\"zp_dtype\":null},"
    "\"input_activations\":{\"actorder\":null,\"block_structure\":null,\"dynamic\":\"local\",\"group_size\":16,"
    "\"num_bits\":4,\"observer\":\"static_minmax\",\"observer_kwargs\":{},\"scale_dtype\":\"torch.float8_e4m3fn\","
    "\"strategy\":\"tensor_group\",\"symmetric\":true,\"type\":\"float\",\"zp_dtype\":null}}},"
    "\"format\":\"nvfp4-pack-quantized\",\"global_compression_ratio\":null,"
    "\"ignore\":[\"lm_head\",\"re:.*mlp.gate$\",\"re:.*linear_attn.*\",\"re:model.visual.*\"],"
    "\"kv_cache_scheme\":null,\"quant_method\":\"compressed-tensors\",\"quantization_status\":\"compressed\","
    "\"sparsity_config\":{},\"transform_config\":{},\"version\":\"0.13.0\"}";

/* Applies "path=json" edits (path dotted from the quantization_config; json "DELETE"
 * removes the key) to a base config and parses the result. */
static vsr_status parse_edited(const char *base, const char *const *edits, vsr_quant_config *q,
                               vsr_err *err) {
    json_error_t je;
    json_t *root = json_loads(base, 0, &je);
    if (!root) {
        fprintf(stderr, "bad base json: %s\n", je.text);
        return VSR_E_INTERNAL;
    }
    for (const char *const *e = edits; e && *e; e++) {
        char path[256];
        const char *eq = strchr(*e, '=');
        snprintf(path, sizeof path, "%.*s", (int)(eq - *e), *e);
        json_t *obj = root;
        char *save = NULL, *tok = strtok_r(path, ".", &save), *next;
        while ((next = strtok_r(NULL, ".", &save))) {
            json_t *child = json_object_get(obj, tok);
            if (!child) {
                child = json_object();
                json_object_set_new(obj, tok, child);
            }
            obj = child;
            tok = next;
        }
        if (!strcmp(eq + 1, "DELETE")) {
            json_object_del(obj, tok);
        } else {
            json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &je);
            if (!v) fprintf(stderr, "bad edit json %s: %s\n", eq + 1, je.text);
            json_object_set_new(obj, tok, v);
        }
    }
    vsr_status st = vsr_quant_config_parse(root, q, err);
    json_decref(root);
    return st;
}

TEST(accepts_the_three_schemes_as_written) {
    vsr_quant_config q;
    vsr_err err = {0};
    vsr_status st = parse_edited(FP8_CFG, NULL, &q, &err);
    CHECK_OK(st, err);
    CHECK(q.scheme == VSR_SCHEME_FP8 && q.input_activations && q.symmetric && q.group_size == -1);
    CHECK(q.n_ignore == 1 && !strcmp(q.ignore[0], "lm_head"));
    CHECK(q.n_targets == 1 && !strcmp(q.targets[0], "Linear"));
    CHECK(!strcmp(q.version, "0.12.2") && !strcmp(q.group_name, "group_0"));
    vsr_quant_config_free(&q);

    st = parse_edited(INT4_CFG, NULL, &q, &err);
    CHECK_OK(st, err);
    CHECK(q.scheme == VSR_SCHEME_INT4 && q.group_size == 128 && q.symmetric && !q.actorder_group &&
          !q.input_activations);
    vsr_quant_config_free(&q);

    st = parse_edited(NVFP4_CFG, NULL, &q, &err);
    CHECK_OK(st, err);
    CHECK(q.scheme == VSR_SCHEME_NVFP4 && q.group_size == 16 && q.input_activations && q.n_ignore == 4);
    CHECK(strstr(vsr_quant_description(&q), "NVFP4 W4A4") != NULL);
    q.input_activations = false; /* NVFP4A16, as vllm-srun quantize writes it: weights only */
    CHECK(strstr(vsr_quant_description(&q), "NVFP4 W4A16") && strstr(vsr_quant_description(&q), "BF16 activations"));
    vsr_quant_config_free(&q);

    /* Absent or null quantization_config: BF16. */
    CHECK_OK(vsr_quant_config_parse(NULL, &q, &err), err);
    CHECK(q.scheme == VSR_SCHEME_BF16 && q.n_ignore == 0);
    json_t *jnull = json_null();
    CHECK_OK(vsr_quant_config_parse(jnull, &q, &err), err);
    CHECK(q.scheme == VSR_SCHEME_BF16);
    vsr_quant_config_free(&q);
    vsr_quant_config_free(NULL); /* no-op */
}

TEST(accepts_old_and_new_spellings) {
    struct {
        const char *base;
        const char *edits[8];
        vsr_scheme scheme;
        int group;
        bool sym, gidx, act;
    } cases[] = {
        /* <= 0.11: no scale_dtype / zp_dtype keys at all, observer "minmax" */
        {FP8_CFG, {"config_groups.group_0.weights.scale_dtype=DELETE", "config_groups.group_0.weights.zp_dtype=DELETE",
                   "config_groups.group_0.input_activations.scale_dtype=DELETE",
                   "config_groups.group_0.input_activations.zp_dtype=DELETE", "version=\"0.10.2\""},
         VSR_SCHEME_FP8, -1, true, false, true},
        /* newest: null fields omitted, per-group format only */
        {FP8_CFG, {"config_groups.group_0.weights.actorder=DELETE", "config_groups.group_0.weights.block_structure=DELETE",
                   "config_groups.group_0.weights.observer=DELETE", "config_groups.group_0.weights.observer_kwargs=DELETE",
                   "format=DELETE", "moe_sparsity_config=null"},
         VSR_SCHEME_FP8, -1, true, false, true},
        /* global format only, strategy inferred from group_size, GPTQ "weight" */
        {INT4_CFG, {"config_groups.group_0.format=DELETE", "config_groups.group_0.weights.strategy=DELETE",
                    "config_groups.group_0.weights.actorder=\"weight\""},
         VSR_SCHEME_INT4, 128, true, false, false},
        /* AWQ: asymmetric with zp_dtype, group 32 */
        {INT4_CFG, {"config_groups.group_0.weights.symmetric=false", "config_groups.group_0.weights.zp_dtype=\"torch.int8\"",
                    "config_groups.group_0.weights.actorder=null", "config_groups.group_0.weights.group_size=32"},
         VSR_SCHEME_INT4, 32, false, false, false},
        /* asymmetric, old spelling (no zp_dtype), channel (-1) */
        {INT4_CFG, {"config_groups.group_0.weights.symmetric=false", "config_groups.group_0.weights.zp_dtype=DELETE",
                    "config_groups.group_0.weights.group_size=-1", "config_groups.group_0.weights.strategy=\"channel\""},
         VSR_SCHEME_INT4, -1, false, false, false},
        /* act-order group in its three spellings */
        {INT4_CFG, {"config_groups.group_0.weights.actorder=\"group\""}, VSR_SCHEME_INT4, 128, true, true, false},
        {INT4_CFG, {"config_groups.group_0.weights.actorder=\"dynamic\""}, VSR_SCHEME_INT4, 128, true, true, false},
        {INT4_CFG, {"config_groups.group_0.weights.actorder=true"}, VSR_SCHEME_INT4, 128, true, true, false},
        {INT4_CFG, {"config_groups.group_0.weights.actorder=false"}, VSR_SCHEME_INT4, 128, true, false, false},
        /* NVFP4A16, NVFP4 with dynamic false inputs, old NVFP4 (no dtypes, minmax) */
        {NVFP4_CFG, {"config_groups.group_0.input_activations=null"}, VSR_SCHEME_NVFP4, 16, true, false, false},
        {NVFP4_CFG, {"config_groups.group_0.input_activations.dynamic=false"}, VSR_SCHEME_NVFP4, 16, true, false, true},
        {NVFP4_CFG, {"config_groups.group_0.weights.scale_dtype=DELETE", "config_groups.group_0.weights.zp_dtype=DELETE",
                     "config_groups.group_0.input_activations.scale_dtype=DELETE",
                     "config_groups.group_0.input_activations.observer=\"minmax\""},
         VSR_SCHEME_NVFP4, 16, true, false, true},
        /* kv_cache_scheme null (the bases carry it), the old run_compressed key, a compression ratio */
        {FP8_CFG, {"kv_cache_scheme=null", "run_compressed=true", "global_compression_ratio=1.5"},
         VSR_SCHEME_FP8, -1, true, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vsr_quant_config q;
        vsr_err err = {0};
        vsr_status st = parse_edited(cases[i].base, cases[i].edits, &q, &err);
        CHECK_MSG(st == VSR_OK, "case %zu: %s", i, err.msg);
        if (st != VSR_OK) continue;
        CHECK_MSG(q.scheme == cases[i].scheme && q.group_size == cases[i].group && q.symmetric == cases[i].sym &&
                      q.actorder_group == cases[i].gidx && q.input_activations == cases[i].act,
                  "case %zu: scheme %d group %d sym %d gidx %d act %d", i, q.scheme, q.group_size, q.symmetric,
                  q.actorder_group, q.input_activations);
        vsr_quant_config_free(&q);
    }
}

TEST(refusals_name_the_key_and_value) {
    struct {
        const char *base;
        const char *edits[4];
        const char *reason;
    } cases[] = {
        /* other methods */
        {FP8_CFG, {"quant_method=\"awq\""}, "quant_method is \"awq\", expected \"compressed-tensors\""},
        {INT4_CFG, {"quant_method=\"gptq\""}, "quant_method is \"gptq\""},
        {FP8_CFG, {"quant_method=\"fp8\""}, "quant_method is \"fp8\""},
        {NVFP4_CFG, {"quant_method=\"modelopt\""}, "quant_method is \"modelopt\""},
        {FP8_CFG, {"quant_method=DELETE"}, "quant_method is (absent)"},
        /* other formats, global and per group */
        {FP8_CFG, {"format=\"int-quantized\""}, "quantization_config.format is \"int-quantized\""},
        {FP8_CFG, {"format=\"naive-quantized\""}, "format is \"naive-quantized\""},
        {FP8_CFG, {"format=\"mixed-precision\""}, "format is \"mixed-precision\""},
        {NVFP4_CFG, {"format=\"mxfp4-pack-quantized\""}, "format is \"mxfp4-pack-quantized\""},
        {FP8_CFG, {"format=\"sparse-24-bitmask\""}, "format is \"sparse-24-bitmask\""},
        {FP8_CFG, {"format=\"dense\""}, "format is \"dense\""},
        {FP8_CFG, {"config_groups.group_0.format=\"int-quantized\""}, "group_0.format is \"int-quantized\""},
        {FP8_CFG, {"config_groups.group_0.format=\"pack-quantized\""},
         "group_0.format \"pack-quantized\" disagrees with quantization_config.format \"float-quantized\""},
        {FP8_CFG, {"format=DELETE", "config_groups.group_0.format=DELETE"}, "format is missing"},
        /* several groups, none, a preset shorthand */
        {FP8_CFG, {"config_groups.group_1={\"targets\":[\"re:.*down_proj\"],\"weights\":{\"num_bits\":8}}"},
         "config_groups has 2 groups (\"group_0\", \"group_1\"), expected exactly one"},
        {FP8_CFG, {"config_groups={}"}, "config_groups is missing or empty"},
        {INT4_CFG, {"config_groups={\"W4A16\":[\"Linear\"]}"}, "config_groups.W4A16 is a preset shorthand"},
        /* static activation quantization */
        {FP8_CFG, {"config_groups.group_0.input_activations.dynamic=false",
                   "config_groups.group_0.input_activations.strategy=\"tensor\""},
         "input_activations.dynamic is false: static activation quantization is not served"},
        {FP8_CFG, {"config_groups.group_0.input_activations=null"}, "input_activations is null: FP8 weight-only"},
        {NVFP4_CFG, {"config_groups.group_0.input_activations.dynamic=true"},
         "input_activations.dynamic is true, expected \"local\" or false"},
        /* group sizes */
        {INT4_CFG, {"config_groups.group_0.weights.group_size=100"}, "weights.group_size is 100, expected a multiple of 8"},
        {INT4_CFG, {"config_groups.group_0.weights.group_size=0"}, "weights.group_size 0 is invalid"},
        {INT4_CFG, {"config_groups.group_0.weights.group_size=-2"}, "weights.group_size -2 is invalid"},
        {NVFP4_CFG, {"config_groups.group_0.weights.group_size=32"}, "weights.group_size is 32, expected 16"},
        {INT4_CFG, {"config_groups.group_0.weights.strategy=\"channel\""},
         "group_size 128 needs strategy \"group\" or \"tensor_group\", not \"channel\""},
        {INT4_CFG, {"config_groups.group_0.weights.group_size=null"},
         "strategy \"group\" needs a positive group_size"},
        /* output activations */
        {INT4_CFG, {"config_groups.group_0.output_activations={\"num_bits\":8,\"type\":\"float\"}"},
         "group_0.output_activations is {\"num_bits\":8,\"type\":\"float\"}: output quantization is not served"},
        /* KV cache: any kv_cache_scheme that is not null is refused (no FP8 K/V cache here) */
        {FP8_CFG, {"kv_cache_scheme={\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"symmetric\":true,\"dynamic\":false}"},
         "quantization_config.kv_cache_scheme is {\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"symmetric\":true,"
         "\"dynamic\":false}: an FP8 K/V cache is not supported by this runtime"},
        {INT4_CFG, {"kv_cache_scheme={\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"symmetric\":true}"},
         "re-export the checkpoint without kv_cache_scheme"},
        {NVFP4_CFG, {"kv_cache_scheme={\"num_bits\":8,\"type\":\"int\",\"strategy\":\"attn_head\"}"},
         "kv_cache_scheme is {\"num_bits\":8,\"type\":\"int\",\"strategy\":\"attn_head\"}: an FP8 K/V cache is not supported"},
        {FP8_CFG, {"kv_cache_scheme={}"}, "kv_cache_scheme is {}: an FP8 K/V cache is not supported by this runtime"},
        /* transforms, sparsity, status */
        {FP8_CFG, {"transform_config={\"config_groups\":{\"R1\":{}}}"}, "transform_config is {\"config_groups\""},
        {FP8_CFG, {"sparsity_config={\"format\":\"sparse-24-bitmask\"}"}, "sparsity_config is {\"format\""},
        {FP8_CFG, {"moe_sparsity_config={\"experts\":[1]}"}, "moe_sparsity_config is {\"experts\""},
        {FP8_CFG, {"quantization_status=\"frozen\""}, "quantization_status is \"frozen\", expected \"compressed\""},
        {FP8_CFG, {"quantization_status=DELETE"}, "quantization_status is (absent)"},
        /* unknown keys anywhere */
        {FP8_CFG, {"foo=1"}, "quantization_config: unknown key \"foo\""},
        {FP8_CFG, {"config_groups.group_0.bar=1"}, "config_groups.group_0: unknown key \"bar\""},
        {INT4_CFG, {"config_groups.group_0.weights.baz=1"}, "group_0.weights: unknown key \"baz\""},
        {FP8_CFG, {"config_groups.group_0.input_activations.qux=1"}, "input_activations: unknown key \"qux\""},
        /* per-scheme weight rules */
        {INT4_CFG, {"config_groups.group_0.weights.num_bits=8"}, "weights.num_bits is 8, expected 4 for pack-quantized"},
        {INT4_CFG, {"config_groups.group_0.weights.num_bits=3"}, "weights.num_bits is 3, expected 4"},
        {INT4_CFG, {"config_groups.group_0.input_activations={\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}"},
         "input_activations is {\"num_bits\":8"},
        {INT4_CFG, {"config_groups.group_0.weights.dynamic=true"}, "weights.dynamic is set, expected false"},
        {INT4_CFG, {"config_groups.group_0.weights.symmetric=false", "config_groups.group_0.weights.zp_dtype=\"torch.uint8\""},
         "weights.zp_dtype is \"torch.uint8\", expected torch.int8"},
        {INT4_CFG, {"config_groups.group_0.weights.actorder=\"foo\""}, "weights.actorder \"foo\" is not"},
        {INT4_CFG, {"config_groups.group_0.weights.strategy=\"block\"", "config_groups.group_0.weights.group_size=null",
                    "config_groups.group_0.weights.block_structure=[128,128]"},
         "weights.block_structure [128,128]: block-wise scales (FP8_BLOCK) are not served"},
        {FP8_CFG, {"config_groups.group_0.weights.strategy=\"tensor\""}, "weights.strategy is \"tensor\", expected \"channel\""},
        {FP8_CFG, {"config_groups.group_0.weights.type=\"int\""}, "weights.type is \"int\", expected \"float\""},
        {FP8_CFG, {"config_groups.group_0.weights.symmetric=false"}, "weights.symmetric is false, expected true"},
        {FP8_CFG, {"config_groups.group_0.input_activations.strategy=\"tensor\""},
         "input_activations.strategy is \"tensor\", expected \"token\""},
        {FP8_CFG, {"config_groups.group_0.input_activations.strategy=\"channel\""},
         "input_activations.strategy \"channel\" is not valid for activations"},
        {FP8_CFG, {"config_groups.group_0.weights.strategy=\"token\"", "config_groups.group_0.weights.dynamic=false"},
         "strategy \"token\" needs dynamic true"},
        {FP8_CFG, {"config_groups.group_0.weights.scale_dtype=\"torch.float16\""}, "weights.scale_dtype is \"torch.float16\""},
        {NVFP4_CFG, {"config_groups.group_0.weights.symmetric=false"}, "weights.symmetric is false, expected true"},
        {NVFP4_CFG, {"config_groups.group_0.weights.scale_dtype=\"torch.uint8\""}, "scale_dtype is \"torch.uint8\""},
        {NVFP4_CFG, {"config_groups.group_0.weights.strategy=\"group\""}, "weights.strategy is \"group\", expected \"tensor_group\""},
        {NVFP4_CFG, {"config_groups.group_0.input_activations.num_bits=8"}, "input_activations.num_bits is 8, expected 4"},
        {NVFP4_CFG, {"config_groups.group_0.weights.dynamic=\"local\"", "config_groups.group_0.weights.strategy=\"group\""},
         "dynamic \"local\" needs strategy \"tensor_group\""},
        {FP8_CFG, {"config_groups.group_0.weights=null"}, "weights is null: activation-only"},
        {FP8_CFG, {"config_groups.group_0.weights.num_bits=\"8\""}, "weights.num_bits is not an integer"},
        /* targets and ignore */
        {FP8_CFG, {"config_groups.group_0.targets=[]"}, "targets is missing or empty"},
        {FP8_CFG, {"ignore=[\"re:model.(\"]"}, "ignore[0] \"re:model.(\" is not a valid regex"},
        {FP8_CFG, {"ignore=\"lm_head\""}, "ignore is not a list of strings"},
    };
    const char *prefix = VSR_QUANT_REFUSAL_FORMATS ": ";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vsr_quant_config q;
        vsr_err err = {0};
        vsr_status st = parse_edited(cases[i].base, cases[i].edits, &q, &err);
        CHECK_MSG(st == VSR_E_UNSUPPORTED && !strncmp(err.msg, prefix, strlen(prefix)) &&
                      strstr(err.msg, cases[i].reason),
                  "case %zu: status %s message \"%s\", want \"%s\"", i, vsr_status_name(st), err.msg,
                  cases[i].reason);
        CHECK(q.scheme == VSR_SCHEME_BF16 && q.n_ignore == 0 && q.n_targets == 0); /* nothing leaked */
        vsr_quant_config_free(&q);
    }
    /* quantization_config that is not an object */
    vsr_quant_config q;
    vsr_err err = {0};
    json_t *s = json_string("awq");
    CHECK_ERR(vsr_quant_config_parse(s, &q, &err), err, VSR_E_UNSUPPORTED, "quantization_config is \"awq\"");
    json_decref(s);
}

/* The ignore list as compressed-tensors saves it: every module name (a 27B recipe: ~200; the lite
 * fixture quantized by vllm-srun quantize: 72, refused by the old limit of 64). Up to
 * VSR_QUANT_MAX_IGNORE entries are read; one more is refused with the count. */
static void ignore_list_of(int n, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "ignore=[");
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s\"model.language_model.layers.%d.linear_attn.in_proj_a\"", i ? "," : "", i);
    snprintf(buf + o, cap - o, "]");
}

TEST(ignore_list_limit) {
    size_t cap = 80 * (VSR_QUANT_MAX_IGNORE + 2);
    char *edit = malloc(cap);
    const char *edits[2] = {edit, NULL};
    vsr_quant_config q;
    vsr_err err = {0};
    ignore_list_of(VSR_QUANT_MAX_IGNORE, edit, cap);
    vsr_status st = parse_edited(FP8_CFG, edits, &q, &err);
    CHECK_OK(st, err);
    if (!st) {
        CHECK(q.n_ignore == VSR_QUANT_MAX_IGNORE);
        CHECK(!strcmp(q.ignore[VSR_QUANT_MAX_IGNORE - 1], "model.language_model.layers.1023.linear_attn.in_proj_a"));
        vsr_quant_config_free(&q);
    }
    ignore_list_of(VSR_QUANT_MAX_IGNORE + 1, edit, cap);
    char want[96];
    snprintf(want, sizeof want, "has %d entries, more than the %d we accept", VSR_QUANT_MAX_IGNORE + 1, VSR_QUANT_MAX_IGNORE);
    CHECK_ERR(parse_edited(FP8_CFG, edits, &q, &err), err, VSR_E_UNSUPPORTED, want);
    free(edit);
}

TEST(ignore_and_targets_match_like_vllm) {
    vsr_quant_config q;
    vsr_err err = {0};
    CHECK_OK(parse_edited(NVFP4_CFG, NULL, &q, &err), err);
    CHECK(vsr_quant_module_ignored(&q, "lm_head"));
    CHECK(!vsr_quant_module_ignored(&q, "lm_head2"));          /* exact names are exact */
    CHECK(!vsr_quant_module_ignored(&q, "model.lm_head"));
    CHECK(vsr_quant_module_ignored(&q, "model.layers.3.mlp.gate"));
    CHECK(!vsr_quant_module_ignored(&q, "model.layers.3.mlp.gate_proj")); /* $ */
    CHECK(vsr_quant_module_ignored(&q, "model.layers.0.linear_attn.in_proj_qkvz"));
    CHECK(vsr_quant_module_ignored(&q, "model.visual.blocks.0.attn.qkv"));
    CHECK(!vsr_quant_module_ignored(&q, "x.model.visual.blocks.0")); /* re.match anchors at the start */
    CHECK(!vsr_quant_module_ignored(&q, "model.layers.0.self_attn.q_proj"));
    CHECK(!vsr_quant_module_ignored(NULL, "lm_head"));
    /* targets: class-name substring, case-insensitive; names exact or re: */
    CHECK(vsr_quant_module_targeted(&q, "model.layers.0.self_attn.qkv_proj", "QKVParallelLinear"));
    CHECK(vsr_quant_module_targeted(&q, "model.layers.0.mlp.down_proj", "Linear"));
    CHECK(!vsr_quant_module_targeted(&q, "model.embed_tokens", "Embedding"));
    vsr_quant_config_free(&q);
    const char *edits[] = {"config_groups.group_0.targets=[\"re:.*layers\\\\.1\",\"model.norm\"]", NULL};
    CHECK_OK(parse_edited(FP8_CFG, edits, &q, &err), err);
    CHECK(vsr_quant_module_targeted(&q, "model.layers.10.mlp.up_proj", "Linear")); /* not anchored at the end */
    CHECK(!vsr_quant_module_targeted(&q, "model.layers.2.mlp.up_proj", "Linear"));
    CHECK(vsr_quant_module_targeted(&q, "model.norm", "RMSNorm"));
    vsr_quant_config_free(&q);
    vsr_quant_config bf = {0};
    CHECK(!vsr_quant_module_targeted(&bf, "model.layers.0.mlp.up_proj", "Linear"));
}

TEST(scheme_table) {
    for (int s = 0; s < VSR_SCHEME_COUNT; s++) {
        const vsr_scheme_traits *t = vsr_scheme_info((vsr_scheme)s);
        CHECK(t && t->name && t->label && t->weight_bits > 0);
        vsr_scheme back;
        CHECK(vsr_scheme_parse(t->name, &back) && back == (vsr_scheme)s);
    }
    CHECK(vsr_scheme_info(VSR_SCHEME_COUNT) == NULL);
    CHECK(!strcmp(vsr_scheme_info(VSR_SCHEME_INT4)->ct_format, "pack-quantized"));
    CHECK(!strcmp(vsr_scheme_info(VSR_SCHEME_FP8)->ct_format, "float-quantized"));
    CHECK(!strcmp(vsr_scheme_info(VSR_SCHEME_NVFP4)->ct_format, "nvfp4-pack-quantized"));
    CHECK(vsr_scheme_info(VSR_SCHEME_BF16)->ct_format == NULL);
    vsr_scheme s;
    CHECK(!vsr_scheme_parse("awq", &s) && !vsr_scheme_parse("FP8", &s) && !vsr_scheme_parse(NULL, &s));
}

/* ================================================================ layouts by hand */

TEST(int4_layout_nibbles_offsets_zero_points_g_idx) {
    /* One row, K = 8: word 0x76543210 holds u = 0..7 from the low nibble up. */
    uint32_t packed[2] = {0x76543210u, 0xfedcba98u}; /* N = 2 rows */
    uint16_t scale[2] = {vsr_f32_to_bf16(1.0f), vsr_f32_to_bf16(0.5f)};
    uint16_t out[16];
    vsr_dequant_int4_ref(packed, scale, NULL, NULL, 2, 8, -1, out);
    for (int k = 0; k < 8; k++) {
        CHECK(vsr_bf16_to_f32(out[k]) == (float)(k - 8));          /* symmetric: u - 8 */
        CHECK(vsr_bf16_to_f32(out[8 + k]) == (float)(k + 8 - 8) * 0.5f);
    }
    /* Asymmetric: zero points packed along N, row n in nibble n%8 of word (n/8, g). */
    uint32_t zp[1] = {0x00000053u}; /* row 0: uzp 3, row 1: uzp 5 */
    vsr_dequant_int4_ref(packed, scale, zp, NULL, 2, 8, -1, out);
    for (int k = 0; k < 8; k++) {
        CHECK(vsr_bf16_to_f32(out[k]) == (float)(k - 3));
        CHECK(vsr_bf16_to_f32(out[8 + k]) == (float)(k + 8 - 5) * 0.5f);
    }
    /* g_idx: K = 16 in two groups of 8; columns alternate groups. A -1 means column order. */
    uint32_t p2[2] = {0x99999999u, 0x99999999u}; /* every u = 9 -> q = 1 */
    uint16_t s2[2] = {vsr_f32_to_bf16(2.0f), vsr_f32_to_bf16(3.0f)};
    int32_t g_idx[16];
    for (int k = 0; k < 16; k++) g_idx[k] = k % 2;
    uint16_t o2[16];
    vsr_dequant_int4_ref(p2, s2, NULL, g_idx, 1, 16, 8, o2);
    for (int k = 0; k < 16; k++) CHECK(vsr_bf16_to_f32(o2[k]) == (k % 2 ? 3.0f : 2.0f));
    g_idx[5] = -1;
    vsr_dequant_int4_ref(p2, s2, NULL, g_idx, 1, 16, 8, o2);
    for (int k = 0; k < 16; k++) CHECK(vsr_bf16_to_f32(o2[k]) == (k < 8 ? 2.0f : 3.0f));
}

TEST(nvfp4_and_fp8_layout_by_hand) {
    /* K = 16, one row: byte j holds element 2j in the low nibble, 2j+1 in the high one. */
    uint8_t packed[8] = {0x71, 0xf8, 0, 0, 0, 0, 0, 0x2a};
    uint8_t scale[1] = {0x48}; /* e4m3fn 0x48 = 2^(9-7) = 4 */
    uint16_t out[16];
    vsr_dequant_nvfp4_ref(packed, scale, 2.0f, 1, 16, out); /* scale / global = 2 */
    CHECK(vsr_bf16_to_f32(out[0]) == 1.0f);   /* 0.5 * 2 */
    CHECK(vsr_bf16_to_f32(out[1]) == 12.0f);  /* 6 * 2 */
    CHECK(same_f32(vsr_bf16_to_f32(out[2]), -0.0f));
    CHECK(vsr_bf16_to_f32(out[3]) == -12.0f);
    CHECK(vsr_bf16_to_f32(out[14]) == -2.0f); /* 0xa = -1 */
    CHECK(vsr_bf16_to_f32(out[15]) == 2.0f);  /* 0x2 = 1 */
    /* The scale quotient is FP32: 1/3 is not a BF16 number, 6 * f32(1/3) rounds once more. */
    uint8_t one[1] = {0x38}; /* 1.0 */
    vsr_dequant_nvfp4_ref(packed, one, 3.0f, 1, 16, out);
    CHECK(out[1] == vsr_f32_to_bf16(6.0f * (1.0f / 3.0f)));
    /* FP8: bf16(e4m3 * scale), per row */
    uint8_t w[4] = {0x38, 0xb8, 0x7e, 0x01};
    uint16_t s[2] = {vsr_f32_to_bf16(0.5f), vsr_f32_to_bf16(3.0f)};
    uint16_t o[4];
    vsr_dequant_fp8_ref(w, s, 2, 2, o);
    CHECK(vsr_bf16_to_f32(o[0]) == 0.5f && vsr_bf16_to_f32(o[1]) == -0.5f);
    CHECK(vsr_bf16_to_f32(o[2]) == 1344.0f && vsr_bf16_to_f32(o[3]) == 3.0f * 0x1p-9f);
}

/* ================================================================ round trips */

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

TEST(quantize_dequantize_round_trips_stay_within_half_a_step) {
    enum { N = 24, K = 256 };
    static uint16_t w[N * K], out[N * K];
    uint32_t seed = 7;
    for (int i = 0; i < N * K; i++) w[i] = vsr_f32_to_bf16(((float)(lcg(&seed) % 20001) - 10000.0f) * 1e-5f);
    for (int k = 0; k < K; k++) w[5 * K + k] = 0; /* a zero row: eps scales, exact zeros back */

    /* int4, symmetric and asymmetric, group 128 and channel */
    static uint32_t packed[N * K / 8], zp[(N / 8) * 2];
    static uint16_t scale[N * 2];
    for (int sym = 0; sym < 2; sym++) {
        for (int gi = 0; gi < 2; gi++) {
            int group = gi ? -1 : 128, G = gi ? 1 : 2;
            vsr_quantize_int4_rtn(w, N, K, group, sym, NULL, packed, scale, sym ? NULL : zp);
            vsr_dequant_int4_ref(packed, scale, sym ? NULL : zp, NULL, N, K, group, out);
            double worst = 0;
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) {
                    float s = vsr_bf16_to_f32(scale[n * G + (group > 0 ? k / group : 0)]);
                    float e = fabsf(vsr_bf16_to_f32(out[n * K + k]) - vsr_bf16_to_f32(w[n * K + k]));
                    /* half a step, plus the BF16 roundings of x/s (which can push amax/s past
                     * 7.5 into the clamp at 7) and of the product */
                    double r = e / (s * (0.5 + 8 * 0x1p-7) + fabsf(vsr_bf16_to_f32(w[n * K + k])) * 0x1p-7);
                    if (r > worst) worst = r;
                }
            CHECK_MSG(worst <= 1.0 + 1e-6, "int4 sym %d group %d: error %.3f steps", sym, group, worst);
            for (int k = 0; k < K; k++) CHECK(vsr_bf16_to_f32(out[5 * K + k]) == 0.0f);
        }
    }
    /* FP8: relative error within E4M3's half ulp (2^-4) plus BF16 roundings */
    static uint8_t q8[N * K];
    static uint16_t s8[N];
    vsr_quantize_fp8_rtn(w, N, K, q8, s8);
    vsr_dequant_fp8_ref(q8, s8, N, K, out);
    CHECK(vsr_bf16_to_f32(s8[5]) == 0.0078125f); /* zero row: bf16 eps */
    int bad = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            float x = vsr_bf16_to_f32(w[n * K + k]), y = vsr_bf16_to_f32(out[n * K + k]);
            float tol = fabsf(x) * (0x1p-4f + 0x1p-7f) + vsr_bf16_to_f32(s8[n]) * 0x1p-9f;
            if (fabsf(x - y) > tol) bad++;
        }
    CHECK_MSG(bad == 0, "fp8: %d values off by more than half an ulp", bad);
    /* NVFP4: error within half the block's largest step (1 of E2M1's step 2 at the top) */
    static uint8_t p4[N * K / 2], s4[N * K / 16];
    float gs;
    vsr_quantize_nvfp4_rtn(w, N, K, p4, s4, &gs);
    vsr_dequant_nvfp4_ref(p4, s4, gs, N, K, out);
    bad = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            float step = vsr_e4m3fn_to_f32(s4[n * (K / 16) + k / 16]) / gs;
            float x = vsr_bf16_to_f32(w[n * K + k]), y = vsr_bf16_to_f32(out[n * K + k]);
            if (fabsf(x - y) > step * 1.0f + fabsf(x) * 0x1p-7f) bad++;
        }
    CHECK_MSG(bad == 0, "nvfp4: %d values off by more than half a step", bad);
    CHECK(s4[5 * (K / 16)] == 0x20); /* zero block: FP8 eps 0.125 */
}

/* ================================================================ compressed-tensors samples */

typedef struct sample {
    const char *dir;
    vsr_scheme scheme;
    int group;
    bool sym, gidx;
} sample;

static const sample samples[] = {
    {"ct/fp8_dynamic", VSR_SCHEME_FP8, -1, true, false},
    {"ct/w4a16_asym_g128", VSR_SCHEME_INT4, 128, false, false},
    {"ct/w4a16_gidx_g128", VSR_SCHEME_INT4, 128, true, true},
    {"ct/nvfp4", VSR_SCHEME_NVFP4, 16, true, false},
};
static const char *const sample_modules[] = {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj"};

/* A copy of a tensor's bytes (the mapping may be unaligned). */
static void *tensor_copy(const vsr_tensor *t) {
    void *p = malloc(t->nbytes ? t->nbytes : 1);
    memcpy(p, t->data, t->nbytes);
    return p;
}

static const vsr_tensor *find2(vsr_weights *w, const char *module, const char *param) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", module, param);
    return vsr_weights_find(w, name);
}

static bool bytes_equal(const void *a, const vsr_tensor *t, size_t n) {
    return t && t->nbytes == n && memcmp(a, t->data, n) == 0;
}

static void check_sample(const sample *s) {
    char path[1200], dir[1100];
    snprintf(dir, sizeof dir, "%s", data(s->dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = NULL;
    vsr_err err = {0};
    CHECK_OK(vsr_json_load_file(path, "config.json", 1 << 20, &cfg, &err), err);
    if (!cfg) return;
    vsr_quant_config q;
    vsr_status st = vsr_quant_config_parse(json_object_get(cfg, "quantization_config"), &q, &err);
    CHECK_MSG(st == VSR_OK, "%s: %s", s->dir, err.msg);
    json_decref(cfg);
    if (st != VSR_OK) return;
    CHECK_MSG(q.scheme == s->scheme && q.group_size == s->group && q.symmetric == s->sym && q.actorder_group == s->gidx,
              "%s: parsed scheme %d group %d sym %d gidx %d", s->dir, q.scheme, q.group_size, q.symmetric,
              q.actorder_group);
    CHECK(vsr_quant_module_ignored(&q, "lm_head"));

    vsr_weights *w = NULL;
    CHECK_OK(vsr_weights_open(dir, VSR_WEIGHTS_MAP, &w, &err), err);
    snprintf(path, sizeof path, "%s/ct_expected.safetensors", dir);
    vsr_st_file *ex = NULL;
    CHECK_OK(vsr_st_open(path, "ct_expected.safetensors", &ex, &err), err);
    if (!w || !ex) goto done;
    CHECK(vsr_weights_find(w, "lm_head.weight") != NULL); /* the ignored module stays BF16 */

    for (size_t m = 0; m < sizeof sample_modules / sizeof sample_modules[0]; m++) {
        const char *mod = sample_modules[m];
        char name[256];
        snprintf(name, sizeof name, "decompressed.%s.weight", mod);
        const vsr_tensor *dec = vsr_st_find(ex, name);
        snprintf(name, sizeof name, "original.%s.weight", mod);
        const vsr_tensor *orig = vsr_st_find(ex, name);
        CHECK(dec && orig && dec->dtype == VSR_DT_BF16 && dec->ndim == 2);
        if (!dec || !orig) continue;
        int64_t N = dec->shape[0], K = dec->shape[1];
        uint16_t *want = tensor_copy(dec), *src = tensor_copy(orig);
        uint16_t *got = calloc((size_t)(N * K), 2);
        const vsr_tensor *sc = find2(w, mod, "weight_scale");
        CHECK(sc != NULL);
        if (!sc) goto next;
        void *scale = tensor_copy(sc);

        if (s->scheme == VSR_SCHEME_FP8) {
            const vsr_tensor *wt = find2(w, mod, "weight");
            CHECK(wt && wt->dtype == VSR_DT_F8_E4M3 && sc->dtype == VSR_DT_BF16 && sc->numel == N);
            vsr_dequant_fp8_ref(wt->data, scale, N, K, got);
            uint8_t *q8 = malloc((size_t)(N * K));
            uint16_t *s8 = malloc((size_t)N * 2);
            vsr_quantize_fp8_rtn(src, N, K, q8, s8);
            CHECK_MSG(bytes_equal(q8, wt, (size_t)(N * K)), "%s %s: FP8 bytes differ from the library's", s->dir, mod);
            CHECK_MSG(bytes_equal(s8, sc, (size_t)N * 2), "%s %s: FP8 scales differ", s->dir, mod);
            free(q8), free(s8);
        } else if (s->scheme == VSR_SCHEME_INT4) {
            const vsr_tensor *pk = find2(w, mod, "weight_packed"), *zt = find2(w, mod, "weight_zero_point");
            const vsr_tensor *gt = find2(w, mod, "weight_g_idx"), *shp = find2(w, mod, "weight_shape");
            CHECK(pk && pk->dtype == VSR_DT_I32 && pk->shape[1] == K / 8 && sc->dtype == VSR_DT_BF16);
            CHECK(shp && shp->numel == 2);
            CHECK((zt != NULL) == !s->sym && (gt != NULL) == s->gidx);
            if (!pk) goto next_scale;
            int64_t G = K / s->group;
            uint32_t *packed = tensor_copy(pk), *zp = zt ? tensor_copy(zt) : NULL;
            int32_t *g_idx = gt ? tensor_copy(gt) : NULL;
            vsr_dequant_int4_ref(packed, scale, zp, g_idx, N, K, s->group, got);
            uint32_t *p2 = malloc((size_t)pk->nbytes), *z2 = calloc((size_t)(((N + 7) / 8) * G), 4);
            uint16_t *s2 = malloc((size_t)(N * G) * 2);
            vsr_quantize_int4_rtn(src, N, K, s->group, s->sym, g_idx, p2, s2, s->sym ? NULL : z2);
            CHECK_MSG(bytes_equal(p2, pk, pk->nbytes), "%s %s: packed weights differ from the library's", s->dir, mod);
            /* compressed-tensors <= 0.12 clamps a zero scale to FP32 eps (2^-23) where 0.20
             * substitutes BF16 eps (2^-7); only all-zero groups have one, and both
             * dequantize them to exact zeros. Every other scale must match. */
            int scale_diff = 0;
            for (int64_t i = 0; i < N * G; i++) {
                uint16_t lib;
                memcpy(&lib, (const uint8_t *)sc->data + 2 * i, 2);
                bool legacy_eps = lib == 0x3400 && s2[i] == 0x3c00 && !strncmp(q.version, "0.12", 4);
                if (lib != s2[i] && !legacy_eps) scale_diff++;
            }
            CHECK_MSG(sc->nbytes == (size_t)(N * G) * 2 && scale_diff == 0, "%s %s: %d scales differ", s->dir, mod,
                      scale_diff);
            if (zt) CHECK_MSG(bytes_equal(z2, zt, zt->nbytes), "%s %s: zero points differ", s->dir, mod);
            free(packed), free(zp), free(g_idx), free(p2), free(z2), free(s2);
        } else {
            const vsr_tensor *pk = find2(w, mod, "weight_packed"), *gst = find2(w, mod, "weight_global_scale");
            CHECK(pk && pk->dtype == VSR_DT_U8 && sc->dtype == VSR_DT_F8_E4M3 && gst && gst->dtype == VSR_DT_F32);
            CHECK(find2(w, mod, "input_global_scale") != NULL);
            if (!pk || !gst) goto next_scale;
            float gs;
            memcpy(&gs, gst->data, 4);
            vsr_dequant_nvfp4_ref(pk->data, scale, gs, N, K, got);
            uint8_t *p2 = malloc((size_t)(N * K / 2)), *s2 = malloc((size_t)(N * K / 16));
            float gs2 = 0;
            vsr_quantize_nvfp4_rtn(src, N, K, p2, s2, &gs2);
            CHECK_MSG(same_f32(gs, gs2), "%s %s: global scale %a, ours %a", s->dir, mod, gs, gs2);
            CHECK_MSG(bytes_equal(p2, pk, (size_t)(N * K / 2)), "%s %s: packed FP4 differs from the library's", s->dir, mod);
            CHECK_MSG(bytes_equal(s2, sc, (size_t)(N * K / 16)), "%s %s: block scales differ", s->dir, mod);
            free(p2), free(s2);
        }
        int diff = 0;
        for (int64_t i = 0; i < N * K; i++)
            if (got[i] != want[i] && diff++ < 3)
                fprintf(stderr, "%s %s [%lld]: ours %04x library %04x\n", s->dir, mod, (long long)i, got[i], want[i]);
        CHECK_MSG(diff == 0, "%s %s: %d of %lld dequantized values differ from compressed-tensors", s->dir, mod, diff,
                  (long long)(N * K));
    next_scale:
        free(scale);
    next:
        free(want), free(src), free(got);
    }
done:
    vsr_st_close(ex);
    vsr_weights_close(w);
    vsr_quant_config_free(&q);
}

TEST(compressed_tensors_samples_fp8) { check_sample(&samples[0]); }
TEST(compressed_tensors_samples_w4a16_asym) { check_sample(&samples[1]); }
TEST(compressed_tensors_samples_w4a16_gidx) { check_sample(&samples[2]); }
TEST(compressed_tensors_samples_nvfp4) { check_sample(&samples[3]); }

int main(void) {
    RUN(e4m3_decode_matches_torch_all_256);
    RUN(e4m3_encode_matches_torch_for_every_bf16);
    RUN(e2m1_decode_and_encode_match_compressed_tensors);
    RUN(accepts_the_three_schemes_as_written);
    RUN(accepts_old_and_new_spellings);
    RUN(refusals_name_the_key_and_value);
    RUN(ignore_and_targets_match_like_vllm);
    RUN(ignore_list_limit);
    RUN(scheme_table);
    RUN(int4_layout_nibbles_offsets_zero_points_g_idx);
    RUN(nvfp4_and_fp8_layout_by_hand);
    RUN(quantize_dequantize_round_trips_stay_within_half_a_step);
    RUN(compressed_tensors_samples_fp8);
    RUN(compressed_tensors_samples_w4a16_asym);
    RUN(compressed_tensors_samples_w4a16_gidx);
    RUN(compressed_tensors_samples_nvfp4);
    return test_summary();
}
