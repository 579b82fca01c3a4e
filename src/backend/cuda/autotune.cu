/* src/backend/cuda/autotune.cu: --autotune-cache DIR.
 *
 * A kernel with several tile configurations asks autotune_choose() for one per key (the shape
 * and what else changes the choice). The answer is remembered per ctx. With a cache directory,
 * the first process to need a key times every candidate once on the live inputs (into a private
 * output buffer) and records the fastest in DIR/<kernel>-<device>-<key>.json; it creates the
 * file with link(2), which fails if another process got there first, and then loads that one,
 * so racing processes still agree. Later processes load the file and time nothing, so every
 * process sees the same configuration and, since the kernels are deterministic for a given
 * configuration, bit-identical answers. Without a directory the caller's default is used
 * (no timing, deterministic).
 *
 * Callers whose candidates are not one fixed list (lt_gemm's widened cuBLASLt search: the
 * candidates depend on timings) record a choice that names the configuration in full and read it
 * back with autotune_recorded(), rebuilding and checking it themselves.
 *
 * File: {"format":"vsr-autotune/1","kernel":"int4_fused","device":"NVIDIA H200",
 *        "key":"n1024-k5120-g128-t2","choice":"mt2-w4-ks8","timings_us":{"mt2-w4-ks1":12.1,...},
 *        "l2":"flushed"}   ("l2": how the weight-streaming kernels were timed; see COLD_KERNELS)
 *
 * The tuning of the backend: this file (the cache), lt_gemm's search (linear.cu), the FP8 route and cuBLASLt
 * algorithms (quant_fp8.cu), the int4 candidate lists (quant_int4.cu). No kernel of its own (no floor). Tests:
 * tests/test_cuda_quant.c (autotune_two_processes: racing processes agree, a second process times nothing),
 * tests/test_cuda_gemm.c (the widened search recorded and rebuilt). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/quant_internal.h"

#define TUNE_FORMAT "vsr-autotune/1"
#define TUNE_FILE_MAX (64 * 1024)

struct tune_entry {
    char kernel[32];
    char key[96];
    int choice;
    const char *source; /* "timed", "cache", "default" (static strings) */
};

static long g_timings, g_loads;
extern "C" long cuda_quant_autotune_timings(void) { return g_timings; }
extern "C" long cuda_quant_autotune_loads(void) { return g_loads; }

extern "C" void autotune_free(quant_state *q) {
    free(q->tune);
    q->tune = NULL;
    q->n_tune = q->cap_tune = 0;
}

static vsr_status remember(cuda_ctx *c, quant_state *q, const char *kernel, const char *key, int choice,
                           const char *source, vsr_err *err) {
    if (q->n_tune == q->cap_tune) {
        int cap = q->cap_tune ? q->cap_tune * 2 : 64;
        struct tune_entry *t = (struct tune_entry *)realloc(q->tune, sizeof *t * (size_t)cap);
        if (!t) return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (autotune table)", c->device);
        q->tune = t, q->cap_tune = cap;
    }
    struct tune_entry *e = &q->tune[q->n_tune++];
    snprintf(e->kernel, sizeof e->kernel, "%s", kernel);
    snprintf(e->key, sizeof e->key, "%s", key);
    e->choice = choice, e->source = source;
    return VSR_OK;
}

/* file-name-safe device name: letters and digits kept, anything else '_' */
static void safe_name(const char *s, char *out, size_t n) {
    size_t i = 0;
    for (; *s && i + 1 < n; s++)
        out[i++] = ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-') ? *s : '_';
    out[i] = 0;
}

/* Reads a cache file. VSR_E_NOT_FOUND when absent; VSR_E_FORMAT naming the file when it is not
 * one of ours for this kernel, device and key, or names a configuration we do not have. */
