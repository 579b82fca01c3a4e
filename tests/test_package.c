/* The package layer: config.json, decision_config.json and manifest rules, verification
 * (hashes, bytes, identity, parameters, pins), path tricks, family rules and the tensor
 * cross-check for every scheme, on small packages written by tests/pkgbuild.c. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "package/package_internal.h"
#include "pkgbuild.h"
#include "test.h"
#include "vsr/catalog.h"
#include "vsr/fixture.h"
#include "vsr/hash.h"

static int seq;
static const char *fresh(const tpkg_opts *o) {
    static char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/pkg%03d", test_tmpdir(), ++seq);
    if (tpkg_write(dir, o)) {
        fprintf(stderr, "could not write %s\n", dir);
        exit(2);
    }
    return dir;
}

/* open + verify; returns the status of the first failing stage. */
static vsr_status open_verify(const char *dir, vsr_err *e) {
    vsr_package *p = NULL;
    vsr_status st = vsr_package_open(dir, NULL, NULL, &p, e);
    if (!st) st = vsr_package_verify(p, 2, NULL, e);
    vsr_package_close(p);
    return st;
}

/* ---- config.json ---- */
static json_t *base_config(void) {
    char dir[PATH_MAX], p[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s", fresh(NULL));
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_error_t je;
    return json_load_file(p, 0, &je);
}

static vsr_status parse_cfg(json_t *j, vsr_model_config *c, vsr_err *e) {
    return vsr_model_config_parse(j, "config.json", c, e);
}

TEST(config_ok_both_spellings) {
    json_t *j = base_config();
    vsr_model_config c;
    vsr_err e = {0};
    CHECK_OK(parse_cfg(j, &c, &e), e);
    CHECK(c.text.hidden_size == 32 && c.text.num_hidden_layers == 2);
    CHECK(c.text.layer_types[0] == VSR_LAYER_LINEAR_ATTENTION && c.text.layer_types[1] == VSR_LAYER_FULL_ATTENTION);
    CHECK(c.text.rope_theta == 1e7 && c.text.partial_rotary_factor == 0.25 && c.text.mrope_interleaved);
    CHECK(c.text.mrope_section[0] == 1 && c.text.mrope_section[2] == 0);
    CHECK(!strcmp(c.text.dtype, "bfloat16") && !strcmp(c.architectures, "Qwen3_5ForConditionalGeneration"));
    CHECK(vsr_text_count_layers(&c.text, VSR_LAYER_FULL_ATTENTION) == 1);
    /* transformers 4.x: rope_theta at top level, torch_dtype, full_attention_interval */
    json_t *tc = json_object_get(j, "text_config");
    json_object_del(tc, "rope_parameters");
    json_object_del(tc, "layer_types");
    json_object_del(tc, "dtype");
    json_object_set_new(tc, "rope_theta", json_real(5e6));
    json_object_set_new(tc, "partial_rotary_factor", json_real(0.5));
    json_object_set_new(tc, "torch_dtype", json_string("float32"));
    json_object_set_new(tc, "num_hidden_layers", json_integer(8));
    json_object_set_new(tc, "full_attention_interval", json_integer(4));
    CHECK_OK(parse_cfg(j, &c, &e), e);
    CHECK(c.text.rope_theta == 5e6 && c.text.partial_rotary_factor == 0.5 && !strcmp(c.text.dtype, "float32"));
    CHECK(c.text.layer_types[3] == VSR_LAYER_FULL_ATTENTION && c.text.layer_types[7] == VSR_LAYER_FULL_ATTENTION);
    CHECK(c.text.layer_types[4] == VSR_LAYER_LINEAR_ATTENTION);
    CHECK(vsr_text_count_layers(&c.text, VSR_LAYER_FULL_ATTENTION) == 2);
    /* no layer_types, no interval: transformers' default interval 4 */
    json_object_del(tc, "full_attention_interval");
    CHECK_OK(parse_cfg(j, &c, &e), e);
    CHECK(vsr_text_count_layers(&c.text, VSR_LAYER_FULL_ATTENTION) == 2);
    /* a plain qwen3_5_text config at top level */
    CHECK_OK(parse_cfg(tc, &c, &e), e);
    CHECK(!strcmp(c.model_type, "qwen3_5_text") && !c.has_vision);
    json_decref(j);
}

typedef struct cfg_case {
    const char *path; /* "text_config.key" or "key" */
    const char *json; /* new value, NULL = delete */
    vsr_status code;
    const char *needle;
} cfg_case;

static const cfg_case cfg_cases[] = {
    {"model_type", "\"llama\"", VSR_E_UNSUPPORTED, "model_type \"llama\" is not supported"},
    {"model_type", NULL, VSR_E_FORMAT, "required key \"model_type\" is missing"},
    {"text_config", NULL, VSR_E_FORMAT, "required key \"text_config\" is missing"},
    {"text_config", "[]", VSR_E_FORMAT, "\"text_config\" must be an object"},
    {"vision_config", "{\"model_type\":\"siglip\"}", VSR_E_UNSUPPORTED, "qwen3_5_vision"},
    {"architectures", "\"x\"", VSR_E_FORMAT, "\"architectures\" must be an array"},
    {"text_config.model_type", "\"qwen3\"", VSR_E_UNSUPPORTED, "model_type must be \"qwen3_5_text\""},
    {"text_config.hidden_size", NULL, VSR_E_FORMAT, "required key \"hidden_size\" is missing"},
    {"text_config.vocab_size", NULL, VSR_E_FORMAT, "required key \"vocab_size\" is missing"},
    {"text_config.linear_num_value_heads", NULL, VSR_E_FORMAT, "\"linear_num_value_heads\" is missing"},
    {"text_config.hidden_size", "\"32\"", VSR_E_FORMAT, "\"hidden_size\" must be an integer"},
    {"text_config.hidden_size", "32.0", VSR_E_FORMAT, "\"hidden_size\" must be an integer"},
    {"text_config.hidden_size", "0", VSR_E_FORMAT, "\"hidden_size\" must be positive"},
    {"text_config.num_hidden_layers", "-2", VSR_E_FORMAT, "\"num_hidden_layers\" must be positive"},
    {"text_config.num_hidden_layers", "100000", VSR_E_FORMAT, "above the limit"},
    {"text_config.rms_norm_eps", NULL, VSR_E_FORMAT, "\"rms_norm_eps\" is missing"},
    {"text_config.rms_norm_eps", "\"tiny\"", VSR_E_FORMAT, "\"rms_norm_eps\" must be a number"},
    {"text_config.rope_parameters", NULL, VSR_E_FORMAT, "\"rope_theta\" is missing"},
    {"text_config.rope_parameters", "3", VSR_E_FORMAT, "\"rope_parameters\" must be an object"},
    {"text_config.rope_parameters", "{\"rope_theta\":-1}", VSR_E_FORMAT, "\"rope_theta\" must be a positive"},
    {"text_config.rope_parameters", "{\"rope_theta\":1e6,\"partial_rotary_factor\":0.3}", VSR_E_FORMAT,
     "must be an even whole number of rotary dimensions"},
    {"text_config.rope_parameters", "{\"rope_theta\":1e6,\"mrope_section\":[1,2]}", VSR_E_FORMAT,
     "\"mrope_section\" must be an array of 3"},
    {"text_config.rope_parameters", "{\"rope_theta\":1e6,\"mrope_interleaved\":1}", VSR_E_FORMAT,
     "\"mrope_interleaved\" must be true or false"},
    {"text_config.layer_types", "[\"linear_attention\"]", VSR_E_FORMAT, "\"layer_types\" has 1 entries but num_hidden_layers is 2"},
    {"text_config.layer_types", "[\"linear_attention\",\"sliding_attention\"]", VSR_E_FORMAT,
     "layer_types[1] must be \"linear_attention\" or \"full_attention\" (found \"sliding_attention\")"},
    {"text_config.layer_types", "\"full_attention\"", VSR_E_FORMAT, "\"layer_types\" must be an array"},
    {"text_config.num_key_value_heads", "3", VSR_E_FORMAT, "must be a multiple of num_key_value_heads (3)"},
    {"text_config.linear_num_key_heads", "3", VSR_E_FORMAT, "must be a multiple of linear_num_key_heads (3)"},
    {"text_config.hidden_act", "\"gelu\"", VSR_E_UNSUPPORTED, "hidden_act must be \"silu\""},
    {"text_config.dtype", "\"int8\"", VSR_E_FORMAT, "dtype \"int8\" is not one of"},
    {"text_config.dtype", "5", VSR_E_FORMAT, "\"dtype\" must be a string"},
    {"text_config.tie_word_embeddings", "\"yes\"", VSR_E_FORMAT, "\"tie_word_embeddings\" must be true or false"},
    {"text_config.attention_bias", "true", VSR_E_UNSUPPORTED, "attention_bias"},
};

TEST(config_refusals) {
    for (size_t i = 0; i < sizeof cfg_cases / sizeof cfg_cases[0]; i++) {
        const cfg_case *k = &cfg_cases[i];
        json_t *j = base_config(), *obj = j;
        const char *key = k->path, *dot = strchr(k->path, '.');
        if (dot) {
            obj = json_object_get(j, "text_config");
            key = dot + 1;
        }
        if (k->json) {
            json_error_t je;
            json_object_set_new(obj, key, json_loads(k->json, JSON_DECODE_ANY, &je));
        } else {
            json_object_del(obj, key);
        }
        vsr_model_config c;
        vsr_err e = {0};
        vsr_status st = parse_cfg(j, &c, &e);
        CHECK_ERR(st, e, k->code, k->needle);
        if (st != k->code || !strstr(e.msg, k->needle)) fprintf(stderr, "  case %zu: %s\n", i, k->path);
        json_decref(j);
    }
}

/* ---- decision_config.json ---- */
static json_t *base_decision(void) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/decision_config.json", fresh(NULL));
    json_error_t je;
    return json_load_file(p, 0, &je);
}

