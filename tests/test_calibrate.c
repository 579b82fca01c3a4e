/* tests/test_calibrate.c: OUR calibrated int4 quantizers (vsr_calib_collect + GPTQ / AWQ as
 * `vllm-srun quantize` writes them) against llm-compressor on the same BF16 fixture and the same
 * calibration file, and our FP8 / NVFP4 round-to-nearest against llm-compressor's bytes.
 *
 * The references, tests/data/reference/llmcompressor_{gptq,awq,rtn}_<size>.json, were written by
 * tools/llmcompressor_reference.py (its docstring gives the method; llm-compressor's versions,
 * recipe, calibration sha256 and token count are in each file). For every quantized Linear:
 *
 *   error = sqrt( (1/T) sum_t || W x_t - diag(r) Wq diag(1/c) x_t ||^2 )
 *         = sqrt( tr(E H E^T) / T ),  E = W - diag(r) Wq diag(1/c),  H = sum_t x_t x_t^T
 *
 * W the original BF16 weight, Wq the stored weight dequantized, c / r AWQ's scales of its input
 * columns / output rows (1 for GPTQ and for Linears AWQ does not touch). The script takes x_t
 * from transformers' FP32 forward; here H is OUR calibration Hessian (our forward, the same
 * tokens). That both measure the same thing is checked, not assumed: plain round-to-nearest
 * (whose bytes equal compressed-tensors', tests/sh/quantize.sh) must give the script's RTN error
 * per layer within RTN_AGREE.
 *
 * Checks, per layer: ours <= 1.05 x llm-compressor's (GPTQ and AWQ), and the ratio is printed.
 * The bound has teeth: plain RTN in place of GPTQ must fail it on most layers. For AWQ the test
 * needs the scales c, r our writer applied (the package does not store them): per mapping, in the
 * writer's order, it finds which of AWQ's 20 candidate scales (computed here from llm-compressor's
 * formula) reproduces the package's int4 tensors byte for byte, then checks every Linear's final
 * bytes. FP8_DYNAMIC and NVFP4A16: every tensor our writer stores for a quantized Linear has
 * llm-compressor's dtype, shape and sha256, and we store no other tensor for those Linears.
 *
 * Where the fixture generator or the calibration file changes, the references must be remade
 * (docs/quantize.md, "How our GPTQ/AWQ compare with llm-compressor"); the test says so. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quantize/quant_internal.h"
#include "quantize/quantize_internal.h"
#include "test.h"
#include "vsr/calibrate.h"
#include "vsr/dtype.h"
#include "vsr/fixture.h"
#include "vsr/hash.h"
#include "vsr/package.h"
#include "vsr/quant.h"
#include "vsr/quantize_pkg.h"
#include "vsr/safetensors.h"

#define BOUND 1.05
/* Our forward vs transformers' FP32 forward, seen through the RTN error of each layer (measured:
 * within 5e-8 on tiny). */
#define RTN_AGREE 1e-3

static const char *repo(void) {
    const char *r = getenv("VSR_REPO");
    return r && *r ? r : ".";
}

static json_t *load_ref(const char *algo, const char *size) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/data/reference/llmcompressor_%s_%s.json", repo(), algo, size);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECK_MSG(j != NULL, "%s: %s", path, je.text);
    return j;
}

static const char *jstr(json_t *o, const char *path1, const char *path2) {
    json_t *v = json_object_get(o, path1);
    if (path2) v = json_object_get(v, path2);
    return json_is_string(v) ? json_string_value(v) : "";
}

static long long jint(json_t *o, const char *path1, const char *path2) {
    json_t *v = json_object_get(o, path1);
    if (path2) v = json_object_get(v, path2);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* sqrt(sum_n e_n^T H e_n / T), e_n[k] = w[n,k] - r[n] wq[n,k] / c[k] (c, r NULL = 1). */
static double out_error(const uint16_t *w, const uint16_t *wq, const double *c, const double *r, int64_t N, int64_t K,
                        const double *H, int64_t T) {
    double *e = malloc(sizeof *e * (size_t)K), acc = 0.0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) {
            double q = vsr_bf16_to_f32(wq[n * K + k]);
            if (c) q /= c[k];
            if (r) q *= r[n];
            e[k] = (double)vsr_bf16_to_f32(w[n * K + k]) - q;
        }
        acc += vsr_qform(H, e, K);
    }
    free(e);
    return sqrt(acc / (double)T);
}

