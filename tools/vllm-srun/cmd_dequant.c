/* vllm-srun dequant PKG_DIR --out FILE.safetensors [--tensor NAME]
 *
 * Writes every quantized linear weight of a package folder, dequantized by our scalar
 * reference code (src/format/dequant.c), as BF16 `<module>.weight` tensors. It is the C
 * side of the compressed-tensors proof: tools/check_compressed_tensors.py decompresses the
 * same package with the library and compares bit for bit.
 *
 * A module is quantized when its tensors say so: `<m>.weight_packed` (int4, NVFP4) or an
 * F8_E4M3 `<m>.weight` with `<m>.weight_scale` (FP8). Every tensor's dtype and shape is
 * checked against the layout of compressed-tensors-format.md section 2 before any
 * arithmetic, with a message naming the tensor. The output is held in memory until it is
 * written (whole model: 2 bytes per weight; --tensor limits it to one module). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "commands.h"
#include "core/json_util.h"
#include "vsr/quant.h"
#include "vsr/safetensors.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun dequant PKG_DIR --out FILE.safetensors [--tensor NAME]\n\n"
            "Dequantizes every quantized linear weight of the package folder PKG_DIR (its\n"
            "config.json quantization_config and model.safetensors or shards) with the\n"
            "reference code, exactly as compressed-tensors decompresses, and writes them as\n"
            "BF16 <module>.weight tensors to FILE.\n\n"
            "  --out FILE      the safetensors file to write (required)\n"
            "  --tensor NAME   only this module (\"model.layers.0.mlp.up_proj\" or its \".weight\")\n");
}

typedef struct job {
    const vsr_quant_config *q;
    vsr_weights *w;
    vsr_st_writer *out;
} job;

static const vsr_tensor *param(vsr_weights *w, const char *module, const char *p) {
    char name[1100]; /* module names are < 1024 (see quantized_module) */
    snprintf(name, sizeof name, "%s.%s", module, p);
    return vsr_weights_find(w, name);
}

