/* The gate every package passes before any weight is read: can this device run it
 * (capability, then memory), and which device does a --device value pick.
 *
 * Every refusal from vsr_gate_device starts with the device id ("cuda:0: ..."), so
 * vsr_place can join several with "; " and each still says whose reason it is. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsr/device.h"

#define GIB 1073741824.0
#define NO_DEVICE "no device can serve this package"

/* How the family-rule message names a package's weights. */
static const char *const scheme_words[] = {
    [VSR_SCHEME_BF16] = "BF16",
    [VSR_SCHEME_FP8] = "FP8 (float-quantized)",
    [VSR_SCHEME_INT4] = "int4 (pack-quantized)",
    [VSR_SCHEME_NVFP4] = "NVFP4 (nvfp4-pack-quantized)",
};
_Static_assert(sizeof scheme_words / sizeof scheme_words[0] == VSR_SCHEME_COUNT, "every scheme needs words");

/* Reserve = 1 GiB + 10% of the weights (docs/devices.md says why):
 *   1 GiB fixed: the CUDA/HIP context and its module images, cuBLASLt/hipBLASLt workspaces,
 *                allocator slack;
 *   10% scaled:  activations of a full batch, the KV cache of the gated-attention layers and
 *                the recurrent state of the DeltaNet layers, and the unpack-to-BF16 scratch of
 *                the largest int4 linear, all of which grow with the model's width and depth
 *                roughly as the weights do. */
uint64_t vsr_gate_reserve_bytes(uint64_t weight_bytes) {
    return (1ull << 30) + weight_bytes / 10;
}

/* One decimal, need rounded up and free rounded down, so a refusal never prints a need
 * that looks no larger than what is free. */
static double gib_up(uint64_t b) { return ceil((double)b / GIB * 10.0) / 10.0; }
static double gib_down(uint64_t b) { return floor((double)b / GIB * 10.0) / 10.0; }
static double gib_near(uint64_t b) { return round((double)b / GIB * 10.0) / 10.0; }

static bool is_gpu(const vsr_device *d) { return d->kind == VSR_DEV_CUDA || d->kind == VSR_DEV_ROCM; }

/* "NVIDIA A100-SXM4-80GB (compute capability 8.0)", "AMD Radeon PRO W7900 (gfx1100)", "a CPU". */
static const char *describe(const vsr_device *d, char *buf, size_t n) {
    if (d->kind == VSR_DEV_CUDA) snprintf(buf, n, "%s (compute capability %d.%d)", d->name, d->cc_major, d->cc_minor);
    else if (d->kind == VSR_DEV_ROCM) snprintf(buf, n, "%s (%s)", d->name, d->gfx);
    else snprintf(buf, n, "a CPU");
    return buf;
}

