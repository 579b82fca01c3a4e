/* tests/test_cuda_gemm.c: the BF16 cuBLASLt GEMM's widened configuration search under an autotune
 * cache (src/backend/cuda/linear.cu, lt_choose_wide): results against a double reference, bit-identical
 * answers across processes that share the cache (the recorded configuration, split-K included, is
 * rebuilt exactly), the previous search when VSR_CUDA_LT_SEARCH is not 1, and cache entries the
 * device cannot run refused with the file's name. The search is off by default; this program sets
 * VSR_CUDA_LT_SEARCH=1 for itself and its children.
 *
 * Error measure: ||y - ref||_2 / ||ref||_2 against the product of the BF16-rounded activations and
 * weights in double: only the FP32 summation order differs (split-K included): bound 2e-5.
 * Every output is poisoned with NaN first. Without CUDA or a device: "SKIP: no CUDA device (...)". */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "test.h"
#ifdef VSR_HAVE_CUDA
#include "backend/backend_cuda.h"
#include "backend/cuda/quant_internal.h"
#include "vsr/dtype.h"
/* from src/backend/cuda/linear.cu: the BF16 GEMM's last configuration decision ("lt:<config>,<timed|cache>") */
const char *cuda_lt_last_choice(void);

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static double nerr(const float *y, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) return INFINITY;
        double d = (double)y[i] - ref[i];
        num += d * d, den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static vsr_backend GB;
static const char *g_self;

/* M >= 128 (the widened search's lower bound); K = 4096 lets split-K 2-4 keep >= 1024 columns each */
typedef struct gcase {
    int64_t M, N, K;
} gcase;
static const gcase CASES[] = {{256, 512, 4096}, {200, 1024, 2048}, {130, 520, 1040}};
#define NCASES 3

typedef struct gdata {
    float *x;    /* [M, K] FP32 activations (the linear rounds them to BF16) */
    uint16_t *w; /* [N, K] BF16 weights */
    double *ref; /* [M, N] */
} gdata;

/* the data of case i: the same in every process (seeded by the case) */
static void gmake(int i, gdata *d) {
    const gcase *c = &CASES[i];
    rng = 0x1234567ull + 7919ull * (uint64_t)i;
    d->x = malloc(sizeof(float) * (size_t)(c->M * c->K));
    d->w = malloc(2 * (size_t)(c->N * c->K));
    d->ref = malloc(sizeof(double) * (size_t)(c->M * c->N));
    for (int64_t j = 0; j < c->M * c->K; j++) d->x[j] = frand();
    for (int64_t j = 0; j < c->N * c->K; j++) d->w[j] = vsr_f32_to_bf16(frand() * 0.05f);
}
static void gref(int i, gdata *d) {
    const gcase *c = &CASES[i];
    double *xr = malloc(sizeof(double) * (size_t)c->K);
    for (int64_t m = 0; m < c->M; m++) {
        for (int64_t k = 0; k < c->K; k++) xr[k] = vsr_bf16_to_f32(vsr_f32_to_bf16(d->x[m * c->K + k]));
        for (int64_t n = 0; n < c->N; n++) {
            const uint16_t *wr = d->w + n * c->K;
            double s = 0;
            for (int64_t k = 0; k < c->K; k++) s += xr[k] * vsr_bf16_to_f32(wr[k]);
            d->ref[m * c->N + n] = s;
        }
    }
    free(xr);
}
static void gfree(gdata *d) { free(d->x), free(d->w), free(d->ref); }

