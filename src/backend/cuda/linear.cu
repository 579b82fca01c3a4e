/* src/backend/cuda/linear.cu: the linear op (backend.h linear): y[M, N] (+)= x[M, K] . W[N, K]^T.
 *
 * BF16 weights: the FP32 activations are rounded to BF16 (one pass, k_f32_to_bf16, or the producer's BF16
 * twin read instead) and cuBLASLt runs BF16 x BF16 with FP32 accumulation and FP32 output (beta = 1 to
 * accumulate). This is what transformers does in bf16 up to the output rounding, and it lets the GEMM use the
 * tensor cores at full rate; the CPU reference keeps FP32 activations, so the two differ by the activation
 * rounding (~2^-9 relative per element). FP32 weights (the readout) use cuBLASLt's true FP32 compute
 * (CUBLAS_COMPUTE_32F, no TF32). int4 and FP8 weights go to the hooks of cuda_internal.h (quant_int4.cu,
 * quant_fp8.cu). cuBLASLt plans are cached per shape; with --autotune-cache the heuristic's candidates, and
 * a widened search over tile, split-K and stage configurations, are timed once (autotune.cu) and recorded.
 * A linear declared with keep_product_bf16 writes its product only in BF16 (linear_keep_bf16).
 *
 * Floor: max(bytes of W and x read + y written / 4.19 TB/s, 2 M N K / 774 TFLOP/s BF16) (bench_cuda's
 * floor_us; bench/RESULTS.md has today's figures). Tests: tests/test_cuda_ops.c (linear against the CPU
 * oracle), tests/test_cuda_gemm.c (the widened cuBLASLt search), tests/test_cuda_fused.c (twin inputs and
 * kept products). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/ops_internal.cuh" /* first: wraps the C headers in extern "C" */

void plan_destroy(lt_plan *p) {
    if (!p->used) return;
    cublasLtMatmulDescDestroy(p->desc);
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    p->used = 0;
}

static vsr_status lt_err(cuda_ctx *c, cublasStatus_t s, const char *what, vsr_err *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return VSR_OK;
    return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: cuBLASLt %s: status %d", c->device, what, (int)s);
}

static vsr_status lt_plan_get(cuda_ctx *c, cudaDataType_t ty, cudaDataType_t dty, int64_t M, int64_t N, int64_t K,
                              lt_plan **out, vsr_err *err) {
    lt_cache *lc = &((cuda_ctx_priv *)c)->lt;
    for (int i = 0; i < LT_PLANS; i++) {
        lt_plan *p = &lc->p[i];
        if (p->used && p->ty == ty && p->dty == dty && p->M == M && p->N == N && p->K == K) {
            *out = p;
            return VSR_OK;
        }
    }
    lt_plan *p = &lc->p[lc->next];
    lc->next = (lc->next + 1) % LT_PLANS;
    plan_destroy(p);
    memset(p, 0, sizeof *p);
    p->ty = ty, p->dty = dty, p->M = M, p->N = N, p->K = K;
    /* column-major view: D[N, M] = op(W)[N, K] . B[K, M], W stored K x N (ld K) transposed */
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    vsr_status st;
    if ((st = lt_err(c, cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F), "desc", err))) return st;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB);
    if ((st = lt_err(c, cublasLtMatrixLayoutCreate(&p->la, ty, (uint64_t)K, (uint64_t)N, K), "layout A", err)) ||
        (st = lt_err(c, cublasLtMatrixLayoutCreate(&p->lb, ty, (uint64_t)K, (uint64_t)M, K), "layout B", err)) ||
        (st = lt_err(c, cublasLtMatrixLayoutCreate(&p->lc, dty, (uint64_t)N, (uint64_t)M, N), "layout C", err))) {
        p->used = 1;
        plan_destroy(p);
        return st;
    }
    p->used = 1;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t ws = c->lt_ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res[LT_ALGOS];
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, LT_ALGOS, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found < 1) {
        plan_destroy(p);
        return vsr_err_set(err, VSR_E_DEVICE, "cuda:%d: cuBLASLt has no algorithm for %s [%lld x %lld] . [%lld x %lld]^T "
                           "(status %d)", c->device, ty == CUDA_R_16BF ? "bf16" : "f32", (long long)M, (long long)K,
                           (long long)N, (long long)K, (int)s);
    }
    p->n_algos = 0;
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) p->algos[p->n_algos++] = res[i].algo;
    if (!p->n_algos) p->algos[p->n_algos++] = res[0].algo;
    p->chosen = -1;
    *out = p;
    return VSR_OK;
}

typedef struct lt_tune {
    lt_plan *p;
    const void *A, *W;
    const cublasLtMatmulAlgo_t *algos; /* the candidates autotune_choose indexes */
} lt_tune;

/* autotune launch of candidate `cand` into out; one cuBLASLt refuses is skipped (very slow) */
static int lt_launch(cuda_ctx *c, int cand, void *arg, void *out, vsr_err *err) {
    (void)err;
    lt_tune *t = (lt_tune *)arg;
    lt_plan *p = t->p;
    float alpha = 1.0f, beta = 0.0f;
    if (cublasLtMatmul(c->lt, p->desc, &alpha, t->W, p->la, t->A, p->lb, &beta, out, p->lc, out, p->lc,
                       &t->algos[cand], c->lt_ws, c->lt_ws_bytes, c->stream) == CUBLAS_STATUS_SUCCESS)
        return 0;
    (void)cudaGetLastError();
    return TUNE_SKIP;
}

