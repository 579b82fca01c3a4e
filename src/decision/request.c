/* /v1/decisions requests: validation (reference-runtime.md 1.2, 1.4, 2.1), rendering,
 * tokenizing, running the forwards and writing the response. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/json_util.h"
#include "decision/decision_impl.h"
#include "decision/request_common.h"

#define D3_MAX_QUESTIONS 256
#define D3_MAX_STATES 64

static const char *const qtype_names[D3_QTYPE_COUNT] = {"choice", "noul", "score"};
/* Fields each type takes (decision3 reads no extras). */
static const char *const qtype_fields[D3_QTYPE_COUNT][5] = {
    {"type", "instructions", "criteria", "choices", NULL},
    {"type", "instructions", "criteria", "choices", NULL},
    {"type", "instructions", "criteria", "levels", NULL},
};
static const char *const qtype_ordered[D3_QTYPE_COUNT] = {"choices", "choices", "levels"};

void vsr_http_fail(vsr_http_error *h, int status, const char *code, const char *fmt, ...) {
    if (!h) return;
    h->status = status;
    h->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->message, sizeof h->message, fmt, ap);
    va_end(ap);
}

json_t *vsr_request_body(const char *body, size_t len, vsr_http_error *h) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root)
        vsr_http_fail(h, 400, "invalid_request", "the body is not valid JSON: %s (line %d, column %d)", je.text,
                      je.line, je.column);
    return root;
}

bool vsr_request_model(const json_t *root, const char *served_name, char **model, vsr_http_error *h) {
    const json_t *jm = json_object_get(root, "model");
    if (jm && !json_is_null(jm)) {
        if (!json_is_string(jm)) {
            vsr_http_fail(h, 400, "invalid_request", "model must be a string");
            return false;
        }
        if (served_name && strcmp(json_string_value(jm), served_name)) {
            vsr_http_fail(h, 404, "model_not_found", "model '%s' is not served here (this worker serves '%s')",
                          json_string_value(jm), served_name);
            return false;
        }
    }
    *model = strdup(jm && json_is_string(jm) ? json_string_value(jm) : served_name ? served_name : "");
    return true;
}

bool vsr_option_deadline_ms(const json_t *v, double *deadline_ms, vsr_http_error *h) {
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v))) {
        vsr_http_fail(h, 400, "invalid_request", "options.deadline_ms must be a number greater than 0");
        return false;
    }
    *deadline_ms = json_number_value(v);
    return true;
}

bool vsr_option_return_meta(const json_t *v, bool *return_meta, vsr_http_error *h) {
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        vsr_http_fail(h, 400, "invalid_request", "options.return_meta must be true or false");
        return false;
    }
    *return_meta = json_is_true(v);
    return true;
}

json_t *vsr_decision_meta_json(const vsr_decision_meta *meta, const char *model, const char *profile) {
    json_t *m = json_object();
    json_object_set_new(m, "model_id", json_string(meta->model_id ? meta->model_id : model));
    if (meta->revision) json_object_set_new(m, "revision", json_string(meta->revision));
    if (meta->model_sha256) json_object_set_new(m, "model_sha256", json_string(meta->model_sha256));
    json_object_set_new(m, "profile", json_string(profile));
    json_object_set_new(m, "numerics", json_string(strcmp(profile, "exact") ? "approximate" : "exact"));
    json_object_set_new(m, "engine", json_string("native"));
    if (meta->accelerator) json_object_set_new(m, "accelerator", json_string(meta->accelerator));
    if (meta->device) json_object_set_new(m, "device", json_string(meta->device));
    json_object_set_new(m, "queue_ms", json_real(meta->queue_ms));
    json_object_set_new(m, "compute_ms", json_real(meta->compute_ms));
    return m;
}

/* Python's str.isspace() code points (what `not s.strip()` strips). */
static bool py_space(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

/* Blank as Python's `not s.strip()`: empty or only whitespace (s is valid UTF-8: jansson
 * refuses anything else). */
static bool is_blank(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        unsigned cp = *u;
        int len = cp < 0x80 ? 1 : cp < 0xe0 ? 2 : cp < 0xf0 ? 3 : 4;
        if (len > 1) {
            cp &= 0x3fu >> (len - 1);
            for (int i = 1; i < len; i++) {
                if (!u[i]) return false;
                cp = (cp << 6) | (u[i] & 0x3fu);
            }
        }
        if (!py_space(cp)) return false;
        u += len;
    }
    return true;
}

