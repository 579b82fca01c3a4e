/* CPU GEMM kernels and thread pool: every fast path on this machine (forced through the
 * test-only vsr_gemm_force_isa) against the scalar references, by normalised error
 * max|a-b| / max|ref|; int4 decode checked bit for bit against vsr_dequant_int4_ref. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"
#include "test.h"
#include "vsr/dtype.h"
#include "vsr/quant.h"

static const char *const ISAS[] = {"avx512", "avx2+fma", "scalar"};
enum { N_ISAS = 3 };
#define TOL 1e-5


static float *rand_f32(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = test_rndf();
    return p;
}
static uint16_t *rand_bf16(int64_t n) {
    uint16_t *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = vsr_f32_to_bf16(test_rndf());
    return p;
}

/* max|a-b| / max sum_k |x w| (mag): the scale FP32 summation-order error is bounded by */
static double nerr_abs(const float *a, const float *ref, const float *mag, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= num)) num = d;
        if (mag[i] > den) den = mag[i];
    }
    return den > 0 ? num / den : num;
}

/* ------------------------------------------------------------------ thread pool */

typedef struct {
    _Atomic int *visits;
    _Atomic int64_t sum;
    _Atomic int bad_worker;
    int size;
    int64_t grain, n;
    _Atomic int small_chunk;
} pool_ctx;

static void pool_body(void *vctx, int64_t b, int64_t e, int worker) {
    pool_ctx *c = vctx;
    if (worker < 0 || worker >= c->size) atomic_store(&c->bad_worker, 1);
    if (e - b < c->grain && e != c->n) atomic_store(&c->small_chunk, 1);
    int64_t s = 0;
    for (int64_t i = b; i < e; i++) {
        atomic_fetch_add(&c->visits[i], 1);
        s += i;
    }
    atomic_fetch_add(&c->sum, s);
}

TEST(pool_covers_every_index_once) {
    static const int64_t sizes[] = {0, 1, 7, 1000, 100003};
    static const int64_t grains[] = {1, 64, 1000000};
    for (int threads = 1; threads <= 4; threads++) {
        vsr_pool *p = vsr_pool_new(threads);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(vsr_pool_size(p) == threads);
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (size_t gi = 0; gi < sizeof grains / sizeof *grains; gi++)
                for (int rep = 0; rep < 20; rep++) {
                    int64_t n = sizes[si];
                    pool_ctx c = {.size = threads, .grain = grains[gi], .n = n};
                    c.visits = calloc((size_t)n + 1, sizeof *c.visits);
                    vsr_pool_for(p, n, grains[gi], pool_body, &c);
                    int once = 1;
                    for (int64_t i = 0; i < n; i++) once &= c.visits[i] == 1;
                    CHECK_MSG(once, "threads %d n %lld grain %lld", threads, (long long)n,
                              (long long)grains[gi]);
                    CHECK(c.sum == n * (n - 1) / 2);
                    CHECK(c.bad_worker == 0);
                    CHECK(c.small_chunk == 0);
                    free(c.visits);
                }
        vsr_pool_free(p);
    }
}

TEST(pool_default_size_and_null) {
    vsr_pool *p = vsr_pool_new(0);
    CHECK(p != NULL && vsr_pool_size(p) >= 1);
    /* many short back-to-back calls: the generation handshake must not lose a wake-up */
    for (int rep = 0; rep < 2000; rep++) {
        pool_ctx c = {.size = vsr_pool_size(p), .grain = 1, .n = 3};
        c.visits = calloc(4, sizeof *c.visits);
        vsr_pool_for(p, 3, 1, pool_body, &c);
        CHECK(c.sum == 3 && c.visits[0] == 1 && c.visits[1] == 1 && c.visits[2] == 1);
        free(c.visits);
    }
    vsr_pool_free(p);
    vsr_pool_free(NULL);
    CHECK(vsr_pool_size(NULL) == 1);
    pool_ctx c = {.size = 1, .grain = 1, .n = 10};
    c.visits = calloc(11, sizeof *c.visits);
    vsr_pool_for(NULL, 10, 1, pool_body, &c);
    CHECK(c.sum == 45);
    free(c.visits);
}