typedef struct dec_case {
    const char *key, *json, *needle;
    vsr_status code;
} dec_case;

static const dec_case dec_cases[] = {
    {"format_version", "2", "unsupported decision_config.json format (\"format_version\" must be 1, found 2)",
     VSR_E_UNSUPPORTED},
    {"format_version", NULL, "unsupported decision_config.json format (required key \"format_version\" is missing",
     VSR_E_UNSUPPORTED},
    {"format_version", "true", "unsupported decision_config.json format (\"format_version\" must be 1, found True)",
     VSR_E_UNSUPPORTED},
    {"format_id", "\"d3-code-readout-v2\"",
     "unsupported decision_config.json format (\"format_id\" must be \"d3-code-readout-v1\", found 'd3-code-readout-v2')",
     VSR_E_UNSUPPORTED},
    {"format_id", NULL, "unsupported decision_config.json format (required key \"format_id\" is missing",
     VSR_E_UNSUPPORTED},
    {"prompt", "\"d2\"", "unknown prompt family 'd2'", VSR_E_UNSUPPORTED},
    {"prompt", "3", "unknown prompt family 3", VSR_E_UNSUPPORTED},
    {"prompt", "null", "unknown prompt family None", VSR_E_UNSUPPORTED},
    {"prompt", NULL, "required key \"prompt\" is missing", VSR_E_FORMAT},
    {"attention_mode", "\"bidirectional\"", "unknown attention mode 'bidirectional'", VSR_E_UNSUPPORTED},
    {"attention_mode", "null", "unknown attention mode None", VSR_E_UNSUPPORTED},
    {"pooling", "\"mean\"", "unsupported pooling 'mean'", VSR_E_UNSUPPORTED},
    {"pooling", "[\"last\"]", "unsupported pooling ['last']", VSR_E_UNSUPPORTED},
    {"readout_dtype", "\"float16\"", "readout_dtype must be float32 or bfloat16 (found 'float16')", VSR_E_UNSUPPORTED},
    {"temperature", "0", "temperature must be positive and finite (found 0)", VSR_E_FORMAT},
    {"temperature", "-0.5", "temperature must be positive and finite (found -0.5)", VSR_E_FORMAT},
    {"temperature", "\"hot\"", "temperature must be positive and finite (found 'hot')", VSR_E_FORMAT},
    {"temperature", "null", "temperature must be positive and finite (found None)", VSR_E_FORMAT},
    {"temperature", "false", "temperature must be positive and finite (found False)", VSR_E_FORMAT},
    {"max_length", "15", "max_length must be null or an integer >= 16 (found 15)", VSR_E_FORMAT},
    {"max_length", "16.5", "max_length must be null or an integer >= 16 (found 16.5)", VSR_E_FORMAT},
    {"max_length", "\"4096\"", "max_length must be null or an integer >= 16 (found '4096')", VSR_E_FORMAT},
    {"codes", NULL, "decision_config.json needs 255 distinct answer codes and token IDs (required key \"codes\" is missing)",
     VSR_E_FORMAT},
    {"token_ids", NULL, "needs 255 distinct answer codes and token IDs (required key \"token_ids\" is missing)",
     VSR_E_FORMAT},
    {"codes", "[\"A\",\"B\"]", "needs 255 distinct answer codes and token IDs (\"codes\" must be an array of 255 strings",
     VSR_E_FORMAT},
    {"token_ids", "{}", "needs 255 distinct answer codes and token IDs (\"token_ids\" must be an array of 255 integers",
     VSR_E_FORMAT},
    {"base_model", "7", "\"base_model\" must be a string", VSR_E_FORMAT},
};

TEST(decision_config_rules) {
    json_t *j = base_decision();
    vsr_decision_config d;
    vsr_err e = {0};
    CHECK_OK(vsr_decision_config_parse(j, NULL, &d, &e), e);
    CHECK(d.temperature == 0.75 && d.max_length == 4096 && !strcmp(d.codes[254], "C254") && d.token_ids[0] == 20);
    CHECK(!strcmp(d.attention_mode, "noncausal_full_attention") && !strcmp(d.readout_dtype, "float32"));
    vsr_decision_config_free(&d);
    vsr_decision_config_free(&d); /* twice is harmless */
    /* defaults: temperature 1.0, max_length null, attention causal */
    json_object_del(j, "temperature");
    json_object_set_new(j, "max_length", json_null());
    json_object_del(j, "attention_mode");
    CHECK_OK(vsr_decision_config_parse(j, NULL, &d, &e), e);
    CHECK(d.temperature == 1.0 && d.max_length == -1 && !strcmp(d.attention_mode, "causal"));
    vsr_decision_config_free(&d);
    json_decref(j);

    for (size_t i = 0; i < sizeof dec_cases / sizeof dec_cases[0]; i++) {
        j = base_decision();
        if (dec_cases[i].json) {
            json_error_t je;
            json_object_set_new(j, dec_cases[i].key, json_loads(dec_cases[i].json, JSON_DECODE_ANY, &je));
        } else {
            json_object_del(j, dec_cases[i].key);
        }
        vsr_status st = vsr_decision_config_parse(j, NULL, &d, &e);
        CHECK_ERR(st, e, dec_cases[i].code, dec_cases[i].needle);
        if (st == VSR_OK) vsr_decision_config_free(&d);
        json_decref(j);
    }
    /* duplicates and element types */
    j = base_decision();
    json_array_set_new(json_object_get(j, "codes"), 9, json_string("C003"));
    CHECK_ERR(vsr_decision_config_parse(j, NULL, &d, &e), e, VSR_E_FORMAT,
              "decision_config.json needs 255 distinct answer codes and token IDs (\"codes\" must be 255 distinct "
              "entries; \"C003\" repeats)");
    json_decref(j);
    j = base_decision();
    json_array_set_new(json_object_get(j, "token_ids"), 9, json_integer(20));
    CHECK_ERR(vsr_decision_config_parse(j, NULL, &d, &e), e, VSR_E_FORMAT,
              "decision_config.json needs 255 distinct answer codes and token IDs (\"token_ids\" must be 255 distinct "
              "entries; 20 repeats)");
    json_decref(j);
    j = base_decision();
    json_array_set_new(json_object_get(j, "codes"), 4, json_string(""));
    CHECK_ERR(vsr_decision_config_parse(j, NULL, &d, &e), e, VSR_E_FORMAT,
              "needs 255 distinct answer codes and token IDs (codes[4] must be a non-empty string, found '')");
    json_decref(j);
    j = base_decision();
    json_array_set_new(json_object_get(j, "token_ids"), 7, json_integer(-1));
    CHECK_ERR(vsr_decision_config_parse(j, NULL, &d, &e), e, VSR_E_FORMAT,
              "needs 255 distinct answer codes and token IDs (token_ids[7] must be a non-negative 32-bit integer, found -1)");
    json_decref(j);
    /* not an object */
    j = json_pack("[i]", 1);
    CHECK_ERR(vsr_decision_config_parse(j, NULL, &d, &e), e, VSR_E_FORMAT, "decision_config.json must be an object");
    json_decref(j);
}

