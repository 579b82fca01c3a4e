/* Small Decision 3.0 packages for the package-layer tests; see pkgbuild.h. The tensor
 * layout follows transformers' modeling_qwen3_5.py (gated q_proj of 2*H*d rows, split
 * DeltaNet projections) and compressed-tensors' per-scheme parameter lists. */
#include "pkgbuild.h"

#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"
#include "vsr/hash.h"
#include "vsr/package.h"
#include "vsr/safetensors.h"

long long tpkg_params_text, tpkg_params_vision, tpkg_params_readout;

/* tiny shape: hidden 32, I 64, 2 layers (linear, full), H 2, KV 1, d 16, DeltaNet 2x16 keys,
 * 2x16 values, conv kernel 4, vocab 300 */
enum { HID = 32, INTER = 64, LAYERS = 2, H = 2, KV = 1, HD = 16, LKH = 2, LVH = 2, LKD = 16, LVD = 16, CONV = 4, VOCAB = 300 };

static int write_text(const char *dir, const char *name, const char *text) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return test_write_file(p, text, strlen(text));
}

static int write_json(const char *dir, const char *name, json_t *j) {
    char *s = json_dumps(j, JSON_SORT_KEYS | JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    int r = s ? write_text(dir, name, s) : -1;
    free(s);
    return r;
}

typedef struct wctx {
    const tpkg_opts *o;
    vsr_st_writer *w[2];
    int shard; /* which writer gets the next tensor */
    json_t *weight_map;
    uint32_t seed;
} wctx;

static void put(wctx *c, const char *name, vsr_dtype dt, int ndim, int64_t a, int64_t b, int64_t d3) {
    const tpkg_opts *o = c->o;
    if (o->skip_tensor && !strcmp(name, o->skip_tensor)) return;
    if (o->f32_tensor && !strcmp(name, o->f32_tensor)) dt = VSR_DT_F32;
    int64_t shape[3] = {a, b, d3};
    if (o->bad_shape_tensor && !strcmp(name, o->bad_shape_tensor)) shape[0]++;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    size_t nbytes = (size_t)((numel * vsr_dtype_info(dt)->bits + 7) / 8);
    uint8_t *buf = malloc(nbytes ? nbytes : 1);
    for (size_t i = 0; i < nbytes; i++) {
        c->seed = c->seed * 1664525u + 1013904223u;
        buf[i] = (uint8_t)(c->seed >> 24) & 0x3f; /* small values: finite in every float type */
    }
    if (dt == VSR_DT_I64 && numel == 2 && strstr(name, "weight_shape")) memset(buf, 0, nbytes);
    vsr_err e = {0};
    int s = o->sharded ? c->shard : 0;
    if (vsr_st_writer_add(c->w[s], name, dt, ndim, shape, buf, nbytes, &e) != VSR_OK)
        fprintf(stderr, "pkgbuild: %s\n", e.msg);
    free(buf);
    if (o->sharded)
        json_object_set_new(c->weight_map, name,
                            json_string(s ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors"));
}

static bool ignored(const tpkg_opts *o, const char *module) {
    (void)module;
    if (!o->ignore) return false;
    /* The tests only ignore exact module names or the in_proj_a/b regex. */
    if (!strncmp(o->ignore, "re:", 3)) {
        size_t n = strlen(module);
        return n > 10 && (!strcmp(module + n - 10, ".in_proj_a") || !strcmp(module + n - 10, ".in_proj_b"));
    }
    return !strcmp(o->ignore, module);
}

static void linear(wctx *c, const char *module, int64_t N, int64_t K) {
    const char *s = c->o->scheme ? c->o->scheme : "bf16";
    char n[256];
#define T(suffix) (snprintf(n, sizeof n, "%s.%s", module, suffix), n)
    tpkg_params_text += N * K;
    if (!strcmp(s, "bf16") || ignored(c->o, module)) {
        put(c, T("weight"), VSR_DT_BF16, 2, N, K, 0);
    } else if (!strcmp(s, "fp8")) {
        put(c, T("weight"), VSR_DT_F8_E4M3, 2, N, K, 0);
        put(c, T("weight_scale"), VSR_DT_BF16, 2, N, 1, 0);
    } else if (!strncmp(s, "int4", 4)) {
        int64_t G = K / 16;
        put(c, T("weight_packed"), VSR_DT_I32, 2, N, K / 8, 0);
        put(c, T("weight_scale"), VSR_DT_BF16, 2, N, G, 0);
        put(c, T("weight_shape"), VSR_DT_I64, 1, 2, 0, 0);
        if (!strcmp(s, "int4-asym")) put(c, T("weight_zero_point"), VSR_DT_I32, 2, (N + 7) / 8, G, 0);
        if (!strcmp(s, "int4-actorder")) put(c, T("weight_g_idx"), VSR_DT_I32, 1, K, 0, 0);
    } else if (!strncmp(s, "nvfp4", 5)) {
        put(c, T("weight_packed"), VSR_DT_U8, 2, N, K / 2, 0);
        put(c, T("weight_scale"), VSR_DT_F8_E4M3, 2, N, K / 16, 0);
        put(c, T("weight_global_scale"), VSR_DT_F32, 1, 1, 0, 0);
        if (!strcmp(s, "nvfp4")) put(c, T("input_global_scale"), VSR_DT_F32, 1, 1, 0, 0);
    }
#undef T
}

static void vec(wctx *c, const char *name, int64_t n) {
    tpkg_params_text += n;
    put(c, name, VSR_DT_BF16, 1, n, 0, 0);
}

static json_t *quant_config(const tpkg_opts *o) {
    const char *s = o->scheme ? o->scheme : "bf16";
    if (!strcmp(s, "bf16")) return NULL;
    json_t *w = NULL, *in = json_null();
    const char *fmt = NULL;
    if (!strcmp(s, "fp8")) {
        fmt = "float-quantized";
        w = json_pack("{s:i,s:s,s:b,s:n,s:s,s:b,s:n,s:s}", "num_bits", 8, "type", "float", "symmetric", 1, "group_size",
                      "strategy", "channel", "dynamic", 0, "actorder", "observer", "minmax");
        in = json_pack("{s:i,s:s,s:b,s:n,s:s,s:b,s:n}", "num_bits", 8, "type", "float", "symmetric", 1, "group_size",
                       "strategy", "token", "dynamic", 1, "observer");
    } else if (!strncmp(s, "int4", 4)) {
        fmt = "pack-quantized";
        bool asym = !strcmp(s, "int4-asym");
        w = json_pack("{s:i,s:s,s:b,s:i,s:s,s:b,s:s?,s:s}", "num_bits", 4, "type", "int", "symmetric", !asym,
                      "group_size", 16, "strategy", "group", "dynamic", 0, "actorder",
                      !strcmp(s, "int4-actorder") ? "group" : NULL, "observer", "minmax");
        if (asym) json_object_set_new(w, "zp_dtype", json_string("torch.int8"));
    } else {
        fmt = "nvfp4-pack-quantized";
        w = json_pack("{s:i,s:s,s:b,s:i,s:s,s:b,s:n,s:s,s:s}", "num_bits", 4, "type", "float", "symmetric", 1,
                      "group_size", 16, "strategy", "tensor_group", "dynamic", 0, "actorder", "observer", "minmax",
                      "scale_dtype", "torch.float8_e4m3fn");
        if (!strcmp(s, "nvfp4"))
            in = json_pack("{s:i,s:s,s:b,s:i,s:s,s:s,s:s,s:s}", "num_bits", 4, "type", "float", "symmetric", 1,
                           "group_size", 16, "strategy", "tensor_group", "dynamic", "local", "observer", "static_minmax",
                           "scale_dtype", "torch.float8_e4m3fn");
    }
    json_t *ignore = json_pack("[s]", "lm_head");
    if (o->ignore) json_array_append_new(ignore, json_string(o->ignore));
    return json_pack("{s:{s:{s:s,s:[s],s:o,s:o,s:n}},s:s,s:o,s:n,s:s,s:s,s:{},s:{},s:s}", "config_groups", "group_0",
                     "format", fmt, "targets", "Linear", "weights", w, "input_activations", in, "output_activations",
                     "format", fmt, "ignore", ignore, "kv_cache_scheme", "quant_method", "compressed-tensors",
                     "quantization_status", "compressed", "sparsity_config", "transform_config", "version", "0.12.2");
}

static int write_config(const char *dir, const tpkg_opts *o) {
    json_t *tc = json_pack(
        "{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:i,s:s,s:b,s:b,s:[s,s],"
        "s:{s:f,s:f,s:s,s:[i,i,i],s:b}}",
        "model_type", "qwen3_5_text", "vocab_size", VOCAB, "hidden_size", HID, "intermediate_size", INTER,
        "num_hidden_layers", LAYERS, "num_attention_heads", H, "num_key_value_heads", KV, "head_dim", HD,
        "linear_num_key_heads", LKH, "linear_num_value_heads", LVH, "linear_key_head_dim", LKD,
        "linear_value_head_dim", LVD, "linear_conv_kernel_dim", CONV, "rms_norm_eps", 1e-6,
        "max_position_embeddings", 4096, "hidden_act", "silu", "tie_word_embeddings", 1, "attention_bias", 0,
        "layer_types", "linear_attention", "full_attention", "rope_parameters", "rope_theta", 10000000.0,
        "partial_rotary_factor", 0.25, "rope_type", "default", "mrope_section", 1, 1, 0, "mrope_interleaved", 1);
    json_object_set_new(tc, "dtype", json_string("bfloat16"));
    json_t *root = json_pack("{s:s,s:[s],s:o,s:b}", "model_type", "qwen3_5", "architectures",
                             "Qwen3_5ForConditionalGeneration", "text_config", tc, "tie_word_embeddings", 1);
    if (o->vision)
        json_object_set_new(root, "vision_config", json_pack("{s:s,s:i,s:i}", "model_type", "qwen3_5_vision",
                                                             "depth", 1, "hidden_size", 8));
    json_t *q = quant_config(o);
    if (q) json_object_set_new(root, "quantization_config", q);
    int r = write_json(dir, "config.json", root);
    json_decref(root);
    return r;
}

static int write_decision(const char *dir, const tpkg_opts *o) {
    json_t *codes = json_array(), *ids = json_array();
    for (int i = 0; i < VSR_D3_CODES; i++) {
        char c[16];
        snprintf(c, sizeof c, "C%03d", i);
        json_array_append_new(codes, json_string(c));
        json_array_append_new(ids, json_integer(20 + i));
    }
    json_t *d = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:f,s:i,s:o,s:o,s:s,s:s}", "format_version", 1, "format_id",
                          "d3-code-readout-v1", "prompt", "d3", "attention_mode", "noncausal_full_attention",
                          "pooling", "last", "readout_dtype", o->readout_dtype ? o->readout_dtype : "float32",
                          "temperature", 0.75, "max_length", 4096, "codes", codes, "token_ids", ids, "base_model",
                          "Qwen/Qwen3.5-0.8B", "revision", "0123456789abcdef0123456789abcdef01234567");
    int r = write_json(dir, "decision_config.json", d);
    json_decref(d);
    return r;
}

int tpkg_write(const char *dir, const tpkg_opts *o) {
    static const tpkg_opts dflt = {0};
    if (!o) o = &dflt;
    char p[PATH_MAX];
    mkdir(dir, 0755);
    tpkg_params_text = tpkg_params_vision = 0;
    tpkg_params_readout = (long long)VSR_D3_CODES * HID;
    if (write_config(dir, o) || write_decision(dir, o)) return -1;
    if (write_text(dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}\n") ||
        write_text(dir, "tokenizer_config.json", "{\"added_tokens_decoder\": {}}\n") ||
        write_text(dir, "chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}\n"))
        return -1;
    if (o->vision && write_text(dir, "preprocessor_config.json", "{\"patch_size\": 16}\n")) return -1;

    wctx c = {.o = o, .weight_map = json_object(), .seed = 12345};
    c.w[0] = vsr_st_writer_new();
    c.w[1] = vsr_st_writer_new();
    const char *P = o->prefix ? o->prefix : "model.language_model.";
    char n[256], m[256];
    snprintf(n, sizeof n, "%sembed_tokens.weight", P);
    tpkg_params_text += (long long)VOCAB * HID;
    put(&c, n, VSR_DT_BF16, 2, VOCAB, HID, 0);
    for (int l = 0; l < LAYERS; l++) {
        c.shard = l > 0;
#define L(x) (snprintf(n, sizeof n, "%slayers.%d.%s", P, l, x), n)
        vec(&c, L("input_layernorm.weight"), HID);
        vec(&c, L("post_attention_layernorm.weight"), HID);
        if (l == 0) { /* linear_attention */
            int64_t Kd = LKH * LKD, Vd = LVH * LVD, conv = 2 * Kd + Vd;
            snprintf(m, sizeof m, "%slayers.%d.linear_attn.in_proj_qkv", P, l), linear(&c, m, conv, HID);
            snprintf(m, sizeof m, "%slayers.%d.linear_attn.in_proj_z", P, l), linear(&c, m, Vd, HID);
            snprintf(m, sizeof m, "%slayers.%d.linear_attn.in_proj_b", P, l), linear(&c, m, LVH, HID);
            snprintf(m, sizeof m, "%slayers.%d.linear_attn.in_proj_a", P, l), linear(&c, m, LVH, HID);
            snprintf(m, sizeof m, "%slayers.%d.linear_attn.out_proj", P, l), linear(&c, m, HID, Vd);
            tpkg_params_text += conv * CONV;
            put(&c, L("linear_attn.conv1d.weight"), VSR_DT_BF16, 3, conv, 1, CONV);
            vec(&c, L("linear_attn.dt_bias"), LVH);
            vec(&c, L("linear_attn.A_log"), LVH);
            vec(&c, L("linear_attn.norm.weight"), LVD);
        } else {
            snprintf(m, sizeof m, "%slayers.%d.self_attn.q_proj", P, l), linear(&c, m, 2 * H * HD, HID);
            snprintf(m, sizeof m, "%slayers.%d.self_attn.k_proj", P, l), linear(&c, m, KV * HD, HID);
            snprintf(m, sizeof m, "%slayers.%d.self_attn.v_proj", P, l), linear(&c, m, KV * HD, HID);
            snprintf(m, sizeof m, "%slayers.%d.self_attn.o_proj", P, l), linear(&c, m, HID, H * HD);
            vec(&c, L("self_attn.q_norm.weight"), HD);
            vec(&c, L("self_attn.k_norm.weight"), HD);
        }
        snprintf(m, sizeof m, "%slayers.%d.mlp.gate_proj", P, l), linear(&c, m, INTER, HID);
        snprintf(m, sizeof m, "%slayers.%d.mlp.up_proj", P, l), linear(&c, m, INTER, HID);
        snprintf(m, sizeof m, "%slayers.%d.mlp.down_proj", P, l), linear(&c, m, HID, INTER);
#undef L
    }
    snprintf(n, sizeof n, "%snorm.weight", P);
    vec(&c, n, HID);
    if (o->vision) {
        tpkg_params_vision = 8 * 8;
        put(&c, "model.visual.blocks.0.attn.proj.weight", VSR_DT_BF16, 2, 8, 8, 0);
    }
    if (o->extra_tensor) put(&c, o->extra_tensor, VSR_DT_BF16, 1, 4, 0, 0);

    vsr_err e = {0};
    int rc = 0;
    if (o->sharded) {
        snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
        rc |= vsr_st_writer_save(c.w[0], p, &e) != VSR_OK;
        snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
        rc |= vsr_st_writer_save(c.w[1], p, &e) != VSR_OK;
        json_t *idx = json_pack("{s:{s:i},s:O}", "metadata", "total_size", 0, "weight_map", c.weight_map);
        rc |= write_json(dir, "model.safetensors.index.json", idx);
        json_decref(idx);
    } else {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        rc |= vsr_st_writer_save(c.w[0], p, &e) != VSR_OK;
    }
    if (rc) fprintf(stderr, "pkgbuild: %s\n", e.msg);
    vsr_st_writer_free(c.w[0]);
    vsr_st_writer_free(c.w[1]);
    json_decref(c.weight_map);

    /* readout [255, hidden] */
    vsr_st_writer *r = vsr_st_writer_new();
    bool bf = o->readout_dtype && !strcmp(o->readout_dtype, "bfloat16");
    size_t rb = (size_t)VSR_D3_CODES * HID * (bf ? 2 : 4);
    uint8_t *buf = calloc(1, rb);
    for (size_t i = 0; i < rb; i++) buf[i] = (uint8_t)(i * 7 % 61);
    int64_t shape[2] = {VSR_D3_CODES, HID};
    vsr_st_writer_add(r, "weight", bf ? VSR_DT_BF16 : VSR_DT_F32, 2, shape, buf, rb, &e);
    free(buf);
    snprintf(p, sizeof p, "%s/readout.safetensors", dir);
    rc |= vsr_st_writer_save(r, p, &e) != VSR_OK;
    vsr_st_writer_free(r);
    if (rc) return -1;
    return tpkg_manifest(dir, NULL, NULL);
}

static const char *const identity_names[] = {"readout.safetensors", "tokenizer.json", "tokenizer_config.json",
                                             "chat_template.jinja"};

int tpkg_manifest(const char *dir, void (*edit)(json_t *, void *), void *ctx) {
    char p[PATH_MAX], sum[65];
    const char *others[] = {"config.json", "decision_config.json", "model.safetensors.index.json",
                            "preprocessor_config.json"};
    json_t *files = json_object(), *idfiles = json_object(), *bytes = json_object();
    vsr_err e = {0};
    uint64_t nb;
    struct stat sb;
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, others[i]);
        if (stat(p, &sb) || vsr_sha256_file(p, sum, &nb, NULL, &e)) continue;
        json_object_set_new(files, others[i], json_string(sum));
        json_object_set_new(bytes, others[i], json_integer((json_int_t)nb));
    }
    const char *ids[16];
    const char *sums[16];
    char store[16][65];
    int k = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    char names[16][NAME_MAX + 1];
    int nn = 0;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors") && strcmp(de->d_name, "readout.safetensors") && nn < 12)
            snprintf(names[nn++], sizeof names[0], "%s", de->d_name);
    }
    if (d) closedir(d);
    for (int i = 0; i < 4 && nn < 16; i++) snprintf(names[nn++], sizeof names[0], "%s", identity_names[i]);
    for (int i = 0; i < nn; i++) {
        snprintf(p, sizeof p, "%s/%.255s", dir, names[i]);
        if (stat(p, &sb) || vsr_sha256_file(p, store[k], &nb, NULL, &e)) continue;
        json_object_set_new(idfiles, names[i], json_string(store[k]));
        json_object_set_new(bytes, names[i], json_integer((json_int_t)nb));
        ids[k] = names[i];
        sums[k] = store[k];
        k++;
    }
    json_error_t je;
    snprintf(p, sizeof p, "%s/decision_config.json", dir);
    json_t *dec = json_load_file(p, 0, &je);
    char model_sha[65] = "";
    vsr_identity_model_sha256(k, ids, sums, dec, model_sha, &e);
    json_t *m = json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:{s:s,s:o,s:O},s:{s:I,s:I,s:I,s:I},s:o,s:o}", "schema",
                          "d3-package-manifest/1", "model_name", "d3-test", "format_id", "d3-code-readout-v1",
                          "prompt", "d3", "attention_mode", "noncausal_full_attention", "max_input_tokens", 4096,
                          "identity", "model_sha256", model_sha, "files_sha256", idfiles, "decision", dec ? dec : json_null(),
                          "parameters", "text", (json_int_t)tpkg_params_text, "vision", (json_int_t)tpkg_params_vision,
                          "readout", (json_int_t)tpkg_params_readout, "loaded",
                          (json_int_t)(tpkg_params_text + tpkg_params_vision + tpkg_params_readout), "files_sha256",
                          files, "files_bytes", bytes);
    json_decref(dec);
    if (!m) return -1;
    if (edit) edit(m, ctx);
    int r = write_json(dir, "MODEL_MANIFEST.json", m);
    json_decref(m);
    return r;
}

