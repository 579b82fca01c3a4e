/* src/backend/cuda/int4_stream.cu: the int4 W4A16 weight-streaming kernels for 1-16 rows (decode), y[M, N] (+)=
 * x[M, K] . dequant(W)^T with BF16 activations, the packed weights streamed once:
 *   k_i4_stream (kind 2, the default at <= 16 rows) per-warp cp.async rings of packed tiles, TN n-tiles a warp
 *   k_i4_bulk   (kind 5, capability 9.0+, VSR_CUDA_INT4_BULK=1; off by default: no faster) bulk copies into a
 *               block ring on mbarriers
 * and their configuration tables (I4T_TAB, I4B_TAB). The lists, defaults and keys are quant_int4.cu's.
 *
 * Floor: packed weights and scales read / 4.19 TB/s (gate_up: 46.0 MB, 11.0 us); the target (int4 >= 3x our BF16
 * at 1-16 rows) and today's figures: bench/RESULTS.md, "int4 linears". Test: tests/test_cuda_quant.c (every
 * listed configuration against the CPU dequantized reference, split-K, act-order, adding into y). */
#include "backend/cuda/int4_kernels.cuh"

/* ---- the weight-streaming kernel (third pass, M <= 16) ----
 * Why: both kernels above stream the packed weights at ~1.1 TB/s at 1-16 rows (NOTES "CUDA GEMM
 * sweep"): each warp holds only 2-4 KB of loads in flight in registers, every block pays a chain of
 * dependent latencies (activation staging behind a barrier, register groups, the split-K tail), and
 * kind 0 re-reads activation fragments from L2 per warp. Here:
 *  - every warp runs its own cp.async ring of D 512-byte chunk slots in shared memory: a chunk's slot
 *    is refilled with chunk i + D as soon as chunk i is multiplied, so D loads stay in flight per warp
 *    for the warp's whole life, independent of registers (NW * D * 512 bytes per block);
 *  - the block's activations (M <= 16 rows x its K range, BF16, already permuted and padded by the
 *    caller or read in place) and the scales of its rows and groups are copied once into shared memory
 *    by cp.async in the same breath as the first weights, so the first multiply waits one latency;
 *    activation rows keep their natural layout with a 16-byte pad per row, so lane (token l/4, l%4)
 *    reads its B fragment words 8j + 4h + l%4 of a chunk without bank conflicts (row stride = 4 banks);
 *  - each warp owns TN 16-row n-tiles over the block's K range (no cross-warp reduction); the B
 *    fragments of a chunk are read once per warp and reused for its TN tiles; the weights are the A
 *    operand of mma.m16n8k16 (dequantized in registers as in the kernels above: exact subtraction,
 *    one rounding of the product);
 *  - grid (ceil(NT / (NW * TN)), KS): KS = 1 when the n-tiles alone give enough blocks, else a
 *    deterministic split-K (partials to ws, the last block of an n-block adds them in split order).
 * Needs groups computable per 64-column chunk (gchunks > 0). Tokens of the 8-token mma tile beyond M
 * read the last valid row (their outputs are never stored). */