/* ------------------------------------------------------------------ ISA selection */

static int isa_available(const char *name) {
    __builtin_cpu_init();
    if (strcmp(name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma");
    if (strcmp(name, "avx2+fma") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    return 1;
}

TEST(isa_selection) {
    const char *best = vsr_gemm_isa();
    int found = 0;
    for (int i = 0; i < N_ISAS; i++)
        if (strcmp(best, ISAS[i]) == 0) found = 1;
    CHECK_MSG(found, "isa %s", best);
    /* automatic choice is the best one this CPU has */
    for (int i = 0; i < N_ISAS; i++)
        if (isa_available(ISAS[i])) {
            CHECK_MSG(strcmp(best, ISAS[i]) == 0, "auto %s, best available %s", best, ISAS[i]);
            break;
        }
    for (int i = 0; i < N_ISAS; i++) {
        int rc = vsr_gemm_force_isa(ISAS[i]);
        CHECK(rc == (isa_available(ISAS[i]) ? 0 : -1));
        if (rc == 0) CHECK(strcmp(vsr_gemm_isa(), ISAS[i]) == 0);
    }
    CHECK(vsr_gemm_force_isa("sse9") == -1);
    CHECK(vsr_gemm_force_isa(NULL) == 0);
    CHECK(strcmp(vsr_gemm_isa(), best) == 0);
    printf("     gemm isa on this machine: %s\n", best);
}

/* ------------------------------------------------------------------ f32 / bf16 */

static vsr_pool *g_pool3;

static void check_dense(int64_t M, int64_t K, int64_t N, int bf16, double tol) {
    float *X = rand_f32(M * K), *Y0 = rand_f32(M * N);
    float *Wf = bf16 ? NULL : rand_f32(N * K);
    uint16_t *Wb = bf16 ? rand_bf16(N * K) : NULL;
    float *ref = malloc((size_t)(M * N) * sizeof *ref), *got = malloc((size_t)(M * N) * sizeof *got);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(ref, Y0, (size_t)(M * N) * sizeof *ref);
        if (bf16) vsr_gemm_bf16_ref(X, M, K, Wb, N, ref, acc);
        else vsr_gemm_f32_ref(X, M, K, Wf, N, ref, acc);
        for (int i = 0; i < N_ISAS; i++) {
            if (vsr_gemm_force_isa(ISAS[i]) != 0) continue;
            for (int pi = 0; pi < 2; pi++) {
                vsr_pool *p = pi ? g_pool3 : NULL;
                memcpy(got, Y0, (size_t)(M * N) * sizeof *got);
                if (bf16) vsr_gemm_bf16(p, X, M, K, Wb, N, got, acc);
                else vsr_gemm_f32(p, X, M, K, Wf, N, got, acc);
                double e = test_nerr(got, ref, M * N);
                CHECK_MSG(e <= tol, "%s %s M %lld K %lld N %lld acc %d pool %d: err %.3g",
                          bf16 ? "bf16" : "f32", ISAS[i], (long long)M, (long long)K, (long long)N,
                          acc, pi, e);
            }
        }
    }
    vsr_gemm_force_isa(NULL);
    free(X); free(Y0); free(Wf); free(Wb); free(ref); free(got);
}

static const int64_t Ms[] = {1, 2, 3, 7, 8, 9, 33, 128};
static const int64_t Ks[] = {8, 16, 24, 136, 1000};
static const int64_t Ns[] = {1, 5, 17, 64, 255, 300};
#define COUNT(a) (sizeof(a) / sizeof *(a))

TEST(f32_matches_ref) {
    for (size_t a = 0; a < COUNT(Ms); a++)
        for (size_t b = 0; b < COUNT(Ks); b++)
            for (size_t c = 0; c < COUNT(Ns); c++) check_dense(Ms[a], Ks[b], Ns[c], 0, TOL);
}

TEST(bf16_matches_ref) {
    for (size_t a = 0; a < COUNT(Ms); a++)
        for (size_t b = 0; b < COUNT(Ks); b++)
            for (size_t c = 0; c < COUNT(Ns); c++) check_dense(Ms[a], Ks[b], Ns[c], 1, TOL);
}

TEST(dense_long_k_and_odd_k) {
    check_dense(3, 17408, 17, 1, TOL);  /* small path, longest K */
    check_dense(9, 17408, 33, 1, TOL);  /* large path: 68 k panels, Y accumulated across them */
    check_dense(3, 17408, 17, 0, TOL);
    check_dense(5, 1, 7, 1, TOL);       /* K below one vector */
    check_dense(20, 3, 40, 0, TOL);
    check_dense(17, 257, 65, 1, TOL);   /* K one past a panel */
}

TEST(k_zero_and_empty) {
    float Y[6] = {1, 2, 3, 4, 5, 6}, X[1] = {0};
    uint16_t W[1] = {0};
    vsr_gemm_bf16(g_pool3, X, 2, 0, W, 3, Y, 1);
    CHECK(Y[0] == 1 && Y[5] == 6);          /* accumulate of an empty sum leaves Y */
    vsr_gemm_bf16(g_pool3, X, 2, 0, W, 3, Y, 0);
    CHECK(Y[0] == 0 && Y[5] == 0);          /* and overwrite gives zeros, as the ref does */
    Y[0] = 7;
    vsr_gemm_bf16(g_pool3, X, 0, 4, W, 3, Y, 0); /* M = 0 writes nothing */
    CHECK(Y[0] == 7);
}

/* ------------------------------------------------------------------ int4 */

typedef struct {
    vsr_int4_weight w;
    uint32_t *packed, *zp;
    uint16_t *scale;
    int32_t *gidx;
    uint16_t *deq; /* [N,K] from vsr_dequant_int4_ref */
} q4;

/* wide: scales over 24 binades and BF16 subnormals (decode tests); otherwise one binade of
 * GPTQ-like magnitudes, so a single dot product is not dominated by one huge group and the
 * normalised error measures summation order, not cancellation. */
static void q4_make(q4 *q, int64_t N, int64_t K, int group, int asym, int gmode, int wide) {
    memset(q, 0, sizeof *q);
    int64_t G = group > 0 ? (K + group - 1) / group : 1, words = K / 8;
    q->packed = malloc((size_t)(N * words) * sizeof *q->packed);
    for (int64_t i = 0; i < N * words; i++) q->packed[i] = (uint32_t)test_rnd();
    q->scale = malloc((size_t)(N * G) * sizeof *q->scale);
    for (int64_t i = 0; i < N * G; i++) {
        /* magnitudes over many binades, both signs, some BF16 subnormals */
        float s = ldexpf(0.5f + 0.5f * fabsf(test_rndf()), wide ? (int)(test_rnd() % 24) - 16 : -6);
        if (wide && test_rnd() % 9 == 0) s = ldexpf(1.0f + fabsf(test_rndf()), -130);
        q->scale[i] = vsr_f32_to_bf16(test_rnd() & 1 ? -s : s);
    }
    if (asym) {
        int64_t zr = (N + 7) / 8;
        q->zp = malloc((size_t)(zr * G) * sizeof *q->zp);
        for (int64_t i = 0; i < zr * G; i++) q->zp[i] = (uint32_t)test_rnd();
    }
    if (gmode && group > 0) {
        /* act-order: column k's group is that of its position in a random permutation */
        int32_t *perm = malloc((size_t)K * sizeof *perm);
        for (int64_t k = 0; k < K; k++) perm[k] = (int32_t)k;
        for (int64_t k = K - 1; k > 0; k--) {
            int64_t j = (int64_t)(test_rnd() % (uint64_t)(k + 1));
            int32_t t = perm[k]; perm[k] = perm[j]; perm[j] = t;
        }
        q->gidx = malloc((size_t)K * sizeof *q->gidx);
        for (int64_t k = 0; k < K; k++) q->gidx[k] = perm[k] / group;
        if (gmode == 2) q->gidx[K / 2] = -1; /* "not initialised": column order */
        free(perm);
    }
    q->w = (vsr_int4_weight){q->packed, q->scale, q->zp, q->gidx, group, N, K};
    q->deq = malloc((size_t)(N * K) * sizeof *q->deq);
    vsr_dequant_int4_ref(q->packed, q->scale, q->zp, q->gidx, N, K, group, q->deq);
}

static void q4_free(q4 *q) {
    free(q->packed); free(q->zp); free(q->scale); free(q->gidx); free(q->deq);
}

static void check_int4(int64_t M, int64_t K, int64_t N, int group, int asym, int gmode) {
    q4 q;
    q4_make(&q, N, K, group, asym, gmode, 0);
    float *X = rand_f32(M * K), *Y0 = rand_f32(M * N);
    float *ref = malloc((size_t)(M * N) * sizeof *ref), *ref2 = malloc((size_t)(M * N) * sizeof *ref2);
    float *got = malloc((size_t)(M * N) * sizeof *got);
    float *mag = malloc((size_t)(M * N) * sizeof *mag), *Xa = malloc((size_t)(M * K) * sizeof *Xa);
    uint16_t *Wa = malloc((size_t)(N * K) * sizeof *Wa);
    for (int64_t i = 0; i < M * K; i++) Xa[i] = fabsf(X[i]);
    for (int64_t i = 0; i < N * K; i++) Wa[i] = q.deq[i] & 0x7fff;
    vsr_gemm_bf16_ref(Xa, M, K, Wa, N, mag, 0);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(ref, Y0, (size_t)(M * N) * sizeof *ref);
        memcpy(ref2, Y0, (size_t)(M * N) * sizeof *ref2);
        vsr_gemm_int4_ref(X, M, &q.w, ref, acc);
        vsr_gemm_bf16_ref(X, M, K, q.deq, N, ref2, acc);
        /* the two references share no code; same k order, same weights: identical */
        CHECK_MSG(memcmp(ref, ref2, (size_t)(M * N) * sizeof *ref) == 0,
                  "int4 ref vs dequant+bf16 ref M %lld K %lld N %lld g %d asym %d gidx %d",
                  (long long)M, (long long)K, (long long)N, group, asym, gmode);
        for (int i = 0; i < N_ISAS; i++) {
            if (vsr_gemm_force_isa(ISAS[i]) != 0) continue;
            for (int pi = 0; pi < 2; pi++) {
                memcpy(got, Y0, (size_t)(M * N) * sizeof *got);
                vsr_gemm_int4(pi ? g_pool3 : NULL, X, M, &q.w, got, acc);
                double e = test_nerr(got, ref2, M * N);
                /* A tiny output (M*N of 1..5) can be a cancelled sum: then measure the error
                 * on the scale of the summation-error bound, max sum_k |x w|. */
                if (e > TOL) e = fmin(e, nerr_abs(got, ref2, mag, M * N));
                CHECK_MSG(e <= TOL, "int4 %s M %lld K %lld N %lld g %d asym %d gidx %d acc %d: err %.3g",
                          ISAS[i], (long long)M, (long long)K, (long long)N, group, asym, gmode,
                          acc, e);
            }
        }
    }
    vsr_gemm_force_isa(NULL);
    free(X); free(Y0); free(ref); free(ref2); free(got); free(mag); free(Xa); free(Wa);
    q4_free(&q);
}

static const int groups[] = {32, 64, 128, -1, 8, 24};

TEST(int4_matches_refs) {
    static const int64_t K4[] = {8, 16, 24, 136, 1024};
    static const int64_t M4[] = {1, 3, 8, 9, 33};
    static const int64_t N4[] = {1, 5, 17, 64, 255};
    for (size_t gi = 0; gi < COUNT(groups); gi++)
        for (int asym = 0; asym < 2; asym++)
            for (int gmode = 0; gmode < (groups[gi] > 0 ? 3 : 1); gmode++)
                for (size_t a = 0; a < COUNT(M4); a++)
                    for (size_t b = 0; b < COUNT(K4); b++)
                        for (size_t c = 0; c < COUNT(N4); c++)
                            if ((a + b + c + gi) % 2 == 0 || M4[a] == 9 || N4[c] == 255)
                                check_int4(M4[a], K4[b], N4[c], groups[gi], asym, gmode);
    check_int4(4, 17408, 20, 128, 1, 0);
    check_int4(4, 17408, 20, 128, 0, 1);
    check_int4(12, 17408, 20, 32, 1, 1);
    check_int4(128, 1024, 300, 128, 0, 0);
}

/* The decoded weights, bit for bit: with X the identity (large path) or one-hot rows
 * (small path), every output is one weight times 1 plus exact zeros. */
static void check_decode(int64_t K, int64_t N, int group, int asym, int gmode) {
    q4 q;
    q4_make(&q, N, K, group, asym, gmode, 1);
    float *X = calloc((size_t)(K * K), sizeof *X), *Y = malloc((size_t)(K * N) * sizeof *Y);
    for (int64_t k = 0; k < K; k++) X[k * K + k] = 1.0f;
    for (int i = 0; i < N_ISAS; i++) {
        if (vsr_gemm_force_isa(ISAS[i]) != 0) continue;
        int64_t bad = 0;
        vsr_gemm_int4(g_pool3, X, K, &q.w, Y, 0); /* M = K > 8: large path */
        for (int64_t m = 0; m < K; m++)
            for (int64_t n = 0; n < N; n++) bad += Y[m * N + n] != vsr_bf16_to_f32(q.deq[n * K + m]);
        for (int64_t m0 = 0; m0 < K; m0 += 8) { /* 8 one-hot rows at a time: small path */
            int64_t mm = K - m0 < 8 ? K - m0 : 8;
            vsr_gemm_int4(g_pool3, X + m0 * K, mm, &q.w, Y, 0);
            for (int64_t m = 0; m < mm; m++)
                for (int64_t n = 0; n < N; n++)
                    bad += Y[m * N + n] != vsr_bf16_to_f32(q.deq[n * K + m0 + m]);
        }
        CHECK_MSG(bad == 0, "%s K %lld N %lld g %d asym %d gidx %d: %lld weights differ", ISAS[i],
                  (long long)K, (long long)N, group, asym, gmode, (long long)bad);
    }
    vsr_gemm_force_isa(NULL);
    free(X); free(Y);
    q4_free(&q);
}

TEST(int4_decode_bit_exact) {
    for (size_t gi = 0; gi < COUNT(groups); gi++)
        for (int asym = 0; asym < 2; asym++)
            for (int gmode = 0; gmode < (groups[gi] > 0 ? 2 : 1); gmode++) {
                check_decode(136, 37, groups[gi], asym, gmode);
                check_decode(264, 40, groups[gi], asym, gmode);
            }
}

int main(void) {
    test_rng_seed(0x9e3779b97f4a7c15ull);
    g_pool3 = vsr_pool_new(3); /* more workers than cores: uneven, preempted chunks */
    RUN(pool_covers_every_index_once);
    RUN(pool_default_size_and_null);
    RUN(isa_selection);
    RUN(f32_matches_ref);
    RUN(bf16_matches_ref);
    RUN(dense_long_k_and_odd_k);
    RUN(k_zero_and_empty);
    RUN(int4_matches_refs);
    RUN(int4_decode_bit_exact);
    vsr_pool_free(g_pool3);
    return test_summary();
}
