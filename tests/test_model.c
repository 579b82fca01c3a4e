/* tests/test_model.c: the qwen3_5 forward and Decision 3.0 readout against transformers.
 *
 * The files in tests/data/reference/ were made by tools/make_transformers_reference.py from
 * transformers' Qwen3_5TextModel (FP32) on fixture packages; each file records the fixture
 * options. Here the same packages are regenerated with vsr_fixture_write, opened, verified,
 * mapped and loaded, the same prompts run, and the final-norm hidden state (relative error
 * <= 1e-3) and option probabilities (<= 1e-3 absolute) compared. Also: batched rows equal
 * the rows run alone, runs are bit-identical, and the refusals. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "test.h"
#include "vsr/fixture.h"
#include "vsr/model.h"
#include "vsr/package.h"

#ifndef VSR_REPO_DIR
#define VSR_REPO_DIR "."
#endif

static const char *const ref_files[] = {
    "d3-tiny-bf16-causal.json",
    "d3-tiny-bf16-noncausal.json",
    "d3-tiny-w4a16-gptq-actorder-causal.json",
    "d3-tiny-w4a16-gptq-actorder-noncausal.json",
    "d3-tiny-w4a16-awq-causal.json",
    "d3-tiny-w4a16-awq-noncausal.json",
    /* tiny's only full-attention layer is its last, where the last token sees every key
     * either way; small has one in the middle, so these two tell the modes apart */
    "d3-small-bf16-causal.json",
    "d3-small-bf16-noncausal.json",
};
#define N_REF (sizeof ref_files / sizeof *ref_files)

/* ---- helpers ---- */

static int b64val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes base64 little-endian float32; returns the count. */
static size_t b64_floats(const char *s, float *out, size_t max) {
    size_t nb = 0;
    uint32_t acc = 0;
    int bits = 0;
    unsigned char *bytes = (unsigned char *)out;
    for (; *s && *s != '='; s++) {
        int v = b64val(*s);
        if (v < 0) continue;
        acc = (acc << 6) | (uint32_t)v, bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (nb < max * 4) bytes[nb] = (unsigned char)(acc >> bits);
            nb++;
        }
    }
    return nb / 4;
}

static int32_t *prompt_ids(int64_t seed, int n, int64_t vocab) {
    int32_t *r = malloc(sizeof *r * (size_t)n);
    for (int64_t i = 0; i < n; i++) r[i] = (int32_t)((seed * 1000003 + i * 7919 + (i * i) % 104729) % vocab);
    return r;
}

static const char *ref_dir(void) {
    const char *r = getenv("VSR_REPO");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/data/reference", r && *r ? r : VSR_REPO_DIR);
    return buf;
}

static json_t *load_ref(const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", ref_dir(), name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fprintf(stderr, "%s: %s\n", path, je.text);
    return j;
}

/* Writes the fixture the reference file names into a fresh folder; opens, verifies, maps. */
static vsr_package *open_fixture(json_t *fx, const char *tag, bool map) {
    static int n;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/pkg-%d-%s", test_tmpdir(), n++, tag);
    vsr_fixture_opts o = {
        .family = json_string_value(json_object_get(fx, "family")),
        .size = json_string_value(json_object_get(fx, "size")),
        .scheme = json_string_value(json_object_get(fx, "scheme")),
        .seed = (uint64_t)json_integer_value(json_object_get(fx, "seed")),
        .attention_mode = json_string_value(json_object_get(fx, "attention_mode")),
        .actorder = json_is_true(json_object_get(fx, "actorder")),
    };
    vsr_err err = {0};
    vsr_status st = vsr_fixture_write(dir, &o, NULL, &err);
    CHECK_OK(st, err);
    if (st) return NULL;
    if (map) return test_open_package(dir);
    vsr_package *p = NULL;
    st = vsr_package_open(dir, NULL, NULL, &p, &err);
    CHECK_OK(st, err);
    return st ? NULL : p;
}

