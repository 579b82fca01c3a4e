/* vsr/engine.h: the load pipeline shared by `serve` and `decide`:
 *   prepare: check an explicit device exists, resolve and open the package
 *            (metadata only), gate it on the device. No weight is read.
 *   load:    verify the manifest and identity, map the weights, load the model,
 *            open the decision layer (tokenizer checks).
 *   golden:  the self-check (twice, bit-identical, against recorded answers). */
#ifndef VSR_ENGINE_H
#define VSR_ENGINE_H

#include "vsr/decision.h"
#include "vsr/device.h"
#include "vsr/model.h"
#include "vsr/package.h"
#include "vsr/progress.h"
#include "vsr/vela2_decide.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_engine {
    vsr_package *pkg;
    vsr_device device;
    char device_id[32];
    vsr_model *model;
    vsr_decider *decider;
    /* a vela2 package (pkg->family == VSR_FAMILY_VELA2) loads these instead of model/decider */
    vsr_v2_model *v2_model;
    vsr_v2_decider *v2;
    vsr_golden_report golden;
    const char *load_quantize;  /* "fp8-dynamic" when the weights were quantized at load, else NULL */
} vsr_engine;

typedef struct vsr_engine_opts {
    const char *model;          /* org/name[@rev] or an absolute path */
    const char *revision;       /* may be NULL */
    const char *store_dir;      /* may be NULL */
    const char *device;         /* "auto", "cpu", "cuda[:N]", "rocm[:N]" */
    int threads;
    const char *dtype;
    const char *autotune_cache;
    bool show_progress;         /* progress bars on a terminal */
    const char *quantize;       /* NULL, or "fp8-dynamic": quantize a BF16 package's weights while
                                 * loading (gated as FP8; golden reports unverified) */
} vsr_engine_opts;

vsr_status vsr_engine_prepare(vsr_engine *e, const vsr_engine_opts *o, vsr_err *err);
vsr_status vsr_engine_load(vsr_engine *e, const vsr_engine_opts *o, vsr_err *err);
/* Runs the golden self-check; a `failed` status is returned as VSR_E_INTEGRITY. */
vsr_status vsr_engine_golden(vsr_engine *e, vsr_err *err);
void vsr_engine_close(vsr_engine *e);

#ifdef __cplusplus
}
#endif

#endif
