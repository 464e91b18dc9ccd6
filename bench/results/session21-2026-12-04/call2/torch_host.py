"""Host time of torch's ops in the GPT-2 block (bfloat16, (8192, 768)), hot and cold (after a
synchronize and a pause): median microseconds of 200 calls each."""
import statistics, time
import torch
import torch.nn.functional as F

d, h, t = 768, 3072, 8192
x = (torch.rand(t, d, device="cuda") * 2 - 1).to(torch.bfloat16)
w1 = ((torch.rand(d, h, device="cuda") * 2 - 1) * 0.036).to(torch.bfloat16)
w2 = ((torch.rand(h, d, device="cuda") * 2 - 1) * 0.018).to(torch.bfloat16)
g = torch.ones(d, device="cuda", dtype=torch.bfloat16)
b = torch.zeros(d, device="cuda", dtype=torch.bfloat16)
y = F.layer_norm(x, (d,), g, b, 1e-5)
z = F.gelu(y @ w1, approximate="tanh")
ops = {
    "layer_norm": lambda: F.layer_norm(x, (d,), g, b, 1e-5),
    "matmul1": lambda: y @ w1,
    "gelu_tanh": lambda: F.gelu(z, approximate="tanh"),
    "matmul2": lambda: z @ w2,
    "add": lambda: x + y,
}
for cold in (False, True):
    for name, op in ops.items():
        us = []
        for i in range(220):
            if cold or i % 50 == 0:
                torch.cuda.synchronize()
                if cold:
                    time.sleep(0.0003)
            t0 = time.perf_counter()
            op()
            if i >= 20:
                us.append((time.perf_counter() - t0) * 1e6)
        us.sort()
        print(f"torch {name:11s} {'cold' if cold else 'hot '} median {statistics.median(us):6.1f} us"
              f"  p10 {us[len(us) // 10]:6.1f}  p90 {us[len(us) * 9 // 10]:6.1f}")
