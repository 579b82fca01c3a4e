/* identity.model_sha256 (reference-runtime.md 4.1 step 6):
 *   sha256(json.dumps({"files": F, "decision": D}, sort_keys=True, separators=(",",":")))
 * with Python's default ensure_ascii=True. F: name -> sha256 of the weight shards and
 * the identity files present; D: decision_config restricted to the identity keys. */
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "package/package_internal.h"
#include "vsr/hash.h"

static const char *const identity_decision_keys[] = {
    "format_version", "format_id", "prompt",      "base_model", "revision",   "codes",
    "token_ids",      "temperature", "attention_mode", "pooling", "max_length", "readout_dtype",
};

vsr_status vsr_identity_model_sha256(int n, const char *const *names, const char *const *sha256,
                                     const void *decision_json, char out[65], vsr_err *err) {
    const json_t *dec = decision_json;
    if (dec && !json_is_object(dec))
        return vsr_err_set(err, VSR_E_INVALID, "identity: the decision config must be a JSON object");
    json_t *files = json_object(), *d = json_object(), *root = json_object();
    vsr_status st = VSR_OK;
    if (!files || !d || !root) {
        st = vsr_err_set(err, VSR_E_NOMEM, "identity: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (json_object_set_new(files, names[i], json_string(sha256[i]))) {
            st = vsr_err_set(err, VSR_E_INVALID, "identity: file name \"%s\" is not valid UTF-8", names[i]);
            goto done;
        }
    if (dec)
        for (size_t i = 0; i < sizeof identity_decision_keys / sizeof identity_decision_keys[0]; i++) {
            json_t *v = json_object_get(dec, identity_decision_keys[i]);
            if (v) json_object_set(d, identity_decision_keys[i], v);
        }
    json_object_set(root, "files", files);
    json_object_set(root, "decision", d);
    char *s = vsr_json_dumps_python_compact(root);
    if (!s) {
        st = vsr_err_set(err, VSR_E_NOMEM, "identity: out of memory");
        goto done;
    }
    vsr_sha256_hex(s, strlen(s), out);
    free(s);
done:
    json_decref(files);
    json_decref(d);
    json_decref(root);
    return st;
}
