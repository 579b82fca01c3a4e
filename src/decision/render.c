/* The Decision 3.0 prompt (published-d3.md "Prompt (exact)"): a system turn, a user turn
 * with State / Question / Options, and the assistant prefix with an empty think block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "core/strbuf.h"
#include "decision/decision_impl.h"

/* describe(v): a string as it is, anything else as json.dumps(v, ensure_ascii=False)
 * with the default separators ", " and ": " (keys in document order). */
char *d3_value_text(const json_t *v) {
    if (json_is_string(v)) return strdup(json_string_value(v));
    return vsr_json_dumps_python(v, false, false, false);
}

/* Python truthiness of a JSON value: null, "", {}, [], 0, 0.0 (and -0.0) and false. */
bool d3_is_falsy(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE: return true;
    case JSON_STRING: return json_string_length(v) == 0;
    case JSON_OBJECT: return json_object_size(v) == 0;
    case JSON_ARRAY: return json_array_size(v) == 0;
    case JSON_INTEGER: return json_integer_value(v) == 0;
    case JSON_REAL: return json_real_value(v) == 0.0;
    case JSON_TRUE: return false;
    }
    return false;
}

/* The state: "(empty)" only for null or the empty string; an empty object or array is
 * written "{}" / "[]", whitespace as it is. */
char *d3_state_text(const json_t *v) {
    if (!v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0)) return strdup("(empty)");
    return d3_value_text(v);
}

/* The instructions: describe(v), or the default when v is falsy in Python terms. */
char *d3_instructions_text(const json_t *v) {
    if (!v || d3_is_falsy(v)) return strdup(D3_DEFAULT_INSTRUCTIONS);
    return d3_value_text(v);
}

char *d3_render_head(const char *state_text) {
    vsr_strbuf b = {0};
    vsr_strbuf_puts(&b, "<|im_start|>system\n" VSR_D3_SYSTEM_PROMPT
                        "<|im_end|>\n<|im_start|>user\nState:\n");
    vsr_strbuf_puts(&b, state_text);
    vsr_strbuf_puts(&b, "\n\n");
    return vsr_strbuf_take(&b, NULL);
}

char *d3_question_prompt(const d3_question *q) {
    if (!q->head || !q->prompt) return NULL;
    size_t a = strlen(q->head), b = strlen(q->prompt);
    char *s = malloc(a + b + 1);
    if (!s) return NULL;
    memcpy(s, q->head, a);
    memcpy(s + a, q->prompt, b + 1);
    return s;
}

int32_t *d3_question_ids(const d3_question *q) {
    int32_t *ids = malloc((q->n_ids ? q->n_ids : 1) * sizeof *ids);
    if (!ids) return NULL;
    memcpy(ids, q->head_ids, q->n_head * sizeof *ids);
    memcpy(ids + q->n_head, q->ids, (q->n_ids - q->n_head) * sizeof *ids);
    return ids;
}

char *d3_render_tail(const char *instructions, const char *const *codes, int n_opt, char *const *option_text) {
    vsr_strbuf b = {0};
    vsr_strbuf_puts(&b, "Question:\n");
    vsr_strbuf_puts(&b, instructions);
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
