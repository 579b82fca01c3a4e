/* bench/gemm_cuda.cu: GEMM sweep of the CUDA backend's linears on the 27B model's projection
 * shapes: our BF16 (cuBLASLt; GEMM alone and the whole linear with the FP32->BF16 conversion),
 * our FP8 W8A8 linear (activation quantization included; the default accumulation (promoted) or
 * fast with VSR_CUDA_FP8_FAST_ACCUM=1, and fp8_linear_promoted; scaled and unscaled paths; fp8_old = the
 * cuBLASLt path with the sm_90a kernel off, fp8_wgmma = that kernel at every row count, fp8_pq_* = the
 * kernel alone on prequantized activations per tile width / accumulation mode (promoted pipelined, the
 * serial promoted schedule, fast), fp8_kept_* = the product kept in BF16 for linear_swiglu per route
 * forced, fp8_pq_route = the GEMM alone on prequantized activations by the forward's route: outer-vector-scaled
 * cuBLASLt where the device has it), our int4
 * W4A16 linear (automatic path, the unpack path, and int4_prev = the previous fused kernels: at <= 16 rows
 * with the streaming kernel off, at 17-256 rows with the tensor-core tile kernel (ninth pass) off; int4_bulk / int4_bulk_bf16in = the bulk-copy streaming kernel (sixth pass)
 * forced on, int4_bf16in = cuda_int4_linear_bf16 on BF16 activations, default path).
 * FP8 data: see fp8_bytes (the torch peer's distributions unless VSR_FP8_DATA=bytes). VSR_FP8=0 skips the
 * FP8 rows. Writes CSV to stdout:
 *   variant,shape,K,N,M,us,tflops,tbps
 * us is the median of per-launch event timings; weights rotate over enough copies to exceed
 * the 60 MB L2 several times. tbps counts the weight bytes as stored on the device plus FP32
 * activations read and FP32 outputs written once. First lines (# ...) are the ceilings.
 * Usage: gemm_cuda [rows,rows,...] [--shapes=name,name,...] [--fp8-gemm] | gemm_cuda --lt-search (see lt_search_bench)
 *   --fp8-gemm: the FP8 GEMM alone by the forward's route (fp8_pq_route_cool: FP32 out; fp8_kept_lt_cool: the
 *   outer-vector-scaled product kept in BF16, as torch._scaled_mm writes it), each point from an idle GPU
 *   VSR_SWEEP_GRAPH=1: each point from a CUDA graph of its launches (time_graph_us)
 *   VSR_SWEEP_ACC=1: the int4_bf16in rows at 17-256 rows add into y (accumulate, as the forward's down and o/out
 *   projections do) instead of storing */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "backend/backend_cuda.h"
#define VSR_QUANT_INTERNAL_CUDA 1
#include "backend/cuda/quant_internal.h"
#include "vsr/quant.h"
/* quant_int4.cu (k_i4_bulk: int4_stream.cu): the bulk-copy streaming int4 kernel's switch (1 on, 0 off) */
extern "C" int cuda_quant_force_int4_bulk(int on);
extern "C" int cuda_quant_force_int4_mma(int on);

struct shape {
    const char *name;
    int64_t K, N;
};
/* the largest first: a run cut short by its time limit still has them */
static const shape SHAPES[] = {
    {"gate_up", 5120, 17408}, {"down", 17408, 5120},  {"q_proj", 5120, 12288},   {"kv_proj", 5120, 1024},
    {"o_proj", 6144, 5120},   {"in_proj_qkv", 5120, 10240}, {"in_proj_z", 5120, 6144},
};
/* out_proj has o_proj's shape and up has gate's: measured once */

static vsr_backend B;
static cuda_ctx *C;
/* --fp8-gemm: only fp8_pq_route_cool and fp8_kept_lt_cool, each timed after VSR_COOL_MS (default 500) ms
 * of an idle GPU, so that every point starts from the same clocks (back to back, the rows before a row
 * lower its clocks under the power cap) */