/* ---- manifest schema ---- */
static const char *good_manifest(void) {
    static char buf[1 << 16];
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/MODEL_MANIFEST.json", fresh(NULL));
    char *s = test_read_file(p, NULL);
    snprintf(buf, sizeof buf, "%s", s);
    free(s);
    return buf;
}

typedef struct man_case {
    const char *path, *json, *needle;
    vsr_status code;
} man_case;

#define HEX64 "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\""
static const man_case man_cases[] = {
    {"schema", "\"d2-package-manifest/1\"", "\"schema\" must be \"d3-package-manifest/1\"", VSR_E_UNSUPPORTED},
    {"schema", NULL, "required key \"schema\" is missing", VSR_E_FORMAT},
    {"files_sha256", "{}", "\"files_sha256\" must be a non-empty object", VSR_E_FORMAT},
    {"files_sha256", NULL, "required key \"files_sha256\" is missing", VSR_E_FORMAT},
    {"files_sha256", "{\"config.json\":\"ABC\"}", "files_sha256[\"config.json\"] must be 64 lowercase hex", VSR_E_FORMAT},
    {"files_sha256", "{\"MODEL_MANIFEST.json\":" HEX64 "}", "must not list the manifest itself", VSR_E_FORMAT},
    {"files_sha256", "{\"/etc/passwd\":" HEX64 "}", "names \"/etc/passwd\", which is not a relative path", VSR_E_INVALID},
    {"files_sha256", "{\"../x.json\":" HEX64 "}", "names \"../x.json\", which is not a relative path", VSR_E_INVALID},
    {"files_sha256", "{\"a/../../x\":" HEX64 "}", "which is not a relative path", VSR_E_INVALID},
    {"files_sha256", "{\"tokenizer.json\":" HEX64 "}", "\"tokenizer.json\" has sha256", VSR_E_FORMAT},
    {"files_bytes", "[]", "manifest files_bytes must be an object", VSR_E_FORMAT},
    {"files_bytes", "{\"config.json\":-1}", "files_bytes[\"config.json\"] must be a non-negative integer", VSR_E_FORMAT},
    {"files_bytes", "{\"nothere.json\":5}", "files_bytes names \"nothere.json\", which files_sha256 does not list",
     VSR_E_FORMAT},
    {"identity", NULL, "required key \"identity\" is missing", VSR_E_FORMAT},
    {"identity", "{\"files_sha256\":{}}", "\"identity.model_sha256\" is missing", VSR_E_FORMAT},
    {"identity", "{\"model_sha256\":\"xyz\"}", "\"identity.model_sha256\" must be 64 lowercase hex", VSR_E_FORMAT},
    {"identity", "{\"model_sha256\":" HEX64 ",\"files_sha256\":[]}", "\"identity.files_sha256\" must be an object",
     VSR_E_FORMAT},
    {"parameters", "{\"text\":-5}", "\"parameters.text\" must be a non-negative integer", VSR_E_FORMAT},
    {"parameters", "7", "\"parameters\" must be an object", VSR_E_FORMAT},
    {"model_name", "[]", "\"model_name\" must be a string", VSR_E_FORMAT},
};

TEST(manifest_schema) {
    const char *good = good_manifest();
    vsr_manifest m;
    vsr_err e = {0};
    CHECK_OK(vsr_manifest_parse(good, strlen(good), NULL, &m, &e), e);
    CHECK(m.n_files == 7 && vsr_manifest_find(&m, "config.json") && vsr_manifest_find(&m, "model.safetensors"));
    CHECK(vsr_manifest_find(&m, "config.json")->bytes > 0);
    for (int i = 1; i < m.n_files; i++) CHECK(strcmp(m.files[i - 1].name, m.files[i].name) < 0);
    char want[65];
    vsr_sha256_hex(good, strlen(good), want);
    CHECK(!strcmp(m.manifest_sha256, want));
    CHECK(m.params_readout == 255 * 32);
    vsr_manifest_free(&m);
    vsr_manifest_free(&m);

    CHECK_ERR(vsr_manifest_parse("{\"schema\":", 10, NULL, &m, &e), e, VSR_E_FORMAT,
              "MODEL_MANIFEST.json: unknown or malformed Decision 3.0 package manifest: not valid JSON");
    CHECK_ERR(vsr_manifest_parse("[1]", 3, NULL, &m, &e), e, VSR_E_FORMAT,
              "MODEL_MANIFEST.json: unknown or malformed Decision 3.0 package manifest: must be a JSON object");
    for (size_t i = 0; i < sizeof man_cases / sizeof man_cases[0]; i++) {
        json_error_t je;
        json_t *j = json_loads(good, 0, &je), *obj = j;
        const man_case *k = &man_cases[i];
        if (k->json) json_object_set_new(obj, k->path, json_loads(k->json, JSON_DECODE_ANY, &je));
        else json_object_del(obj, k->path);
        char *s = json_dumps(j, 0);
        vsr_status st = vsr_manifest_parse(s, strlen(s), NULL, &m, &e);
        CHECK_ERR(st, e, k->code, k->needle);
        /* each refusal names what it breaks in the reference's words */
        const char *cat = !strcmp(k->path, "identity") && !strstr(k->needle, "identity.files_sha256")
                              ? "model identity differs from the scored checkpoint in MODEL_MANIFEST.json"
                          : !strcmp(k->path, "parameters") ? "tensor counts differ from the manifest's parameter counts"
                                                           : "unknown or malformed Decision 3.0 package manifest";
        CHECK_MSG(st == VSR_OK || strstr(e.msg, cat), "%s: \"%s\" lacks \"%s\"", k->path, e.msg, cat);
        if (st == VSR_OK) vsr_manifest_free(&m);
        free(s);
        json_decref(j);
    }
    /* duplicate keys are refused */
    const char *dup = "{\"schema\":\"d3-package-manifest/1\",\"schema\":\"d3-package-manifest/1\"}";
    CHECK_ERR(vsr_manifest_parse(dup, strlen(dup), NULL, &m, &e), e, VSR_E_FORMAT, "not valid JSON");
}

/* ---- open + verify of good packages, every scheme ---- */
static const char *const schemes[] = {"bf16", "fp8", "int4", "int4-asym", "int4-actorder", "nvfp4", "nvfp4a16"};
static const vsr_scheme scheme_ids[] = {VSR_SCHEME_BF16, VSR_SCHEME_FP8, VSR_SCHEME_INT4, VSR_SCHEME_INT4,
                                        VSR_SCHEME_INT4, VSR_SCHEME_NVFP4, VSR_SCHEME_NVFP4};

TEST(open_verify_every_scheme) {
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        for (int sharded = 0; sharded < 2; sharded++) {
            tpkg_opts o = {.scheme = schemes[i], .sharded = sharded};
            const char *dir = fresh(&o);
            vsr_package *p = NULL;
            vsr_err e = {0};
            vsr_status st = vsr_package_open(dir, NULL, NULL, &p, &e);
            CHECK_OK(st, e);
            if (st) continue;
            CHECK(p->family == VSR_FAMILY_DECISION3 && p->quant.scheme == scheme_ids[i]);
            CHECK(!strcmp(p->text_prefix, "model.language_model.") && p->has_manifest && !p->verified);
            CHECK(p->params_text == tpkg_params_text && p->params_readout == 255 * 32 && p->params_vision == 0);
            CHECK(vsr_package_params_loaded(p) == tpkg_params_text + 255 * 32);
            CHECK(p->weight_file_bytes > 0 && p->device_weight_bytes > 255 * 32 * 4);
            CHECK(p->repo[0] == 0 && p->revision[0] == 0 && p->builtin == NULL);
            st = vsr_package_verify(p, 2, NULL, &e);
            CHECK_OK(st, e);
            if (st) fprintf(stderr, "  scheme %s sharded %d\n", schemes[i], sharded);
            CHECK(p->verified && !strcmp(p->model_sha256, p->manifest.model_sha256));
            vsr_gate_request r;
            vsr_package_gate_request(p, &r);
            CHECK(r.quantized_family_ok && r.needs_bf16 && r.scheme == scheme_ids[i]);
            CHECK(r.weight_bytes == p->device_weight_bytes && r.reserve_bytes == vsr_gate_reserve_bytes(r.weight_bytes));
            CHECK_OK(vsr_package_map(p, &e), e);
            const vsr_tensor *t = vsr_weights_find(p->weights, "model.language_model.norm.weight");
            CHECK(t && t->data != NULL);
            CHECK(p->readout && vsr_st_find(p->readout, "weight")->data != NULL);
            vsr_package_close(p);
        }
    }
    vsr_package_close(NULL);
}

