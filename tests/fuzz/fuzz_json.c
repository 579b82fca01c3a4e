/* libFuzzer target for the package layer's JSON readers: the input is fed, as one
 * document, to the config.json parser, the quantization_config parser (the whole
 * document and its "quantization_config" member), the decision_config.json parser, the
 * MODEL_MANIFEST.json parser (from bytes, so the JSON loader is fuzzed too) and the
 * identity computation. Build: make fuzz; run: build-fuzz/fuzz_json -runs=N DIR */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "package/package_internal.h"
#include "vsr/model_config.h"
#include "vsr/quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every refusal must say why. */
static vsr_status said(vsr_status st, const vsr_err *e) {
    if (st != VSR_OK && (e->code != st || !e->msg[0])) __builtin_trap();
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vsr_err e = {0};
    vsr_manifest m;
    if (said(vsr_manifest_parse((const char *)data, size, NULL, &m, &e), &e) == VSR_OK) vsr_manifest_free(&m);

    json_error_t je;
    json_t *j = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!j) return 0;
    vsr_model_config c;
    said(vsr_model_config_parse(j, "config.json", &c, &e), &e);

    vsr_quant_config q;
    if (said(vsr_quant_config_parse(j, &q, &e), &e) == VSR_OK) {
        vsr_quant_module_ignored(&q, "model.language_model.layers.0.mlp.up_proj");
        vsr_quant_config_free(&q);
    }
    json_t *qc = json_is_object(j) ? json_object_get(j, "quantization_config") : NULL;
    if (qc && said(vsr_quant_config_parse(qc, &q, &e), &e) == VSR_OK) vsr_quant_config_free(&q);

    vsr_decision_config d;
    if (said(vsr_decision_config_parse(j, NULL, &d, &e), &e) == VSR_OK) vsr_decision_config_free(&d);

    if (json_is_object(j) && said(vsr_manifest_parse_json(j, NULL, &m, &e), &e) == VSR_OK) vsr_manifest_free(&m);

    char out[65];
    const char *names[] = {"model.safetensors"}, *sums[] = {"00"};
    said(vsr_identity_model_sha256(1, names, sums, json_is_object(j) ? j : NULL, out, &e), &e);
    json_decref(j);
    return 0;
}