typedef struct setup {
    const char *size;
    json_t *gptq, *awq, *rtn;
    char bf16_dir[512], calib_path[4200];
    int samples, group;
    vsr_package *bf16;
    vsr_calib *calib;
} setup;

static vsr_package *open_pkg(const char *dir) { return test_open_package(dir); }

static const vsr_tensor *tensor(const vsr_package *p, const char *module, const char *suffix) {
    char name[400];
    snprintf(name, sizeof name, "%s.%s", module, suffix);
    const vsr_tensor *t = vsr_weights_find(p->weights, name);
    CHECK_MSG(t != NULL, "%s: no tensor %s", p->path, name);
    return t;
}

/* The fixture and the calibration statistics the references were made from. */
static bool setup_open(setup *s, const char *size) {
    memset(s, 0, sizeof *s);
    s->size = size;
    s->gptq = load_ref("gptq", size), s->awq = load_ref("awq", size), s->rtn = load_ref("rtn", size);
    if (!s->gptq || !s->awq || !s->rtn) return false;
    json_t *fx = json_object_get(s->gptq, "fixture");
    snprintf(s->bf16_dir, sizeof s->bf16_dir, "%s/%s-bf16", test_tmpdir(), size);
    vsr_fixture_opts fo = {.family = "decision3", .size = size, .scheme = "bf16",
                           .seed = (uint64_t)jint(fx, "seed", NULL), .attention_mode = jstr(fx, "attention_mode", NULL)};
    vsr_err e = {0};
    vsr_status st = vsr_fixture_write(s->bf16_dir, &fo, NULL, &e);
    CHECK_OK(st, e);
    if (st || !(s->bf16 = open_pkg(s->bf16_dir))) return false;
    /* the same package as the references' (the fixture generator did not drift) */
    CHECK_MSG(!strcmp(s->bf16->model_sha256, jstr(fx, "model_sha256", NULL)),
              "%s fixture model_sha256 %s, the references' %s: the fixture changed; remake the references with "
              "tools/llmcompressor_reference.py", size, s->bf16->model_sha256, jstr(fx, "model_sha256", NULL));
    for (int i = 0; i < 2; i++) { /* both references were made from the same fixture and data */
        json_t *o = i ? s->awq : s->rtn;
        CHECK(!strcmp(jstr(o, "fixture", "model_sha256"), jstr(fx, "model_sha256", NULL)));
    }
    CHECK(!strcmp(jstr(s->gptq, "calibration", "sha256"), jstr(s->awq, "calibration", "sha256")));
    snprintf(s->calib_path, sizeof s->calib_path, "%s/%s", repo(), jstr(s->gptq, "calibration", "file"));
    s->samples = (int)jint(s->gptq, "calibration", "samples");
    s->group = (int)jint(s->gptq, "group_size", NULL);
    CHECK(s->group == (int)jint(s->awq, "group_size", NULL));
    char sha[65];
    int used = 0;
    st = vsr_calib_collect(s->bf16, s->calib_path, s->samples, true, true, NULL, &s->calib, sha, &used, &e);
    CHECK_OK(st, e);
    if (st) return false;
    CHECK_MSG(!strcmp(sha, jstr(s->gptq, "calibration", "sha256")),
              "calibration file %s sha256 %s, the references' %s: remake the references with "
              "tools/llmcompressor_reference.py", s->calib_path, sha, jstr(s->gptq, "calibration", "sha256"));
    CHECK(used == s->samples);
    /* the memory quantize checks before calibrating (from the package's decoder Linears) is what was allocated:
     * 8 K^2 bytes per distinct Hessian */
    qz_plan pl;
    CHECK_OK(qz_plan_make(s->bf16, VSR_Q_FP8_DYNAMIC, 0, false, NULL, 0, &pl, &e), e);
    const char **names = malloc(sizeof *names * (size_t)pl.n_lin);
    int64_t *Ks = malloc(sizeof *Ks * (size_t)pl.n_lin);
    int n = 0, n_inputs = 0;
    for (int i = 0; i < pl.n_lin; i++)
        if (pl.lin[i].layer >= 0) names[n] = pl.lin[i].module, Ks[n] = pl.lin[i].K, n++;
    uint64_t predicted = vsr_calib_hessian_bytes(names, Ks, n, &n_inputs), allocated = 0;
    int distinct = 0;
    for (int i = 0; i < vsr_calib_count(s->calib); i++) {
        const vsr_calib_layer *L = vsr_calib_at(s->calib, i);
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = vsr_calib_at(s->calib, j)->H == L->H;
        if (!seen && L->H) allocated += 8u * (uint64_t)L->K * (uint64_t)L->K, distinct++;
    }
    CHECK_MSG(predicted == allocated && n_inputs == distinct,
              "%s: predicted %llu bytes of Hessians for %d inputs, calibration allocated %llu for %d", size,
              (unsigned long long)predicted, n_inputs, (unsigned long long)allocated, distinct);
    free(names), free(Ks);
    qz_plan_free(&pl);
    /* the same tokens: every Linear saw the references' token count */
    long long tokens = jint(s->gptq, "calibration", "tokens");
    for (int i = 0; i < vsr_calib_count(s->calib); i++) {
        const vsr_calib_layer *L = vsr_calib_at(s->calib, i);
        CHECK_MSG(L->n_tokens == tokens, "%s: %lld calibration tokens, the references %lld", L->module,
                  (long long)L->n_tokens, tokens);
    }
    return true;
}