TEST(quantized_layout_details) {
    /* A module the ignore list keeps in BF16 must be `.weight` BF16, the rest the scheme's tensors. */
    tpkg_opts o = {.scheme = "fp8", .ignore = "re:.*linear_attn.in_proj_[ab]$"};
    vsr_err e = {0};
    CHECK_OK(open_verify(fresh(&o), &e), e);
    /* The other prefix spelling works; vision tensors are counted and not checked. */
    tpkg_opts o2 = {.prefix = "language_model.", .vision = true, .readout_dtype = "bfloat16"};
    const char *dir = fresh(&o2);
    vsr_package *p = NULL;
    CHECK_OK(vsr_package_open(dir, NULL, NULL, &p, &e), e);
    if (p) {
        CHECK(!strcmp(p->text_prefix, "language_model.") && p->params_vision == 64 && p->config.has_vision);
        CHECK_OK(vsr_package_verify(p, 1, NULL, &e), e);
        vsr_package_close(p);
    }
}

/* ---- tensor cross-check refusals ---- */
typedef struct tcase {
    tpkg_opts o;
    const char *needle;
} tcase;

#define LP "model.language_model.layers."
static const tcase tensor_cases[] = {
    {{.skip_tensor = LP "1.self_attn.q_proj.weight"},
     "tensor \"" LP "1.self_attn.q_proj.weight\" is missing (expected BF16 [64, 32]"},
    {{.skip_tensor = LP "0.linear_attn.A_log"}, "tensor \"" LP "0.linear_attn.A_log\" is missing"},
    {{.skip_tensor = "model.language_model.embed_tokens.weight"}, "embed_tokens.weight\" is missing"},
    {{.extra_tensor = LP "0.mlp.gate_proj.bias"}, "unexpected tensor \"" LP "0.mlp.gate_proj.bias\""},
    {{.extra_tensor = LP "0.self_attn.q_proj.weight"}, "unexpected tensor \"" LP "0.self_attn.q_proj.weight\""},
    {{.extra_tensor = "mtp.fc.weight"}, "model.safetensors: checkpoint tensor 'mtp.fc.weight' belongs to no known module"},
    {{.extra_tensor = "language_model.norm.weight"},
     "checkpoint tensors use mixed name prefixes (text tensors under both \"model.language_model.\" (27) and "
     "\"language_model.\" (1)"},
    {{.f32_tensor = LP "0.mlp.up_proj.weight"}, "tensor \"" LP "0.mlp.up_proj.weight\" has dtype F32, expected BF16"},
    {{.bad_shape_tensor = LP "0.linear_attn.conv1d.weight"},
     "\"" LP "0.linear_attn.conv1d.weight\" has shape [97, 1, 4], expected [96, 1, 4]"},
    {{.bad_shape_tensor = LP "1.self_attn.k_norm.weight"}, "has shape [17], expected [16]"},
    {{.scheme = "fp8", .f32_tensor = LP "0.mlp.up_proj.weight_scale"},
     "up_proj.weight_scale\" has dtype F32, expected BF16 for an FP8 linear"},
    {{.scheme = "fp8", .skip_tensor = LP "0.mlp.down_proj.weight_scale"},
     "down_proj.weight_scale\" is missing (expected BF16 [32, 1]"},
    {{.scheme = "fp8", .f32_tensor = LP "0.mlp.down_proj.weight"}, "has dtype F32, expected F8_E4M3"},
    {{.scheme = "int4", .bad_shape_tensor = LP "0.mlp.down_proj.weight_packed"},
     "down_proj.weight_packed\" has shape [33, 8], expected [32, 8]"},
    {{.scheme = "int4", .skip_tensor = LP "1.self_attn.o_proj.weight_shape"}, "o_proj.weight_shape\" is missing"},
    {{.scheme = "int4", .bad_shape_tensor = LP "0.mlp.up_proj.weight_scale"}, "has shape [65, 2], expected [64, 2]"},
    {{.scheme = "int4-asym", .skip_tensor = LP "0.mlp.up_proj.weight_zero_point"},
     "up_proj.weight_zero_point\" is missing (expected I32 [8, 2]"},
    {{.scheme = "int4-actorder", .skip_tensor = LP "0.mlp.up_proj.weight_g_idx"},
     "up_proj.weight_g_idx\" is missing (expected I32 [32]"},
    {{.scheme = "int4", .extra_tensor = LP "0.mlp.up_proj.weight_zero_point"}, "unexpected tensor"},
    {{.scheme = "nvfp4", .skip_tensor = LP "0.mlp.up_proj.input_global_scale"},
     "up_proj.input_global_scale\" is missing (expected F32 [1]"},
    {{.scheme = "nvfp4", .bad_shape_tensor = LP "0.mlp.up_proj.weight_scale"}, "has shape [65, 2], expected [64, 2]"},
    {{.scheme = "nvfp4a16", .extra_tensor = LP "0.mlp.up_proj.input_global_scale"}, "unexpected tensor"},
    {{.scheme = "nvfp4", .f32_tensor = LP "0.mlp.up_proj.weight_packed"}, "has dtype F32, expected U8"},
};

TEST(tensor_cross_check_refusals) {
    for (size_t i = 0; i < sizeof tensor_cases / sizeof tensor_cases[0]; i++) {
        vsr_err e = {0};
        vsr_status st = open_verify(fresh(&tensor_cases[i].o), &e);
        CHECK_ERR(st, e, VSR_E_FORMAT, tensor_cases[i].needle);
        if (st != VSR_E_FORMAT || !strstr(e.msg, tensor_cases[i].needle)) fprintf(stderr, "  tensor case %zu\n", i);
    }
}

static void set_tie_false(json_t *j, void *ctx) {
    (void)ctx;
    json_object_set_new(json_object_get(j, "text_config"), "tie_word_embeddings", json_false());
}

TEST(readout_and_lm_head) {
    vsr_err e = {0};
    /* readout in the wrong dtype for readout_dtype */
    const char *dir = fresh(NULL);
    static void (*const nop)(json_t *, void *) = NULL;
    (void)nop;
    char p[PATH_MAX + 32];
    {
        /* bf16 readout_dtype but the file holds F32 */
        tpkg_opts o = {0};
        dir = fresh(&o);
        json_error_t je;
        snprintf(p, sizeof p, "%s/decision_config.json", dir);
        json_t *d = json_load_file(p, 0, &je);
        json_object_set_new(d, "readout_dtype", json_string("bfloat16"));
        json_dump_file(d, p, JSON_SORT_KEYS);
        json_decref(d);
        tpkg_manifest(dir, NULL, NULL);
        CHECK_ERR(open_verify(dir, &e), e, VSR_E_FORMAT,
                  "tensor \"weight\" has dtype F32, expected BF16 for the readout (decision_config readout_dtype bfloat16)");
    }
    {
        /* a readout with a second tensor */
        dir = fresh(NULL);
        vsr_st_writer *w = vsr_st_writer_new();
        float buf[255 * 32] = {0};
        int64_t shape[2] = {255, 32}, one[1] = {1};
        vsr_st_writer_add(w, "weight", VSR_DT_F32, 2, shape, buf, sizeof buf, &e);
        vsr_st_writer_add(w, "bias", VSR_DT_F32, 1, one, buf, 4, &e);
        snprintf(p, sizeof p, "%s/readout.safetensors", dir);
        vsr_st_writer_save(w, p, &e);
        vsr_st_writer_free(w);
        tpkg_manifest(dir, NULL, NULL);
        CHECK_ERR(open_verify(dir, &e), e, VSR_E_FORMAT,
                  "readout.safetensors must hold exactly one tensor named weight (expected \"weight\" [255, 32]; found 2 "
                  "tensors, e.g. \"bias\")");
    }
    {
        /* A Decision 3.0 checkpoint is a Qwen3_5Model: an LM head belongs to no known module,
         * tied or not (the reference's rule; the readout replaces it). */
        tpkg_opts o = {.extra_tensor = "lm_head.weight"};
        dir = fresh(&o);
        CHECK_ERR(open_verify(dir, &e), e, VSR_E_FORMAT, "checkpoint tensor 'lm_head.weight' belongs to no known module");
        tpkg_edit_json(dir, "config.json", set_tie_false, NULL);
        tpkg_manifest(dir, NULL, NULL);
        CHECK_ERR(open_verify(dir, &e), e, VSR_E_FORMAT, "checkpoint tensor 'lm_head.weight' belongs to no known module");
    }
}