template <int MT, int NW, int TN, int D>
__global__ void __launch_bounds__(NW * 32) k_i4_stream(const i4t p) {
    static_assert((D & (D - 1)) == 0 && D >= 2 && D % TN == 0, "D a power of two, a multiple of TN");
    extern __shared__ __align__(16) unsigned char i4t_sm[];
    constexpr int RB = NW * TN * 16; /* output rows of the block */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t NT = p.Np / 16;
    const int64_t n0 = (int64_t)blockIdx.x * RB;
    const int z = blockIdx.y;
    const int64_t kc0 = (int64_t)z * p.per < p.KC ? (int64_t)z * p.per : p.KC;
    const int64_t kc1 = kc0 + p.per < p.KC ? kc0 + p.per : p.KC;
    const int nk = (int)(kc1 - kc0);
    const int vt = (int)p.M; /* M <= MT * 8 (the launcher's rule) */
    const int RSW = p.per * 32 + 4; /* activation row stride in u32 words: 4 banks past a multiple of 32 */
    const int gA = i4t_grp(p, kc0), gB = nk > 0 ? i4t_grp(p, kc1 - 1) : gA, ng = gB - gA + 1;
    uint4 *ring = (uint4 *)i4t_sm;                                   /* [NW][D][32] */
    uint32_t *xs = (uint32_t *)(i4t_sm + (size_t)NW * D * 512);      /* [vt][RSW] */
    uint32_t *ss = xs + (size_t)vt * RSW;                            /* [ng][RB] */

    /* group 0 of every thread: activations (16-byte pieces of 8 columns) and scales */
    const int xp = nk * 8;
    for (int i = threadIdx.x; i < vt * xp; i += NW * 32) {
        const int tok = i / xp, c = i - tok * xp;
        const int64_t col = kc0 * 64 + (int64_t)c * 8;
        const bool ok = col < p.kvalid; /* kvalid is a multiple of 8: a piece is all in or all out */
        cp16(xs + (size_t)tok * RSW + c * 4, ok ? (const void *)(p.x + tok * p.ldx + col) : (const void *)p.x,
             ok ? 16 : 0);
    }
    for (int i = threadIdx.x; i < ng * (RB / 4); i += NW * 32) {
        const int g = i / (RB / 4), pc = i - g * (RB / 4);
        const int64_t n = n0 + pc * 4;
        const bool ok = n < p.Np; /* Np and n0 are multiples of 16 */
        cp16(ss + g * RB + pc * 4, ok ? (const void *)(p.sz + (int64_t)(gA + g) * p.Np + n) : (const void *)p.sz,
             ok ? 16 : 0);
    }
    cp_async_commit();

    /* this warp's chunk i: k-chunk kc0 + i / TN of n-tile ntb + i % TN; one commit group per chunk.
     * Shared addresses are 32-bit values computed once (opq) and the ring slot is carried by the loop: the
     * compiler otherwise rebuilt them from the thread index in every iteration (137 instructions per chunk,
     * ~30 of them address arithmetic; now ~107 at one token tile, 64 of them the dequantization). */
    const int nchunks = nk * TN;
    const int64_t ntb = n0 / 16 + (int64_t)warp * TN;
    const unsigned rbase = opq((unsigned)__cvta_generic_to_shared(ring + (size_t)warp * D * 32 + lane));
    const int64_t tstride = p.KC * 32; /* uint4 between this lane's words of consecutive n-tiles */
    const uint4 *src = p.wq + (ntb * p.KC + kc0) * 32 + lane; /* tile 0 of the next chunk column to issue */
    bool tact[TN];
#pragma unroll
    for (int t = 0; t < TN; t++) tact[t] = ntb + t < NT;
    /* prologue: chunks 0 .. D-1 (D is a multiple of TN) */
#pragma unroll
    for (int s = 0; s < D; s++) {
        const int t = s % TN;
        if (s < nchunks && tact[t]) cp16s(rbase + (unsigned)s * 512u, src + t * tstride);
        cp_async_commit();
        if (t == TN - 1) src += 32;
    }
    cp_async_wait<D>(); /* this thread's group 0 */
    __syncthreads(); /* everyone's */

    const int q = lane & 3, r = lane >> 2;
    unsigned xaddr[MT]; /* this lane's B words of chunk 0: row (token) * RSW + l%4 */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int row = mt * 8 + r < vt ? mt * 8 + r : vt - 1;
        xaddr[mt] = opq((unsigned)__cvta_generic_to_shared(xs + (size_t)row * RSW + q));
    }
    const unsigned sbase = opq((unsigned)__cvta_generic_to_shared(ss + warp * TN * 16 + r));
    float acc[TN][MT][4];