static void setup_close(setup *s) {
    vsr_calib_free(s->calib);
    vsr_package_close(s->bf16);
    json_decref(s->gptq), json_decref(s->awq), json_decref(s->rtn);
}

static vsr_package *quantize(setup *s, const char *scheme) {
    char out[600];
    snprintf(out, sizeof out, "%s/%s-%s", test_tmpdir(), s->size, scheme);
    bool int4 = !strncmp(scheme, "w4a16", 5);
    vsr_quantize_opts o = {.scheme = scheme, .calibration = int4 ? s->calib_path : NULL,
                           .samples = int4 ? s->samples : 0, .group_size = int4 ? s->group : 0};
    vsr_quantize_info info;
    vsr_err e = {0};
    vsr_status st = vsr_quantize_package(s->bf16_dir, NULL, out, &o, &info, &e);
    CHECK_OK(st, e);
    return st ? NULL : open_pkg(out);
}

/* A tensor's bytes in an aligned buffer (mapped tensors may be unaligned). */
static void *copy_data(const vsr_tensor *t) {
    void *b = malloc(t->nbytes ? t->nbytes : 1);
    memcpy(b, t->data, t->nbytes);
    return b;
}

typedef struct layer_ctx {
    const vsr_calib_layer *L;
    uint16_t *w; /* original BF16 weight (a copy) */
    double ref, ref_rtn;
} layer_ctx;

/* One reference layer: its module, our statistics, the original weight. */
static bool layer_of(setup *s, json_t *row, layer_ctx *lc) {
    const char *module = jstr(row, "module", NULL);
    lc->L = vsr_calib_find(s->calib, module);
    CHECK_MSG(lc->L != NULL, "%s: no calibration statistics", module);
    if (!lc->L) return false;
    CHECK(lc->L->N == jint(row, "N", NULL) && lc->L->K == jint(row, "K", NULL));
    const vsr_tensor *t = tensor(s->bf16, module, "weight");
    if (!t || t->dtype != VSR_DT_BF16) return false;
    lc->ref = json_real_value(json_object_get(row, "error"));
    lc->ref_rtn = json_real_value(json_object_get(row, "rtn_error"));
    CHECK_MSG(lc->ref > 0 && lc->ref_rtn > 0, "%s: the reference has no error / rtn_error", module);
    if (!(lc->ref > 0 && lc->ref_rtn > 0)) return false;
    lc->w = copy_data(t);
    return true;
}