/* ---- widened cuBLASLt search (BF16 operands, with --autotune-cache) ----
 * The heuristic's top 16 are what cuBLASLt predicts; at M = 384 (3 x 128 tokens) its tiles leave
 * the last wave mostly empty (128x256 on N = 34816: 3 x 136 = 408 tiles on 132 SMs). The search
 * enumerates every algorithm id (cublasLtMatmulAlgoGetIds) with the tiles, stages, split-K and
 * reduction schemes, CTA swizzle and cluster shapes its capabilities allow, keeps what
 * cublasLtMatmulAlgoCheck accepts, times the most promising structures briefly (stage 1), expands
 * the best few over stages and swizzle (stage 2) and lets autotune_choose time those with the
 * heuristic's own 16 and record the winner. A configuration is recorded by name
 * ("id<algo>-t<tile>-s<stages>-sk<splits>-r<reduction>-w<swizzle>-o<custom>-i<inner>-c<cluster>",
 * the cuBLASLt enum values) and later processes rebuild exactly that algorithm from the name
 * (cublasLtMatmulAlgoInit + the nine config attributes) and check it, so split-K's summation order
 * is reproduced bit for bit; a name the device rejects is refused with the file's name.
 * Off by default: VSR_CUDA_LT_SEARCH=1 turns it on (first H200 run, 2026-11-29: no reliable gain over
 * the heuristic's 16 once a later process loads the winner; bench/notes/2026-11-29-cuda-sessions.md "Widened cuBLASLt search").
 * Otherwise the previous behaviour (the heuristic's 16, recorded by index under "lt_gemm"). */