#pragma unroll
    for (int t = 0; t < TN; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[t][mt][e] = 0.0f;

    /* the group of chunk kc0 + ci, kept incrementally (no division in the loop), clamped at use */
    int gq = (int)(kc0 / p.gchunks), gr = (int)(kc0 - (int64_t)gq * p.gchunks);
    unsigned roff = 0, slot = rbase; /* ring offset and address of the chunk being multiplied: both carried
                                      * by the loop, so the address is never rebuilt from the thread index */
    int left = nchunks - D; /* chunks still to issue */
    for (int ci = 0; ci < nk; ci++) {
        uint32_t b[MT][8]; /* b[mt][2j + h]: columns 16j + 8h + 2(l%4) + {0, 1} of token mt*8 + l/4 */
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int v = 0; v < 8; v++) b[mt][v] = lds32(xaddr[mt] + (unsigned)(ci * 128 + 16 * v));
        const unsigned sg = sbase + (unsigned)(((gq < p.G - 1 ? gq : p.G - 1) - gA) * RB * 4);
        if (++gr == p.gchunks) gr = 0, gq++;
#pragma unroll
        for (int t = 0; t < TN; t++) {
            cp_async_wait<D - 1>(); /* this chunk has landed (this thread's copy; each lane reads only its own) */
            if (tact[t]) {
                const uint4 wv = lds128(slot);
                const uint32_t s0 = lds32(sg + t * 64), s8 = lds32(sg + t * 64 + 32);
                const uint32_t br = prmt(s0, 0x1010), sr = prmt(s0, 0x3232);
                const uint32_t br8 = prmt(s8, 0x1010), sr8 = prmt(s8, 0x3232);
                const uint32_t wd[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t a0 = dq2s(wd[j], 0, br, sr), a1 = dq2s(wd[j], 1, br8, sr8);
                    const uint32_t a2 = dq2s(wd[j], 2, br, sr), a3 = dq2s(wd[j], 3, br8, sr8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) mma16816(acc[t][mt], a0, a1, a2, a3, b[mt][2 * j], b[mt][2 * j + 1]);
                }
                /* the slot's old contents are in registers and consumed: refill it with chunk i + D
                 * (same tile t, since D is a multiple of TN) */
                if (left > 0) cp16s(slot, src + t * tstride);
            }
            cp_async_commit();
            roff = (roff + 512u) & (unsigned)(D * 512 - 1);
            slot = roff ? slot + 512u : slot - (unsigned)((D - 1) * 512);
            left--;
            if (t == TN - 1) src += 32;
        }
    }
    cp_async_wait<0>();

    i4_store_frags<TN, MT, int64_t>(acc, true, ntb, NT, r, q, p.M, p.N, p.KS, z, p.accumulate, p.y, p.ws);
    if (p.KS == 1) return;
    /* split K: the last block to arrive for this n-block adds the partials in split order */
    if (!splitk_last_block(p.counters + blockIdx.x, p.KS)) return;
    splitk_sum(p.ws, p.y, p.M, p.N, p.KS, p.accumulate, n0, RB, vt, NW * 32, p.counters + blockIdx.x);
}

