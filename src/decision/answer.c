/* From readout logits to answers (reference-runtime.md 2.2, 2.4): softmax of the
 * first n logits at the package temperature, renormalised; choice = arg-max with
 * ties to the first option; confidence = clip(1 - H(p)/ln n, 0, 1); noul = p[1];
 * score = sum i * p_i. */
#include <math.h>
#include <stdio.h>

#include "decision/decision_impl.h"

bool d3_probs_from_logits(const float *logits, int n, double temperature, double *probs) {
    double mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (!isfinite(logits[i])) return false;
        double z = (double)logits[i] / temperature;
        if (z > mx) mx = z;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        probs[i] = exp((double)logits[i] / temperature - mx);
        sum += probs[i];
    }
    if (!(sum > 0.0) || !isfinite(sum)) return false;
    for (int i = 0; i < n; i++) probs[i] /= sum;
    return true;
}

double d3_confidence(const double *p, int n) {
    if (n < 2) return 1.0;
    double h = 0.0;
    for (int i = 0; i < n; i++)
        if (p[i] > 0.0) h -= p[i] * log(p[i]);
    double c = 1.0 - h / log((double)n);
    return c < 0.0 ? 0.0 : c > 1.0 ? 1.0 : c;
}

static const char *const type_names[D3_QTYPE_COUNT] = {"choice", "noul", "score"};

json_t *d3_answer_json(const d3_question *q) {
    json_t *a = json_object();
    if (q->err_code) {
        json_object_set_new(a, "type", q->type >= 0 ? json_string(type_names[q->type]) : json_null());
        json_object_set_new(a, "error", json_string(q->err_code));
        if (q->err_msg) json_object_set_new(a, "message", json_string(q->err_msg));
        return a;
    }
    json_object_set_new(a, "type", json_string(type_names[q->type]));
    json_t *probs = json_object();
    for (int i = 0; i < q->n_opt; i++) json_object_set_new(probs, q->keys[i], json_real(q->probs[i]));
    switch ((d3_qtype)q->type) {
    case D3_CHOICE: {
        int best = 0;
        for (int i = 1; i < q->n_opt; i++)
            if (q->probs[i] > q->probs[best]) best = i;
        json_object_set_new(a, "choice", json_string(q->keys[best]));
        json_object_set_new(a, "probabilities", probs);
        json_object_set_new(a, "confidence", json_real(d3_confidence(q->probs, q->n_opt)));
        break;
    }
    case D3_NOUL:
        json_decref(probs);
        json_object_set_new(a, "noul", json_real(q->probs[1]));
        break;
    case D3_SCORE: {
        double s = 0.0;
        for (int i = 0; i < q->n_opt; i++) s += i * q->probs[i];
        json_object_set_new(a, "score", json_real(s));
        json_object_set_new(a, "probabilities", probs);
        json_object_set_new(a, "confidence", json_real(d3_confidence(q->probs, q->n_opt)));
        json_t *legend = json_object();
        for (int i = 0; i < q->n_opt; i++) json_object_set_new(legend, q->keys[i], json_string(q->legend[i]));
        json_object_set_new(a, "legend", legend);
        break;
    }
    default:
        json_decref(probs);
        break;
    }
    return a;
}
