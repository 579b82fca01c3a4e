/* Answers of a vela2 request from the head logits (reference-profiles-spans.md 3.2, 3.3;
 * reference-runtime.md 2.2, 2.6), and the response body. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vela2/decide_internal.h"

#define UNCOVERED_LOGIT (-30.0)

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* softmax of v[0..n-1] / t into p (float64, max-shifted); false if not finite */
static bool softmax(const float *v, int n, double t, double *p) {
    double mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) return false;
        if (v[i] / t > mx) mx = v[i] / t;
    }
    double s = 0.0;
    for (int i = 0; i < n; i++) s += p[i] = exp(v[i] / t - mx);
    for (int i = 0; i < n; i++) p[i] /= s;
    return true;
}

/* A candidate block's probabilities: choice/noul: the real options' softmax, then the abstain
 * probability of the softmax over all (reported apart); score: softmax; set: sigmoid per label. */
static void candidate(const vsr_v2_decider *d, v2_question *q, const v2_blk *b) {
    const v2_calibration *c = &d->cal;
    int n = q->n_opt;
    q->probs = calloc((size_t)n + 1, sizeof *q->probs);
    if (!q->probs) {
        v2_qfail(q, "internal_error", "out of memory");
        return;
    }
    const float *lg = b->b.option_logits;
    bool ok = true;
    if (q->kind == V2_SET) {
        for (int i = 0; i < n && ok; i++) {
            ok = isfinite(lg[i]);
            q->probs[i] = sigmoid(lg[i] / c->t_set);
        }
    } else if (q->kind == V2_SCORE) {
        ok = softmax(lg, n, c->t_score, q->probs);
    } else {
        double all[257];
        ok = softmax(lg, n, c->t_choice, q->probs) && softmax(lg, n + 1, c->t_choice, all);
        if (ok) q->probs[n] = all[n];
    }
    if (!ok) {
        v2_qfail(q, "invalid_model_output", "the model produced a non-finite logit");
        return;
    }
    q->answered = true;
}

static double lookup_threshold(const v2_calibration *c, const char *prefix, const char *id, const char *star) {
    char key[300];
    snprintf(key, sizeof key, "%s%s", prefix, id);
    const json_t *v = json_object_get(c->thresholds, key);
    return json_is_number(v) ? json_number_value(v) : json_number_value(json_object_get(c->thresholds, star));
}

/* The threshold before the sparse gate, and whether the PII rule chose it. */
static double span_threshold(const vsr_v2_decider *d, const v2_question *q, int64_t tokens, bool *pii) {
    const v2_calibration *c = &d->cal;
    *pii = false;
    if (!isnan(q->threshold)) return q->threshold;
    if (q->routed == VSR_V2_HEAD_BROAD) return c->broad_threshold;
    bool is_pii = !strcmp(q->key, "pii");
    if (!is_pii && q->n_opt > 0 && !q->alias) {
        is_pii = true;
        for (int i = 0; i < q->n_opt && is_pii; i++) is_pii = v2_is_pii_type(c, q->names[i]);
    }
    if (is_pii) {
        if (c->n_anchors) {
            *pii = true;
            return v2_pii_length_threshold(tokens, c->anchor_tokens, c->anchor_threshold, c->n_anchors);
        }
        for (int i = 0; i < c->n_buckets; i++)
            if (tokens <= c->bucket_max[i]) {
                *pii = true;
                return c->bucket_threshold[i];
            }
    }
    if ((!strcmp(q->key, "halu") || !strcmp(q->key, "toxic"))) {
        char key[16];
        snprintf(key, sizeof key, "span:%s", q->key);
        if (json_is_number(json_object_get(c->thresholds, key))) return json_number_value(json_object_get(c->thresholds, key));
    }
    return lookup_threshold(c, "span:", q->key, "span:*");
}

/* A span question: word logits (averaged over the windows that cover a word), probabilities,
 * the threshold rule and gate, the decoded spans (clipped to `over`'s key if one is set). */
