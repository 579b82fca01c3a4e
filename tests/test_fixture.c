/* Fixture packages: determinism (recorded file hashes), the tensor set of every scheme,
 * quantized tensors equal to the quantizers applied to the BF16 package's weights, manifest
 * and identity (recomputed here and by tools/fixture_identity_oracle.py, whose output is
 * tests/data/fixture_oracle.jsonl), sharding, the store, the built-in table, refusals. */
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json_util.h"
#include "fixture/builtin.h"
#include "test.h"
#include "vsr/catalog.h"
#include "vsr/fixture.h"
#include "vsr/hash.h"
#include "vsr/package.h"
#include "vsr/quant.h"
#include "vsr/safetensors.h"

static vsr_fixture_opts opts(const char *scheme) {
    vsr_fixture_opts o = {0};
    o.family = "decision3";
    o.size = "tiny";
    o.scheme = scheme;
    o.seed = 0;
    return o;
}

static char *path2(const char *a, const char *b) {
    static char buf[4][PATH_MAX];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", a, b);
    return buf[k];
}

static const char *write_pkg(const char *name, const vsr_fixture_opts *o, vsr_fixture_info *info) {
    static char dir[8][PATH_MAX];
    static int k;
    k = (k + 1) % 8;
    snprintf(dir[k], sizeof dir[k], "%s/%s", test_tmpdir(), name);
    vsr_err e = {0};
    vsr_fixture_info tmp;
    vsr_status st = vsr_fixture_write_ex(dir[k], o, NULL, info ? info : &tmp, &e);
    CHECK_OK(st, e);
    return dir[k];
}

static json_t *load_json(const char *path) {
    vsr_err e;
    json_t *j = NULL;
    if (vsr_json_load_file(path, NULL, 1 << 26, &j, &e)) return NULL;
    return j;
}