/* The dequantized int4 weight stored for `module` (pack-quantized, no g_idx). */
static uint16_t *stored_int4(const vsr_package *q, const char *module, int64_t N, int64_t K, int group, bool sym) {
    const vsr_tensor *pk = tensor(q, module, "weight_packed"), *sc = tensor(q, module, "weight_scale");
    const vsr_tensor *zp = sym ? NULL : tensor(q, module, "weight_zero_point");
    if (!pk || !sc || (!sym && !zp)) return NULL;
    uint32_t *p = copy_data(pk), *z = zp ? copy_data(zp) : NULL;
    uint16_t *scale = copy_data(sc), *wq = malloc(sizeof *wq * (size_t)(N * K));
    vsr_dequant_int4_ref(p, scale, z, NULL, N, K, group, wq);
    free(p), free(z), free(scale);
    return wq;
}

/* RTN of the original weight (what both algorithms start from), dequantized. */
static uint16_t *rtn_int4(const uint16_t *w, int64_t N, int64_t K, int group, bool sym) {
    int64_t G = K / group;
    uint32_t *pk = malloc(sizeof *pk * (size_t)(N * K / 8)), *zp = calloc((size_t)((N + 7) / 8 * G), sizeof *zp);
    uint16_t *sc = malloc(sizeof *sc * (size_t)(N * G)), *wq = malloc(sizeof *wq * (size_t)(N * K));
    vsr_quantize_int4_rtn(w, N, K, group, sym, NULL, pk, sc, sym ? NULL : zp);
    vsr_dequant_int4_ref(pk, sc, sym ? NULL : zp, NULL, N, K, group, wq);
    free(pk), free(zp), free(sc);
    return wq;
}

static void header(const char *what, const char *size) {
    printf("# %s, decision3 %s: per-layer output error, ours vs llm-compressor (bound %.2fx)\n", what, size, BOUND);
    printf("#   %-44s %11s %11s %7s   %11s %11s %7s\n", "module", "ours", "llmcomp", "ratio", "our rtn", "ref rtn",
           "rtn/rtn");
}

static void row(const char *module, double ours, double ref, double our_rtn, double ref_rtn) {
    const char *m = strncmp(module, "model.language_model.", 21) ? module : module + 21;
    printf("#   %-44s %11.6g %11.6g %7.4f%s %11.6g %11.6g %7.4f\n", m, ours, ref, ours / ref,
           ours <= BOUND * ref ? " " : "!", our_rtn, ref_rtn, our_rtn / ref_rtn);
}

static void check_gptq(setup *s) {
    vsr_package *q = quantize(s, "w4a16-gptq");
    if (!q) return;
    header("GPTQ W4A16", s->size);
    json_t *layers = json_object_get(s->gptq, "layers");
    size_t i;
    json_t *r;
    int n = 0, rtn_passes = 0;
    double worst = 0.0, sum_ours = 0.0, sum_ref = 0.0, agree = 0.0;
    json_array_foreach(layers, i, r) {
        layer_ctx lc;
        if (!layer_of(s, r, &lc)) continue;
        const vsr_calib_layer *L = lc.L;
        uint16_t *wq = stored_int4(q, L->module, L->N, L->K, s->group, true);
        if (!wq) {
            free(lc.w);
            continue;
        }
        uint16_t *wr = rtn_int4(lc.w, L->N, L->K, s->group, true);
        double ours = out_error(lc.w, wq, NULL, NULL, L->N, L->K, L->H, L->n_tokens);
        double our_rtn = out_error(lc.w, wr, NULL, NULL, L->N, L->K, L->H, L->n_tokens);
        /* the library's own measure agrees with this one */
        double lib = vsr_quant_output_error(lc.w, wq, NULL, L->N, L->K, L->H, L->n_tokens);
        CHECK_MSG(fabs(lib - ours) <= 1e-9 * ours, "%s: vsr_quant_output_error %.12g, here %.12g", L->module, lib, ours);
        row(L->module, ours, lc.ref, our_rtn, lc.ref_rtn);
        CHECK_MSG(fabs(our_rtn / lc.ref_rtn - 1.0) <= RTN_AGREE,
                  "%s: RTN error %.6g here, %.6g in the reference: the two measures disagree", L->module, our_rtn,
                  lc.ref_rtn);
        CHECK_MSG(ours <= BOUND * lc.ref, "%s: GPTQ output error %.6g is %.4fx llm-compressor's %.6g (bound %.2fx)",
                  L->module, ours, ours / lc.ref, lc.ref, BOUND);
        rtn_passes += our_rtn <= BOUND * lc.ref;
        worst = fmax(worst, ours / lc.ref);
        agree = fmax(agree, fabs(our_rtn / lc.ref_rtn - 1.0));
        sum_ours += ours * ours, sum_ref += lc.ref * lc.ref;
        n++;
        free(wq), free(wr), free(lc.w);
    }
    printf("# GPTQ %s: %d layers, worst ratio %.4f, all layers (rms) %.4f; plain RTN would pass the bound on %d; "
           "RTN errors agree within %.2g\n", s->size, n, worst, sqrt(sum_ours / sum_ref), rtn_passes, agree);
    CHECK(n == (int)json_array_size(layers) && n > 0);
    /* the bound discriminates: round-to-nearest is not within 1.05x of GPTQ on most layers */
    CHECK_MSG(rtn_passes <= n / 4, "plain RTN passes the GPTQ bound on %d of %d layers", rtn_passes, n);
    vsr_package_close(q);
}