/* Non-blank text, an object or an array. */
static bool valid_text_value(const json_t *v) {
    if (json_is_string(v)) return !is_blank(json_string_value(v));
    return json_is_object(v) || json_is_array(v);
}

static void q_fail(d3_question *q, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void q_fail(d3_question *q, const char *code, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    q->err_code = code;
    free(q->err_msg);
    q->err_msg = strdup(buf);
}

static void q_clear(d3_question *q) {
    for (int i = 0; i < q->n_opt; i++) {
        if (q->keys) free(q->keys[i]);
        if (q->legend) free(q->legend[i]);
    }
    free(q->keys);
    free(q->legend);
    free(q->id);
    free(q->prompt);
    free(q->ids);
    free(q->err_msg);
}

/* Python-style list of names: ['a', 'b'] */
static void name_list(char *out, size_t n, const char *const *names, int count) {
    size_t len = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < count && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s'%s'", i ? ", " : "", names[i]);
    if (len < n) snprintf(out + len, n - len, "]");
}

static bool contains_pad(const char *s) {
    return s && (strstr(s, "<|image_pad|>") || strstr(s, "<|video_pad|>"));
}

/* Collects option keys and texts. Returns false with q failed. texts are malloc'd. */
static bool q_options(d3_question *q, const json_t *jq, char ***texts_out) {
    int t = q->type;
    const json_t *crit = json_object_get(jq, "criteria");
    const json_t *ord = json_object_get(jq, qtype_ordered[t]);
    if (crit && ord) {
        q_fail(q, "invalid_question", "use criteria or %s, not both", qtype_ordered[t]);
        return false;
    }
    int n = 0;
    char **keys = NULL, **texts = NULL, **legend = NULL;
#define OPT_FAIL(...)                                                                              \
    do {                                                                                           \
        q_fail(q, "invalid_question", __VA_ARGS__);                                                \
        goto fail;                                                                                 \
    } while (0)
    if (t == D3_CHOICE) {
        if (crit) {
            if (!json_is_object(crit) || json_object_size(crit) < 2 || json_object_size(crit) > VSR_D3_CODES)
                OPT_FAIL("criteria must name 2 to 255 options");
            n = (int)json_object_size(crit);
        } else if (ord) {
            if (!json_is_array(ord) || json_array_size(ord) < 2 || json_array_size(ord) > VSR_D3_CODES)
                OPT_FAIL("choices must list 2 to 255 options");
            n = (int)json_array_size(ord);
        } else {
            OPT_FAIL("criteria must name 2 to 255 options");
        }
    } else if (t == D3_NOUL) {
        n = 2;
        if (crit && !json_is_object(crit)) OPT_FAIL("noul criteria may contain only false and true");
        if (ord && (!json_is_array(ord) || json_array_size(ord) < 1 || json_array_size(ord) > 2))
            OPT_FAIL("noul choices may contain only false and true");
    } else {
        const json_t *lv = crit ? crit : ord;
        if (!lv) OPT_FAIL("criteria must list 2 to 10 levels");
        if (!json_is_array(lv) || json_array_size(lv) < 2 || json_array_size(lv) > 10)
            OPT_FAIL("%s must list 2 to 10 levels", crit ? "criteria" : "levels");
        n = (int)json_array_size(lv);
    }
    keys = calloc((size_t)n, sizeof *keys);
    texts = calloc((size_t)n, sizeof *texts);
    if (t == D3_SCORE) legend = calloc((size_t)n, sizeof *legend);
    if (!keys || !texts || (t == D3_SCORE && !legend)) OPT_FAIL("out of memory");
    q->n_opt = n;
    q->keys = keys;
    q->legend = legend;

    if (t == D3_CHOICE) {
        for (int i = 0; i < n; i++) {
            const char *k;
            const json_t *desc;
            if (crit) {
                void *it = json_object_iter((json_t *)crit);
                for (int s = 0; s < i; s++) it = json_object_iter_next((json_t *)crit, it);
                k = json_object_iter_key(it);
                desc = json_object_iter_value(it);
            } else {
                const json_t *e = json_array_get(ord, (size_t)i);
                if (!json_is_object(e)) OPT_FAIL("choices entries must be objects with key and description");
                const char *bad = NULL;
                const char *kk;
                json_t *vv;
                json_object_foreach((json_t *)e, kk, vv) if (strcmp(kk, "key") && strcmp(kk, "description")) bad = kk;
                if (bad) OPT_FAIL("choices entries take only key and description, not '%s'", bad);
                const json_t *jk = json_object_get(e, "key");
                if (!json_is_string(jk)) OPT_FAIL("choices keys must be unique nonempty strings");
                k = json_string_value(jk);
                desc = json_object_get(e, "description");
            }
            if (!*k || is_blank(k)) OPT_FAIL("choices keys must be unique nonempty strings");
            for (int j = 0; j < i; j++)
                if (!strcmp(keys[j], k)) OPT_FAIL("choices keys must be unique nonempty strings");
            keys[i] = strdup(k);
            if (!desc || json_is_null(desc)) {
                texts[i] = strdup(k);
            } else {
                if (!valid_text_value(desc))
                    OPT_FAIL("option '%s': a description must be non-blank text, an object, an array or null", k);
                char *d = d3_value_text(desc);
                size_t len = strlen(k) + strlen(d) + 3;
                texts[i] = malloc(len);
                if (texts[i]) snprintf(texts[i], len, "%s: %s", k, d);
                free(d);
            }
        }
    } else if (t == D3_NOUL) {
        static const char *const nk[2] = {"false", "true"};
        static const char *const ndef[2] = {"No / false", "Yes / true"};
        const json_t *desc[2] = {NULL, NULL};
        if (crit) {
            const char *k;
            json_t *v;
            json_object_foreach((json_t *)crit, k, v) {
                int idx = !strcmp(k, "false") ? 0 : !strcmp(k, "true") ? 1 : -1;
                if (idx < 0) OPT_FAIL("noul criteria may contain only false and true");
                desc[idx] = v;
            }
        } else if (ord) {
            for (size_t i = 0; i < json_array_size(ord); i++) {
                const json_t *e = json_array_get(ord, i);
                const json_t *jk = json_is_object(e) ? json_object_get(e, "key") : NULL;
                const char *k = json_is_string(jk) ? json_string_value(jk) : "";
                int idx = !strcmp(k, "false") ? 0 : !strcmp(k, "true") ? 1 : -1;
                if (idx < 0 || desc[idx]) OPT_FAIL("noul choices may contain only false and true");
                const json_t *d = json_object_get(e, "description");
                desc[idx] = d ? d : json_null();
            }
        }
        for (int i = 0; i < 2; i++) {
            keys[i] = strdup(nk[i]);
            if (desc[i] && !json_is_null(desc[i]) && !valid_text_value(desc[i]))
                OPT_FAIL("noul %s: a description must be non-blank text, an object or an array", nk[i]);
            /* describe(criteria.false or "No / false"): a falsy description ({} or []) takes
             * the default too */
            texts[i] = desc[i] && !d3_is_falsy(desc[i]) ? d3_value_text(desc[i]) : strdup(ndef[i]);
        }
    } else {
        const json_t *lv = crit ? crit : ord;
        for (int i = 0; i < n; i++) {
            const json_t *v = json_array_get(lv, (size_t)i);
            if (!valid_text_value(v)) OPT_FAIL("score levels must be distinct and non-empty");
            char key[16];
            snprintf(key, sizeof key, "%d", i);
            keys[i] = strdup(key);
            texts[i] = d3_value_text(v);
            legend[i] = json_is_string(v) ? strdup(json_string_value(v))
                                          : vsr_json_dumps_python(v, true, false, true);
            for (int j = 0; j < i; j++)
                if (texts[j] && texts[i] && !strcmp(texts[j], texts[i]))
                    OPT_FAIL("score levels must be distinct and non-empty");
        }
    }
    for (int i = 0; i < n; i++)
        if (!keys[i] || !texts[i] || (legend && !legend[i])) OPT_FAIL("out of memory");
    *texts_out = texts;
    return true;
fail:
    if (texts)
        for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    return false;
#undef OPT_FAIL
}

/* The request's shared head (system turn and state), rendered and tokenized once, on its first
 * valid question: a request's state costs one tokenization whatever its number of questions.
 * Returns NULL when it is ready, else the item error message (r->head_err) for every question. */
static const char *request_head(const vsr_decider *d, d3_request *r, const char *state_text) {
    if (r->head || r->head_err) return r->head_err;
    r->head = d3_render_head(state_text);
    if (!r->head) return r->head_err = strdup("out of memory rendering the prompt");
    vsr_err e = {0};
    if (vsr_tokenizer_encode(d->tok, r->head, strlen(r->head), &r->head_ids, &r->n_head, &e) != VSR_OK)
        return r->head_err = strdup(e.msg[0] ? e.msg : "the state could not be tokenized");
    return NULL;
}

/* Validates, renders and tokenizes one question. Item errors stay in q. */
static void q_build(const vsr_decider *d, d3_request *r, d3_question *q, const char *id, const json_t *jq,
                    const char *state_text) {
    q->id = strdup(id);
    q->type = -1;
    if (!json_is_object(jq)) {
        q_fail(q, "invalid_question", "a question must be an object");
        return;
    }
    const json_t *jt = json_object_get(jq, "type");
    for (int t = 0; t < D3_QTYPE_COUNT; t++)
        if (json_is_string(jt) && !strcmp(json_string_value(jt), qtype_names[t])) q->type = t;
    if (q->type < 0) {
        q_fail(q, "invalid_question", "type must be one of ['choice', 'noul', 'score']");
        return;
    }
    const char *unknown[16];
    int n_unknown = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)jq, k, v) {
        bool ok = false;
        for (const char *const *f = qtype_fields[q->type]; *f; f++)
            if (!strcmp(*f, k)) ok = true;
        if (!ok && n_unknown < 16) unknown[n_unknown++] = k;
    }
    if (n_unknown) {
        char list[256];
        name_list(list, sizeof list, unknown, n_unknown);
        q_fail(q, "invalid_question", "%s questions do not take %s", qtype_names[q->type], list);
        return;
    }
    const json_t *ji = json_object_get(jq, "instructions");
    if (!ji || json_is_null(ji)) {
        q_fail(q, "invalid_question", "instructions is required");
        return;
    }
    if (json_is_string(ji) && is_blank(json_string_value(ji))) {
        q_fail(q, "invalid_question", "instructions must not be empty or whitespace");
        return;
    }
    if (!valid_text_value(ji)) {
        q_fail(q, "invalid_question", "instructions must be non-blank text, an object or an array");
        return;
    }
    char **texts = NULL;
    if (!q_options(q, jq, &texts)) return;
    char *instr = d3_instructions_text(ji);
    bool pad = contains_pad(instr) || r->state_has_pad;
    for (int i = 0; i < q->n_opt && !pad; i++) pad = contains_pad(texts[i]);
    if (!instr) {
        q_fail(q, "invalid_question", "out of memory rendering the prompt");
    } else if (pad) {
        q_fail(q, "invalid_question",
               "the state or question contains a literal <|image_pad|> or <|video_pad|> token");
    } else {
        q->prompt = d3_render_tail(instr, (const char *const *)d->codes, q->n_opt, texts);
    }
    free(instr);
    for (int i = 0; i < q->n_opt; i++) free(texts[i]);
    free(texts);
    if (q->err_code) return;
    if (!q->prompt) {
        q_fail(q, "invalid_question", "out of memory rendering the prompt");
        return;
    }
    const char *herr = request_head(d, r, state_text);
    if (herr) {
        q_fail(q, "invalid_input", "%s", herr);
        return;
    }
    q->head = r->head;
    q->head_ids = r->head_ids;
    q->n_head = r->n_head;
    if ((int64_t)r->n_head >= d->max_input_tokens) { /* the tail adds at least one token */
        q_fail(q, "max_length_exceeded",
               "the prompt of question '%s' has more than %zu tokens (the system turn and the state alone), "
               "over the maximum context length of %lld tokens; nothing was truncated",
               id, r->n_head, (long long)d->max_input_tokens);
        return;
    }
    vsr_err e = {0};
    size_t n_tail = 0;
    if (vsr_tokenizer_encode(d->tok, q->prompt, strlen(q->prompt), &q->ids, &n_tail, &e) != VSR_OK) {
        q_fail(q, "invalid_input", "%s", e.msg);
        return;
    }
    q->n_ids = r->n_head + n_tail;
    if ((int64_t)q->n_ids > d->max_input_tokens) {
        q_fail(q, "max_length_exceeded",
               "the prompt of question '%s' has %zu tokens, over the maximum context length of %lld "
               "tokens; nothing was truncated",
               id, q->n_ids, (long long)d->max_input_tokens);
        free(q->ids);
        q->ids = NULL;
        q->n_ids = 0;
    }
}

