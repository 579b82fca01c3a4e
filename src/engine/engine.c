#include "vsr/engine.h"

#include <stdio.h>
#include <string.h>

#include "vsr/catalog.h"
#include "vsr/quantize_pkg.h"

vsr_status vsr_engine_prepare(vsr_engine *e, const vsr_engine_opts *o, vsr_err *err) {
    memset(e, 0, sizeof *e);
    const char *spec = o->device ? o->device : "auto";
    bool is_auto;
    vsr_device_kind kind;
    int index;
    vsr_status st = vsr_device_spec_parse(spec, &is_auto, &kind, &index, err);
    if (st != VSR_OK) return st;
    vsr_device_list devs;
    if ((st = vsr_devices_probe(&devs, err)) != VSR_OK) return st;
    /* An explicit device is checked before the package is even resolved. */
    if (!is_auto) {
        bool any = false, found = false;
        for (int i = 0; i < devs.count; i++)
            if (devs.dev[i].kind == kind) {
                any = true;
                if (index < 0 || devs.dev[i].index == index) found = true;
            }
        if (!any)
            return vsr_err_set(err, VSR_E_DEVICE, "no device can serve %s: %s: not available on this host",
                               o->model, vsr_device_kind_name(kind));
        if (!found)
            return vsr_err_set(err, VSR_E_DEVICE, "no device can serve %s: %s: no device %d", o->model,
                               vsr_device_kind_name(kind), index);
    }
    if ((st = vsr_package_open(o->model, o->revision, o->store_dir, &e->pkg, err)) != VSR_OK) return st;
    if (e->pkg->family != VSR_FAMILY_DECISION3 && e->pkg->family != VSR_FAMILY_VELA2)
        return vsr_err_set(err, VSR_E_UNSUPPORTED,
                           "%s is a %s package; vllm-srun answers decisions with Decision 3.0 and Vela 2.0 "
                           "decoder packages",
                           o->model, vsr_family_name(e->pkg->family));
    vsr_gate_request gr;
    vsr_package_gate_request(e->pkg, &gr);
    if (o->quantize) {
        /* Load-time FP8 is gated as the FP8 package it becomes: refused, with the device's reason,
         * wherever FP8 is not allowed (never served as BF16 instead). */
        if (strcmp(o->quantize, "fp8-dynamic"))
            return vsr_err_set(err, VSR_E_INVALID,
                               "--quantize takes fp8-dynamic (got '%s'); int4 and NVFP4 need a package written by "
                               "vllm-srun quantize",
                               o->quantize);
        if (e->pkg->quant.scheme != VSR_SCHEME_BF16)
            return vsr_err_set(err, VSR_E_INVALID,
                               "--quantize fp8-dynamic quantizes a BF16 package; %s is already %s (serve it without "
                               "--quantize)",
                               o->model, vsr_scheme_info(e->pkg->quant.scheme)->label);
        if (e->pkg->family != VSR_FAMILY_DECISION3) /* said plainly: the family rule would call it FP8 already */
            return vsr_err_set(err, VSR_E_UNSUPPORTED,
                               "--quantize fp8-dynamic: only Decision 3.0 packages may carry quantized weights; %s is "
                               "a %s package (serve it in BF16, without --quantize)",
                               o->model, vsr_family_name(e->pkg->family));
        gr.scheme = VSR_SCHEME_FP8;
        gr.weight_bytes = vsr_fp8_at_load_weight_bytes(e->pkg);
        gr.reserve_bytes = vsr_gate_reserve_bytes(gr.weight_bytes);
    }
    int chosen = -1;
    if ((st = vsr_place(&devs, spec, &gr, &chosen, err)) != VSR_OK) return st;
    e->device = devs.dev[chosen];
    vsr_device_id(&e->device, e->device_id, sizeof e->device_id);
    /* --dtype selects GPU kernel rules; the CPU has one numerics (FP32 activations). */
    if (o->dtype && strcmp(o->dtype, "auto") && e->device.kind == VSR_DEV_CPU)
        return vsr_err_set(err, VSR_E_INVALID,
                           "%s: --dtype %s is not available on the CPU (expected auto: FP32 activations "
                           "over the stored weights)", e->device_id, o->dtype);
    return VSR_OK;
}