vsr_status vsr_gate_device(const vsr_device *d, const vsr_gate_request *r, vsr_err *err) {
    char id[32], what[200];
    if (!d || !r) return vsr_err_set(err, VSR_E_INVALID, "device gate: no device or request given");
    if (r->scheme < 0 || r->scheme >= VSR_SCHEME_COUNT)
        return vsr_err_set(err, VSR_E_INVALID, "device gate: unknown scheme %d", (int)r->scheme);
    vsr_device_id(d, id, sizeof id);
    vsr_device_caps caps;
    vsr_device_caps_of(d, &caps);

    if (r->scheme != VSR_SCHEME_BF16 && !r->quantized_family_ok)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s: only Decision 3.0 packages may carry quantized weights; this package's weights are %s",
                           id, scheme_words[r->scheme]);
    if (r->needs_bf16 && is_gpu(d) && caps.bf16 == VSR_SUPPORT_NO)
        return vsr_err_set(err, VSR_E_DEVICE, "%s: Decision 3.0 keeps its weights in BF16 on a GPU; %s (%s) has no BF16 support",
                           id, id, d->name);

    switch (r->scheme) {
    case VSR_SCHEME_FP8:
        if (caps.fp8 == VSR_SUPPORT_NO)
            return vsr_err_set(err, VSR_E_DEVICE, "%s: " VSR_REFUSAL_FP8 ": the device is %s", id,
                               describe(d, what, sizeof what));
        break;
    case VSR_SCHEME_INT4:
        /* Only a device without BF16 lacks int4 (its layers multiply in BF16); reached when the
         * family does not itself need BF16. */
        if (caps.int4 == VSR_SUPPORT_NO)
            return vsr_err_set(err, VSR_E_DEVICE,
                               "%s: int4 weights are unpacked to BF16 and multiplied in BF16; %s (%s) has no BF16 support",
                               id, id, d->name);
        break;
    case VSR_SCHEME_NVFP4:
        if (caps.nvfp4 != VSR_SUPPORT_YES)
            return vsr_err_set(err, VSR_E_DEVICE, "%s: " VSR_REFUSAL_NVFP4 ": %s", id,
                               vsr_device_nvfp4_missing(d, what, sizeof what));
        break;
    default: break;
    }

    uint64_t need = r->weight_bytes + r->reserve_bytes;
    if (need < r->weight_bytes) need = UINT64_MAX; /* saturate */
    if (is_gpu(d) && need > d->mem_free)
        return vsr_err_set(err, VSR_E_DEVICE, "%s: needs about %.1f GiB, %.1f GiB free (weights %.1f GiB + reserve %.1f GiB)",
                           id, gib_up(need), gib_down(d->mem_free), gib_near(r->weight_bytes),
                           gib_near(r->reserve_bytes));
    /* The CPU maps the weights from the package files: pages not yet touched and clean page
     * cache cost nothing until read and can be dropped under pressure, so the bound is the
     * memory the host has (MemTotal, or the cgroup limit), not what is free this moment.
     * mem_total 0 means the probe could not read it: no check rather than a made-up one. */
    if (d->kind == VSR_DEV_CPU && d->mem_total && need > d->mem_total)
        return vsr_err_set(err, VSR_E_DEVICE,
                           "%s: needs about %.1f GiB, %.1f GiB of memory in all on this host (weights %.1f GiB + reserve "
                           "%.1f GiB; the CPU maps weights from the files, so page cache counts as free and the "
                           "check is against total memory)",
                           id, gib_up(need), gib_down(d->mem_total), gib_near(r->weight_bytes),
                           gib_near(r->reserve_bytes));
    return VSR_OK;
}

/* ---- --device ---- */

static const vsr_device_kind auto_order[] = {VSR_DEV_ROCM, VSR_DEV_CUDA, VSR_DEV_CPU};

static vsr_status bad_spec(const char *spec, vsr_err *err) {
    char shown[72];
    size_t i = 0;
    for (; spec[i] && i < 64; i++) shown[i] = isprint((unsigned char)spec[i]) ? spec[i] : '?';
    shown[i] = '\0';
    if (spec[i]) snprintf(shown + i, sizeof shown - i, "...");
    return vsr_err_set(err, VSR_E_INVALID, "--device must be auto or one of cpu, cuda, rocm, optionally with :N; got '%s'",
                       shown);
}

vsr_status vsr_device_spec_parse(const char *spec, bool *is_auto, vsr_device_kind *kind, int *index, vsr_err *err) {
    if (!spec) return bad_spec("", err);
    char low[64];
    size_t n = strlen(spec);
    if (n == 0 || n >= sizeof low) return bad_spec(spec, err);
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)spec[i]);

    /* [a-z][a-z0-9_]*(:\d+)? */
    size_t k = 0;
    if (!(low[0] >= 'a' && low[0] <= 'z')) return bad_spec(spec, err);
    while ((low[k] >= 'a' && low[k] <= 'z') || (low[k] >= '0' && low[k] <= '9') || low[k] == '_') k++;
    long idx = -1;
    if (low[k] == ':') {
        const char *p = low + k + 1;
        if (!*p) return bad_spec(spec, err);
        idx = 0;
        for (; *p; p++) {
            if (*p < '0' || *p > '9') return bad_spec(spec, err);
            idx = idx * 10 + (*p - '0');
            if (idx > INT_MAX / 10) return bad_spec(spec, err);
        }
    } else if (low[k]) {
        return bad_spec(spec, err);
    }
    low[k] = '\0';

    if (!strcmp(low, "auto")) {
        if (idx >= 0) return bad_spec(spec, err);
        if (is_auto) *is_auto = true;
        return VSR_OK;
    }
    for (int t = 0; t < VSR_DEV_KIND_COUNT; t++) {
        if (strcmp(low, vsr_device_kind_name((vsr_device_kind)t))) continue;
        if (is_auto) *is_auto = false;
        if (kind) *kind = (vsr_device_kind)t;
        if (index) *index = idx < 0 ? 0 : (int)idx; /* "cuda" means cuda:0 */
        return VSR_OK;
    }
    return bad_spec(spec, err);
}

/* Reasons grouped by text, so eight H200s refusing NVFP4 alike read as one line:
 * "cuda:0, cuda:1: NVFP4 packages need ...". */
