/* The Vela 2.0 decoder model (include/vsr/vela2.h): the qwen3_5_text backbone of
 * src/model/qwen35.c (backbone.*, plain positions, causal) and the heads in FP32 on the host.
 *
 * Trees. A block attends to the shared context and to itself only, with positions that continue
 * after the context, so its hidden states are those of the sequence [context ++ block] (the
 * reference's TreeBatch: "its states equal those of the sequence prefix + block"). Each block is
 * therefore run as its own row [context ++ block]: exact by construction, at the cost of
 * computing a tree's context once per block. Rows of every block of every tree are packed into
 * forwards of at most V2_BATCH_TOKENS tokens and V2_BATCH_ROWS rows (the reference decoders'
 * batching limits; one row alone may be longer, up to max_length), and only the positions the heads read come back from the backbone
 * (vsr_model_forward_gather).
 *
 * Heads (reference heads/span.py and heads/candidate.py, FP32 outside autocast):
 *   span:      score[w, l] = <K w, Q l>/sqrt(d) + v . GELU(M w + N l)
 *              w = LN_wn(word) - mean over the block's words
 *              l = LN_ln(label block mean) + slot[min(i, slots-1)], mean-centred when >= 2 labels
 *              router head span2.*, broad head span_broad.* (broad_head.safetensors); span2.o is
 *              shipped but never read.
 *   candidate: logit = <key LN_c(c), query LN_q(q)>/sqrt(head_dim)
 *                      + scalar . GELU(candidate_mlp LN_c(c) + query_mlp LN_q(q))
 *              c: each option's endpoint, q: the query token; + set_bias for set questions.
 *              (The reference's vela2 members.py reads the blocks with this head, the Decision 2.0
 *              candidate head of reference-runtime.md 2.5.)
 * LayerNorm is torch's (biased variance, eps 1e-5); GELU the exact erf form. Sums are taken in
 * double and rounded once, so the host result is the FP32 formula to within a rounding. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vela2/model_internal.h"
#include "vsr/dtype.h"
#include "vsr/model.h"
#include "vsr/vela2.h"

#define V2_BATCH_TOKENS 24576 /* members.py DECODER_BUDGET */
#define V2_BATCH_ROWS 32      /* members.py MAX_ROWS */
#define V2_BATCH_GATHER 32768 /* hidden rows one forward returns (the CUDA gather takes at most 65,535) */
#define LN_EPS 1e-5

struct vsr_v2_model {
    const vsr_package *pkg;
    vsr_model *bb;
    vsr_v2_info info;
    int64_t D, vocab;
    vsr_v2_cand_head cand;
    float set_bias;
    vsr_v2_span_head router, broad;
    bool has_broad;
    float **owned; /* every host array of the heads */
    int n_owned, cap_owned;
    uint64_t head_bytes;
};

/* ------------------------------------------------------------ head math */

static void layer_norm(const float *x, int64_t D, const float *w, const float *b, float *y) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < D; i++) s += x[i];
    double mean = s / (double)D;
    for (int64_t i = 0; i < D; i++) s2 += ((double)x[i] - mean) * ((double)x[i] - mean);
    double inv = 1.0 / sqrt(s2 / (double)D + LN_EPS);
    for (int64_t i = 0; i < D; i++) y[i] = (float)(((double)x[i] - mean) * inv * w[i] + b[i]);
}

static double dot(const float *a, const float *b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)a[i] * b[i];
        s1 += (double)a[i + 1] * b[i + 1];
        s2 += (double)a[i + 2] * b[i + 2];
        s3 += (double)a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += (double)a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

static double gelu(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }

/* y[r, o] = x[r, :] . W[o, :] (+ bias[o]) for r < rows, o < out; rows split over threads when large. */
typedef struct proj_job {
    const float *x, *W, *bias;
    float *y;
    int64_t rows, in, out, chunk;
} proj_job;

