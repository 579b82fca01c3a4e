/* The decision layer over a loaded model: tokenizer checks at open and the golden
 * self-check (reference-runtime.md 2.4 "Tokenizer", section 5). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "decision/decision_impl.h"
#include "vsr/hash.h"

/* sha256 of the chat templates a Decision 3.0 package may carry (templates.c): the three
 * published ones and the template `vllm-srun fixture` writes. */
extern const char *const vsr_d3_known_templates[];

static bool template_known(const char *sha) {
    for (const char *const *t = vsr_d3_known_templates; *t; t++)
        if (!strcmp(*t, sha)) return true;
    return false;
}

vsr_status vsr_decider_open(const vsr_package *pkg, vsr_model *model, vsr_decider **out,
                            vsr_err *err) {
    if (pkg->family != VSR_FAMILY_DECISION3)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: the decisions surface needs a Decision 3.0 package, not %s",
                           pkg->path, vsr_family_name(pkg->family));
    vsr_decider *d = calloc(1, sizeof *d);
    if (!d) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    d->pkg = pkg;
    d->model = model;
    d->temperature = pkg->decision.temperature > 0 ? pkg->decision.temperature : 1.0;
    d->max_input_tokens = pkg->decision.max_length > 0 ? pkg->decision.max_length
                                                       : pkg->config.text.max_position_embeddings;
    char path[PATH_MAX + 64];
    vsr_status st;

    /* chat_template.jinja must be one we know. */
    snprintf(path, sizeof path, "%s/chat_template.jinja", pkg->path);
    char sha[65];
    if ((st = vsr_sha256_file(path, sha, NULL, NULL, err)) != VSR_OK) goto fail;
    if (!template_known(sha)) {
        st = vsr_err_set(err, VSR_E_UNSUPPORTED,
                         "%s: chat_template.jinja (sha256 %.12s) is not a chat template the decision3 "
                         "family renders",
                         pkg->path, sha);
        goto fail;
    }
    /* The tokenizer rules (tokenizer class, no BOS or prefix space, added_tokens_decoder as
     * special tokens with their listed ids) are checked as it loads (src/tokenizer). */
    if ((st = vsr_tokenizer_open(pkg->path, &d->tok, err)) != VSR_OK) goto fail;
    /* Rows are left-padded with the pad token, so there must be one. */
    if (vsr_tokenizer_pad_id(d->tok) < 0) {
        st = vsr_err_set(err, VSR_E_UNSUPPORTED,
                         "%s: tokenizer_config.json: the tokenizer has no pad token (pad_token is null)",
                         pkg->path);
        goto fail;
    }
    /* Every code encodes to exactly its token id. */
    for (int i = 0; i < VSR_D3_CODES; i++) {
        d->codes[i] = pkg->decision.codes[i];
        d->token_ids[i] = pkg->decision.token_ids[i];
        int32_t *ids = NULL;
        size_t n = 0;
        if ((st = vsr_tokenizer_encode(d->tok, d->codes[i], strlen(d->codes[i]), &ids, &n, err)) != VSR_OK)
            goto fail;
        bool ok = n == 1 && ids[0] == d->token_ids[i];
        int32_t got = n ? ids[0] : -1;
        free(ids);
        if (!ok) {
            st = vsr_err_set(err, VSR_E_INTEGRITY,
                             "%s: checkpoint answer codes differ from its tokenizer: decision_config.json "
                             "code %d \"%s\" encodes to %zu token(s) (first %d), expected exactly "
                             "token_ids[%d] = %d",
                             pkg->path, i, d->codes[i], n, got, i, d->token_ids[i]);
            goto fail;
        }
    }
    *out = d;
    return VSR_OK;
fail:
    vsr_decider_free(d);
    return st;
}

void vsr_decider_free(vsr_decider *d) {
    if (!d) return;
    vsr_tokenizer_free(d->tok);
    free(d);
}

int64_t vsr_decider_max_input_tokens(const vsr_decider *d) { return d->max_input_tokens; }
const vsr_tokenizer *vsr_decider_tokenizer(const vsr_decider *d) { return d->tok; }

/* ---- golden self-check ---- */
const char *vsr_golden_request(void) {
    return "{\"state\":\"" VSR_GOLDEN_STATE "\",\"questions\":{"
           "\"domain\":{\"type\":\"choice\",\"instructions\":\"Which domain does this request belong to?\","
           "\"criteria\":{\"code\":\"Programming\",\"math\":\"Mathematics\",\"other\":\"Anything else\"}},"
           "\"reasoning\":{\"type\":\"noul\",\"instructions\":\"Does answering this request need multi-step reasoning?\"},"
           "\"difficulty\":{\"type\":\"score\",\"instructions\":\"How difficult is this request?\","
           "\"criteria\":[\"Trivial\",\"Moderate\",\"Hard\"]}}}";
}

