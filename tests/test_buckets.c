/* tests/test_buckets.c: shape buckets (issue 25, src/model/qwen35.c).
 *
 * - the bucket functions: the documented values, idempotent on bucket values, never below the
 *   input, fewer than 16 pad tokens up to 128 and at most 25 % above, at most 50 % more rows above 4;
 * - a bucketed forward (rows padded to the length bucket of the longest, row count to its bucket,
 *   pad tokens after each row's own) gives the unpadded rows' hidden states and logits: on the
 *   CPU (VSR_BUCKETS=1 pads as the GPU does) to 1e-5 in the repo's normalised error per row
 *   (the bound of batched vs alone: the CPU GEMM's summation follows the row count, so padding
 *   moves the last bits), for causal BF16 and int4 fixtures and
 *   batches of 1..9 rows of 1..300 tokens;
 * - the same for noncausal_full_attention models (the published mode), where attention reads
 *   only each row's own keys; VSR_BUCKETS=0 turns buckets off (nothing to warm);
 * - warm-up runs every bucket up to its token limit, largest first, and reports them; a model
 *   that does not bucket warms nothing.
 * On a GPU machine (tools/gpu/buckets_check.sh): VSR_BK_DEVICE=cuda:0 loads the bucketed model
 * there (buckets are on by default on CUDA) and compares it with the same model loaded with
 * VSR_BUCKETS=0, bound VSR_BK_TOL (0.02 on GPUs), after a warm-up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vsr/device.h"
#include "vsr/fixture.h"
#include "vsr/model.h"
#include "vsr/package.h"

static double TOL = 1e-5; /* as batched vs alone (test_model): the CPU GEMM's sums follow M */
static vsr_device g_dev;
static bool g_have_dev;

TEST(bucket_values) {
    const int64_t lens[][2] = {{1, 16},    {16, 16},   {17, 32},   {100, 112}, {128, 128}, {129, 160}, {160, 160},
                               {161, 192}, {250, 256}, {257, 320}, {300, 320}, {513, 640}, {1000, 1024},
                               {1025, 1280}, {4000, 4096}, {4097, 5120}};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        CHECK_MSG(vsr_model_bucket_len(lens[i][0]) == lens[i][1], "bucket_len(%lld) = %lld, want %lld",
                  (long long)lens[i][0], (long long)vsr_model_bucket_len(lens[i][0]), (long long)lens[i][1]);
    const int rows[][2] = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 6}, {6, 6}, {7, 8}, {9, 12}, {13, 16}, {17, 24}, {33, 48}, {100, 128}};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        CHECK_MSG(vsr_model_bucket_rows(rows[i][0]) == rows[i][1], "bucket_rows(%d) = %d, want %d", rows[i][0],
                  vsr_model_bucket_rows(rows[i][0]), rows[i][1]);
    for (int64_t L = 1; L <= 70000; L++) {
        int64_t b = vsr_model_bucket_len(L);
        if (b < L || vsr_model_bucket_len(b) != b || (L <= 128 ? b - L >= 16 : (double)b > 1.25 * (double)L + 1e-9)) {
            CHECK_MSG(0, "bucket_len(%lld) = %lld", (long long)L, (long long)b);
            break;
        }
    }
    for (int R = 1; R <= 4096; R++) {
        int b = vsr_model_bucket_rows(R);
        if (b < R || vsr_model_bucket_rows(b) != b || (R > 4 && b > 1.5 * R)) {
            CHECK_MSG(0, "bucket_rows(%d) = %d", R, b);
            break;
        }
    }
}

static int32_t *ids_for(int64_t seed, int n, int64_t vocab) {
    int32_t *r = malloc(sizeof *r * (size_t)n);
    for (int64_t i = 0; i < n; i++) r[i] = (int32_t)((seed * 1000003 + i * 7919 + (i * i) % 104729) % vocab);
    return r;
}