static void proj_rows(const proj_job *j, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
        for (int64_t o = 0; o < j->out; o++)
            j->y[r * j->out + o] =
                (float)(dot(j->x + r * j->in, j->W + o * j->in, j->in) + (j->bias ? (double)j->bias[o] : 0.0));
}

typedef struct proj_thread {
    const proj_job *j;
    int64_t r0, r1;
} proj_thread;

static void *proj_main(void *arg) {
    proj_thread *t = arg;
    proj_rows(t->j, t->r0, t->r1);
    return NULL;
}

static void project(const float *x, int64_t rows, int64_t in, const float *W, const float *bias, int64_t out, float *y) {
    proj_job j = {x, W, bias, y, rows, in, out, 0};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = (int)(cpus < 1 ? 1 : cpus > 16 ? 16 : cpus);
    if ((double)rows * (double)in * (double)out < 4e6 || rows < 2 || nt < 2) {
        proj_rows(&j, 0, rows);
        return;
    }
    if (nt > rows) nt = (int)rows;
    pthread_t tid[16];
    proj_thread th[16];
    int started = 0;
    int64_t per = (rows + nt - 1) / nt;
    for (int t = 1; t < nt; t++) {
        th[t] = (proj_thread){&j, t * per, (t + 1) * per < rows ? (t + 1) * per : rows};
        if (th[t].r0 >= th[t].r1) break;
        if (pthread_create(&tid[started], NULL, proj_main, &th[t]) != 0) {
            proj_rows(&j, th[t].r0, th[t].r1); /* no thread: this one does it */
            continue;
        }
        started++;
    }
    proj_rows(&j, 0, per < rows ? per : rows);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

/* Subtracts the column means of x [n, D] (torch's x - x.mean(0)). */
static void centre(float *x, int64_t n, int64_t D) {
    for (int64_t i = 0; i < D; i++) {
        double s = 0;
        for (int64_t r = 0; r < n; r++) s += x[r * D + i];
        float m = (float)(s / (double)n);
        for (int64_t r = 0; r < n; r++) x[r * D + i] -= m;
    }
}

int vsr_v2_span_scores(const vsr_v2_span_head *h, const float *words, int W, const float *labels, int L,
                       float *out) {
    if (W <= 0 || L <= 0) return 0;
    const int64_t D = h->D, d = h->d;
    float *w = malloc(sizeof(float) * (size_t)W * (size_t)D), *l = malloc(sizeof(float) * (size_t)L * (size_t)D);
    float *Kw = malloc(sizeof(float) * (size_t)W * (size_t)d), *Mw = malloc(sizeof(float) * (size_t)W * (size_t)d);
    float *Ql = malloc(sizeof(float) * (size_t)L * (size_t)d), *Nl = malloc(sizeof(float) * (size_t)L * (size_t)d);
    int rc = -1;
    if (!w || !l || !Kw || !Mw || !Ql || !Nl) goto done;
    for (int r = 0; r < W; r++) layer_norm(words + (int64_t)r * D, D, h->wn_w, h->wn_b, w + (int64_t)r * D);
    centre(w, W, D);
    for (int r = 0; r < L; r++) {
        float *lr = l + (int64_t)r * D;
        layer_norm(labels + (int64_t)r * D, D, h->ln_w, h->ln_b, lr);
        const float *slot = h->slot + (int64_t)(r < h->slots ? r : h->slots - 1) * D;
        for (int64_t i = 0; i < D; i++) lr[i] += slot[i];
    }
    if (L > 1) centre(l, L, D);
    project(w, W, D, h->K, NULL, d, Kw);
    project(w, W, D, h->M, h->M_b, d, Mw);
    project(l, L, D, h->Q, NULL, d, Ql);
    project(l, L, D, h->N, NULL, d, Nl);
    const double scale = 1.0 / sqrt((double)d);
    for (int r = 0; r < W; r++)
        for (int c = 0; c < L; c++) {
            const float *mw = Mw + (int64_t)r * d, *nl = Nl + (int64_t)c * d;
            double mlp = 0;
            for (int64_t k = 0; k < d; k++) mlp += (double)h->v[k] * gelu((double)(mw[k] + nl[k]));
            out[(int64_t)r * L + c] = (float)(dot(Kw + (int64_t)r * d, Ql + (int64_t)c * d, d) * scale + mlp);
        }
    rc = 0;
done:
    free(w);
    free(l);
    free(Kw);
    free(Mw);
    free(Ql);
    free(Nl);
    return rc;
}

int vsr_v2_candidate_scores(const vsr_v2_cand_head *h, const float *cands, int n, const float *query, float *out) {
    if (n <= 0) return 0;
    const int64_t D = h->D, hd = h->hd;
    float *c = malloc(sizeof(float) * (size_t)n * (size_t)D), *q = malloc(sizeof(float) * (size_t)D);
    float *kc = malloc(sizeof(float) * (size_t)n * (size_t)hd), *mc = malloc(sizeof(float) * (size_t)n * (size_t)hd);
    float *qq = malloc(sizeof(float) * (size_t)hd), *mq = malloc(sizeof(float) * (size_t)hd);
    int rc = -1;
    if (!c || !q || !kc || !mc || !qq || !mq) goto done;
    for (int r = 0; r < n; r++) layer_norm(cands + (int64_t)r * D, D, h->cn_w, h->cn_b, c + (int64_t)r * D);
    layer_norm(query, D, h->qn_w, h->qn_b, q);
    project(c, n, D, h->key, NULL, hd, kc);
    project(c, n, D, h->cmlp, h->cmlp_b, hd, mc);
    project(q, 1, D, h->query, NULL, hd, qq);
    project(q, 1, D, h->qmlp, NULL, hd, mq);
    const double scale = 1.0 / sqrt((double)hd);
    for (int r = 0; r < n; r++) {
        double nl = 0;
        for (int64_t k = 0; k < hd; k++) nl += (double)h->scalar[k] * gelu((double)(mc[(int64_t)r * hd + k] + mq[k]));
        out[r] = (float)(dot(kc + (int64_t)r * hd, qq, hd) * scale + nl);
    }
    rc = 0;
done:
    free(c);
    free(q);
    free(kc);
    free(mc);
    free(qq);
    free(mq);
    return rc;
}

/* ------------------------------------------------------------ load */

static vsr_status own(vsr_v2_model *m, float *p, vsr_err *err) {
    if (m->n_owned == m->cap_owned) {
        int nc = m->cap_owned ? m->cap_owned * 2 : 64;
        float **no = realloc(m->owned, sizeof *no * (size_t)nc);
        if (!no) {
            free(p);
            return vsr_err_set(err, VSR_E_NOMEM, "vela2 model: out of memory");
        }
        m->owned = no, m->cap_owned = nc;
    }
    m->owned[m->n_owned++] = p;
    return VSR_OK;
}

/* A head tensor widened to FP32 (F32, BF16 or F16 as stored), checked against `numel`. */
static vsr_status load_f32(vsr_v2_model *m, const vsr_tensor *t, const char *name, int64_t numel, float **out,
                           vsr_err *err) {
    if (!t) return vsr_err_set(err, VSR_E_NOT_FOUND, "vela2 model: tensor \"%s\" is missing", name);
    if (t->numel != numel)
        return vsr_err_set(err, VSR_E_FORMAT, "vela2 model: tensor \"%s\" has %lld elements, expected %lld", name,
                           (long long)t->numel, (long long)numel);
    if (!t->data)
        return vsr_err_set(err, VSR_E_INVALID,
                           "vela2 model: %s: the package's weights are not mapped (call vsr_package_map first)", name);
    float *h = malloc(sizeof(float) * (size_t)(numel ? numel : 1));
    if (!h) return vsr_err_set(err, VSR_E_NOMEM, "vela2 model: %s: out of memory", name);
    const unsigned char *d = t->data;
    for (int64_t i = 0; i < numel; i++) {
        if (t->dtype == VSR_DT_F32) memcpy(&h[i], d + 4 * i, 4);
        else {
            uint16_t u;
            memcpy(&u, d + 2 * i, 2);
            if (t->dtype == VSR_DT_BF16) h[i] = vsr_bf16_to_f32(u);
            else if (t->dtype == VSR_DT_F16) h[i] = vsr_f16_to_f32(u);
            else {
                free(h);
                return vsr_err_set(err, VSR_E_FORMAT, "vela2 model: %s: dtype %s, expected F32, BF16 or F16", name,
                                   vsr_dtype_info(t->dtype)->name);
            }
        }
    }
    m->head_bytes += sizeof(float) * (uint64_t)numel;
    *out = h;
    return own(m, h, err);
}

typedef struct src {
    const vsr_weights *w;
    const vsr_st_file *f;
} src;

static const vsr_tensor *src_find(src s, const char *name) {
    return s.w ? vsr_weights_find(s.w, name) : vsr_st_find(s.f, name);
}

static vsr_status load_t(vsr_v2_model *m, src s, const char *prefix, const char *name, int64_t numel, float **out,
                         vsr_err *err) {
    char full[160];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return load_f32(m, src_find(s, full), full, numel, out, err);
}

static vsr_status load_span(vsr_v2_model *m, src s, const char *prefix, int d, int slots, vsr_v2_span_head *h,
                            vsr_err *err) {
    const int64_t D = m->D;
    h->D = D, h->d = d, h->slots = slots;
    vsr_status st;
    if ((st = load_t(m, s, prefix, "wn.weight", D, &h->wn_w, err)) || (st = load_t(m, s, prefix, "wn.bias", D, &h->wn_b, err)) ||
        (st = load_t(m, s, prefix, "ln.weight", D, &h->ln_w, err)) || (st = load_t(m, s, prefix, "ln.bias", D, &h->ln_b, err)) ||
        (st = load_t(m, s, prefix, "slot.weight", (int64_t)slots * D, &h->slot, err)) ||
        (st = load_t(m, s, prefix, "K.weight", (int64_t)d * D, &h->K, err)) ||
        (st = load_t(m, s, prefix, "Q.weight", (int64_t)d * D, &h->Q, err)) ||
        (st = load_t(m, s, prefix, "M.weight", (int64_t)d * D, &h->M, err)) ||
        (st = load_t(m, s, prefix, "M.bias", d, &h->M_b, err)) ||
        (st = load_t(m, s, prefix, "N.weight", (int64_t)d * D, &h->N, err)) ||
        (st = load_t(m, s, prefix, "v.weight", d, &h->v, err)))
        return st;
    return VSR_OK;
}

static vsr_status load_candidate(vsr_v2_model *m, int hd, vsr_err *err) {
    src s = {m->pkg->weights, NULL};
    vsr_v2_cand_head *h = &m->cand;
    const int64_t D = m->D;
    h->D = D, h->hd = hd;
    vsr_status st;
    float *sb = NULL;
    if ((st = load_t(m, s, "head.", "candidate_norm.weight", D, &h->cn_w, err)) ||
        (st = load_t(m, s, "head.", "candidate_norm.bias", D, &h->cn_b, err)) ||
        (st = load_t(m, s, "head.", "query_norm.weight", D, &h->qn_w, err)) ||
        (st = load_t(m, s, "head.", "query_norm.bias", D, &h->qn_b, err)) ||
        (st = load_t(m, s, "head.", "key.weight", (int64_t)hd * D, &h->key, err)) ||
        (st = load_t(m, s, "head.", "query.weight", (int64_t)hd * D, &h->query, err)) ||
        (st = load_t(m, s, "head.", "candidate_mlp.weight", (int64_t)hd * D, &h->cmlp, err)) ||
        (st = load_t(m, s, "head.", "candidate_mlp.bias", hd, &h->cmlp_b, err)) ||
        (st = load_t(m, s, "head.", "query_mlp.weight", (int64_t)hd * D, &h->qmlp, err)) ||
        (st = load_t(m, s, "head.", "scalar.weight", hd, &h->scalar, err)) ||
        (st = load_t(m, s, "", "set_bias", 1, &sb, err)))
        return st;
    m->set_bias = sb[0];
    return VSR_OK;
}

void vsr_v2_model_free(vsr_v2_model *m) {
    if (!m) return;
    vsr_model_free(m->bb);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m);
}