/* ---- AWQ: the scales our writer applied, re-derived and proven on the package's bytes ---- */

typedef struct awq_lin {
    const char *module;
    const vsr_calib_layer *L;
    uint16_t *work;  /* the writer's working copy: bf16(W diag(c)), rows / r */
    double *c, *r;   /* [K], [N]; NULL = 1 */
} awq_lin;

static awq_lin *find_lin(awq_lin *a, int n, const char *module) {
    for (int i = 0; i < n; i++)
        if (!strcmp(a[i].module, module)) return &a[i];
    return NULL;
}

/* AWQ's candidate scales, written here from llm-compressor's AWQModifier (0.14,
 * _compute_best_scale with duo_scaling True, n_grid 20): candidate 0 is s = 1 (ratio 0, no duo),
 * candidate i >= 1 is ratio (i-1)/18 with duo scaling,
 *   s = clamp(xm^ratio / (wm^(1-ratio) + 1e-4), 1e-4),  normalised by sqrt(max s * min s),
 * xm the mean |x| per input channel, wm the mean over every balance row of |w| / (its group's
 * max |w| + 1e-6). */
static void awq_candidate(const double *xm, const double *wm, int64_t K, int c, float *sc) {
    double ratio = c == 0 ? 0.0 : (double)(c - 1) / (VSR_AWQ_GRID - 2), mx = 0.0, mn = INFINITY;
    for (int64_t k = 0; k < K; k++) {
        double v = c == 0 ? pow(xm[k], ratio) : pow(xm[k], ratio) / (pow(wm[k], 1.0 - ratio) + 1e-4);
        v = v < 1e-4 ? 1e-4 : v;
        sc[k] = (float)v;
        mx = fmax(mx, v), mn = fmin(mn, v);
    }
    double norm = sqrt(mx * mn);
    for (int64_t k = 0; k < K; k++) {
        double v = sc[k] / norm;
        sc[k] = isfinite(v) ? (float)v : 1.0f;
    }
}

/* Does RTN (asymmetric) of bf16(work diag(sc)) give the package's tensors of that Linear? */
static bool reproduces(setup *s, const vsr_package *q, const awq_lin *a, const float *sc) {
    int64_t N = a->L->N, K = a->L->K, G = K / s->group;
    uint16_t *w = malloc(sizeof *w * (size_t)(N * K)), *scale = malloc(sizeof *scale * (size_t)(N * G));
    uint32_t *pk = malloc(sizeof *pk * (size_t)(N * K / 8)), *zp = calloc((size_t)((N + 7) / 8 * G), 4);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            w[n * K + k] = sc ? vsr_f32_to_bf16(vsr_bf16_to_f32(a->work[n * K + k]) * sc[k]) : a->work[n * K + k];
    vsr_quantize_int4_rtn(w, N, K, s->group, false, NULL, pk, scale, zp);
    const vsr_tensor *tp = tensor(q, a->module, "weight_packed"),
                     *ts = tensor(q, a->module, "weight_scale"),
                     *tz = tensor(q, a->module, "weight_zero_point");
    bool eq = tp && ts && tz && tp->nbytes == sizeof *pk * (size_t)(N * K / 8) && !memcmp(tp->data, pk, tp->nbytes) &&
              ts->nbytes == sizeof *scale * (size_t)(N * G) && !memcmp(ts->data, scale, ts->nbytes) &&
              tz->nbytes == 4 * (size_t)((N + 7) / 8 * G) && !memcmp(tz->data, zp, tz->nbytes);
    free(w), free(scale), free(pk), free(zp);
    return eq;
}