static vsr_package *fixture(const char *size, const char *scheme, const char *mode, const char *tag) {
    static int n;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/bk-%d-%s", test_tmpdir(), n++, tag);
    vsr_fixture_opts o = {.family = "decision3", .size = size, .scheme = scheme, .seed = 7, .attention_mode = mode};
    vsr_err err = {0};
    vsr_status st = vsr_fixture_write(dir, &o, NULL, &err);
    CHECK_OK(st, err);
    return st ? NULL : test_open_package(dir);
}

/* Loads p with VSR_BUCKETS set to `buckets` ("0", "1", or NULL: the backend's default). */
static vsr_model *load(const vsr_package *p, const char *buckets) {
    if (buckets) setenv("VSR_BUCKETS", buckets, 1);
    else unsetenv("VSR_BUCKETS");
    vsr_model_opts o = {.threads = 2, .device = g_have_dev ? &g_dev : NULL};
    vsr_model *m = NULL;
    vsr_err err = {0};
    vsr_status st = vsr_model_load(p, &o, &m, &err);
    unsetenv("VSR_BUCKETS");
    CHECK_OK(st, err);
    return st ? NULL : m;
}

static double worst_seen;

/* Batches of `n` rows of the given lengths through both models; hidden and logits compared. */
static void compare_batch(vsr_model *pad, vsr_model *plain, int64_t vocab, int n, const int *lens, const char *what) {
    const int64_t D = vsr_model_hidden_size(plain);
    int32_t *ids[16];
    for (int r = 0; r < n; r++) ids[r] = ids_for(31 * n + r, lens[r], vocab);
    float *ha = malloc(sizeof(float) * (size_t)(n * D)), *hb = malloc(sizeof(float) * (size_t)(n * D));
    float *la = malloc(sizeof(float) * (size_t)n * 255), *lb = malloc(sizeof(float) * (size_t)n * 255);
    vsr_err err = {0};
    vsr_status st = vsr_model_forward_last(pad, n, (const int32_t *const *)ids, lens, ha, la, &err);
    CHECK_OK(st, err);
    if (!st) st = vsr_model_forward_last(plain, n, (const int32_t *const *)ids, lens, hb, lb, &err);
    CHECK_OK(st, err);
    if (!st) {
        /* the repo's normalised error per row (test_nerr: max |diff| / max |ref|), hidden and logits */
        double w = 0;
        for (int r = 0; r < n; r++) {
            double eh = test_nerr(ha + r * D, hb + r * D, D), el = test_nerr(la + r * 255, lb + r * 255, 255);
            if (!(eh <= w)) w = eh; /* NaN sticks */
            if (!(el <= w)) w = el;
        }
        if (!(w <= worst_seen)) worst_seen = w;
        CHECK_MSG(w <= TOL, "%s: %d rows (first %d tokens): padded vs unpadded differ by %.3g (bound %g)", what, n,
                  lens[0], w, TOL);
    }
    for (int r = 0; r < n; r++) free(ids[r]);
    free(ha), free(hb), free(la), free(lb);
}

static void padded_equals_unpadded(const char *size, const char *scheme) {
    vsr_package *p = fixture(size, scheme, "causal", scheme);
    if (!p) return;
    vsr_model *pad = load(p, g_have_dev ? NULL : "1"), *plain = load(p, "0");
    if (pad && plain) {
        CHECK_MSG(vsr_model_bucketed(pad), "%s %s: the model does not bucket", size, scheme);
        CHECK(!vsr_model_bucketed(plain));
        const int64_t vocab = p->config.text.vocab_size;
        const int b1[] = {1}, b2[] = {17}, b3[] = {129, 3}, b4[] = {40, 41, 39}, b5[] = {5, 300, 1, 77, 128},
                  b6[] = {20, 20, 20, 20, 20, 20, 20, 20, 20}, b7[] = {255, 256, 257, 2, 100, 31, 64};
        const struct { int n; const int *l; } cases[] = {{1, b1}, {1, b2}, {2, b3}, {3, b4}, {5, b5}, {9, b6}, {7, b7}};
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            compare_batch(pad, plain, vocab, cases[i].n, cases[i].l, scheme);
        /* again after the buckets were seen (a recording replayed on a GPU) with other lengths */
        const int c1[] = {120, 100, 7}, c2[] = {18, 30, 25, 32, 19, 21, 22, 26, 29};
        compare_batch(pad, plain, vocab, 3, c1, scheme);
        compare_batch(pad, plain, vocab, 9, c2, scheme);
    }
    vsr_model_free(pad);
    vsr_model_free(plain);
    vsr_package_close(p);
}

