/* NFC quick check: most text is already NFC, and utf8proc_map (decompose, reorder,
 * recompose, allocate) costs more than the rest of encoding. A string whose every code
 * point is "inert" is certainly NFC; otherwise the caller normalises it.
 *
 * Inert (conservative): canonical combining class 0; unchanged by NFC on its own; not a
 * non-initial part of any canonical decomposition (so nothing before it can compose
 * with it); its decomposition, if any, starts with a class-0 char; and not a Hangul
 * medial vowel or final consonant jamo (the algorithmic compositions). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer_internal.h"

#define NCP 0x110000
static uint8_t unsafe_bits[NCP / 8];
static pthread_once_t nfc_once = PTHREAD_ONCE_INIT;

static void mark(uint32_t c) { unsafe_bits[c >> 3] |= (uint8_t)(1u << (c & 7)); }

static void nfc_init(void) {
    for (uint32_t c = 0x80; c < NCP; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
        if (p->combining_class) mark(c);
        if (c >= 0xAC00 && c <= 0xD7A3) continue; /* Hangul syllables are NFC on their own */
        utf8proc_int32_t d[32];
        int last = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, UTF8PROC_DECOMPOSE, &last);
        if (n <= 0) {
            mark(c);
            continue;
        }
        if (n == 1 && (uint32_t)d[0] == c) continue;
        for (utf8proc_ssize_t k = 1; k < n; k++) mark((uint32_t)d[k]);
        if (utf8proc_get_property(d[0])->combining_class) mark(c);
        /* a composite is inert only if NFC maps it back to itself (not a singleton or an
         * excluded composition) */
        uint8_t in[4];
        utf8proc_ssize_t l = utf8proc_encode_char((utf8proc_int32_t)c, in);
        utf8proc_uint8_t *out = NULL;
        utf8proc_ssize_t r = utf8proc_map(in, l, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r != l || memcmp(out, in, (size_t)l)) mark(c);
        free(out);
    }
    for (uint32_t c = 0x1161; c <= 0x1175; c++) mark(c);
    for (uint32_t c = 0x11A8; c <= 0x11C2; c++) mark(c);
}

bool vsr_nfc_quick_stable(const char *str, size_t n) {
    pthread_once(&nfc_once, nfc_init);
    const uint8_t *s = (const uint8_t *)str;
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        uint32_t c;
        if (b < 0xE0) c = ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3Fu), i += 2;
        else if (b < 0xF0)
            c = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3Fu), i += 3;
        else
            c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3Fu),
            i += 4;
        if (unsafe_bits[c >> 3] & (1u << (c & 7))) return false;
    }
    return true;
}