vsr_status vsr_engine_load(vsr_engine *e, const vsr_engine_opts *o, vsr_err *err) {
    vsr_progress *p = o->show_progress ? vsr_progress_new("verify", vsr_package_verify_bytes(e->pkg), "B") : NULL;
    vsr_status st = vsr_package_verify(e->pkg, 0, p, err);
    vsr_progress_done(p);
    if (st != VSR_OK) return st;
    if ((st = vsr_package_map(e->pkg, err)) != VSR_OK) return st;
    if (o->quantize) {
        if ((st = vsr_package_quantize_fp8_at_load(e->pkg, o->threads, err)) != VSR_OK) return st;
        e->load_quantize = "fp8-dynamic";
    }
    vsr_model_opts mo = {.device = &e->device,
                         .threads = o->threads,
                         .dtype = o->dtype,
                         .autotune_cache = o->autotune_cache};
    if (e->pkg->family == VSR_FAMILY_VELA2) {
        if ((st = vsr_v2_model_load(e->pkg, &mo, &e->v2_model, err)) != VSR_OK) return st;
        return vsr_v2_decider_open(e->pkg, e->v2_model, &e->v2, err);
    }
    if ((st = vsr_model_load(e->pkg, &mo, &e->model, err)) != VSR_OK) return st;
    return vsr_decider_open(e->pkg, e->model, &e->decider, err);
}

vsr_status vsr_engine_golden(vsr_engine *e, vsr_err *err) {
    const char *dclass = vsr_device_kind_name(e->device.kind);
    double tol = e->device.kind == VSR_DEV_CPU ? 1e-3 : 0.02;
    /* A built-in by name, or a verified local copy of one (same identity, same bytes). */
    const vsr_builtin *b = e->pkg->builtin;
    if (!b && e->pkg->verified) b = vsr_catalog_find_identity(e->pkg->model_sha256);
    /* A Vela 2.0 identity covers the weights only: calibration.json (thresholds, temperatures) and
     * the tokenizer change the answers too, so a local copy takes the recorded answers only with
     * the built-in's manifest, which lists every file. */
    if (b && !e->pkg->builtin && e->pkg->family == VSR_FAMILY_VELA2 && b->manifest_sha256 &&
        (!e->pkg->has_manifest || strcmp(b->manifest_sha256, e->pkg->manifest.manifest_sha256)))
        b = NULL;
    /* Recorded answers are the BF16 package's: weights quantized at load are another model. */
    const char *recorded = b && !e->load_quantize ? b->golden_json : NULL;
    vsr_status st = e->v2 ? vsr_v2_golden_check(e->v2, recorded, dclass, tol, &e->golden, err)
                          : vsr_golden_check(e->decider, recorded, dclass, tol, &e->golden, err);
    if (st != VSR_OK) return st;
    if (e->load_quantize && !strcmp(e->golden.status, "unverified"))
        snprintf(e->golden.reason, sizeof e->golden.reason,
                 "weights quantized at load (--quantize %s): no recorded answers for them (the package's are BF16); "
                 "checked determinism and form only",
                 e->load_quantize);
    if (!strcmp(e->golden.status, "failed"))
        return vsr_err_set(err, VSR_E_INTEGRITY, "golden self-check failed: %.900s", e->golden.reason);
    return VSR_OK;
}

void vsr_engine_close(vsr_engine *e) {
    vsr_decider_free(e->decider);
    vsr_model_free(e->model);
    vsr_v2_decider_free(e->v2);
    vsr_v2_model_free(e->v2_model);
    vsr_package_close(e->pkg);
    vsr_golden_report_free(&e->golden);
    memset(e, 0, sizeof *e);
}