/* Checks dtype and shape; dims[i] < 0 means "any". */
static vsr_status expect(const vsr_tensor *t, const char *module, const char *p, vsr_dtype dt, int ndim,
                         const int64_t *dims, vsr_err *err) {
    if (!t) return vsr_err_set(err, VSR_E_FORMAT, "tensor %s.%s is missing", module, p);
    bool ok = t->dtype == dt && t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = dims[i] < 0 || t->shape[i] == dims[i];
    if (ok) return VSR_OK;
    char want[128] = "", got[128] = "";
    size_t a = 0, b = 0;
    for (int i = 0; i < ndim; i++) a += (size_t)snprintf(want + a, sizeof want - a, "%s%lld", i ? "," : "", (long long)dims[i]);
    for (int i = 0; i < t->ndim && b < sizeof got - 24; i++)
        b += (size_t)snprintf(got + b, sizeof got - b, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    return vsr_err_set(err, VSR_E_FORMAT, "tensor %s: %s [%s], expected %s [%s]", t->name,
                       vsr_dtype_info(t->dtype)->name, got, vsr_dtype_info(dt)->name, want);
}

static void *copy_data(const vsr_tensor *t) {
    void *p = malloc(t->nbytes ? t->nbytes : 1);
    if (p) memcpy(p, t->data, t->nbytes); /* the mapping may be unaligned */
    return p;
}

static vsr_status add_output(job *j, const char *module, int64_t N, int64_t K, const uint16_t *bf16, vsr_err *err) {
    char name[1100];
    snprintf(name, sizeof name, "%s.weight", module);
    int64_t shape[2] = {N, K};
    return vsr_st_writer_add(j->out, name, VSR_DT_BF16, 2, shape, bf16, (size_t)(N * K) * 2, err);
}

static vsr_status dequant_fp8(job *j, const char *m, vsr_err *err) {
    const vsr_tensor *w = param(j->w, m, "weight"), *s = param(j->w, m, "weight_scale");
    int64_t any2[2] = {-1, -1};
    vsr_status st = expect(w, m, "weight", VSR_DT_F8_E4M3, 2, any2, err);
    if (st) return st;
    int64_t N = w->shape[0], K = w->shape[1], sdims[2] = {N, 1};
    /* [N,1] as written; [N] accepted as vLLM does */
    if (s && s->ndim == 1) st = expect(s, m, "weight_scale", VSR_DT_BF16, 1, &N, err);
    else st = expect(s, m, "weight_scale", VSR_DT_BF16, 2, sdims, err);
    if (st) return st;
    uint16_t *scale = copy_data(s), *out = malloc((size_t)(N * K) * 2);
    uint8_t *wq = copy_data(w);
    if (!scale || !out || !wq) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", m);
    else {
        vsr_dequant_fp8_ref(wq, scale, N, K, out);
        st = add_output(j, m, N, K, out, err);
    }
    free(scale), free(out), free(wq);
    return st;
}

static vsr_status dequant_int4(job *j, const char *m, vsr_err *err) {
    const vsr_tensor *pk = param(j->w, m, "weight_packed"), *s = param(j->w, m, "weight_scale");
    const vsr_tensor *shp = param(j->w, m, "weight_shape"), *zt = param(j->w, m, "weight_zero_point");
    const vsr_tensor *gt = param(j->w, m, "weight_g_idx");
    int64_t two = 2;
    vsr_status st;
    if (!shp) return vsr_err_set(err, VSR_E_FORMAT, "tensor %s.weight_shape is missing", m);
    /* I64 from torch.tensor(shape); I32 accepted too */
    if ((st = expect(shp, m, "weight_shape", shp->dtype == VSR_DT_I32 ? VSR_DT_I32 : VSR_DT_I64, 1, &two, err)))
        return st;
    int64_t N, K;
    if (shp->dtype == VSR_DT_I32) {
        int32_t v[2];
        memcpy(v, shp->data, sizeof v);
        N = v[0], K = v[1];
    } else {
        int64_t v[2];
        memcpy(v, shp->data, sizeof v);
        N = v[0], K = v[1];
    }
    int group = j->q->group_size;
    if (N <= 0 || K <= 0 || N > (1 << 24) || K > (1 << 24))
        return vsr_err_set(err, VSR_E_FORMAT, "tensor %s.weight_shape [%lld, %lld] is not a valid [N, K]", m,
                           (long long)N, (long long)K);
    if (group > 0 && K % group)
        return vsr_err_set(err, VSR_E_FORMAT, "module %s: in_features %lld is not a multiple of group_size %d", m,
                           (long long)K, group);
    int64_t G = group > 0 ? K / group : 1;
    int64_t pdims[2] = {N, (K + 7) / 8}, sdims[2] = {N, G}, zdims[2] = {(N + 7) / 8, G};
    if ((st = expect(pk, m, "weight_packed", VSR_DT_I32, 2, pdims, err))) return st;
    if ((st = expect(s, m, "weight_scale", VSR_DT_BF16, 2, sdims, err))) return st;
    if (!j->q->symmetric && (st = expect(zt, m, "weight_zero_point", VSR_DT_I32, 2, zdims, err))) return st;
    if (j->q->symmetric && zt)
        return vsr_err_set(err, VSR_E_FORMAT, "tensor %s: zero points in a symmetric package", zt->name);
    if (gt && !j->q->actorder_group)
        return vsr_err_set(err, VSR_E_FORMAT, "tensor %s: g_idx present but the config's actorder is not \"group\"",
                           gt->name);
    if (gt && (st = expect(gt, m, "weight_g_idx", VSR_DT_I32, 1, &K, err))) return st;
    uint32_t *packed = copy_data(pk), *zp = zt && !j->q->symmetric ? copy_data(zt) : NULL;
    uint16_t *scale = copy_data(s), *out = malloc((size_t)(N * K) * 2);
    int32_t *g_idx = gt ? copy_data(gt) : NULL;
    if (!packed || !scale || !out || (zt && !j->q->symmetric && !zp) || (gt && !g_idx)) {
        st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", m);
        goto done;
    }
    for (int64_t k = 0; g_idx && k < K; k++) {
        if (g_idx[k] < -1 || g_idx[k] >= G) {
            st = vsr_err_set(err, VSR_E_FORMAT, "tensor %s: g_idx[%lld] = %d is outside [0, %lld)", gt->name,
                             (long long)k, g_idx[k], (long long)G);
            goto done;
        }
    }
    vsr_dequant_int4_ref(packed, scale, zp, g_idx, N, K, group, out);
    st = add_output(j, m, N, K, out, err);
done:
    free(packed), free(zp), free(scale), free(out), free(g_idx);
    return st;
}

static vsr_status dequant_nvfp4(job *j, const char *m, vsr_err *err) {
    const vsr_tensor *pk = param(j->w, m, "weight_packed"), *s = param(j->w, m, "weight_scale");
    const vsr_tensor *gs = param(j->w, m, "weight_global_scale");
    int64_t any2[2] = {-1, -1};
    vsr_status st = expect(pk, m, "weight_packed", VSR_DT_U8, 2, any2, err);
    if (st) return st;
    int64_t N = pk->shape[0], K = pk->shape[1] * 2;
    if (K % 16)
        return vsr_err_set(err, VSR_E_FORMAT, "tensor %s: in_features %lld is not a multiple of 16", pk->name,
                           (long long)K);
    int64_t sdims[2] = {N, K / 16}, one = 1;
    if ((st = expect(s, m, "weight_scale", VSR_DT_F8_E4M3, 2, sdims, err))) return st;
    if (gs && gs->ndim == 0 && gs->dtype == VSR_DT_F32) { /* [] accepted like [1] */
    } else if ((st = expect(gs, m, "weight_global_scale", VSR_DT_F32, 1, &one, err))) return st;
    float g;
    memcpy(&g, gs->data, 4);
    if (!(g > 0.0f) || g != g)
        return vsr_err_set(err, VSR_E_FORMAT, "tensor %s is %g, expected a positive number", gs->name, g);
    uint8_t *packed = copy_data(pk), *scale = copy_data(s);
    uint16_t *out = malloc((size_t)(N * K) * 2);
    if (!packed || !scale || !out) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory", m);
    else {
        vsr_dequant_nvfp4_ref(packed, scale, g, N, K, out);
        st = add_output(j, m, N, K, out, err);
    }
    free(packed), free(scale), free(out);
    return st;
}

/* The module name if tensor `t` marks a quantized module of scheme s, else NULL. */
static bool quantized_module(const vsr_quant_config *q, vsr_weights *w, const vsr_tensor *t, char *mod, size_t n) {
    const char *suffix = q->scheme == VSR_SCHEME_FP8 ? ".weight" : ".weight_packed";
    size_t len = strlen(t->name), sl = strlen(suffix);
    if (len <= sl || strcmp(t->name + len - sl, suffix) || len - sl >= n) return false;
    snprintf(mod, n, "%.*s", (int)(len - sl), t->name);
    if (q->scheme == VSR_SCHEME_FP8) return t->dtype == VSR_DT_F8_E4M3 || param(w, mod, "weight_scale") != NULL;
    return true;
}

static vsr_status run(const char *dir, const char *out_path, const char *only, int *count, vsr_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = NULL;
    vsr_status st = vsr_json_load_file(path, path, 16u << 20, &cfg, err);
    if (st) return st;
    vsr_quant_config q;
    st = vsr_quant_config_parse(json_object_get(cfg, "quantization_config"), &q, err);
    json_decref(cfg);
    if (st) return vsr_err_prefix(err, "%s", path);
    if (q.scheme == VSR_SCHEME_BF16) {
        vsr_quant_config_free(&q);
        return vsr_err_set(err, VSR_E_INVALID, "%s: no quantization_config: the package is BF16, nothing to dequantize",
                           path);
    }
    job j = {.q = &q};
    st = vsr_weights_open(dir, VSR_WEIGHTS_MAP, &j.w, err);
    if (st) goto done;
    j.out = vsr_st_writer_new();
    if (!j.out) {
        st = vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        goto done;
    }
    char wanted[1024] = "";
    if (only) {
        snprintf(wanted, sizeof wanted, "%s", only);
        size_t l = strlen(wanted);
        if (l > 7 && !strcmp(wanted + l - 7, ".weight")) wanted[l - 7] = 0;
    }
    for (size_t i = 0; i < vsr_weights_count(j.w); i++) {
        const vsr_tensor *t = vsr_weights_at(j.w, i);
        char mod[1024];
        if (!quantized_module(&q, j.w, t, mod, sizeof mod)) continue;
        if (only && strcmp(mod, wanted)) continue;
        if (vsr_quant_module_ignored(&q, mod)) {
            st = vsr_err_set(err, VSR_E_FORMAT, "tensor %s is quantized but its module is in quantization_config.ignore",
                             t->name);
            goto done;
        }
        st = q.scheme == VSR_SCHEME_FP8 ? dequant_fp8(&j, mod, err)
             : q.scheme == VSR_SCHEME_INT4 ? dequant_int4(&j, mod, err)
                                           : dequant_nvfp4(&j, mod, err);
        if (st) goto done;
        (*count)++;
    }
    if (only && *count == 0) {
        st = vsr_err_set(err, VSR_E_NOT_FOUND, "%s: no quantized module \"%s\" in the package", dir, wanted);
        goto done;
    }
    st = vsr_st_writer_set_metadata(j.out, "format", "pt", err);
    if (!st) st = vsr_st_writer_save(j.out, out_path, err);
done:
    vsr_st_writer_free(j.out);
    vsr_weights_close(j.w);
    vsr_quant_config_free(&q);
    return st;
}

int cmd_dequant(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--out", &out)) != 0) {
            if (r < 0) return 2;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--tensor", &only)) != 0) {
            if (r < 0) return 2;
            continue;
        }
        if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "vllm-srun dequant: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        dir = argv[i];
    }
    if (!dir || !out) {
        fprintf(stderr, "vllm-srun dequant: %s is required\n", !dir ? "PKG_DIR" : "--out FILE");
        usage(stderr);
        return 2;
    }
    vsr_err err = {0};
    int count = 0;
    vsr_status st = run(dir, out, only, &count, &err);
    if (st != VSR_OK) {
        fprintf(stderr, "vllm-srun dequant: %s\n", err.msg);
        return 1;
    }
    printf("wrote %d dequantized BF16 weight%s to %s\n", count, count == 1 ? "" : "s", out);
    return 0;
}