/* The tiny BF16 package (seed 0) as recorded: any change in the writer's output fails here. */
static const char *const tiny_bf16_files[][2] = {
    {"MODEL_MANIFEST.json", "36664bf4eecec6a3da2293dec3f3039dac656a5592ce6b8dd00eac0e3bd5b720"},
    {"chat_template.jinja", "90fe4ebf04737041a41ce422bdaa6e24f12ad8128a001f60c678f162794e0ea7"},
    {"config.json", "4b4f1ef9921df033017d1de8b176c1c1e2bd95a7ceb8704d2e6b557b93301b62"},
    {"decision_config.json", "9a7a88024c0ece9d9f867edf0e350f68554b6d944ec123fafd93ff524ab33dc3"},
    {"model.safetensors", "8f369ad96c04b02d14d63e92c4be88b637b6f4fa77d63115a171c6a498a0a17e"},
    {"readout.safetensors", "6c90f4b16c5941c74012274195a0a1b7c79793628bbc2aba8a410a6cff15d251"},
    {"tokenizer.json", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"},
    {"tokenizer_config.json", "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"},
};

TEST(deterministic_and_recorded) {
    vsr_fixture_opts o = opts("bf16");
    const char *a = write_pkg("det-a", &o, NULL), *b = write_pkg("det-b", &o, NULL);
    for (size_t i = 0; i < sizeof tiny_bf16_files / sizeof tiny_bf16_files[0]; i++) {
        char ha[65] = "", hb[65] = "";
        vsr_err e;
        CHECK_OK(vsr_sha256_file(path2(a, tiny_bf16_files[i][0]), ha, NULL, NULL, &e), e);
        CHECK_OK(vsr_sha256_file(path2(b, tiny_bf16_files[i][0]), hb, NULL, NULL, &e), e);
        CHECK_MSG(!strcmp(ha, hb), "%s differs between two writes", tiny_bf16_files[i][0]);
        CHECK_MSG(!strcmp(ha, tiny_bf16_files[i][1]), "%s: sha256 %s, recorded %s", tiny_bf16_files[i][0],
                  ha, tiny_bf16_files[i][1]);
    }
    /* another seed changes the weights, not the tokenizer */
    o.seed = 1;
    const char *c = write_pkg("det-seed1", &o, NULL);
    char h0[65], h1[65];
    vsr_err e;
    CHECK_OK(vsr_sha256_file(path2(a, "model.safetensors"), h0, NULL, NULL, &e), e);
    CHECK_OK(vsr_sha256_file(path2(c, "model.safetensors"), h1, NULL, NULL, &e), e);
    CHECK(strcmp(h0, h1) != 0);
    char t[65];
    vsr_sha256_hex(vsr_fixture_chat_template, strlen(vsr_fixture_chat_template), t);
    CHECK(!strcmp(t, VSR_FIXTURE_CHAT_TEMPLATE_SHA256));
}

typedef struct {
    const char *suffix;
    const char *dtype;
    int64_t d0, d1; /* -1: absent dim */
} want_t;

static void check_tensor(vsr_st_file *f, const char *name, const char *dtype, int ndim, int64_t d0,
                         int64_t d1, int64_t d2) {
    const vsr_tensor *t = vsr_st_find(f, name);
    CHECK_MSG(t != NULL, "tensor %s is missing", name);
    if (!t) return;
    CHECK_MSG(!strcmp(vsr_dtype_info(t->dtype)->name, dtype), "%s: dtype %s, want %s", name,
              vsr_dtype_info(t->dtype)->name, dtype);
    int64_t d[3] = {d0, d1, d2};
    CHECK_MSG(t->ndim == ndim, "%s: ndim %d, want %d", name, t->ndim, ndim);
    for (int i = 0; i < ndim && i < t->ndim; i++)
        CHECK_MSG(t->shape[i] == d[i], "%s: dim %d is %lld, want %lld", name, i, (long long)t->shape[i],
                  (long long)d[i]);
}

#define P "model.language_model."

/* compressed-tensors-format.md section 2, tiny: hidden 64, inter 192, q_proj N 256, value dim 128. */
TEST(tensor_sets_per_scheme) {
    vsr_err e;
    const char *schemes[] = {"bf16", "fp8", "w4a16-gptq", "w4a16-awq", "nvfp4"};
    for (int s = 0; s < 5; s++) {
        vsr_fixture_opts o = opts(schemes[s]);
        o.actorder = s == 2;
        char nm[64];
        snprintf(nm, sizeof nm, "set-%s", schemes[s]);
        const char *d = write_pkg(nm, &o, NULL);
        vsr_st_file *f = NULL;
        vsr_status st = vsr_st_open(path2(d, "model.safetensors"), NULL, &f, &e);
        CHECK_OK(st, e);
        if (st) continue;
        /* never quantized */
        check_tensor(f, P "embed_tokens.weight", "BF16", 2, 151936, 64, 0);
        check_tensor(f, P "norm.weight", "BF16", 1, 64, 0, 0);
        check_tensor(f, P "layers.0.linear_attn.conv1d.weight", "BF16", 3, 256, 1, 4);
        check_tensor(f, P "layers.0.linear_attn.A_log", "BF16", 1, 4, 0, 0);
        check_tensor(f, P "layers.0.linear_attn.dt_bias", "BF16", 1, 4, 0, 0);
        check_tensor(f, P "layers.0.linear_attn.norm.weight", "BF16", 1, 32, 0, 0);
        check_tensor(f, P "layers.3.self_attn.q_norm.weight", "BF16", 1, 32, 0, 0);
        check_tensor(f, P "layers.3.input_layernorm.weight", "BF16", 1, 64, 0, 0);
        CHECK(vsr_st_find(f, "lm_head.weight") == NULL);
        const char *q = P "layers.3.self_attn.q_proj", *dn = P "layers.1.mlp.down_proj",
                   *qkv = P "layers.0.linear_attn.in_proj_qkv", *ba = P "layers.0.linear_attn.in_proj_b";
        char n1[256];
#define T(mod, suf) (snprintf(n1, sizeof n1, "%s%s", mod, suf), n1)
        size_t per_linear = 0;
        switch (s) {
        case 0:
            check_tensor(f, T(q, ".weight"), "BF16", 2, 256, 64, 0);
            check_tensor(f, T(dn, ".weight"), "BF16", 2, 64, 192, 0);
            per_linear = 1;
            break;
        case 1:
            check_tensor(f, T(q, ".weight"), "F8_E4M3", 2, 256, 64, 0);
            check_tensor(f, T(q, ".weight_scale"), "BF16", 2, 256, 1, 0);
            check_tensor(f, T(ba, ".weight"), "F8_E4M3", 2, 4, 64, 0);
            CHECK(vsr_st_find(f, T(q, ".input_scale")) == NULL); /* dynamic */
            per_linear = 2;
            break;
        case 2:
        case 3:
            check_tensor(f, T(dn, ".weight_packed"), "I32", 2, 64, 192 / 8, 0);
            check_tensor(f, T(dn, ".weight_scale"), "BF16", 2, 64, 192 / 32, 0);
            check_tensor(f, T(dn, ".weight_shape"), "I64", 1, 2, 0, 0);
            check_tensor(f, T(ba, ".weight"), "BF16", 2, 4, 64, 0); /* ignored */
            if (s == 2) {
                check_tensor(f, T(dn, ".weight_g_idx"), "I32", 1, 192, 0, 0);
                CHECK(vsr_st_find(f, T(dn, ".weight_zero_point")) == NULL);
            } else {
                check_tensor(f, T(dn, ".weight_zero_point"), "I32", 2, 64 / 8, 192 / 32, 0);
                CHECK(vsr_st_find(f, T(dn, ".weight_g_idx")) == NULL);
            }
            const vsr_tensor *shp = vsr_st_find(f, T(dn, ".weight_shape"));
            if (shp) {
                int64_t v[2];
                memcpy(v, shp->data, sizeof v);
                CHECK(v[0] == 64 && v[1] == 192);
            }
            per_linear = s == 2 ? 4 : 4;
            break;
        case 4:
            check_tensor(f, T(q, ".weight_packed"), "U8", 2, 256, 32, 0);
            check_tensor(f, T(q, ".weight_scale"), "F8_E4M3", 2, 256, 4, 0);
            check_tensor(f, T(q, ".weight_global_scale"), "F32", 1, 1, 0, 0);
            check_tensor(f, T(q, ".input_global_scale"), "F32", 1, 1, 0, 0);
            check_tensor(f, T(qkv, ".weight"), "BF16", 2, 256, 64, 0); /* linear_attn ignored */
            per_linear = 4;
            break;
        }
#undef T
        /* count: 5 bare/norm params per linear layer (3 layers), 4 norms per full layer, 2 per
         * layer, + embed + final norm; linears: 5 per DeltaNet layer (3), 4 attention, 3 MLP x 4 */
        size_t bare = 3 * 4 + 2 + 4 * 2 + 2;
        size_t lin_q = 0, lin_b = 0;
        if (s == 0) lin_b = 3 * 5 + 4 + 12;
        else if (s == 1) lin_q = 3 * 5 + 4 + 12;
        else if (s == 2 || s == 3) lin_q = 3 * 3 + 4 + 12, lin_b = 3 * 2;
        else lin_q = 4 + 12, lin_b = 3 * 5;
        if (s == 0) lin_q = 0;
        CHECK_MSG(vsr_st_count(f) == bare + lin_b + lin_q * per_linear, "%s: %zu tensors, want %zu",
                  schemes[s], vsr_st_count(f), bare + lin_b + lin_q * per_linear);
        vsr_st_close(f);
        /* readout */
        st = vsr_st_open(path2(d, "readout.safetensors"), NULL, &f, &e);
        CHECK_OK(st, e);
        if (!st) {
            CHECK(vsr_st_count(f) == 1);
            check_tensor(f, "weight", "F32", 2, 255, 64, 0);
            vsr_st_close(f);
        }
    }
}

/* The quantized package is the quantization of the BF16 package with the same seed: its
 * tensors equal the quant.h quantizers applied to the BF16 weights, for every linear. */
static const void *tdata(vsr_st_file *f, const char *mod, const char *suf) {
    char n[320];
    snprintf(n, sizeof n, "%s%s", mod, suf);
    const vsr_tensor *t = vsr_st_find(f, n);
    return t ? t->data : NULL;
}

TEST(quantized_equals_quantizer_on_bf16) {
    vsr_err e;
    vsr_fixture_opts o = opts("bf16");
    const char *db = write_pkg("q-bf16", &o, NULL);
    vsr_st_file *fb = NULL;
    CHECK_OK(vsr_st_open(path2(db, "model.safetensors"), NULL, &fb, &e), e);
    if (!fb) return;
    const char *schemes[] = {"fp8", "w4a16-gptq", "w4a16-awq", "nvfp4"};
    for (int s = 0; s < 4; s++) {
        o = opts(schemes[s]);
        o.actorder = s == 1;
        char nm[64];
        snprintf(nm, sizeof nm, "q-%s", schemes[s]);
        const char *dq = write_pkg(nm, &o, NULL);
        vsr_st_file *fq = NULL;
        CHECK_OK(vsr_st_open(path2(dq, "model.safetensors"), NULL, &fq, &e), e);
        if (!fq) continue;
        int compared = 0;
        for (size_t i = 0; i < vsr_st_count(fb); i++) {
            const vsr_tensor *w = vsr_st_at(fb, i);
            if (w->ndim != 2 || !strstr(w->name, "_proj.weight")) continue;
            char mod[224];
            snprintf(mod, sizeof mod, "%.*s", (int)(strlen(w->name) - 7), w->name);
            int64_t N = w->shape[0], K = w->shape[1];
            uint16_t *wb = malloc((size_t)(N * K) * 2);
            memcpy(wb, w->data, (size_t)(N * K) * 2);
            if (s == 0) {
                uint8_t *q = malloc((size_t)(N * K));
                uint16_t *sc = malloc((size_t)N * 2);
                vsr_quantize_fp8_rtn(wb, N, K, q, sc);
                const void *a = tdata(fq, mod, ".weight"), *b = tdata(fq, mod, ".weight_scale");
                CHECK_MSG(a && b && !memcmp(a, q, (size_t)(N * K)) && !memcmp(b, sc, (size_t)N * 2), "fp8 %s", mod);
                free(q);
                free(sc);
                compared++;
            } else if (s == 1 || s == 2) {
                if (strstr(mod, "in_proj_a") || strstr(mod, "in_proj_b")) {
                    const void *a = tdata(fq, mod, ".weight");
                    CHECK_MSG(a && !memcmp(a, wb, (size_t)(N * K) * 2), "ignored %s must stay BF16", mod);
                    free(wb);
                    continue;
                }
                int g = 32;
                int64_t G = K / g;
                uint32_t *pk = malloc((size_t)(N * K / 8) * 4), *zp = calloc((size_t)((N + 7) / 8 * G), 4);
                uint16_t *sc = malloc((size_t)(N * G) * 2);
                int32_t *gi = NULL;
                if (s == 1) {
                    gi = malloc((size_t)K * 4);
                    const void *src = tdata(fq, mod, ".weight_g_idx");
                    CHECK(src != NULL);
                    if (src) memcpy(gi, src, (size_t)K * 4);
                    /* a permutation: every group holds exactly g columns */
                    int *cnt = calloc((size_t)G, sizeof *cnt);
                    for (int64_t k = 0; k < K; k++)
                        if (gi[k] >= 0 && gi[k] < G) cnt[gi[k]]++;
                    for (int64_t j = 0; j < G; j++) CHECK(cnt[j] == g);
                    free(cnt);
                }
                vsr_quantize_int4_rtn(wb, N, K, g, s == 1, gi, pk, sc, s == 2 ? zp : NULL);
                const void *a = tdata(fq, mod, ".weight_packed"), *b = tdata(fq, mod, ".weight_scale");
                CHECK_MSG(a && !memcmp(a, pk, (size_t)(N * K / 8) * 4), "int4 packed %s", mod);
                CHECK_MSG(b && !memcmp(b, sc, (size_t)(N * G) * 2), "int4 scale %s", mod);
                if (s == 2) {
                    const void *z = tdata(fq, mod, ".weight_zero_point");
                    CHECK_MSG(z && !memcmp(z, zp, (size_t)((N + 7) / 8 * G) * 4), "int4 zp %s", mod);
                }
                free(pk);
                free(zp);
                free(sc);
                free(gi);
                compared++;
            } else {
                if (strstr(mod, "linear_attn")) {
                    CHECK(tdata(fq, mod, ".weight") != NULL);
                    free(wb);
                    continue;
                }
                uint8_t *pk = malloc((size_t)(N * K / 2)), *sc = malloc((size_t)(N * K / 16));
                float gs = 0;
                vsr_quantize_nvfp4_rtn(wb, N, K, pk, sc, &gs);
                const void *a = tdata(fq, mod, ".weight_packed"), *b = tdata(fq, mod, ".weight_scale"),
                           *c = tdata(fq, mod, ".weight_global_scale"), *ig = tdata(fq, mod, ".input_global_scale");
                CHECK_MSG(a && !memcmp(a, pk, (size_t)(N * K / 2)), "nvfp4 packed %s", mod);
                CHECK_MSG(b && !memcmp(b, sc, (size_t)(N * K / 16)), "nvfp4 scale %s", mod);
                CHECK_MSG(c && !memcmp(c, &gs, 4), "nvfp4 global scale %s", mod);
                float igv = 0;
                if (ig) memcpy(&igv, ig, 4);
                CHECK(igv == 42.0f);
                free(pk);
                free(sc);
                compared++;
            }
            free(wb);
        }
        CHECK_MSG(compared >= 16, "%s: compared %d linears", schemes[s], compared);
        vsr_st_close(fq);
    }
    vsr_st_close(fb);
}

/* Weights are finite, not all zero, and in the ranges the generator promises. */
TEST(weights_sane) {
    vsr_err e;
    vsr_fixture_opts o = opts("bf16");
    const char *d = write_pkg("sane", &o, NULL);
    vsr_st_file *f = NULL;
    CHECK_OK(vsr_st_open(path2(d, "model.safetensors"), NULL, &f, &e), e);
    if (!f) return;
    for (size_t i = 0; i < vsr_st_count(f); i++) {
        const vsr_tensor *t = vsr_st_at(f, i);
        float mn = 1e30f, mx = -1e30f;
        int64_t zeros = 0;
        for (int64_t k = 0; k < t->numel; k++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t->data + 2 * k, 2);
            float v = vsr_bf16_to_f32(h);
            if (v < mn) mn = v;
            if (v > mx) mx = v;
            zeros += v == 0.0f;
        }
        CHECK_MSG(zeros < t->numel, "%s is all zeros", t->name);
        float lim = 1.75f; /* embeddings: uniform(+-sqrt 3) */
        if (strstr(t->name, "layernorm") || strstr(t->name, "q_norm") || strstr(t->name, "k_norm") ||
            !strcmp(t->name, P "norm.weight"))
            lim = 0.126f; /* (1+w) norms: w near 0 */
        CHECK_MSG(mn >= -lim - 1e-6 && mx <= lim + 1e-6 && mn < mx, "%s in [%g, %g]", t->name, mn, mx);
        if (strstr(t->name, "linear_attn.norm.weight")) CHECK(mn >= 0.87f && mx <= 1.13f);
        if (strstr(t->name, "dt_bias")) CHECK(mn >= 0.49f && mx <= 1.51f);
    }
    vsr_st_close(f);
}