vsr_status vsr_v2_model_load(const vsr_package *pkg, const vsr_model_opts *opts, vsr_v2_model **out, vsr_err *err) {
    *out = NULL;
    if (!pkg || pkg->family != VSR_FAMILY_VELA2 || !pkg->vela2)
        return vsr_err_set(err, VSR_E_UNSUPPORTED, "%s: not a Vela 2.0 decoder package (family %s)",
                           pkg ? pkg->path : "(no package)", pkg ? vsr_family_name(pkg->family) : "none");
    if (!pkg->verified)
        return vsr_err_set(err, VSR_E_INVALID, "%s: the package is not verified (call vsr_package_verify first)",
                           pkg->path);
    vsr_v2_model *m = calloc(1, sizeof *m);
    if (!m) return vsr_err_set(err, VSR_E_NOMEM, "vela2 model: out of memory");
    m->pkg = pkg;
    m->D = pkg->config.text.hidden_size;
    m->vocab = pkg->config.text.vocab_size;
    const vsr_vela2_config *v = pkg->vela2;
    vsr_status st;
    if ((st = load_candidate(m, v->head_dim, err)) ||
        (st = load_span(m, (src){pkg->weights, NULL}, "span2.", v->span_d, v->span_slots, &m->router, err)))
        goto fail;
    if (pkg->broad_head) {
        if ((st = load_span(m, (src){NULL, pkg->broad_head}, "span_broad.", v->broad_d, v->broad_slots, &m->broad, err)))
            goto fail;
        m->has_broad = true;
    }
    if ((st = vsr_model_load(pkg, opts, &m->bb, err))) goto fail;
    m->info = (vsr_v2_info){.model_name = v->model_name,
                            .max_length = v->max_length,
                            .pad_token_id = v->pad_token_id,
                            .head_dim = v->head_dim,
                            .span_d = v->span_d,
                            .span_slots = v->span_slots,
                            .hybrid_rmax = v->hybrid_rmax,
                            .window = v->window,
                            .stride = v->stride,
                            .window_above = v->window_above,
                            .has_broad_head = m->has_broad,
                            .hidden_size = m->D};
    *out = m;
    return VSR_OK;
fail:
    vsr_v2_model_free(m);
    return st;
}

