/* The comparison behind `vllm-srun compare` (src/engine/compare.c): the pick of each question
 * type with its margin (ties, a score on a rounding boundary), flip detection and |dp| over
 * synthetic answers and response bodies, the limits, the CSV parsed back and the PNG read back
 * with libpng. */
#include <math.h>
#include <png.h>

#include "test.h"
#include "vsr/compare.h"

static const char *const K3[] = {"a", "b", "c"};

static vsr_cmp_answer choice3(const double *p) {
    return (vsr_cmp_answer){.type = VSR_CMP_CHOICE, .n = 3, .keys = K3, .probs = p};
}
static vsr_cmp_answer score3(const double *p) {
    return (vsr_cmp_answer){.type = VSR_CMP_SCORE, .n = 3, .keys = K3, .probs = p};
}

TEST(pick_choice_argmax_tie_and_margin) {
    vsr_err err = {0};
    vsr_cmp_pick k;
    double p[3] = {0.2, 0.5, 0.3};
    vsr_cmp_answer a = choice3(p);
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 1 && !strcmp(k.label, "b") && fabs(k.margin - 0.2) < 1e-12 && k.value == 0.5);
    double t[3] = {0.4, 0.4, 0.2}; /* a tie: the first wins (as the runtime's `choice`), margin 0 */
    a = choice3(t);
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 0 && !strcmp(k.label, "a") && k.margin == 0.0);
    double bad[3] = {0.4, NAN, 0.2};
    a = choice3(bad);
    CHECK_ERR(vsr_cmp_pick_answer(&a, &k, &err), err, VSR_E_INVALID, "probability of 'b' is not finite");
}

TEST(pick_noul_at_half) {
    vsr_err err = {0};
    vsr_cmp_pick k;
    vsr_cmp_answer a = {.type = VSR_CMP_NOUL, .noul = 0.5};
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 1 && !strcmp(k.label, "true") && k.margin == 0.0);
    a.noul = 0.4999;
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 0 && !strcmp(k.label, "false") && fabs(k.margin - 0.0001) < 1e-12);
    a.noul = 0.9;
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 1 && fabs(k.margin - 0.4) < 1e-12);
}

TEST(pick_score_rounding_boundary) {
    vsr_err err = {0};
    vsr_cmp_pick k;
    /* expected score 0*0.25 + 1*0.5 + 2*0.25 = 1.0: level b, 0.5 from both boundaries */
    double p[3] = {0.25, 0.5, 0.25};
    vsr_cmp_answer a = score3(p);
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 1 && !strcmp(k.label, "b") && fabs(k.value - 1.0) < 1e-12 && fabs(k.margin - 0.5) < 1e-12);
    /* 1.49: level b, 0.01 from the 1.5 boundary */
    double q[3] = {0.0, 0.51, 0.49};
    a = score3(q);
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 1 && fabs(k.value - 1.49) < 1e-12 && fabs(k.margin - 0.01) < 1e-9);
    /* exactly 1.5 rounds up to c, margin 0 */
    double r[3] = {0.0, 0.5, 0.5};
    a = score3(r);
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 2 && !strcmp(k.label, "c") && k.margin == 0.0);
    /* 0.0: level a, 0.5 from the 0.5 boundary (the nearest one) */
    double s[3] = {1.0, 0.0, 0.0};
    a = score3(s);
    CHECK_OK(vsr_cmp_pick_answer(&a, &k, &err), err);
    CHECK(k.index == 0 && fabs(k.margin - 0.5) < 1e-12);
}