TEST(manifest_and_identity) {
    vsr_fixture_opts o = opts("w4a16-awq");
    vsr_fixture_info info;
    const char *d = write_pkg("man", &o, &info);
    json_t *m = load_json(path2(d, "MODEL_MANIFEST.json"));
    CHECK(m != NULL);
    if (!m) return;
    CHECK(!strcmp(json_string_value(json_object_get(m, "schema")), "d3-package-manifest/1"));
    CHECK(!strcmp(json_string_value(json_object_get(m, "model_name")), "d3-tiny-W4A16-AWQ"));
    json_t *fs = json_object_get(m, "files_sha256"), *fb = json_object_get(m, "files_bytes");
    CHECK(json_object_size(fs) == 7 && json_object_get(fs, "MODEL_MANIFEST.json") == NULL);
    const char *k;
    json_t *v;
    json_object_foreach(fs, k, v) {
        char h[65];
        uint64_t n = 0;
        vsr_err e;
        CHECK_OK(vsr_sha256_file(path2(d, k), h, &n, NULL, &e), e);
        CHECK_MSG(!strcmp(h, json_string_value(v)), "%s sha256", k);
        CHECK_MSG((json_int_t)n == json_integer_value(json_object_get(fb, k)), "%s bytes", k);
    }
    /* identity recomputed through the package layer's vsr_identity_model_sha256 */
    json_t *idf = json_object_get(json_object_get(m, "identity"), "files_sha256");
    const char *names[16], *shas[16];
    int n = 0;
    json_object_foreach(idf, k, v) {
        names[n] = k;
        shas[n++] = json_string_value(v);
    }
    CHECK(n == 5); /* model.safetensors, readout, tokenizer x2, chat template */
    json_t *dec = load_json(path2(d, "decision_config.json"));
    char id[65];
    vsr_err e;
    CHECK_OK(vsr_identity_model_sha256(n, names, shas, dec, id, &e), e);
    CHECK(!strcmp(id, json_string_value(json_object_get(json_object_get(m, "identity"), "model_sha256"))));
    CHECK(!strcmp(id, info.model_sha256));
    json_t *par = json_object_get(m, "parameters");
    CHECK(json_integer_value(json_object_get(par, "readout")) == 255 * 64);
    CHECK(json_integer_value(json_object_get(par, "loaded")) == info.params_loaded);
    /* codes: 255 distinct, each with its token id */
    json_t *codes = json_object_get(dec, "codes"), *ids = json_object_get(dec, "token_ids");
    CHECK(json_array_size(codes) == 255 && json_array_size(ids) == 255);
    CHECK(!strcmp(json_string_value(json_array_get(codes, 0)), "A") &&
          json_integer_value(json_array_get(ids, 0)) == 32);
    /* config.json: quantized configs are written by compressed-tensors with no newline */
    size_t len;
    char *cfg = test_read_file(path2(d, "config.json"), &len);
    CHECK(cfg && len > 0 && cfg[len - 1] == '}');
    CHECK(cfg && strstr(cfg, "\"rms_norm_eps\": 1e-06") && strstr(cfg, "\"rope_theta\": 10000000.0") &&
          strstr(cfg, "\"zp_dtype\": \"torch.int8\"") && strstr(cfg, "\"model_type\": \"qwen3_5_text\""));
    free(cfg);
    json_decref(dec);
    json_decref(m);
}