static void span(const vsr_v2_decider *d, v2_request *r, int qi) {
    v2_question *q = &r->q[qi];
    v2_part *part = &r->parts[v2_part_index(r, q->over[0])];
    int nw = part->n_words, nl = q->n_opt;
    double *acc = calloc((size_t)nw * (size_t)nl + 1, sizeof *acc);
    int *cnt = calloc((size_t)nw + 1, sizeof *cnt);
    float *probs = malloc(sizeof *probs * ((size_t)nw * (size_t)nl + 1));
    v2_range *words = malloc(sizeof *words * ((size_t)nw + 1));
    int32_t *units = NULL;
    if (!acc || !cnt || !probs || !words) goto oom;
    bool windowed = false;
    for (int t = 0; t < r->n_trees; t++)
        for (int k = 0; k < r->trees[t].n_blocks; k++) {
            const v2_blk *b = &r->trees[t].blocks[k];
            if (b->q != qi || !b->read || b->b.kind != VSR_V2_BLOCK_SPAN) continue;
            windowed |= r->trees[t].window;
            for (int w = 0; w < b->b.n_words; w++) {
                int g = b->word_index[w];
                for (int l = 0; l < nl; l++) {
                    float v = b->b.span_logits[(size_t)w * (size_t)nl + (size_t)l];
                    if (!isfinite(v)) {
                        v2_qfail(q, "invalid_model_output", "the model produced a non-finite span logit");
                        goto out;
                    }
                    acc[(size_t)g * (size_t)nl + (size_t)l] += v;
                }
                cnt[g]++;
            }
        }
    /* unwindowed: the words the block read (those the budget kept); windowed: every word, an
     * uncovered one at UNCOVERED_LOGIT */
    double temp = q->routed == VSR_V2_HEAD_BROAD ? d->cal.broad_temperature : d->cal.t_span;
    int n = 0;
    q->noul = 0.0;
    for (int w = 0; w < nw; w++) {
        if (!windowed && !cnt[w]) continue;
        for (int l = 0; l < nl; l++) {
            double lg = cnt[w] ? acc[(size_t)w * (size_t)nl + (size_t)l] / cnt[w] : UNCOVERED_LOGIT;
            double p = sigmoid(lg / temp);
            probs[(size_t)n * (size_t)nl + (size_t)l] = (float)p;
            bool inside = !q->has_range || (part->words[w].start >= q->range_start && part->words[w].end <= q->range_end);
            if (inside && p > q->noul) q->noul = p;
        }
        words[n++] = part->words[w];
    }
    units = v2_units(&part->t);
    if (!units) goto oom;
    bool pii;
    double thr = span_threshold(d, q, part->n_ids, &pii);
    const v2_calibration *c = &d->cal;
    if (pii && c->has_gate && c->gate_k >= 0 && thr < c->gate_t_sparse && n > 0) {
        v2_span *probe = NULL;
        int np = v2_decode_spans(&part->t, units, words, n, probs, nl, c->gate_probe, &probe);
        free(probe);
        if (np < 0) goto oom;
        if (np <= c->gate_k) thr = c->gate_t_sparse;
    }
    q->applied = thr;
    v2_span *sp = NULL;
    int ns = v2_decode_spans(&part->t, units, words, n, probs, nl, thr, &sp);
    if (ns < 0) goto oom;
    if (q->has_range) {
        int k = 0;
        for (int i = 0; i < ns; i++) {
            int32_t a = sp[i].start > q->range_start ? sp[i].start : q->range_start;
            int32_t b = sp[i].end < q->range_end ? sp[i].end : q->range_end;
            if (b > a) sp[k++] = (v2_span){sp[i].label, a, b, sp[i].probability};
        }
        ns = k;
    }
    q->spans = sp;
    q->n_spans = ns;
    q->answered = true;
    goto out;
oom:
    v2_qfail(q, "internal_error", "out of memory decoding spans");
out:
    free(acc);
    free(cnt);
    free(probs);
    free(words);
    free(units);
}

void v2_answer_request(const vsr_v2_decider *d, v2_request *r) {
    for (int i = 0; i < r->n_q; i++) {
        v2_question *q = &r->q[i];
        if (q->err_code || q->answered) continue;
        if (q->kind == V2_SPAN) {
            span(d, r, i);
            continue;
        }
        for (int t = 0; t < r->n_trees && !q->answered && !q->err_code; t++)
            for (int k = 0; k < r->trees[t].n_blocks; k++)
                if (r->trees[t].blocks[k].q == i && r->trees[t].blocks[k].b.kind == VSR_V2_BLOCK_CANDIDATE) {
                    candidate(d, q, &r->trees[t].blocks[k]);
                    break;
                }
        if (q->kind == V2_SET && q->answered)
            q->applied = !isnan(q->threshold) ? q->threshold : lookup_threshold(&d->cal, "set:", q->key, "set:*");
    }
}

/* ---- the response ---- */