/* tile id -> rows x columns of D's tile, index = cublasLtMatmulTile_t (CUDA 13 header, ids 0-634) */
static const uint16_t LT_TILE_MN[][2] = {
    {0, 0}, {8, 8}, {8, 16}, {16, 8}, {8, 32}, {16, 16}, {32, 8}, {8, 64}, {16, 32}, {32, 16}, {64, 8}, {32, 32},
    {32, 64}, {64, 32}, {32, 128}, {64, 64}, {128, 32}, {64, 128}, {128, 64}, {64, 256}, {128, 128}, {256, 64},
    {64, 512}, {128, 256}, {256, 128}, {512, 64}, {64, 96}, {96, 64}, {96, 128}, {128, 160}, {160, 128}, {192, 128},
    {128, 192}, {128, 96}, {32, 256}, {256, 32}, {8, 128}, {8, 192}, {8, 256}, {8, 320}, {8, 384}, {8, 448},
    {8, 512}, {8, 576}, {8, 640}, {8, 704}, {8, 768}, {16, 64}, {16, 128}, {16, 192}, {16, 256}, {16, 320},
    {16, 384}, {16, 448}, {16, 512}, {16, 576}, {16, 640}, {16, 704}, {16, 768}, {24, 64}, {24, 128}, {24, 192},
    {24, 256}, {24, 320}, {24, 384}, {24, 448}, {24, 512}, {24, 576}, {24, 640}, {24, 704}, {24, 768}, {32, 192},
    {32, 320}, {32, 384}, {32, 448}, {32, 512}, {32, 576}, {32, 640}, {32, 704}, {32, 768}, {40, 64}, {40, 128},
    {40, 192}, {40, 256}, {40, 320}, {40, 384}, {40, 448}, {40, 512}, {40, 576}, {40, 640}, {40, 704}, {40, 768},
    {48, 64}, {48, 128}, {48, 192}, {48, 256}, {48, 320}, {48, 384}, {48, 448}, {48, 512}, {48, 576}, {48, 640},
    {48, 704}, {48, 768}, {56, 64}, {56, 128}, {56, 192}, {56, 256}, {56, 320}, {56, 384}, {56, 448}, {56, 512},
    {56, 576}, {56, 640}, {56, 704}, {56, 768}, {64, 192}, {64, 320}, {64, 384}, {64, 448}, {64, 576}, {64, 640},
    {64, 704}, {64, 768}, {72, 64}, {72, 128}, {72, 192}, {72, 256}, {72, 320}, {72, 384}, {72, 448}, {72, 512},
    {72, 576}, {72, 640}, {80, 64}, {80, 128}, {80, 192}, {80, 256}, {80, 320}, {80, 384}, {80, 448}, {80, 512},
    {80, 576}, {88, 64}, {88, 128}, {88, 192}, {88, 256}, {88, 320}, {88, 384}, {88, 448}, {88, 512}, {96, 192},
    {96, 256}, {96, 320}, {96, 384}, {96, 448}, {96, 512}, {104, 64}, {104, 128}, {104, 192}, {104, 256},
    {104, 320}, {104, 384}, {104, 448}, {112, 64}, {112, 128}, {112, 192}, {112, 256}, {112, 320}, {112, 384},
    {120, 64}, {120, 128}, {120, 192}, {120, 256}, {120, 320}, {120, 384}, {128, 320}, {128, 384}, {136, 64},
    {136, 128}, {136, 192}, {136, 256}, {136, 320}, {144, 64}, {144, 128}, {144, 192}, {144, 256}, {144, 320},
    {152, 64}, {152, 128}, {152, 192}, {152, 256}, {152, 320}, {160, 64}, {160, 192}, {160, 256}, {168, 64},
    {168, 128}, {168, 192}, {168, 256}, {176, 64}, {176, 128}, {176, 192}, {176, 256}, {184, 64}, {184, 128},
    {184, 192}, {184, 256}, {192, 64}, {192, 192}, {192, 256}, {200, 64}, {200, 128}, {200, 192}, {208, 64},
    {208, 128}, {208, 192}, {216, 64}, {216, 128}, {216, 192}, {224, 64}, {224, 128}, {224, 192}, {232, 64},
    {232, 128}, {232, 192}, {240, 64}, {240, 128}, {240, 192}, {248, 64}, {248, 128}, {248, 192}, {256, 192},
    {264, 64}, {264, 128}, {272, 64}, {272, 128}, {280, 64}, {280, 128}, {288, 64}, {288, 128}, {296, 64},
    {296, 128}, {304, 64}, {304, 128}, {312, 64}, {312, 128}, {320, 64}, {320, 128}, {328, 64}, {328, 128},
    {336, 64}, {336, 128}, {344, 64}, {344, 128}, {352, 64}, {352, 128}, {360, 64}, {360, 128}, {368, 64},
    {368, 128}, {376, 64}, {376, 128}, {384, 64}, {384, 128}, {392, 64}, {400, 64}, {408, 64}, {416, 64}, {424, 64},
    {432, 64}, {440, 64}, {448, 64}, {456, 64}, {464, 64}, {472, 64}, {480, 64}, {488, 64}, {496, 64}, {504, 64},
    {520, 64}, {528, 64}, {536, 64}, {544, 64}, {552, 64}, {560, 64}, {568, 64}, {576, 64}, {584, 64}, {592, 64},
    {600, 64}, {608, 64}, {616, 64}, {624, 64}, {632, 64}, {640, 64}, {648, 64}, {656, 64}, {664, 64}, {672, 64},
    {680, 64}, {688, 64}, {696, 64}, {704, 64}, {712, 64}, {720, 64}, {728, 64}, {736, 64}, {744, 64}, {752, 64},
    {760, 64}, {768, 64}, {64, 16}, {64, 24}, {64, 40}, {64, 48}, {64, 56}, {64, 72}, {64, 80}, {64, 88}, {64, 104},
    {64, 112}, {64, 120}, {64, 136}, {64, 144}, {64, 152}, {64, 160}, {64, 168}, {64, 176}, {64, 184}, {64, 200},
    {64, 208}, {64, 216}, {64, 224}, {64, 232}, {64, 240}, {64, 248}, {64, 264}, {64, 272}, {64, 280}, {64, 288},
    {64, 296}, {64, 304}, {64, 312}, {64, 328}, {64, 336}, {64, 344}, {64, 352}, {64, 360}, {64, 368}, {64, 376},
    {64, 392}, {64, 400}, {64, 408}, {64, 416}, {64, 424}, {64, 432}, {64, 440}, {64, 456}, {64, 464}, {64, 472},
    {64, 480}, {64, 488}, {64, 496}, {64, 504}, {64, 520}, {64, 528}, {64, 536}, {64, 544}, {64, 552}, {64, 560},
    {64, 568}, {64, 584}, {64, 592}, {64, 600}, {64, 608}, {64, 616}, {64, 624}, {64, 632}, {64, 648}, {64, 656},
    {64, 664}, {64, 672}, {64, 680}, {64, 688}, {64, 696}, {64, 712}, {64, 720}, {64, 728}, {64, 736}, {64, 744},
    {64, 752}, {64, 760}, {128, 8}, {128, 16}, {128, 24}, {128, 40}, {128, 48}, {128, 56}, {128, 72}, {128, 80},
    {128, 88}, {128, 104}, {128, 112}, {128, 120}, {128, 136}, {128, 144}, {128, 152}, {128, 168}, {128, 176},
    {128, 184}, {128, 200}, {128, 208}, {128, 216}, {128, 224}, {128, 232}, {128, 240}, {128, 248}, {128, 264},
    {128, 272}, {128, 280}, {128, 288}, {128, 296}, {128, 304}, {128, 312}, {128, 328}, {128, 336}, {128, 344},
    {128, 352}, {128, 360}, {128, 368}, {128, 376}, {128, 392}, {128, 400}, {128, 408}, {128, 416}, {128, 424},
    {128, 432}, {128, 440}, {128, 448}, {128, 456}, {128, 464}, {128, 472}, {128, 480}, {128, 488}, {128, 496},
    {128, 504}, {128, 512}, {192, 8}, {192, 16}, {192, 24}, {192, 32}, {192, 40}, {192, 48}, {192, 56}, {192, 72},
    {192, 80}, {192, 88}, {192, 96}, {192, 104}, {192, 112}, {192, 120}, {192, 136}, {192, 144}, {192, 152},
    {192, 160}, {192, 168}, {192, 176}, {192, 184}, {192, 200}, {192, 208}, {192, 216}, {192, 224}, {192, 232},
    {192, 240}, {192, 248}, {192, 264}, {192, 272}, {192, 280}, {192, 288}, {192, 296}, {192, 304}, {192, 312},
    {192, 320}, {192, 328}, {192, 336}, {256, 8}, {256, 16}, {256, 24}, {256, 40}, {256, 48}, {256, 56}, {256, 72},
    {256, 80}, {256, 88}, {256, 96}, {256, 104}, {256, 112}, {256, 120}, {256, 136}, {256, 144}, {256, 152},
    {256, 160}, {256, 168}, {256, 176}, {256, 184}, {256, 200}, {256, 208}, {256, 216}, {256, 224}, {256, 232},
    {256, 240}, {256, 248}, {256, 256}, {320, 8}, {320, 16}, {320, 24}, {320, 32}, {320, 40}, {320, 48}, {320, 56},
    {320, 72}, {320, 80}, {320, 88}, {320, 96}, {320, 104}, {320, 112}, {320, 120}, {320, 136}, {320, 144},
    {320, 152}, {320, 160}, {320, 168}, {320, 176}, {320, 184}, {320, 192}, {320, 200}, {384, 8}, {384, 16},
    {384, 24}, {384, 32}, {384, 40}, {384, 48}, {384, 56}, {384, 72}, {384, 80}, {384, 88}, {384, 96}, {384, 104},
    {384, 112}, {384, 120}, {384, 136}, {384, 144}, {384, 152}, {384, 160}, {384, 168}, {448, 8}, {448, 16},
    {448, 24}, {448, 32}, {448, 40}, {448, 48}, {448, 56}, {448, 72}, {448, 80}, {448, 88}, {448, 96}, {448, 104},
    {448, 112}, {448, 120}, {448, 128}, {448, 136}, {448, 144}, {512, 8}, {512, 16}, {512, 24}, {512, 32},
    {512, 40}, {512, 48}, {512, 56}, {512, 72}, {512, 80}, {512, 88}, {512, 96}, {512, 104}, {512, 112}, {512, 120},
    {512, 128}, {576, 8}, {576, 16}, {576, 24}, {576, 32}, {576, 40}, {576, 48}, {576, 56}, {576, 72}, {576, 80},
    {576, 88}, {576, 96}, {576, 104}, {576, 112}, {640, 8}, {640, 16}, {640, 24}, {640, 32}, {640, 40}, {640, 48},
    {640, 56}, {640, 72}, {640, 80}, {640, 88}, {640, 96}, {704, 8}, {704, 16}, {704, 24}, {704, 32}, {704, 40},
    {704, 48}, {704, 56}, {704, 72}, {704, 80}, {704, 88}, {768, 8}, {768, 16}, {768, 24}, {768, 32}, {768, 40},
    {768, 48}, {768, 56}, {768, 72}, {768, 80}, {256, 512}, {256, 1024}, {512, 512}, {512, 1024},
};
#define LT_N_TILES ((unsigned)(sizeof LT_TILE_MN / sizeof LT_TILE_MN[0]))