const vsr_v2_info *vsr_v2_model_info(const vsr_v2_model *m) { return m ? &m->info : NULL; }

uint64_t vsr_v2_model_memory_bytes(const vsr_v2_model *m) {
    return m ? vsr_model_memory_bytes(m->bb) + m->head_bytes : 0;
}

/* ------------------------------------------------------------ forward */

/* Checks one block against its tree; a message naming tree t, block b. */
static vsr_status check_block(const vsr_v2_model *m, const vsr_v2_tree *tr, int t, int b, vsr_err *err) {
    const vsr_v2_block *k = &tr->blocks[b];
    const int n = k->n_ids;
    if (n < 1 || !k->ids) return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: the block has no tokens", t, b);
    if ((int64_t)tr->n_ctx + n > m->info.max_length)
        return vsr_err_set(err, VSR_E_INVALID,
                           "tree %d block %d: %d context + %d block tokens exceed the model's max_length of %lld", t, b,
                           tr->n_ctx, n, (long long)m->info.max_length);
    for (int i = 0; i < n; i++)
        if (k->ids[i] < 0 || k->ids[i] >= m->vocab)
            return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: token %d is id %d, outside the vocabulary of %lld",
                               t, b, i, k->ids[i], (long long)m->vocab);
    if (k->kind == VSR_V2_BLOCK_SPAN) {
        if (k->head != VSR_V2_HEAD_ROUTER && k->head != VSR_V2_HEAD_BROAD)
            return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: unknown span head %d", t, b, (int)k->head);
        if (k->head == VSR_V2_HEAD_BROAD && !m->has_broad)
            return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: this model has no broad span head", t, b);
        if (k->n_words < 0 || (k->n_words > 0 && (!k->word_pos || !k->span_logits)))
            return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: %d words without positions or an output", t, b,
                               k->n_words);
        if (k->n_labels < 1 || !k->label_begin || !k->label_end)
            return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: a span block needs at least one label block", t,
                               b);
        for (int i = 0; i < k->n_words; i++)
            if (k->word_pos[i] < 0 || k->word_pos[i] >= n)
                return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: word %d at position %d is outside the block "
                                   "(%d tokens)", t, b, i, k->word_pos[i], n);
        for (int i = 0; i < k->n_labels; i++)
            if (k->label_begin[i] < 0 || k->label_end[i] < k->label_begin[i] || k->label_end[i] >= n)
                return vsr_err_set(err, VSR_E_INVALID,
                                   "tree %d block %d: label %d spans positions %d..%d, not a range inside the block (%d "
                                   "tokens)", t, b, i, k->label_begin[i], k->label_end[i], n);
    } else if (k->kind == VSR_V2_BLOCK_CANDIDATE) {
        if (k->n_options < 1 || !k->option_end || !k->option_logits)
            return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: a candidate block needs options and an output", t,
                               b);
        for (int i = 0; i < k->n_options; i++)
            if (k->option_end[i] < 0 || k->option_end[i] >= n)
                return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: option %d ends at position %d, outside the "
                                   "block (%d tokens)", t, b, i, k->option_end[i], n);
        if (k->query_pos < 0 || k->query_pos >= n)
            return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: the query position %d is outside the block (%d "
                               "tokens)", t, b, k->query_pos, n);
    } else {
        return vsr_err_set(err, VSR_E_INVALID, "tree %d block %d: unknown block kind %d", t, b, (int)k->kind);
    }
    return VSR_OK;
}

