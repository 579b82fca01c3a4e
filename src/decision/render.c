/* The Decision 3.0 prompt (reference-runtime.md 2.4): a system turn, a user turn
 * with State / Question / Options, and the assistant prefix with an empty think block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "decision/decision_impl.h"

char *d3_value_text(const json_t *v) {
    if (json_is_string(v)) return strdup(json_string_value(v));
    return vsr_json_dumps_python(v, false, false, false);
}

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} strbuf;

static void sb_add(strbuf *b, const char *s) {
    size_t n = strlen(s);
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 1024;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n + 1);
    b->n += n;
}

static bool blank(const char *s) {
    for (; s && *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return false;
    return true;
}

char *d3_render_prompt(const char *state_text, const char *instructions, const char *const *codes,
                       int n_opt, char *const *option_text) {
    strbuf b = {0};
    sb_add(&b, "<|im_start|>system\n" VSR_D3_SYSTEM_PROMPT "<|im_end|>\n<|im_start|>user\nState:\n");
    sb_add(&b, blank(state_text) ? "(empty)" : state_text);
    sb_add(&b, "\n\nQuestion:\n");
    sb_add(&b, blank(instructions) ? "Choose the best matching option." : instructions);
    sb_add(&b, "\n\nOptions:\n");
    for (int i = 0; i < n_opt; i++) {
        if (i) sb_add(&b, "\n");
        sb_add(&b, codes[i]);
        sb_add(&b, ": ");
        sb_add(&b, option_text[i]);
    }
    sb_add(&b, "\n\nReply with only the code of the best option.<|im_end|>\n"
               "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
