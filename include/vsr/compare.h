/* vsr/compare.h: the evaluation gate of a quantized package against its BF16 baseline
 * (`vllm-srun compare`). Two packages answer the same /v1/decisions requests; this module
 * pairs their answers question by question and keeps, per question type:
 *   - the agreement of the chosen option: choice = arg-max (first on a tie, as the runtime's
 *     `choice`), score = the expected score rounded to the nearest level (x.5 rounds up),
 *     noul = true when the probability is >= 0.5;
 *   - max and mean |dp| over every option probability (noul: its one probability);
 *   - every flipped answer with both margins: choice top1 - top2, noul |p - 0.5|, score the
 *     distance of the expected score to the nearest rounding boundary (k + 0.5).
 * A question that fails in one package and is answered by the other counts as a flip; one that
 * fails in both is counted under `both_failed` and nothing else. */
#ifndef VSR_COMPARE_H
#define VSR_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vsr_cmp_type { VSR_CMP_CHOICE = 0, VSR_CMP_NOUL, VSR_CMP_SCORE, VSR_CMP_NTYPES } vsr_cmp_type;
const char *vsr_cmp_type_name(int type); /* "choice", "noul", "score" */

/* One answer as the response gives it. choice/score: n option keys and probabilities in the
 * response's order; noul: `noul` (keys/probs unused). `error` non-NULL: the question failed. */
typedef struct vsr_cmp_answer {
    int type; /* vsr_cmp_type */
    int n;
    const char *const *keys;
    const double *probs;
    double noul;
    const char *error;
} vsr_cmp_answer;

/* What an answer decides and how close it came to deciding otherwise. */
typedef struct vsr_cmp_pick {
    int index;      /* choice: option index; score: rounded level; noul: 1 true, 0 false; -1 failed */
    char label[96]; /* the option key, the level's key, "true"/"false", or "error:<code>" */
    double value;   /* choice: top1 probability; score: expected score; noul: probability */
    double margin;  /* see above; 0 on a tie; NAN for a failed question */
} vsr_cmp_pick;

/* Decides one answer. VSR_E_INVALID for an answer with no option, a probability that is not
 * finite, or an unknown type. */
vsr_status vsr_cmp_pick_answer(const vsr_cmp_answer *a, vsr_cmp_pick *out, vsr_err *err);

typedef struct vsr_cmp_row {
    int line;        /* 1-based line of the requests file */
    char *state;     /* NULL: the request's main state; else the `states` entry's name */
    char *question;  /* the question id */
    int type;
    vsr_cmp_pick a, b;
    double max_dp;   /* over the question's option probabilities; NAN when one side failed */
    bool flipped;
} vsr_cmp_row;

typedef struct vsr_cmp_stats {
    long count, agree;
    long n_dp;      /* option probabilities compared */
    double max_dp, sum_dp;
} vsr_cmp_stats;

typedef struct vsr_compare {
    vsr_cmp_stats t[VSR_CMP_NTYPES];
    long both_failed;
    vsr_cmp_row *rows; /* one per compared question (both answered or one failed) */
    size_t n_rows, cap_rows;
    double *dps;       /* every |dp|, for the histogram */
    size_t n_dps, cap_dps;
} vsr_compare;

void vsr_compare_init(vsr_compare *c);
void vsr_compare_free(vsr_compare *c);

/* Adds one question answered (or failed) by both packages. The two answers must have the same
 * type and, when both are answered, the same option keys in the same order. */
vsr_status vsr_compare_add(vsr_compare *c, int line, const char *state, const char *question,
                           const vsr_cmp_answer *a, const vsr_cmp_answer *b, vsr_err *err);
/* Adds every question of two /v1/decisions response bodies (the main `answers`, then each
 * `states` entry's), pairing them by state and question id. A body that is not a response, or
 * questions that do not pair, are VSR_E_INVALID naming the line and question. */
vsr_status vsr_compare_add_responses(vsr_compare *c, int line, const char *resp_a,
                                     const char *resp_b, vsr_err *err);

long vsr_compare_count(const vsr_compare *c);   /* questions compared, all types */
long vsr_compare_flips(const vsr_compare *c);
double vsr_compare_max_dp(const vsr_compare *c); /* 0 when nothing was compared */

/* Checks the limits (a negative limit is not checked). Returns how many were exceeded and
 * writes one line per exceeded limit into `why` (e.g. "flip rate 0.0833 (1 of 12) is over
 * --max-flip-rate 0"). */
int vsr_compare_check(const vsr_compare *c, double max_flip_rate, double max_prob_diff, char *why,
                      size_t why_size);

/* The human report: the per-type table and the list of flips. */
void vsr_compare_report(const vsr_compare *c, const char *name_a, const char *name_b, FILE *f);
/* One CSV row per compared question, with a header line. */
vsr_status vsr_compare_write_csv(const vsr_compare *c, const char *path, vsr_err *err);
/* The summary as JSON (what `bench --eval` reads): {"a":..,"b":..,"questions":N,"agreement":x,
 * "flips":N,"max_dp":x,"mean_dp":x,"types":{"choice":{...},...}}. */
vsr_status vsr_compare_write_json(const vsr_compare *c, const char *name_a, const char *name_b,
                                  const char *path, vsr_err *err);
/* A histogram of every |dp| as an RGB PNG of width x height pixels: log-spaced bins from 1e-9
 * to 1 (each decade split in 2), an extra bin at the left for |dp| = 0 (and below 1e-9), bars
 * scaled to the fullest bin, axes and a tick per decade. */
vsr_status vsr_compare_plot_png(const vsr_compare *c, const char *path, int width, int height,
                                vsr_err *err);
/* The bin counts the plot draws (n_bins = VSR_CMP_PLOT_BINS): bin 0 holds |dp| < 1e-9, bin
 * 1 + k holds 10^(-9 + k/2) <= |dp| < 10^(-9 + (k+1)/2), the last bin everything from 1. */
#define VSR_CMP_PLOT_BINS 20
void vsr_compare_histogram(const vsr_compare *c, long bins[VSR_CMP_PLOT_BINS]);

#ifdef __cplusplus
}
#endif

#endif
