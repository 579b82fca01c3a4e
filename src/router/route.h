/* The router's routing logic, free of I/O (issue #21): what to ask, how the answers decide.
 *
 * A config snapshot is compiled once into an rt_table: the decisions in priority order, the
 * questions every decision needs (asked of the decision model in ONE /v1/decisions call) and
 * the span signals (pii, hallucination) grouped by the deployment bound to them (one call per
 * deployment, preset questions). A request's answers (rt_signals) are then evaluated with
 * three-valued logic: a condition is true, false or unknown (the call failed, the deployment
 * had no ready replica, or the item answered an error). AND: any false -> false, else any
 * unknown -> unknown. OR: any true -> true, else any unknown -> unknown. The first decision in
 * priority order that is true wins; an unknown decision with on_unknown: fail_request fails the
 * request (a higher-priority route could not be ruled out); no_match skips it. */
#ifndef VSR_ROUTER_ROUTE_H
#define VSR_ROUTER_ROUTE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "vsr/router.h"

typedef enum rt_tri { RT_FALSE = 0, RT_TRUE = 1, RT_UNKNOWN = 2 } rt_tri;

enum { RT_SIG_PII, RT_SIG_HALU, RT_N_SIGNALS };

/* One span call: the deployment bound to one or both span signals and its preset questions. */
typedef struct rt_span_call {
    const char *deployment;
    bool signal[RT_N_SIGNALS]; /* which signals this call answers */
    json_t *questions;         /* {"pii":{"preset":"pii","over":"request"}, "halu":{"preset":"halu"}} */
} rt_span_call;

typedef struct rt_table {
    const vsr_router_config *cfg;
    int *order;          /* decision indices, priority descending, ties in config order */
    json_t *questions;   /* {id: question} for the decision model; NULL when no decision asks one */
    int n_span_calls;
    rt_span_call span_calls[RT_N_SIGNALS];
    const char **used;   /* deployment keys the router calls (decision model, bindings) */
    int n_used;
} rt_table;

/* NULL only when out of memory. The config must outlive the table. */
rt_table *rt_table_build(const vsr_router_config *c);
void rt_table_free(rt_table *t);

/* The answers gathered for one request. `decision` is the decision model's response body
 * (NULL: unknown, `decision_why` says why). `span[i]` is the response of the call answering
 * signal i (NULL: unknown, `span_why[i]`). Not owned. */
typedef struct rt_signals {
    const json_t *decision;
    const char *decision_why;
    const json_t *span[RT_N_SIGNALS];
    const char *span_why[RT_N_SIGNALS];
} rt_signals;

/* The question id under which signal i is asked ("pii", "halu"). */
const char *rt_signal_qid(int signal);
/* Signal index of a condition's signal name, -1 when none. */
int rt_signal_index(const char *name);

rt_tri rt_condition_eval(const vsr_rt_condition *q, const rt_signals *s);
rt_tri rt_decision_eval(const vsr_rt_decision *d, const rt_signals *s);

typedef struct rt_choice {
    int decision;       /* index in cfg->decisions; -1 when none matched */
    const char *model;  /* providers.models name to call; NULL with fail set */
    bool fail;          /* the request fails: `why` */
    int status;         /* HTTP status when fail */
    char code[32];
    char why[768];
} rt_choice;

void rt_route(const rt_table *t, const rt_signals *s, rt_choice *out);

/* The backend of `m` for a uniform draw u in [0,1): cumulative weights, weight 0 never picked.
 * -1 when no backend has a positive weight. */
int rt_pick_backend(const vsr_rt_model *m, double u);

const vsr_rt_model *rt_find_model(const vsr_router_config *c, const char *name);

/* The decision model's state for an OpenAI chat request body: the conversation, as an array of
 * {role, content} with content as text (text parts joined by "\n"). NULL with `err` on a body
 * that is not a chat request (messages missing, not an array, a message without role). */
json_t *rt_chat_state(const json_t *body, char *err, size_t n);
/* The span deployments' state: {"request": last user turn, "source": system and tool turns,
 * "answer": the last assistant turn}, keys present only when non-empty. */
json_t *rt_span_state(const json_t *body);

/* The /v1/decisions request body for a state and questions (both borrowed). */
char *rt_decisions_body(const char *model, const json_t *state, const json_t *questions, int deadline_ms);

/* A small seeded generator (splitmix64) for the weighted pick; thread-safe. */
void rt_rng_seed(unsigned long long seed);
double rt_rng_uniform(void);

#endif