static vsr_model *load_model(const vsr_package *p, int threads) {
    vsr_model_opts o = {.threads = threads};
    vsr_model *m = NULL;
    vsr_err err = {0};
    vsr_status st = vsr_model_load(p, &o, &m, &err);
    CHECK_OK(st, err);
    return st ? NULL : m;
}

typedef struct case_rows {
    int n;
    int32_t *ids[8];
    int lens[8];
} case_rows;

static void case_from_json(json_t *c, int64_t vocab, case_rows *cr) {
    json_t *rows = json_object_get(c, "rows");
    cr->n = (int)json_array_size(rows);
    for (int r = 0; r < cr->n && r < 8; r++) {
        json_t *row = json_array_get(rows, (size_t)r);
        cr->lens[r] = (int)json_integer_value(json_object_get(row, "len"));
        cr->ids[r] = prompt_ids(json_integer_value(json_object_get(row, "seed")), cr->lens[r], vocab);
    }
}

static void case_free(case_rows *cr) {
    for (int r = 0; r < cr->n; r++) free(cr->ids[r]);
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

/* softmax(logits[:n] / T) in double */
static void softmax_n(const float *lg, int n, double T, double *p) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, lg[i] / T);
    for (int i = 0; i < n; i++) s += p[i] = exp(lg[i] / T - mx);
    for (int i = 0; i < n; i++) p[i] /= s;
}

/* ---- against transformers ---- */

static double worst_hidden, worst_prob;
static int64_t longest;

static void check_reference(const char *file) {
    json_t *ref = load_ref(file);
    CHECK_MSG(ref != NULL, "%s: cannot read the reference file", file);
    if (!ref) return;
    vsr_package *p = open_fixture(json_object_get(ref, "fixture"), "ref", true);
    vsr_model *m = p ? load_model(p, 2) : NULL;
    if (!m) goto out;
    const int64_t D = vsr_model_hidden_size(m), V = json_integer_value(json_object_get(ref, "vocab_size"));
    CHECK(D == json_integer_value(json_object_get(ref, "hidden_size")));
    CHECK(!strcmp(p->decision.attention_mode, json_string_value(json_object_get(ref, "attention_mode"))));
    const double T = json_real_value(json_object_get(ref, "temperature"));
    CHECK(fabs(T - p->decision.temperature) < 1e-12);
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(ref, "cases"), ci, c) {
        case_rows cr;
        case_from_json(c, V, &cr);
        float *hid = malloc(sizeof(float) * (size_t)(cr.n * D)), *lg = malloc(sizeof(float) * 255 * (size_t)cr.n);
        float *want = malloc(sizeof(float) * (size_t)(D > 255 ? D : 255));
        vsr_err err = {0};
        vsr_status st = vsr_model_forward_last(m, cr.n, (const int32_t *const *)cr.ids, cr.lens, hid, lg, &err);
        CHECK_OK(st, err);
        for (int r = 0; !st && r < cr.n; r++) {
            json_t *row = json_array_get(json_object_get(c, "rows"), (size_t)r);
            if (cr.lens[r] > longest) longest = cr.lens[r];
            size_t nh = b64_floats(json_string_value(json_object_get(row, "hidden_f32_b64")), want, (size_t)D);
            CHECK(nh == (size_t)D);
            double e = rel_err(hid + r * D, want, D);
            if (e > worst_hidden) worst_hidden = e;
            CHECK_MSG(e <= 1e-3, "%s case %zu row %d (len %d): hidden relative error %.3g", file, ci, r, cr.lens[r], e);
            const char *ks;
            json_t *pv;
            json_object_foreach(json_object_get(row, "probs"), ks, pv) {
                int n = atoi(ks);
                double pr[255];
                softmax_n(lg + r * 255, n, T, pr);
                for (int i = 0; i < n; i++) {
                    double d = fabs(pr[i] - json_real_value(json_array_get(pv, (size_t)i)));
                    if (d > worst_prob) worst_prob = d;
                    CHECK_MSG(d <= 1e-3, "%s case %zu row %d: p[%d of %d] off by %.3g", file, ci, r, i, n, d);
                }
            }
            /* all 255 options: against the softmax of transformers' logits */
            size_t nl = b64_floats(json_string_value(json_object_get(row, "logits_f32_b64")), want, 255);
            CHECK(nl == 255);
            double pa[255], pb[255];
            softmax_n(lg + r * 255, 255, T, pa);
            softmax_n(want, 255, T, pb);
            for (int i = 0; i < 255; i++) {
                double d = fabs(pa[i] - pb[i]);
                if (d > worst_prob) worst_prob = d;
                CHECK_MSG(d <= 1e-3, "%s case %zu row %d: p255[%d] off by %.3g", file, ci, r, i, d);
            }
        }
        free(hid);
        free(lg);
        free(want);
        case_free(&cr);
    }
