# one row-wise FP8 torch._scaled_mm (CUTLASS, promoted: use_fast_accum=False) at the gate_up shape, for ncu
import torch
M, K, N = 4096, 5120, 17408
a = (torch.randn(M, K, device="cuda") / 4).to(torch.float8_e4m3fn)
b = (torch.randn(N, K, device="cuda") / 4).to(torch.float8_e4m3fn)
sa = torch.rand(M, 1, device="cuda") + 0.5
sb = torch.rand(1, N, device="cuda") + 0.5
for _ in range(3):
    y = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
torch.cuda.synchronize()
print(y.shape, y.dtype)