TEST(padded_equals_unpadded_bf16) { padded_equals_unpadded("tiny", "bf16"); }
TEST(padded_equals_unpadded_int4) { padded_equals_unpadded("tiny", "w4a16-gptq"); }
TEST(padded_equals_unpadded_small) { padded_equals_unpadded("small", "bf16"); }

/* noncausal_full_attention (the published packages' mode): a real token would attend to the pad
 * tokens after it unless attention reads only the row's own keys; small has a full-attention layer
 * mid-stack (tiny's only one is its last), so a key read wrongly changes what later layers see */
TEST(padded_equals_unpadded_noncausal) {
    const char *sizes[] = {"tiny", "small"};
    for (int i = 0; i < 2; i++) {
        vsr_package *p = fixture(sizes[i], "bf16", "noncausal_full_attention", "nc");
        if (!p) return;
        vsr_model *pad = load(p, g_have_dev ? NULL : "1"), *plain = load(p, "0");
        if (pad && plain) {
            CHECK_MSG(vsr_model_bucketed(pad), "noncausal %s: the model does not bucket", sizes[i]);
            const int64_t vocab = p->config.text.vocab_size;
            const int b1[] = {1}, b2[] = {129, 3}, b3[] = {5, 300, 1, 77, 128}, b4[] = {255, 256, 257, 2, 100, 31, 64},
                      b5[] = {18, 30, 25, 32, 19, 21, 22, 26, 29};
            const struct { int n; const int *l; } cases[] = {{1, b1}, {2, b2}, {5, b3}, {7, b4}, {9, b5}};
            for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
                compare_batch(pad, plain, vocab, cases[k].n, cases[k].l, sizes[i]);
        }
        vsr_model_free(pad);
        vsr_model_free(plain);
        vsr_package_close(p);
    }
}

TEST(buckets_off_by_switch) {
    vsr_package *p = fixture("tiny", "bf16", "causal", "off");
    if (!p) return;
    vsr_model *m = load(p, "0");
    if (m) {
        CHECK(!vsr_model_bucketed(m));
        CHECK(vsr_model_buckets(m, 65536, NULL, 0) == 0);
        vsr_model_warm_report rep;
        vsr_err err = {0};
        vsr_status st = vsr_model_warm(m, 4096, NULL, NULL, &rep, &err);
        CHECK_OK(st, err);
        CHECK(rep.buckets == 0);
    }
    vsr_model_free(m);
    vsr_package_close(p);
}

static void count_progress(void *ctx, int done, int total) {
    int *c = ctx;
    CHECK(done == c[0] + 1 && total == c[1]);
    c[0] = done;
}

