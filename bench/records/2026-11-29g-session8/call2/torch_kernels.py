"""The kernel torch._scaled_mm runs at one shape (row-wise scales, BF16 out), by torch.profiler."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile

M, K, N = (int(v) for v in sys.argv[1:4])
F8 = torch.float8_e4m3fn
x = torch.rand(M, K, device="cuda") * 2 - 1
s = x.abs().amax(dim=1, keepdim=True) / 448.0
xq = (x / s).to(F8)
w = (torch.randn(N, K, device="cuda") * 20).clamp(-448, 448).to(F8)
sw = torch.rand(1, N, device="cuda") * 0.01 + 0.001
for _ in range(3):
    torch._scaled_mm(xq, w.t(), scale_a=s, scale_b=sw, out_dtype=torch.bfloat16)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as p:
    for _ in range(5):
        torch._scaled_mm(xq, w.t(), scale_a=s, scale_b=sw, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
for e in p.key_averages():
    if e.device_type.name == "CUDA" or "CUDA" in str(e.device_type):
        print(f"{e.key[:140]} count {e.count} avg_us {e.device_time_total / max(e.count, 1):.1f}")
