/* The CPU: features by cpuid (x86) or by architecture (aarch64), model name from
 * /proc/cpuinfo, cores from sysconf, memory from /proc/meminfo capped by a cgroup v2
 * memory.max (a container's limit is what the process can really use). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/probe.h"
#include "device/probe_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0: which register states the OS saves. AVX needs XMM|YMM (bits 1,2); AVX-512 also
 * opmask, ZMM_Hi256 and Hi16_ZMM (bits 5,6,7); AMX needs XTILECFG|XTILEDATA (17,18). */
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

/* One feature bit: cpuid leaf/subleaf, register (0 eax .. 3 edx), bit, and the XCR0 mask it
 * needs the OS to enable. */
static const struct {
    uint32_t flag;
    unsigned leaf, sub, reg, bit;
    unsigned long long xcr0;
} x86_features[] = {
    {VSR_CPU_SSE42, 1, 0, 2, 20, 0},
    {VSR_CPU_AVX, 1, 0, 2, 28, 0x6},
    {VSR_CPU_FMA, 1, 0, 2, 12, 0x6},
    {VSR_CPU_F16C, 1, 0, 2, 29, 0x6},
    {VSR_CPU_AVX2, 7, 0, 1, 5, 0x6},
    {VSR_CPU_AVX512F, 7, 0, 1, 16, 0xe6},
    {VSR_CPU_AVX512BW, 7, 0, 1, 30, 0xe6},
    {VSR_CPU_AVX512VL, 7, 0, 1, 31, 0xe6},
    {VSR_CPU_AVX512VNNI, 7, 0, 2, 11, 0xe6},
    {VSR_CPU_AVX512BF16, 7, 1, 0, 5, 0xe6},
    {VSR_CPU_AMX_BF16, 7, 0, 3, 22, 0x60000},
};

static uint32_t cpu_features(void) {
    unsigned a, b, c, d, max = __get_cpuid_max(0, NULL);
    unsigned long long xcr0 = 0;
    if (max >= 1 && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27))) xcr0 = xgetbv0(); /* OSXSAVE */
    uint32_t f = 0;
    for (size_t i = 0; i < sizeof x86_features / sizeof x86_features[0]; i++) {
        unsigned r[4];
        if (x86_features[i].leaf > max) continue;
        __cpuid_count(x86_features[i].leaf, x86_features[i].sub, r[0], r[1], r[2], r[3]);
        if (!(r[x86_features[i].reg] & (1u << x86_features[i].bit))) continue;
        if ((xcr0 & x86_features[i].xcr0) != x86_features[i].xcr0) continue;
        f |= x86_features[i].flag;
    }
    return f;
}

static void cpuid_brand(char *buf, size_t n) {
    unsigned r[12];
    if (__get_cpuid_max(0x80000000, NULL) < 0x80000004) return;
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = '\0';
    char *p = s;
    while (*p == ' ') p++;
    snprintf(buf, n, "%s", p);
}
#else
static uint32_t cpu_features(void) {
#if defined(__aarch64__)
    return VSR_CPU_NEON; /* Advanced SIMD is mandatory on AArch64 */
#else
    return 0;
#endif
}
static void cpuid_brand(char *buf, size_t n) { (void)buf, (void)n; }
#endif

static char *read_small_file(const char *path, size_t max) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(buf, 1, max, f);
    fclose(f);
    buf[got] = '\0';
    return buf;
}

static uint64_t meminfo_kb(const char *text, const char *key, int *found) {
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, key, kl) && p[kl] == ':') {
            *found = 1;
            return strtoull(p + kl + 1, NULL, 10);
        }
    }
    *found = 0;
    return 0;
}

int vsr_probe_meminfo_parse(const char *text, uint64_t *total, uint64_t *avail) {
    int ft, fa, ff, fc;
    uint64_t t = meminfo_kb(text, "MemTotal", &ft);
    uint64_t a = meminfo_kb(text, "MemAvailable", &fa);
    if (!fa) { /* kernels before 3.14 */
        a = meminfo_kb(text, "MemFree", &ff) + meminfo_kb(text, "Cached", &fc);
        if (a > t) a = t;
    }
    *total = t * 1024;
    *avail = a * 1024;
    return ft ? 0 : -1;
}

static void model_name(char *buf, size_t n) {
    char *info = read_small_file("/proc/cpuinfo", 1 << 16);
    buf[0] = '\0';
    if (info) {
        /* x86: "model name"; some aarch64 kernels: "Hardware" or nothing useful. */
        static const char *const keys[] = {"model name", "Hardware", "cpu model"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0] && !buf[0]; k++) {
            for (char *line = info; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
                size_t kl = strlen(keys[k]);
                if (strncmp(line, keys[k], kl)) continue;
                char *colon = strchr(line, ':'), *eol = strchr(line, '\n');
                if (!colon || (eol && colon > eol)) continue;
                colon++;
                while (*colon == ' ' || *colon == '\t') colon++;
                size_t len = eol ? (size_t)(eol - colon) : strlen(colon);
                if (len >= n) len = n - 1;
                memcpy(buf, colon, len);
                buf[len] = '\0';
                break;
            }
        }
        free(info);
    }
    if (!buf[0]) cpuid_brand(buf, n);
    if (!buf[0]) snprintf(buf, n, "CPU");
    for (size_t i = strlen(buf); i > 0 && isspace((unsigned char)buf[i - 1]); i--) buf[i - 1] = '\0';
}

/* cgroup memory limit of this process's group, 0 when there is none or it is "max".
 * v2: /sys/fs/cgroup<path>/memory.max; v1 (as a container sees its own group at the mount's
 * root): /sys/fs/cgroup/memory/memory.limit_in_bytes, where "no limit" is a huge number that
 * the caller's min() with MemTotal ignores. */
static uint64_t cgroup_limit(void) {
    uint64_t lim = 0;
    char *v1 = read_small_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", 64);
    if (v1 && v1[0] >= '0' && v1[0] <= '9') lim = strtoull(v1, NULL, 10);
    free(v1);
    if (lim) return lim;
    char *cg = read_small_file("/proc/self/cgroup", 4096);
    if (!cg) return 0;
    char *p = strstr(cg, "0::");
    if (p) {
        p += 3;
        char *eol = strchr(p, '\n');
        if (eol) *eol = '\0';
        char path[1024];
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(p, "/") ? p : "");
        char *v = read_small_file(path, 64);
        if (v && v[0] >= '0' && v[0] <= '9') lim = strtoull(v, NULL, 10);
        free(v);
    }
    free(cg);
    return lim;
}

void vsr_probe_cpu(vsr_device *d) {
    memset(d, 0, sizeof *d);
    d->kind = VSR_DEV_CPU;
    d->index = 0;
    model_name(d->name, sizeof d->name);
    d->cpu_features = cpu_features();
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    d->cores = n > 0 ? (int)n : 1;
    char *mi = read_small_file("/proc/meminfo", 1 << 14);
    if (mi) {
        vsr_probe_meminfo_parse(mi, &d->mem_total, &d->mem_free);
        free(mi);
    }
    uint64_t lim = cgroup_limit();
    if (lim && (d->mem_total == 0 || lim < d->mem_total)) d->mem_total = lim;
    if (d->mem_free > d->mem_total) d->mem_free = d->mem_total;
    d->bf16 = vsr_device_bf16_by_arch(VSR_DEV_CPU, 0, 0, NULL);
}