typedef struct reason_group {
    char ids[128];
    char text[VSR_ERR_MSG_MAX];
} reason_group;

static void add_reason(reason_group *g, int *ng, const char *id, const char *msg) {
    size_t il = strlen(id);
    const char *text = (!strncmp(msg, id, il) && msg[il] == ':' && msg[il + 1] == ' ') ? msg + il + 2 : msg;
    for (int i = 0; i < *ng; i++)
        if (!strcmp(g[i].text, text)) {
            size_t l = strlen(g[i].ids);
            snprintf(g[i].ids + l, sizeof g[i].ids - l, ", %s", id);
            return;
        }
    snprintf(g[*ng].ids, sizeof g[*ng].ids, "%s", id);
    snprintf(g[*ng].text, sizeof g[*ng].text, "%s", text);
    (*ng)++;
}

/* No device changes the family rule, so vsr_place says it once, without a device id. */
static vsr_status family_refusal(const vsr_gate_request *r, vsr_err *err) {
    return vsr_err_set(err, VSR_E_UNSUPPORTED,
                       "only Decision 3.0 packages may carry quantized weights; this package's weights are %s",
                       scheme_words[r->scheme]);
}

vsr_status vsr_place(const vsr_device_list *devs, const char *spec, const vsr_gate_request *r, int *chosen,
                     vsr_err *err) {
    bool is_auto = false;
    vsr_device_kind kind = VSR_DEV_CPU;
    int index = 0;
    vsr_status st = vsr_device_spec_parse(spec, &is_auto, &kind, &index, err);
    if (st) return st;
    if (!devs || !r) return vsr_err_set(err, VSR_E_INVALID, "device placement: no device list or request given");
    if (r->scheme < 0 || r->scheme >= VSR_SCHEME_COUNT)
        return vsr_err_set(err, VSR_E_INVALID, "device placement: unknown scheme %d", (int)r->scheme);

    if (!is_auto) {
        /* Explicit: honoured or refused, never replaced by another device. */
        int any = -1, hit = -1;
        for (int i = 0; i < devs->count; i++) {
            if (devs->dev[i].kind != kind) continue;
            any = i;
            if (devs->dev[i].index == index) hit = i;
        }
        if (any < 0)
            return vsr_err_set(err, VSR_E_DEVICE, NO_DEVICE ": %s: not available on this host", vsr_device_kind_name(kind));
        if (hit < 0) return vsr_err_set(err, VSR_E_DEVICE, NO_DEVICE ": %s: no device %d", vsr_device_kind_name(kind), index);
        if (r->scheme != VSR_SCHEME_BF16 && !r->quantized_family_ok) return family_refusal(r, err);
        if ((st = vsr_gate_device(&devs->dev[hit], r, err))) return vsr_err_prefix(err, NO_DEVICE);
        if (chosen) *chosen = hit;
        return VSR_OK;
    }

    if (r->scheme != VSR_SCHEME_BF16 && !r->quantized_family_ok) return family_refusal(r, err);
    reason_group *g = calloc(VSR_MAX_DEVICES, sizeof *g); /* ~17 KiB: off the stack */
    if (!g) return vsr_err_set(err, VSR_E_NOMEM, "device placement: out of memory");
    int ng = 0;
    for (size_t o = 0; o < sizeof auto_order / sizeof auto_order[0]; o++) {
        for (int i = 0; i < devs->count; i++) {
            const vsr_device *d = &devs->dev[i];
            if (d->kind != auto_order[o]) continue;
            vsr_err e = {0};
            if (vsr_gate_device(d, r, &e) == VSR_OK) {
                free(g);
                if (chosen) *chosen = i;
                return VSR_OK;
            }
            char id[32];
            add_reason(g, &ng, vsr_device_id(d, id, sizeof id), e.msg);
        }
    }
    char msg[VSR_ERR_MSG_MAX];
    size_t len = (size_t)snprintf(msg, sizeof msg, NO_DEVICE ": ");
    if (ng == 0) snprintf(msg + len, sizeof msg - len, "no device was found on this host");
    for (int i = 0; i < ng && len < sizeof msg; i++) {
        int w = snprintf(msg + len, sizeof msg - len, "%s%s: %s", i ? "; " : "", g[i].ids, g[i].text);
        if (w < 0) break;
        len += (size_t)w;
    }
    free(g);
    return vsr_err_set(err, VSR_E_DEVICE, "%s", msg);
}