static bool fp8_only = false;
static int cool_ms = 500;
static uint64_t rs = 88172645463325252ull;
static inline uint32_t r32() {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)(rs >> 16);
}
/* FP8 test data. The tensor cores' power (and so the clocks under the H200's power cap) depends on the
 * bits multiplied: uniformly random bytes toggle far more of them than real codes do. By default the
 * codes are drawn as the torch peer draws them (bench/gemm_cuda_torch.py): weights e4m3(20 N(0,1)),
 * prequantized activations e4m3(448 u), u uniform in [-1, 1] (a row of uniform activations quantized
 * per token); VSR_FP8_DATA=bytes keeps the uniformly random bytes of the sweeps before 2026-11-29g. */
static bool fp8_bytes() {
    const char *e = getenv("VSR_FP8_DATA");
    return e && !strcmp(e, "bytes");
}
static inline float unif() { return (float)((double)r32() / 4294967296.0 * 2.0 - 1.0); }
static inline float gauss() { /* Box-Muller */
    const double u1 = ((double)r32() + 1.0) / 4294967297.0, u2 = (double)r32() / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static inline uint8_t fp8_byte() {
    uint8_t v = (uint8_t)r32();
    return (v & 0x7F) == 0x7F ? v ^ 1 : v;
}

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        vsr_err e_;                                                                                                    \
        vsr_status s_ = (x);                                                                                           \
        (void)e_;                                                                                                      \
        if (s_) {                                                                                                      \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);                                             \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* VSR_SWEEP_GRAPH=1: every point is timed as the forward runs, from a CUDA graph of `iters` launches
 * (captured after the warm-up calls, which also make every autotune choice): the median of five replays,
 * each timed whole, over iters. No host work between launches, as in a recorded forward. */
static bool sweep_graph() {
    const char *e = getenv("VSR_SWEEP_GRAPH");
    return e && !strcmp(e, "1");
}

template <class F> static float time_graph_us(F &&f, int iters) {
    cudaStream_t s = C->stream;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return NAN;
    for (int i = 0; i < iters; i++) f(i);
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
        fprintf(stderr, "graph capture failed: %s\n", cudaGetErrorString(cudaGetLastError()));
        if (g) cudaGraphDestroy(g);
        return NAN;
    }
    cudaGraphLaunch(ge, s); /* warm */
    cudaEvent_t ev[6];
    for (auto &e : ev) cudaEventCreate(&e);
    for (int r = 0; r < 5; r++) {
        cudaEventRecord(ev[r], s);
        cudaGraphLaunch(ge, s);
    }
    cudaEventRecord(ev[5], s);
    cudaEventSynchronize(ev[5]);
    float t[5];
    for (int r = 0; r < 5; r++) cudaEventElapsedTime(&t[r], ev[r], ev[r + 1]);
    for (auto &e : ev) cudaEventDestroy(e);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    std::sort(t, t + 5);
    return t[2] * 1000.0f / (float)iters;
}

template <class F> static float time_us(F &&f, int min_iters = 5, float budget_us = 3000) {
    cudaStream_t s = C->stream;
    for (int i = 0; i < 3; i++) f(i);
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a, s);
    f(3);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    int iters = (int)std::min(200.0f, std::max((float)min_iters, budget_us / std::max(ms * 1000, 1.0f)));
    if (sweep_graph()) {
        cudaEventDestroy(a), cudaEventDestroy(b);
        return time_graph_us(f, std::max(iters, 20));
    }
    std::vector<cudaEvent_t> ev(iters + 1);
    for (auto &e : ev) cudaEventCreate(&e);
    cudaEventRecord(ev[0], s);
    for (int i = 0; i < iters; i++) {
        f(i);
        cudaEventRecord(ev[i + 1], s);
    }
    cudaEventSynchronize(ev[iters]);
    std::vector<float> t(iters);
    for (int i = 0; i < iters; i++) cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]);
    for (auto &e : ev) cudaEventDestroy(e);
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        fprintf(stderr, "cuda error: %s\n", cudaGetErrorString(err));
        exit(1);
    }
    std::sort(t.begin(), t.end());
    return t[iters / 2] * 1000.0f;
}

