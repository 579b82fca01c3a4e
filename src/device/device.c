/* Device names and ids, the hardware table (what each device can run), the JSON
 * description tests and docs use, and the probe that puts them together.
 *
 * The table is PRODUCT.md "Devices and refusals" (seed
 * quantization-support-by-hardware-and-model.zh.txt), one row per line of it. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "device/probe.h"
#include "vsr/device.h"

static const char *const kind_names[] = {[VSR_DEV_CPU] = "cpu", [VSR_DEV_CUDA] = "cuda", [VSR_DEV_ROCM] = "rocm"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == VSR_DEV_KIND_COUNT, "every kind needs a name");

const char *vsr_device_kind_name(vsr_device_kind k) {
    return (k >= 0 && k < VSR_DEV_KIND_COUNT) ? kind_names[k] : "unknown";
}

const char *vsr_device_id(const vsr_device *d, char *buf, size_t n) {
    if (d->kind == VSR_DEV_CPU) snprintf(buf, n, "cpu");
    else snprintf(buf, n, "%s:%d", vsr_device_kind_name(d->kind), d->index);
    return buf;
}

/* BF16 by architecture (vsr_device_bf16_by_arch): probe_util.c, which the probes share. */

/* ---- the hardware table ----
 * NVIDIA rows match compute capability major*10+minor in [cc_lo, cc_hi]; AMD rows match the
 * gfx target exactly, "*" for any other. The first matching row wins. Cells are what the
 * hardware can do; vsr_device_caps_of then applies two rules that are not per row:
 * int4 multiplies in BF16 (no BF16, no int4), and NVFP4 also needs this build's toolkit
 * and FP4 activation kernel. */
typedef struct hw_row {
    vsr_device_kind kind;
    int cc_lo, cc_hi;
    const char *gfx;
    const char *label;
    vsr_support fp8, int4, nvfp4;
    bool fp8_fnuz, int4_fused;
} hw_row;

#define Y VSR_SUPPORT_YES
#define N VSR_SUPPORT_NO
#define U VSR_SUPPORT_UNVERIFIED
static const hw_row hw_table[] = {
    {VSR_DEV_ROCM, 0, 0, "gfx942", "AMD Instinct MI300X, MI325X (gfx942)", Y, Y, N, true, false},
    {VSR_DEV_ROCM, 0, 0, "gfx950", "AMD Instinct MI350 series (gfx950)", Y, Y, N, false, false},
    {VSR_DEV_ROCM, 0, 0, "*", "other AMD GPU", N, U, N, false, false},
    {VSR_DEV_CUDA, 0, 79, NULL, "NVIDIA before Ampere (compute capability below 8.0)", N, N, N, false, false},
    {VSR_DEV_CUDA, 80, 88, NULL, "NVIDIA Ampere (8.0, 8.6, 8.7)", N, Y, N, false, true},
    {VSR_DEV_CUDA, 89, 99, NULL, "NVIDIA Ada, Hopper (8.9, 9.0)", Y, Y, N, false, true},
    /* 11.x is Jetson Thor, a Blackwell part (CUDA 13 renamed sm_101 to sm_110). */
    {VSR_DEV_CUDA, 100, 129, NULL, "NVIDIA Blackwell (10.x, 12.x)", Y, Y, Y, false, true},
    /* Beyond the table: FP8 by the seed's "8.9 or later"; FP4 claimed only where known. */
    {VSR_DEV_CUDA, 130, INT_MAX, NULL, "NVIDIA newer than Blackwell (not in the table)", Y, Y, N, false, true},
    {VSR_DEV_CPU, 0, 0, NULL, "CPU", N, U, N, false, false},
};
#undef Y
#undef N
#undef U

static const hw_row *hw_row_of(const vsr_device *d) {
    int cc = d->cc_major * 10 + d->cc_minor;
    for (size_t i = 0; i < sizeof hw_table / sizeof hw_table[0]; i++) {
        const hw_row *r = &hw_table[i];
        if (r->kind != d->kind) continue;
        if (r->kind == VSR_DEV_CUDA && (cc < r->cc_lo || cc > r->cc_hi)) continue;
        if (r->kind == VSR_DEV_ROCM && strcmp(r->gfx, "*") && strcmp(r->gfx, d->gfx)) continue;
        return r;
    }
    return NULL;
}

const char *vsr_device_class(const vsr_device *d) {
    const hw_row *r = hw_row_of(d);
    if (!r) return "unknown device";
    if (r->kind == VSR_DEV_ROCM && !strcmp(r->gfx, "*"))
        return d->bf16 ? "other BF16-capable AMD GPU" : "AMD GPU without BF16";
    return r->label;
}