static vsr_status load_file(cuda_ctx *c, const char *path, const char *kernel, const char *key, int n_cand,
                            const char *const *names, int *choice, vsr_err *err, char *text = NULL,
                            size_t text_n = 0) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR) return VSR_E_NOT_FOUND; /* ENOTDIR: reported below */
        return vsr_err_set(err, VSR_E_IO, "autotune cache file %s: cannot open: %s", path, strerror(errno));
    }
    char *buf = (char *)malloc(TUNE_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, TUNE_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!buf) return vsr_err_set(err, VSR_E_NOMEM, "autotune cache file %s: out of memory", path);
    if (n > TUNE_FILE_MAX) {
        free(buf);
        return vsr_err_set(err, VSR_E_FORMAT, "autotune cache file %s: larger than %d bytes", path, TUNE_FILE_MAX);
    }
    json_error_t je;
    json_t *root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!root)
        return vsr_err_set(err, VSR_E_FORMAT, "autotune cache file %s: not JSON (line %d: %s)", path, je.line, je.text);
    const char *fmt = json_string_value(json_object_get(root, "format"));
    const char *k = json_string_value(json_object_get(root, "kernel"));
    const char *d = json_string_value(json_object_get(root, "device"));
    const char *ky = json_string_value(json_object_get(root, "key"));
    const char *ch = json_string_value(json_object_get(root, "choice"));
    vsr_status st = VSR_OK;
    if (!fmt || strcmp(fmt, TUNE_FORMAT) != 0 || !k || strcmp(k, kernel) != 0 || !d || strcmp(d, c->dev_name) != 0 ||
        !ky || strcmp(ky, key) != 0 || !ch)
        st = vsr_err_set(err, VSR_E_FORMAT,
                         "autotune cache file %s: expected {\"format\":\"%s\",\"kernel\":\"%s\",\"device\":\"%s\","
                         "\"key\":\"%s\",\"choice\":...}",
                         path, TUNE_FORMAT, kernel, c->dev_name, key);
    else if (text) { /* autotune_recorded: the caller validates the name */
        if (strlen(ch) >= text_n)
            st = vsr_err_set(err, VSR_E_FORMAT, "autotune cache file %s: choice longer than %zu bytes", path,
                             text_n - 1);
        else
            snprintf(text, text_n, "%s", ch);
    } else {
        int found = -1;
        for (int i = 0; i < n_cand; i++)
            if (strcmp(names[i], ch) == 0) found = i;
        if (found < 0)
            st = vsr_err_set(err, VSR_E_FORMAT,
                             "autotune cache file %s: choice \"%s\" is not a configuration of %s for this shape "
                             "(delete the file to time again)",
                             path, ch, kernel);
        else
            *choice = found;
    }
    json_decref(root);
    return st;
}

static vsr_status write_file(cuda_ctx *c, const char *path, const char *kernel, const char *key, int n_cand,
                             const char *const *names, const float *us, int choice, const char *l2, vsr_err *err) {
    json_t *root = json_object(), *tm = json_object();
    json_object_set_new(root, "format", json_string(TUNE_FORMAT));
    json_object_set_new(root, "kernel", json_string(kernel));
    json_object_set_new(root, "device", json_string(c->dev_name));
    json_object_set_new(root, "key", json_string(key));
    json_object_set_new(root, "choice", json_string(names[choice]));
    for (int i = 0; i < n_cand; i++) json_object_set_new(tm, names[i], json_real(us[i] < 0 ? -1.0 : (double)us[i]));
    json_object_set_new(root, "timings_us", tm);
    json_object_set_new(root, "l2", json_string(l2));
    char *text = json_dumps(root, JSON_INDENT(1));
    json_decref(root);
    if (!text) return vsr_err_set(err, VSR_E_NOMEM, "autotune cache file %s: out of memory", path);
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    vsr_status st = VSR_OK;
    if (!f)
        st = vsr_err_set(err, VSR_E_IO, "autotune cache file %s: cannot create: %s", tmp, strerror(errno));
    else {
        size_t len = strlen(text);
        int bad = fwrite(text, 1, len, f) != len || fputc('\n', f) == EOF;
        bad |= fclose(f) != 0;
        if (bad) st = vsr_err_set(err, VSR_E_IO, "autotune cache file %s: write failed", tmp);
    }
    free(text);
    if (st) {
        unlink(tmp);
        return st;
    }
    /* first writer wins: link fails with EEXIST when another process recorded the key first */
    if (link(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        if (e == EEXIST) return VSR_E_NOT_FOUND; /* caller loads the other file */
        return vsr_err_set(err, VSR_E_IO, "autotune cache file %s: cannot create: %s", path, strerror(e));
    }
    unlink(tmp);
    return VSR_OK;
}

/* Timing. A first round of TUNE_REPS launches per candidate estimates each one; then TUNE_ROUNDS
 * rounds, the candidates interleaved, time each over a window of about TUNE_WINDOW_US of back-to-back
 * launches, and the median round counts. Five launches alone ranked candidates within a few per cent
 * of each other by how they ran in a short burst at boost clocks, not under the sustained load of a
 * forward (bench/notes/2026-11-29-cuda-sessions.md "Widened cuBLASLt search for the BF16 GEMMs"); interleaving also spreads clock drift over all. */
#define TUNE_REPS 5
#define TUNE_ROUNDS 3
#define TUNE_WINDOW_US 2000.0f
#define TUNE_MAX_REPS 400
static_assert(TUNE_ROUNDS == 3, "time_all takes the median of three rounds");

/* Kernels whose candidates stream a weight: a forward reads each weight once, never from L2, so their
 * candidates are timed cold (L2 filled with other data before every launch, each launch timed alone). Timed
 * back to back, a weight that fits in L2 (int4 gate_up at 27B: 45 MB of a 50 MB L2) stays there and the
 * choice favoured configurations that are fast from L2 (bench/NOTES.md, fifth session, call 1). */
static const char *const COLD_KERNELS[] = {"int4_fused", "fp8_lt", "fp8_route", "lt_gemm", "ltcfg"};
#define TUNE_COLD_MAX_REPS 24

static int tune_cold(const char *kernel) {
    for (size_t i = 0; i < sizeof COLD_KERNELS / sizeof COLD_KERNELS[0]; i++)
        if (strcmp(kernel, COLD_KERNELS[i]) == 0) return 1;
    return 0;
}

/* the L2 flush: a buffer of twice the device's L2, read through before each cold launch. Read, not written:
 * a write (cudaMemset) would leave L2 full of dirty lines, whose write-back would then run during the
 * timed launch (as much traffic as an int4 weight of 45 MB). */
typedef struct tune_flush {
    void *buf;
    size_t bytes;
    int blocks;
} tune_flush;

__global__ void k_l2_flush(const uint4 *__restrict__ b, size_t n, uint32_t *sink) {
    uint32_t x = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = b[i];
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x9E3779B9u) *sink = x; /* (almost) never: keeps the loads */
}

