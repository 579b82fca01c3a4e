#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "vsr/device.h"
#include "vsr/package.h"

double test_nerr(const float *a, const float *ref, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(ref[i])) return INFINITY;
        md = fmax(md, fabs((double)a[i] - (double)ref[i]));
        mr = fmax(mr, fabs((double)ref[i]));
    }
    return mr > 0 ? md / mr : md;
}

int test_failures, test_checks;
const char *test_current = "";
static char tmp_root[PATH_MAX];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void cleanup(void) {
    if (tmp_root[0] && !getenv("VSR_TEST_KEEP")) nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

const char *test_tmpdir(void) {
    if (!tmp_root[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_root, sizeof tmp_root, "%s/vsr-test-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmp_root)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(cleanup);
    }
    return tmp_root;
}

static void mkparents(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            mkdir(buf, 0755);
            *s = '/';
        }
    }
}

int test_write_file(const char *path, const void *data, size_t n) {
    mkparents(path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

char *test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[len] = 0;
        if (n) *n = (size_t)len;
    }
    return buf;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void test_rng_seed(uint64_t seed) { rng_state = seed; }

uint64_t test_rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

float test_rndf(void) { return (float)((double)(test_rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

int test_summary(void) {
    printf("%d checks, %d failures\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}

#ifdef VSR_HAVE_CUDA
#include "backend/backend_cuda.h"
#include "vsr/device.h"

int test_find_cuda(struct vsr_device *dev, struct vsr_backend *be, char *why, size_t n) {
    vsr_device_list dl;
    vsr_err e;
    if (vsr_devices_probe(&dl, &e)) {
        snprintf(why, n, "probe failed: %s", e.msg);
        return 0;
    }
    for (int i = 0; i < dl.count; i++)
        if (dl.dev[i].kind == VSR_DEV_CUDA) {
            *dev = dl.dev[i];
            if (vsr_backend_cuda_new(dev->index, be, &e)) {
                snprintf(why, n, "%s", e.msg);
                return 0;
            }
            return 1;
        }
    snprintf(why, n, "%s", dl.notes[0] ? dl.notes : "the probe found no NVIDIA GPU");
    return 0;
}
#endif

struct vsr_package *test_open_package(const char *dir) {
    vsr_err err = {0};
    vsr_package *p = NULL;
    vsr_status st = vsr_package_open(dir, NULL, NULL, &p, &err);
    if (!st) st = vsr_package_verify(p, 2, NULL, &err);
    if (!st) st = vsr_package_map(p, &err);
    CHECK_OK(st, err);
    if (st) {
        vsr_package_close(p);
        return NULL;
    }
    return p;
}

int test_device_from_env(const char *var, struct vsr_device *dev, int *have) {
    const char *spec = getenv(var);
    *have = 0;
    if (!spec || !*spec || !strcmp(spec, "cpu")) return 0;
    vsr_device_list devs;
    vsr_err err = {0};
    bool is_auto;
    vsr_device_kind kind;
    int index;
    if (vsr_device_spec_parse(spec, &is_auto, &kind, &index, &err) || vsr_devices_probe(&devs, &err)) {
        fprintf(stderr, "%s=%s: %s\n", var, spec, err.msg);
        return -1;
    }
    for (int i = 0; i < devs.count; i++)
        if (devs.dev[i].kind == kind && (index < 0 || devs.dev[i].index == index)) {
            *dev = devs.dev[i];
            *have = 1;
            return 0;
        }
    fprintf(stderr, "%s=%s: no such device here\n", var, spec);
    return -1;
}
