/* The evaluation gate of one package against another (vsr/compare.h). */
#include "vsr/compare.h"

#include <jansson.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[VSR_CMP_NTYPES] = {"choice", "noul", "score"};

const char *vsr_cmp_type_name(int type) {
    return type >= 0 && type < VSR_CMP_NTYPES ? type_names[type] : "unknown";
}

static int type_of(const char *s) {
    for (int i = 0; s && i < VSR_CMP_NTYPES; i++)
        if (!strcmp(s, type_names[i])) return i;
    return -1;
}

vsr_status vsr_cmp_pick_answer(const vsr_cmp_answer *a, vsr_cmp_pick *out, vsr_err *err) {
    memset(out, 0, sizeof *out);
    if (a->error) {
        out->index = -1;
        out->value = NAN;
        out->margin = NAN;
        snprintf(out->label, sizeof out->label, "error:%s", a->error);
        return VSR_OK;
    }
    switch (a->type) {
    case VSR_CMP_NOUL:
        if (!isfinite(a->noul)) return vsr_err_set(err, VSR_E_INVALID, "noul answer is not finite");
        out->index = a->noul >= 0.5 ? 1 : 0;
        snprintf(out->label, sizeof out->label, "%s", out->index ? "true" : "false");
        out->value = a->noul;
        out->margin = fabs(a->noul - 0.5);
        return VSR_OK;
    case VSR_CMP_CHOICE:
    case VSR_CMP_SCORE:
        break;
    default:
        return vsr_err_set(err, VSR_E_INVALID, "unknown question type %d", a->type);
    }
    if (a->n < 1 || !a->probs || !a->keys)
        return vsr_err_set(err, VSR_E_INVALID, "%s answer has no probabilities",
                           vsr_cmp_type_name(a->type));
    for (int i = 0; i < a->n; i++)
        if (!isfinite(a->probs[i]))
            return vsr_err_set(err, VSR_E_INVALID, "%s answer: probability of '%s' is not finite",
                               vsr_cmp_type_name(a->type), a->keys[i]);
    if (a->type == VSR_CMP_CHOICE) {
        /* arg-max, the first on a tie (as the runtime's `choice`) */
        int best = 0;
        for (int i = 1; i < a->n; i++)
            if (a->probs[i] > a->probs[best]) best = i;
        double second = -INFINITY;
        for (int i = 0; i < a->n; i++)
            if (i != best && a->probs[i] > second) second = a->probs[i];
        out->index = best;
        out->value = a->probs[best];
        out->margin = a->n > 1 ? a->probs[best] - second : 1.0;
        snprintf(out->label, sizeof out->label, "%s", a->keys[best]);
        return VSR_OK;
    }
    /* score: the expected level index, rounded to the nearest level (x.5 rounds up) */
    double s = 0.0;
    for (int i = 0; i < a->n; i++) s += i * a->probs[i];
    int lvl = (int)floor(s + 0.5);
    if (lvl < 0) lvl = 0;
    if (lvl > a->n - 1) lvl = a->n - 1;
    out->index = lvl;
    out->value = s;
    /* distance to the nearest boundary k + 0.5 inside [0, n-1] (none when n == 1) */
    double m = INFINITY;
    for (int k = 0; k + 1 < a->n; k++) {
        double d = fabs(s - (k + 0.5));
        if (d < m) m = d;
    }
    out->margin = a->n > 1 ? m : 1.0;
    snprintf(out->label, sizeof out->label, "%s", a->keys[lvl]);
    return VSR_OK;
}

void vsr_compare_init(vsr_compare *c) { memset(c, 0, sizeof *c); }