/* Mean microseconds of candidate `cand` over `reps` launches after a warm-up one (1e9 for a
 * candidate that cannot run), or -1 with err set. With a flush buffer each launch follows a read
 * of it and is timed alone (the read is not counted). */
static float time_candidate(cuda_ctx *c, tune_launch_fn launch, int cand, void *arg, void *out, int reps,
                            const tune_flush *fl, vsr_err *err) {
    int r = launch(c, cand, arg, out, err);
    if (r == TUNE_SKIP) return 1e9f;
    if (r) return -1;
    if (fl && reps > TUNE_COLD_MAX_REPS) reps = TUNE_COLD_MAX_REPS;
    const int ne = fl ? 2 * reps : 2;
    cudaEvent_t ev[2 * TUNE_COLD_MAX_REPS];
    for (int i = 0; i < ne; i++) cudaEventCreate(&ev[i]);
    if (!fl) cudaEventRecord(ev[0], c->stream);
    for (int i = 0; i < reps && !r; i++) {
        if (fl) {
            k_l2_flush<<<fl->blocks, 256, 0, c->stream>>>((const uint4 *)fl->buf, fl->bytes / 16, (uint32_t *)fl->buf);
            cudaEventRecord(ev[2 * i], c->stream);
        }
        r = launch(c, cand, arg, out, err);
        if (fl) cudaEventRecord(ev[2 * i + 1], c->stream);
    }
    if (!fl) cudaEventRecord(ev[1], c->stream);
    float ms = -1;
    if (r == TUNE_SKIP) vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: a timed launch failed after its warm-up", c->device);
    else if (!r && cuda_check(c, cudaEventSynchronize(ev[ne - 1]), "autotune: synchronize", err) == VSR_OK) {
        float sum = 0, t;
        for (int i = 0; i < ne / 2 && sum >= 0; i++)
            sum = cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]) == cudaSuccess ? sum + t : -1;
        ms = sum < 0 ? -1 : sum / (float)reps;
    }
    for (int i = 0; i < ne; i++) cudaEventDestroy(ev[i]);
    return ms < 0 ? -1 : ms * 1000.0f;
}