/* ---- integrity ---- */
static const char *const tamper_files[] = {"config.json", "decision_config.json", "readout.safetensors", "tokenizer.json",
                                           "tokenizer_config.json", "chat_template.jinja", "model.safetensors",
                                           "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                                           "preprocessor_config.json"};

TEST(tampered_byte_in_each_file_kind) {
    for (size_t i = 0; i < sizeof tamper_files / sizeof tamper_files[0]; i++) {
        bool sharded = strstr(tamper_files[i], "of-0000") || strstr(tamper_files[i], "index");
        tpkg_opts o = {.sharded = sharded, .vision = true};
        const char *dir = fresh(&o);
        /* JSON files: an indent space becomes a tab (still valid JSON, same meaning);
         * other files: the last byte flips. */
        size_t n = strlen(tamper_files[i]);
        if (!strcmp(tamper_files[i] + n - 5, ".json")) CHECK(tpkg_tamper_json(dir, tamper_files[i]) == 0);
        else CHECK(tpkg_flip_byte(dir, tamper_files[i], -1) == 0);
        vsr_err e = {0};
        vsr_package *p = NULL;
        vsr_status st = vsr_package_open(dir, NULL, NULL, &p, &e);
        char needle[128];
        snprintf(needle, sizeof needle, "%s: sha256 mismatch: manifest says ", tamper_files[i]);
        if (st == VSR_OK) {
            st = vsr_package_verify(p, 2, NULL, &e);
            CHECK_ERR(st, e, VSR_E_INTEGRITY, needle);
            CHECK(strstr(e.msg, ", file has ") != NULL && !p->verified);
        } else {
            /* A flipped trailing newline of a JSON file may still parse; any other failure is a test bug. */
            CHECK_MSG(0, "%s: open failed: %s", tamper_files[i], e.msg);
        }
        vsr_package_close(p);
    }
}

static void drop_bytes_and_set(json_t *m, void *ctx) {
    json_object_set_new(json_object_get(m, "files_bytes"), (const char *)ctx, json_integer(3));
}
static void set_model_sha(json_t *m, void *ctx) {
    (void)ctx;
    json_object_set_new(json_object_get(m, "identity"), "model_sha256",
                        json_string("0000000000000000000000000000000000000000000000000000000000000000"));
}
static void set_param_text(json_t *m, void *ctx) {
    (void)ctx;
    json_object_set_new(json_object_get(m, "parameters"), "text", json_integer(12345));
}
static void set_param_loaded(json_t *m, void *ctx) {
    (void)ctx;
    json_object_set_new(json_object_get(m, "parameters"), "loaded", json_integer(1));
}
static void unlist(json_t *m, void *ctx) {
    json_object_del(json_object_get(m, "files_sha256"), (const char *)ctx);
    json_object_del(json_object_get(json_object_get(m, "identity"), "files_sha256"), (const char *)ctx);
    json_object_del(json_object_get(m, "files_bytes"), (const char *)ctx);
}
static void list_extra(json_t *m, void *ctx) {
    json_object_set_new(json_object_get(m, "files_sha256"), (const char *)ctx,
                        json_string("1111111111111111111111111111111111111111111111111111111111111111"));
}

TEST(manifest_against_files) {
    vsr_err e = {0};
    const char *dir = fresh(NULL);
    tpkg_manifest(dir, drop_bytes_and_set, "tokenizer.json");
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY,
              "tokenizer.json: size differs from MODEL_MANIFEST.json (files_bytes says 3 bytes, the file has ");

    dir = fresh(NULL);
    tpkg_manifest(dir, set_model_sha, NULL);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY,
              "model identity differs from the scored checkpoint in MODEL_MANIFEST.json (the manifest records "
              "model_sha256 0000000000000000000000000000000000000000000000000000000000000000, the package computes ");

    dir = fresh(NULL);
    tpkg_manifest(dir, set_param_text, NULL);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY,
              "tensor counts differ from the manifest's parameter counts (parameters.text is 12345 but the weights hold");
    dir = fresh(NULL);
    tpkg_manifest(dir, set_param_loaded, NULL);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY,
              "tensor counts differ from the manifest's parameter counts (parameters.loaded is 1 but the weights hold");

    /* every required file must be listed */
    const char *required[] = {"config.json", "decision_config.json", "readout.safetensors", "tokenizer.json",
                              "tokenizer_config.json", "chat_template.jinja"};
    for (size_t i = 0; i < 6; i++) {
        dir = fresh(NULL);
        tpkg_manifest(dir, unlist, (void *)required[i]);
        char needle[128];
        snprintf(needle, sizeof needle, "MODEL_MANIFEST.json does not list ['%s']", required[i]);
        CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY, needle);
    }
    tpkg_opts ov = {.vision = true};
    dir = fresh(&ov);
    tpkg_manifest(dir, unlist, "preprocessor_config.json");
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY, "MODEL_MANIFEST.json does not list ['preprocessor_config.json']");
    /* ... only when the file is there (the reference lists it when present) */
    char pp[PATH_MAX + 32];
    snprintf(pp, sizeof pp, "%s/preprocessor_config.json", dir);
    unlink(pp);
    CHECK_OK(open_verify(dir, &e), e);
    /* unlisted weights are never read */
    dir = fresh(NULL);
    tpkg_manifest(dir, unlist, "model.safetensors");
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY, "MODEL_MANIFEST.json does not list ['model.safetensors']");
    CHECK(strstr(e.msg, "unlisted files are never read") != NULL);
    tpkg_opts os = {.sharded = true};
    dir = fresh(&os);
    tpkg_manifest(dir, unlist, "model-00002-of-00002.safetensors");
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY, "MODEL_MANIFEST.json does not list ['model-00002-of-00002.safetensors']");
    dir = fresh(&os);
    tpkg_manifest(dir, unlist, "model.safetensors.index.json");
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INTEGRITY, "MODEL_MANIFEST.json does not list ['model.safetensors.index.json']");
    /* a listed file that is missing */
    dir = fresh(NULL);
    tpkg_manifest(dir, list_extra, "notes/README.md");
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_NOT_FOUND, "notes/README.md: listed in files_sha256 but missing from the package");
    dir = fresh(NULL);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    unlink(p);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_NOT_FOUND, "tokenizer_config.json: listed in files_sha256 but missing");
    /* no manifest at all */
    dir = fresh(NULL);
    snprintf(p, sizeof p, "%s/MODEL_MANIFEST.json", dir);
    unlink(p);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_NOT_FOUND, "MODEL_MANIFEST.json: file is missing; a Decision 3.0 package carries its manifest");
}


/* ---- the reference's package checks, one rule broken at a time ----
 * Each case writes a good package, breaks exactly one rule of published-d3.md's "Package
 * checks and their messages", and expects open + verify to refuse with that message verbatim. */
typedef struct ref_case {
    const char *msg;  /* the reference's message (verbatim substring of ours) */
    tpkg_opts o;
    const char *file; /* JSON file to edit, or NULL for `edit` */
    const char *key;  /* key, or "outer.inner" one level down */
    const char *json; /* new value; NULL deletes the key */
    void (*edit)(const char *dir);
} ref_case;

static void set_key(json_t *j, void *ctx) {
    const ref_case *k = ctx;
    const char *dot = strchr(k->key, '.');
    json_t *obj = j;
    char key[128];
    snprintf(key, sizeof key, "%s", k->key);
    if (dot) {
        key[dot - k->key] = 0;
        obj = json_object_get(j, key);
        snprintf(key, sizeof key, "%s", dot + 1);
    }
    json_error_t je;
    if (k->json) json_object_set_new(obj, key, json_loads(k->json, JSON_DECODE_ANY, &je));
    else json_object_del(obj, key);
}