static const char *const top_fields[] = {"model", "state", "questions", "images", "videos",
                                         "states", "options", NULL};
static const char *const state_fields[] = {"state", "questions", "images", NULL};
static const char *const option_fields[] = {"deadline_ms", "profile", "return_meta", "max_tokens", NULL};

static bool check_fields(const json_t *o, const char *const *allowed, const char *where,
                         vsr_http_error *h) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, k)) ok = true;
        if (!ok) {
            vsr_http_fail(h, 400, "invalid_request", "%sunknown field '%s'", where, k);
            return false;
        }
    }
    return true;
}

/* Images and videos: this runtime is text-only. A package without a vision tower has no such
 * modality at all; one with a tower (the published packages) has it verified but not loaded. */
static bool media_check(const vsr_decider *d, const json_t *o, const char *where, vsr_http_error *h) {
    static const char *const media[] = {"images", "videos"};
    for (int m = 0; m < 2; m++) {
        const json_t *v = json_object_get(o, media[m]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_array(v)) {
            vsr_http_fail(h, 400, "invalid_request", "%s%s must be an array of data URLs", where, media[m]);
            return false;
        }
        if (json_array_size(v) > 0) {
            if (d->pkg && d->pkg->config.has_vision)
                vsr_http_fail(h, 400, "invalid_request",
                              "%sthis model has no %s modality here: vllm-srun answers text only; the package's "
                              "vision tower is verified but not loaded", where, m ? "video" : "image");
            else
                vsr_http_fail(h, 400, "invalid_request",
                              "%sthis model has no %s modality: its package carries no vision tower", where,
                              m ? "video" : "image");
            return false;
        }
    }
    return true;
}