out:
    vsr_model_free(m);
    vsr_package_close(p);
    json_decref(ref);
}

TEST(bf16_causal_matches_transformers) { check_reference(ref_files[0]); }
TEST(bf16_noncausal_matches_transformers) { check_reference(ref_files[1]); }
TEST(gptq_actorder_causal_matches_transformers) { check_reference(ref_files[2]); }
TEST(gptq_actorder_noncausal_matches_transformers) { check_reference(ref_files[3]); }
TEST(awq_causal_matches_transformers) { check_reference(ref_files[4]); }
TEST(awq_noncausal_matches_transformers) { check_reference(ref_files[5]); }

TEST(small_causal_matches_transformers) { check_reference(ref_files[6]); }
TEST(small_noncausal_matches_transformers) { check_reference(ref_files[7]); }

TEST(attention_modes_give_different_references) {
    /* guards the check above: if the two modes agreed, a forward that ignored
     * attention_mode would pass */
    json_t *a = load_ref(ref_files[6]), *b = load_ref(ref_files[7]);
    if (!a || !b) {
        CHECK(!"reference files missing");
    } else {
        json_t *ra = json_array_get(json_object_get(json_array_get(json_object_get(a, "cases"), 2), "rows"), 0);
        json_t *rb = json_array_get(json_object_get(json_array_get(json_object_get(b, "cases"), 2), "rows"), 0);
        float ha[1024], hb[1024];
        size_t na = b64_floats(json_string_value(json_object_get(ra, "hidden_f32_b64")), ha, 1024);
        size_t nb = b64_floats(json_string_value(json_object_get(rb, "hidden_f32_b64")), hb, 1024);
        CHECK(na == nb && na > 0);
        double e = rel_err(ha, hb, (int64_t)na);
        CHECK_MSG(e > 1e-2, "causal and noncausal references differ by only %.3g", e);
    }
    json_decref(a);
    json_decref(b);
}

TEST(reference_covers_long_and_short_prompts) {
    /* The cases above must have run 1 token through >= 2,048 tokens. */
    CHECK_MSG(longest >= 2048, "longest prompt checked was %lld tokens", (long long)longest);
    printf("  worst hidden relative error %.3g, worst probability difference %.3g\n", worst_hidden, worst_prob);
}

/* ---- batching and determinism ---- */

static void check_batch_vs_alone(const char *file) {
    json_t *ref = load_ref(file);
    if (!ref) return;
    vsr_package *p = open_fixture(json_object_get(ref, "fixture"), "batch", true);
    vsr_model *m = p ? load_model(p, 2) : NULL;
    if (!m) goto out;
    const int64_t D = vsr_model_hidden_size(m);
    /* rows of different lengths, so every short row is left-padded in the batch */
    case_rows cr = {.n = 5, .lens = {3, 40, 1, 17, 9}};
    for (int r = 0; r < cr.n; r++) cr.ids[r] = prompt_ids(100 + r, cr.lens[r], p->config.text.vocab_size);
    float hb[5 * 512], lb[5 * 255], h1[512], l1[255];
    vsr_err err = {0};
    vsr_status st = vsr_model_forward_last(m, cr.n, (const int32_t *const *)cr.ids, cr.lens, hb, lb, &err);
    CHECK_OK(st, err);
    for (int r = 0; !st && r < cr.n; r++) {
        st = vsr_model_forward_last(m, 1, (const int32_t *const *)&cr.ids[r], &cr.lens[r], h1, l1, &err);
        CHECK_OK(st, err);
        double e = rel_err(hb + r * D, h1, D), el = rel_err(lb + r * 255, l1, 255);
        CHECK_MSG(e <= 1e-5 && el <= 1e-5, "%s row %d (len %d): batched vs alone hidden %.3g logits %.3g", file, r,
                  cr.lens[r], e, el);
    }
    case_free(&cr);
out:
    vsr_model_free(m);
    vsr_package_close(p);
    json_decref(ref);
}