static std::vector<vsr_bweight *> upload_copies(const vsr_weight_view &v, uint64_t stored_bytes) {
    int n = (int)std::min<uint64_t>(32, std::max<uint64_t>(2, (256ull << 20) / stored_bytes + 1));
    std::vector<vsr_bweight *> ws;
    for (int i = 0; i < n; i++) {
        vsr_bweight *b;
        vsr_err e;
        if (B.ops->weight_upload(B.ctx, &v, &b, &e)) {
            fprintf(stderr, "upload %s: %s\n", v.name, e.msg);
            exit(1);
        }
        ws.push_back(b);
    }
    return ws;
}

static void row(const char *variant, const shape &s, int64_t M, float us, double wbytes, double abytes) {
    double fl = 2.0 * M * s.N * s.K;
    printf("%s,%s,%lld,%lld,%lld,%.2f,%.1f,%.3f\n", variant, s.name, (long long)s.K, (long long)s.N, (long long)M, us,
           fl / us * 1e-6, (wbytes + abytes) / us * 1e-6);
    fflush(stdout);
}

/* ---- --lt-search: the BF16 cuBLASLt GEMM at the 27B shapes, heuristic vs the widened search ----
 * Modes, each on a fresh backend: heur1 = no cache (the heuristic's first); heur16 = cache, search
 * off (the default: the heuristic's 16 timed); wide = cache, VSR_CUDA_LT_SEARCH=1 (tunes); wide2
 * = a second backend on wide's cache (loads the recorded configuration, times nothing). GEMM alone:
 * BF16 activations, FP32 output (gate_up_o: BF16 output, cuda_gemm_bf16_out_bf16). CSV rows:
 *   lt,mode,shape,K,N,M,us,tflops,tune_ms,path */
__global__ void k_fill_bf16(__nv_bfloat16 *p, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        unsigned short b = (unsigned short)(0x3C00 | (h & 0x80FF)); /* +-[2^-7, 2^-5] */
        p[i] = *(__nv_bfloat16 *)&b;
    }
}