void vsr_compare_free(vsr_compare *c) {
    for (size_t i = 0; i < c->n_rows; i++) {
        free(c->rows[i].state);
        free(c->rows[i].question);
    }
    free(c->rows);
    free(c->dps);
    memset(c, 0, sizeof *c);
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

vsr_status vsr_compare_add(vsr_compare *c, int line, const char *state, const char *question,
                           const vsr_cmp_answer *a, const vsr_cmp_answer *b, vsr_err *err) {
    const char *where = state ? state : "(main)";
    if (a->type != b->type || a->type < 0 || a->type >= VSR_CMP_NTYPES)
        return vsr_err_set(err, VSR_E_INVALID, "line %d, state %s, question '%s': types differ (%s, %s)",
                           line, where, question, vsr_cmp_type_name(a->type), vsr_cmp_type_name(b->type));
    if (a->error && b->error) {
        c->both_failed++;
        return VSR_OK;
    }
    if (!a->error && !b->error && a->type != VSR_CMP_NOUL) {
        bool same = a->n == b->n;
        for (int i = 0; same && i < a->n; i++) same = !strcmp(a->keys[i], b->keys[i]);
        if (!same)
            return vsr_err_set(err, VSR_E_INVALID,
                               "line %d, state %s, question '%s': the two answers have different options",
                               line, where, question);
    }
    vsr_cmp_row r = {.line = line, .type = a->type, .max_dp = NAN};
    vsr_status st;
    if ((st = vsr_cmp_pick_answer(a, &r.a, err)) != VSR_OK ||
        (st = vsr_cmp_pick_answer(b, &r.b, err)) != VSR_OK)
        return vsr_err_prefix(err, "line %d, state %s, question '%s'", line, where, question);
    int n = a->type == VSR_CMP_NOUL ? 1 : a->n;
    if (!grow((void **)&c->rows, &c->cap_rows, c->n_rows + 1, sizeof *c->rows) ||
        !grow((void **)&c->dps, &c->cap_dps, c->n_dps + (size_t)n, sizeof *c->dps))
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory comparing answers");
    vsr_cmp_stats *s = &c->t[a->type];
    if (!a->error && !b->error) {
        double mx = 0.0;
        for (int i = 0; i < n; i++) {
            double d = a->type == VSR_CMP_NOUL ? fabs(a->noul - b->noul) : fabs(a->probs[i] - b->probs[i]);
            c->dps[c->n_dps++] = d;
            s->sum_dp += d;
            s->n_dp++;
            if (d > mx) mx = d;
        }
        r.max_dp = mx;
        if (mx > s->max_dp) s->max_dp = mx;
    }
    r.flipped = r.a.index != r.b.index;
    r.state = dup_or_null(state);
    r.question = strdup(question);
    if ((state && !r.state) || !r.question) {
        free(r.state);
        free(r.question);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory comparing answers");
    }
    s->count++;
    if (!r.flipped) s->agree++;
    c->rows[c->n_rows++] = r;
    return VSR_OK;
}

/* Reads one answer object of a response; keys/probs point into arrays the caller frees. */
static vsr_status read_answer(json_t *o, vsr_cmp_answer *a, const char **keys, double *probs,
                              int max, vsr_err *err) {
    memset(a, 0, sizeof *a);
    if (!json_is_object(o)) return vsr_err_set(err, VSR_E_INVALID, "an answer is not an object");
    a->type = type_of(json_string_value(json_object_get(o, "type")));
    json_t *e = json_object_get(o, "error");
    if (e) {
        a->error = json_is_string(e) ? json_string_value(e) : "error";
        return VSR_OK;
    }
    if (a->type < 0) return vsr_err_set(err, VSR_E_INVALID, "an answer has no known type");
    if (a->type == VSR_CMP_NOUL) {
        json_t *v = json_object_get(o, "noul");
        if (!json_is_number(v)) return vsr_err_set(err, VSR_E_INVALID, "a noul answer has no number 'noul'");
        a->noul = json_number_value(v);
        return VSR_OK;
    }
    json_t *p = json_object_get(o, "probabilities");
    if (!json_is_object(p) || json_object_size(p) == 0 || (int)json_object_size(p) > max)
        return vsr_err_set(err, VSR_E_INVALID, "a %s answer has no usable 'probabilities'",
                           vsr_cmp_type_name(a->type));
    const char *k;
    json_t *v;
    int n = 0;
    json_object_foreach(p, k, v) {
        if (!json_is_number(v))
            return vsr_err_set(err, VSR_E_INVALID, "probability of '%s' is not a number", k);
        keys[n] = k;
        probs[n++] = json_number_value(v);
    }
    a->n = n;
    a->keys = keys;
    a->probs = probs;
    return VSR_OK;
}

#define MAX_OPTS 4096

static vsr_status add_answers(vsr_compare *c, int line, const char *state, json_t *ra, json_t *rb,
                              vsr_err *err) {
    const char *where = state ? state : "(main)";
    json_t *aa = json_object_get(ra, "answers"), *ab = json_object_get(rb, "answers");
    if (!json_is_object(aa) || !json_is_object(ab))
        return vsr_err_set(err, VSR_E_INVALID, "line %d, state %s: a response has no 'answers' object", line,
                           where);
    if (json_object_size(aa) != json_object_size(ab))
        return vsr_err_set(err, VSR_E_INVALID, "line %d, state %s: the responses answer %zu and %zu questions",
                           line, where, json_object_size(aa), json_object_size(ab));
    const char **ka = malloc(2 * MAX_OPTS * sizeof *ka);
    double *pa = malloc(2 * MAX_OPTS * sizeof *pa);
    if (!ka || !pa) {
        free(ka);
        free(pa);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory comparing answers");
    }
    vsr_status st = VSR_OK;
    const char *qid;
    json_t *qa;
    json_object_foreach(aa, qid, qa) {
        json_t *qb = json_object_get(ab, qid);
        vsr_cmp_answer x, y;
        if (!qb) {
            st = vsr_err_set(err, VSR_E_INVALID, "line %d, state %s: question '%s' is missing from B's response",
                             line, where, qid);
            break;
        }
        if ((st = read_answer(qa, &x, ka, pa, MAX_OPTS, err)) != VSR_OK ||
            (st = read_answer(qb, &y, ka + MAX_OPTS, pa + MAX_OPTS, MAX_OPTS, err)) != VSR_OK) {
            vsr_err_prefix(err, "line %d, state %s, question '%s'", line, where, qid);
            break;
        }
        if ((st = vsr_compare_add(c, line, state, qid, &x, &y, err)) != VSR_OK) break;
    }
    free(ka);
    free(pa);
    return st;
}

vsr_status vsr_compare_add_responses(vsr_compare *c, int line, const char *resp_a,
                                     const char *resp_b, vsr_err *err) {
    json_error_t je;
    json_t *ra = json_loads(resp_a, 0, &je);
    json_t *rb = ra ? json_loads(resp_b, 0, &je) : NULL;
    vsr_status st = VSR_OK;
    if (!ra || !rb) {
        st = vsr_err_set(err, VSR_E_INVALID, "line %d: %s's response is not JSON: %s", line, ra ? "B" : "A",
                         je.text);
        goto out;
    }
    if ((st = add_answers(c, line, NULL, ra, rb, err)) != VSR_OK) goto out;
    json_t *sa = json_object_get(ra, "states"), *sb = json_object_get(rb, "states");
    if (!sa && !sb) goto out;
    if (!json_is_object(sa) || !json_is_object(sb) || json_object_size(sa) != json_object_size(sb)) {
        st = vsr_err_set(err, VSR_E_INVALID, "line %d: the responses' 'states' differ", line);
        goto out;
    }
    const char *name;
    json_t *va;
    json_object_foreach(sa, name, va) {
        json_t *vb = json_object_get(sb, name);
        if (!vb) {
            st = vsr_err_set(err, VSR_E_INVALID, "line %d: state '%s' is missing from B's response", line, name);
            break;
        }
        if ((st = add_answers(c, line, name, va, vb, err)) != VSR_OK) break;
    }
out:
    json_decref(ra);
    json_decref(rb);
    return st;
}

long vsr_compare_count(const vsr_compare *c) {
    long n = 0;
    for (int t = 0; t < VSR_CMP_NTYPES; t++) n += c->t[t].count;
    return n;
}

long vsr_compare_flips(const vsr_compare *c) {
    long n = 0;
    for (int t = 0; t < VSR_CMP_NTYPES; t++) n += c->t[t].count - c->t[t].agree;
    return n;
}

double vsr_compare_max_dp(const vsr_compare *c) {
    double m = 0.0;
    for (int t = 0; t < VSR_CMP_NTYPES; t++)
        if (c->t[t].max_dp > m) m = c->t[t].max_dp;
    return m;
}

static double mean_dp(const vsr_compare *c) {
    double s = 0.0;
    long n = 0;
    for (int t = 0; t < VSR_CMP_NTYPES; t++) {
        s += c->t[t].sum_dp;
        n += c->t[t].n_dp;
    }
    return n ? s / n : 0.0;
}

int vsr_compare_check(const vsr_compare *c, double max_flip_rate, double max_prob_diff, char *why,
                      size_t why_size) {
    int bad = 0;
    size_t used = 0;
    if (why_size) why[0] = 0;
    long n = vsr_compare_count(c), f = vsr_compare_flips(c);
    double rate = n ? (double)f / n : 0.0;
    if (max_flip_rate >= 0 && rate > max_flip_rate) {
        bad++;
        if (used < why_size)
            used += snprintf(why + used, why_size - used, "flip rate %.4g (%ld of %ld) is over --max-flip-rate %g\n",
                             rate, f, n, max_flip_rate);
    }
    double mx = vsr_compare_max_dp(c);
    if (max_prob_diff >= 0 && mx > max_prob_diff) {
        bad++;
        if (used < why_size)
            snprintf(why + used, why_size - used, "max |dp| %.6g is over --max-prob-diff %g\n", mx, max_prob_diff);
    }
    return bad;
}

static const char *state_name(const vsr_cmp_row *r) { return r->state ? r->state : "(main)"; }

void vsr_compare_report(const vsr_compare *c, const char *name_a, const char *name_b, FILE *f) {
    fprintf(f, "A: %s\nB: %s\n\n", name_a, name_b);
    fprintf(f, "%-8s %8s %8s %10s %12s %12s\n", "type", "count", "flips", "agreement", "max |dp|", "mean |dp|");
    for (int t = 0; t < VSR_CMP_NTYPES; t++) {
        const vsr_cmp_stats *s = &c->t[t];
        fprintf(f, "%-8s %8ld %8ld %10.4f %12.4g %12.4g\n", type_names[t], s->count, s->count - s->agree,
                s->count ? (double)s->agree / s->count : 1.0, s->max_dp, s->n_dp ? s->sum_dp / s->n_dp : 0.0);
    }
    long n = vsr_compare_count(c), fl = vsr_compare_flips(c);
    fprintf(f, "%-8s %8ld %8ld %10.4f %12.4g %12.4g\n", "all", n, fl, n ? (double)(n - fl) / n : 1.0,
            vsr_compare_max_dp(c), mean_dp(c));
    if (c->both_failed) fprintf(f, "(%ld questions failed in both packages and are not compared)\n", c->both_failed);
    fprintf(f, "\nflipped answers: %ld\n", fl);
    if (!fl) return;
    fprintf(f, "%5s  %-12s %-16s %-7s %-14s %10s  %-14s %10s\n", "line", "state", "question", "type", "A", "A margin",
            "B", "B margin");
    for (size_t i = 0; i < c->n_rows; i++) {
        const vsr_cmp_row *r = &c->rows[i];
        if (!r->flipped) continue;
        fprintf(f, "%5d  %-12s %-16s %-7s %-14s %10.4g  %-14s %10.4g\n", r->line, state_name(r), r->question,
                type_names[r->type], r->a.label, r->a.margin, r->b.label, r->b.margin);
    }
}

/* A CSV field: quoted when it holds a comma, quote or line break. */
static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double v) {
    if (isnan(v)) return; /* empty field */
    fprintf(f, "%.9g", v);
}