const char *vsr_device_nvfp4_missing(const vsr_device *d, char *buf, size_t n) {
    const hw_row *r = hw_row_of(d);
    buf[0] = '\0';
    if (d->kind == VSR_DEV_CPU) {
        snprintf(buf, n, "the device is a CPU");
    } else if (d->kind == VSR_DEV_ROCM) {
        snprintf(buf, n, "the device is a ROCm GPU");
    } else if (!r || r->nvfp4 != VSR_SUPPORT_YES) {
        snprintf(buf, n, "the device is an NVIDIA GPU without FP4 tensor cores (compute capability %d.%d)",
                 d->cc_major, d->cc_minor);
    } else if (!d->fp4_toolkit && !d->fp4_act_kernel) {
        snprintf(buf, n,
                 "the CUDA toolkit this runtime was built with lacks FP4 support, and the FP4 "
                 "activation-quantization kernel is unavailable");
    } else if (!d->fp4_toolkit) {
        snprintf(buf, n, "the CUDA toolkit this runtime was built with lacks FP4 support");
    } else if (!d->fp4_act_kernel) {
        snprintf(buf, n, "the FP4 activation-quantization kernel is unavailable");
    }
    return buf;
}

void vsr_device_caps_of(const vsr_device *d, vsr_device_caps *out) {
    const hw_row *r = hw_row_of(d);
    memset(out, 0, sizeof *out);
    out->bf16 = d->bf16 ? VSR_SUPPORT_YES : VSR_SUPPORT_NO;
    if (!r) return; /* unknown kind: nothing */
    out->fp8 = r->fp8;
    out->fp8_fnuz = r->fp8_fnuz;
    out->int4 = d->bf16 ? r->int4 : VSR_SUPPORT_NO; /* int4 layers multiply in BF16 */
    out->int4_fused = out->int4 != VSR_SUPPORT_NO && r->int4_fused;
    char why[256];
    out->nvfp4 = (r->nvfp4 == VSR_SUPPORT_YES && !vsr_device_nvfp4_missing(d, why, sizeof why)[0])
                     ? VSR_SUPPORT_YES
                     : VSR_SUPPORT_NO;
}

/* ---- JSON description ---- */

#define GIB 1073741824.0
#define MAX_GIB (1024.0 * 1024.0) /* 1 PiB: anything larger is a typo */

static vsr_status json_gib(json_t *o, const char *key, uint64_t *out, vsr_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v) return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"%s\" is missing (a number of GiB)", key);
    if (!json_is_number(v))
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"%s\" must be a number of GiB", key);
    double g = json_number_value(v);
    if (!(g >= 0 && g <= MAX_GIB))
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"%s\" must be between 0 and %.0f GiB, got %g", key,
                           MAX_GIB, g);
    *out = (uint64_t)llround(g * GIB);
    return VSR_OK;
}

static vsr_status json_bool_opt(json_t *o, const char *key, bool dflt, bool *out, vsr_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = dflt;
        return VSR_OK;
    }
    if (!json_is_boolean(v)) return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"%s\" must be true or false", key);
    *out = json_is_true(v);
    return VSR_OK;
}