/* One block as a backbone row: its tokens and the positions its head reads. */
typedef struct v2_row {
    int tree, block;
    int32_t *ids;
    int len;
    int32_t *pos; /* span: words, then every label block's tokens; candidate: option ends, then the query */
    int n_pos;
    int64_t out_off; /* first row of the gathered hidden states (within its forward) */
} v2_row;

static vsr_status build_row(const vsr_v2_tree *tr, int t, int b, v2_row *r, vsr_err *err) {
    const vsr_v2_block *k = &tr->blocks[b];
    const int nc = tr->n_ctx;
    r->tree = t, r->block = b, r->len = nc + k->n_ids;
    int np = 0;
    if (k->kind == VSR_V2_BLOCK_SPAN) {
        np = k->n_words; /* no word: nothing to score, the row is not run */
        for (int i = 0; k->n_words && i < k->n_labels; i++) np += k->label_end[i] - k->label_begin[i] + 1;
    } else {
        np = k->n_options + 1;
    }
    r->ids = malloc(sizeof(int32_t) * (size_t)r->len);
    r->pos = malloc(sizeof(int32_t) * (size_t)(np ? np : 1));
    if (!r->ids || !r->pos) return vsr_err_set(err, VSR_E_NOMEM, "vela2 forward: out of memory");
    if (nc) memcpy(r->ids, tr->ctx, sizeof(int32_t) * (size_t)nc);
    memcpy(r->ids + nc, k->ids, sizeof(int32_t) * (size_t)k->n_ids);
    int p = 0;
    if (k->kind == VSR_V2_BLOCK_SPAN) {
        for (int i = 0; i < k->n_words; i++) r->pos[p++] = nc + k->word_pos[i];
        for (int i = 0; k->n_words && i < k->n_labels; i++)
            for (int j = k->label_begin[i]; j <= k->label_end[i]; j++) r->pos[p++] = nc + j;
    } else {
        for (int i = 0; i < k->n_options; i++) r->pos[p++] = nc + k->option_end[i];
        r->pos[p++] = nc + k->query_pos;
    }
    r->n_pos = p;
    return VSR_OK;
}