/* Builds one request (main or a `states` entry). */
static bool build_request(const vsr_decider *d, d3_request *r, const json_t *o, const char *where,
                          vsr_http_error *h) {
    if (!media_check(d, o, where, h)) return false;
    const json_t *js = json_object_get(o, "state");
    if (!js) {
        vsr_http_fail(h, 400, "invalid_request", "%sstate is required", where);
        return false;
    }
    if (!json_is_string(js) && !json_is_object(js) && !json_is_array(js)) {
        vsr_http_fail(h, 400, "invalid_request", "%sstate must be text, an object or an array", where);
        return false;
    }
    const json_t *jq = json_object_get(o, "questions");
    if (!json_is_object(jq) || json_object_size(jq) == 0) {
        vsr_http_fail(h, 400, "invalid_request", "%squestions must be an object with at least one question",
                      where);
        return false;
    }
    if (json_object_size(jq) > D3_MAX_QUESTIONS) {
        vsr_http_fail(h, 400, "invalid_request", "%squestions holds %zu questions; at most %d are allowed",
                      where, json_object_size(jq), D3_MAX_QUESTIONS);
        return false;
    }
    char *state_text = d3_state_text(js);
    if (!state_text) {
        vsr_http_fail(h, 500, "internal_error", "out of memory");
        return false;
    }
    r->state_has_pad = contains_pad(state_text);
    r->n_q = (int)json_object_size(jq);
    r->q = calloc((size_t)r->n_q, sizeof *r->q);
    if (!r->q) {
        free(state_text);
        vsr_http_fail(h, 500, "internal_error", "out of memory");
        return false;
    }
    int i = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)jq, k, v) {
        q_build(d, r, &r->q[i], k, v, state_text);
        r->tokens += (int64_t)r->q[i].n_ids;
        i++;
    }
    free(state_text);
    return true;
}