TEST(batched_rows_equal_rows_alone_causal) { check_batch_vs_alone(ref_files[0]); }
TEST(batched_rows_equal_rows_alone_noncausal) { check_batch_vs_alone(ref_files[7]); }

TEST(runs_are_bit_identical) {
    json_t *ref = load_ref(ref_files[3]);
    if (!ref) return;
    vsr_package *p = open_fixture(json_object_get(ref, "fixture"), "det", true);
    vsr_model *m = p ? load_model(p, 2) : NULL;
    if (m) {
        const int64_t D = vsr_model_hidden_size(m);
        case_rows cr = {.n = 3, .lens = {300, 7, 65}};
        for (int r = 0; r < cr.n; r++) cr.ids[r] = prompt_ids(200 + r, cr.lens[r], p->config.text.vocab_size);
        float *a = calloc((size_t)(3 * D + 3 * 255), sizeof(float)), *b = calloc((size_t)(3 * D + 3 * 255), sizeof(float));
        vsr_err err = {0};
        for (int k = 0; k < 3; k++) {
            float *o = k ? b : a;
            vsr_status st = vsr_model_forward_last(m, cr.n, (const int32_t *const *)cr.ids, cr.lens, o, o + 3 * D, &err);
            CHECK_OK(st, err);
            if (k) CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)(3 * D + 3 * 255)), "run %d differs from run 0", k);
        }
        /* hidden only (logits NULL) gives the same hidden state */
        vsr_status st = vsr_model_forward_last(m, cr.n, (const int32_t *const *)cr.ids, cr.lens, b, NULL, &err);
        CHECK_OK(st, err);
        CHECK(!memcmp(a, b, sizeof(float) * (size_t)(3 * D)));
        free(a);
        free(b);
        case_free(&cr);
    }
    vsr_model_free(m);
    vsr_package_close(p);
    json_decref(ref);
}

/* ---- refusals and errors ---- */

TEST(cpu_backend_refuses_fp8_and_nvfp4_weights) {
    vsr_backend be;
    vsr_err err = {0};
    vsr_status st = vsr_backend_cpu_new(1, &be, &err);
    CHECK_OK(st, err);
    if (st) return;
    uint8_t w[64] = {1};
    uint16_t s[8] = {0x3f80};
    vsr_bweight *bw = NULL;
    vsr_weight_view v = {.kind = VSR_WK_FP8, .N = 8, .K = 8, .w = w, .scale = s, .name = "x.fp8"};
    st = be.ops->weight_upload(be.ctx, &v, &bw, &err);
    CHECK_ERR(st, err, VSR_E_DEVICE, VSR_REFUSAL_FP8);
    CHECK(strstr(err.msg, "x.fp8") && strstr(err.msg, "CPU"));
    v = (vsr_weight_view){.kind = VSR_WK_NVFP4, .N = 8, .K = 16, .w = w, .scale = w, .global_scale = 1, .name = "x.nvfp4"};
    st = be.ops->weight_upload(be.ctx, &v, &bw, &err);
    CHECK_ERR(st, err, VSR_E_DEVICE, VSR_REFUSAL_NVFP4);
    CHECK(strstr(err.msg, "CPU") != NULL);
    /* and it takes the kinds it can run */
    v = (vsr_weight_view){.kind = VSR_WK_BF16, .N = 4, .K = 8, .w = w, .name = "x.bf16"};
    st = be.ops->weight_upload(be.ctx, &v, &bw, &err);
    CHECK_OK(st, err);
    if (!st) {
        CHECK(be.ops->weight_bytes(be.ctx, bw) == 4 * 8 * 2);
        be.ops->weight_free(be.ctx, bw);
    }
    vsr_backend_destroy(&be);
}

