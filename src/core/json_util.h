/* Internal jansson helpers shared by the readers of config.json, manifests and requests. */
#ifndef VSR_CORE_JSON_UTIL_H
#define VSR_CORE_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>

#include "core/strbuf.h"
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

/* The options of Python's json.dumps that the writers here use. */
typedef struct vsr_json_style {
    bool sort_keys;    /* sort object keys (by UTF-8 bytes, which is code point order) */
    bool ensure_ascii; /* see vsr_json_put_string */
    bool compact;      /* separators (",", ":") instead of (", ", ": "); only without an indent */
    int indent;        /* < 0: Python's indent=None, one line. >= 0: every item on its own line,
                        * indented that many spaces per level, separators (",", ": "); empty
                        * containers stay "{}" and "[]" */
} vsr_json_style;
/* Appends json.dumps(v, ...) in that style to b (b->oom on allocation failure). */
void vsr_json_dump_python(vsr_strbuf *b, const json_t *v, const vsr_json_style *st);

/* Appends the n bytes of UTF-8 text s as a quoted JSON string. The rules are Python's json
 * module: " and \ backslash-escaped, \b \f \n \r \t short, other code points below U+0020
 * as \u00xx (lowercase hex); with ensure_ascii also U+007F and everything past it as \uxxxx
 * (a surrogate pair past U+FFFF), without it those are copied as they are.
 * ensure_ascii=false is also exactly serde_json's escaping (Rust safetensors' header writer):
 * the same short escapes, \u00xx lowercase for the other controls, DEL and non-ASCII as is.
 * Python and serde_json differ only with ensure_ascii=true, which the safetensors writer does
 * not use.
 * The input must be valid UTF-8, which every caller guarantees (jansson refuses other
 * strings and keys; the safetensors writer refuses other names and metadata); on other bytes
 * the output is memory-safe but unspecified (the writers this one replaced already disagreed
 * there). */
void vsr_json_put_string(vsr_strbuf *b, const char *s, size_t n, bool ensure_ascii);

#endif
