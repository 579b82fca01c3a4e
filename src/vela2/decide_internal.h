/* Internal structures of the vela2 decision layer (src/vela2/: calibration.c, request.c,
 * layout.c, answers.c, classify.c). */
#ifndef VSR_VELA2_DECIDE_INTERNAL_H
#define VSR_VELA2_DECIDE_INTERNAL_H

#include <jansson.h>

#include "decision/request_common.h"
#include "vela2/words.h"
#include "vsr/tokenizer.h"
#include "vsr/vela2_decide.h"

/* ---- calibration.json (section 3.8 "calibration.json keys read") ---- */
typedef struct v2_calibration {
    json_t *raw;
    double t_choice, t_score, t_set, t_span;
    json_t *thresholds;          /* {"set:*", "span:*", ...} */
    char **pii_types;
    int n_pii;
    int n_anchors;               /* pii_length_rule.anchors */
    double anchor_tokens[32], anchor_threshold[32];
    int n_buckets;               /* pii_buckets (older packages) */
    char bucket_name[16][32];
    double bucket_max[16], bucket_threshold[16];
    bool has_gate;
    double gate_k, gate_t_sparse, gate_probe;
    const json_t *schema[3];     /* pii_schema, halu_schema, relevance_schema (borrowed) */
    bool has_broad;
    double broad_temperature, broad_threshold;
    const json_t *router_label_sets; /* borrowed array or NULL */
    bool has_noul_cal, noul_default;
    double noul_t, noul_b;
} v2_calibration;

vsr_status v2_calibration_load(const char *path, v2_calibration *c, vsr_err *err);
void v2_calibration_free(v2_calibration *c);
bool v2_is_pii_type(const v2_calibration *c, const char *label);

/* ---- questions ---- */
typedef enum v2_kind { V2_CHOICE, V2_NOUL, V2_SCORE, V2_SET, V2_SPAN, V2_KIND_COUNT } v2_kind;
extern const char *const v2_kind_names[V2_KIND_COUNT];
enum { V2_USER, V2_CONTEXT, V2_ANSWER, V2_ROLES };
extern const char *const v2_role_names[V2_ROLES];
enum { V2_HEAD_NONE = -1 };

typedef struct v2_question {
    char *id;
    int kind;                /* v2_kind, -1 when the type itself was invalid */
    char *text;              /* instructions as model text */
    int n_over, over[V2_ROLES]; /* the parts it reads, in state order */
    int n_opt;
    char **names, **descs;   /* rendered options or labels (name, description) */
    char **keys;             /* answer keys: choice names; noul false/true; score "0".."n-1"; labels */
    char **legend;           /* score: level text */
    char *key;               /* calibration key: the preset or the question id */
    bool abstain;
    double threshold;        /* the request's, NAN when none */
    int head;                /* requested head: V2_HEAD_NONE, VSR_V2_HEAD_ROUTER, VSR_V2_HEAD_BROAD */
    bool has_range;          /* over names one key of a shared part: spans clipped to it */
    int32_t range_start, range_end;
    bool truncate, full_input;
    /* dispatch (span) */
    int routed;              /* VSR_V2_HEAD_ROUTER or VSR_V2_HEAD_BROAD */
    char *alias;             /* the caller's halu label when rendered as "unsupported" */
    /* outcome */
    const char *err_code;
    char *err_msg;
    bool answered;
    double *probs;           /* candidate: softmax/sigmoid per option (+ abstain last for choice/noul) */
    double applied;          /* set/span threshold applied */
    v2_span *spans;
    int n_spans;
    double noul;             /* span: the highest word probability */
    int row;
} v2_question;

/* ---- parts and trees ---- */
typedef struct v2_part {
    int role;
    char *text;
    int32_t *ids;            /* the whole part, tokenized on its own */
    int n_ids;
    bool with_words;         /* a span question reads it */
    v2_text t;
    v2_range *tok;           /* token code point offsets */
    v2_range *words;
    int32_t *first;
    int n_words;
} v2_part;

typedef struct v2_field {
    char *key;
    int role;
    int32_t start, end;      /* code points in the part */
} v2_field;

typedef struct v2_blk {
    vsr_v2_block b;          /* ids, positions and out arrays owned here */
    int q;                   /* question index */
    bool read;               /* false: the span block that windows replace (not run) */
    int32_t *word_index;     /* span: each block word's index among the part's words */
} v2_blk;

typedef struct v2_tree {
    int32_t *ctx;
    int n_ctx;
    int n_blocks;
    v2_blk *blocks;
    int row;
    bool window;
} v2_tree;

typedef struct v2_request {
    char *name;              /* NULL: the main request */
    int n_parts;
    v2_part parts[V2_ROLES];
    int n_fields;
    v2_field *fields;
    int n_q;
    v2_question *q;
    int n_trees;
    v2_tree *trees;
    int64_t tokens;          /* usage.input_tokens: the rows as rendered, windows included */
    char *err;               /* request-level state error (400), set while parsing */
} v2_request;

struct vsr_v2_job {
    char *model;
    int n_req;
    v2_request *req;
    double deadline_ms;
    bool return_meta;
    bool broad;              /* the model has a broad head: span_heads are reported */
    int next_req, next_tree; /* stepwise running (vsr_v2_run_tree): the next tree to run */
};

struct vsr_v2_decider {
    char dir[4096];
    vsr_v2_model *model;     /* NULL: layout and answers only */
    vsr_v2_info info;
    vsr_tokenizer *tok;
    v2_calibration cal;
    bool broad;              /* a broad head is loaded and calibrated */
    int n_presets;
    const char *presets[3];
};

/* request.c */
bool v2_parse_request(const vsr_v2_decider *d, v2_request *r, const json_t *o, const char *where,
                      vsr_http_error *h);
void v2_request_free(v2_request *r);
char *v2_canonical(const json_t *v);    /* sort_keys, compact, non-ASCII as is */
char *v2_content_text(const json_t *v); /* strings as they are, anything else canonical */
int v2_part_index(const v2_request *r, int role);
void v2_qfail(v2_question *q, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* layout.c */
vsr_status v2_tokenize(const vsr_v2_decider *d, const char *s, int32_t **ids, int *n, vsr_err *err);
/* Tokenizes the parts (with offsets and words where a span reads them) and builds the trees. */
bool v2_layout(const vsr_v2_decider *d, v2_request *r, vsr_http_error *h);
void v2_trees_free(v2_request *r);

/* answers.c */
void v2_answer_request(const vsr_v2_decider *d, v2_request *r);
json_t *v2_request_json(const v2_request *r, const char *model, bool broad);

#endif