/* One mapping as the writer applies it (src/quantize/writer.c awq_map): which of the candidates
 * did the package apply? The first balance Linear's stored tensors depend on this mapping's s
 * alone (q_proj, gate_proj, down_proj), so the candidate that reproduces them byte for byte is
 * the one; then the balance columns are scaled by it and the producing Linear's rows (prev,
 * up_proj for down_proj) divided by it, as the writer does. Every Linear's final bytes are
 * compared again after all mappings. */
static void awq_mapping(setup *s, const vsr_package *q, awq_lin **bal, int nb, awq_lin *prev) {
    const vsr_calib_layer *L = bal[0]->L;
    int64_t K = L->K, gs = s->group;
    double *wm = calloc((size_t)K, sizeof *wm);
    int64_t rows = 0;
    for (int b = 0; b < nb; b++) {
        for (int64_t n = 0; n < bal[b]->L->N; n++) {
            const uint16_t *w = bal[b]->work + n * K;
            for (int64_t g0 = 0; g0 < K; g0 += gs) {
                double amax = 0.0;
                for (int64_t k = g0; k < g0 + gs; k++) amax = fmax(amax, fabs((double)vsr_bf16_to_f32(w[k])));
                for (int64_t k = g0; k < g0 + gs; k++) wm[k] += fabs((double)vsr_bf16_to_f32(w[k])) / (amax + 1e-6);
            }
        }
        rows += bal[b]->L->N;
    }
    for (int64_t k = 0; k < K; k++) wm[k] /= (double)rows;
    float *sc = malloc(sizeof *sc * (size_t)K);
    int found = -1;
    for (int c = 0; c < VSR_AWQ_GRID && found < 0; c++) {
        awq_candidate(L->act_absmean, wm, K, c, sc);
        if (reproduces(s, q, bal[0], sc)) found = c;
    }
    CHECK_MSG(found >= 0, "%s: none of AWQ's %d candidate scales reproduces the package's tensors", bal[0]->module,
              VSR_AWQ_GRID);
    if (found >= 0) {
        if (getenv("VSR_TEST_VERBOSE"))
            printf("#   %s: candidate %d (ratio %.4f%s)\n", bal[0]->module, found,
                   found ? (double)(found - 1) / (VSR_AWQ_GRID - 2) : 0.0, found ? ", duo" : ", s = 1");
        for (int b = 0; b < nb; b++) {
            awq_lin *a = bal[b];
            a->c = malloc(sizeof *a->c * (size_t)K);
            for (int64_t k = 0; k < K; k++) a->c[k] = sc[k];
            for (int64_t n = 0; n < a->L->N; n++)
                for (int64_t k = 0; k < K; k++)
                    a->work[n * K + k] = vsr_f32_to_bf16(vsr_bf16_to_f32(a->work[n * K + k]) * sc[k]);
        }
        if (prev) {
            vsr_awq_fold_linear_rows(prev->work, prev->L->K, sc, K);
            prev->r = malloc(sizeof *prev->r * (size_t)K);
            for (int64_t k = 0; k < K; k++) prev->r[k] = sc[k];
        }
    }
    free(wm), free(sc);
}