static json_t *answer_json(const v2_question *q) {
    json_t *a = json_object();
    json_object_set_new(a, "type", q->kind >= 0 ? json_string(q->kind == V2_SPAN ? "noul" : v2_kind_names[q->kind]) : json_null());
    if (q->err_code) {
        if (q->kind == V2_SPAN) json_object_set_new(a, "type", json_string("span"));
        json_object_set_new(a, "error", json_string(q->err_code));
        if (q->err_msg) json_object_set_new(a, "message", json_string(q->err_msg));
        return a;
    }
    if (!q->answered) {
        json_object_set_new(a, "error", json_string("internal_error"));
        json_object_set_new(a, "message", json_string("the question was not run"));
        return a;
    }
    int n = q->n_opt;
    switch ((v2_kind)q->kind) {
    case V2_CHOICE: {
        int best = 0, second = -1;
        for (int i = 1; i < n; i++)
            if (q->probs[i] > q->probs[best]) best = i;
        for (int i = 0; i < n; i++)
            if (i != best && (second < 0 || q->probs[i] > q->probs[second])) second = i;
        json_object_set_new(a, "choice", json_string(q->keys[best]));
        json_t *p = json_object();
        for (int i = 0; i < n; i++) json_object_set_new(p, q->keys[i], json_real(q->probs[i]));
        json_object_set_new(a, "probabilities", p);
        json_object_set_new(a, "confidence", json_real(q->probs[best] - (second >= 0 ? q->probs[second] : 0.0)));
        json_object_set_new(a, "abstain_probability", json_real(q->probs[n]));
        break;
    }
    case V2_NOUL:
        json_object_set_new(a, "noul", json_real(q->probs[1]));
        break;
    case V2_SCORE: {
        double s = 0.0, v = 0.0;
        for (int i = 0; i < n; i++) s += i * q->probs[i];
        for (int i = 0; i < n; i++) v += (i - s) * (i - s) * q->probs[i];
        json_object_set_new(a, "score", json_real(s));
        json_t *p = json_object(), *lg = json_object();
        for (int i = 0; i < n; i++) {
            json_object_set_new(p, q->keys[i], json_real(q->probs[i]));
            json_object_set_new(lg, q->keys[i], json_string(q->legend[i]));
        }
        json_object_set_new(a, "probabilities", p);
        json_object_set_new(a, "confidence", json_real(1.0 - v / (((double)n * n - 1.0) / 12.0)));
        json_object_set_new(a, "legend", lg);
        break;
    }
    case V2_SPAN:
        json_object_set_new(a, "noul", json_real(q->noul));
        if (q->full_input) json_object_set_new(a, "input_coverage", json_string("complete"));
        break;
    default:
        break;
    }
    return a;
}

static const char *label_out(const v2_question *q, int l) { return q->alias ? q->alias : q->keys[l]; }

json_t *v2_request_json(const v2_request *r, const char *model, bool broad) {
    json_t *o = json_object(), *answers = json_object(), *spans = json_object(), *heads = json_object(),
           *sets = json_object(), *thresholds = json_object();
    json_object_set_new(o, "model", json_string(model));
    for (int i = 0; i < r->n_q; i++) {
        const v2_question *q = &r->q[i];
        if (q->kind == V2_SET && !q->err_code && q->answered) {
            json_t *sel = json_array(), *p = json_object();
            for (int l = 0; l < q->n_opt; l++) {
                char key[600];
                snprintf(key, sizeof key, "%s.%s", q->id, q->keys[l]);
                json_object_set_new(answers, key, json_pack("{s:s,s:f}", "type", "noul", "noul", q->probs[l]));
                json_object_set_new(p, q->keys[l], json_real(q->probs[l]));
                if ((float)q->probs[l] > (float)q->applied) json_array_append_new(sel, json_string(q->keys[l]));
            }
            json_object_set_new(sets, q->id, json_pack("{s:o,s:o}", "selected", sel, "probabilities", p));
            json_object_set_new(thresholds, q->id, json_real(q->applied));
            continue;
        }
        json_object_set_new(answers, q->id, answer_json(q));
        if (q->kind == V2_SPAN && !q->err_code && q->answered) {
            const v2_part *part = &r->parts[v2_part_index(r, q->over[0])];
            json_t *list = json_array();
            for (int s = 0; s < q->n_spans; s++) {
                const v2_span *sp = &q->spans[s];
                int32_t base = q->has_range ? q->range_start : 0;
                json_t *e = json_object();
                json_object_set_new(e, "label", json_string(label_out(q, sp->label)));
                json_object_set_new(e, "start", json_integer(sp->start - base));
                json_object_set_new(e, "end", json_integer(sp->end - base));
                json_object_set_new(e, "text", json_stringn(part->text + part->t.byte[sp->start],
                                                            (size_t)(part->t.byte[sp->end] - part->t.byte[sp->start])));
                json_object_set_new(e, "probability", json_real((double)sp->probability));
                json_array_append_new(list, e);
            }
            json_object_set_new(spans, q->id, list);
            json_object_set_new(heads, q->id, json_string(q->routed == VSR_V2_HEAD_BROAD ? "broad" : "router"));
            json_object_set_new(thresholds, q->id, json_real(q->applied));
        }
    }
    json_object_set_new(o, "answers", answers);
    json_object_set_new(o, "usage", json_pack("{s:I,s:i}", "input_tokens", (json_int_t)r->tokens, "output_tokens", 0));
    if (json_object_size(spans)) json_object_set(o, "spans", spans);
    if (broad && json_object_size(heads)) json_object_set(o, "span_heads", heads);
    if (json_object_size(sets)) json_object_set(o, "sets", sets);
    if (json_object_size(thresholds)) json_object_set(o, "thresholds", thresholds);
    json_decref(spans);
    json_decref(heads);
    json_decref(sets);
    json_decref(thresholds);
    return o;
}