/* Python (tools/fixture_identity_oracle.py) recomputed each built-in's identity, checked the
 * safetensors bytes against the Python writer and the codes against HF tokenizers. */
TEST(oracle_and_builtins) {
    size_t n;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tests/data/fixture_oracle.jsonl", getenv("VSR_REPO") ? getenv("VSR_REPO") : ".");
    char *text = test_read_file(path, &n);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    if (!text) return;
    CHECK(vsr_builtin_fixture_count == 5);
    for (size_t i = 0; i < vsr_builtin_fixture_count; i++) {
        const vsr_builtin *b = &vsr_builtin_fixtures[i];
        char line[512];
        snprintf(line, sizeof line, "\"manifest_sha256\": \"%s\", \"model_sha256\": \"%s\", \"package\": \"%s\"",
                 b->manifest_sha256, b->model_sha256, strchr(b->repo, '/') + 1);
        CHECK_MSG(strstr(text, line) != NULL, "oracle does not confirm %s", b->repo);
        /* regenerate and compare */
        vsr_fixture_opts o;
        vsr_builtin_fixture_opts(b, &o);
        char rev[41];
        vsr_err e;
        CHECK_OK(vsr_fixture_revision(&o, rev, &e), e);
        CHECK_MSG(!strcmp(rev, b->revision), "%s: revision %s, recorded %s", b->repo, rev, b->revision);
        vsr_fixture_info info;
        char nm[64];
        snprintf(nm, sizeof nm, "bi-%zu", i);
        write_pkg(nm, &o, &info);
        CHECK_MSG(!strcmp(info.model_sha256, b->model_sha256), "%s model_sha256 %s", b->repo, info.model_sha256);
        CHECK_MSG(!strcmp(info.manifest_sha256, b->manifest_sha256), "%s manifest %s", b->repo, info.manifest_sha256);
        CHECK(info.params_loaded == b->parameters);
        CHECK(strlen(b->revision) == 40);
    }
    free(text);
    CHECK(vsr_builtin_fixture_find("d3-tiny") == &vsr_builtin_fixtures[0]);
    CHECK(vsr_builtin_fixture_find("vllm-sr-c/d3-tiny-NVFP4") == &vsr_builtin_fixtures[4]);
    CHECK(vsr_builtin_fixture_find("d3-nope") == NULL);
}

