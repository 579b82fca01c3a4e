/* vllm-srun quantize's library side (src/quantize): the NVFP4 quantizer with a given global scale
 * equals the reference one when the scale is the tensor's own; option refusals; and the load-time
 * FP8 overlay (serve --quantize fp8-dynamic) gives the model loader exactly the tensors and the
 * config of the package `quantize --scheme fp8-dynamic` writes, so both serve the same answers.
 * tests/sh/quantize.sh covers the command, the written files and the compressed-tensors proof. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quantize/quantize_internal.h"
#include "test.h"
#include "vsr/calibrate.h"
#include "vsr/dtype.h"
#include "vsr/fixture.h"
#include "vsr/quant.h"
#include "vsr/quantize_pkg.h"

TEST(nvfp4_rows_equal_reference) {
    const int64_t N = 24, K = 64;
    uint16_t *w = malloc(sizeof *w * (size_t)(N * K));
    uint8_t *p1 = malloc((size_t)(N * K / 2)), *p2 = malloc((size_t)(N * K / 2));
    uint8_t *s1 = malloc((size_t)(N * K / 16)), *s2 = malloc((size_t)(N * K / 16));
    test_rng_seed(7);
    for (int64_t i = 0; i < N * K; i++) w[i] = vsr_f32_to_bf16(test_rndf() * (i % 97 == 0 ? 9.0f : 0.3f));
    w[5] = vsr_f32_to_bf16(-0.0f); /* the sign of a negative zero */
    float gs_ref;
    vsr_quantize_nvfp4_rtn(w, N, K, p1, s1, &gs_ref);
    float gs = qz_nvfp4_global_scale(qz_bf16_absmax(w, N * K));
    qz_nvfp4_rows(w, N, K, gs, p2, s2);
    CHECK(gs == gs_ref);
    CHECK(!memcmp(p1, p2, (size_t)(N * K / 2)));
    CHECK(!memcmp(s1, s2, (size_t)(N * K / 16)));
    /* a smaller shared scale (a fused sibling with a larger amax) changes the block scales */
    qz_nvfp4_rows(w, N, K, gs / 2, p2, s2);
    CHECK(memcmp(s1, s2, (size_t)(N * K / 16)) != 0);
    CHECK(qz_nvfp4_global_scale(0.0f) == 1.0f); /* an all-zero weight: inf -> 1, as nan_to_num */
    free(w), free(p1), free(p2), free(s1), free(s2);
}

TEST(scheme_names) {
    vsr_qscheme s;
    CHECK(vsr_qscheme_parse("fp8-dynamic", &s) && s == VSR_Q_FP8_DYNAMIC);
    CHECK(vsr_qscheme_parse("nvfp4", &s) && s == VSR_Q_NVFP4);
    CHECK(vsr_qscheme_parse("w4a16-awq", &s) && s == VSR_Q_W4A16_AWQ);
    CHECK(!vsr_qscheme_parse("fp8", &s));
    CHECK(!strcmp(vsr_qscheme_name(VSR_Q_W4A16_GPTQ), "w4a16-gptq"));
}

TEST(option_refusals) {
    vsr_err e = {0};
    vsr_quantize_opts o = {.scheme = "int3"};
    CHECK_ERR(vsr_quantize_check_opts(&o, &e), e, VSR_E_INVALID, "unknown scheme 'int3'");
    o = (vsr_quantize_opts){.scheme = "w4a16-gptq"};
    CHECK_ERR(vsr_quantize_check_opts(&o, &e), e, VSR_E_INVALID, "needs --calibration FILE.jsonl");
    o = (vsr_quantize_opts){.scheme = "w4a16-gptq", .calibration = "c.jsonl", .group_size = 20};
    CHECK_ERR(vsr_quantize_check_opts(&o, &e), e, VSR_E_INVALID, "positive multiple of 8");
    o = (vsr_quantize_opts){.scheme = "nvfp4", .actorder = true};
    CHECK_ERR(vsr_quantize_check_opts(&o, &e), e, VSR_E_INVALID, "--actorder applies only to w4a16-gptq");
    o = (vsr_quantize_opts){.scheme = "w4a16-awq", .calibration = "c.jsonl", .group_size = 64, .samples = 16};
    CHECK_OK(vsr_quantize_check_opts(&o, &e), e);
}

