/* The decoder layout (reference-profiles-spans.md 3.3 "Rows", "Truncation order", "Windows";
 * 3.4; 3.6 dispatch).
 *
 * Rows map to trees: the first row carries every choice, noul, score and set question plus the
 * first span question, each further span question gets a row of its own; a row is one tree (the
 * shared context once, then one block per question). Every block attends to the context and to
 * itself only, so which blocks share a tree changes no answer; the rows still decide how the
 * context is truncated (`fit` protects the parts the row's questions read). A span target over
 * hybrid_rmax tokens is read in windows, each its own tree holding the span block only; the
 * row's own span block (which windows replace) is counted in usage but not run, since nothing
 * reads it. Every piece is tokenized on its own and the ids are concatenated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/strbuf.h"
#include "vela2/decide_internal.h"

#define PARTS_HEAD "Context:\n"
#define SEGMENT_CLOSE "\n</segment>\n"
#define TEXT_HEAD "\n\nText:\n"
#define PROMPT_FLOOR 64
#define MIN_PART_BUDGET 64
static const char SUFFIX_SELECT_ONE[] = "\n\nSelect the single option best supported by the context and instructions.\nDecision:";
static const char SUFFIX_SET[] = "\n\nSelect every option supported by the context and instructions.\nDecision:";
static const char SUFFIX_SPAN[] = "\n\nMark every span of the target text that carries one of the labels.\nSpans:";
static const char *const ABSTAIN[2] = {"[ABS]", "None of the shown options applies."};
static const char HALU_LABEL[] = "unsupported";
static const char HALU_DESCRIPTION[] = "a claim not supported by the context";

vsr_status v2_tokenize(const vsr_v2_decider *d, const char *s, int32_t **ids, int *n, vsr_err *err) {
    size_t nn = 0;
    vsr_status st = vsr_tokenizer_encode(d->tok, s, strlen(s), ids, &nn, err);
    *n = (int)nn;
    return st;
}

/* A token list being built. */
typedef struct ivec {
    int32_t *v;
    int n, cap;
    bool oom;
} ivec;

static void iv_put(ivec *a, const int32_t *x, int n) {
    if (a->oom || n <= 0) return;
    if (a->n + n > a->cap) {
        int cap = a->cap ? a->cap : 256;
        while (cap < a->n + n) cap *= 2;
        int32_t *p = realloc(a->v, sizeof *p * (size_t)cap);
        if (!p) {
            a->oom = true;
            return;
        }
        a->v = p;
        a->cap = cap;
    }
    memcpy(a->v + a->n, x, sizeof *x * (size_t)n);
    a->n += n;
}

/* ids of a piece appended; false on a tokenizer failure (err set). */
static bool iv_text(const vsr_v2_decider *d, ivec *a, const char *s, vsr_err *err) {
    int32_t *ids = NULL;
    int n = 0;
    if (v2_tokenize(d, s, &ids, &n, err) != VSR_OK) return false;
    iv_put(a, ids, n);
    free(ids);
    return true;
}

static int piece_len(const vsr_v2_decider *d, const char *s) {
    int32_t *ids = NULL;
    int n = 0;
    if (v2_tokenize(d, s, &ids, &n, NULL) != VSR_OK) return 0;
    free(ids);
    return n;
}

static char *segment_open(int role) {
    char *s = malloc(48);
    if (s) snprintf(s, 48, "<segment role=\"%s\">\n", v2_role_names[role]);
    return s;
}

static char *option_block(const char *key, const char *desc, const char *tag) {
    json_t *o = json_pack("{s:s,s:s}", "key", key, "description", desc);
    char *c = o ? v2_canonical(o) : NULL;
    json_decref(o);
    vsr_strbuf b = {0};
    vsr_strbuf_printf(&b, "\n<%s>\n%s\n</%s>", tag, c ? c : "", tag);
    free(c);
    return vsr_strbuf_take(&b, NULL);
}

static char *question_head(const char *kind, const v2_question *q, bool span) {
    vsr_strbuf b = {0};
    vsr_strbuf_printf(&b, "\n\nTask type: %s\nTarget: ", kind);
    for (int i = 0; i < q->n_over; i++) vsr_strbuf_printf(&b, "%s%s", i ? ", " : "", v2_role_names[q->over[i]]);
    vsr_strbuf_printf(&b, "\nQuestion:\n%s\n%s", q->text, span ? "Labels:" : "Options:");
    return vsr_strbuf_take(&b, NULL);
}