TEST(flips_and_dp_on_synthetic_answers) {
    vsr_err err = {0};
    vsr_compare c;
    vsr_compare_init(&c);
    /* choice: identical */
    double p1[3] = {0.7, 0.2, 0.1};
    vsr_cmp_answer a = choice3(p1), b = choice3(p1);
    CHECK_OK(vsr_compare_add(&c, 1, NULL, "same", &a, &b, &err), err);
    /* choice: a tie in A (first wins: a) against a clear b in B: a flip */
    double ta[3] = {0.45, 0.45, 0.1}, tb[3] = {0.44, 0.46, 0.1};
    a = choice3(ta);
    b = choice3(tb);
    CHECK_OK(vsr_compare_add(&c, 2, "s2", "tie", &a, &b, &err), err);
    /* score near the boundary: 1.49 vs 1.51 is a flip (b -> c) with |dp| 0.02 */
    double sa[3] = {0.0, 0.51, 0.49}, sb[3] = {0.0, 0.49, 0.51};
    a = score3(sa);
    b = score3(sb);
    CHECK_OK(vsr_compare_add(&c, 3, NULL, "lvl", &a, &b, &err), err);
    /* score moving inside its level: no flip */
    double sc[3] = {0.0, 0.9, 0.1}, sd[3] = {0.0, 0.8, 0.2};
    a = score3(sc);
    b = score3(sd);
    CHECK_OK(vsr_compare_add(&c, 4, NULL, "lvl2", &a, &b, &err), err);
    /* noul: 0.5 (true) vs 0.49 (false) flips; 0.9 vs 0.7 does not */
    vsr_cmp_answer na = {.type = VSR_CMP_NOUL, .noul = 0.5}, nb = {.type = VSR_CMP_NOUL, .noul = 0.49};
    CHECK_OK(vsr_compare_add(&c, 5, NULL, "yn", &na, &nb, &err), err);
    na.noul = 0.9;
    nb.noul = 0.7;
    CHECK_OK(vsr_compare_add(&c, 6, NULL, "yn2", &na, &nb, &err), err);
    /* failed in one package: a flip without |dp|; failed in both: not compared */
    vsr_cmp_answer ea = {.type = VSR_CMP_NOUL, .error = "max_length_exceeded"};
    nb.noul = 0.3;
    CHECK_OK(vsr_compare_add(&c, 7, NULL, "err1", &ea, &nb, &err), err);
    vsr_cmp_answer eb = ea;
    CHECK_OK(vsr_compare_add(&c, 8, NULL, "err2", &ea, &eb, &err), err);

    CHECK(c.t[VSR_CMP_CHOICE].count == 2 && c.t[VSR_CMP_CHOICE].agree == 1);
    CHECK(c.t[VSR_CMP_SCORE].count == 2 && c.t[VSR_CMP_SCORE].agree == 1);
    CHECK(c.t[VSR_CMP_NOUL].count == 3 && c.t[VSR_CMP_NOUL].agree == 1);
    CHECK(c.both_failed == 1);
    CHECK(vsr_compare_count(&c) == 7 && vsr_compare_flips(&c) == 4);
    CHECK(fabs(c.t[VSR_CMP_CHOICE].max_dp - 0.01) < 1e-12);
    CHECK(fabs(c.t[VSR_CMP_SCORE].max_dp - 0.1) < 1e-12);
    CHECK(fabs(c.t[VSR_CMP_NOUL].max_dp - 0.2) < 1e-12);
    CHECK(fabs(vsr_compare_max_dp(&c) - 0.2) < 1e-12);
    /* |dp| values: 3 + 3 + 3 + 3 + 1 + 1 = 14 (the failed question adds none) */
    CHECK(c.n_dps == 14);
    CHECK(c.n_rows == 7);
    const vsr_cmp_row *r = &c.rows[1];
    CHECK(r->flipped && !strcmp(r->state, "s2") && !strcmp(r->a.label, "a") && !strcmp(r->b.label, "b") &&
          r->a.margin == 0.0 && fabs(r->b.margin - 0.02) < 1e-12);
    r = &c.rows[2];
    CHECK(r->flipped && !strcmp(r->a.label, "b") && !strcmp(r->b.label, "c") && fabs(r->a.margin - 0.01) < 1e-9 &&
          fabs(r->b.margin - 0.01) < 1e-9);
    r = &c.rows[6];
    CHECK(r->flipped && !strcmp(r->a.label, "error:max_length_exceeded") && isnan(r->max_dp));

    /* limits */
    char why[512];
    CHECK(vsr_compare_check(&c, -1, -1, why, sizeof why) == 0 && why[0] == 0);
    CHECK(vsr_compare_check(&c, 0.6, 0.21, why, sizeof why) == 0);
    CHECK(vsr_compare_check(&c, 0.5, 0.21, why, sizeof why) == 1 &&
          strstr(why, "flip rate 0.5714 (4 of 7) is over --max-flip-rate 0.5"));
    CHECK(vsr_compare_check(&c, 0.6, 0.19, why, sizeof why) == 1 && strstr(why, "max |dp| 0.2 is over --max-prob-diff 0.19"));
    CHECK(vsr_compare_check(&c, 0, 0, why, sizeof why) == 2 && strstr(why, "--max-flip-rate") && strstr(why, "--max-prob-diff"));

    /* mismatched questions are refused */
    double p2[2] = {0.5, 0.5};
    static const char *const K2[] = {"a", "b"};
    vsr_cmp_answer two = {.type = VSR_CMP_CHOICE, .n = 2, .keys = K2, .probs = p2};
    a = choice3(p1);
    CHECK_ERR(vsr_compare_add(&c, 9, NULL, "q", &a, &two, &err), err, VSR_E_INVALID,
              "line 9, state (main), question 'q': the two answers have different options");
    CHECK_ERR(vsr_compare_add(&c, 9, NULL, "q", &a, &na, &err), err, VSR_E_INVALID, "types differ (choice, noul)");
    CHECK(vsr_compare_count(&c) == 7);
    vsr_compare_free(&c);
}

