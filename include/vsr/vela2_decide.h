/* vsr/vela2_decide.h: the decision layer of the span-capable family (Vela 2.0 decoder packages,
 * reference-profiles-spans.md sections 3 and 4, reference-runtime.md 1.4, 1.5, 2.1, 2.2, 2.6).
 *
 * Above the model layer (vsr/vela2.h): it validates /v1/decisions requests (span, set, choice,
 * noul and score questions, the presets of calibration.json, typed state parts), lays them out
 * as trees (the shared context, one block per question, windows for long span targets), turns
 * the head logits into answers, spans and thresholds, and answers /v1/classify with the token
 * kind for the span heads.
 *
 * Split like vsr/decision.h: parse on a request thread (no model), run on the model's thread,
 * response on either. */
#ifndef VSR_VELA2_DECIDE_H
#define VSR_VELA2_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsr/decision.h"
#include "vsr/error.h"
#include "vsr/vela2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_v2_decider vsr_v2_decider;
typedef struct vsr_v2_job vsr_v2_job;

/* Opens the decision layer over a loaded model: the package's tokenizer.json and
 * calibration.json (from the package folder). */
vsr_status vsr_v2_decider_open(const vsr_package *pkg, vsr_v2_model *model, vsr_v2_decider **out,
                               vsr_err *err);
/* The same from a folder holding tokenizer.json and calibration.json and the model's info, with
 * no model (layout and answers as pure functions; tests). Such a decider cannot run. */
vsr_status vsr_v2_decider_open_dir(const char *dir, const vsr_v2_info *info, vsr_v2_decider **out,
                                   vsr_err *err);
void vsr_v2_decider_free(vsr_v2_decider *d);
int64_t vsr_v2_decider_max_input_tokens(const vsr_v2_decider *d);
bool vsr_v2_decider_has_broad_head(const vsr_v2_decider *d);
/* The presets calibration.json defines, in PRESETS order ("pii", "halu", "relevance"). */
int vsr_v2_decider_presets(const vsr_v2_decider *d, const char **names, int max);

/* ---- /v1/decisions ---- */
vsr_v2_job *vsr_v2_parse(const vsr_v2_decider *d, const char *body, size_t len, const char *served_name,
                         vsr_http_error *herr);
int64_t vsr_v2_job_tokens(const vsr_v2_job *j);
double vsr_v2_job_deadline_ms(const vsr_v2_job *j);
bool vsr_v2_job_return_meta(const vsr_v2_job *j);
/* Runs every tree of the job (cancel polled between trees). */
vsr_status vsr_v2_run(vsr_v2_decider *d, vsr_v2_job *j, const volatile int *cancel, vsr_forward_cb on_forward,
                      void *cb_ctx, vsr_err *err);
/* Stepwise running (the server's scheduler): the same forwards as vsr_v2_run, one tree per call.
 * trees_left counts the trees not yet run (0: the job is answered); next_tree_tokens is the
 * tokens the next tree forwards (0 when it runs nothing); run_tree runs the next tree and answers
 * its request (state) once that request's last tree has run. */
int vsr_v2_trees_left(const vsr_v2_job *j);
int64_t vsr_v2_next_tree_tokens(const vsr_v2_job *j);
vsr_status vsr_v2_run_tree(vsr_v2_decider *d, vsr_v2_job *j, vsr_forward_cb on_forward, void *cb_ctx,
                           vsr_err *err);
/* The trees of a parsed job (tests, render): calls fn per tree with its blocks. */
void vsr_v2_job_trees(const vsr_v2_job *j, void (*fn)(void *ctx, const vsr_v2_tree *t), void *ctx);
/* Feeds logits to the job's blocks as the model would (tests: answers as a pure function of
 * logits). fill(ctx, tree index, block index, block) writes the block's out arrays. Then the
 * job is answered as after vsr_v2_run. */
vsr_status vsr_v2_run_with(vsr_v2_decider *d, vsr_v2_job *j,
                           void (*fill)(void *ctx, int tree, int block, vsr_v2_block *b), void *ctx,
                           vsr_err *err);
void vsr_v2_expire(vsr_v2_job *j);
void vsr_v2_outcomes(const vsr_v2_job *j, void (*fn)(void *ctx, const char *type, const char *outcome),
                     void *ctx);
char *vsr_v2_response(const vsr_v2_job *j, const vsr_decision_meta *meta);
void vsr_v2_job_free(vsr_v2_job *j);

/* ---- /v1/classify (token kind over the span heads) ---- */
typedef struct vsr_v2_classify vsr_v2_classify;
vsr_v2_classify *vsr_v2_classify_parse(const vsr_v2_decider *d, const char *body, size_t len,
                                       const char *served_name, vsr_http_error *herr);
int64_t vsr_v2_classify_tokens(const vsr_v2_classify *c);
vsr_status vsr_v2_classify_run(vsr_v2_decider *d, vsr_v2_classify *c, const volatile int *cancel,
                               vsr_err *err);
char *vsr_v2_classify_response(const vsr_v2_classify *c, const vsr_decision_meta *meta);
/* The classify request's work as a job (one request per input; the scheduler runs its trees with
 * vsr_v2_run_tree, expires it with vsr_v2_expire); owned by the classify. */
vsr_v2_job *vsr_v2_classify_job(vsr_v2_classify *c);
double vsr_v2_classify_deadline_ms(const vsr_v2_classify *c);
/* The heads /v1/classify offers: the package's span presets ("pii": text inputs, "halu": grounded
 * inputs), in that order; returns their count (names may be NULL). */
int vsr_v2_classify_heads(const vsr_v2_decider *d, const char **names, int max);
/* The model card's `heads` array (a jansson json_t*, owned by the caller). */
struct json_t;
struct json_t *vsr_v2_classify_heads_json(const vsr_v2_decider *d);

void vsr_v2_classify_free(vsr_v2_classify *c);

/* ---- golden self-check (the family's golden question set, section 3.1) ---- */
const char *vsr_v2_golden_request(void);
vsr_status vsr_v2_golden_check(vsr_v2_decider *d, const char *recorded, const char *device_class, double tol,
                               vsr_golden_report *out, vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