static void refuse_scheme(const char *scheme, const char *reason) {
    char cmd[64];
    snprintf(cmd, sizeof cmd, "%s", scheme);
    json_t *fx = json_pack("{s:s,s:s,s:s,s:i,s:s,s:b}", "family", "decision3", "size", "tiny", "scheme", cmd, "seed", 5,
                           "attention_mode", "causal", "actorder", 0);
    vsr_package *p = open_fixture(fx, scheme, true);
    if (p) {
        vsr_model *m = NULL;
        vsr_err err = {0};
        vsr_status st = vsr_model_load(p, NULL, &m, &err);
        CHECK_ERR(st, err, VSR_E_DEVICE, reason);
        CHECK(m == NULL);
        vsr_package_close(p);
    }
    json_decref(fx);
}

TEST(model_load_refuses_fp8_package_on_cpu) { refuse_scheme("fp8", VSR_REFUSAL_FP8); }
TEST(model_load_refuses_nvfp4_package_on_cpu) { refuse_scheme("nvfp4", VSR_REFUSAL_NVFP4); }

TEST(model_load_refuses_unmapped_package) {
    json_t *fx = json_pack("{s:s,s:s,s:s,s:i,s:s,s:b}", "family", "decision3", "size", "tiny", "scheme", "bf16", "seed", 5,
                           "attention_mode", "causal", "actorder", 0);
    vsr_package *p = open_fixture(fx, "unmapped", false);
    if (p) {
        vsr_model *m = NULL;
        vsr_err err = {0};
        vsr_status st = vsr_model_load(p, NULL, &m, &err);
        CHECK_ERR(st, err, VSR_E_INVALID, "not mapped");
        CHECK(m == NULL);
        vsr_package_close(p);
    }
    json_decref(fx);
}

TEST(load_options_and_bad_inputs_are_refused) {
    json_t *fx = json_pack("{s:s,s:s,s:s,s:i,s:s,s:b}", "family", "decision3", "size", "tiny", "scheme", "bf16", "seed", 5,
                           "attention_mode", "causal", "actorder", 0);
    vsr_package *p = open_fixture(fx, "opts", true);
    json_decref(fx);
    if (!p) return;
    vsr_err err = {0};
    vsr_model *m = NULL;
    vsr_device gpu = {.kind = VSR_DEV_ROCM};
    vsr_model_opts o = {.device = &gpu};
    vsr_status st = vsr_model_load(p, &o, &m, &err);
    CHECK_ERR(st, err, VSR_E_UNSUPPORTED, "no ROCm backend");
    CHECK(m == NULL);
    o = (vsr_model_opts){.dtype = "float16"};
    st = vsr_model_load(p, &o, &m, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "--dtype float16");
    o = (vsr_model_opts){.dtype = "bfloat16"}; /* a GPU rule; the CPU computes FP32 activations */
    st = vsr_model_load(p, &o, &m, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "cpu: --dtype bfloat16 is not available on the CPU");
    o = (vsr_model_opts){.threads = -1};
    st = vsr_model_load(p, &o, &m, &err);
    CHECK_ERR(st, err, VSR_E_INVALID, "threads");
    CHECK(vsr_model_load(NULL, NULL, &m, &err) == VSR_E_INVALID);

    m = load_model(p, 1);
    if (m) {
        int32_t ids[3] = {1, 2, (int32_t)p->config.text.vocab_size};
        const int32_t *rows[1] = {ids};
        int len = 3;
        float h[64 * 2], lg[255];
        st = vsr_model_forward_last(m, 1, rows, &len, h, lg, &err);
        CHECK_ERR(st, err, VSR_E_INVALID, "outside the vocabulary");
        ids[2] = -1;
        st = vsr_model_forward_last(m, 1, rows, &len, h, lg, &err);
        CHECK_ERR(st, err, VSR_E_INVALID, "outside the vocabulary");
        len = 0;
        st = vsr_model_forward_last(m, 1, rows, &len, h, lg, &err);
        CHECK_ERR(st, err, VSR_E_INVALID, "no tokens");
        st = vsr_model_forward_last(m, 0, rows, &len, h, lg, &err);
        CHECK_ERR(st, err, VSR_E_INVALID, "at least one row");
        /* a model still works after refused calls */
        ids[2] = 3, len = 3;
        st = vsr_model_forward_last(m, 1, rows, &len, h, lg, &err);
        CHECK_OK(st, err);
        /* memory: the stored weights (kept mapped) plus the FP32 copies of small vectors */
        uint64_t mem = vsr_model_memory_bytes(m), stored = vsr_weights_total_bytes(p->weights);
        CHECK_MSG(mem >= stored && mem <= stored + stored / 4 + 255 * 64 * 4, "memory %llu for %llu stored bytes",
                  (unsigned long long)mem, (unsigned long long)stored);
        CHECK(vsr_model_hidden_size(m) == 64);
        vsr_model_free(m);
    }
    vsr_model_free(NULL);
    vsr_package_close(p);
}

