/* vsr/error.h: status codes and the caller-provided error every call fills.
 *
 * Every fallible function returns a vsr_status and, when it is not VSR_OK,
 * writes a human message into the caller's vsr_err that names the object
 * (file, tensor, key, device) and what was expected. No allocation happens on
 * the error path. Asserts are for internal invariants only, never for input. */
#ifndef VSR_ERROR_H
#define VSR_ERROR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vsr_status {
    VSR_OK = 0,
    VSR_E_INVALID,     /* bad argument or malformed input (file, JSON, request) */
    VSR_E_IO,          /* open/read/mmap/write failed */
    VSR_E_FORMAT,      /* a file breaks its format's rules (safetensors, config) */
    VSR_E_UNSUPPORTED, /* well-formed but not something we serve (quant method, family) */
    VSR_E_NOT_FOUND,   /* package, revision, tensor or file absent */
    VSR_E_INTEGRITY,   /* sha256 / byte count / identity mismatch */
    VSR_E_DEVICE,      /* the device cannot run this (capability or memory) */
    VSR_E_NOMEM,
    VSR_E_INTERNAL,
    VSR_STATUS_COUNT
} vsr_status;

#define VSR_ERR_MSG_MAX 1024

typedef struct vsr_err {
    vsr_status code;
    char msg[VSR_ERR_MSG_MAX];
} vsr_err;

/* Sets err (if non-NULL) and returns code, so callers can `return vsr_err_set(...)`. */
vsr_status vsr_err_set(vsr_err *err, vsr_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
vsr_status vsr_err_setv(vsr_err *err, vsr_status code, const char *fmt, va_list ap);
/* Prepends "prefix: " to an error already set (adds context on the way up). */
vsr_status vsr_err_prefix(vsr_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vsr_err_clear(vsr_err *err);
/* Short stable name of a status ("format", "integrity", ...). */
const char *vsr_status_name(vsr_status s);

#ifdef __cplusplus
}
#endif

#endif