TEST(install_into_store) {
    char store[PATH_MAX], snap[PATH_MAX + 800];
    snprintf(store, sizeof store, "%s/store", test_tmpdir());
    vsr_err e;
    CHECK_OK(vsr_builtin_fixture_install(&vsr_builtin_fixtures[0], store, NULL, snap, sizeof snap, &e), e);
    char ref[PATH_MAX + 100];
    snprintf(ref, sizeof ref, "%s/models--vllm-sr-c--d3-tiny/refs/main", store);
    size_t n;
    char *r = test_read_file(ref, &n);
    CHECK(r && n == 40 && !strncmp(r, vsr_builtin_fixtures[0].revision, 40));
    free(r);
    char exp[PATH_MAX + 200];
    snprintf(exp, sizeof exp, "%s/models--vllm-sr-c--d3-tiny/snapshots/%s", store, vsr_builtin_fixtures[0].revision);
    CHECK(!strcmp(snap, exp));
    struct stat sb;
    CHECK(stat(path2(snap, "MODEL_MANIFEST.json"), &sb) == 0);
    char got[PATH_MAX], commit[41];
    CHECK_OK(vsr_store_resolve(store, "vllm-sr-c/d3-tiny", "main", got, sizeof got, commit, &e), e);
    CHECK(!strcmp(commit, vsr_builtin_fixtures[0].revision));
    /* installing again replaces the snapshot with the same bytes */
    CHECK_OK(vsr_builtin_fixture_install(&vsr_builtin_fixtures[0], store, NULL, snap, sizeof snap, &e), e);
    /* the runtime opens and verifies what we installed */
    vsr_package *p = NULL;
    vsr_status st = vsr_package_open("vllm-sr-c/d3-tiny", NULL, store, &p, &e);
    CHECK_OK(st, e);
    if (!st) {
        CHECK_OK(vsr_package_verify(p, 2, NULL, &e), e);
        CHECK(!strcmp(p->model_sha256, vsr_builtin_fixtures[0].model_sha256));
        vsr_package_close(p);
    }
    vsr_fixture_opts o = opts("bf16");
    char rev[41];
    st = vsr_fixture_install(store, "not-a-repo", &o, NULL, NULL, rev, NULL, 0, &e);
    CHECK_ERR(st, e, VSR_E_INVALID, "must be org/name");
    st = vsr_fixture_install(store, "a/../b", &o, NULL, NULL, rev, NULL, 0, &e);
    CHECK_ERR(st, e, VSR_E_INVALID, "must be org/name");
}