/* ---- part tokens, offsets and words ---- */

/* Token code point offsets of a part as a tokenizer reports them: each token's bytes laid
 * over the text it came from. The tokenizer normalises to NFC; where that changed the text,
 * a composed sequence (a starter and its combining marks) maps to its whole original range. */
static vsr_status part_offsets(const vsr_v2_decider *d, v2_part *p, vsr_err *err) {
    vsr_status st = v2_text_init(&p->t, p->text, strlen(p->text), err);
    if (st != VSR_OK) return st;
    p->tok = malloc(sizeof *p->tok * (size_t)(p->n_ids + 1));
    int32_t *tb = malloc(sizeof *tb * (size_t)(p->n_ids + 1)); /* byte end of each token (normalised) */
    if (!p->tok || !tb) {
        free(tb);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    }
    vsr_strbuf all = {0};
    for (int i = 0; i < p->n_ids; i++) {
        char *s = NULL;
        size_t n = 0;
        if ((st = vsr_tokenizer_decode(d->tok, &p->ids[i], 1, &s, &n, err)) != VSR_OK) {
            free(tb);
            vsr_strbuf_free(&all);
            return st;
        }
        vsr_strbuf_put(&all, s, n);
        tb[i] = (int32_t)all.n;
        free(s);
    }
    size_t nlen = 0;
    char *norm = vsr_strbuf_take(&all, &nlen);
    if (!norm) {
        free(tb);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    }
    /* chunk table: normalised byte start of each chunk and its original code point range */
    int32_t *cb = malloc(sizeof *cb * (size_t)(p->t.n + 2));
    v2_range *cr = malloc(sizeof *cr * (size_t)(p->t.n + 2));
    int nc = 0;
    bool same = nlen == p->t.len && !memcmp(norm, p->text, nlen);
    if (cb && cr) {
        if (same) {
            for (int32_t i = 0; i < p->t.n; i++) {
                cb[nc] = p->t.byte[i];
                cr[nc++] = (v2_range){i, i + 1};
            }
        } else {
            size_t at = 0;
            for (int32_t i = 0; i < p->t.n;) {
                int32_t j = i + 1;
                while (j < p->t.n && utf8proc_get_property((utf8proc_int32_t)p->t.cp[j])->combining_class) j++;
                utf8proc_uint8_t *c = NULL;
                utf8proc_ssize_t cl = utf8proc_map((const utf8proc_uint8_t *)p->text + p->t.byte[i], p->t.byte[j] - p->t.byte[i],
                                                   &c, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
                if (cl < 0 || at + (size_t)cl > nlen || memcmp(norm + at, c, (size_t)cl)) {
                    free(c);
                    nc = -1;
                    break;
                }
                bool unchanged = cl == p->t.byte[j] - p->t.byte[i];
                if (unchanged) {
                    for (int32_t k = i; k < j; k++) {
                        cb[nc] = (int32_t)at + (p->t.byte[k] - p->t.byte[i]);
                        cr[nc++] = (v2_range){k, k + 1};
                    }
                } else {
                    cb[nc] = (int32_t)at;
                    cr[nc++] = (v2_range){i, j};
                }
                at += (size_t)cl;
                free(c);
                i = j;
            }
            if (nc >= 0 && at != nlen) nc = -1;
        }
    }
    free(norm);
    if (!cb || !cr || nc < 0) {
        free(cb);
        free(cr);
        free(tb);
        return cb && cr ? vsr_err_set(err, VSR_E_INVALID, "the %s part could not be aligned with its tokens",
                                      v2_role_names[p->role])
                        : vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    }
    /* token [b0, b1) -> from the chunk holding b0 to the chunk holding b1 - 1 */
    int c = 0;
    int32_t b0 = 0;
    for (int i = 0; i < p->n_ids; i++) {
        int32_t b1 = tb[i];
        while (c + 1 < nc && cb[c + 1] <= b0) c++;
        int e = c;
        while (e + 1 < nc && cb[e + 1] <= b1 - 1) e++;
        p->tok[i] = b1 > b0 && nc ? (v2_range){cr[c].start, cr[e].end} : (v2_range){0, 0};
        b0 = b1;
    }
    free(cb);
    free(cr);
    free(tb);
    v2_range *units = NULL;
    int nu = v2_split_words(&p->t, &units);
    if (nu < 0) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    p->words = malloc(sizeof *p->words * (size_t)(nu + 1));
    p->first = malloc(sizeof *p->first * (size_t)(nu + 1));
    if (!p->words || !p->first) {
        free(units);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    }
    p->n_words = v2_words_of(units, nu, p->tok, p->n_ids, p->words, p->first);
    free(units);
    return p->n_words < 0 ? vsr_err_set(err, VSR_E_NOMEM, "out of memory") : VSR_OK;
}

/* ---- dispatch (3.6) ---- */

static void normalized(const char *s, char *out, size_t n) {
    size_t k = 0;
    for (; *s && k + 1 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '_' || c == '-') continue;
        out[k++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    out[k] = 0;
}

static bool halu_alias(const v2_question *q) {
    static const char *const aliases[] = {"unsupported", "unsupportedclaim", "hallucinated", "hallucination",
                                          "hallucinatedspan", "notsupported", "unsupportedspan", "fabricated",
                                          "fabrication"};
    if (q->n_opt != 1) return false;
    char n[256];
    normalized(q->names[0], n, sizeof n);
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(n, aliases[i])) return true;
    return false;
}

/* names as a set equal to the array of strings `set` */
static bool same_set(const v2_question *q, const json_t *set) {
    if (!json_is_array(set)) return false;
    for (int i = 0; i < q->n_opt; i++) {
        bool in = false;
        for (size_t k = 0; k < json_array_size(set) && !in; k++)
            in = json_is_string(json_array_get(set, k)) && !strcmp(json_string_value(json_array_get(set, k)), q->names[i]);
        if (!in) return false;
    }
    for (size_t k = 0; k < json_array_size(set); k++) {
        bool in = false;
        for (int i = 0; i < q->n_opt && !in; i++)
            in = json_is_string(json_array_get(set, k)) && !strcmp(json_string_value(json_array_get(set, k)), q->names[i]);
        if (!in) return false;
    }
    return true;
}

static void route(const vsr_v2_decider *d, v2_question *q) {
    q->routed = VSR_V2_HEAD_ROUTER;
    if (!d->broad) return;
    int head;
    if (q->head != V2_HEAD_NONE) {
        head = q->head;
    } else {
        bool router = !strcmp(q->key, "pii") || !strcmp(q->key, "halu") || !strcmp(q->key, "toxic");
        const json_t *sets = d->cal.router_label_sets;
        if (sets && json_array_size(sets)) {
            for (size_t i = 0; i < json_array_size(sets) && !router; i++) router = same_set(q, json_array_get(sets, i));
        } else if (!router) {
            /* default [pii_types, halu labels] */
            json_t *pii = json_array();
            for (int i = 0; i < d->cal.n_pii; i++) json_array_append_new(pii, json_string(d->cal.pii_types[i]));
            router = same_set(q, pii);
            json_decref(pii);
            const json_t *hs = d->cal.schema[1];
            if (!router && hs) {
                json_t *hl = json_array();
                const char *k;
                json_t *v;
                json_object_foreach(json_object_get(hs, "labels"), k, v) json_array_append_new(hl, json_string(k));
                router = same_set(q, hl);
                json_decref(hl);
            }
        }
        if (!router && q->n_opt > 0) {
            bool all = true;
            for (int i = 0; i < q->n_opt && all; i++) all = v2_is_pii_type(&d->cal, q->names[i]);
            router = all;
        }
        if (!router) router = halu_alias(q);
        head = router ? VSR_V2_HEAD_ROUTER : VSR_V2_HEAD_BROAD;
    }
    q->routed = head;
    if (head == VSR_V2_HEAD_ROUTER && halu_alias(q) && strcmp(q->names[0], HALU_LABEL)) {
        /* asked as the trained label, answered under the caller's name */
        const json_t *hs = d->cal.schema[1];
        const json_t *hd = hs ? json_object_get(json_object_get(hs, "labels"), HALU_LABEL) : NULL;
        q->alias = q->names[0];
        q->names[0] = strdup(HALU_LABEL);
        free(q->descs[0]);
        q->descs[0] = strdup(json_is_string(hd) ? json_string_value(hd) : HALU_DESCRIPTION);
    }
}

/* ---- fit (the truncation order) ---- */

typedef struct row_part {
    int role;
    const int32_t *ids;
    int n;              /* tokens available */
    int keep;           /* after fit */
    const v2_range *words;
    const int32_t *first; /* word first tokens, relative to ids */
    const int32_t *index; /* global word index per word (NULL: identity) */
    int n_words;
} row_part;

static int64_t over_by(int64_t fixed, int64_t schema, const row_part *parts, int n_parts, int64_t max_len) {
    int64_t sum = fixed + schema - max_len;
    for (int i = 0; i < n_parts; i++) sum += parts[i].keep;
    return sum;
}

/* The packages' truncation order on token costs: the part no question reads shrinks first (to
 * PROMPT_FLOOR, then to one token), then the parts the questions read, each to one token.
 * Returns the tokens still over (> 0: the row cannot fit). */
static int64_t fit(int64_t schema, row_part *parts, int n_parts, int64_t max_len, const bool *read, int shrink) {
    int64_t fixed = 2 + 1 + n_parts, o;
    for (int i = 0; i < n_parts; i++) parts[i].keep = parts[i].n;
    if (shrink >= 0) {
        row_part *s = &parts[shrink];
        if ((o = over_by(fixed, schema, parts, n_parts, max_len)) > 0) {
            int64_t keep = s->n < PROMPT_FLOOR ? s->n : PROMPT_FLOOR;
            if (s->keep - o > keep) keep = s->keep - o;
            s->keep = (int)keep;
        }
        if ((o = over_by(fixed, schema, parts, n_parts, max_len)) > 0) s->keep = (int)(s->keep - o > 1 ? s->keep - o : 1);
    }
    for (int i = 0; i < n_parts; i++)
        if (read[parts[i].role] && (o = over_by(fixed, schema, parts, n_parts, max_len)) > 0)
            parts[i].keep = (int)(parts[i].keep - o > 1 ? parts[i].keep - o : 1);
    return over_by(fixed, schema, parts, n_parts, max_len);
}

/* ---- rendering one row (or one window) into a tree ---- */

typedef struct cand {
    int q;
    ivec head, suffix, abstain;
    ivec *options;
    int n_opt;
    int64_t length;
} cand;

static void cand_free(cand *c) {
    free(c->head.v);
    free(c->suffix.v);
    free(c->abstain.v);
    for (int i = 0; i < c->n_opt; i++) free(c->options[i].v);
    free(c->options);
}

static bool blk_alloc_span(v2_blk *b, int n_words, int n_labels) {
    b->b.word_pos = malloc(sizeof(int32_t) * (size_t)(n_words + 1));
    b->word_index = malloc(sizeof(int32_t) * (size_t)(n_words + 1));
    b->b.label_begin = malloc(sizeof(int32_t) * (size_t)n_labels);
    b->b.label_end = malloc(sizeof(int32_t) * (size_t)n_labels);
    b->b.span_logits = calloc((size_t)(n_words + 1) * (size_t)n_labels, sizeof(float));
    return b->b.word_pos && b->word_index && b->b.label_begin && b->b.label_end && b->b.span_logits;
}

typedef struct render_out {
    v2_tree tree;        /* ctx and the blocks to run */
    int64_t rendered;    /* tokens as the packages render the row (span block included) */
    char err[256];       /* why the row cannot fit ("" when it fits) */
} render_out;

/* Renders the questions qs (indices into r->q; at most one span, last) over parts. */
static bool render(const vsr_v2_decider *d, v2_request *r, const int *qs, int nq, row_part *parts, int n_parts,
                   bool window, render_out *out, vsr_err *err) {
    memset(out, 0, sizeof *out);
    int64_t max_len = d->info.max_length;
    cand *cs = calloc((size_t)nq + 1, sizeof *cs);
    int nc = 0, span_q = -1;
    bool ok = false;
    ivec span_head = {0}, span_suffix = {0};
    ivec *labels = NULL;
    int n_labels = 0;
    if (!cs) return vsr_err_set(err, VSR_E_NOMEM, "out of memory"), false;
    int64_t schema = 0, overhead = piece_len(d, PARTS_HEAD);
    bool read[V2_ROLES] = {false, false, false};
    for (int i = 0; i < nq; i++) {
        v2_question *q = &r->q[qs[i]];
        for (int k = 0; k < q->n_over; k++) read[q->over[k]] = true;
        if (q->kind == V2_SPAN) {
            span_q = qs[i];
            n_labels = q->n_opt;
            labels = calloc((size_t)n_labels, sizeof *labels);
            if (!labels) goto oom;
            for (int l = 0; l < n_labels; l++) {
                char *ob = option_block(q->names[l], q->descs[l], "label");
                bool t = ob && iv_text(d, &labels[l], ob, err);
                free(ob);
                if (!t) goto fail;
                schema += 1 + labels[l].n;
            }
            continue;
        }
        cand *c = &cs[nc++];
        c->q = qs[i];
        const char *type = q->kind == V2_NOUL ? "choice" : v2_kind_names[q->kind];
        char *h = question_head(type, q, false);
        bool t = h && iv_text(d, &c->head, h, err);
        free(h);
        if (!t || !iv_text(d, &c->suffix, q->kind == V2_SET ? SUFFIX_SET : SUFFIX_SELECT_ONE, err)) goto fail;
        if (q->abstain) {
            char *ob = option_block(ABSTAIN[0], ABSTAIN[1], "option");
            t = ob && iv_text(d, &c->abstain, ob, err);
            free(ob);
            if (!t) goto fail;
        }
        c->n_opt = q->n_opt;
        c->options = calloc((size_t)q->n_opt, sizeof *c->options);
        if (!c->options) goto oom;
        c->length = 1 + c->head.n + c->suffix.n + c->abstain.n + (q->abstain ? 1 : 0);
        for (int o = 0; o < q->n_opt; o++) {
            char *ob = option_block(q->names[o], q->descs[o], "option");
            t = ob && iv_text(d, &c->options[o], ob, err);
            free(ob);
            if (!t) goto fail;
            c->length += 1 + c->options[o].n;
        }
        schema += c->length;
    }
    for (int p = 0; p < n_parts; p++) {
        char *so = segment_open(parts[p].role);
        overhead += (so ? piece_len(d, so) : 0) + piece_len(d, SEGMENT_CLOSE);
        free(so);
    }
    int sp = -1;
    bool repeat = false;
    if (span_q >= 0) {
        v2_question *q = &r->q[span_q];
        char *h = question_head("span", q, true);
        bool t = h && iv_text(d, &span_head, h, err);
        free(h);
        if (!t || !iv_text(d, &span_suffix, SUFFIX_SPAN, err)) goto fail;
        overhead += span_head.n + span_suffix.n;
        for (int p = 0; p < n_parts; p++)
            if (parts[p].role == q->over[0]) sp = p;
        int64_t target = parts[sp].n;
        repeat = target <= d->info.hybrid_rmax;
        if (repeat) {
            char *so = segment_open(q->over[0]);
            overhead += piece_len(d, TEXT_HEAD) + (so ? piece_len(d, so) : 0) + piece_len(d, SEGMENT_CLOSE);
            free(so);
            int64_t room = max_len - overhead > 0 ? (max_len - overhead) / 2 : 0;
            overhead += target < room ? target : room;
        }
    }
    int shrink = -1;
    for (int p = 0; p < n_parts && shrink < 0; p++)
        if (!read[parts[p].role]) shrink = p;
    int64_t budget = max_len - overhead > MIN_PART_BUDGET ? max_len - overhead : MIN_PART_BUDGET;
    int64_t over = fit(schema, parts, n_parts, budget, read, shrink);
    if (over > 0) {
        snprintf(out->err, sizeof out->err, "the questions alone exceed the input by %lld tokens", (long long)over);
        ok = true;
        goto done;
    }
    for (int i = 0; i < nq; i++)
        if (r->q[qs[i]].full_input)
            for (int p = 0; p < n_parts; p++)
                if (parts[p].keep < parts[p].n && !(window && p == sp)) {
                    snprintf(out->err, sizeof out->err, "full input was clipped to fit the question schema");
                    ok = true;
                    goto done;
                }
    /* the context */
    ivec ctx = {0};
    iv_text(d, &ctx, PARTS_HEAD, err);
    for (int p = 0; p < n_parts; p++) {
        char *so = segment_open(parts[p].role);
        if (!so || !iv_text(d, &ctx, so, err)) {
            free(so);
            free(ctx.v);
            goto fail;
        }
        free(so);
        iv_put(&ctx, parts[p].ids, parts[p].keep);
        iv_text(d, &ctx, SEGMENT_CLOSE, err);
    }
    if (ctx.oom) {
        free(ctx.v);
        goto oom;
    }
    out->tree.ctx = ctx.v;
    out->tree.n_ctx = ctx.n;
    out->rendered = ctx.n;
    out->tree.blocks = calloc((size_t)nq + 1, sizeof *out->tree.blocks);
    if (!out->tree.blocks) goto oom;
    for (int i = 0; i < nc; i++) {
        cand *c = &cs[i];
        v2_question *q = &r->q[c->q];
        ivec blk = {0};
        iv_put(&blk, c->head.v, c->head.n);
        int n_o = q->n_opt + (q->abstain ? 1 : 0);
        v2_blk *b = &out->tree.blocks[out->tree.n_blocks++];
        b->q = c->q;
        b->read = true;
        b->b.kind = VSR_V2_BLOCK_CANDIDATE;
        int32_t *ends = malloc(sizeof *ends * (size_t)n_o);
        b->b.option_logits = calloc((size_t)n_o, sizeof(float));
        if (!ends || !b->b.option_logits) {
            free(ends);
            free(blk.v);
            goto oom;
        }
        for (int o = 0; o < n_o; o++) {
            const ivec *ov = o < q->n_opt ? &c->options[o] : &c->abstain;
            iv_put(&blk, ov->v, ov->n);
            ends[o] = blk.n - 1;
        }
        iv_put(&blk, c->suffix.v, c->suffix.n);
        if (blk.oom) {
            free(ends);
            free(blk.v);
            goto oom;
        }
        b->b.ids = blk.v;
        b->b.n_ids = blk.n;
        b->b.n_options = n_o;
        b->b.option_end = ends;
        b->b.query_pos = blk.n - 1;
        b->b.set_bias = q->kind == V2_SET;
        out->rendered += blk.n;
    }
    if (span_q >= 0) {
        v2_question *q = &r->q[span_q];
        row_part *tp = &parts[sp];
        ivec blk = {0};
        iv_put(&blk, span_head.v, span_head.n);
        v2_blk *b = &out->tree.blocks[out->tree.n_blocks++];
        b->q = span_q;
        b->b.kind = VSR_V2_BLOCK_SPAN;
        b->b.head = (vsr_v2_head)q->routed;
        b->b.n_labels = n_labels;
        if (!blk_alloc_span(b, tp->n_words, n_labels)) goto oom;
        for (int l = 0; l < n_labels; l++) {
            ((int32_t *)b->b.label_begin)[l] = blk.n;
            iv_put(&blk, labels[l].v, labels[l].n);
            ((int32_t *)b->b.label_end)[l] = blk.n - 1;
        }
        int kept = tp->keep;
        if (repeat) {
            iv_text(d, &blk, TEXT_HEAD, err);
            char *so = segment_open(q->over[0]);
            if (so) iv_text(d, &blk, so, err);
            free(so);
            int nw = 0;
            for (int w = 0; w < tp->n_words; w++)
                if (tp->first[w] < kept) {
                    ((int32_t *)b->b.word_pos)[nw] = blk.n + tp->first[w];
                    b->word_index[nw++] = tp->index ? tp->index[w] : w;
                }
            b->b.n_words = nw;
            iv_put(&blk, tp->ids, kept);
            iv_text(d, &blk, SEGMENT_CLOSE, err);
        }
        iv_put(&blk, span_suffix.v, span_suffix.n);
        if (blk.oom) {
            free(blk.v);
            goto oom;
        }
        b->b.ids = blk.v;
        b->b.n_ids = blk.n;
        b->read = repeat;
        out->rendered += blk.n;
    }
    /* the model's limit: the context and its longest block */
    int64_t longest = 0;
    for (int i = 0; i < out->tree.n_blocks; i++)
        if (out->tree.blocks[i].read && out->tree.blocks[i].b.n_ids > longest) longest = out->tree.blocks[i].b.n_ids;
    if (out->tree.n_ctx + longest > max_len)
        snprintf(out->err, sizeof out->err,
                 "the context (%d tokens) and its longest question block (%lld tokens) exceed the model's maximum "
                 "of %lld tokens", out->tree.n_ctx, (long long)longest, (long long)max_len);
    ok = true;
    goto done;
oom:
    vsr_err_set(err, VSR_E_NOMEM, "out of memory rendering the prompt");
fail:
    ok = false;
done:
    for (int i = 0; i < nc; i++) cand_free(&cs[i]);
    free(cs);
    for (int l = 0; l < n_labels && labels; l++) free(labels[l].v);
    free(labels);
    free(span_head.v);
    free(span_suffix.v);
    return ok;
}

static void tree_free(v2_tree *t) {
    for (int i = 0; i < t->n_blocks; i++) {
        v2_blk *b = &t->blocks[i];
        free((void *)b->b.ids);
        free((void *)b->b.word_pos);
        free((void *)b->b.label_begin);
        free((void *)b->b.label_end);
        free(b->b.span_logits);
        free((void *)b->b.option_end);
        free(b->b.option_logits);
        free(b->word_index);
    }
    free(t->blocks);
    free(t->ctx);
    memset(t, 0, sizeof *t);
}

void v2_trees_free(v2_request *r) {
    for (int i = 0; i < r->n_trees; i++) tree_free(&r->trees[i]);
    free(r->trees);
    r->trees = NULL;
    r->n_trees = 0;
}

static bool push_tree(v2_request *r, v2_tree *t) {
    v2_tree *p = realloc(r->trees, sizeof *p * (size_t)(r->n_trees + 1));
    if (!p) return false;
    r->trees = p;
    p[r->n_trees++] = *t;
    return true;
}

static void row_fail(v2_request *r, const int *qs, int nq, const char *why) {
    for (int i = 0; i < nq; i++)
        v2_qfail(&r->q[qs[i]], "max_length_exceeded", "question '%s' cannot fit the model's input: %s", r->q[qs[i]].id, why);
}

/* Every window of a span part that is too long to repeat (its own tree each). */
static bool windows(const vsr_v2_decider *d, v2_request *r, int span_q, int row, vsr_err *err) {
    v2_question *q = &r->q[span_q];
    int tp = v2_part_index(r, q->over[0]);
    v2_part *part = &r->parts[tp];
    v2_range *ws = NULL;
    int nw = v2_word_windows(part->first, part->n_words, part->n_ids, d->info.window, d->info.stride, &ws);
    if (nw < 0) return vsr_err_set(err, VSR_E_NOMEM, "out of memory"), false;
    if (q->full_input) {
        /* every word's tokens whole inside some window */
        for (int w = 0; w < part->n_words; w++) {
            int end_tok = part->first[w];
            while (end_tok < part->n_ids && part->tok[end_tok].start < part->words[w].end) end_tok++;
            bool whole = false;
            for (int k = 0; k < nw && !whole; k++) whole = part->first[w] >= ws[k].start && end_tok <= ws[k].end;
            if (!whole) {
                row_fail(r, &span_q, 1, "full input contains a word split across every window");
                free(ws);
                return true;
            }
        }
    }
    bool ok = true;
    int32_t *first = malloc(sizeof *first * (size_t)(part->n_words + 1));
    int32_t *index = malloc(sizeof *index * (size_t)(part->n_words + 1));
    v2_range *words = malloc(sizeof *words * (size_t)(part->n_words + 1));
    if (!first || !index || !words) ok = (vsr_err_set(err, VSR_E_NOMEM, "out of memory"), false);
    for (int k = 0; k < nw && ok && !q->err_code; k++) {
        int n = 0;
        for (int w = 0; w < part->n_words; w++)
            if (part->first[w] >= ws[k].start && part->first[w] < ws[k].end) {
                first[n] = part->first[w] - ws[k].start;
                words[n] = part->words[w];
                index[n++] = w;
            }
        row_part rp[V2_ROLES];
        for (int p = 0; p < r->n_parts; p++) {
            v2_part *pp = &r->parts[p];
            rp[p] = (row_part){.role = pp->role, .ids = pp->ids, .n = pp->n_ids};
            if (p == tp) {
                rp[p].ids = pp->ids + ws[k].start;
                rp[p].n = ws[k].end - ws[k].start;
                rp[p].words = words;
                rp[p].first = first;
                rp[p].index = index;
                rp[p].n_words = n;
            }
        }
        render_out ro;
        if (!render(d, r, &span_q, 1, rp, r->n_parts, true, &ro, err)) {
            ok = false;
            break;
        }
        r->tokens += ro.rendered;
        if (ro.err[0]) {
            row_fail(r, &span_q, 1, ro.err);
            tree_free(&ro.tree);
            break;
        }
        ro.tree.row = row;
        ro.tree.window = true;
        if (!push_tree(r, &ro.tree)) {
            tree_free(&ro.tree);
            ok = (vsr_err_set(err, VSR_E_NOMEM, "out of memory"), false);
        }
    }
    free(first);
    free(index);
    free(words);
    free(ws);
    return ok;
}

static bool layout_row(const vsr_v2_decider *d, v2_request *r, const int *qs, int nq, int row, vsr_err *err) {
    int span_q = -1;
    for (int i = 0; i < nq; i++) {
        r->q[qs[i]].row = row;
        if (r->q[qs[i]].kind == V2_SPAN) span_q = qs[i];
    }
    row_part rp[V2_ROLES];
    for (int p = 0; p < r->n_parts; p++) {
        v2_part *pp = &r->parts[p];
        rp[p] = (row_part){.role = pp->role, .ids = pp->ids, .n = pp->n_ids, .words = pp->words, .first = pp->first,
                           .n_words = pp->n_words};
    }
    bool windowed = false;
    if (span_q >= 0) {
        route(d, &r->q[span_q]);
        int tp = v2_part_index(r, r->q[span_q].over[0]);
        if (rp[tp].n > d->info.hybrid_rmax) {
            if (r->q[span_q].truncate) rp[tp].n = (int)d->info.hybrid_rmax; /* read its first tokens only */
            else windowed = true;
        }
    }
    render_out ro;
    if (!render(d, r, qs, nq, rp, r->n_parts, false, &ro, err)) return false;
    r->tokens += ro.rendered;
    if (ro.err[0]) {
        row_fail(r, qs, nq, ro.err);
        tree_free(&ro.tree);
        return true;
    }
    ro.tree.row = row;
    if (!push_tree(r, &ro.tree)) {
        tree_free(&ro.tree);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory"), false;
    }
    return windowed ? windows(d, r, span_q, row, err) : true;
}

bool v2_layout(const vsr_v2_decider *d, v2_request *r, vsr_http_error *h) {
    vsr_err err = {0};
    bool span_reads[V2_ROLES] = {false, false, false};
    for (int i = 0; i < r->n_q; i++)
        if (!r->q[i].err_code && r->q[i].kind == V2_SPAN) span_reads[r->q[i].over[0]] = true;
    for (int p = 0; p < r->n_parts; p++) {
        v2_part *pp = &r->parts[p];
        if (v2_tokenize(d, pp->text, &pp->ids, &pp->n_ids, &err) != VSR_OK ||
            (span_reads[pp->role] && part_offsets(d, pp, &err) != VSR_OK)) {
            /* a part that cannot be read fails the questions that read it */
            for (int i = 0; i < r->n_q; i++) {
                v2_question *q = &r->q[i];
                for (int k = 0; k < q->n_over && !q->err_code; k++)
                    if (q->over[k] == pp->role) v2_qfail(q, "invalid_input", "%s", err.msg);
            }
            if (!pp->ids) {
                pp->n_ids = 0;
            }
            pp->with_words = false;
            if (!pp->words) pp->n_words = 0;
            continue;
        }
        pp->with_words = span_reads[pp->role];
    }
    int *qs = malloc(sizeof *qs * (size_t)(r->n_q + 1));
    if (!qs) goto oom;
    int nq = 0, first_span = -1;
    for (int i = 0; i < r->n_q; i++) {
        if (r->q[i].err_code) continue;
        if (r->q[i].kind != V2_SPAN) qs[nq++] = i;
        else if (first_span < 0) first_span = i;
    }
    if (first_span >= 0) qs[nq++] = first_span;
    int row = 0;
    if (nq && !layout_row(d, r, qs, nq, row++, &err)) goto fail;
    for (int i = 0; i < r->n_q; i++)
        if (!r->q[i].err_code && r->q[i].kind == V2_SPAN && i != first_span && !layout_row(d, r, &i, 1, row++, &err))
            goto fail;
    free(qs);
    return true;
oom:
    vsr_err_set(&err, VSR_E_NOMEM, "out of memory");
fail:
    free(qs);
    if (h) {
        h->status = err.code == VSR_E_NOMEM ? 500 : 400;
        h->code = err.code == VSR_E_NOMEM ? "internal_error" : "invalid_request";
        snprintf(h->message, sizeof h->message, "%.500s", err.msg);
    }
    return false;
}