static void check_awq(setup *s) {
    vsr_package *q = quantize(s, "w4a16-awq");
    if (!q) return;
    json_t *layers = json_object_get(s->awq, "layers");
    int nl = (int)json_array_size(layers);
    awq_lin *a = calloc((size_t)nl, sizeof *a);
    size_t i;
    json_t *r;
    json_array_foreach(layers, i, r) {
        a[i].module = jstr(r, "module", NULL);
        a[i].L = vsr_calib_find(s->calib, a[i].module);
        const vsr_tensor *t = tensor(s->bf16, a[i].module, "weight");
        CHECK(a[i].L != NULL && t != NULL);
        if (!a[i].L || !t) goto out;
        a[i].work = copy_data(t);
    }
    /* the writer's mapping order per decoder layer (src/quantize/writer.c awq_unit) */
    for (int layer = 0;; layer++) {
        char m[6][160];
        const char *suf[6] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                              "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
        awq_lin *x[6];
        for (int k = 0; k < 6; k++) {
            snprintf(m[k], sizeof m[k], "model.language_model.layers.%d.%s", layer, suf[k]);
            x[k] = find_lin(a, nl, m[k]);
        }
        if (!x[3] && !x[0]) break;
        if (x[0] && x[1] && x[2]) awq_mapping(s, q, (awq_lin *[]){x[0], x[1], x[2]}, 3, NULL);
        if (x[3] && x[4]) awq_mapping(s, q, (awq_lin *[]){x[3], x[4]}, 2, NULL);
        if (x[5] && x[4]) awq_mapping(s, q, (awq_lin *[]){x[5]}, 1, x[4]);
    }
    header("AWQ W4A16_ASYM", s->size);
    int n = 0, same = 0;
    double worst = 0.0, sum_ours = 0.0, sum_ref = 0.0, agree = 0.0;
    json_array_foreach(layers, i, r) {
        layer_ctx lc;
        if (!layer_of(s, r, &lc)) continue;
        const vsr_calib_layer *L = lc.L;
        int64_t N = L->N, K = L->K;
        /* the scales are the package's: RTN of the re-derived working weight = its stored tensors */
        bool eq = reproduces(s, q, &a[i], NULL);
        CHECK_MSG(eq, "%s: the re-derived AWQ weight does not reproduce the package's tensors", L->module);
        same += eq;
        /* AWQ touched the same Linears in both (input scaled / output scaled) */
        CHECK_MSG((a[i].c != NULL) == json_is_true(json_object_get(r, "input_scaled")) &&
                      (a[i].r != NULL) == json_is_true(json_object_get(r, "output_scaled")),
                  "%s: AWQ mappings differ from llm-compressor's", L->module);
        uint16_t *wq = stored_int4(q, L->module, N, K, s->group, false);
        uint16_t *wr = rtn_int4(lc.w, N, K, s->group, false);
        if (!wq) {
            free(wr), free(lc.w);
            continue;
        }
        double ours = out_error(lc.w, wq, a[i].c, a[i].r, N, K, L->H, L->n_tokens);
        double our_rtn = out_error(lc.w, wr, NULL, NULL, N, K, L->H, L->n_tokens);
        row(L->module, ours, lc.ref, our_rtn, lc.ref_rtn);
        CHECK_MSG(fabs(our_rtn / lc.ref_rtn - 1.0) <= RTN_AGREE,
                  "%s: RTN error %.6g here, %.6g in the reference: the two measures disagree", L->module, our_rtn,
                  lc.ref_rtn);
        CHECK_MSG(ours <= BOUND * lc.ref, "%s: AWQ output error %.6g is %.4fx llm-compressor's %.6g (bound %.2fx)",
                  L->module, ours, ours / lc.ref, lc.ref, BOUND);
        worst = fmax(worst, ours / lc.ref);
        agree = fmax(agree, fabs(our_rtn / lc.ref_rtn - 1.0));
        sum_ours += ours * ours, sum_ref += lc.ref * lc.ref;
        n++;
        free(wq), free(wr), free(lc.w);
    }
    printf("# AWQ %s: %d layers (%d reproduced byte for byte), worst ratio %.4f, all layers (rms) %.4f; RTN errors "
           "agree within %.2g\n", s->size, n, same, worst, sqrt(sum_ours / sum_ref), agree);
    CHECK(n == nl && same == nl && n > 0);
out:
    for (int k = 0; k < nl; k++) free(a[k].work), free(a[k].c), free(a[k].r);
    free(a);
    vsr_package_close(q);
}

/* ---- FP8_DYNAMIC and NVFP4A16: llm-compressor's bytes ---- */

static vsr_dtype torch_dtype(const char *s) {
    return !strcmp(s, "float8_e4m3fn") ? VSR_DT_F8_E4M3
           : !strcmp(s, "bfloat16")    ? VSR_DT_BF16
           : !strcmp(s, "float32")     ? VSR_DT_F32
           : !strcmp(s, "uint8")       ? VSR_DT_U8
           : !strcmp(s, "int32")       ? VSR_DT_I32
                                       : VSR_DT_F64; /* none of ours: a mismatch */
}

