/* Internal jansson helpers shared by the readers of config.json, manifests and requests. */
#ifndef VSR_CORE_JSON_UTIL_H
#define VSR_CORE_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>

#include "vsr/error.h"

/* Refuses any key of `obj` not in the NULL-terminated `allowed` list:
 * "<where>: unknown key \"k\" (expected one of a, b, c)". */
vsr_status vsr_json_only_keys(const json_t *obj, const char *const *allowed, const char *where,
                              vsr_err *err);
/* Loads a JSON file strictly (no duplicate keys, whole file one value, size limit). */
vsr_status vsr_json_load_file(const char *path, const char *label, size_t max_bytes, json_t **out,
                              vsr_err *err);
/* Serializes like Python's json.dumps(obj, sort_keys=True, separators=(",",":"),
 * ensure_ascii=True): used for identities. Returns malloc'd string or NULL. */
char *vsr_json_dumps_python_compact(const json_t *v);
/* General form of Python's json.dumps: sort_keys, ensure_ascii, and separators
 * (",",":") when compact else the default (", ",": "). Object keys otherwise keep
 * their document order (jansson preserves insertion order). */
char *vsr_json_dumps_python(const json_t *v, bool sort_keys, bool ensure_ascii, bool compact);

#endif