/* y = x . W^T on the GPU through the backend's BF16 linear (y poisoned first, or y0 + x . W^T) */
static vsr_status glinear(vsr_backend *b, int i, const gdata *d, const float *y0, float *y, vsr_err *e) {
    const gcase *c = &CASES[i];
    vsr_weight_view v = {.kind = VSR_WK_BF16, .N = c->N, .K = c->K, .w = d->w, .name = "t.gemm"};
    vsr_bweight *bw = NULL;
    float *dx = NULL, *dy = NULL;
    vsr_status st = b->ops->weight_upload(b->ctx, &v, &bw, e);
    if (!st) st = b->ops->buf_alloc(b->ctx, sizeof(float) * (size_t)(c->M * c->K), (void **)&dx, e);
    if (!st) st = b->ops->buf_alloc(b->ctx, sizeof(float) * (size_t)(c->M * c->N), (void **)&dy, e);
    for (int64_t j = 0; j < c->M * c->N; j++) y[j] = y0 ? y0[j] : NAN;
    if (!st) st = b->ops->buf_set(b->ctx, dx, d->x, sizeof(float) * (size_t)(c->M * c->K), e);
    if (!st) st = b->ops->buf_set(b->ctx, dy, y, sizeof(float) * (size_t)(c->M * c->N), e);
    if (!st) st = b->ops->linear(b->ctx, dx, c->M, bw, dy, y0 != NULL, e);
    if (!st) st = b->ops->buf_get(b->ctx, y, dy, sizeof(float) * (size_t)(c->M * c->N), e);
    if (dx) b->ops->buf_free(b->ctx, dx);
    if (dy) b->ops->buf_free(b->ctx, dy);
    if (bw) b->ops->weight_free(b->ctx, bw);
    return st;
}

static vsr_status fresh_backend(const char *dir, vsr_err *e) {
    vsr_status st = vsr_backend_cuda_new(0, &GB, e);
    if (!st) st = cuda_quant_set_options(GB.ctx, "auto", dir, e);
    return st;
}

/* the cache file of case i's key in dir ("" when none): ltcfg-<device>-bf16-m<M>-n<N>-k<K>.json */
static void find_file(const char *dir, const char *kernel, int i, char *out, size_t n) {
    char tail[96];
    snprintf(tail, sizeof tail, "-bf16-m%lld-n%lld-k%lld.json", (long long)CASES[i].M, (long long)CASES[i].N,
             (long long)CASES[i].K);
    out[0] = 0;
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *de;
    size_t kl = strlen(kernel), tl = strlen(tail);
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name);
        if (l > kl + tl && strncmp(de->d_name, kernel, kl) == 0 && de->d_name[kl] == '-' &&
            strcmp(de->d_name + l - tl, tail) == 0) {
            snprintf(out, n, "%s/%s", dir, de->d_name);
            break;
        }
    }
    closedir(dp);
}

/* child: one process on DIR running case `which` (-1: all), writing outputs, the last path, timings, loads */
static int gemm_child(const char *dir, const char *outpath, int which) {
    vsr_err e = {0};
    if (fresh_backend(dir, &e)) {
        fprintf(stderr, "child: %s\n", e.msg);
        return 2;
    }
    FILE *f = fopen(outpath, "wb");
    if (!f) return 5;
    char path[64] = {0};
    for (int i = 0; i < NCASES; i++) {
        if (which >= 0 && i != which) continue;
        gdata d;
        gmake(i, &d);
        float *y = malloc(sizeof(float) * (size_t)(CASES[i].M * CASES[i].N));
        if (glinear(&GB, i, &d, NULL, y, &e)) {
            fprintf(stderr, "child linear: %s\n", e.msg);
            return 6;
        }
        snprintf(path, sizeof path, "%s", cuda_lt_last_choice());
        fwrite(y, sizeof(float), (size_t)(CASES[i].M * CASES[i].N), f);
        free(y), gfree(&d);
    }
    long t = cuda_quant_autotune_timings(), l = cuda_quant_autotune_loads();
    fwrite(path, 1, sizeof path, f);
    fwrite(&t, sizeof t, 1, f);
    fwrite(&l, sizeof l, 1, f);
    fclose(f);
    vsr_backend_destroy(&GB);
    return 0;
}