/* ---- the bf16 readout path (fixtures carry FP32 readouts) ---- */

TEST(bf16_readout_rounds_like_torch) {
    vsr_backend be;
    vsr_err err = {0};
    if (vsr_backend_cpu_new(2, &be, &err)) return;
    enum { M = 3, N = 255, D = 40 };
    static uint16_t R[N * D];
    float h[M * D], got[M * N];
    for (int i = 0; i < N * D; i++) R[i] = vsr_f32_to_bf16((float)((i * 37 % 101) - 50) / 97.0f);
    for (int i = 0; i < M * D; i++) h[i] = (float)((i * 13 % 29) - 14) / 7.3f;
    vsr_bweight *w = NULL;
    vsr_weight_view v = {.kind = VSR_WK_BF16, .N = N, .K = D, .w = R, .name = "readout"};
    vsr_status st = be.ops->weight_upload(be.ctx, &v, &w, &err);
    CHECK_OK(st, err);
    if (!st) st = be.ops->readout(be.ctx, h, M, w, got, &err);
    CHECK_OK(st, err);
    for (int r = 0; !st && r < M; r++)
        for (int n = 0; n < N; n++) {
            float acc = 0;
            for (int k = 0; k < D; k++) acc += vsr_bf16_to_f32(vsr_f32_to_bf16(h[r * D + k])) * vsr_bf16_to_f32(R[n * D + k]);
            float want = vsr_bf16_to_f32(vsr_f32_to_bf16(acc));
            /* one bf16 step apart at most (FP32 summation order) and always on the bf16 grid */
            CHECK(fabsf(got[r * N + n] - want) <= fabsf(want) * (1.0f / 128) + 1e-30f);
            CHECK(vsr_bf16_to_f32(vsr_f32_to_bf16(got[r * N + n])) == got[r * N + n]);
        }
    be.ops->weight_free(be.ctx, w);
    vsr_backend_destroy(&be);
}

int main(void) {
    RUN(bf16_causal_matches_transformers);
    RUN(bf16_noncausal_matches_transformers);
    RUN(gptq_actorder_causal_matches_transformers);
    RUN(gptq_actorder_noncausal_matches_transformers);
    RUN(awq_causal_matches_transformers);
    RUN(awq_noncausal_matches_transformers);
    RUN(small_causal_matches_transformers);
    RUN(small_noncausal_matches_transformers);
    RUN(attention_modes_give_different_references);
    RUN(reference_covers_long_and_short_prompts);
    RUN(batched_rows_equal_rows_alone_causal);
    RUN(batched_rows_equal_rows_alone_noncausal);
    RUN(runs_are_bit_identical);
    RUN(cpu_backend_refuses_fp8_and_nvfp4_weights);
    RUN(model_load_refuses_fp8_package_on_cpu);
    RUN(model_load_refuses_nvfp4_package_on_cpu);
    RUN(model_load_refuses_unmapped_package);
    RUN(load_options_and_bad_inputs_are_refused);
    RUN(bf16_readout_rounds_like_torch);
    return test_summary();
}