TEST(sharded) {
    vsr_fixture_opts o = opts("fp8");
    o.max_shard_bytes = 8000000; /* the 19 MB embedding gets its own shard, the rest one more */
    vsr_fixture_info info;
    const char *d = write_pkg("sharded", &o, &info);
    CHECK_MSG(info.n_shards == 2, "%d shards", info.n_shards);
    struct stat sb;
    CHECK(stat(path2(d, "model-00001-of-00002.safetensors"), &sb) == 0);
    CHECK(stat(path2(d, "model-00002-of-00002.safetensors"), &sb) == 0);
    CHECK(stat(path2(d, "model.safetensors"), &sb) != 0);
    vsr_weights *w = NULL;
    vsr_err e;
    CHECK_OK(vsr_weights_open(d, VSR_WEIGHTS_HEADERS, &w, &e), e);
    if (w) {
        CHECK(vsr_weights_find(w, P "embed_tokens.weight") != NULL);
        CHECK(vsr_weights_find(w, P "layers.3.self_attn.q_proj.weight_scale") != NULL);
        vsr_weights_close(w);
    }
    json_t *idx = load_json(path2(d, "model.safetensors.index.json"));
    CHECK(idx && json_object_size(json_object_get(idx, "weight_map")) > 50);
    json_decref(idx);
    json_t *m = load_json(path2(d, "MODEL_MANIFEST.json"));
    json_t *idf = json_object_get(json_object_get(m, "identity"), "files_sha256");
    CHECK(json_object_size(idf) == 6); /* 2 shards + 4 identity files, not the index */
    CHECK(json_object_get(json_object_get(m, "files_sha256"), "model.safetensors.index.json") != NULL);
    json_decref(m);
}

TEST(refusals) {
    vsr_err e;
    vsr_fixture_opts o = opts("bf16");
    o.family = "decision2";
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "unknown --family 'decision2'");
    o = opts("bf16");
    o.size = "huge";
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "unknown --size 'huge'");
    o = opts("int8");
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "unknown --scheme 'int8'");
    o = opts("w4a16-awq");
    o.actorder = true;
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "--actorder applies only to --scheme w4a16-gptq");
    o = opts("w4a16-gptq");
    o.group_size = 12;
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "--group-size 12 must be a positive multiple of 8");
    o.group_size = 128; /* K = 64 on tiny */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/refused", test_tmpdir());
    CHECK_ERR(vsr_fixture_write(dir, &o, NULL, &e), e, VSR_E_INVALID, "--group-size 128 does not divide K = 64");
    o.group_size = 24; /* multiple of 8, divides 192, not 128 (out_proj) */
    CHECK_ERR(vsr_fixture_write(dir, &o, NULL, &e), e, VSR_E_INVALID,
              "--group-size 24 does not divide K = 128 of model.language_model.layers.0.linear_attn.out_proj.weight");
    o = opts("fp8");
    o.group_size = 32;
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "--group-size applies only to the w4a16 schemes");
    o = opts("bf16");
    o.attention_mode = "sideways";
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "unknown --attention-mode 'sideways'");
    o = opts("bf16");
    const char *d = write_pkg("nonempty", &o, NULL);
    CHECK_ERR(vsr_fixture_write(d, &o, NULL, &e), e, VSR_E_INVALID, "folder is not empty");
    o.tokenizer_dir = "/nonexistent/tok";
    snprintf(dir, sizeof dir, "%s/notok", test_tmpdir());
    CHECK_ERR(vsr_fixture_write(dir, &o, NULL, &e), e, VSR_E_NOT_FOUND, "/nonexistent/tok/tokenizer.json");
}

TEST(sizes) {
    vsr_text_config c;
    CHECK(vsr_fixture_size_config("lite", &c) && c.hidden_size == 1024 && c.num_hidden_layers == 24 &&
          c.linear_num_value_heads == 16 && c.vocab_size == 248320);
    CHECK(c.layer_types[3] == VSR_LAYER_FULL_ATTENTION && c.layer_types[4] == VSR_LAYER_LINEAR_ATTENTION);
    CHECK(vsr_fixture_size_config("27b-shape", &c) && c.hidden_size == 5120 && c.num_hidden_layers == 64 &&
          c.num_attention_heads == 24 && c.num_key_value_heads == 4 && c.linear_num_value_heads == 48 &&
          c.intermediate_size == 17408);
    CHECK(!vsr_fixture_size_config("huge", &c));
    int n = 0;
    for (const char *const *s = vsr_fixture_size_names(); *s; s++) n++;
    CHECK(n == 4);
}

/* --like: the published packages' file sets, hard-coded from
 * /work/shared/spec/published-d3-pins.json (files_sha256 keys at the pinned revisions). */
static const char *const like_common[] = {"MODEL_MANIFEST.json", "config.json", "decision_config.json",
                                          "readout.safetensors", "tokenizer.json", "tokenizer_config.json",
                                          "chat_template.jinja", "preprocessor_config.json", NULL};