static float median3(float a, float b, float c) {
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* us[i] for every candidate as described above; -1 with err set (naming nothing) on a failure. */
static int time_all(cuda_ctx *c, tune_launch_fn launch, int n_cand, void *arg, void *out, const tune_flush *fl,
                    float *us, vsr_err *err) {
    float *round = (float *)malloc(sizeof(float) * (size_t)n_cand * TUNE_ROUNDS);
    int *reps = (int *)malloc(sizeof(int) * (size_t)n_cand);
    int bad = -1;
    if (!round || !reps) {
        free(round), free(reps);
        vsr_err_set(err, VSR_E_NOMEM, "autotune: out of memory");
        return n_cand;
    }
    for (int i = 0; i < n_cand && bad < 0; i++) {
        us[i] = time_candidate(c, launch, i, arg, out, TUNE_REPS, fl, err);
        if (us[i] < 0) bad = i;
        float want = us[i] > 0 && us[i] < 1e9f ? TUNE_WINDOW_US / us[i] : 0;
        reps[i] = want > TUNE_MAX_REPS ? TUNE_MAX_REPS : (want < TUNE_REPS ? TUNE_REPS : (int)want);
    }
    for (int k = 0; k < TUNE_ROUNDS && bad < 0; k++)
        for (int i = 0; i < n_cand && bad < 0; i++) {
            round[k * n_cand + i] = us[i] >= 1e9f ? 1e9f : time_candidate(c, launch, i, arg, out, reps[i], fl, err);
            if (round[k * n_cand + i] < 0) bad = i;
        }
    if (bad < 0)
        for (int i = 0; i < n_cand; i++) us[i] = median3(round[i], round[n_cand + i], round[2 * n_cand + i]);
    free(round), free(reps);
    return bad;
}

/* DIR/<kernel>-<device>-<key>.json */
static vsr_status tune_path(cuda_ctx *c, const char *kernel, const char *key, char *path, size_t n, vsr_err *err) {
    char dev[128];
    safe_name(c->dev_name, dev, sizeof dev);
    int pn = snprintf(path, n, "%s/%s-%s-%s.json", c->autotune_dir, kernel, dev, key);
    if (pn < 0 || (size_t)pn >= n)
        return vsr_err_set(err, VSR_E_INVALID, "autotune cache directory %s: path too long", c->autotune_dir);
    return VSR_OK;
}

/* the cache directory exists (made if missing) and is a directory */
static vsr_status tune_dir_ok(cuda_ctx *c, vsr_err *err) {
    struct stat sb;
    if (stat(c->autotune_dir, &sb) != 0 && mkdir(c->autotune_dir, 0777) != 0 && errno != EEXIST)
        return vsr_err_set(err, VSR_E_IO, "autotune cache directory %s: cannot create: %s", c->autotune_dir,
                           strerror(errno));
    if (stat(c->autotune_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return vsr_err_set(err, VSR_E_IO, "autotune cache directory %s: not a directory", c->autotune_dir);
    return VSR_OK;
}

/* The recorded choice of (kernel, key) as text, for callers whose configurations are not a fixed
 * list (lt_gemm's widened cuBLASLt search names each configuration in full and rebuilds it from
 * the name). VSR_E_NOT_FOUND when nothing is recorded yet (the directory is then checked, so
 * a caller that times next fails before timing); VSR_E_FORMAT naming the file as load_file does;
 * path gets the file's name for the caller's own messages. */
extern "C" vsr_status autotune_recorded(cuda_ctx *c, const char *kernel, const char *key, char *choice, size_t n,
                                        char *path, size_t path_n, vsr_err *err) {
    if (!c->autotune_dir[0]) return VSR_E_NOT_FOUND;
    vsr_status st = tune_path(c, kernel, key, path, path_n, err);
    if (st) return st;
    if ((st = load_file(c, path, kernel, key, 0, NULL, NULL, err, choice, n)) == VSR_OK) g_loads++;
    if (st == VSR_E_NOT_FOUND) {
        vsr_status d = tune_dir_ok(c, err);
        if (d) return d;
    }
    return st;
}

extern "C" vsr_status autotune_choose(cuda_ctx *c, const char *kernel, const char *key, int n_cand,
                                      const char *const *names, int default_cand, tune_launch_fn launch, void *arg,
                                      size_t out_bytes, int *choice, const char **source, vsr_err *err) {
    quant_state *q;
    vsr_status st = quant_state_get(c, &q, err);
    if (st) return st;
    for (int i = 0; i < q->n_tune; i++)
        if (strcmp(q->tune[i].kernel, kernel) == 0 && strcmp(q->tune[i].key, key) == 0) {
            *choice = q->tune[i].choice, *source = q->tune[i].source;
            return VSR_OK;
        }
    if (n_cand <= 0) return vsr_err_set(err, VSR_E_INTERNAL, "autotune %s %s: no candidates", kernel, key);
    if (!c->autotune_dir[0] || n_cand == 1) {
        *choice = default_cand < n_cand ? default_cand : 0, *source = "default";
        return remember(c, q, kernel, key, *choice, *source, err);
    }
    char path[1200];
    if ((st = tune_path(c, kernel, key, path, sizeof path, err))) return st;
    st = load_file(c, path, kernel, key, n_cand, names, choice, err);
    if (st == VSR_OK) {
        g_loads++;
        *source = "cache";
        return remember(c, q, kernel, key, *choice, *source, err);
    }
    if (st != VSR_E_NOT_FOUND) return st;
    if ((st = tune_dir_ok(c, err))) return st;
    /* timing needs synchronisation; inside a graph capture keep the default and record nothing */
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(c->stream, &cap);
    if (cap != cudaStreamCaptureStatusNone) {
        *choice = default_cand < n_cand ? default_cand : 0, *source = "default(capturing)";
        return VSR_OK; /* not remembered: a later call outside capture times it */
    }
    if ((st = quant_grow(c, &q->tune_out, &q->tune_out_bytes, out_bytes, "autotune output", err))) return st;
    float *us = (float *)malloc(sizeof(float) * (size_t)n_cand);
    if (!us) return vsr_err_set(err, VSR_E_NOMEM, "autotune: out of memory");
    /* cold timing needs 2x L2 of scratch for the moment of timing; without room for it the candidates are
     * timed warm, and the file says which ("l2") */
    tune_flush fl = {NULL, 0, 4 * (c->sm_count > 0 ? c->sm_count : 1)};
    const char *l2 = "warm";
    if (tune_cold(kernel)) {
        int l2b = 0;
        if (cudaDeviceGetAttribute(&l2b, cudaDevAttrL2CacheSize, c->device) == cudaSuccess && l2b > 0 &&
            cudaMalloc(&fl.buf, 2 * (size_t)l2b) == cudaSuccess)
            fl.bytes = 2 * (size_t)l2b, l2 = "flushed";
        else
            fl.buf = NULL, l2 = "warm (no room for the L2 flush buffer)";
        cudaGetLastError();
    }
    int best = -1, bad = time_all(c, launch, n_cand, arg, q->tune_out, fl.buf ? &fl : NULL, us, err);
    if (fl.buf) cudaStreamSynchronize(c->stream), cudaFree(fl.buf);
    if (bad >= 0) {
        free(us);
        if (bad >= n_cand) return vsr_err_prefix(err, "autotune %s %s", kernel, key);
        return vsr_err_prefix(err, "autotune %s %s: candidate %s", kernel, key, names[bad]);
    }
    for (int i = 0; i < n_cand; i++)
        if (best < 0 || us[i] < us[best]) best = i;
    g_timings++;
    st = write_file(c, path, kernel, key, n_cand, names, us, best, l2, err);
    free(us);
    if (st == VSR_E_NOT_FOUND) { /* another process recorded it first: use its choice */
        if ((st = load_file(c, path, kernel, key, n_cand, names, choice, err))) return st;
        g_loads++;
        *source = "cache";
        return remember(c, q, kernel, key, *choice, *source, err);
    }
    if (st) return st;
    *choice = best, *source = "timed";
    return remember(c, q, kernel, key, *choice, *source, err);
}

extern "C" vsr_status autotune_choose_indexed(cuda_ctx *c, const char *kernel, const char *key, int n_cand,
                                              tune_launch_fn launch, void *arg, size_t out_bytes, int *choice,
                                              const char **source, vsr_err *err) {
    if (n_cand > AUTOTUNE_INDEXED_MAX)
        return vsr_err_set(err, VSR_E_INTERNAL, "autotune %s %s: %d candidates (at most %d)", kernel, key, n_cand,
                           AUTOTUNE_INDEXED_MAX);
    char names[AUTOTUNE_INDEXED_MAX][8];
    const char *np[AUTOTUNE_INDEXED_MAX];
    for (int i = 0; i < n_cand; i++) snprintf(names[i], sizeof names[i], "a%d", i), np[i] = names[i];
    return autotune_choose(c, kernel, key, n_cand, np, 0, launch, arg, out_bytes, choice, source, err);
}