typedef struct lt_cfg {
    int32_t id, sk;
    uint32_t tile, stages, red, swz, custom;
    uint16_t inner, cluster;
} lt_cfg;

static void lt_cfg_name(const lt_cfg *g, char *s, size_t n) {
    snprintf(s, n, "id%d-t%u-s%u-sk%d-r%u-w%u-o%u-i%u-c%u", g->id, g->tile, g->stages, g->sk, g->red, g->swz,
             g->custom, (unsigned)g->inner, (unsigned)g->cluster);
}

/* 0, or -1 when s is not exactly a name lt_cfg_name writes */
static int lt_cfg_parse(const char *s, lt_cfg *g) {
    unsigned inner = 0, cluster = 0;
    int used = -1;
    memset(g, 0, sizeof *g);
    if (sscanf(s, "id%d-t%u-s%u-sk%d-r%u-w%u-o%u-i%u-c%u%n", &g->id, &g->tile, &g->stages, &g->sk, &g->red, &g->swz,
               &g->custom, &inner, &cluster, &used) != 9 ||
        used < 0 || s[used] || inner > 0xffff || cluster > 0xffff)
        return -1;
    g->inner = (uint16_t)inner, g->cluster = (uint16_t)cluster;
    char back[64];
    lt_cfg_name(g, back, sizeof back);
    return strcmp(back, s) == 0 ? 0 : -1; /* no leading zeros, signs or spaces: one spelling per config */
}

static void lt_cfg_of(const cublasLtMatmulAlgo_t *a, lt_cfg *g) {
    size_t w;
    memset(g, 0, sizeof *g);
    g->sk = 1;
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &g->id, sizeof g->id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &g->tile, sizeof g->tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &g->stages, sizeof g->stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &g->sk, sizeof g->sk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &g->red, sizeof g->red, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &g->swz, sizeof g->swz, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &g->custom, sizeof g->custom, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &g->inner, sizeof g->inner, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &g->cluster, sizeof g->cluster, &w);
}

/* The algorithm named by g for plan p, checked (cublasLtMatmulAlgoCheck) and within the workspace.
 * 0, or a reason in why (for the refusal of a recorded name). */
static int lt_cfg_build(cuda_ctx *c, const lt_plan *p, const lt_cfg *g, cublasLtMatmulAlgo_t *a, double *waves,
                        char *why, size_t why_n) {
    cublasStatus_t s = cublasLtMatmulAlgoInit(c->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->ty, p->ty, p->dty, p->dty,
                                              g->id, a);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (why) snprintf(why, why_n, "cublasLtMatmulAlgoInit(algorithm %d) returned status %d", g->id, (int)s);
        return -1;
    }
    struct {
        cublasLtMatmulAlgoConfigAttributes_t at;
        const void *v;
        size_t n;
    } set[] = {
        {CUBLASLT_ALGO_CONFIG_TILE_ID, &g->tile, sizeof g->tile},
        {CUBLASLT_ALGO_CONFIG_STAGES_ID, &g->stages, sizeof g->stages},
        {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &g->sk, sizeof g->sk},
        {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &g->red, sizeof g->red},
        {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &g->swz, sizeof g->swz},
        {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &g->custom, sizeof g->custom},
        {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &g->inner, sizeof g->inner},
        {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &g->cluster, sizeof g->cluster},
    };
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        if ((s = cublasLtMatmulAlgoConfigSetAttribute(a, set[i].at, set[i].v, set[i].n)) != CUBLAS_STATUS_SUCCESS) {
            if (why) snprintf(why, why_n, "config attribute %d refused (status %d)", (int)set[i].at, (int)s);
            return -1;
        }
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    if ((s = cublasLtMatmulAlgoCheck(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, a, &r)) != CUBLAS_STATUS_SUCCESS) {
        if (why) snprintf(why, why_n, "cublasLtMatmulAlgoCheck returned status %d", (int)s);
        return -1;
    }
    if (r.workspaceSize > c->lt_ws_bytes) {
        if (why) snprintf(why, why_n, "needs %zu bytes of workspace (%zu held)", r.workspaceSize, c->lt_ws_bytes);
        return -1;
    }
    if (waves) *waves = r.wavesCount;
    return 0;
}

typedef struct lt_cand {
    lt_cfg g;
    cublasLtMatmulAlgo_t a;
    char name[64];
    double cost; /* stage 1 order: padded work x last-wave loss / tile efficiency (lower first) */
    float us;    /* stage 1 time, 1e30 = not timed */
    int id_slot; /* index into the per-id capabilities */
} lt_cand;

typedef struct lt_caps {
    int id;
    uint32_t stages[64];
    int n_stages;
    uint32_t swz, red; /* CTA swizzle supported; the split-K reduction scheme used (0: no split-K) */
    int n_sk;
} lt_caps;

typedef struct lt_list {
    lt_cand *v;
    int n, cap;
} lt_list;

static int lt_list_has(const lt_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0) return 1;
    return 0;
}

/* appends g (named, built, checked) unless present or refused; 0 = appended */
static int lt_list_add(cuda_ctx *c, const lt_plan *p, lt_list *l, const lt_cfg *g, int slot, int *checks) {
    lt_cand k;
    memset(&k, 0, sizeof k);
    k.g = *g, k.id_slot = slot, k.us = 1e30f;
    lt_cfg_name(g, k.name, sizeof k.name);
    if (lt_list_has(l, k.name)) return 1;
    double waves = 0;
    (*checks)++;
    if (lt_cfg_build(c, p, g, &k.a, &waves, NULL, 0)) return -1;
    if (g->tile && g->tile < LT_N_TILES && LT_TILE_MN[g->tile][0]) {
        /* which tile side runs along N is not documented: the orientation that pads less */
        double tm = LT_TILE_MN[g->tile][0], tn = LT_TILE_MN[g->tile][1];
        double pa = ceil((double)p->N / tm) * tm * ceil((double)p->M / tn) * tn,
               pb = ceil((double)p->N / tn) * tn * ceil((double)p->M / tm) * tm;
        double pad = (pa < pb ? pa : pb) / ((double)p->N * (double)p->M);
        double eff = tm * tn >= 128 * 128 ? 1.0 : tm * tn >= 128 * 64 ? 0.85 : 0.6;
        double wq = waves > 0 ? ceil(waves - 1e-6) / waves : 1.0;
        k.cost = pad * wq / eff * (g->sk > 1 ? 1.05 : 1.0);
    } else
        k.cost = 10; /* unknown tile: last */
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        lt_cand *v = (lt_cand *)realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = k;
    return 0;
}

