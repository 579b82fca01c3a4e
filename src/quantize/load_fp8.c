/* Dynamic FP8 at load time (`vllm-srun serve BF16_PKG --quantize fp8-dynamic`, the seed's
 * "quickest path"): the BF16 package's Linear weights are quantized in memory with the recipe and
 * the arithmetic of `vllm-srun quantize --scheme fp8-dynamic` (plan.c, rtn.c), then laid over the
 * package's weights (vsr_weights_overlay) and its quantization config set to that FP8_DYNAMIC
 * config. The model loader then sees exactly the tensors of the written FP8 package: same names,
 * dtypes, shapes and bytes (tests/test_quantize_pkg.c compares them byte for byte). */
#include <stdlib.h>
#include <string.h>

#include "quantize/quantize_internal.h"
#include "vsr/quant.h"

typedef struct fp8_overlay {
    vsr_tensor *t;  /* 2 per quantized Linear: .weight (F8_E4M3) and .weight_scale (BF16 [N,1]) */
    char **names;
    void **bufs;
    int n;
} fp8_overlay;

static void overlay_free(void *arg) {
    fp8_overlay *o = arg;
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        free(o->names[i]);
        free(o->bufs[i]);
    }
    free(o->t);
    free(o->names);
    free(o->bufs);
    free(o);
}

static vsr_status set_tensor(fp8_overlay *o, const char *module, const char *suffix, vsr_dtype dt, int64_t a,
                             int64_t b, void *data, vsr_err *err) {
    int i = o->n;
    size_t len = strlen(module) + strlen(suffix) + 1;
    o->names[i] = malloc(len);
    o->bufs[i] = data;
    o->n++;
    if (!o->names[i] || !data) return vsr_err_set(err, VSR_E_NOMEM, "--quantize fp8-dynamic: out of memory at %s", module);
    snprintf(o->names[i], len, "%s%s", module, suffix);
    vsr_tensor *t = &o->t[i];
    memset(t, 0, sizeof *t);
    t->name = o->names[i];
    t->dtype = dt;
    t->ndim = 2;
    t->shape[0] = a;
    t->shape[1] = b;
    t->numel = a * b;
    t->nbytes = (size_t)(a * b) * (size_t)vsr_dtype_info(dt)->bits / 8;
    t->data = data;
    t->file = "(quantized at load: fp8-dynamic)";
    return VSR_OK;
}

uint64_t vsr_fp8_at_load_weight_bytes(const vsr_package *p) {
    qz_plan pl;
    vsr_err err = {0};
    uint64_t bytes = p->device_weight_bytes;
    if (qz_plan_make(p, VSR_Q_FP8_DYNAMIC, 0, false, NULL, 0, &pl, &err) != VSR_OK) return bytes;
    for (int i = 0; i < pl.n_lin; i++)
        if (pl.lin[i].quantized && pl.lin[i].layer >= 0) /* BF16 N*K -> FP8 N*K + BF16 scale N */
            bytes -= (uint64_t)(pl.lin[i].N * pl.lin[i].K) - 2u * (uint64_t)pl.lin[i].N;
    qz_plan_free(&pl);
    return bytes;
}

vsr_status vsr_package_quantize_fp8_at_load(vsr_package *p, int threads, vsr_err *err) {
    if (p->quant.scheme != VSR_SCHEME_BF16)
        return vsr_err_set(err, VSR_E_INVALID,
                           "--quantize fp8-dynamic quantizes a BF16 package; this one is already %s (serve it without "
                           "--quantize)",
                           vsr_scheme_info(p->quant.scheme)->label);
    if (p->family != VSR_FAMILY_DECISION3)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "--quantize fp8-dynamic: a %s package cannot carry quantized weights; only Decision 3.0 "
                           "packages can",
                           vsr_family_name(p->family));
    if (!p->verified)
        return vsr_err_set(err, VSR_E_INVALID, "--quantize fp8-dynamic: the package must be verified first");
    qz_plan pl;
    vsr_status st = qz_plan_make(p, VSR_Q_FP8_DYNAMIC, 0, false, NULL, 0, &pl, err);
    if (st) return vsr_err_prefix(err, "--quantize fp8-dynamic");
    fp8_overlay *o = calloc(1, sizeof *o);
    if (o) {
        o->t = calloc((size_t)pl.n_quant * 2, sizeof *o->t);
        o->names = calloc((size_t)pl.n_quant * 2, sizeof *o->names);
        o->bufs = calloc((size_t)pl.n_quant * 2, sizeof *o->bufs);
    }
    if (!o || !o->t || !o->names || !o->bufs) {
        overlay_free(o);
        qz_plan_free(&pl);
        return vsr_err_set(err, VSR_E_NOMEM, "--quantize fp8-dynamic: out of memory");
    }
    for (int i = 0; i < pl.n_lin && !st; i++) {
        const qz_linear *L = &pl.lin[i];
        if (!L->quantized) continue;
        if (!L->w->data) {
            st = vsr_err_set(err, VSR_E_INVALID, "--quantize fp8-dynamic: %s is not mapped (map the package first)",
                             L->w->name);
            break;
        }
        uint8_t *w8 = malloc((size_t)(L->N * L->K));
        uint16_t *scale = malloc((size_t)L->N * sizeof *scale);
        int iw = o->n;
        st = set_tensor(o, L->module, ".weight", VSR_DT_F8_E4M3, L->N, L->K, w8, err);
        if (st) {
            free(scale);
            break;
        }
        st = set_tensor(o, L->module, ".weight_scale", VSR_DT_BF16, L->N, 1, scale, err);
        if (!st) qz_fp8_parallel(L->w->data, L->N, L->K, threads, o->bufs[iw], o->bufs[iw + 1]);
    }
    json_t *cfg = st ? NULL : qz_config_json(&pl);
    qz_plan_free(&pl);
    if (st) {
        overlay_free(o);
        return st;
    }
    vsr_quant_config q;
    if ((st = vsr_quant_config_parse(cfg, &q, err))) {
        json_decref(cfg);
        overlay_free(o);
        return vsr_err_prefix(err, "--quantize fp8-dynamic: internal config");
    }
    json_decref(cfg);
    if ((st = vsr_weights_overlay(p->weights, o->t, (size_t)o->n, o, overlay_free, err))) {
        vsr_quant_config_free(&q);
        overlay_free(o);
        return st;
    }
    vsr_quant_config_free(&p->quant);
    p->quant = q;
    return VSR_OK;
}
