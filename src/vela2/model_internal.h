/* The Vela 2.0 heads (src/vela2/model.c), exposed for tests: FP32 on the host, as the
 * reference's heads/span.py and heads/candidate.py compute them outside autocast. */
#ifndef VSR_VELA2_MODEL_INTERNAL_H
#define VSR_VELA2_MODEL_INTERNAL_H

#include <stdint.h>

/* nn.LayerNorm(hidden) weight/bias and the projections of heads/span.py's SpanHead(hidden, d, slots),
 * row-major as stored ([out, in]). */
typedef struct vsr_v2_span_head {
    int64_t D;
    int d, slots;
    float *wn_w, *wn_b, *ln_w, *ln_b; /* [D] */
    float *slot;                      /* [slots, D] */
    float *K, *Q, *M, *N;             /* [d, D] */
    float *M_b;                       /* [d] */
    float *v;                         /* [d] */
} vsr_v2_span_head;

/* heads/candidate.py's CandidateHead(hidden, head_dim). */
typedef struct vsr_v2_cand_head {
    int64_t D;
    int hd;
    float *cn_w, *cn_b, *qn_w, *qn_b;     /* [D] */
    float *key, *query, *cmlp, *qmlp;     /* [hd, D] */
    float *cmlp_b;                        /* [hd] */
    float *scalar;                        /* [hd] */
} vsr_v2_cand_head;

/* score[w, l] = <K w, Q l>/sqrt(d) + v . GELU(M w + N l), with w = LN_wn(word) minus the mean over
 * the block's words and l = LN_ln(label) + slot[min(i, slots-1)], minus the mean over labels when
 * there are two or more. words [W, D], labels [L, D] (each label block's mean hidden state);
 * out [W, L]. Returns 0, or -1 when out of memory. */
int vsr_v2_span_scores(const vsr_v2_span_head *h, const float *words, int W, const float *labels, int L,
                       float *out);

/* logit[o] = <key LN_c(c_o), query LN_q(q)>/sqrt(hd) + scalar . GELU(cmlp LN_c(c_o) + b + qmlp LN_q(q)).
 * cands [n, D], query [D]; out [n]. Returns 0, or -1 when out of memory. */
int vsr_v2_candidate_scores(const vsr_v2_cand_head *h, const float *cands, int n, const float *query, float *out);

#endif