vsr_status vsr_compare_write_csv(const vsr_compare *c, const char *path, vsr_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return vsr_err_set(err, VSR_E_IO, "--csv %s: cannot open for writing", path);
    fprintf(f, "line,state,question,type,a_answer,b_answer,a_value,b_value,a_margin,b_margin,max_abs_dp,flipped\n");
    for (size_t i = 0; i < c->n_rows; i++) {
        const vsr_cmp_row *r = &c->rows[i];
        fprintf(f, "%d,", r->line);
        csv_field(f, r->state ? r->state : "");
        fputc(',', f);
        csv_field(f, r->question);
        fprintf(f, ",%s,", type_names[r->type]);
        csv_field(f, r->a.label);
        fputc(',', f);
        csv_field(f, r->b.label);
        double v[5] = {r->a.value, r->b.value, r->a.margin, r->b.margin, r->max_dp};
        for (int k = 0; k < 5; k++) {
            fputc(',', f);
            csv_num(f, v[k]);
        }
        fprintf(f, ",%d\n", r->flipped ? 1 : 0);
    }
    if (fclose(f) != 0) return vsr_err_set(err, VSR_E_IO, "--csv %s: write failed", path);
    return VSR_OK;
}

vsr_status vsr_compare_write_json(const vsr_compare *c, const char *name_a, const char *name_b,
                                  const char *path, vsr_err *err) {
    long n = vsr_compare_count(c), fl = vsr_compare_flips(c);
    json_t *o = json_pack("{s:s,s:s,s:I,s:f,s:I,s:f,s:f,s:I}", "a", name_a, "b", name_b, "questions",
                          (json_int_t)n, "agreement", n ? (double)(n - fl) / n : 1.0, "flips", (json_int_t)fl,
                          "max_dp", vsr_compare_max_dp(c), "mean_dp", mean_dp(c), "both_failed",
                          (json_int_t)c->both_failed);
    if (!o) return vsr_err_set(err, VSR_E_NOMEM, "out of memory writing --json");
    json_t *types = json_object();
    for (int t = 0; t < VSR_CMP_NTYPES; t++) {
        const vsr_cmp_stats *s = &c->t[t];
        json_object_set_new(types, type_names[t],
                            json_pack("{s:I,s:I,s:f,s:f,s:f}", "count", (json_int_t)s->count, "flips",
                                      (json_int_t)(s->count - s->agree), "agreement",
                                      s->count ? (double)s->agree / s->count : 1.0, "max_dp", s->max_dp,
                                      "mean_dp", s->n_dp ? s->sum_dp / s->n_dp : 0.0));
    }
    json_object_set_new(o, "types", types);
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (rc) return vsr_err_set(err, VSR_E_IO, "--json %s: cannot write", path);
    return VSR_OK;
}

