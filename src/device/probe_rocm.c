/* AMD GPUs. The kernel's KFD topology is always there when the amdgpu driver is:
 *   <kfd_root>/<node>/properties            "key value" lines; simd_count > 0 for a GPU,
 *                                           gfx_target_version, drm_render_minor,
 *                                           domain, location_id (PCI bus<<8 | dev<<3 | fn)
 *   <kfd_root>/<node>/mem_banks/<b>/properties   heap_type (1, 2: VRAM), size_in_bytes
 *   <drm_root>/renderD<minor>/device/mem_info_vram_{total,used}, product_name
 * When the HIP runtime (libamdhip64.so) loads, its ordinals (which honour
 * HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES) number the devices, and it supplies names and
 * free memory; devices are matched to KFD nodes by PCI address. The gfx target always comes
 * from KFD: it is a number there, not a string to parse out of a versioned struct. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/probe.h"
#include "device/probe_util.h"

#define MAX_NODES 64

typedef struct kfd_gpu {
    char gfx[32];
    unsigned long render_minor, domain, location_id;
    uint64_t vram_total, vram_free;
    char product[128];
    bool used;
} kfd_gpu;

const char *vsr_gfx_from_target_version(unsigned long v, char *buf, size_t n) {
    unsigned long major = v / 10000, minor = (v / 100) % 100, step = v % 100;
    if (!v || major == 0 || major > 99 || minor > 15 || step > 15) return NULL;
    snprintf(buf, n, "gfx%lu%lx%lx", major, minor, step);
    return buf;
}

/* Reads "key value" from a properties file; returns 1 when found. */
static int prop_get(const char *path, const char *key, unsigned long long *out) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t kl = strlen(key);
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            *out = strtoull(line + kl + 1, NULL, 10);
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

static int read_u64_file(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok) *out = v;
    return ok;
}