/* The head of one block over its gathered hidden rows h [n_pos, D]; writes into out. */
static vsr_status read_block(const vsr_v2_model *m, const vsr_v2_block *k, const float *h, float *out, vsr_err *err) {
    const int64_t D = m->D;
    if (k->kind == VSR_V2_BLOCK_SPAN) {
        if (k->n_words == 0) return VSR_OK;
        float *labels = malloc(sizeof(float) * (size_t)k->n_labels * (size_t)D);
        double *acc = malloc(sizeof(double) * (size_t)D);
        if (!labels || !acc) {
            free(labels);
            free(acc);
            return vsr_err_set(err, VSR_E_NOMEM, "vela2 forward: out of memory");
        }
        const float *row = h + (int64_t)k->n_words * D;
        for (int i = 0; i < k->n_labels; i++) {
            int cnt = k->label_end[i] - k->label_begin[i] + 1;
            memset(acc, 0, sizeof(double) * (size_t)D);
            for (int j = 0; j < cnt; j++, row += D)
                for (int64_t x = 0; x < D; x++) acc[x] += row[x];
            for (int64_t x = 0; x < D; x++) labels[(int64_t)i * D + x] = (float)(acc[x] / cnt);
        }
        const vsr_v2_span_head *sh = k->head == VSR_V2_HEAD_BROAD ? &m->broad : &m->router;
        int rc = vsr_v2_span_scores(sh, h, k->n_words, labels, k->n_labels, out);
        free(labels);
        free(acc);
        if (rc) return vsr_err_set(err, VSR_E_NOMEM, "vela2 forward: out of memory in the span head");
        return VSR_OK;
    }
    if (vsr_v2_candidate_scores(&m->cand, h, k->n_options, h + (int64_t)k->n_options * D, out))
        return vsr_err_set(err, VSR_E_NOMEM, "vela2 forward: out of memory in the candidate head");
    if (k->set_bias)
        for (int i = 0; i < k->n_options; i++) out[i] = (float)((double)out[i] + m->set_bias);
    return VSR_OK;
}