void vsr_compare_histogram(const vsr_compare *c, long bins[VSR_CMP_PLOT_BINS]) {
    memset(bins, 0, VSR_CMP_PLOT_BINS * sizeof *bins);
    for (size_t i = 0; i < c->n_dps; i++) {
        double d = c->dps[i];
        int b;
        if (!(d >= 1e-9)) b = 0;
        else if (d >= 1.0) b = VSR_CMP_PLOT_BINS - 1;
        else {
            b = 1 + (int)floor((log10(d) + 9.0) * 2.0);
            if (b < 1) b = 1;
            if (b > VSR_CMP_PLOT_BINS - 2) b = VSR_CMP_PLOT_BINS - 2;
        }
        bins[b]++;
    }
}

/* ---- the PNG: bars drawn into an RGB buffer ---- */

typedef struct canvas {
    int w, h;
    uint8_t *px;
} canvas;

static void fill(canvas *cv, int x0, int y0, int x1, int y1, uint32_t rgb) {
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > cv->w) x1 = cv->w;
    if (y1 > cv->h) y1 = cv->h;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            uint8_t *p = cv->px + ((size_t)y * cv->w + x) * 3;
            p[0] = (uint8_t)(rgb >> 16);
            p[1] = (uint8_t)(rgb >> 8);
            p[2] = (uint8_t)rgb;
        }
}