TEST(responses_pair_by_state_and_question) {
    vsr_err err = {0};
    vsr_compare c;
    vsr_compare_init(&c);
    const char *ra =
        "{\"model\":\"m\",\"answers\":{\"d\":{\"type\":\"choice\",\"choice\":\"x\",\"probabilities\":{\"x\":0.6,\"y\":0.4}},"
        "\"n\":{\"type\":\"noul\",\"noul\":0.2},"
        "\"s\":{\"type\":\"score\",\"score\":0.5,\"probabilities\":{\"lo\":0.5,\"hi\":0.5}}},"
        "\"states\":{\"two\":{\"model\":\"m\",\"answers\":{\"n\":{\"type\":\"noul\",\"noul\":0.8}}}}}";
    /* the same with B's keys in another order inside `answers` and one flip in state two */
    const char *rb =
        "{\"model\":\"m2\",\"answers\":{\"n\":{\"type\":\"noul\",\"noul\":0.25},"
        "\"d\":{\"type\":\"choice\",\"choice\":\"x\",\"probabilities\":{\"x\":0.55,\"y\":0.45}},"
        "\"s\":{\"type\":\"score\",\"score\":0.4,\"probabilities\":{\"lo\":0.6,\"hi\":0.4}}},"
        "\"states\":{\"two\":{\"model\":\"m2\",\"answers\":{\"n\":{\"type\":\"noul\",\"noul\":0.3}}}}}";
    CHECK_OK(vsr_compare_add_responses(&c, 3, ra, rb, &err), err);
    CHECK(vsr_compare_count(&c) == 4 && vsr_compare_flips(&c) == 2); /* s: 0.5 -> hi, 0.4 -> lo; two/n */
    CHECK(fabs(vsr_compare_max_dp(&c) - 0.5) < 1e-12);
    CHECK(c.n_rows == 4 && c.rows[3].state && !strcmp(c.rows[3].state, "two") && c.rows[3].flipped);
    /* the same body against itself: no flip, |dp| 0 */
    vsr_compare d;
    vsr_compare_init(&d);
    CHECK_OK(vsr_compare_add_responses(&d, 1, ra, ra, &err), err);
    CHECK(vsr_compare_flips(&d) == 0 && vsr_compare_max_dp(&d) == 0.0 && vsr_compare_count(&d) == 4);
    const char *missing = "{\"answers\":{\"d\":{\"type\":\"choice\",\"probabilities\":{\"x\":0.6,\"y\":0.4}},"
                          "\"q\":{\"type\":\"noul\",\"noul\":0.2},\"s\":{\"type\":\"noul\",\"noul\":0.2}}}";
    CHECK_ERR(vsr_compare_add_responses(&d, 5, ra, missing, &err), err, VSR_E_INVALID,
              "line 5, state (main): question 'n' is missing from B's response");
    CHECK_ERR(vsr_compare_add_responses(&d, 6, ra, "{", &err), err, VSR_E_INVALID, "line 6: B's response is not JSON");
    vsr_compare_free(&c);
    vsr_compare_free(&d);
}