extern "C" const char *cuda_lt_last_choice(void); /* linear.cu */
static int lt_search_bench(void) {
    struct lshape {
        const char *name;
        int64_t K, N;
        int bf16_out;
    };
    static const lshape LS[] = {{"gate_up", 5120, 34816, 0}, {"gate_up_o", 5120, 34816, 1}, {"down", 17408, 5120, 0},
                                {"in_proj", 5120, 16480, 0}, {"q_proj", 5120, 12288, 0},     {"o_proj", 6144, 5120, 0},
                                {"kv_proj", 5120, 1024, 0}};
    static const int64_t LM[] = {384, 4096};
    static const char *MODES[] = {"heur1", "heur16", "wide", "wide2"};
    const int NS = sizeof LS / sizeof LS[0], NM = 2;
    static float res[4][16][2];
    static char cfg[16][2][64];
    printf("lt,mode,shape,K,N,M,us,tflops,tune_ms,path\n");
    for (int mode = 0; mode < 4; mode++) {
        vsr_err e;
        if (vsr_backend_cuda_new(0, &B, &e)) {
            fprintf(stderr, "SKIP: no CUDA device (%s)\n", e.msg);
            return 0;
        }
        C = (cuda_ctx *)B.ctx;
        if (mode >= 2) setenv("VSR_CUDA_LT_SEARCH", "1", 1); /* the widened search is off by default */
        else unsetenv("VSR_CUDA_LT_SEARCH");
        if (mode) CK(cuda_quant_set_options(B.ctx, NULL, mode == 1 ? "/tmp/vsr-lt-h" : "/tmp/vsr-lt-w", &e));
        if (mode == 0) printf("# device %s (cc %d.%d, %d SMs)\n", C->dev_name, C->cc_major, C->cc_minor, C->sm_count);
        __nv_bfloat16 *xb;
        void *y;
        cudaMalloc(&xb, sizeof(__nv_bfloat16) * 4096 * 17408);
        cudaMalloc(&y, sizeof(float) * 4096 * 34816);
        k_fill_bf16<<<1024, 256, 0, C->stream>>>(xb, (int64_t)4096 * 17408, 7u);
        for (int si = 0; si < NS; si++) {
            const lshape &s = LS[si];
            int nw = (int)std::min<int64_t>(32, std::max<int64_t>(2, (256ll << 20) / (2 * s.N * s.K) + 1));
            std::vector<__nv_bfloat16 *> W(nw);
            for (int i = 0; i < nw; i++) {
                cudaMalloc(&W[i], sizeof(__nv_bfloat16) * s.N * s.K);
                k_fill_bf16<<<1024, 256, 0, C->stream>>>(W[i], s.N * s.K, 1000u + (uint32_t)i);
            }
            for (int mi = 0; mi < NM; mi++) {
                int64_t M = LM[mi];
                auto call = [&](int i) {
                    if (s.bf16_out)
                        CK(cuda_gemm_bf16_out_bf16(C, xb, M, W[i % nw], s.N, s.K, (__nv_bfloat16 *)y, &e));
                    else
                        CK(cuda_gemm_bf16(C, xb, M, W[i % nw], s.N, s.K, (float *)y, 0, &e));
                };
                cudaStreamSynchronize(C->stream);
                struct timespec t0, t1;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                call(0);
                cudaStreamSynchronize(C->stream);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                double tune_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
                const char *path = mode >= 2 ? cuda_lt_last_choice() : "-";
                float us = time_us(call, 20, 40000);
                double tf = 2.0 * M * s.N * s.K / us * 1e-6;
                res[mode][si][mi] = us;
                if (mode == 2) snprintf(cfg[si][mi], 64, "%s", path);
                printf("lt,%s,%s,%lld,%lld,%lld,%.2f,%.1f,%.1f,%s\n", MODES[mode], s.name, (long long)s.K,
                       (long long)s.N, (long long)M, us, tf, tune_ms, path);
                fflush(stdout);
            }
            for (auto w : W) cudaFree(w);
        }
        cudaFree(xb), cudaFree(y);
        vsr_backend_destroy(&B);
    }
    unsetenv("VSR_CUDA_LT_SEARCH");
    printf("\n| shape | M | floor us (774) | heur1 us | heur16 us | wide us | wide2 us | TFLOP/s heur16 -> wide2 | "
           "wide/heur16 | config |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < NS; si++)
        for (int mi = 0; mi < NM; mi++) {
            double fl = 2.0 * LM[mi] * LS[si].N * LS[si].K;
            printf("| %s | %lld | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f -> %.0f | %.3f | %s |\n", LS[si].name,
                   (long long)LM[mi], fl / 774e6, res[0][si][mi], res[1][si][mi], res[2][si][mi], res[3][si][mi],
                   fl / res[1][si][mi] * 1e-6, fl / res[3][si][mi] * 1e-6, res[3][si][mi] / res[1][si][mi],
                   cfg[si][mi]);
        }
    return 0;
}

int main(int argc, char **argv) {
    std::vector<int64_t> rows = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192};
    const char *only = NULL; /* --shapes=a,b: measure these shapes only */
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--shapes=", 9)) {
            only = argv[i] + 9;
        } else if (!strcmp(argv[i], "--fp8-gemm")) {
            fp8_only = true;
            if (getenv("VSR_COOL_MS")) cool_ms = atoi(getenv("VSR_COOL_MS"));
        } else if (!strcmp(argv[i], "--lt-search")) {
            return lt_search_bench();
        } else if (argv[i][0] != '-') {
            rows.clear();
            for (char *p = strtok(argv[i], ","); p; p = strtok(NULL, ",")) rows.push_back(atoll(p));
        }
    }
    vsr_err e;
    if (vsr_backend_cuda_new(0, &B, &e)) {
        fprintf(stderr, "SKIP: no CUDA device (%s)\n", e.msg);
        return 0;
    }
    C = (cuda_ctx *)B.ctx;
    const char *tune = getenv("VSR_AUTOTUNE_DIR");
    if (tune) CK(cuda_quant_set_options(B.ctx, NULL, tune, &e));
    int64_t Mmax = *std::max_element(rows.begin(), rows.end());
    int64_t Kmax = 17408, Nmax = 17408;
    float *x, *y;
    __nv_bfloat16 *xb;
    cudaMalloc(&x, sizeof(float) * Mmax * Kmax);
    cudaMalloc(&y, sizeof(float) * Mmax * Nmax);
    cudaMalloc(&xb, sizeof(__nv_bfloat16) * Mmax * Kmax);
    {
        std::vector<float> h(Mmax * Kmax);
        for (auto &v : h) v = (float)((int)(r32() % 2001) - 1000) / 1000.0f;
        cudaMemcpy(x, h.data(), sizeof(float) * h.size(), cudaMemcpyHostToDevice);
        CK(cuda_f32_to_bf16(C, x, Mmax * Kmax, xb, &e));
    }
    /* prequantized FP8 activations for the GEMM-alone rows (fp8_bytes above), scales 1e-2 */
    uint8_t *xq8;
    float *sx8;
    cudaMalloc(&xq8, (size_t)(Mmax * Kmax));
    cudaMalloc(&sx8, sizeof(float) * Mmax);
    {
        std::vector<uint8_t> h(Mmax * Kmax);
        for (auto &v : h) v = fp8_bytes() ? fp8_byte() : vsr_f32_to_e4m3fn(448.0f * unif());
        cudaMemcpy(xq8, h.data(), h.size(), cudaMemcpyHostToDevice);
        std::vector<float> hs(Mmax, 1e-2f);
        cudaMemcpy(sx8, hs.data(), sizeof(float) * Mmax, cudaMemcpyHostToDevice);
    }
    printf("# device %s (cc %d.%d, %d SMs)\n", C->dev_name, C->cc_major, C->cc_minor, C->sm_count);
    /* ceilings: device copy (bytes read + written), BF16 and FP8 8192^3 */
    {
        size_t n = 2ull << 30;
        void *a, *b;
        cudaMalloc(&a, n), cudaMalloc(&b, n);
        cudaMemsetAsync(a, 1, n, C->stream);
        float us = time_us([&](int) { cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, C->stream); });
        printf("# ceiling copy %.3f TB/s (2 GiB, read+write)\n", 2.0 * n / us * 1e-6);
        cudaFree(a), cudaFree(b);
        const int64_t S = 8192;
        __nv_bfloat16 *w;
        cudaMalloc(&w, sizeof(__nv_bfloat16) * S * S);
        CK(cuda_f32_to_bf16(C, x, S * S > Mmax * Kmax ? Mmax * Kmax : S * S, w, &e));
        if (Mmax >= S) {
            us = time_us([&](int) { CK(cuda_gemm_bf16(C, xb, S, w, S, S, y, 0, &e)); });
            printf("# ceiling bf16 gemm 8192^3 %.1f TFLOP/s (cuBLASLt, ours)\n", 2.0 * S * S * S / us * 1e-6);
        }
        cudaFree(w);
    }
    printf("variant,shape,K,N,M,us,tflops,tbps\n");
    for (const shape &s : SHAPES) {
        if (only) {
            size_t l = strlen(s.name);
            const char *f = strstr(only, s.name);
            if (!f || (f != only && f[-1] != ',') || (f[l] != 0 && f[l] != ',')) continue;
        }
        int64_t N = s.N, K = s.K;
        std::vector<vsr_bweight *> Wb, W4; /* none with --fp8-gemm */
        if (!fp8_only) { /* BF16 weights: random finite bf16 in +-[2^-7, 2^-5] */
            std::vector<uint16_t> wb(N * K);
            for (auto &v : wb) v = (uint16_t)(0x3C00 | (r32() & 0x80FF));
            vsr_weight_view vb = {VSR_WK_BF16, N, K, wb.data(), NULL, NULL, NULL, 0, 0, s.name};
            Wb = upload_copies(vb, 2ull * N * K);
        }
        /* FP8 (fp8_bytes above; the normal draws through a table of 65,536, drawn once), scales ~1e-2 */
        static std::vector<uint8_t> wtab;
        if (wtab.empty())
            for (int i = 0; i < 65536; i++) wtab.push_back(vsr_f32_to_e4m3fn(20.0f * gauss()));
        std::vector<uint8_t> w8(N * K);
        for (auto &v : w8) v = fp8_bytes() ? fp8_byte() : wtab[r32() >> 16];
        std::vector<uint16_t> s8(N);
        for (auto &v : s8) v = 0x3C23;
        vsr_weight_view v8 = {VSR_WK_FP8, N, K, w8.data(), s8.data(), NULL, NULL, 0, 0, s.name};
        auto W8 = upload_copies(v8, 1ull * N * K);
        w8.clear(), w8.shrink_to_fit();
        if (!fp8_only) { /* int4: random nibbles, group 128, symmetric (GPTQ) */
            int G = (int)(K / 128);
            std::vector<uint32_t> w4(N * K / 8);
            for (auto &v : w4) v = r32() ^ (r32() << 16);
            std::vector<uint16_t> s4(N * G);
            for (auto &v : s4) v = (uint16_t)(0x3C00 | (r32() & 0x7F));
            vsr_weight_view v4 = {VSR_WK_INT4, N, K, w4.data(), s4.data(), NULL, NULL, 128, 0, s.name};
            W4 = upload_copies(v4, 1ull * N * K / 2);
        }
        const double by_fp8 = B.ops->weight_bytes(B.ctx, W8[0]),
                     by_bf16 = Wb.empty() ? 0 : B.ops->weight_bytes(B.ctx, Wb[0]),
                     by_i4 = W4.empty() ? 0 : B.ops->weight_bytes(B.ctx, W4[0]);
        for (int64_t M : rows) {
            double act = 4.0 * M * K + 4.0 * M * N;
            float us;
            if (fp8_only) { /* --fp8-gemm: the forward's FP8 GEMMs alone, each from a GPU idle for cool_ms */
                for (int v = 0; v < 2; v++) {
                    usleep(cool_ms * 1000);
                    if (v == 0) {
                        us = time_us([&](int i) {
                            CK(cuda_fp8_linear_prequant(C, xq8, sx8, M, W8[i % W8.size()], y, 0, &e));
                        });
                    } else {
                        const int was = cuda_quant_force_fp8_route(0);
                        us = time_us([&](int i) {
                            const __nv_bfloat16 *d;
                            const float *dsx, *dsw;
                            int64_t ldd;
                            int ran = 0;
                            CK(cuda_fp8_linear_bf16out(C, NULL, xq8, sx8, M, W8[i % W8.size()], &d, &ldd, &dsx, &dsw,
                                                       &ran, &e));
                        });
                        cuda_quant_force_fp8_route(was);
                    }
                    const char *name = v == 0 ? "fp8_pq_route_cool" : "fp8_kept_lt_cool";
                    fprintf(stderr, "%s M %lld %s path %s\n", s.name, (long long)M, name, cuda_quant_last_path());
                    row(name, s, M, us, by_fp8, v == 0 ? 1.0 * M * K + 4.0 * M * N : 1.0 * M * K + 2.0 * M * N);
                }
                continue;
            }
            us = time_us([&](int i) {
                const vsr_bweight *w = Wb[i % Wb.size()];
                CK(cuda_gemm_bf16(C, xb, M, (const __nv_bfloat16 *)w->w, N, K, y, 0, &e));
            });
            row("bf16_gemm", s, M, us, by_bf16, 2.0 * M * K + 4.0 * M * N);
            us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, Wb[i % Wb.size()], y, 0, &e)); });
            row("bf16_linear", s, M, us, by_bf16, act);
            const char *fp8e = getenv("VSR_FP8");
            if (fp8e && !strcmp(fp8e, "0")) goto int4_rows;
            cuda_quant_force_fp8_path(0);
            us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W8[i % W8.size()], y, 0, &e)); });
            fprintf(stderr, "%s M %lld fp8 path %s\n", s.name, (long long)M, cuda_quant_last_path());
            row("fp8_linear", s, M, us, by_fp8, act);
            { /* the same path with the tensor cores' sums promoted (VSR_CUDA_FP8_FAST_ACCUM=0) */
                const int fw = cuda_quant_set_fp8_fast_accum(0);
                us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W8[i % W8.size()], y, 0, &e)); });
                row("fp8_linear_promoted", s, M, us, by_fp8, act);
                cuda_quant_set_fp8_fast_accum(fw);
            }
            cuda_quant_force_fp8_path(1); /* scaled (outer-vector; BF16 out where FP32 has no algorithm) */
            us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W8[i % W8.size()], y, 0, &e)); });
            fprintf(stderr, "%s M %lld fp8 forced-scaled path %s\n", s.name, (long long)M, cuda_quant_last_path());
            row("fp8_scaled", s, M, us, by_fp8, act);
            cuda_quant_force_fp8_path(2);
            us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W8[i % W8.size()], y, 0, &e)); });
            row("fp8_unscaled", s, M, us, by_fp8, act);
            cuda_quant_force_fp8_path(0);
            /* the path before the sm_90a kernel (cuBLASLt, automatic rules), same binary */
            setenv("VSR_FP8_GEMM", "0", 1);
            us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W8[i % W8.size()], y, 0, &e)); });
            fprintf(stderr, "%s M %lld fp8 old path %s\n", s.name, (long long)M, cuda_quant_last_path());
            row("fp8_old", s, M, us, by_fp8, act);
            setenv("VSR_FP8_GEMM", "1", 1); /* the own kernel at every row count */
            us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W8[i % W8.size()], y, 0, &e)); });
            fprintf(stderr, "%s M %lld fp8 wgmma path %s\n", s.name, (long long)M, cuda_quant_last_path());
            row("fp8_wgmma", s, M, us, by_fp8, act);
            /* the GEMM alone from prequantized activations: automatic width, each width, fast accumulation */
            static const struct {
                const char *name, *bn;
                int fast;
                const char *promote;
            } GV[] = {{"fp8_pq_auto", "", 0, ""},          {"fp8_pq_bn128", "128", 0, ""},
                      {"fp8_pq_bn256", "256", 0, ""},      {"fp8_pq_serial128", "128", 0, "serial"},
                      {"fp8_pq_serial256", "256", 0, "serial"}, {"fp8_pq_fast256", "256", 1, ""},
                      {"fp8_pq_fast128", "128", 1, ""}};
            int fast_was;
            fast_was = cuda_quant_set_fp8_fast_accum(0);
            for (const auto &g : GV) {
                setenv("VSR_FP8_GEMM_BN", g.bn, 1);
                setenv("VSR_FP8_GEMM_PROMOTE", g.promote, 1);
                cuda_quant_set_fp8_fast_accum(g.fast);
                us = time_us([&](int i) {
                    CK(cuda_fp8_linear_prequant(C, xq8, sx8, M, W8[i % W8.size()], y, 0, &e));
                });
                fprintf(stderr, "%s M %lld %s path %s\n", s.name, (long long)M, g.name, cuda_quant_last_path());
                row(g.name, s, M, us, by_fp8, 1.0 * M * K + 4.0 * M * N);
            }
            cuda_quant_set_fp8_fast_accum(fast_was); /* the default (VSR_CUDA_FP8_FAST_ACCUM) for the next rows */
            unsetenv("VSR_FP8_GEMM_BN");
            unsetenv("VSR_FP8_GEMM_PROMOTE");
            unsetenv("VSR_FP8_GEMM");
            /* the GEMM alone from prequantized activations by the forward's own route (outer-vector-scaled
             * cuBLASLt where the device has it): what a linear costs when its producer wrote the FP8 twin */
            us = time_us([&](int i) { CK(cuda_fp8_linear_prequant(C, xq8, sx8, M, W8[i % W8.size()], y, 0, &e)); });
            fprintf(stderr, "%s M %lld fp8_pq_route path %s\n", s.name, (long long)M, cuda_quant_last_path());
            row("fp8_pq_route", s, M, us, by_fp8, 1.0 * M * K + 4.0 * M * N);
            /* the product kept in BF16 for a reader (linear_swiglu's, unscaled), per route forced */
            for (int route = 0; route < 3; route++) {
                static const char *const KN[3] = {"fp8_kept_lt", "fp8_kept_wg128", "fp8_kept_wg256"};
                const int was = cuda_quant_force_fp8_route(route);
                us = time_us([&](int i) {
                    const __nv_bfloat16 *d;
                    const float *dsx, *dsw;
                    int64_t ldd;
                    int ran = 0;
                    CK(cuda_fp8_linear_bf16out(C, NULL, xq8, sx8, M, W8[i % W8.size()], &d, &ldd, &dsx, &dsw, &ran, &e));
                });
                fprintf(stderr, "%s M %lld %s path %s\n", s.name, (long long)M, KN[route], cuda_quant_last_path());
                row(KN[route], s, M, us, by_fp8, 1.0 * M * K + 2.0 * M * N);
                cuda_quant_force_fp8_route(was);
            }
        int4_rows:
            us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W4[i % W4.size()], y, 0, &e)); });
            fprintf(stderr, "%s M %lld int4 path %s\n", s.name, (long long)M, cuda_quant_last_path());
            row("int4_linear", s, M, us, by_i4, act);
            { /* the unpack path forced (above 256 rows: the wide list's unpack candidate, the path before it) */
                cuda_quant_force_int4_path(2);
                us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W4[i % W4.size()], y, 0, &e)); });
                row("int4_unpack", s, M, us, by_i4, act);
                cuda_quant_force_int4_path(0);
            }
            if (M <= 16) { /* int4_prev: the previous fused kernels (streaming kernel off); int4_bf16in: BF16 in */
                cuda_quant_force_int4_stream(0);
                us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W4[i % W4.size()], y, 0, &e)); });
                fprintf(stderr, "%s M %lld int4 prev path %s\n", s.name, (long long)M, cuda_quant_last_path());
                row("int4_prev", s, M, us, by_i4, act);
                cuda_quant_force_int4_stream(1);
                const int bulk_was = cuda_quant_force_int4_bulk(1); /* int4_bulk: the bulk-copy kernel */
                us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W4[i % W4.size()], y, 0, &e)); });
                fprintf(stderr, "%s M %lld int4 bulk path %s\n", s.name, (long long)M, cuda_quant_last_path());
                row("int4_bulk", s, M, us, by_i4, act);
                us = time_us([&](int i) { CK(cuda_int4_linear_bf16(C, xb, M, W4[i % W4.size()], y, 0, &e)); });
                fprintf(stderr, "%s M %lld int4 bulk bf16-in path %s\n", s.name, (long long)M, cuda_quant_last_path());
                row("int4_bulk_bf16in", s, M, us, by_i4, 2.0 * M * K + 4.0 * M * N);
                cuda_quant_force_int4_bulk(bulk_was);
                us = time_us([&](int i) { CK(cuda_int4_linear_bf16(C, xb, M, W4[i % W4.size()], y, 0, &e)); });
                fprintf(stderr, "%s M %lld int4 bf16-in path %s\n", s.name, (long long)M, cuda_quant_last_path());
                row("int4_bf16in", s, M, us, by_i4, 2.0 * M * K + 4.0 * M * N);
            } else if (M <= 256) { /* int4_prev: kinds 0 and 1 (the tensor-core tile kernel off); BF16 in */
                const int acc = getenv("VSR_SWEEP_ACC") && !strcmp(getenv("VSR_SWEEP_ACC"), "1");
                const int mma_was = cuda_quant_force_int4_mma(0);
                us = time_us([&](int i) { CK(B.ops->linear(B.ctx, x, M, W4[i % W4.size()], y, 0, &e)); });
                fprintf(stderr, "%s M %lld int4 prev path %s\n", s.name, (long long)M, cuda_quant_last_path());
                row("int4_prev", s, M, us, by_i4, act);
                cuda_quant_force_int4_mma(mma_was);
                us = time_us([&](int i) { CK(cuda_int4_linear_bf16(C, xb, M, W4[i % W4.size()], y, acc, &e)); });
                fprintf(stderr, "%s M %lld int4 bf16-in path %s\n", s.name, (long long)M, cuda_quant_last_path());
                row(acc ? "int4_bf16in_acc" : "int4_bf16in", s, M, us, by_i4, 2.0 * M * K + (acc ? 8.0 : 4.0) * M * N);
            }
        }
        for (auto *w : Wb) B.ops->weight_free(B.ctx, w);
        for (auto *w : W8) B.ops->weight_free(B.ctx, w);
        for (auto *w : W4) B.ops->weight_free(B.ctx, w);
    }
    cudaFree(x), cudaFree(y), cudaFree(xb), cudaFree(xq8), cudaFree(sx8);
    vsr_backend_destroy(&B);
    return 0;
}