static bool valid_gfx(const char *s) {
    size_t n = strlen(s);
    if (n < 4 || n > 31 || strncmp(s, "gfx", 3)) return false;
    for (size_t i = 3; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static vsr_status from_json_obj(json_t *o, vsr_device *d, vsr_err *err) {
    static const char *const keys[] = {"kind",         "index", "name",        "cc",
                                       "gfx",          "mem_total_gib", "mem_free_gib", "bf16",
                                       "cores",        "fp4_toolkit",   "fp4_act_kernel", NULL};
    vsr_status st = vsr_json_only_keys(o, keys, "device JSON", err);
    if (st) return st;
    memset(d, 0, sizeof *d);

    json_t *v = json_object_get(o, "kind");
    if (!json_is_string(v)) return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"kind\" must be \"cpu\", \"cuda\" or \"rocm\"");
    int kind = -1;
    for (int k = 0; k < VSR_DEV_KIND_COUNT; k++)
        if (!strcmp(json_string_value(v), kind_names[k])) kind = k;
    if (kind < 0)
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"kind\" must be \"cpu\", \"cuda\" or \"rocm\", got \"%.40s\"",
                           json_string_value(v));
    d->kind = (vsr_device_kind)kind;

    v = json_object_get(o, "index");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= VSR_MAX_DEVICES)
            return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"index\" must be an integer from 0 to %d",
                               VSR_MAX_DEVICES - 1);
        d->index = (int)json_integer_value(v);
        if (d->kind == VSR_DEV_CPU && d->index != 0)
            return vsr_err_set(err, VSR_E_FORMAT, "device JSON: a cpu device has index 0, got %d", d->index);
    }

    v = json_object_get(o, "name");
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= sizeof d->name)
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"name\" must be a string of 1 to %zu characters",
                           sizeof d->name - 1);
    snprintf(d->name, sizeof d->name, "%s", json_string_value(v));

    v = json_object_get(o, "cc");
    if (d->kind == VSR_DEV_CUDA) {
        int maj, min, used = 0;
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        if (!json_is_string(v) || sscanf(s, "%2d.%1d%n", &maj, &min, &used) != 2 || s[used] || maj < 1 || min < 0 ||
            s[0] < '0' || s[0] > '9')
            return vsr_err_set(err, VSR_E_FORMAT,
                               "device JSON: a cuda device needs \"cc\", its compute capability as \"MAJOR.MINOR\" (e.g. \"9.0\")");
        d->cc_major = maj;
        d->cc_minor = min;
    } else if (v) {
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"cc\" is for cuda devices only, this one is %s", kind_names[kind]);
    }

    v = json_object_get(o, "gfx");
    if (d->kind == VSR_DEV_ROCM) {
        if (!json_is_string(v) || !valid_gfx(json_string_value(v)))
            return vsr_err_set(err, VSR_E_FORMAT,
                               "device JSON: a rocm device needs \"gfx\", its target as \"gfx\" plus hex digits (e.g. \"gfx942\")");
        snprintf(d->gfx, sizeof d->gfx, "%s", json_string_value(v));
    } else if (v) {
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"gfx\" is for rocm devices only, this one is %s", kind_names[kind]);
    }

    if ((st = json_gib(o, "mem_total_gib", &d->mem_total, err))) return st;
    if ((st = json_gib(o, "mem_free_gib", &d->mem_free, err))) return st;
    if (d->mem_free > d->mem_total)
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"mem_free_gib\" is larger than \"mem_total_gib\"");

    if ((st = json_bool_opt(o, "bf16", vsr_device_bf16_by_arch(d->kind, d->cc_major, d->cc_minor, d->gfx), &d->bf16,
                            err)))
        return st;

    v = json_object_get(o, "cores");
    if (v) {
        if (d->kind != VSR_DEV_CPU)
            return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"cores\" is for the cpu device only");
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65536)
            return vsr_err_set(err, VSR_E_FORMAT, "device JSON: \"cores\" must be an integer from 1 to 65536");
        d->cores = (int)json_integer_value(v);
    } else if (d->kind == VSR_DEV_CPU) {
        d->cores = 1;
    }

    /* NVFP4 prerequisites default to what this build has, on NVIDIA only. */
    const vsr_device_build *b = vsr_device_build_caps();
    bool nv = d->kind == VSR_DEV_CUDA;
    if ((st = json_bool_opt(o, "fp4_toolkit", nv && b->fp4_toolkit, &d->fp4_toolkit, err))) return st;
    if ((st = json_bool_opt(o, "fp4_act_kernel", nv && b->fp4_act_kernel, &d->fp4_act_kernel, err))) return st;
    return VSR_OK;
}

vsr_status vsr_device_from_json(const char *json, vsr_device *out, vsr_err *err) {
    if (!json) return vsr_err_set(err, VSR_E_INVALID, "device JSON: no text given");
    json_error_t je;
    json_t *o = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return vsr_err_set(err, VSR_E_FORMAT, "device JSON: not valid JSON at line %d column %d: %s", je.line,
                           je.column, je.text);
    vsr_status st;
    if (!json_is_object(o))
        st = vsr_err_set(err, VSR_E_FORMAT, "device JSON: expected an object like {\"kind\":\"cuda\",...}");
    else
        st = from_json_obj(o, out, err);
    json_decref(o);
    return st;
}

/* ---- probing ---- */

vsr_status vsr_devices_probe(vsr_device_list *out, vsr_err *err) {
    if (!out) return vsr_err_set(err, VSR_E_INVALID, "vsr_devices_probe: no list given");
    memset(out, 0, sizeof *out);
    vsr_probe_cpu(&out->dev[out->count++]);
    vsr_probe_cuda(out);
    vsr_probe_rocm(out, "/sys/class/kfd/kfd/topology/nodes", "/sys/class/drm", 1);
    return VSR_OK;
}