/* ---- the bulk-copy streaming kernel (sixth pass, kind 5, M <= 16) ----
 * Why (ncu, NOTES fifth pass): k_i4_stream, k_i4_v4 and k_i4_sk (the last two since removed) all stop at
 * 1.6-1.8 TB/s with DRAM ~33 % busy: 107-130 instructions per 512-byte chunk at ~2 IPC and ~1.1 eligible
 * warps of 16, so issue per byte and latency hiding bind, not bytes alone. Here the weights never pass
 * through registers on the way in and the per-chunk work is the dequantization and little else:
 *  - each warp streams its n-tiles' K slice (TN tiles x `per` chunks, contiguous per tile in the repacked
 *    layout) through its own shared-memory ring of R stages of S chunks per tile, each stage one
 *    cp.async.bulk per tile issued by lane 0 onto the stage's mbarrier (complete_tx): NW * R * S * TN * 512
 *    bytes in flight per block at no register cost; a stage is refilled as soon as the warp has multiplied
 *    it (its data is in registers and consumed: in-order issue);
 *  - the block's activations (M rows x its K slice, BF16) are staged once into shared memory already in
 *    B-fragment order (natural word 4v + q of a chunk at 8q + v, row stride 4 banks past a multiple of 32):
 *    two LDS.128 per chunk per token tile, conflict-free; the first weight stages are issued before this;
 *  - scales as 16-byte records {bias, scale of row r, bias, scale of row r + 8} in bf16x2 form per (group,
 *    tile, r), staged once: one LDS.128 per chunk and tile, no PRMT in the loop;
 *  - full stages run an unguarded unrolled loop of S chunks; only the last stage tests each chunk;
 *  - grid (ceil(NT / (NW * TN)), KS), KS chosen by autotune for whole waves; KS > 1: partials to ws and the
 *    last block of an n-block adds them in split order (deterministic), as k_i4_stream.
 * Same dequantization (exact subtraction, one rounding of the product) and mma order along K as k_i4_stream.
 * Needs groups computable per 64-column chunk (gchunks > 0), 16-byte aligned BF16 rows. Tokens of the
 * 8-token tile beyond M read the last valid row (never stored); warps past the last n-tile only join the
 * block's barriers; a warp's second tile past NT re-reads tile NT - 1 (never stored). */