static int64_t block_outputs(const vsr_v2_block *k) {
    return k->kind == VSR_V2_BLOCK_SPAN ? (int64_t)k->n_words * k->n_labels : k->n_options;
}

vsr_status vsr_v2_forward(vsr_v2_model *m, const vsr_v2_tree *trees, int n_trees, vsr_err *err) {
    if (!m) return vsr_err_set(err, VSR_E_INVALID, "vela2 forward: no model");
    if (n_trees < 0 || (n_trees > 0 && !trees)) return vsr_err_set(err, VSR_E_INVALID, "vela2 forward: no trees");
    vsr_status st;
    int n_rows = 0;
    int64_t n_out = 0;
    for (int t = 0; t < n_trees; t++) {
        const vsr_v2_tree *tr = &trees[t];
        if (tr->n_ctx < 0 || (tr->n_ctx > 0 && !tr->ctx) || tr->n_blocks < 0 || (tr->n_blocks > 0 && !tr->blocks))
            return vsr_err_set(err, VSR_E_INVALID, "tree %d: malformed (context of %d tokens, %d blocks)", t, tr->n_ctx,
                               tr->n_blocks);
        for (int i = 0; i < tr->n_ctx; i++)
            if (tr->ctx[i] < 0 || tr->ctx[i] >= m->vocab)
                return vsr_err_set(err, VSR_E_INVALID, "tree %d: context token %d is id %d, outside the vocabulary of "
                                   "%lld", t, i, tr->ctx[i], (long long)m->vocab);
        for (int b = 0; b < tr->n_blocks; b++) {
            if ((st = check_block(m, tr, t, b, err))) return st;
            n_out += block_outputs(&tr->blocks[b]);
        }
        n_rows += tr->n_blocks;
    }
    if (!n_rows) return VSR_OK;
    v2_row *rows = calloc((size_t)n_rows, sizeof *rows);
    float *outs = malloc(sizeof(float) * (size_t)(n_out ? n_out : 1));
    float *hidden = NULL;
    int32_t const **ids = NULL, **pos = NULL;
    int *lens = NULL, *npos = NULL;
    st = VSR_OK;
    if (!rows || !outs) {
        st = vsr_err_set(err, VSR_E_NOMEM, "vela2 forward: out of memory");
        goto done;
    }
    for (int t = 0, r = 0; t < n_trees && !st; t++)
        for (int b = 0; b < trees[t].n_blocks && !st; b++) st = build_row(&trees[t], t, b, &rows[r++], err);
    if (st) goto done;
    ids = calloc((size_t)n_rows, sizeof *ids);
    pos = calloc((size_t)n_rows, sizeof *pos);
    lens = calloc((size_t)n_rows, sizeof *lens);
    npos = calloc((size_t)n_rows, sizeof *npos);
    if (!ids || !pos || !lens || !npos) {
        st = vsr_err_set(err, VSR_E_NOMEM, "vela2 forward: out of memory");
        goto done;
    }
    /* Forwards of consecutive rows under the token and row budgets; results stay in row order. */
    int64_t out_at = 0;
    for (int r0 = 0; r0 < n_rows && !st;) {
        int r1 = r0;
        int64_t tokens = 0, g = 0;
        while (r1 < n_rows && r1 - r0 < V2_BATCH_ROWS &&
               (r1 == r0 || (tokens + rows[r1].len <= V2_BATCH_TOKENS && g + rows[r1].n_pos <= V2_BATCH_GATHER))) {
            tokens += rows[r1].len;
            g += rows[r1].n_pos;
            r1++;
        }
        int nr = 0;
        for (int r = r0; r < r1; r++) {
            if (!rows[r].n_pos) continue; /* a span block with no word: nothing to read */
            ids[nr] = rows[r].ids, lens[nr] = rows[r].len, pos[nr] = rows[r].pos, npos[nr] = rows[r].n_pos;
            nr++;
        }
        if (nr) {
            float *nh = realloc(hidden, sizeof(float) * (size_t)g * (size_t)m->D);
            if (!nh) {
                st = vsr_err_set(err, VSR_E_NOMEM, "vela2 forward: out of memory for %lld hidden rows", (long long)g);
                break;
            }
            hidden = nh;
            if ((st = vsr_model_forward_gather(m->bb, nr, ids, lens, npos, pos, hidden, err))) break;
        }
        const float *h = hidden;
        for (int r = r0; r < r1 && !st; r++) {
            const vsr_v2_block *k = &trees[rows[r].tree].blocks[rows[r].block];
            rows[r].out_off = out_at;
            if (rows[r].n_pos) st = read_block(m, k, h, outs + out_at, err);
            if (st) vsr_err_prefix(err, "tree %d block %d", rows[r].tree, rows[r].block);
            h += (int64_t)rows[r].n_pos * m->D;
            out_at += block_outputs(k);
        }
        r0 = r1;
    }
    if (st) goto done;
    /* Every forward succeeded: now the blocks' outputs are written. */
    for (int r = 0; r < n_rows; r++) {
        const vsr_v2_block *k = &trees[rows[r].tree].blocks[rows[r].block];
        float *dst = k->kind == VSR_V2_BLOCK_SPAN ? k->span_logits : k->option_logits;
        int64_t n = block_outputs(k);
        if (n) memcpy(dst, outs + rows[r].out_off, sizeof(float) * (size_t)n);
    }
done:
    for (int r = 0; rows && r < n_rows; r++) {
        free(rows[r].ids);
        free(rows[r].pos);
    }
    free(rows);
    free(outs);
    free(hidden);
    free(ids);
    free(pos);
    free(lens);
    free(npos);
    return st;
}
