/* What the request parsers of both decision families check and write alike: /v1/decisions of
 * Decision 3.0 (src/decision/request.c, which defines these) and of Vela 2.0
 * (src/vela2/decide.c), and /v1/classify's token kind (src/vela2/classify.c). The messages are
 * the reference's; tests compare them byte for byte. */
#ifndef VSR_DECISION_REQUEST_COMMON_H
#define VSR_DECISION_REQUEST_COMMON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "vsr/decision.h"

/* Fills h (when not NULL) with a request-level failure. */
void vsr_http_fail(vsr_http_error *h, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The body as JSON (any value; duplicate keys refused), or NULL with a 400. */
json_t *vsr_request_body(const char *body, size_t len, vsr_http_error *h);
/* The body's optional `model`: a string, and the served one when served_name is set (else a
 * 404). *model is then a copy of the name the response reports: the request's, else
 * served_name, else "". */
bool vsr_request_model(const json_t *root, const char *served_name, char **model, vsr_http_error *h);
/* options.deadline_ms (NULL or null: left as it is) and options.return_meta. */
bool vsr_option_deadline_ms(const json_t *v, double *deadline_ms, vsr_http_error *h);
bool vsr_option_return_meta(const json_t *v, bool *return_meta, vsr_http_error *h);
/* The response's `meta` object; numerics is "exact" under the exact profile, else
 * "approximate". */
json_t *vsr_decision_meta_json(const vsr_decision_meta *meta, const char *model, const char *profile);

#endif