template <int MT, int NW, int TN, int R, int S>
__global__ void __launch_bounds__(NW * 32) k_i4_bulk(const i4b p) {
    static_assert((R & (R - 1)) == 0 && R >= 2 && S >= 1, "R a power of two");
#if I4B_SM90
    extern __shared__ __align__(128) unsigned char i4b_sm[];
    constexpr int RB = NW * TN * 16;          /* output rows of the block */
    constexpr unsigned STAGE = TN * S * 512u; /* bytes of one stage of one warp */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n0t = (int)blockIdx.x * NW * TN; /* the block's first n-tile */
    const int z = blockIdx.y;
    const int kc0 = z * p.per < p.KC ? z * p.per : p.KC;
    const int kc1 = kc0 + p.per < p.KC ? kc0 + p.per : p.KC;
    const int nk = kc1 - kc0, nst = (nk + S - 1) / S;
    const int vt = p.M; /* M <= MT * 8 (the launcher's rule) */
    const int RSW = p.per * 32 + 4; /* activation row stride in u32 words: 4 banks past a multiple of 32 */
    const int gA0 = kc0 / p.gchunks, gA = gA0 < p.G - 1 ? gA0 : p.G - 1;
    const int gB0 = nk > 0 ? (kc1 - 1) / p.gchunks : gA0, gB = gB0 < p.G - 1 ? gB0 : p.G - 1;
    const int ng = gB - gA + 1;
    uint64_t *bars = (uint64_t *)(i4b_sm + (size_t)NW * R * STAGE);          /* [NW][R] */
    uint32_t *xs = (uint32_t *)(bars + NW * R);                               /* [vt][RSW] */
    uint4 *ss = (uint4 *)(xs + (size_t)vt * RSW);                             /* [ng][NW * TN][8] */

    const int wt0 = n0t + warp * TN; /* this warp's first n-tile */
    const bool wact = wt0 < p.NT && nk > 0;
    const unsigned ring_w = (unsigned)__cvta_generic_to_shared(i4b_sm + (size_t)warp * R * STAGE);
    const unsigned bar_w = (unsigned)__cvta_generic_to_shared(bars + warp * R);
    const uint4 *wsrc[TN]; /* tile t's chunk kc0 */
#pragma unroll
    for (int t = 0; t < TN; t++) {
        const int tile = wt0 + t < p.NT ? wt0 + t : p.NT - 1;
        wsrc[t] = p.wq + ((size_t)tile * p.KC + kc0) * 32;
    }
    /* stage st of this warp into its slot: S chunks per tile (fewer in the last), one bulk copy per tile */
    auto issue = [&](int st) {
        const int slot = st & (R - 1), c0 = st * S;
        const unsigned cnt = (unsigned)(nk - c0 < S ? nk - c0 : S), bytes = cnt * 512u;
        const unsigned bar = bar_w + 8u * slot;
        mbar_expect_tx(bar, TN * bytes);
#pragma unroll
        for (int t = 0; t < TN; t++) bulk_g2s(ring_w + slot * STAGE + t * S * 512u, wsrc[t] + (size_t)c0 * 32, bytes, bar);
    };
    if (lane == 0 && wact) {
#pragma unroll
        for (int s = 0; s < R; s++) mbar_init(bar_w + 8u * s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#pragma unroll
        for (int s = 0; s < R; s++)
            if (s < nst) issue(s);
    }

    /* the block's activations in B-fragment order, and its scale records; every thread */
    const int xp = nk * 8; /* 16-byte pieces (8 columns) per row */
    for (int i = threadIdx.x; i < vt * xp; i += NW * 32) {
        const int tok = i / xp, c = i - tok * xp, ch = c >> 3, pc = c & 7;
        const int col = (kc0 + ch) * 64 + pc * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (col < p.kvalid) v = __ldg((const uint4 *)(p.x + (size_t)tok * p.ldx + col));
        uint32_t *d = xs + (size_t)tok * RSW + ch * 32 + pc; /* natural word 4pc + e -> 8e + pc */
        d[0] = v.x, d[8] = v.y, d[16] = v.z, d[24] = v.w;
    }
    for (int i = threadIdx.x; i < ng * NW * TN * 8; i += NW * 32) {
        const int g = i / (NW * TN * 8), rem = i - g * (NW * TN * 8), wt = rem >> 3, r = rem & 7;
        const int tile = n0t + wt < p.NT ? n0t + wt : p.NT - 1;
        const uint32_t *sp = p.sz + (size_t)(gA + g) * p.Np + (size_t)tile * 16 + r;
        const uint32_t s0 = __ldg(sp), s8 = __ldg(sp + 8);
        ss[i] = make_uint4(prmt(s0, 0x1010), prmt(s0, 0x3232), prmt(s8, 0x1010), prmt(s8, 0x3232));
    }
    __syncthreads();

    const int q = lane & 3, r = lane >> 2;
    float acc[TN][MT][4];
#pragma unroll
    for (int t = 0; t < TN; t++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[t][mt][e] = 0.0f;
    if (wact) {
        const uint4 *xb[MT]; /* this lane's fragment words of chunk 0: row (token) * RSW + 8 * (l % 4) */
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int row = mt * 8 + r < vt ? mt * 8 + r : vt - 1;
            xb[mt] = (const uint4 *)(xs + (size_t)row * RSW + q * 8);
        }
        const uint4 *sw = ss + warp * TN * 8 + r;
        int gq = kc0 / p.gchunks, gr = kc0 - gq * p.gchunks;
        /* chunk ci of the slice, its weights at ring address wa (tile t at + t * S * 512) */
        auto chunk = [&](int ci, unsigned wa) {
            uint32_t b[MT][8];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const uint4 lo = xb[mt][ci * 8], hi = xb[mt][ci * 8 + 1];
                b[mt][0] = lo.x, b[mt][1] = lo.y, b[mt][2] = lo.z, b[mt][3] = lo.w;
                b[mt][4] = hi.x, b[mt][5] = hi.y, b[mt][6] = hi.z, b[mt][7] = hi.w;
            }
            const uint4 *sg = sw + ((gq < p.G - 1 ? gq : p.G - 1) - gA) * (NW * TN * 8);
            if (++gr == p.gchunks) gr = 0, gq++;
#pragma unroll
            for (int t = 0; t < TN; t++) {
                const uint4 sc = sg[t * 8];
                const uint4 wv = lds128(wa + t * S * 512u);
                const uint32_t wd[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t a0 = dq2s(wd[j], 0, sc.x, sc.y), a1 = dq2s(wd[j], 1, sc.z, sc.w);
                    const uint32_t a2 = dq2s(wd[j], 2, sc.x, sc.y), a3 = dq2s(wd[j], 3, sc.z, sc.w);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) mma16816(acc[t][mt], a0, a1, a2, a3, b[mt][2 * j], b[mt][2 * j + 1]);
                }
            }
        };
        const unsigned lbase = ring_w + (unsigned)lane * 16u;
        for (int st = 0; st < nst; st++) {
            const int slot = st & (R - 1);
            mbar_wait(bar_w + 8u * slot, (unsigned)(st / R) & 1u);
            const unsigned sb = lbase + slot * STAGE;
            const int c0 = st * S;
            if (c0 + S <= nk) {
#pragma unroll
                for (int c = 0; c < S; c++) chunk(c0 + c, sb + c * 512u);
            } else {
                for (int c = 0; c < nk - c0; c++) chunk(c0 + c, sb + c * 512u);
            }
            __syncwarp(); /* every lane has multiplied the slot (its loads consumed): refill it */
            if (lane == 0 && st + R < nst) issue(st + R);
        }
    }

    i4_store_frags<TN, MT, int>(acc, wact, wt0, p.NT, r, q, p.M, p.N, p.KS, z, p.accumulate, p.y, p.ws);
    if (p.KS == 1) return;
    /* split K: the last block to arrive for this n-block adds the partials in split order */
    if (!splitk_last_block(p.counters + blockIdx.x, p.KS)) return;
    splitk_sum(p.ws, p.y, p.M, p.N, p.KS, p.accumulate, (int64_t)n0t * 16, RB, vt, NW * 32, p.counters + blockIdx.x);