static void write_in(const char *dir, const char *name, const char *text) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    test_write_file(p, text, strlen(text));
}
static void rm_in(const char *dir, const char *name) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}
static void ed_manifest_array(const char *dir) { write_in(dir, "MODEL_MANIFEST.json", "[]\n"); }
static void ed_manifest_truncated(const char *dir) { write_in(dir, "MODEL_MANIFEST.json", "{\"schema\": \"d3-pa"); }
static void unlist_two(json_t *m, void *ctx) {
    (void)ctx;
    unlist(m, "tokenizer.json");
    unlist(m, "config.json");
}
static void ed_unlist_two(const char *dir) { tpkg_manifest(dir, unlist_two, NULL); }
static void ed_change_two(const char *dir) {
    tpkg_tamper_json(dir, "tokenizer.json");
    tpkg_flip_byte(dir, "chat_template.jinja", 0);
}
static void ed_identity(const char *dir) { tpkg_manifest(dir, set_model_sha, NULL); }
static void drop_identity(json_t *m, void *ctx) {
    (void)ctx;
    json_object_del(m, "identity");
}
static void ed_no_identity(const char *dir) { tpkg_manifest(dir, drop_identity, NULL); }
static void ed_bytes(const char *dir) { tpkg_manifest(dir, drop_bytes_and_set, "tokenizer.json"); }
static void to_text_config(json_t *j, void *ctx) {
    (void)ctx;
    json_t *tc = json_incref(json_object_get(j, "text_config"));
    json_object_clear(j);
    json_object_update(j, tc);
    json_decref(tc);
}
static void ed_top_text(const char *dir) {
    tpkg_edit_json(dir, "config.json", to_text_config, NULL);
    tpkg_manifest(dir, NULL, NULL);
}
static void write_readout(const char *dir, int64_t rows, int64_t cols, bool second) {
    vsr_err e = {0};
    vsr_st_writer *w = vsr_st_writer_new();
    float *buf = calloc((size_t)(rows * cols), sizeof *buf);
    int64_t shape[2] = {rows, cols}, one[1] = {1};
    vsr_st_writer_add(w, "weight", VSR_DT_F32, 2, shape, buf, (size_t)(rows * cols) * sizeof *buf, &e);
    if (second) vsr_st_writer_add(w, "bias", VSR_DT_F32, 1, one, buf, 4, &e);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/readout.safetensors", dir);
    vsr_st_writer_save(w, p, &e);
    vsr_st_writer_free(w);
    free(buf);
    tpkg_manifest(dir, NULL, NULL);
}
static void ed_readout_two(const char *dir) { write_readout(dir, 255, 32, true); }
static void ed_readout_vector(const char *dir) {
    vsr_err e = {0};
    vsr_st_writer *w = vsr_st_writer_new();
    static float buf[255 * 32];
    int64_t shape[1] = {255 * 32};
    vsr_st_writer_add(w, "weight", VSR_DT_F32, 1, shape, buf, sizeof buf, &e);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/readout.safetensors", dir);
    vsr_st_writer_save(w, p, &e);
    vsr_st_writer_free(w);
    tpkg_manifest(dir, NULL, NULL);
}
static void ed_readout_shape(const char *dir) { write_readout(dir, 255, 16, false); }
static void ed_no_weights(const char *dir) {
    rm_in(dir, "model.safetensors");
    tpkg_manifest(dir, NULL, NULL);
}
static void ed_no_limit(const char *dir) {
    ref_case a = {.key = "max_length", .json = "null"}, b = {.key = "text_config.max_position_embeddings", .json = "8"};
    tpkg_edit_json(dir, "decision_config.json", set_key, &a);
    tpkg_edit_json(dir, "config.json", set_key, &b);
    tpkg_manifest(dir, NULL, NULL);
}
static void ed_no_limit_absent(const char *dir) {
    ref_case a = {.key = "max_length", .json = "null"}, b = {.key = "text_config.max_position_embeddings"};
    tpkg_edit_json(dir, "decision_config.json", set_key, &a);
    tpkg_edit_json(dir, "config.json", set_key, &b);
    tpkg_manifest(dir, NULL, NULL);
}

#define DC "decision_config.json"
#define MF "MODEL_MANIFEST.json"
static const ref_case ref_cases[] = {
    /* MODEL_MANIFEST.json */
    {"unknown or malformed Decision 3.0 package manifest", {0}, MF, "schema", "\"d3-package-manifest/2\"", NULL},
    {"unknown or malformed Decision 3.0 package manifest", {0}, MF, "schema", NULL, NULL},
    {"unknown or malformed Decision 3.0 package manifest", {0}, NULL, NULL, NULL, ed_manifest_array},
    {"unknown or malformed Decision 3.0 package manifest", {0}, NULL, NULL, NULL, ed_manifest_truncated},
    {"unknown or malformed Decision 3.0 package manifest", {0}, MF, "files_sha256", "{}", NULL},
    {"unknown or malformed Decision 3.0 package manifest", {0}, MF, "files_sha256.config.json", "\"0123\"", NULL},
    {"MODEL_MANIFEST.json does not list ['config.json', 'tokenizer.json']", {0}, NULL, NULL, NULL, ed_unlist_two},
    {"tokenizer.json: size differs from MODEL_MANIFEST.json", {0}, NULL, NULL, NULL, ed_bytes},
    {"package files differ from MODEL_MANIFEST.json: ['chat_template.jinja', 'tokenizer.json']", {0}, NULL, NULL, NULL,
     ed_change_two},
    {"model identity differs from the scored checkpoint in MODEL_MANIFEST.json", {0}, NULL, NULL, NULL, ed_identity},
    {"model identity differs from the scored checkpoint in MODEL_MANIFEST.json", {0}, NULL, NULL, NULL, ed_no_identity},
    /* decision_config.json (the manifest is rewritten to match, so only the rule breaks) */
    {"unsupported decision_config.json format", {0}, DC, "format_version", "2", NULL},
    {"unsupported decision_config.json format", {0}, DC, "format_id", "\"d3-code-readout-v2\"", NULL},
    {"unknown prompt family 'd4'", {0}, DC, "prompt", "\"d4\"", NULL},
    {"unknown attention mode 'sliding'", {0}, DC, "attention_mode", "\"sliding\"", NULL},
    {"unsupported pooling 'mean'", {0}, DC, "pooling", "\"mean\"", NULL},
    {"readout_dtype must be float32 or bfloat16", {0}, DC, "readout_dtype", "\"float16\"", NULL},
    {"temperature must be positive and finite", {0}, DC, "temperature", "-1", NULL},
    {"temperature must be positive and finite", {0}, DC, "temperature", "0.0", NULL},
    {"decision_config.json needs 255 distinct answer codes and token IDs", {0}, DC, "codes", "[\"A\"]", NULL},
    {"decision_config.json needs 255 distinct answer codes and token IDs", {0}, DC, "token_ids", NULL, NULL},
    {"max_length must be null or an integer >= 16", {0}, DC, "max_length", "8", NULL},
    /* config.json */
    {"config.json must describe a qwen3_5 model", {0}, "config.json", "model_type", "\"qwen3\"", NULL},
    {"config.json must describe a qwen3_5 model", {0}, NULL, NULL, NULL, ed_top_text},
    {"config.json needs a qwen3_5_text text_config", {0}, "config.json", "text_config.model_type", "\"qwen3_text\"", NULL},
    {"config.json needs a qwen3_5_text text_config", {0}, "config.json", "text_config", NULL, NULL},
    {"config.json vision_config must be a qwen3_5_vision config", {.vision = true}, "config.json",
     "vision_config.model_type", "\"siglip_vision_model\"", NULL},
    {"config.json vision_config must be a qwen3_5_vision config", {0}, "config.json", "vision_config", "[]", NULL},
    /* tensors */
    {"checkpoint tensor 'lm_head.weight' belongs to no known module", {.extra_tensor = "lm_head.weight"}, NULL, NULL, NULL, NULL},
    {"checkpoint tensor 'model.norm.weight' belongs to no known module", {.extra_tensor = "model.norm.weight"}, NULL, NULL, NULL, NULL},
    {"checkpoint tensors use mixed name prefixes", {.extra_tensor = "language_model.layers.0.mlp.up_proj.weight"}, NULL, NULL, NULL, NULL},
    {"checkpoint tensors use mixed name prefixes", {.vision = true, .extra_tensor = "visual.merger.weight"}, NULL, NULL, NULL, NULL},
    {"readout.safetensors must hold exactly one tensor named weight", {0}, NULL, NULL, NULL, ed_readout_two},
    {"readout weight has shape [255, 16], expected [255, 32]", {0}, NULL, NULL, NULL, ed_readout_shape},
    {"the readout weight must be a matrix: readout weight has shape [8160], expected [255, 32]", {0}, NULL, NULL, NULL,
     ed_readout_vector},
    {"the checkpoint has vision weights but no vision_config", {.vision = true}, "config.json", "vision_config", NULL,
     NULL},
    {"tensor counts differ from the manifest's parameter counts", {0}, MF, "parameters.text", "1", NULL},
    {"tensor counts differ from the manifest's parameter counts", {0}, MF, "parameters.vision", NULL, NULL},
    {"tensor counts differ from the manifest's parameter counts", {.vision = true}, MF, "parameters.loaded",
     "1000000", NULL},
    {"the package declares no usable input limit", {0}, NULL, NULL, NULL, ed_no_limit},
    {"the package declares no usable input limit", {0}, NULL, NULL, NULL, ed_no_limit_absent},
    {"the package has no model*.safetensors weights", {0}, NULL, NULL, NULL, ed_no_weights},
    {"model.safetensors.index.json has no weight_map", {.sharded = true}, "model.safetensors.index.json", "weight_map",
     "{}", NULL},
    {"model.safetensors.index.json has no weight_map", {.sharded = true}, "model.safetensors.index.json", "weight_map",
     NULL, NULL},
};