int tpkg_edit_json(const char *dir, const char *name, void (*edit)(json_t *, void *), void *ctx) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) return -1;
    edit(j, ctx);
    int r = write_json(dir, name, j);
    json_decref(j);
    return r;
}

int tpkg_flip_byte(const char *dir, const char *name, long offset) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r+b");
    if (!f) return -1;
    fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET);
    long pos = ftell(f);
    int c = fgetc(f);
    fseek(f, pos, SEEK_SET);
    fputc(c ^ 0x01, f);
    return fclose(f);
}

int tpkg_tamper_json(const char *dir, const char *name) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t n;
    char *buf = test_read_file(p, &n);
    if (!buf) return -1;
    char *sp = strstr(buf, "\n  ");
    if (sp) sp++;
    else sp = strchr(buf, ' ');
    int r = -1;
    if (sp) {
        sp[0] = '\t';
        r = test_write_file(p, buf, n);
    }
    free(buf);
    return r;
}

int tpkg_copy(const char *from, const char *to) {
    mkdir(to, 0755);
    DIR *d = opendir(from);
    if (!d) return -1;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char a[PATH_MAX], b[PATH_MAX];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        size_t n;
        char *buf = test_read_file(a, &n);
        if (!buf) {
            rc = -1;
            continue;
        }
        rc |= test_write_file(b, buf, n);
        free(buf);
    }
    closedir(d);
    return rc;
}