#endif
}

/* ---- the configurations of these kernels that the tuner lists (quant_int4.cu) ---- */

/* kind 2, the streaming kernel (M <= 16): MT token tiles, NW warps, TN n-tiles per warp, D ring slots */
const i4t_ent I4T_TAB[] = {
    {1, 4, 1, 16, k_i4_stream<1, 4, 1, 16>}, {1, 8, 1, 8, k_i4_stream<1, 8, 1, 8>}, {1, 4, 2, 16, k_i4_stream<1, 4, 2, 16>},
    {1, 8, 2, 8, k_i4_stream<1, 8, 2, 8>},   {1, 4, 1, 32, k_i4_stream<1, 4, 1, 32>},
    {2, 4, 1, 16, k_i4_stream<2, 4, 1, 16>}, {2, 8, 1, 8, k_i4_stream<2, 8, 1, 8>}, {2, 4, 2, 16, k_i4_stream<2, 4, 2, 16>},
    {2, 8, 2, 8, k_i4_stream<2, 8, 2, 8>},   {2, 4, 1, 32, k_i4_stream<2, 4, 1, 32>},
};
static_assert(sizeof I4T_TAB / sizeof I4T_TAB[0] == I4T_N, "I4T_N (int4_kernels.cuh) counts I4T_TAB");

/* kind 5, the bulk-copy streaming kernel (M <= 16): MT token tiles, NW warps, TN n-tiles per warp, R ring
 * stages of S chunks per tile (ring per block: NW * R * S * TN * 512 bytes: 32 or 64 KB) */
const i4b_ent I4B_TAB[] = {
    {1, 8, 1, 4, 4, k_i4_bulk<1, 8, 1, 4, 4>}, {1, 4, 1, 4, 4, k_i4_bulk<1, 4, 1, 4, 4>},
    {1, 8, 1, 4, 2, k_i4_bulk<1, 8, 1, 4, 2>}, {1, 4, 2, 4, 2, k_i4_bulk<1, 4, 2, 4, 2>},
    {2, 8, 1, 4, 4, k_i4_bulk<2, 8, 1, 4, 4>}, {2, 4, 1, 4, 4, k_i4_bulk<2, 4, 1, 4, 4>},
    {2, 8, 1, 4, 2, k_i4_bulk<2, 8, 1, 4, 2>}, {2, 4, 2, 4, 2, k_i4_bulk<2, 4, 2, 4, 2>},
};
static_assert(sizeof I4B_TAB / sizeof I4B_TAB[0] == I4B_N, "I4B_N (int4_kernels.cuh) counts I4B_TAB");
