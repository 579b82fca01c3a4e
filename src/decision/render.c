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

/* The reference writes `state or "(empty)"`: Python truthiness, so an empty string, object
 * or array is replaced and anything else (whitespace too) is written as it is. */
char *d3_prompt_text(const json_t *v) {
    bool falsy = (json_is_string(v) && json_string_length(v) == 0) ||
                 (json_is_object(v) && json_object_size(v) == 0) || (json_is_array(v) && json_array_size(v) == 0);
    return falsy ? strdup("") : d3_value_text(v);
}

char *d3_render_prompt(const char *state_text, const char *instructions, const char *const *codes,
                       int n_opt, char *const *option_text) {
    vsr_strbuf b = {0};
    vsr_strbuf_puts(&b, "<|im_start|>system\n" VSR_D3_SYSTEM_PROMPT
                        "<|im_end|>\n<|im_start|>user\nState:\n");
    vsr_strbuf_puts(&b, *state_text ? state_text : "(empty)");
    vsr_strbuf_puts(&b, "\n\nQuestion:\n");
    vsr_strbuf_puts(&b, *instructions ? instructions : "Choose the best matching option.");
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