static int lt_cmp_cost(const void *a, const void *b) {
    const lt_cand *x = (const lt_cand *)a, *y = (const lt_cand *)b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    return strcmp(x->name, y->name);
}
static int lt_cmp_us(const void *a, const void *b) {
    const lt_cand *x = (const lt_cand *)a, *y = (const lt_cand *)b;
    if (x->us != y->us) return x->us < y->us ? -1 : 1;
    return strcmp(x->name, y->name);
}

#define LT_WIDE_MIN_M 128     /* below: weight streaming, the heuristic's 16 only */
#define LT_CHECKS 6000        /* AlgoCheck calls per shape in the enumeration */
#define LT_ENUM_S 0.4         /* and seconds */
#define LT_STAGE1_S 0.6       /* seconds of stage-1 timing per shape (at least LT_STAGE1_MIN structures) */
#define LT_STAGE1_MIN 24
#define LT_STAGE1_MAX 160
#define LT_STAGE2_TOP 6       /* structures expanded over stages and swizzle */
#define LT_STAGE2_EACH 8      /* variants each */

/* The last decision of lt_choose_wide ("lt:<config>,<timed|cache>" or "lt:heuristic(...)"), for tests
 * and benchmarks; kept apart from the quant paths' cuda_quant_last_path, which an int4 linear sets
 * before its BF16 GEMM. Not synchronised: one thread decides at a time per process in tests. */
static char lt_last[96];
extern "C" const char *cuda_lt_last_choice(void) { return lt_last; }
static void lt_set_last(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lt_last, sizeof lt_last, fmt, ap);
    va_end(ap);
}

static double lt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Candidates of the widened search for plan p, heuristic's first: out (caller frees out->v).
 * Times on the live inputs into the autotune output buffer. */
