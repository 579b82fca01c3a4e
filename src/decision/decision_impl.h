/* Internal structures of the decision layer (src/decision/). */
#ifndef VSR_DECISION_IMPL_H
#define VSR_DECISION_IMPL_H

#include <jansson.h>

#include "vsr/decision.h"

typedef enum d3_qtype { D3_CHOICE, D3_NOUL, D3_SCORE, D3_QTYPE_COUNT } d3_qtype;

typedef struct d3_question {
    char *id;
    int type;              /* d3_qtype, or -1 when the type itself was invalid */
    int n_opt;
    char **keys;           /* answer keys, n_opt */
    char **legend;         /* score: level text per level (canonical JSON when not a string) */
    /* The prompt is the request's head (system turn, state: shared by its questions, rendered
     * and tokenized once) followed by this question's tail ("Question:\n..." to the assistant
     * prefix). The split is exact: no pre-token of the Qwen2 split pattern spans the "\n" before
     * "Question", so tokens(head + tail) = tokens(head) + tokens(tail) (tests/test_decision.c). */
    char *prompt;          /* the tail's text */
    int32_t *ids;          /* the tail's token ids */
    size_t n_ids;          /* tokens of the whole prompt: head + tail */
    const char *head;      /* the request's head text and ids (not owned) */
    const int32_t *head_ids;
    size_t n_head;
    const char *err_code;  /* item-level error code (static string) or NULL */
    char *err_msg;         /* malloc'd or NULL */
    bool answered;
    double probs[VSR_D3_CODES];
} d3_question;

typedef struct d3_request {
    char *name;            /* NULL for the main request, else the `states` key */
    int n_q;
    d3_question *q;
    int64_t tokens;        /* tokens forwarded for this request's questions */
    char *head;            /* the shared head of its prompts, and its ids (NULL until needed) */
    int32_t *head_ids;
    size_t n_head;
    char *head_err;        /* why the head could not be built (every question fails with it) */
    bool state_has_pad;    /* the state holds a literal image/video pad token */
} d3_request;

struct vsr_decision_job {
    char *model;           /* as the request named it, or the served name */
    int n_req;
    d3_request *req;       /* [0] is the main request */
    double deadline_ms;
    bool return_meta;
    char profile[32];      /* "exact" or the profile the request asked for (one the server enabled) */
    /* The rows to forward, built on first use (run.c): every valid question in request order,
     * with its request and its ordinal among that request's valid questions (the exact path
     * forwards each request's rows VSR_D3_ROWS_PER_FORWARD at a time, in that order). */
    d3_question **rows;
    int *row_req, *row_ord;
    int n_rows;
    int next;              /* first row not yet forwarded (rows before it are answered) */
    void *owner;           /* the scheduler's record of this job */
};

struct vsr_decider {
    const vsr_package *pkg;
    vsr_model *model;
    vsr_tokenizer *tok;
    int64_t max_input_tokens;
    double temperature;
    const char *codes[VSR_D3_CODES];
    int32_t token_ids[VSR_D3_CODES];
    char served_profile[32]; /* the profile the server enabled beside exact ("" = exact only) */
};

/* render.c */
#define D3_DEFAULT_INSTRUCTIONS "Choose the best matching option."
/* The shared head: system turn, user turn up to and including the state and "\n\n". */
char *d3_render_head(const char *state_text);
/* A question's tail: "Question:\n" to the assistant prefix. */
char *d3_render_tail(const char *instructions, const char *const *codes, int n_opt, char *const *option_text);
/* A question's whole prompt text and ids (head + tail), malloc'd; NULL on no memory. */
char *d3_question_prompt(const d3_question *q);
int32_t *d3_question_ids(const d3_question *q);
char *d3_value_text(const json_t *v); /* describe(v): string as is, else Python json.dumps */
bool d3_is_falsy(const json_t *v);    /* Python truthiness: null, "", {}, [], 0, 0.0, false */
/* describe(state), or "(empty)" when the state is null or "" ({} and [] are written). */
char *d3_state_text(const json_t *v);
/* describe(instructions), or "Choose the best matching option." when they are falsy. */
char *d3_instructions_text(const json_t *v);

/* answer.c */
/* probs over the first n of 255 logits at temperature t; false if not finite. */
bool d3_probs_from_logits(const float *logits, int n, double temperature, double *probs);
json_t *d3_answer_json(const d3_question *q);
double d3_confidence(const double *p, int n);

#endif