TEST(reference_messages) {
    for (size_t i = 0; i < sizeof ref_cases / sizeof ref_cases[0]; i++) {
        const ref_case *k = &ref_cases[i];
        const char *dir = fresh(&k->o);
        vsr_err e = {0};
        vsr_status st;
        if (k->file || k->edit) {
            /* the untouched package passes: the case's edit alone breaks it (a case of
             * options alone breaks a package the other cases show passing) */
            st = open_verify(dir, &e);
            CHECK_MSG(st == VSR_OK, "case %zu (%s): the package before the edit fails: %s", i, k->msg, e.msg);
        }
        if (k->edit) {
            k->edit(dir);
        } else if (k->file) {
            tpkg_edit_json(dir, k->file, set_key, (void *)k);
            if (strcmp(k->file, MF)) tpkg_manifest(dir, NULL, NULL);
        }
        st = open_verify(dir, &e);
        CHECK_MSG(st != VSR_OK && strstr(e.msg, k->msg), "case %zu: want \"%s\", got %s: %s", i, k->msg,
                  vsr_status_name(st), e.msg);
    }
}
#undef DC
#undef MF

/* Both an index and a model.safetensors: the index and its shards are the weights (as the
 * reference's weight_files); the stray single file is neither listed nor read. */
TEST(index_wins_over_single_file) {
    tpkg_opts os = {.sharded = true};
    const char *dir = fresh(&os);
    char a[PATH_MAX + 64], b[PATH_MAX + 64];
    snprintf(a, sizeof a, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", dir);
    size_t n;
    char *bytes = test_read_file(a, &n);
    CHECK(bytes && test_write_file(b, bytes, n) == 0);
    free(bytes);
    vsr_err e = {0};
    vsr_package *p = NULL;
    CHECK_OK(vsr_package_open(dir, NULL, NULL, &p, &e), e);
    if (!p) return;
    CHECK(vsr_weights_file_count(p->weights) == 3);
    CHECK(!strcmp(vsr_weights_file_name(p->weights, 0), "model.safetensors.index.json"));
    CHECK(!vsr_manifest_find(&p->manifest, "model.safetensors"));
    CHECK_OK(vsr_package_verify(p, 1, NULL, &e), e);
    CHECK_OK(vsr_package_map(p, &e), e);
    CHECK(vsr_weights_file_count(p->weights) == 3);
    vsr_package_close(p);
}

/* ---- path tricks ---- */
static void index_escape(json_t *j, void *ctx) {
    json_object_set_new(json_object_get(j, "weight_map"), "model.language_model.norm.weight", json_string((const char *)ctx));
}

TEST(path_escapes) {
    vsr_err e = {0};
    tpkg_opts os = {.sharded = true};
    const char *bad[] = {"/etc/passwd", "../outside.safetensors", "sub/../../x.safetensors", ""};
    for (size_t i = 0; i < 4; i++) {
        const char *dir = fresh(&os);
        tpkg_edit_json(dir, "model.safetensors.index.json", index_escape, (void *)bad[i]);
        tpkg_manifest(dir, NULL, NULL);
        CHECK_ERR(open_verify(dir, &e), e, VSR_E_INVALID, "which is not a relative path inside the package");
    }
    /* a shard that is a symlink out of the package */
    const char *dir = fresh(&os);
    char outside[PATH_MAX], link[PATH_MAX + 64], p[PATH_MAX + 64];
    snprintf(outside, sizeof outside, "%s/outside-%d.safetensors", test_tmpdir(), seq);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(rename(p, outside) == 0 && symlink(outside, p) == 0);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INVALID, "outside the package folder");
    /* a listed non-weight file that is a symlink out of the package */
    dir = fresh(NULL);
    snprintf(link, sizeof link, "%s/tokenizer.json", dir);
    snprintf(outside, sizeof outside, "%s/outside-tok-%d.json", test_tmpdir(), seq);
    CHECK(rename(link, outside) == 0 && symlink(outside, link) == 0);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INVALID, "files_sha256 \"tokenizer.json\" resolves to");
    /* config.json itself a symlink outside */
    dir = fresh(NULL);
    snprintf(link, sizeof link, "%s/config.json", dir);
    snprintf(outside, sizeof outside, "%s/outside-cfg-%d.json", test_tmpdir(), seq);
    CHECK(rename(link, outside) == 0 && symlink(outside, link) == 0);
    CHECK_ERR(open_verify(dir, &e), e, VSR_E_INVALID, "outside the package folder");
    /* a symlink that stays inside is fine */
    dir = fresh(NULL);
    snprintf(link, sizeof link, "%s/chat_template.jinja", dir);
    snprintf(p, sizeof p, "%s/real_template.jinja", dir);
    CHECK(rename(link, p) == 0 && symlink("real_template.jinja", link) == 0);
    CHECK_OK(open_verify(dir, &e), e);
}

/* ---- naming ---- */
TEST(names_and_revisions) {
    vsr_err e = {0};
    vsr_package *p = NULL;
    const char *dir = fresh(NULL);
    CHECK_ERR(vsr_package_open(dir, "main", NULL, &p, &e), e, VSR_E_INVALID, "revision applies only to Hub repositories");
    char at[PATH_MAX + 16];
    snprintf(at, sizeof at, "%s@main", dir);
    CHECK_ERR(vsr_package_open(at, NULL, NULL, &p, &e), e, VSR_E_INVALID, "revision applies only to Hub repositories");
    CHECK_ERR(vsr_package_open("/no/such/package", NULL, NULL, &p, &e), e, VSR_E_NOT_FOUND, "no such package folder");
    CHECK_ERR(vsr_package_open("not a repo", NULL, NULL, &p, &e), e, VSR_E_INVALID, "must be a Hub repository ID");
    CHECK_ERR(vsr_package_open("relative/../x", NULL, NULL, &p, &e), e, VSR_E_INVALID, "must be a Hub repository ID");
    CHECK_ERR(vsr_package_open("", NULL, NULL, &p, &e), e, VSR_E_INVALID, "no model named");
    CHECK_ERR(vsr_package_open("org/name@v1", "v2", test_tmpdir(), &p, &e), e, VSR_E_INVALID,
              "the revision after '@' (v1) conflicts with --revision v2");
    CHECK_ERR(vsr_package_open("org/name@", NULL, test_tmpdir(), &p, &e), e, VSR_E_INVALID, "empty revision after '@'");
    CHECK(p == NULL);
    /* a folder whose name contains '@' is a path, not a revision */
    char odd[PATH_MAX];
    snprintf(odd, sizeof odd, "%s/pkg@v1", test_tmpdir());
    CHECK(tpkg_copy(dir, odd) == 0);
    CHECK_OK(vsr_package_open(odd, NULL, NULL, &p, &e), e);
    vsr_package_close(p);
}