static int run_child(const char *dir, const char *out, int which) {
    char w[16];
    snprintf(w, sizeof w, "%d", which);
    pid_t p = fork();
    if (p == 0) {
        execl(g_self, g_self, "--gemm-child", dir, out, w, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (p < 0 || waitpid(p, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

typedef struct child_out {
    char *buf;
    size_t ny; /* bytes of outputs */
    char path[64];
    long timed, loaded;
} child_out;
static int child_read(const char *file, child_out *o) {
    size_t n = 0;
    memset(o, 0, sizeof *o);
    o->buf = test_read_file(file, &n);
    size_t tail = 64 + 2 * sizeof(long);
    if (!o->buf || n < tail) return -1;
    o->ny = n - tail;
    memcpy(o->path, o->buf + o->ny, 64);
    o->path[63] = 0;
    memcpy(&o->timed, o->buf + o->ny + 64, sizeof(long));
    memcpy(&o->loaded, o->buf + o->ny + 64 + sizeof(long), sizeof(long));
    return 0;
}

static gdata G[NCASES];

TEST(wide_against_reference) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tune-ref", test_tmpdir());
    vsr_err e = {0};
    vsr_backend save = GB;
    CHECK_OK(fresh_backend(dir, &e), e);
    for (int i = 0; i < NCASES; i++) {
        const gcase *c = &CASES[i];
        int64_t n = c->M * c->N;
        float *y = malloc(sizeof(float) * (size_t)n), *y0 = malloc(sizeof(float) * (size_t)n);
        double *r2 = malloc(sizeof(double) * (size_t)n);
        CHECK_OK(glinear(&GB, i, &G[i], NULL, y, &e), e);
        const char *path = cuda_lt_last_choice();
        CHECK_MSG(strncmp(path, "lt:id", 5) == 0 && strstr(path, ",timed"), "path %s", path);
        double er = nerr(y, G[i].ref, n);
        printf("  M %lld N %lld K %lld: %s  err %.2e\n", (long long)c->M, (long long)c->N, (long long)c->K, path, er);
        CHECK_MSG(er < 2e-5, "M %lld: error %.3e", (long long)c->M, er);
        /* accumulating into y0 with the same configuration (the plan is kept) */
        for (int64_t j = 0; j < n; j++) y0[j] = frand(), r2[j] = y0[j] + G[i].ref[j];
        CHECK_OK(glinear(&GB, i, &G[i], y0, y, &e), e);
        er = nerr(y, r2, n);
        CHECK_MSG(er < 2e-5, "M %lld accumulate: error %.3e", (long long)c->M, er);
        char file[1200];
        find_file(dir, "ltcfg", i, file, sizeof file);
        CHECK_MSG(file[0], "no ltcfg file for case %d in %s", i, dir);
        free(y), free(y0), free(r2);
    }
    vsr_backend_destroy(&GB);
    /* VSR_CUDA_LT_SEARCH unset (the default): the heuristic's 16 under the previous kernel name */
    snprintf(dir, sizeof dir, "%s/tune-old", test_tmpdir());
    unsetenv("VSR_CUDA_LT_SEARCH");
    CHECK_OK(fresh_backend(dir, &e), e);
    float *y = malloc(sizeof(float) * (size_t)(CASES[2].M * CASES[2].N));
    CHECK_OK(glinear(&GB, 2, &G[2], NULL, y, &e), e);
    CHECK(nerr(y, G[2].ref, CASES[2].M * CASES[2].N) < 2e-5);
    char f1[1200], f2[1200];
    find_file(dir, "lt_gemm", 2, f1, sizeof f1);
    find_file(dir, "ltcfg", 2, f2, sizeof f2);
    CHECK_MSG(f1[0] && !f2[0], "search off: lt_gemm file \"%s\", ltcfg file \"%s\"", f1, f2);
    setenv("VSR_CUDA_LT_SEARCH", "1", 1);
    free(y);
    vsr_backend_destroy(&GB);
    GB = save;
}

/* names in a cache file's timings, other than its choice */
static int other_names(const char *file, char names[][64], int max, int want_split) {
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je);
    int n = 0;
    if (!root) return 0;
    const char *ch = json_string_value(json_object_get(root, "choice"));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(root, "timings_us"), k, v) {
        if (n >= max) break;
        if (ch && strcmp(k, ch) == 0) continue;
        if (json_real_value(v) < 0 || json_real_value(v) > 1e8) continue; /* could not run */
        int split = strstr(k, "-sk1-") == NULL;
        if (split != want_split) continue;
        snprintf(names[n++], 64, "%s", k);
    }
    json_decref(root);
    return n;
}

/* copy of src with "choice" replaced, at dst (a fresh directory's file of the same name) */
static int write_choice(const char *src, const char *dstdir, const char *choice, char *dst, size_t dn) {
    json_error_t je;
    json_t *root = json_load_file(src, 0, &je);
    if (!root) return -1;
    json_object_set_new(root, "choice", json_string(choice));
    const char *base = strrchr(src, '/');
    snprintf(dst, dn, "%s%s", dstdir, base);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dstdir);
    int r = system(cmd) == 0 ? json_dump_file(root, dst, 0) : -1;
    json_decref(root);
    return r;
}

TEST(wide_two_processes) {
    char dir[600], o1[700], o2[700];
    snprintf(dir, sizeof dir, "%s/tune2", test_tmpdir());
    snprintf(o1, sizeof o1, "%s/g1.bin", test_tmpdir());
    snprintf(o2, sizeof o2, "%s/g2.bin", test_tmpdir());
    CHECK(run_child(dir, o1, -1) == 0);
    CHECK(run_child(dir, o2, -1) == 0);
    child_out a, b;
    CHECK(child_read(o1, &a) == 0 && child_read(o2, &b) == 0);
    if (a.buf && b.buf) {
        CHECK(a.ny == b.ny);
        CHECK_MSG(a.ny == b.ny && memcmp(a.buf, b.buf, a.ny) == 0, "the two processes' answers differ");
        printf("  first process timed %ld keys, loaded %ld (%s); second timed %ld, loaded %ld (%s)\n", a.timed,
               a.loaded, a.path, b.timed, b.loaded, b.path);
        CHECK(a.timed == NCASES && a.loaded == 0);
        CHECK(b.timed == 0 && b.loaded == NCASES);
        CHECK(strstr(b.path, ",cache") != NULL);
    }
    free(a.buf), free(b.buf);
    /* configurations the first process timed but did not choose, split-K first: recorded as the
     * choice, each gives the reference's answer and the same bits in two processes */
    char file[1200];
    find_file(dir, "ltcfg", 0, file, sizeof file);
    CHECK(file[0] != 0);
    char names[6][64];
    int ns = other_names(file, names, 3, 1);
    int nn = other_names(file, names + ns, 2, 0);
    printf("  %d split-K and %d other configurations recorded by hand\n", ns, nn);
    if (!ns) printf("  note: no split-K configuration was timed for M %lld N %lld K %lld\n", (long long)CASES[0].M,
                    (long long)CASES[0].N, (long long)CASES[0].K);
    CHECK(ns + nn > 0);
    for (int i = 0; i < ns + nn; i++) {
        char d2[700], dst[1400];
        snprintf(d2, sizeof d2, "%s/forced%d", test_tmpdir(), i);
        CHECK(write_choice(file, d2, names[i], dst, sizeof dst) == 0);
        CHECK(run_child(d2, o1, 0) == 0);
        CHECK(run_child(d2, o2, 0) == 0);
        CHECK(child_read(o1, &a) == 0 && child_read(o2, &b) == 0);
        if (a.buf && b.buf && a.ny == b.ny && a.ny == sizeof(float) * (size_t)(CASES[0].M * CASES[0].N)) {
            char want[80];
            snprintf(want, sizeof want, "lt:%s,cache", names[i]);
            CHECK_MSG(strcmp(a.path, want) == 0, "path %s, want %s", a.path, want);
            CHECK_MSG(memcmp(a.buf, b.buf, a.ny) == 0, "%s: the two processes' answers differ", names[i]);
            double er = nerr((const float *)a.buf, G[0].ref, CASES[0].M * CASES[0].N);
            printf("  %s: err %.2e\n", names[i], er);
            CHECK_MSG(er < 2e-5, "%s: error %.3e", names[i], er);
        } else
            CHECK_MSG(0, "%s: child output missing", names[i]);
        free(a.buf), free(b.buf);
    }
}

/* a recorded configuration that is not a name, or that cuBLASLt rejects, is refused with the file */
TEST(wide_rejected_entries) {
    char dir[600], file[1200];
    snprintf(dir, sizeof dir, "%s/tune2", test_tmpdir()); /* written by wide_two_processes */
    find_file(dir, "ltcfg", 2, file, sizeof file);
    CHECK(file[0] != 0);
    if (!file[0]) return;
    json_error_t je;
    json_t *root = json_load_file(file, 0, &je);
    const char *ch = root ? json_string_value(json_object_get(root, "choice")) : NULL;
    int id = -1;
    if (ch) sscanf(ch, "id%d-", &id);
    json_decref(root);
    CHECK(id >= 0);
    char bad_tile[64];
    snprintf(bad_tile, sizeof bad_tile, "id%d-t9999-s0-sk1-r0-w0-o0-i0-c0", id);
    static const struct {
        const char *choice, *needle;
    } BAD[] = {
        {"id99999-t23-s0-sk1-r0-w0-o0-i0-c0", "is rejected on cuda:0"},
        {NULL, "is rejected on cuda:0"}, /* bad_tile */
        {"a3", "is not a cuBLASLt configuration name"},
        {"id1-t23-s0-sk01-r0-w0-o0-i0-c0", "is not a cuBLASLt configuration name"},
    };
    vsr_backend save = GB;
    for (int i = 0; i < 4; i++) {
        char d2[700], dst[1400];
        const char *c = BAD[i].choice ? BAD[i].choice : bad_tile;
        snprintf(d2, sizeof d2, "%s/bad%d", test_tmpdir(), i);
        CHECK(write_choice(file, d2, c, dst, sizeof dst) == 0);
        vsr_err e = {0};
        CHECK_OK(fresh_backend(d2, &e), e);
        float *y = malloc(sizeof(float) * (size_t)(CASES[2].M * CASES[2].N));
        vsr_status st = glinear(&GB, 2, &G[2], NULL, y, &e);
        CHECK_ERR(st, e, VSR_E_FORMAT, BAD[i].needle);
        CHECK_MSG(strstr(e.msg, dst) && strstr(e.msg, "delete the file to time again"), "message: %s", e.msg);
        if (i == 0) printf("  refused: %s\n", e.msg);
        free(y);
        vsr_backend_destroy(&GB);
    }
    GB = save;
}

#endif /* VSR_HAVE_CUDA */

int main(int argc, char **argv) {
#ifdef VSR_HAVE_CUDA
    if (argc == 5 && strcmp(argv[1], "--gemm-child") == 0) return gemm_child(argv[2], argv[3], atoi(argv[4]));
    g_self = "/proc/self/exe";
    setenv("VSR_CUDA_LT_SEARCH", "1", 1); /* children inherit it */
    vsr_err e = {0};
    if (vsr_backend_cuda_new(0, &GB, &e)) {
        printf("SKIP: no CUDA device (%s)\n", e.msg);
        return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
    }
    for (int i = 0; i < NCASES; i++) gmake(i, &G[i]), gref(i, &G[i]);
    RUN(wide_against_reference);
    RUN(wide_two_processes);
    RUN(wide_rejected_entries);
    for (int i = 0; i < NCASES; i++) gfree(&G[i]);
    vsr_backend_destroy(&GB);
#else
    (void)argc, (void)argv;
    printf("SKIP: no CUDA device (this build has no CUDA: nvcc was not found at build time)\n");
    return test_summary() ? 1 : 77; /* 77: skipped (tests/run.sh) */
#endif
    return test_summary();
}
