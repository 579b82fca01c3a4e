#include "core/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for `extra` more bytes plus the NUL; false (and oom set) when it cannot. */
static bool reserve(vsr_strbuf *b, size_t extra) {
    if (b->oom) return false;
    if (extra > SIZE_MAX - 1 - b->n) {
        b->oom = true;
        return false;
    }
    size_t need = b->n + extra + 1;
    if (need <= b->cap) return true;
    size_t c = b->cap ? b->cap : 256;
    while (c < need) c = c > SIZE_MAX / 2 ? need : c * 2;
    char *q = realloc(b->p, c);
    if (!q) {
        b->oom = true;
        return false;
    }
    b->p = q;
    b->cap = c;
    return true;
}

void vsr_strbuf_put(vsr_strbuf *b, const void *s, size_t n) {
    if (!reserve(b, n)) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void vsr_strbuf_puts(vsr_strbuf *b, const char *s) { vsr_strbuf_put(b, s, strlen(s)); }

void vsr_strbuf_printf(vsr_strbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    /* First try into the room there is; on a short buffer grow to the reported size once. */
    int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (w < 0) {
        b->oom = true;
        return;
    }
    if (b->p && (size_t)w < b->cap - b->n) {
        b->n += (size_t)w;
        return;
    }
    if (!reserve(b, (size_t)w)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)w;
}

char *vsr_strbuf_take(vsr_strbuf *b, size_t *len) {
    if (!b->p && reserve(b, 0)) b->p[0] = 0; /* nothing appended: an empty string */
    char *p = b->oom ? NULL : b->p;
    if (len) *len = p ? b->n : 0;
    if (!p) free(b->p);
    *b = (vsr_strbuf){0};
    return p;
}

void vsr_strbuf_free(vsr_strbuf *b) {
    if (!b) return;
    free(b->p);
    *b = (vsr_strbuf){0};
}