static vsr_status lt_widen(cuda_ctx *c, lt_plan *p, const void *A, const void *W, void *tout, lt_list *out,
                           vsr_err *err) {
    static const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                        CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                        CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                        CUBLASLT_CLUSTER_SHAPE_1x4x1};
    double t0 = lt_now();
    int checks = 0;
    lt_list s1 = {NULL, 0, 0};
    lt_caps *caps = NULL;
    int n_caps = 0;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->n_algos; i++) { /* the heuristic's own, rebuilt from their configuration */
        lt_cfg g;
        lt_cfg_of(&p->algos[i], &g);
        lt_list_add(c, p, out, &g, -1, &checks);
    }
    int n_heur = out->n;
    if (p->M >= LT_WIDE_MIN_M) {
        int ids[256], nid = 0;
        if (cublasLtMatmulAlgoGetIds(c->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->ty, p->ty, p->dty, p->dty, 256, ids,
                                     &nid) != CUBLAS_STATUS_SUCCESS)
            nid = 0;
        caps = (lt_caps *)calloc((size_t)(nid ? nid : 1), sizeof *caps);
        if (!caps) return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (cuBLASLt search)", c->device);
        for (int j = 0; j < nid; j++) {
            cublasLtMatmulAlgo_t a;
            if (cublasLtMatmulAlgoInit(c->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->ty, p->ty, p->dty, p->dty, ids[j],
                                       &a) != CUBLAS_STATUS_SUCCESS)
                continue;
            lt_caps *cp = &caps[n_caps];
            cp->id = ids[j];
            size_t w = 0;
            uint32_t tiles[1024];
            int n_tiles = 0;
            if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, NULL, 0, &w) ==
                    CUBLAS_STATUS_SUCCESS && w && w <= sizeof tiles &&
                cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, w, &w) ==
                    CUBLAS_STATUS_SUCCESS)
                n_tiles = (int)(w / sizeof tiles[0]);
            if (!n_tiles) tiles[n_tiles++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
            w = 0;
            uint32_t st_all[256];
            if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, NULL, 0, &w) ==
                    CUBLAS_STATUS_SUCCESS && w && w <= sizeof st_all &&
                cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, st_all, w, &w) ==
                    CUBLAS_STATUS_SUCCESS)
                for (int k = 0; k < (int)(w / sizeof st_all[0]) && cp->n_stages < 64; k++)
                    cp->stages[cp->n_stages++] = st_all[k];
            if (!cp->n_stages) cp->stages[cp->n_stages++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
            int32_t sk_ok = 0;
            uint32_t red_mask = 0;
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sk_ok, sizeof sk_ok, &w);
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask, sizeof red_mask,
                                              &w);
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &cp->swz, sizeof cp->swz,
                                              &w);
            /* split-K reduced in FP32 (workspace), or in place when the output is FP32 itself; never in BF16 */
            uint32_t red = (red_mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                           : (p->dty == CUDA_R_32F && (red_mask & CUBLASLT_REDUCTION_SCHEME_INPLACE))
                               ? CUBLASLT_REDUCTION_SCHEME_INPLACE
                               : 0;
            int slot = n_caps++;
            cp->red = red, cp->n_sk = sk_ok && red ? 4 : 1;
            /* stages tried for a structure: the heuristic's for this algorithm, automatic, the first listed */
            uint32_t try_st[6];
            int n_try = 0;
            for (int i = 0; i < n_heur && n_try < 2; i++)
                if (out->v[i].g.id == ids[j] && (n_try == 0 || try_st[0] != out->v[i].g.stages))
                    try_st[n_try++] = out->v[i].g.stages;
            try_st[n_try++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
            for (int k = 0; k < cp->n_stages && k < 2; k++) try_st[n_try++] = cp->stages[k];
            /* pass 1: each tile with the automatic cluster (else 1x1x1), no split, its first stages accepted */
            for (int ti = 0; ti < n_tiles && checks < LT_CHECKS; ti++) {
                uint32_t tile = tiles[ti];
                if (tile && tile < LT_N_TILES) {
                    double tm = LT_TILE_MN[tile][0], tn = LT_TILE_MN[tile][1];
                    if (tm * tn < 64 * 64) continue; /* small tiles: for few rows, not here */
                    /* padding waste over 25 % in both orientations: not a candidate */
                    double pa = ceil((double)p->N / tm) * tm * ceil((double)p->M / tn) * tn,
                           pb = ceil((double)p->N / tn) * tn * ceil((double)p->M / tm) * tm;
                    if ((pa < pb ? pa : pb) > 1.25 * (double)p->N * (double)p->M) continue;
                }
                lt_cfg g;
                memset(&g, 0, sizeof g);
                g.id = ids[j], g.tile = tile, g.sk = 1;
                int ok = 0;
                for (int cl = 0; cl < 2 && !ok; cl++)
                    for (int k = 0; k < n_try && !ok; k++) {
                        g.cluster = clusters[cl], g.stages = try_st[k];
                        ok = lt_list_add(c, p, &s1, &g, slot, &checks) >= 0;
                    }
            }
        }
        /* pass 2: the accepted structures with the other cluster shapes and with split-K */
        int n_base = s1.n;
        for (int b = 0; b < n_base && checks < LT_CHECKS && lt_now() - t0 < LT_ENUM_S; b++) {
            lt_cfg g = s1.v[b].g;
            int slot = s1.v[b].id_slot;
            const lt_caps *cp = &caps[slot];
            for (size_t ci = 0; ci < sizeof clusters / sizeof clusters[0]; ci++) {
                if (clusters[ci] == g.cluster) continue;
                lt_cfg h = g;
                h.cluster = clusters[ci];
                lt_list_add(c, p, &s1, &h, slot, &checks);
            }
            for (int sk = 2; sk <= 4 && sk <= (cp->n_sk > 1 ? 4 : 1); sk++) {
                if (p->K / sk < 1024) continue;
                lt_cfg h = g;
                h.sk = sk, h.red = cp->red;
                lt_list_add(c, p, &s1, &h, slot, &checks);
            }
        }
    }
    double t_enum = lt_now() - t0;
    /* stage 1: one warm-up and two timed launches per structure, most promising first */
    int timed = 0;
    if (s1.n) {
        qsort(s1.v, (size_t)s1.n, sizeof *s1.v, lt_cmp_cost);
        lt_tune t = {p, A, W, NULL};
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        double t1 = lt_now();
        for (int i = 0; i < s1.n && i < LT_STAGE1_MAX; i++) {
            if (i >= LT_STAGE1_MIN && lt_now() - t1 > LT_STAGE1_S) break;
            t.algos = &s1.v[i].a;
            if (lt_launch(c, 0, &t, tout, err)) continue;
            cudaEventRecord(e0, c->stream);
            int bad = lt_launch(c, 0, &t, tout, err) || lt_launch(c, 0, &t, tout, err);
            cudaEventRecord(e1, c->stream);
            float ms = 0;
            if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
                cudaEventDestroy(e0), cudaEventDestroy(e1);
                free(s1.v), free(caps), free(out->v);
                out->v = NULL, out->n = 0;
                return cuda_check(c, cudaGetLastError(), "cuBLASLt search: timing", err);
            }
            if (!bad) s1.v[i].us = ms * 500.0f;
            timed++;
        }
        cudaEventDestroy(e0), cudaEventDestroy(e1);
        qsort(s1.v, (size_t)s1.n, sizeof *s1.v, lt_cmp_us);
    }
    /* stage 2: the best structures over their stages and swizzle */
    for (int i = 0; i < s1.n && i < LT_STAGE2_TOP && s1.v[i].us < 1e29f; i++) {
        const lt_caps *cp = &caps[s1.v[i].id_slot];
        lt_cfg g = s1.v[i].g;
        int added = lt_list_add(c, p, out, &g, -1, &checks) == 0;
        for (uint32_t swz = 0; swz <= (cp->swz ? 1u : 0u); swz++)
            for (int k = 0; k < cp->n_stages && added < LT_STAGE2_EACH; k++) {
                g.stages = cp->stages[k], g.swz = swz;
                if (lt_list_add(c, p, out, &g, -1, &checks) == 0) added++;
            }
    }
    fprintf(stderr, "cuda:%d: cuBLASLt search %s m%lld n%lld k%lld: %d heuristic, %d structures (%d checks, %.0f ms), "
            "%d timed (%.0f ms), %d to time%s%s\n", c->device, p->dty == CUDA_R_16BF ? "bf16o" : "bf16",
            (long long)p->M, (long long)p->N, (long long)p->K, n_heur, s1.n, checks, t_enum * 1e3, timed,
            (lt_now() - t0 - t_enum) * 1e3, out->n, s1.n ? "; stage-1 best " : "", s1.n ? s1.v[0].name : "");
    free(s1.v), free(caps);
    return VSR_OK;
}

/* The widened search's choice for plan p (with --autotune-cache): the recorded name rebuilt and
 * checked, or the search timed and its winner recorded. Sets p->run and p->cfg. */
