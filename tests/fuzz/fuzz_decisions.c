/* libFuzzer target: /v1/decisions bodies through validation, rendering and tokenizing
 * (vsr_decision_parse, what an HTTP thread runs on untrusted input) and the response writer.
 * No model: the decider is built over the real Qwen3 tokenizer and the fixture's codes. Traps if
 * a refusal leaves no message or an accepted job has no valid question. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decision/decision_impl.h"
#include "fixture/d3_codes.h"

static vsr_decider dec;

static void setup(void) {
    vsr_err err = {0};
    const char *dir = getenv("VSR_TOKENIZER_DIR") ? getenv("VSR_TOKENIZER_DIR") : VSR_DATA_DIR "/tokenizers/qwen3";
    if (vsr_tokenizer_open(dir, &dec.tok, &err) != VSR_OK) {
        fprintf(stderr, "fuzz_decisions: %s\n", err.msg);
        abort();
    }
    for (int i = 0; i < VSR_D3_CODES; i++) {
        dec.codes[i] = vsr_d3_fixture_codes[i];
        dec.token_ids[i] = vsr_d3_fixture_token_ids[i];
    }
    dec.max_input_tokens = 4096;
    dec.temperature = 0.75;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dec.tok) setup();
    vsr_http_error he = {0};
    vsr_decision_job *j = vsr_decision_parse(&dec, (const char *)data, size, "vllm-sr-c/d3-tiny", &he);
    if (!j) {
        if (!he.message[0] || !he.code || he.status < 400) __builtin_trap();
        return 0;
    }
    if (vsr_decision_rows(j) <= 0) __builtin_trap();
    vsr_decision_expire(j); /* answers every question as deadline_exceeded: exercises the writer */
    char *s = vsr_decision_response(j, NULL);
    if (!s) __builtin_trap();
    free(s);
    vsr_decision_free(j);
    return 0;
}

/* The target never runs a forward (vsr_decision_run is not called); these two symbols only
 * satisfy the linker for request.c without pulling the model and backends in. Reaching one
 * is a harness bug, so it traps. */
int64_t vsr_model_hidden_size(const vsr_model *m) {
    (void)m;
    __builtin_trap();
}
vsr_status vsr_model_forward_last(vsr_model *m, int n_rows, const int32_t *const *ids, const int *lens,
                                  float *hidden, float *logits, vsr_err *err) {
    (void)m, (void)n_rows, (void)ids, (void)lens, (void)hidden, (void)logits, (void)err;
    __builtin_trap();
}