static const struct {
    const char *like, *name;
    int shards; /* 1: model.safetensors; else model-0000i-of-0000N + the index */
} like_sets[] = {
    {"vllm-sr/d3", "d3", 11}, {"d3-flash", "d3-flash", 4}, {"vllm-sr/d3-mini", "d3-mini", 2},
    {"d3-nano", "d3-nano", 1}, {"d3-lite", "d3-lite", 1},
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The folder's names, sorted, joined by '\n'. */
static void dir_listing(const char *d, char *out, size_t n) {
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "ls -1 '%s' | LC_ALL=C sort", d);
    FILE *f = popen(cmd, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;
    out[k] = 0;
    if (f) pclose(f);
}

static void expected_listing(int shards, char *out, size_t n) {
    const char *v[32];
    char shard[16][64];
    int k = 0;
    for (const char *const *c = like_common; *c; c++) v[k++] = *c;
    if (shards == 1) {
        v[k++] = "model.safetensors";
    } else {
        for (int i = 0; i < shards; i++) {
            snprintf(shard[i], sizeof shard[i], "model-%05d-of-%05d.safetensors", i + 1, shards);
            v[k++] = shard[i];
        }
        v[k++] = "model.safetensors.index.json";
    }
    qsort(v, (size_t)k, sizeof v[0], cmp_str);
    size_t l = 0;
    out[0] = 0;
    for (int i = 0; i < k; i++) l += (size_t)snprintf(out + l, n - l, "%s\n", v[i]);
}

TEST(like_layouts) {
    for (size_t li = 0; li < sizeof like_sets / sizeof like_sets[0]; li++) {
        vsr_fixture_opts o = opts("bf16");
        o.like = like_sets[li].like;
        vsr_fixture_info info;
        char nm[64];
        snprintf(nm, sizeof nm, "like-%s", like_sets[li].name);
        const char *d = write_pkg(nm, &o, &info);
        CHECK(vsr_fixture_like_shards(o.like) == like_sets[li].shards);
        /* the file set is the published one */
        char got[4096], want[4096];
        dir_listing(d, got, sizeof got);
        expected_listing(like_sets[li].shards, want, sizeof want);
        CHECK_MSG(!strcmp(got, want), "%s: files\n%s\nexpected\n%s", like_sets[li].name, got, want);
        CHECK(info.n_shards == like_sets[li].shards);
        json_t *m = load_json(path2(d, "MODEL_MANIFEST.json"));
        CHECK(m != NULL);
        if (!m) continue;
        CHECK(!strcmp(json_string_value(json_object_get(m, "model_name")), like_sets[li].name));
        json_t *fs = json_object_get(m, "files_sha256");
        CHECK(json_object_get(fs, "preprocessor_config.json") != NULL);
        CHECK((int)json_object_size(fs) == 7 + (like_sets[li].shards == 1 ? 1 : like_sets[li].shards + 1));
        /* config.json: a qwen3_5 checkpoint with a qwen3_5_vision tower */
        json_t *cfg = load_json(path2(d, "config.json"));
        json_t *vc = json_object_get(cfg, "vision_config"), *tc = json_object_get(cfg, "text_config");
        CHECK(!strcmp(json_string_value(json_object_get(cfg, "model_type")), "qwen3_5"));
        CHECK(!strcmp(json_string_value(json_object_get(tc, "model_type")), "qwen3_5_text"));
        CHECK(json_array_size(json_object_get(tc, "layer_types")) == 4);
        CHECK(!strcmp(json_string_value(json_object_get(vc, "model_type")), "qwen3_5_vision"));
        CHECK(json_integer_value(json_object_get(vc, "out_hidden_size")) == 64);
        CHECK(json_integer_value(json_object_get(cfg, "image_token_id")) == 151655 &&
              json_integer_value(json_object_get(cfg, "vision_start_token_id")) == 151652);
        json_t *pp = load_json(path2(d, "preprocessor_config.json"));
        CHECK(pp && json_integer_value(json_object_get(pp, "patch_size")) ==
                        json_integer_value(json_object_get(vc, "patch_size")) &&
              json_integer_value(json_object_get(pp, "merge_size")) ==
                  json_integer_value(json_object_get(vc, "spatial_merge_size")) &&
              !strcmp(json_string_value(json_object_get(pp, "image_processor_type")), "Qwen2VLImageProcessorFast"));
        json_decref(pp);
        /* every tensor from the headers: text under model.language_model., vision under
         * model.visual.; the index's weight_map names each one and the file holding it */
        json_t *idx = like_sets[li].shards > 1 ? load_json(path2(d, "model.safetensors.index.json")) : NULL;
        json_t *wm = json_object_get(idx, "weight_map");
        CHECK((like_sets[li].shards > 1) == (wm != NULL));
        int64_t vision = 0, text = 0;
        size_t n_tensors = 0;
        uint64_t data_bytes = 0;
        for (int sh = 0; sh < like_sets[li].shards; sh++) {
            char fname[64];
            if (like_sets[li].shards == 1) snprintf(fname, sizeof fname, "model.safetensors");
            else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", sh + 1, like_sets[li].shards);
            vsr_st_file *f = NULL;
            vsr_err e;
            CHECK_OK(vsr_st_open_header(path2(d, fname), fname, &f, &e), e);
            if (!f) continue;
            CHECK_MSG(vsr_st_count(f) > 0, "%s is empty", fname);
            for (size_t i = 0; i < vsr_st_count(f); i++) {
                const vsr_tensor *t = vsr_st_at(f, i);
                n_tensors++;
                data_bytes += t->nbytes;
                if (!strncmp(t->name, "model.visual.", 13)) vision += t->numel;
                else if (!strncmp(t->name, "model.language_model.", 21)) text += t->numel;
                else CHECK_MSG(0, "tensor %s under no known prefix", t->name);
                if (wm) {
                    const char *mapped = json_string_value(json_object_get(wm, t->name));
                    CHECK_MSG(mapped && !strcmp(mapped, fname), "%s: weight_map says %s, it is in %s", t->name,
                              mapped ? mapped : "(nothing)", fname);
                }
            }
            if (!strcmp(like_sets[li].name, "d3-lite")) {
                const vsr_tensor *pe = vsr_st_find(f, "model.visual.patch_embed.proj.weight");
                CHECK(pe && pe->ndim == 5 && pe->shape[0] == 64 && pe->shape[1] == 3 && pe->shape[2] == 2 &&
                      pe->shape[3] == 16 && pe->shape[4] == 16 && pe->dtype == VSR_DT_BF16);
                const vsr_tensor *mf = vsr_st_find(f, "model.visual.merger.linear_fc2.weight");
                CHECK(mf && mf->ndim == 2 && mf->shape[0] == 64 && mf->shape[1] == 256);
                CHECK(vsr_st_find(f, "model.visual.blocks.1.attn.qkv.bias") != NULL);
                CHECK(vsr_st_find(f, "model.visual.deepstack_merger_list.0.norm.weight") == NULL);
            }
            vsr_st_close(f);
        }
        if (wm) {
            CHECK_MSG(json_object_size(wm) == n_tensors, "weight_map has %zu names, the shards %zu tensors",
                      json_object_size(wm), n_tensors);
            CHECK((uint64_t)json_integer_value(json_object_get(json_object_get(idx, "metadata"), "total_size")) ==
                  data_bytes);
        }
        json_decref(idx);
        json_t *par = json_object_get(m, "parameters");
        CHECK(vision > 0 && vision == info.params_vision);
        CHECK(json_integer_value(json_object_get(par, "vision")) == vision);
        CHECK(json_integer_value(json_object_get(par, "text")) == text && text == 10007800);
        CHECK(json_integer_value(json_object_get(par, "loaded")) == text + vision + 255 * 64);
        /* the runtime's package layer: opens, verifies, counts vision apart and loads text + readout */
        vsr_package *p = NULL;
        vsr_err e;
        char real[PATH_MAX];
        CHECK(realpath(d, real) != NULL);
        vsr_status st = vsr_package_open(real, NULL, NULL, &p, &e);
        CHECK_OK(st, e);
        if (!st) {
            CHECK_OK(vsr_package_verify(p, 2, NULL, &e), e);
            CHECK(p->params_vision == vision && p->params_text == text);
            CHECK(vsr_package_params_loaded(p) == text + 255 * 64);
            CHECK(!strcmp(p->model_sha256, info.model_sha256));
            vsr_package_close(p);
        }
        json_decref(cfg);
        json_decref(m);
    }
}

/* A changed byte of a vision tensor (never loaded) is still refused by the hash check. */
TEST(like_tampered_vision) {
    vsr_fixture_opts o = opts("bf16");
    o.like = "d3";
    const char *d = write_pkg("like-tamper", &o, NULL);
    char real[PATH_MAX];
    CHECK(realpath(d, real) != NULL);
    vsr_weights *w = NULL;
    vsr_err e;
    CHECK_OK(vsr_weights_open(real, VSR_WEIGHTS_HEADERS, &w, &e), e);
    if (!w) return;
    const vsr_tensor *t = vsr_weights_find(w, "model.visual.pos_embed.weight");
    CHECK(t != NULL);
    char file[PATH_MAX + 256];
    uint64_t off = t ? t->offset + 5 : 0;
    snprintf(file, sizeof file, "%s/%s", real, t ? t->file : "");
    vsr_weights_close(w);
    if (!t) return;
    FILE *f = fopen(file, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    int c = (fseek(f, (long)off, SEEK_SET), fgetc(f));
    fseek(f, (long)off, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
    vsr_package *p = NULL;
    vsr_status st = vsr_package_open(real, NULL, NULL, &p, &e);
    CHECK_OK(st, e); /* sizes and headers are intact: only the hash tells */
    if (!st) {
        const char *base = strrchr(file, '/') + 1;
        CHECK_ERR(vsr_package_verify(p, 2, NULL, &e), e, VSR_E_INTEGRITY, "sha256 mismatch");
        CHECK_MSG(strstr(e.msg, base) != NULL, "the message names %s: %s", base, e.msg);
        vsr_package_close(p);
    }
}

TEST(like_options) {
    vsr_err e;
    vsr_fixture_opts o = opts("bf16");
    o.like = "d3-huge";
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "unknown --like 'd3-huge'");
    o = opts("fp8");
    o.like = "d3-lite";
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "--like applies only to --scheme bf16");
    o = opts("bf16");
    o.like = "d3";
    o.max_shard_bytes = 1000000;
    CHECK_ERR(vsr_fixture_check(&o, &e), e, VSR_E_INVALID, "--max-shard-bytes does not apply with --like");
    /* the recipe names the layout; without --like the recipe (and every revision) is as before */
    char r1[512], r2[512];
    o = opts("bf16");
    CHECK_OK(vsr_fixture_recipe_string(&o, r1, sizeof r1, &e), e);
    CHECK(strstr(r1, "like=") == NULL && strstr(r1, "model_name=d3-tiny"));
    o.like = "vllm-sr/d3-lite";
    CHECK_OK(vsr_fixture_recipe_string(&o, r2, sizeof r2, &e), e);
    CHECK(strstr(r2, " like=d3-lite") && strstr(r2, "model_name=d3-lite"));
    int n = 0;
    for (const char *const *s = vsr_fixture_like_names(); *s; s++) n++;
    CHECK(n == 5 && vsr_fixture_like_shards("d3-nano") == 1 && vsr_fixture_like_shards("d3-edge") == 0);
    /* deterministic: the same layout twice gives the same manifest */
    vsr_fixture_info a, b;
    o = opts("bf16");
    o.like = "d3-mini";
    write_pkg("like-det-a", &o, &a);
    write_pkg("like-det-b", &o, &b);
    CHECK(!strcmp(a.manifest_sha256, b.manifest_sha256) && !strcmp(a.model_sha256, b.model_sha256));
}

int main(void) {
    RUN(deterministic_and_recorded);
    RUN(tensor_sets_per_scheme);
    RUN(quantized_equals_quantizer_on_bf16);
    RUN(weights_sane);
    RUN(manifest_and_identity);
    RUN(oracle_and_builtins);
    RUN(install_into_store);
    RUN(sharded);
    RUN(refusals);
    RUN(sizes);
    RUN(like_layouts);
    RUN(like_tampered_vision);
    RUN(like_options);
    return test_summary();
}
