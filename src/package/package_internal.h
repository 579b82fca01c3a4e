/* Internal pieces of the package layer shared by its files, the tests and the fuzzer. */
#ifndef VSR_PACKAGE_INTERNAL_H
#define VSR_PACKAGE_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "vsr/package.h"

#define VSR_MANIFEST_NAME "MODEL_MANIFEST.json"
#define VSR_MANIFEST_SCHEMA "d3-package-manifest/1"
#define VSR_JSON_MAX_BYTES (16u << 20) /* config, decision_config, manifest, index */

/* decision_config.json (reference-runtime 4.1 step 2). Takes a reference on `j`
 * (kept as out->json for the identity). */
vsr_status vsr_decision_config_parse(json_t *j, const char *label, vsr_decision_config *out,
                                     vsr_err *err);
void vsr_decision_config_free(vsr_decision_config *d);

/* MODEL_MANIFEST.json from its raw bytes (step 1); also sets manifest_sha256. */
vsr_status vsr_manifest_parse(const char *bytes, size_t n, const char *label, vsr_manifest *out,
                              vsr_err *err);
/* The same from a parsed document (fuzzer); manifest_sha256 is left empty. */
vsr_status vsr_manifest_parse_json(const json_t *j, const char *label, vsr_manifest *out,
                                   vsr_err *err);
void vsr_manifest_free(vsr_manifest *m);
const vsr_manifest_file *vsr_manifest_find(const vsr_manifest *m, const char *name);

/* Lexical rule for a file name inside a package: relative, not empty, no "." or ".."
 * component, no empty component, no backslash. */
bool vsr_package_name_safe(const char *name);
/* Resolves dir/name (real path into out) and checks it stays in the package folder
 * (dreal) or, for a hub snapshot, the repo's blobs folder. */
vsr_status vsr_package_resolve_inside(const char *dir, const char *name, const char *what,
                                      char *out, size_t out_n, vsr_err *err);

/* ^[A-Za-z0-9][\w.-]*\/[\w.-]+$ (a Hub repository ID). */
bool vsr_repo_name_valid(const char *repo);

/* Counts from the headers. */
typedef struct vsr_param_counts {
    int64_t text, vision, readout, other;
    uint64_t text_bytes, readout_bytes;
} vsr_param_counts;

/* Finds the text prefix (exactly one of model.language_model. / language_model., or
 * model. for a top-level qwen3_5_text config) and counts parameters: a quantized
 * linear counts its logical [N, K] elements; scales, zero points, g_idx, shapes and
 * global scales are not parameters. */
vsr_status vsr_package_count(vsr_package *p, vsr_param_counts *out, vsr_err *err);
/* Tensor cross-check against config and scheme (names, dtypes, shapes) and the readout. */
vsr_status vsr_package_check_tensors(const vsr_package *p, vsr_err *err);

/* ---- Vela 2.0 decoder packages (vela2_package.c) ---- */
/* Whether config.json (a json_t*) or the repo name makes this a package the vela2 reader
 * decides about: a vela2-decoder package, or one it refuses by name (vela2-unified, Vela 3,
 * another Vela layout). */
bool vsr_vela2_claims(const vsr_package *p, const void *cfg);
/* The whole of vsr_package_open for such a package after config.json is read (refusals too). */
vsr_status vsr_vela2_open(vsr_package *p, const void *cfg, vsr_err *err);
vsr_status vsr_vela2_verify(vsr_package *p, int threads, vsr_progress *progress, vsr_err *err);
vsr_status vsr_vela2_check(const vsr_package *p, vsr_err *err);
vsr_status vsr_vela2_map(vsr_package *p, vsr_err *err); /* the broad head */
void vsr_vela2_free(vsr_package *p);
/* head.*, set_bias, span2.*: tensors a vela2 package's weights hold outside backbone. */
bool vsr_vela2_head_tensor(const char *name);
/* Prefixes a store miss of a Vela 3 repo with what the runtime says about that release. */
void vsr_vela2_note_unpublished(const char *repo, vsr_err *err);

/* Python's repr() (identity.c), for messages the reference words with !r or a list:
 * 'text', None, True, 0.75, ['a', 'b'], [255, 32]. Truncated to n bytes; returns buf. */
const char *vsr_py_repr_str(const char *s, char *buf, size_t n);
const char *vsr_py_repr_json(const void *json, char *buf, size_t n); /* a json_t* */
const char *vsr_py_repr_list(const char *const *names, size_t count, char *buf, size_t n);
const char *vsr_py_repr_shape(int ndim, const int64_t *shape, char *buf, size_t n);

#endif
