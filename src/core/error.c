#include "vsr/error.h"

#include <stdio.h>
#include <string.h>

static const char *const status_names[] = {
    [VSR_OK] = "ok",
    [VSR_E_INVALID] = "invalid",
    [VSR_E_IO] = "io",
    [VSR_E_FORMAT] = "format",
    [VSR_E_UNSUPPORTED] = "unsupported",
    [VSR_E_NOT_FOUND] = "not_found",
    [VSR_E_INTEGRITY] = "integrity",
    [VSR_E_DEVICE] = "device",
    [VSR_E_NOMEM] = "nomem",
    [VSR_E_INTERNAL] = "internal",
};
_Static_assert(sizeof status_names / sizeof status_names[0] == VSR_STATUS_COUNT,
               "every vsr_status needs a name");

const char *vsr_status_name(vsr_status s) {
    return (s >= 0 && s < VSR_STATUS_COUNT) ? status_names[s] : "unknown";
}

vsr_status vsr_err_setv(vsr_err *err, vsr_status code, const char *fmt, va_list ap) {
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return code;
}

vsr_status vsr_err_set(vsr_err *err, vsr_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsr_err_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

vsr_status vsr_err_prefix(vsr_err *err, const char *fmt, ...) {
    if (!err) return VSR_E_INTERNAL;
    char old[VSR_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    size_t len = (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
    size_t room = sizeof err->msg - len;
    if (room > 2) {
        memcpy(err->msg + len, ": ", 2);
        len += 2;
        room -= 2;
        size_t ol = strnlen(old, sizeof old);
        if (ol >= room) ol = room - 1;
        memcpy(err->msg + len, old, ol);
        err->msg[len + ol] = 0;
    }
    return err->code;
}

void vsr_err_clear(vsr_err *err) {
    if (err) {
        err->code = VSR_OK;
        err->msg[0] = '\0';
    }
}
