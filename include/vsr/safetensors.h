/* vsr/safetensors.h: strict safetensors reader (mmap) and a deterministic writer.
 *
 * Reading validates the whole header before any tensor is touched: 8-byte
 * length, header length limit, UTF-8 JSON object starting with '{', known dtype
 * strings, shapes whose element count x dtype bits equals the byte span,
 * offsets sorted, contiguous, starting at 0 and ending at the buffer's end,
 * no duplicate names, `__metadata__` a string->string map. Every violation is
 * refused with a message naming the file, the tensor and the rule.
 *
 * Opening maps the file but reads only the header; tensor bytes are touched
 * only when a caller dereferences vsr_tensor.data. */
#ifndef VSR_SAFETENSORS_H
#define VSR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vsr/dtype.h"
#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VSR_ST_MAX_DIMS 8
/* The Rust library's HeaderTooLarge limit. */
#define VSR_ST_MAX_HEADER_BYTES 100000000ull

typedef struct vsr_tensor {
    const char *name;  /* owned by the file object */
    vsr_dtype dtype;
    int ndim;          /* 0 for a scalar */
    int64_t shape[VSR_ST_MAX_DIMS];
    int64_t numel;
    const void *data;  /* inside the mapping; may be unaligned (use memcpy or the loaders) */
    size_t nbytes;
    uint64_t offset;   /* absolute position of the first byte in the file */
    const char *file;  /* label of the file it came from (owned by the file object) */
} vsr_tensor;

typedef struct vsr_st_file vsr_st_file;

/* Maps and validates `path`. `label` (may be NULL: the path) is used in messages. */
vsr_status vsr_st_open(const char *path, const char *label, vsr_st_file **out, vsr_err *err);
/* Validates an in-memory image (the caller keeps `buf` alive). Used by the fuzzer and tests. */
vsr_status vsr_st_parse(const char *label, const uint8_t *buf, size_t len, vsr_st_file **out,
                        vsr_err *err);
/* Reads only the header (no mapping of tensor bytes): for gating and inspect. */
vsr_status vsr_st_open_header(const char *path, const char *label, vsr_st_file **out, vsr_err *err);
void vsr_st_close(vsr_st_file *f); /* NULL is a no-op */

size_t vsr_st_count(const vsr_st_file *f);
const vsr_tensor *vsr_st_at(const vsr_st_file *f, size_t i); /* sorted by data offset */
const vsr_tensor *vsr_st_find(const vsr_st_file *f, const char *name); /* NULL if absent */
/* `__metadata__` value for key, or NULL. */
const char *vsr_st_metadata(const vsr_st_file *f, const char *key);
uint64_t vsr_st_file_bytes(const vsr_st_file *f);
const char *vsr_st_label(const vsr_st_file *f);

/* ---- writer ----
 * Produces byte-identical files for identical input on any machine, and the same
 * bytes as Python's safetensors.save_file: tensors laid out in the reference
 * writer's dtype order (by size, then its fixed order within a size), then name;
 * entries in offset order with keys dtype, shape, data_offsets; `__metadata__`
 * keys sorted; header padded with spaces to a multiple of 8. */
typedef struct vsr_st_writer vsr_st_writer;

vsr_st_writer *vsr_st_writer_new(void);
void vsr_st_writer_free(vsr_st_writer *w);
/* Copies `data` (nbytes must equal numel x bits / 8). */
vsr_status vsr_st_writer_add(vsr_st_writer *w, const char *name, vsr_dtype dtype, int ndim,
                             const int64_t *shape, const void *data, size_t nbytes, vsr_err *err);
vsr_status vsr_st_writer_set_metadata(vsr_st_writer *w, const char *key, const char *value,
                                      vsr_err *err);
/* Writes atomically (temp file + rename). */
vsr_status vsr_st_writer_save(vsr_st_writer *w, const char *path, vsr_err *err);

/* ---- a checkpoint's weights across shards ----
 * `dir` holds model.safetensors or model.safetensors.index.json + shards.
 * Every name in the index must exist in the shard it names and vice versa; shard
 * file names must stay inside `dir`. */
typedef struct vsr_weights vsr_weights;

typedef enum vsr_weights_mode {
    VSR_WEIGHTS_HEADERS, /* headers only: for gating, inspect, cross-checks */
    VSR_WEIGHTS_MAP,     /* full mapping: tensor data readable */
} vsr_weights_mode;

vsr_status vsr_weights_open(const char *dir, vsr_weights_mode mode, vsr_weights **out, vsr_err *err);
void vsr_weights_close(vsr_weights *w);
size_t vsr_weights_count(const vsr_weights *w);
const vsr_tensor *vsr_weights_at(const vsr_weights *w, size_t i);
const vsr_tensor *vsr_weights_find(const vsr_weights *w, const char *name);
/* The weight files in manifest order: the index (if any) then the sorted shard names. */
size_t vsr_weights_file_count(const vsr_weights *w);
const char *vsr_weights_file_name(const vsr_weights *w, size_t i); /* relative to dir */
uint64_t vsr_weights_total_bytes(const vsr_weights *w); /* sum of tensor bytes */
/* Load-time transforms (serve --quantize fp8-dynamic): tensors of `add` replace those of the same
 * name (a BF16 `.weight` by its FP8 one) or are added (`.weight_scale`). The caller's `add` array
 * and the data it points to stay alive until vsr_weights_close, which calls owner_free(owner).
 * The file list is unchanged: the added tensors live in memory, not in a file. */
vsr_status vsr_weights_overlay(vsr_weights *w, const vsr_tensor *add, size_t n_add, void *owner,
                               void (*owner_free)(void *), vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