static vsr_decision_job *golden_run(vsr_decider *d, vsr_err *err) {
    vsr_http_error h = {0};
    const char *body = vsr_golden_request();
    vsr_decision_job *j = vsr_decision_parse(d, body, strlen(body), NULL, &h);
    if (!j) {
        vsr_err_set(err, VSR_E_INTERNAL, "golden request refused: %s", h.message);
        return NULL;
    }
    for (int i = 0; i < j->req[0].n_q; i++)
        if (j->req[0].q[i].err_code) {
            vsr_err_set(err, VSR_E_INTERNAL, "golden question %s: %s", j->req[0].q[i].id,
                        j->req[0].q[i].err_msg);
            vsr_decision_free(j);
            return NULL;
        }
    if (vsr_decision_run(d, j, NULL, NULL, NULL, err) != VSR_OK) {
        vsr_decision_free(j);
        return NULL;
    }
    return j;
}

/* Compares one answer with its record: equal strings, numbers within tol. */
static bool answer_close(const json_t *got, const json_t *want, double tol, char *why, size_t n,
                         const char *path) {
    if (json_is_number(want)) {
        double a = json_number_value(got), b = json_number_value(want);
        if (!json_is_number(got) || !(fabs(a - b) <= tol)) {
            snprintf(why, n, "%s: %.6g, recorded %.6g (tolerance %g)", path, a, b, tol);
            return false;
        }
        return true;
    }
    if (json_is_object(want)) {
        const char *k;
        json_t *v;
        if (!json_is_object(got) || json_object_size(got) != json_object_size(want)) {
            snprintf(why, n, "%s: answer has other fields than recorded", path);
            return false;
        }
        json_object_foreach((json_t *)want, k, v) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            if (!answer_close(json_object_get(got, k), v, tol, why, n, sub)) return false;
        }
        return true;
    }
    if (!json_equal((json_t *)got, (json_t *)want)) {
        snprintf(why, n, "%s differs from the recorded answer", path);
        return false;
    }
    return true;
}

vsr_status vsr_golden_check(vsr_decider *d, const char *recorded, const char *device_class,
                            double tol, vsr_golden_report *out, vsr_err *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->reference, sizeof out->reference, "%s", device_class);
    vsr_decision_job *a = golden_run(d, err), *b = a ? golden_run(d, err) : NULL;
    if (!a || !b) {
        snprintf(out->status, sizeof out->status, "failed");
        snprintf(out->reason, sizeof out->reason, "%.500s", err->msg);
        vsr_decision_free(a);
        return VSR_OK;
    }
    int nq = a->req[0].n_q;
    bool same = true;
    for (int i = 0; i < nq; i++)
        if (memcmp(a->req[0].q[i].probs, b->req[0].q[i].probs, sizeof(double) * (size_t)a->req[0].q[i].n_opt))
            same = false;
    char *resp = vsr_decision_response(a, NULL);
    json_t *got = resp ? json_loads(resp, 0, NULL) : NULL;
    free(resp);
    json_t *answers = got ? json_object_get(got, "answers") : NULL;
    out->answers_json = answers ? json_dumps(answers, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    out->checked = 2 * nq;
    if (!same) {
        snprintf(out->status, sizeof out->status, "failed");
        snprintf(out->reason, sizeof out->reason,
                 "not deterministic: two runs of the golden request gave different answers");
    } else {
        json_t *rec = recorded ? json_loads(recorded, 0, NULL) : NULL;
        json_t *want = rec ? json_object_get(rec, device_class) : NULL;
        if (!want) {
            snprintf(out->status, sizeof out->status, "unverified");
            snprintf(out->reason, sizeof out->reason,
                     "no recorded answers for device class %s; checked determinism and form only",
                     device_class);
        } else {
            char why[400] = "";
            int matched = 0;
            const char *qid;
            json_t *wa;
            json_object_foreach(want, qid, wa) {
                const json_t *ga = json_object_get(answers, qid);
                if (ga && answer_close(ga, wa, tol, why, sizeof why, qid)) matched++;
                else if (!ga) snprintf(why, sizeof why, "%s: no answer", qid);
            }
            out->matched = 2 * matched;
            bool all = matched == nq && (int)json_object_size(want) == nq;
            snprintf(out->status, sizeof out->status, all ? "matched" : "failed");
            if (!all) snprintf(out->reason, sizeof out->reason, "golden answers differ: %s", why);
        }
        json_decref(rec);
    }
    json_decref(got);
    vsr_decision_free(a);
    vsr_decision_free(b);
    return VSR_OK;
}

void vsr_golden_report_free(vsr_golden_report *r) {
    if (r) {
        free(r->answers_json);
        r->answers_json = NULL;
    }
}
