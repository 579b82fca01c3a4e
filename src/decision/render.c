/* The Decision 3.0 prompt (reference-runtime.md 2.4): a system turn, a user turn
 * with State / Question / Options, and the assistant prefix with an empty think block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "core/strbuf.h"
#include "decision/decision_impl.h"

char *d3_value_text(const json_t *v) {
    if (json_is_string(v)) return strdup(json_string_value(v));
    return vsr_json_dumps_python(v, false, false, false);
}

static bool blank(const char *s) {
    for (; s && *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return false;
    return true;
}

char *d3_render_prompt(const char *state_text, const char *instructions, const char *const *codes,
                       int n_opt, char *const *option_text) {
    vsr_strbuf b = {0};
    vsr_strbuf_puts(&b, "<|im_start|>system\n" VSR_D3_SYSTEM_PROMPT
                        "<|im_end|>\n<|im_start|>user\nState:\n");
    vsr_strbuf_puts(&b, blank(state_text) ? "(empty)" : state_text);
    vsr_strbuf_puts(&b, "\n\nQuestion:\n");
    vsr_strbuf_puts(&b, blank(instructions) ? "Choose the best matching option." : instructions);
    vsr_strbuf_puts(&b, "\n\nOptions:\n");
    for (int i = 0; i < n_opt; i++) {
        if (i) vsr_strbuf_puts(&b, "\n");
        vsr_strbuf_puts(&b, codes[i]);
        vsr_strbuf_puts(&b, ": ");
        vsr_strbuf_puts(&b, option_text[i]);
    }
    vsr_strbuf_puts(&b, "\n\nReply with only the code of the best option.<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return vsr_strbuf_take(&b, NULL);
}