static int count_valid(const vsr_decision_job *j) {
    int n = 0;
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) n += j->req[r].q[i].err_code == NULL;
    return n;
}

vsr_decision_job *vsr_decision_parse(const vsr_decider *d, const char *body, size_t len,
                                     const char *served_name, vsr_http_error *herr) {
    json_t *root = vsr_request_body(body, len, herr);
    if (!root) return NULL;
    vsr_decision_job *j = calloc(1, sizeof *j);
    if (!j) {
        json_decref(root);
        vsr_http_fail(herr, 500, "internal_error", "out of memory");
        return NULL;
    }
    snprintf(j->profile, sizeof j->profile, "exact");
    bool ok = false;
    if (!json_is_object(root)) {
        vsr_http_fail(herr, 400, "invalid_request", "the body must be a JSON object");
        goto done;
    }
    if (!check_fields(root, top_fields, "", herr)) goto done;
    if (!vsr_request_model(root, served_name, &j->model, herr)) goto done;
    const json_t *jo = json_object_get(root, "options");
    if (jo && !json_is_null(jo)) {
        if (!json_is_object(jo)) {
            vsr_http_fail(herr, 400, "invalid_request", "options must be an object");
            goto done;
        }
        if (!check_fields(jo, option_fields, "options: ", herr)) goto done;
        if (!vsr_option_deadline_ms(json_object_get(jo, "deadline_ms"), &j->deadline_ms, herr)) goto done;
        const json_t *pr = json_object_get(jo, "profile");
        if (pr && !json_is_null(pr)) {
            const char *p = json_is_string(pr) ? json_string_value(pr) : NULL;
            bool served = p && (!strcmp(p, "exact") || (d->served_profile[0] && !strcmp(p, d->served_profile)));
            if (!served) {
                /* the reference's message: the sorted list of the profiles this model serves */
                if (d->served_profile[0] && strcmp(d->served_profile, "exact"))
                    vsr_http_fail(herr, 400, "invalid_request", "options.profile must be one of ['%s', '%s']",
                                  strcmp(d->served_profile, "exact") < 0 ? d->served_profile : "exact",
                                  strcmp(d->served_profile, "exact") < 0 ? "exact" : d->served_profile);
                else
                    vsr_http_fail(herr, 400, "invalid_request", "options.profile must be one of ['exact']");
                goto done;
            }
            snprintf(j->profile, sizeof j->profile, "%s", p);
        }
        if (!vsr_option_return_meta(json_object_get(jo, "return_meta"), &j->return_meta, herr)) goto done;
        if (json_object_get(jo, "max_tokens")) {
            vsr_http_fail(herr, 400, "invalid_request",
                          "options.max_tokens applies only to models with a scan budget; this model has none");
            goto done;
        }
    }
    const json_t *jss = json_object_get(root, "states");
    size_t n_states = 0;
    if (jss && !json_is_null(jss)) {
        if (!json_is_object(jss)) {
            vsr_http_fail(herr, 400, "invalid_request", "states must be an object of named states");
            goto done;
        }
        n_states = json_object_size(jss);
        if (n_states > D3_MAX_STATES) {
            vsr_http_fail(herr, 400, "invalid_request", "states holds %zu entries; at most %d are allowed",
                          n_states, D3_MAX_STATES);
            goto done;
        }
    }
    j->req = calloc(1 + n_states, sizeof *j->req);
    if (!j->req) {
        vsr_http_fail(herr, 500, "internal_error", "out of memory");
        goto done;
    }
    j->n_req = 1;
    if (!build_request(d, &j->req[0], root, "", herr)) goto done;
    if (n_states) {
        const char *name;
        json_t *so;
        json_object_foreach((json_t *)jss, name, so) {
            char where[160];
            snprintf(where, sizeof where, "states.%.128s: ", name);
            if (!json_is_object(so)) {
                vsr_http_fail(herr, 400, "invalid_request", "%sa state entry must be an object", where);
                goto done;
            }
            if (!check_fields(so, state_fields, where, herr)) goto done;
            d3_request *r = &j->req[j->n_req++];
            r->name = strdup(name);
            if (!build_request(d, r, so, where, herr)) goto done;
        }
    }
    if (count_valid(j) == 0) {
        const d3_question *first = &j->req[0].q[0];
        vsr_http_fail(herr, 400, "invalid_request", "no valid question: %s: %s", first->id,
                      first->err_msg ? first->err_msg : first->err_code);
        goto done;
    }
    ok = true;
done:
    json_decref(root);
    if (!ok) {
        vsr_decision_free(j);
        return NULL;
    }
    return j;
}