/* A 3x5 digit font for the decade labels ("-9" .. "0" as exponents of 10). */
static const uint16_t glyphs[11] = {
    0x7B6F, 0x2C97, 0x73E7, 0x73CF, 0x5BC9, 0x79CF, 0x79EF, 0x7249, 0x7BEF, 0x7BCF, 0x01C0 /* '-' */};

static void glyph(canvas *cv, int x, int y, int g, int scale, uint32_t rgb) {
    for (int r = 0; r < 5; r++)
        for (int col = 0; col < 3; col++)
            if (glyphs[g] >> (14 - (r * 3 + col)) & 1)
                fill(cv, x + col * scale, y + r * scale, x + (col + 1) * scale, y + (r + 1) * scale, rgb);
}

static int text_width(const char *s, int scale) { return (int)strlen(s) * 4 * scale - scale; }

static void text(canvas *cv, int x, int y, const char *s, int scale, uint32_t rgb) {
    for (; *s; s++, x += 4 * scale) {
        if (*s == '-') glyph(cv, x, y, 10, scale, rgb);
        else if (*s >= '0' && *s <= '9') glyph(cv, x, y, *s - '0', scale, rgb);
    }
}

/* Writes an 8-bit RGB image; 0 on success. */
static int write_png(FILE *f, int width, int height, uint8_t *px) {
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    if (!png) return 1;
    png_infop info = png_create_info_struct(png);
    if (!info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return 1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, px + (size_t)y * width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

vsr_status vsr_compare_plot_png(const vsr_compare *c, const char *path, int width, int height,
                                vsr_err *err) {
    if (width < 120 || height < 80 || width > 8192 || height > 8192)
        return vsr_err_set(err, VSR_E_INVALID, "--plot size %dx%d is outside 120x80 .. 8192x8192", width, height);
    long bins[VSR_CMP_PLOT_BINS];
    vsr_compare_histogram(c, bins);
    long top = 1;
    for (int i = 0; i < VSR_CMP_PLOT_BINS; i++)
        if (bins[i] > top) top = bins[i];
    canvas cv = {width, height, malloc((size_t)width * height * 3)};
    if (!cv.px) return vsr_err_set(err, VSR_E_NOMEM, "out of memory drawing --plot");
    fill(&cv, 0, 0, width, height, 0xFFFFFF);
    int scale = height >= 300 ? 2 : 1;
    int left = 40, right = width - 16, topy = 16, bottom = height - 12 - 7 * scale;
    /* axes */
    fill(&cv, left - 2, topy, left, bottom + 2, 0x000000);
    fill(&cv, left - 2, bottom, right, bottom + 2, 0x000000);
    double bw = (double)(right - left) / VSR_CMP_PLOT_BINS;
    for (int i = 0; i < VSR_CMP_PLOT_BINS; i++) {
        int x0 = left + (int)(i * bw) + 1, x1 = left + (int)((i + 1) * bw) - 1;
        int hpx = (int)((double)bins[i] / top * (bottom - topy - 4) + 0.5);
        if (bins[i] && hpx < 1) hpx = 1;
        fill(&cv, x0, bottom - hpx, x1, bottom, i == 0 ? 0x999999 : 0x3366CC);
    }
    /* a tick at each decade (bin edges 1 + 2k: 10^-9 .. 10^0), labelled with the exponent */
    for (int k = 0; k <= 9; k++) {
        int x = left + (int)((1 + 2 * k) * bw);
        fill(&cv, x - 1, bottom + 2, x + 1, bottom + 7, 0x000000);
        char lab[16];
        snprintf(lab, sizeof lab, "%d", k - 9);
        text(&cv, x - text_width(lab, scale) / 2, bottom + 9, lab, scale, 0x000000);
    }
    /* y ticks: 0, half and the fullest bin's count */
    for (int k = 0; k <= 2; k++) {
        int y = bottom - (int)(k * (bottom - topy - 4) / 2.0);
        fill(&cv, left - 7, y - 1, left - 2, y + 1, 0x000000);
        char lab[24];
        snprintf(lab, sizeof lab, "%ld", top * k / 2);
        text(&cv, left - 9 - text_width(lab, scale), y - 2 * scale, lab, scale, 0x000000);
    }
    vsr_status st = VSR_OK;
    FILE *f = fopen(path, "wb");
    if (!f) st = vsr_err_set(err, VSR_E_IO, "--plot %s: cannot open for writing", path);
    else {
        int rc = write_png(f, width, height, cv.px);
        if (fclose(f) != 0 && !rc) rc = 1;
        if (rc) st = vsr_err_set(err, VSR_E_IO, "--plot %s: libpng failed writing", path);
    }
    free(cv.px);
    return st;
}