static vsr_status lt_choose_wide(cuda_ctx *c, lt_plan *p, const void *A, const void *W, vsr_err *err) {
    char key[96], rec[64], path[1200];
    snprintf(key, sizeof key, "bf16%s-m%lld-n%lld-k%lld", p->dty == CUDA_R_16BF ? "o" : "", (long long)p->M,
             (long long)p->N, (long long)p->K);
    const char *src = "cache";
    vsr_status st = autotune_recorded(c, "ltcfg", key, rec, sizeof rec, path, sizeof path, err);
    if (st == VSR_E_NOT_FOUND) {
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        cudaStreamIsCapturing(c->stream, &cap);
        if (cap != cudaStreamCaptureStatusNone) { /* no timing inside a graph capture: the heuristic's first */
            p->run = p->algos[0], p->cfg[0] = 0;
            lt_set_last("lt:heuristic(a0,default(capturing))");
            return VSR_OK;
        }
        quant_state *q;
        size_t ob = (p->dty == CUDA_R_16BF ? 2 : 4) * (size_t)(p->M * p->N);
        if ((st = quant_state_get(c, &q, err)) ||
            (st = quant_grow(c, &q->tune_out, &q->tune_out_bytes, ob, "autotune output", err)))
            return st;
        lt_list l;
        if ((st = lt_widen(c, p, A, W, q->tune_out, &l, err))) return st;
        if (!l.n) { /* nothing rebuilt: the heuristic's first, not recorded */
            free(l.v);
            p->run = p->algos[0], p->cfg[0] = 0;
            lt_set_last("lt:heuristic(a0,default(no rebuilt candidate))");
            return VSR_OK;
        }
        const char **np = (const char **)malloc(sizeof *np * (size_t)l.n);
        cublasLtMatmulAlgo_t *al = (cublasLtMatmulAlgo_t *)malloc(sizeof *al * (size_t)l.n);
        if (!np || !al) {
            free(np), free(al), free(l.v);
            return vsr_err_set(err, VSR_E_NOMEM, "cuda:%d: out of memory (cuBLASLt search)", c->device);
        }
        for (int i = 0; i < l.n; i++) np[i] = l.v[i].name, al[i] = l.v[i].a;
        lt_tune t = {p, A, W, al};
        int choice = 0;
        st = autotune_choose(c, "ltcfg", key, l.n, np, 0, lt_launch, &t, ob, &choice, &src, err);
        if (st == VSR_OK && (choice < 0 || choice >= l.n)) /* remembered from a file deleted since: the first */
            choice = 0;
        if (st == VSR_OK) {
            p->run = al[choice];
            snprintf(p->cfg, sizeof p->cfg, "%s", np[choice]);
        }
        free(np), free(al), free(l.v);
        if (st == VSR_OK) {
            lt_set_last("lt:%s,%s", p->cfg, src);
            return VSR_OK;
        }
        if (st != VSR_E_FORMAT) return st;
        /* another process recorded a configuration outside this one's list first: take it from its file */
        src = "cache";
        if ((st = autotune_recorded(c, "ltcfg", key, rec, sizeof rec, path, sizeof path, err))) return st;
    } else if (st)
        return st;
    lt_cfg g;
    char why[160];
    if (lt_cfg_parse(rec, &g))
        return vsr_err_set(err, VSR_E_FORMAT, "autotune cache file %s: choice \"%s\" is not a cuBLASLt configuration "
                           "name (id<algo>-t<tile>-s<stages>-sk<splits>-r<reduction>-w<swizzle>-o<custom>-i<inner>-"
                           "c<cluster>); delete the file to time again", path, rec);
    if (lt_cfg_build(c, p, &g, &p->run, NULL, why, sizeof why))
        return vsr_err_set(err, VSR_E_FORMAT, "autotune cache file %s: cuBLASLt configuration \"%s\" is rejected on "
                           "cuda:%d (%s) for this shape: %s; delete the file to time again", path, rec, c->device,
                           c->dev_name, why);
    snprintf(p->cfg, sizeof p->cfg, "%s", rec);
    lt_set_last("lt:%s,%s", p->cfg, src);
    return VSR_OK;
}

vsr_status lt_gemm(cuda_ctx *c, cudaDataType_t ty, const void *A, int64_t M, const void *W, int64_t N,
                          int64_t K, cudaDataType_t dty, void *y, int accumulate, vsr_err *err) {
    if (M <= 0) return VSR_OK;
    lt_plan *p = NULL;
    vsr_status st = lt_plan_get(c, ty, dty, M, N, K, &p, err);
    if (st) return st;
    if (p->chosen < 0) {
        /* with --autotune-cache: the heuristic's candidates timed once per shape and device, the
         * winner recorded (autotune.cu), or with VSR_CUDA_LT_SEARCH=1 (BF16) the widened search
         * (lt_choose_wide); without a cache, the heuristic's first, as cuBLASLt suggests */
        const char *ls = getenv("VSR_CUDA_LT_SEARCH");
        if (ty == CUDA_R_16BF && c->autotune_dir[0] && ls && strcmp(ls, "1") == 0) {
            if ((st = lt_choose_wide(c, p, A, W, err))) return st;
            p->chosen = 0;
        } else {
            int choice = 0;
            const char *src = "default";
            if (p->n_algos > 1 && c->autotune_dir[0]) {
                char key[96];
                snprintf(key, sizeof key, "%s%s-m%lld-n%lld-k%lld", ty == CUDA_R_16BF ? "bf16" : "f32",
                         dty == CUDA_R_16BF ? "o" : "", (long long)M, (long long)N, (long long)K);
                lt_tune t = {p, A, W, p->algos};
                if ((st = autotune_choose_indexed(c, "lt_gemm", key, p->n_algos, lt_launch, &t,
                                                  (dty == CUDA_R_16BF ? 2 : 4) * (size_t)(M * N), &choice, &src,
                                                  err)))
                    return st;
            }
            p->chosen = choice;
            p->run = p->algos[choice];
        }
    }
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    return lt_err(c, cublasLtMatmul(c->lt, p->desc, &alpha, W, p->la, A, p->lb, &beta, y, p->lc, y, p->lc, &p->run,
                                    c->lt_ws, c->lt_ws_bytes, c->stream),
                  "matmul", err);
}

extern "C" vsr_status cuda_gemm_bf16(cuda_ctx *c, const __nv_bfloat16 *A, int64_t M, const __nv_bfloat16 *W,
                                     int64_t N, int64_t K, float *y, int accumulate, vsr_err *err) {
    return lt_gemm(c, CUDA_R_16BF, A, M, W, N, K, CUDA_R_32F, y, accumulate, err);
}

extern "C" vsr_status cuda_gemm_bf16_out_bf16(cuda_ctx *c, const __nv_bfloat16 *A, int64_t M, const __nv_bfloat16 *W,
                                              int64_t N, int64_t K, __nv_bfloat16 *y, vsr_err *err) {
    return lt_gemm(c, CUDA_R_16BF, A, M, W, N, K, CUDA_R_16BF, y, 0, err);
}

/* ---- elementwise kernels ---- */

__global__ void k_f32_to_bf16(const float *__restrict__ x, int64_t n, __nv_bfloat16 *__restrict__ y) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n && ((uintptr_t)(x + i) & 15) == 0) {
        float4 v = *(const float4 *)(x + i);
        __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
        *(__nv_bfloat162 *)(y + i) = a;
        *(__nv_bfloat162 *)(y + i + 2) = b;
    } else {
        for (int64_t j = i; j < i + 4 && j < n; j++) y[j] = __float2bfloat16_rn(x[j]);
    }
}

