/* A growable, always NUL-terminated byte buffer for building text (JSON, prompts, metrics).
 *
 * Zero-initialise it (`vsr_strbuf b = {0};`), append, then take the bytes. An allocation
 * failure sets `oom` and turns every later append into a no-op, so a builder appends
 * without checking and looks once at the end: vsr_strbuf_take returns NULL then. */
#ifndef VSR_CORE_STRBUF_H
#define VSR_CORE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct vsr_strbuf {
    char *p;    /* NUL-terminated once anything was appended; NULL before */
    size_t n;   /* bytes appended, not counting the NUL */
    size_t cap; /* bytes allocated at p */
    bool oom;   /* an allocation (or a printf format) failed: the contents are incomplete */
} vsr_strbuf;

/* Appends n bytes of s (which may hold NULs). */
void vsr_strbuf_put(vsr_strbuf *b, const void *s, size_t n);
/* Appends the C string s. */
void vsr_strbuf_puts(vsr_strbuf *b, const char *s);
/* Appends printf output. */
void vsr_strbuf_printf(vsr_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands over the malloc'd NUL-terminated text (an empty string when nothing was appended)
 * and its length in *len (may be NULL), and leaves b empty. After an allocation failure it
 * frees the partial text and returns NULL. */
char *vsr_strbuf_take(vsr_strbuf *b, size_t *len);
/* Frees the text and leaves b empty; NULL is a no-op. */
void vsr_strbuf_free(vsr_strbuf *b);

#endif