/* The overlay against the written FP8 package: same tensor set, dtypes, shapes and bytes. */
TEST(load_time_fp8_equals_written_package) {
    char bf16[512], fp8[512];
    snprintf(bf16, sizeof bf16, "%s/bf16", test_tmpdir());
    snprintf(fp8, sizeof fp8, "%s/fp8", test_tmpdir());
    vsr_err e = {0};
    vsr_fixture_opts fo = {.family = "decision3", .size = "tiny", .scheme = "bf16", .seed = 3};
    CHECK_OK(vsr_fixture_write(bf16, &fo, NULL, &e), e);
    vsr_quantize_opts qo = {.scheme = "fp8-dynamic"};
    vsr_quantize_info info;
    CHECK_OK(vsr_quantize_package(bf16, NULL, fp8, &qo, &info, &e), e);
    CHECK(info.n_quantized == 19 && info.n_ignored == 12);

    vsr_package *a = NULL, *b = NULL;
    CHECK_OK(vsr_package_open(bf16, NULL, NULL, &a, &e), e);
    CHECK_OK(vsr_package_open(fp8, NULL, NULL, &b, &e), e);
    if (!a || !b) goto done;
    /* before verify+map: refused */
    CHECK_ERR(vsr_package_quantize_fp8_at_load(a, 1, &e), e, VSR_E_INVALID, "must be verified first");
    CHECK_OK(vsr_package_verify(a, 1, NULL, &e), e);
    CHECK_OK(vsr_package_map(a, &e), e);
    CHECK_OK(vsr_package_verify(b, 1, NULL, &e), e);
    CHECK_OK(vsr_package_map(b, &e), e);
    char bf16_identity[65];
    memcpy(bf16_identity, a->model_sha256, 65);
    CHECK(vsr_fp8_at_load_weight_bytes(a) < a->device_weight_bytes);
    CHECK_OK(vsr_package_quantize_fp8_at_load(a, 2, &e), e);
    CHECK(!strcmp(a->model_sha256, bf16_identity)); /* the identity stays the BF16 package's */
    CHECK(vsr_weights_count(a->weights) == vsr_weights_count(b->weights));
    size_t same = 0;
    for (size_t i = 0; i < vsr_weights_count(b->weights); i++) {
        const vsr_tensor *tb = vsr_weights_at(b->weights, i), *ta = vsr_weights_find(a->weights, tb->name);
        bool ok = ta && ta->dtype == tb->dtype && ta->ndim == tb->ndim && ta->nbytes == tb->nbytes &&
                  !memcmp(ta->shape, tb->shape, sizeof(int64_t) * (size_t)tb->ndim) &&
                  !memcmp(ta->data, tb->data, tb->nbytes);
        CHECK_MSG(ok, "%s differs between the overlay and the written package", tb->name);
        same += ok;
    }
    CHECK(same == vsr_weights_count(b->weights));
    CHECK(a->quant.scheme == VSR_SCHEME_FP8 && b->quant.scheme == VSR_SCHEME_FP8);
    CHECK(a->quant.n_ignore == b->quant.n_ignore);
    for (int i = 0; i < a->quant.n_ignore && i < b->quant.n_ignore; i++) CHECK(!strcmp(a->quant.ignore[i], b->quant.ignore[i]));
    /* a second time: refused (already FP8) */
    CHECK_ERR(vsr_package_quantize_fp8_at_load(a, 1, &e), e, VSR_E_INVALID, "already FP8");
done:
    vsr_package_close(a);
    vsr_package_close(b);
}


/* The plan's refusals of a Linear the quantizers cannot hold, each naming the tensor: a weight not in BF16, one
 * whose data is not 2-byte aligned in its file, NVFP4's K % 16. The tiny package's first quantized Linear is
 * altered in memory (its mapped descriptor), one property at a time, and restored. */