/* A tiny CSV reader for the rows the writer produces (quoted fields with doubled quotes). */
static int csv_split(char *line, char **f, int max) {
    int n = 0;
    char *w = line, *p = line;
    while (n < max) {
        f[n++] = w;
        if (*p == '"') {
            p++;
            for (;;) {
                if (*p == '"' && p[1] == '"') {
                    *w++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else if (!*p) break;
                else *w++ = *p++;
            }
        } else
            while (*p && *p != ',' && *p != '\n') *w++ = *p++;
        if (*p == ',') {
            *w++ = 0;
            p++;
            continue;
        }
        *w = 0;
        break;
    }
    return n;
}

TEST(csv_parsed_back) {
    vsr_err err = {0};
    vsr_compare c;
    vsr_compare_init(&c);
    double pa[3] = {0.45, 0.45, 0.1}, pb[3] = {0.44, 0.46, 0.1};
    vsr_cmp_answer a = choice3(pa), b = choice3(pb);
    CHECK_OK(vsr_compare_add(&c, 2, "st,\"x\"", "q1", &a, &b, &err), err);
    vsr_cmp_answer na = {.type = VSR_CMP_NOUL, .noul = 0.9}, nb = {.type = VSR_CMP_NOUL, .noul = 0.8};
    CHECK_OK(vsr_compare_add(&c, 3, NULL, "q2", &na, &nb, &err), err);
    char path[1024];
    snprintf(path, sizeof path, "%s/c.csv", test_tmpdir());
    CHECK_OK(vsr_compare_write_csv(&c, path, &err), err);
    char *text = test_read_file(path, NULL);
    CHECK(text != NULL);
    if (!text) return;
    char *save = NULL, *ln = strtok_r(text, "\n", &save);
    char *f[16];
    CHECK(ln && csv_split(ln, f, 16) == 12 && !strcmp(f[0], "line") && !strcmp(f[11], "flipped"));
    ln = strtok_r(NULL, "\n", &save);
    CHECK(ln && csv_split(ln, f, 16) == 12);
    CHECK(!strcmp(f[0], "2") && !strcmp(f[1], "st,\"x\"") && !strcmp(f[2], "q1") && !strcmp(f[3], "choice") &&
          !strcmp(f[4], "a") && !strcmp(f[5], "b") && strtod(f[6], NULL) == 0.45 && strtod(f[8], NULL) == 0.0 &&
          fabs(strtod(f[9], NULL) - 0.02) < 1e-9 && fabs(strtod(f[10], NULL) - 0.01) < 1e-9 && !strcmp(f[11], "1"));
    ln = strtok_r(NULL, "\n", &save);
    CHECK(ln && csv_split(ln, f, 16) == 12);
    CHECK(!strcmp(f[0], "3") && !strcmp(f[1], "") && !strcmp(f[3], "noul") && !strcmp(f[4], "true") &&
          fabs(strtod(f[10], NULL) - 0.1) < 1e-9 && !strcmp(f[11], "0"));
    CHECK(strtok_r(NULL, "\n", &save) == NULL);
    free(text);
    snprintf(path, sizeof path, "%s/no/such/dir/c.csv", test_tmpdir());
    CHECK_ERR(vsr_compare_write_csv(&c, path, &err), err, VSR_E_IO, "cannot open for writing");
    vsr_compare_free(&c);
}

TEST(histogram_bins_and_png_read_back) {
    vsr_err err = {0};
    vsr_compare c;
    vsr_compare_init(&c);
    /* |dp| of 0 (x2), 1e-9 .. , 0.02, 0.5 */
    double pa[3] = {0.5, 0.3, 0.2}, pb[3] = {0.5, 0.28, 0.22};
    vsr_cmp_answer a = choice3(pa), b = choice3(pb);
    CHECK_OK(vsr_compare_add(&c, 1, NULL, "q", &a, &b, &err), err);
    vsr_cmp_answer na = {.type = VSR_CMP_NOUL, .noul = 0.9}, nb = {.type = VSR_CMP_NOUL, .noul = 0.4};
    CHECK_OK(vsr_compare_add(&c, 2, NULL, "n", &na, &nb, &err), err);
    long bins[VSR_CMP_PLOT_BINS];
    vsr_compare_histogram(&c, bins);
    /* 0 -> bin 0; 0.02 = 10^-1.7 -> 1 + floor(7.3*2) = 15; 0.5 = 10^-0.3 -> 1 + floor(8.7*2) = 18 */
    CHECK(bins[0] == 1 && bins[15] == 2 && bins[18] == 1);
    long total = 0;
    for (int i = 0; i < VSR_CMP_PLOT_BINS; i++) total += bins[i];
    CHECK(total == 4);

    char path[1024];
    snprintf(path, sizeof path, "%s/h.png", test_tmpdir());
    CHECK_OK(vsr_compare_plot_png(&c, path, 640, 320, &err), err);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    CHECK(png_image_begin_read_from_file(&img, path) != 0);
    CHECK(img.width == 640 && img.height == 320);
    img.format = PNG_FORMAT_RGB;
    unsigned char *px = malloc(PNG_IMAGE_SIZE(img));
    CHECK(px && png_image_finish_read(&img, NULL, px, 0, NULL) != 0);
    /* something was drawn: the bar colour appears and the corner is white */
    int blue = 0;
    for (size_t i = 0; px && i < (size_t)640 * 320; i++)
        if (px[3 * i] == 0x33 && px[3 * i + 1] == 0x66 && px[3 * i + 2] == 0xCC) blue++;
    CHECK(blue > 100);
    CHECK(px && px[0] == 255 && px[1] == 255 && px[2] == 255);
    free(px);
    png_image_free(&img);
    CHECK_ERR(vsr_compare_plot_png(&c, path, 10, 10, &err), err, VSR_E_INVALID, "--plot size 10x10");
    vsr_compare_free(&c);
}

int main(void) {
    RUN(pick_choice_argmax_tie_and_margin);
    RUN(pick_noul_at_half);
    RUN(pick_score_rounding_boundary);
    RUN(flips_and_dp_on_synthetic_answers);
    RUN(responses_pair_by_state_and_question);
    RUN(csv_parsed_back);
    RUN(histogram_bins_and_png_read_back);
    return test_summary();
}