extern "C" vsr_status cuda_f32_to_bf16(cuda_ctx *c, const float *x, int64_t n, __nv_bfloat16 *y, vsr_err *err) {
    if (n <= 0) return VSR_OK;
    k_f32_to_bf16<<<blocks_for((n + 3) / 4, 256), 256, 0, c->stream>>>(x, n, y);
    return cuda_check_launch(c, "f32_to_bf16", err);
}

/* A BF16 linear's input: the twin of x when there is one, else x converted into the scratch. */
vsr_status bf16_input(cuda_ctx *c, const float *x, int64_t M, int64_t K, const __nv_bfloat16 **xb, vsr_err *err) {
    *xb = (const __nv_bfloat16 *)twin_find(c, x, M, K, TW_BF16, NULL);
    if (*xb) return VSR_OK;
    void *b;
    vsr_status st;
    if ((st = cuda_scratch(c, sizeof(__nv_bfloat16) * (size_t)(M * K), &b, err)) ||
        (st = cuda_f32_to_bf16(c, x, M * K, (__nv_bfloat16 *)b, err)))
        return st;
    *xb = (const __nv_bfloat16 *)b;
    return VSR_OK;
}

/* The linear declared by keep_product_bf16: y's product written only in BF16 (kp_buf), where the
 * weight's GEMM can write BF16 (BF16; FP8 where its path makes a BF16 product); *kept = 0 else. */
static vsr_status linear_keep_bf16(cuda_ctx *c, const float *x, int64_t M, const vsr_bweight *w, float *y, int *kept,
                                   vsr_err *err) {
    cuda_ctx_priv *p = priv(c);
    const int64_t N = w->v.N, K = w->v.K;
    *kept = 0;
    if (w->v.kind != VSR_WK_BF16 && w->v.kind != VSR_WK_FP8) return VSR_OK;
    twin_clobber(c, y, sizeof(float) * (size_t)(M * N)); /* y is replaced: twins and kept products of it go */
    p->kp_src = NULL;                                    /* one kept product at a time */
    vsr_status st = cuda_grow(c, &p->kp_buf, &p->kp_bytes, sizeof(__nv_bfloat16) * (size_t)(M * N), err);
    if (st) return st;
    if (w->v.kind == VSR_WK_BF16) {
        const __nv_bfloat16 *xb;
        if ((st = bf16_input(c, x, M, K, &xb, err)) ||
            (st = cuda_gemm_bf16_out_bf16(c, xb, M, (const __nv_bfloat16 *)w->w, N, K, (__nv_bfloat16 *)p->kp_buf, err)))
            return st;
    } else {
        const float *sx = NULL;
        const void *xq = twin_find(c, x, M, K, TW_FP8, &sx);
        int ran = 0;
        if ((st = cuda_fp8_linear_bf16_to(c, x, (const uint8_t *)xq, sx, M, w, (__nv_bfloat16 *)p->kp_buf, &ran, err)))
            return st;
        if (!ran) return VSR_OK;
    }
    p->kp_src = y, p->kp_rows = M, p->kp_N = N;
    *kept = 1;
    return VSR_OK;
}

vsr_status cu_linear(void *ctx, const float *x, int64_t M, const vsr_bweight *w, float *y, int accumulate,
                            vsr_err *err) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    ENTER(c);
    if (M <= 0) return VSR_OK;
    char pname[72] = "";
    if (vsr_cuda_profile_on > 0)
        snprintf(pname, sizeof pname, "linear %s %lld->%lld M=%lld%s", wkind_names_cuda[w->v.kind], (long long)w->v.K,
                 (long long)w->v.N, (long long)M, accumulate ? " +=" : "");
    PROF(c, pname);
    vsr_status st;
    cuda_ctx_priv *pv = priv(c);
    const int keep = pv->kp_req == y && pv->kp_req_rows == M && pv->kp_req_N == w->v.N && !accumulate;
    pv->kp_req = NULL; /* a declaration is for the next linear only */
    if ((st = sole_twin_readable(c, x, M, w, err)) ||
        (st = kp_guard(c, x, sizeof(float) * (size_t)(M * w->v.K), w->name, err)) ||
        (accumulate && (st = kp_guard(c, y, sizeof(float) * (size_t)(M * w->v.N), w->name, err))))
        return st;
    if (keep) {
        int kept = 0;
        if ((st = linear_keep_bf16(c, x, M, w, y, &kept, err))) return vsr_err_prefix(err, "%s", w->name);
        if (kept) return VSR_OK;
    }
    switch (w->v.kind) {
    case VSR_WK_BF16: {
        const __nv_bfloat16 *xb;
        if ((st = bf16_input(c, x, M, w->v.K, &xb, err))) return st;
        st = cuda_gemm_bf16(c, xb, M, (const __nv_bfloat16 *)w->w, w->v.N, w->v.K, y, accumulate, err);
        break;
    }
    case VSR_WK_F32: st = lt_gemm(c, CUDA_R_32F, x, M, w->w, w->v.N, w->v.K, CUDA_R_32F, y, accumulate, err); break;
    case VSR_WK_INT4: {
        const void *xb = twin_find(c, x, M, w->v.K, TW_BF16, NULL);
        st = xb ? cuda_int4_linear_bf16(c, (const __nv_bfloat16 *)xb, M, w, y, accumulate, err)
                : cuda_int4_linear(c, x, M, w, y, accumulate, err);
        break;
    }
    case VSR_WK_FP8: {
        const float *sx = NULL;
        const void *xq = twin_find(c, x, M, w->v.K, TW_FP8, &sx);
        st = xq ? cuda_fp8_linear_prequant(c, (const uint8_t *)xq, sx, M, w, y, accumulate, err)
                : cuda_fp8_linear(c, x, M, w, y, accumulate, err);
        break;
    }
    default:
        return vsr_err_set(err, VSR_E_DEVICE, "%s: %s weights cannot run on cuda:%d", w->name,
                           wkind_names_cuda[w->v.kind], c->device);
    }
    twin_clobber(c, y, sizeof(float) * (size_t)(M * w->v.N));
    if (st) return vsr_err_prefix(err, "%s", w->name);
    return VSR_OK;
}