int vsr_decision_rows(const vsr_decision_job *j) { return count_valid(j); }

int64_t vsr_decision_tokens(const vsr_decision_job *j) {
    int64_t t = 0;
    for (int r = 0; r < j->n_req; r++) t += j->req[r].tokens;
    return t;
}

double vsr_decision_deadline_ms(const vsr_decision_job *j) { return j->deadline_ms; }
bool vsr_decision_return_meta(const vsr_decision_job *j) { return j->return_meta; }

void vsr_decision_outcomes(const vsr_decision_job *j,
                           void (*fn)(void *ctx, const char *type, const char *outcome), void *ctx) {
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) {
            const d3_question *q = &j->req[r].q[i];
            fn(ctx, q->type >= 0 ? qtype_names[q->type] : "unknown",
               q->err_code ? q->err_code : q->answered ? "answered" : "unanswered");
        }
}

void vsr_decision_foreach(const vsr_decision_job *j,
                          void (*fn)(void *ctx, const vsr_decision_item *item), void *ctx) {
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) {
            const d3_question *q = &j->req[r].q[i];
            char *prompt = q->err_code ? NULL : d3_question_prompt(q);
            int32_t *ids = q->err_code ? NULL : d3_question_ids(q);
            bool oom = !q->err_code && (!prompt || !ids);
            vsr_decision_item it = {.state = j->req[r].name,
                                    .question = q->id,
                                    .prompt = oom ? NULL : prompt,
                                    .ids = oom ? NULL : ids,
                                    .n_ids = q->err_code || oom ? 0 : q->n_ids,
                                    .err_code = oom ? "internal_error" : q->err_code,
                                    .err_msg = oom ? "out of memory rendering the prompt" : q->err_msg};
            fn(ctx, &it);
            free(prompt);
            free(ids);
        }
}