static void read_line_file(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (!f) return;
    if (fgets(buf, (int)n, f)) buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

/* The GPU nodes of the topology, in node order. */
static int kfd_gpus(const char *kfd_root, const char *drm_root, kfd_gpu *g, int max) {
    int n = 0;
    char path[1024];
    for (int node = 0; node < MAX_NODES && n < max; node++) {
        unsigned long long simd = 0, tv = 0, v = 0;
        snprintf(path, sizeof path, "%s/%d/properties", kfd_root, node);
        if (!prop_get(path, "simd_count", &simd)) {
            if (node > 0) break; /* nodes are numbered densely */
            continue;
        }
        if (simd == 0) continue; /* a CPU node */
        kfd_gpu *x = &g[n];
        memset(x, 0, sizeof *x);
        prop_get(path, "gfx_target_version", &tv);
        if (!vsr_gfx_from_target_version((unsigned long)tv, x->gfx, sizeof x->gfx))
            snprintf(x->gfx, sizeof x->gfx, "gfx0");
        if (prop_get(path, "drm_render_minor", &v)) x->render_minor = (unsigned long)v;
        if (prop_get(path, "domain", &v)) x->domain = (unsigned long)v;
        if (prop_get(path, "location_id", &v)) x->location_id = (unsigned long)v;
        /* VRAM: the frame-buffer heaps (1 public, 2 private) of the node's memory banks. */
        for (int b = 0; b < 16; b++) {
            unsigned long long heap = 0, size = 0;
            snprintf(path, sizeof path, "%s/%d/mem_banks/%d/properties", kfd_root, node, b);
            if (!prop_get(path, "size_in_bytes", &size)) break;
            prop_get(path, "heap_type", &heap);
            if (heap == 1 || heap == 2) x->vram_total += size;
        }
        uint64_t t = 0, used = 0;
        snprintf(path, sizeof path, "%s/renderD%lu/device/mem_info_vram_total", drm_root, x->render_minor);
        if (read_u64_file(path, &t) && t) {
            if (!x->vram_total) x->vram_total = t;
            snprintf(path, sizeof path, "%s/renderD%lu/device/mem_info_vram_used", drm_root, x->render_minor);
            if (read_u64_file(path, &used) && used <= t) x->vram_free = t - used;
        }
        snprintf(path, sizeof path, "%s/renderD%lu/device/product_name", drm_root, x->render_minor);
        read_line_file(path, x->product, sizeof x->product);
        n++;
    }
    return n;
}

static void fill(vsr_device *d, int index, const kfd_gpu *g) {
    memset(d, 0, sizeof *d);
    d->kind = VSR_DEV_ROCM;
    d->index = index;
    snprintf(d->gfx, sizeof d->gfx, "%s", g->gfx);
    if (g->product[0]) snprintf(d->name, sizeof d->name, "%s", g->product);
    else snprintf(d->name, sizeof d->name, "AMD GPU %s", g->gfx);
    d->mem_total = g->vram_total;
    d->mem_free = g->vram_free;
    d->bf16 = vsr_device_bf16_by_arch(VSR_DEV_ROCM, 0, 0, d->gfx);
}

typedef int (*hip_count_fn)(int *);
typedef int (*hip_name_fn)(char *, int, int);
typedef int (*hip_bus_fn)(char *, int, int);
typedef int (*hip_set_fn)(int);
typedef int (*hip_meminfo_fn)(size_t *, size_t *);

/* Returns 1 when HIP numbered the devices, 0 to fall back to KFD order. */
static int probe_hip(vsr_device_list *list, kfd_gpu *g, int ng) {
    void *lib = dlopen("libamdhip64.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    void *p[5] = {dlsym(lib, "hipGetDeviceCount"), dlsym(lib, "hipDeviceGetName"), dlsym(lib, "hipDeviceGetPCIBusId"),
                  dlsym(lib, "hipSetDevice"), dlsym(lib, "hipMemGetInfo")};
    for (int i = 0; i < 5; i++)
        if (!p[i]) {
            vsr_probe_note(list, "rocm: libamdhip64.so lacks a function we use; devices from sysfs only");
            return 0;
        }
    hip_count_fn count;
    hip_name_fn name;
    hip_bus_fn bus;
    hip_set_fn set;
    hip_meminfo_fn meminfo;
    memcpy(&count, &p[0], sizeof p[0]);
    memcpy(&name, &p[1], sizeof p[1]);
    memcpy(&bus, &p[2], sizeof p[2]);
    memcpy(&set, &p[3], sizeof p[3]);
    memcpy(&meminfo, &p[4], sizeof p[4]);
    int n = 0;
    if (count(&n) || n <= 0) return 0;
    for (int i = 0; i < n && list->count < VSR_MAX_DEVICES; i++) {
        char busid[64] = "";
        unsigned dom, b, dv, fn;
        if (bus(busid, (int)sizeof busid, i) || sscanf(busid, "%x:%x:%x.%x", &dom, &b, &dv, &fn) != 4) {
            vsr_probe_note(list, "rocm:%d: HIP gave no PCI address; left out", i);
            continue;
        }
        unsigned long loc = (b << 8) | (dv << 3) | fn;
        kfd_gpu *m = NULL;
        for (int k = 0; k < ng; k++)
            if (!g[k].used && g[k].domain == dom && g[k].location_id == loc) m = &g[k];
        if (!m) {
            vsr_probe_note(list, "rocm:%d: %s is not in the KFD topology; left out", i, busid);
            continue;
        }
        m->used = true;
        vsr_device *d = &list->dev[list->count];
        fill(d, i, m);
        char nm[128] = "";
        if (!name(nm, (int)sizeof nm, i) && nm[0]) snprintf(d->name, sizeof d->name, "%s", nm);
        size_t fr = 0, tot = 0;
        if (!set(i) && !meminfo(&fr, &tot)) {
            d->mem_free = fr;
            if (tot) d->mem_total = tot;
        }
        list->count++;
    }
    return 1;
}

void vsr_probe_rocm(vsr_device_list *list, const char *kfd_root, const char *drm_root, int use_hip) {
    kfd_gpu g[VSR_MAX_DEVICES];
    int ng = kfd_gpus(kfd_root, drm_root, g, VSR_MAX_DEVICES);
    if (ng == 0) {
        vsr_probe_note(list, "rocm: no AMD GPU in %s", kfd_root);
        return;
    }
    if (use_hip && probe_hip(list, g, ng)) return;
    if (use_hip) {
        vsr_probe_note(list, "rocm: HIP runtime (libamdhip64.so) not found: devices, names and free memory from sysfs");
        if (getenv("HIP_VISIBLE_DEVICES") || getenv("ROCR_VISIBLE_DEVICES"))
            vsr_probe_note(list, "rocm: *_VISIBLE_DEVICES is set but without HIP the host's own order is used");
    }
    for (int i = 0; i < ng && list->count < VSR_MAX_DEVICES; i++) fill(&list->dev[list->count++], i, &g[i]);
}