TEST(plan_refuses_unquantizable_linears) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/plan", test_tmpdir());
    vsr_err e = {0};
    vsr_fixture_opts fo = {.family = "decision3", .size = "tiny", .scheme = "bf16", .seed = 3};
    CHECK_OK(vsr_fixture_write(dir, &fo, NULL, &e), e);
    vsr_package *p = NULL;
    CHECK_OK(vsr_package_open(dir, NULL, NULL, &p, &e), e);
    if (!p) return;
    CHECK_OK(vsr_package_verify(p, 1, NULL, &e), e);
    CHECK_OK(vsr_package_map(p, &e), e);
    qz_plan pl;
    CHECK_OK(qz_plan_make(p, VSR_Q_NVFP4, 0, false, NULL, 0, &pl, &e), e);
    /* the first quantized Linear of the plan, found again among the package's tensors */
    vsr_tensor *t = NULL;
    for (int i = 0; i < pl.n_lin && !t; i++)
        if (pl.lin[i].quantized) t = (vsr_tensor *)pl.lin[i].w;
    qz_plan_free(&pl);
    CHECK(t != NULL);
    if (!t) goto done;
    const vsr_tensor saved = *t;
    t->dtype = VSR_DT_F32;
    CHECK_ERR(qz_plan_make(p, VSR_Q_NVFP4, 0, false, NULL, 0, &pl, &e), e, VSR_E_UNSUPPORTED,
              "dtype F32; the quantizers read BF16 weights");
    CHECK(strstr(e.msg, t->name) != NULL);
    *t = saved;
    t->data = (const char *)t->data + 1;
    CHECK_ERR(qz_plan_make(p, VSR_Q_FP8_DYNAMIC, 0, false, NULL, 0, &pl, &e), e, VSR_E_UNSUPPORTED,
              "is not aligned to its 2-byte elements; rewrite the file with the safetensors writer");
    *t = saved;
    t->shape[1] = saved.shape[1] - 8; /* K % 16 == 8 */
    char want[160];
    snprintf(want, sizeof want, "in_features %lld is not a multiple of 16; NVFP4 cannot group it (add it to --ignore)",
             (long long)t->shape[1]);
    CHECK_ERR(qz_plan_make(p, VSR_Q_NVFP4, 0, false, NULL, 0, &pl, &e), e, VSR_E_UNSUPPORTED, want);
    /* the same shape is fine for FP8 (per-channel scales, no groups) */
    CHECK_OK(qz_plan_make(p, VSR_Q_FP8_DYNAMIC, 0, false, NULL, 0, &pl, &e), e);
    qz_plan_free(&pl);
    *t = saved;
done:
    vsr_package_close(p);
}


/* Calibration's Hessians against the host's available memory: the refusal names both and what to do. */
TEST(calib_memory_refusal) {
    vsr_err e = {0};
    const uint64_t gib = 1024ull * 1024 * 1024;
    CHECK_OK(qz_calib_memory_check(10 * gib, 4, 10 * gib, &e), e);
    CHECK_ERR(qz_calib_memory_check(188 * gib, 256, 120 * gib, &e), e, VSR_E_NOMEM,
              "calibration needs 188.0 GiB of host memory for the Hessians of 256 Linear inputs (8 K^2 bytes each, "
              "every layer's held at once); this host has 120.0 GiB available: quantize with --scheme fp8-dynamic or "
              "nvfp4 (no calibration), or on a host with more memory");
    /* the 27B shape's layer: q/k/v and gate/up read 5,120 inputs, o_proj 6,144, down_proj 17,408 */
    const char *mods[] = {"model.language_model.layers.3.self_attn.q_proj", "model.language_model.layers.3.self_attn.k_proj",
                          "model.language_model.layers.3.self_attn.v_proj", "model.language_model.layers.3.self_attn.o_proj",
                          "model.language_model.layers.3.mlp.gate_proj",    "model.language_model.layers.3.mlp.up_proj",
                          "model.language_model.layers.3.mlp.down_proj"};
    const int64_t Ks[] = {5120, 5120, 5120, 6144, 5120, 5120, 17408};
    int n_inputs = 0;
    uint64_t b = vsr_calib_hessian_bytes(mods, Ks, 7, &n_inputs);
    CHECK(n_inputs == 4);
    CHECK(b == 8ull * (5120ull * 5120 * 2 + 6144ull * 6144 + 17408ull * 17408));
}

int main(void) {
    RUN(nvfp4_rows_equal_reference);
    RUN(scheme_names);
    RUN(option_refusals);
    RUN(load_time_fp8_equals_written_package);
    RUN(plan_refuses_unquantizable_linears);
    RUN(calib_memory_refusal);
    return test_summary();
}
