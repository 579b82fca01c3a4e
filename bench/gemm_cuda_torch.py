"""bench/gemm_cuda_torch.py: the torch peers of bench/gemm_cuda.cu on the same shapes and rows.

Variants (CSV to stdout, same columns as gemm_cuda):
  torch_bf16      x bf16 [M,K] @ w bf16 [N,K]^T, bf16 out (torch.matmul)
  torch_fp8       torch._scaled_mm row-wise: xq e4m3 [M,K], wq e4m3 [N,K] (as column-major
                  [K,N]), scale_a fp32 [M,1], scale_b fp32 [1,N], bf16 out; inputs pre-quantized
  torch_fp8_q     the same plus the per-token quantization of FP32 x in torch ops (amax, divide,
                  cast): what a torch runtime does per call
Median of per-call CUDA event timings, weights rotating over copies totalling > 256 MB.
Ceilings first: device copy, bf16 and FP8 row-wise 8192^3.
VSR_TORCH_FP8_COOL=1: torch_fp8_cool only (gemm_cuda --fp8-gemm's peer): each point timed after
VSR_COOL_MS (default 500) ms of an idle GPU."""
import os
import sys
import time

import torch

SHAPES = [("q_proj", 5120, 12288), ("kv_proj", 5120, 1024), ("o_proj", 6144, 5120),
          ("in_proj_qkv", 5120, 10240), ("in_proj_z", 5120, 6144), ("gate_up", 5120, 17408),
          ("down", 17408, 5120)]
ROWS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192]
if len(sys.argv) > 1:
    ROWS = [int(r) for r in sys.argv[1].split(",")]
dev = "cuda"
F8 = torch.float8_e4m3fn
COOL = os.environ.get("VSR_TORCH_FP8_COOL") == "1"
COOL_MS = int(os.environ.get("VSR_COOL_MS", "500"))


def med_us(fn, budget_us=3000.0, min_iters=5):
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); fn(3); b.record(); b.synchronize()
    one = max(a.elapsed_time(b) * 1000.0, 1.0)
    iters = int(min(200, max(min_iters, budget_us / one)))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        fn(i)
        ev[i + 1].record()
    ev[-1].synchronize()
    t = sorted(ev[i].elapsed_time(ev[i + 1]) * 1000.0 for i in range(iters))
    return t[iters // 2]


def row(variant, name, K, N, M, us, wbytes, abytes):
    fl = 2.0 * M * N * K
    print(f"{variant},{name},{K},{N},{M},{us:.2f},{fl / us * 1e-6:.1f},{(wbytes + abytes) / us * 1e-6:.3f}", flush=True)


def quant_rows(x):
    s = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 448.0
    return (x / s).clamp(-448.0, 448.0).to(F8), s


def main():
    torch.manual_seed(0)
    print(f"# device {torch.cuda.get_device_name()} torch {torch.__version__}")
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev); b = torch.empty_like(a)
    us = med_us(lambda i: b.copy_(a))
    print(f"# ceiling copy {2.0 * n / us * 1e-6:.3f} TB/s (2 GiB, read+write)")
    del a, b
    S = 8192
    A = torch.randn(S, S, device=dev, dtype=torch.bfloat16); Bm = torch.randn(S, S, device=dev, dtype=torch.bfloat16)
    us = med_us(lambda i: A @ Bm.t())
    print(f"# ceiling torch bf16 8192^3 {2.0 * S ** 3 / us * 1e-6:.1f} TFLOP/s")
    Aq, sa = quant_rows(A.float()); Bq, sb = quant_rows(Bm.float())
    us = med_us(lambda i: torch._scaled_mm(Aq, Bq.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16))
    print(f"# ceiling torch fp8 row-wise 8192^3 {2.0 * S ** 3 / us * 1e-6:.1f} TFLOP/s")
    del A, Bm, Aq, Bq
    print("variant,shape,K,N,M,us,tflops,tbps")
    Mmax = max(ROWS)
    for name, K, N in SHAPES:
        ncopy = min(32, max(2, (256 << 20) // (2 * N * K) + 1))
        wb = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(ncopy)]
        ncopy8 = min(32, max(2, (256 << 20) // (N * K) + 1))
        w8 = [(torch.randn(N, K, device=dev) * 20).clamp(-448, 448).to(F8) for _ in range(ncopy8)]
        sw = torch.rand(1, N, device=dev) * 0.01 + 0.001
        xf = torch.randn(Mmax, K, device=dev)
        for M in ROWS:
            x = xf[:M].contiguous()
            xb = x.to(torch.bfloat16)
            if not COOL:
                us = med_us(lambda i: torch.matmul(xb, wb[i % ncopy].t()))
                row("torch_bf16", name, K, N, M, us, 2.0 * N * K, 2.0 * M * K + 2.0 * M * N)
            xq, sx = quant_rows(x)
            if COOL:
                torch.cuda.synchronize()
                time.sleep(COOL_MS / 1000.0)
                us = med_us(lambda i: torch._scaled_mm(xq, w8[i % ncopy8].t(), scale_a=sx, scale_b=sw,
                                                       out_dtype=torch.bfloat16))
                row("torch_fp8_cool", name, K, N, M, us, 1.0 * N * K + 4 * N, 1.0 * M * K + 2.0 * M * N)
                continue
            try:
                us = med_us(lambda i: torch._scaled_mm(xq, w8[i % ncopy8].t(), scale_a=sx, scale_b=sw,
                                                       out_dtype=torch.bfloat16))
                row("torch_fp8", name, K, N, M, us, 1.0 * N * K + 4 * N, 1.0 * M * K + 2.0 * M * N)

                def fq(i):
                    q, s = quant_rows(x)
                    return torch._scaled_mm(q, w8[i % ncopy8].t(), scale_a=s, scale_b=sw, out_dtype=torch.bfloat16)
                us = med_us(fq)
                row("torch_fp8_q", name, K, N, M, us, 1.0 * N * K + 4 * N, 4.0 * M * K + 2.0 * M * N)
            except RuntimeError as e:
                print(f"# torch_fp8 {name} M={M}: {str(e).splitlines()[0]}", flush=True)
        del wb, w8, xf
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