void vsr_decision_expire(vsr_decision_job *j) {
    for (int r = 0; r < j->n_req; r++)
        for (int i = 0; i < j->req[r].n_q; i++) {
            d3_question *q = &j->req[r].q[i];
            if (!q->err_code && !q->answered)
                q_fail(q, "deadline_exceeded", "the deadline passed before this question was run");
        }
}

static json_t *request_json(const d3_request *r, const char *model) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(model));
    json_t *answers = json_object();
    for (int i = 0; i < r->n_q; i++) json_object_set_new(answers, r->q[i].id, d3_answer_json(&r->q[i]));
    json_object_set_new(o, "answers", answers);
    json_t *usage = json_object();
    json_object_set_new(usage, "input_tokens", json_integer(r->tokens));
    json_object_set_new(usage, "output_tokens", json_integer(0));
    json_object_set_new(o, "usage", usage);
    return o;
}

char *vsr_decision_response(const vsr_decision_job *j, const vsr_decision_meta *meta) {
    json_t *o = request_json(&j->req[0], j->model);
    if (j->n_req > 1) {
        json_t *states = json_object();
        for (int r = 1; r < j->n_req; r++)
            json_object_set_new(states, j->req[r].name, request_json(&j->req[r], j->model));
        json_object_set_new(o, "states", states);
    }
    if (j->return_meta && meta) json_object_set_new(o, "meta", vsr_decision_meta_json(meta, j->model, j->profile));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    return s;
}

void vsr_decision_free(vsr_decision_job *j) {
    if (!j) return;
    for (int r = 0; r < j->n_req; r++) {
        for (int i = 0; i < j->req[r].n_q; i++) q_clear(&j->req[r].q[i]);
        free(j->req[r].q);
        free(j->req[r].head);
        free(j->req[r].head_ids);
        free(j->req[r].head_err);
        free(j->req[r].name);
    }
    free(j->req);
    free(j->rows);
    free(j->row_req);
    free(j->row_ord);
    free(j->model);
    free(j);
}