static void check_rtn(setup *s) {
    json_t *schemes = json_object_get(s->rtn, "schemes");
    const char *scheme;
    json_t *ent;
    json_object_foreach(schemes, scheme, ent) {
        vsr_package *q = quantize(s, scheme);
        if (!q) continue;
        json_t *tensors = json_object_get(ent, "tensors");
        const char *name;
        json_t *t;
        int n = 0, same = 0;
        json_object_foreach(tensors, name, t) {
            const vsr_tensor *o = vsr_weights_find(q->weights, name);
            n++;
            CHECK_MSG(o != NULL, "%s %s: llm-compressor stores %s, we do not", s->size, scheme, name);
            if (!o) continue;
            json_t *shape = json_object_get(t, "shape");
            bool ok = o->dtype == torch_dtype(jstr(t, "dtype", NULL)) && o->ndim == (int)json_array_size(shape);
            for (int d = 0; ok && d < o->ndim; d++) ok = o->shape[d] == json_integer_value(json_array_get(shape, d));
            char sha[65];
            vsr_sha256_hex(o->data, o->nbytes, sha);
            ok = ok && !strcmp(sha, jstr(t, "sha256", NULL));
            CHECK_MSG(ok, "%s %s: %s differs from llm-compressor's (dtype/shape/sha256 %s)", s->size, scheme, name,
                      jstr(t, "sha256", NULL));
            same += ok;
        }
        /* and we store nothing more for those Linears (a tensor of a module llm-compressor
         * quantized that it does not store) */
        int extra = 0;
        for (size_t k = 0; k < vsr_weights_count(q->weights); k++) {
            const vsr_tensor *o = vsr_weights_at(q->weights, k);
            const char *dot = strrchr(o->name, '.');
            if (!dot || json_object_get(tensors, o->name)) continue;
            size_t ml = (size_t)(dot - o->name); /* its module: the name up to the last dot */
            bool quantized_module = false;
            json_object_foreach(tensors, name, t) {
                const char *d = strrchr(name, '.');
                if (d && (size_t)(d - name) == ml && !strncmp(name, o->name, ml)) quantized_module = true;
            }
            CHECK_MSG(!quantized_module, "%s %s: we store %s, llm-compressor does not", s->size, scheme, o->name);
            extra += quantized_module;
        }
        printf("# %s %s: %d of %d tensors bit-identical to llm-compressor %s (QuantizationModifier %s)\n", scheme,
               s->size, same, n, jstr(s->rtn, "versions", "llmcompressor"),
               !strcmp(scheme, "nvfp4") ? "NVFP4A16" : "FP8_DYNAMIC");
        CHECK(n > 0 && same == n && extra == 0);
        vsr_package_close(q);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_size(const char *size) {
    setup s;
    double t0 = now_s(), t1, t2, t3;
    if (setup_open(&s, size)) {
        t1 = now_s();
        check_gptq(&s);
        t2 = now_s();
        check_awq(&s);
        t3 = now_s();
        check_rtn(&s);
        printf("# %s: %.1f s (calibration %.1f, GPTQ %.1f, AWQ %.1f, FP8 + NVFP4 %.1f)\n", size, now_s() - t0, t1 - t0,
               t2 - t1, t3 - t2, now_s() - t3);
    }
    setup_close(&s);
}

TEST(against_llmcompressor_tiny) { run_size("tiny"); }
TEST(against_llmcompressor_small) { run_size("small"); }

int main(void) {
    RUN(against_llmcompressor_tiny);
    /* The sanitizer build (make asan) runs tiny only: small exercises the same code on larger
     * shapes and takes about 160 s there (30 s here). */
    const char *san = getenv("VSR_TEST_SANITIZER");
    if (san && !strcmp(san, "1"))
        printf("# against_llmcompressor_small: not run in the sanitizer build (VSR_TEST_SANITIZER=1); "
               "the normal build runs it\n");
    else
        RUN(against_llmcompressor_small);
    return test_summary();
}