/* ---- families ---- */
static void set_arch_tokcls(json_t *j, void *ctx) {
    (void)ctx;
    json_object_set_new(j, "architectures", json_pack("[s]", "Qwen3_5ForTokenClassification"));
}

TEST(families) {
    vsr_err e = {0};
    vsr_package *p = NULL;
    /* no decision_config.json: not decision3; a token-classification architecture: span */
    tpkg_opts o = {.scheme = "fp8"};
    const char *dir = fresh(&o);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/decision_config.json", dir);
    unlink(path);
    tpkg_edit_json(dir, "config.json", set_arch_tokcls, NULL);
    CHECK_ERR(vsr_package_open(dir, NULL, NULL, &p, &e), e, VSR_E_UNSUPPORTED,
              "a span package cannot carry quantized weights");
    CHECK(strstr(e.msg, "only Decision 3.0 packages can") != NULL);
    /* unknown family (no decision_config.json, no token-classification head), quantized: refused too */
    o.scheme = "int4";
    dir = fresh(&o);
    snprintf(path, sizeof path, "%s/decision_config.json", dir);
    unlink(path);
    CHECK_ERR(vsr_package_open(dir, NULL, NULL, &p, &e), e, VSR_E_UNSUPPORTED, "a unknown package cannot carry quantized");
    /* BF16 span package opens, its family is span */
    dir = fresh(NULL);
    snprintf(path, sizeof path, "%s/decision_config.json", dir);
    unlink(path);
    tpkg_edit_json(dir, "config.json", set_arch_tokcls, NULL);
    tpkg_manifest(dir, NULL, NULL);
    CHECK_OK(vsr_package_open(dir, NULL, NULL, &p, &e), e);
    if (p) {
        CHECK(p->family == VSR_FAMILY_SPAN && p->readout == NULL);
        vsr_gate_request r;
        vsr_package_gate_request(p, &r);
        CHECK(!r.quantized_family_ok);
        vsr_package_close(p);
    }
    CHECK(!strcmp(vsr_family_name(VSR_FAMILY_DECISION3), "decision3") && !strcmp(vsr_family_name(VSR_FAMILY_SPAN), "span"));
    CHECK(!strcmp(vsr_family_name((vsr_family)99), "unknown"));
}

TEST(quant_config_refusal_named) {
    /* A quantization_config of another method is refused with the seed's text, prefixed by the key. */
    tpkg_opts o = {.scheme = "fp8"};
    const char *dir = fresh(&o);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    json_object_set_new(json_object_get(j, "quantization_config"), "quant_method", json_string("awq"));
    json_dump_file(j, p, 0);
    json_decref(j);
    vsr_err e = {0};
    vsr_package *pk = NULL;
    CHECK_ERR(vsr_package_open(dir, NULL, NULL, &pk, &e), e, VSR_E_UNSUPPORTED,
              "config.json: quantization_config: " VSR_QUANT_REFUSAL_FORMATS);
    /* kv_cache_scheme null (as pkgbuild and the fixture writer write it) opens; an FP8 K/V
     * cache request is refused by name, never ignored */
    dir = fresh(&o);
    CHECK_OK(open_verify(dir, &e), e);
    snprintf(p, sizeof p, "%s/config.json", dir);
    j = json_load_file(p, 0, &je);
    json_object_set_new(json_object_get(j, "quantization_config"), "kv_cache_scheme",
                        json_pack("{s:i,s:s,s:s,s:b,s:b}", "num_bits", 8, "type", "float", "strategy", "tensor",
                                  "symmetric", 1, "dynamic", 0));
    json_dump_file(j, p, JSON_INDENT(2));
    json_decref(j);
    tpkg_manifest(dir, NULL, NULL);
    CHECK_ERR(vsr_package_open(dir, NULL, NULL, &pk, &e), e, VSR_E_UNSUPPORTED,
              "config.json: quantization_config: " VSR_QUANT_REFUSAL_FORMATS ": quantization_config.kv_cache_scheme is "
              "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"symmetric\":true,\"dynamic\":false}: an "
              "FP8 K/V cache is not supported by this runtime");
    CHECK(strstr(e.msg, "re-export the checkpoint without kv_cache_scheme") != NULL);
    CHECK(pk == NULL);
}

/* ---- catalogue ---- */
TEST(catalogue) {
    const char *pub[] = {"vllm-sr/d3-FP8", "vllm-sr/d3-W4A16-GPTQ", "vllm-sr/d3-W4A16-AWQ", "vllm-sr/d3-NVFP4",
                         "vllm-sr/d3-NVFP4-AWQ"};
    const char *rev[] = {"2fb271adbdaf6dc969ca1ca746b61a6a5127ed62", "93aa927c5bbf184770ecd144972bed9a1450a4bd",
                         "39ffacd3644dad729b6885ac986e740e8db7e22d", "07fa5a04859155eb99a034e2e424d423dd50ce1d",
                         "27dbfdc48957f9cbc3b83ac49a58d3434451a0a9"};
    for (int i = 0; i < 5; i++) {
        const vsr_builtin *b = vsr_catalog_find(pub[i], rev[i]);
        CHECK(b && b->published && !b->model_sha256 && !b->manifest_sha256 && !b->golden_json && !b->fixture);
        CHECK(b && !strcmp(b->family, "decision3"));
        CHECK(vsr_catalog_find(pub[i], NULL) == b);
        CHECK(vsr_catalog_find(pub[i], "0000000000000000000000000000000000000000") == NULL);
    }
    CHECK(vsr_catalog_find("vllm-sr/d3-FP8", rev[0])->scheme == VSR_SCHEME_FP8);
    CHECK(vsr_catalog_find("vllm-sr/d3-NVFP4", rev[3])->scheme == VSR_SCHEME_NVFP4);
    CHECK(vsr_catalog_count() >= 5 && vsr_catalog_at(vsr_catalog_count()) == NULL);
    const vsr_builtin *d = vsr_catalog_default();
    CHECK(d && !strcmp(d->repo, "vllm-sr-c/d3-tiny") && !d->published && d->fixture);
    CHECK(vsr_catalog_find("nobody/none", NULL) == NULL);
}

/* Packages written by `vllm-srun fixture` (another engineer's writer) open and verify,
 * sharded and not, in every scheme, with and without act-order. */
TEST(fixture_packages_verify) {
    const char *fx[] = {"bf16", "fp8", "w4a16-gptq", "w4a16-awq", "nvfp4"};
    for (size_t i = 0; i < 5; i++)
        for (int variant = 0; variant < 2; variant++) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/fx-%s-%d", test_tmpdir(), fx[i], variant);
            vsr_fixture_opts o = {.family = "decision3", .size = "tiny", .scheme = fx[i], .seed = 7,
                                  .actorder = variant && !strcmp(fx[i], "w4a16-gptq"),
                                  .max_shard_bytes = variant ? 4000000 : 0};
            vsr_err e = {0};
            vsr_status st = vsr_fixture_write(dir, &o, NULL, &e);
            CHECK_OK(st, e);
            if (st) continue;
            vsr_package *p = NULL;
            CHECK_OK(vsr_package_open(dir, NULL, NULL, &p, &e), e);
            if (!p) continue;
            CHECK(p->family == VSR_FAMILY_DECISION3);
            if (variant) CHECK(vsr_weights_file_count(p->weights) > 2); /* index + shards */
            CHECK(p->quant.actorder_group == o.actorder);
            CHECK_OK(vsr_package_verify(p, 2, NULL, &e), e);
            if (!p->verified) fprintf(stderr, "  fixture %s variant %d\n", fx[i], variant);
            vsr_package_close(p);
        }
}

int main(void) {
    RUN(config_ok_both_spellings);
    RUN(config_refusals);
    RUN(decision_config_rules);
    RUN(manifest_schema);
    RUN(open_verify_every_scheme);
    RUN(quantized_layout_details);
    RUN(tensor_cross_check_refusals);
    RUN(readout_and_lm_head);
    RUN(tampered_byte_in_each_file_kind);
    RUN(manifest_against_files);
    RUN(reference_messages);
    RUN(index_wins_over_single_file);
    RUN(path_escapes);
    RUN(names_and_revisions);
    RUN(families);
    RUN(quant_config_refusal_named);
    RUN(catalogue);
    RUN(fixture_packages_verify);
    return test_summary();
}