TEST(warm_up_runs_every_bucket) {
    vsr_package *p = fixture("tiny", "bf16", "causal", "warm");
    if (!p) return;
    vsr_model *m = load(p, g_have_dev ? NULL : "1");
    if (m) {
        const int64_t lim = 2048;
        int n = vsr_model_buckets(m, lim, NULL, 0);
        int64_t(*bk)[2] = malloc(sizeof *bk * (size_t)(n > 0 ? n : 1));
        CHECK(vsr_model_buckets(m, lim, bk, n) == n);
        CHECK_MSG(n > 20, "%d buckets under %lld tokens", n, (long long)lim);
        for (int i = 0; i < n; i++) {
            CHECK(bk[i][0] * bk[i][1] <= lim);
            CHECK(vsr_model_bucket_rows((int)bk[i][0]) == bk[i][0] && vsr_model_bucket_len(bk[i][1]) == bk[i][1]);
        }
        int c[2] = {0, n};
        vsr_model_warm_report rep;
        vsr_err err = {0};
        vsr_status st = vsr_model_warm(m, lim, count_progress, c, &rep, &err);
        CHECK_OK(st, err);
        CHECK_MSG(rep.buckets == n && c[0] == n, "warmed %d of %d buckets (progress %d)", rep.buckets, n, c[0]);
        CHECK(rep.max_tokens <= lim && rep.max_tokens > lim / 2);
        printf("     %d buckets up to %lld tokens warmed\n", n, (long long)rep.max_tokens);
        if (!g_have_dev) {
            /* above the warmed size a batch runs unpadded: bit-identical to the model without buckets
             * (9 rows of up to 300 tokens: bucket 12 x 320 = 3,840 tokens > 2,048) */
            vsr_model *plain = load(p, "0");
            const int64_t D = vsr_model_hidden_size(m), vocab = p->config.text.vocab_size;
            const int lens[9] = {300, 280, 250, 299, 120, 64, 200, 33, 290};
            int32_t *ids[9];
            for (int r = 0; r < 9; r++) ids[r] = ids_for(500 + r, lens[r], vocab);
            float *a = malloc(sizeof(float) * (size_t)(9 * D + 9 * 255)), *b = malloc(sizeof(float) * (size_t)(9 * D + 9 * 255));
            const int64_t padded0 = vsr_model_padded_forwards(m);
            vsr_status s1 = vsr_model_forward_last(m, 9, (const int32_t *const *)ids, lens, a, a + 9 * D, &err);
            CHECK_MSG(vsr_model_padded_forwards(m) == padded0, "a batch above the warmed size was padded");
            const int small[2] = {40, 30};
            CHECK_OK(vsr_model_forward_last(m, 2, (const int32_t *const *)ids, small, a, a + 9 * D, &err), err);
            CHECK_MSG(vsr_model_padded_forwards(m) == padded0 + 1, "a batch within the warmed size was not padded");
            s1 = vsr_model_forward_last(m, 9, (const int32_t *const *)ids, lens, a, a + 9 * D, &err);
            vsr_status s2 = plain ? vsr_model_forward_last(plain, 9, (const int32_t *const *)ids, lens, b, b + 9 * D, &err)
                                  : VSR_E_INTERNAL;
            CHECK(s1 == VSR_OK && s2 == VSR_OK);
            CHECK_MSG(!s1 && !s2 && !memcmp(a, b, sizeof(float) * (size_t)(9 * D + 9 * 255)),
                      "a batch above the warmed size was padded (differs from the unpadded model)");
            for (int r = 0; r < 9; r++) free(ids[r]);
            free(a), free(b);
            vsr_model_free(plain);
        }
        free(bk);
    }
    vsr_model_free(m);
    vsr_package_close(p);
}

/* VSR_BK_DEVICE: the device to load on ("cuda:0"); refused loudly when it is not there. */
static int pick_device(void) {
    const char *tol = getenv("VSR_BK_TOL");
    if (tol && *tol) TOL = atof(tol);
    int have = 0;
    if (test_device_from_env("VSR_BK_DEVICE", &g_dev, &have)) return -1;
    g_have_dev = have;
    if (have) printf("     device %s (%s), bound %g\n", getenv("VSR_BK_DEVICE"), g_dev.name, TOL);
    return 0;
}

int main(void) {
    if (pick_device()) return 1;
    RUN(bucket_values);
    RUN(padded_equals_unpadded_bf16);
    RUN(padded_equals_unpadded_int4);
    RUN(padded_equals_unpadded_small);
    RUN(padded_equals_unpadded_noncausal);
    RUN(buckets_off_by_switch);
    RUN(warm_up_runs_every_bucket);
    printf("     worst padded vs unpadded difference %.3g (bound %g)\n", worst_seen, TOL);
    return test_summary();
}
