"""Probe: the fastest read of N bytes under the lab's timer (L2 emptied by reading 256 MiB, CUDA events,
median): Triton read-and-sum kernels over a grid of configurations, an empty kernel, torch's copy and sum of the
same bytes. Usage: python3 read_probe.py OUT_DIR"""
import json, os, sys, time, itertools
import torch, triton, triton.language as tl
from reports.engine import measure as M

out = sys.argv[1]; os.makedirs(out, exist_ok=True)

@triton.jit
def read_grid(x_ptr, part_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    base = pid * BLOCK * ITERS
    for i in tl.static_range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(part_ptr + pid, tl.sum(acc))

@triton.jit
def read_persistent(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0); P = tl.num_programs(0)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for start in range(pid * BLOCK, n, P * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(part_ptr + pid, tl.sum(acc))

@triton.jit
def empty(part_ptr):
    pass

h = M.CudaHarness(flush="read")
warm = M.CudaHarness(flush=None)
sms = torch.cuda.get_device_properties(0).multi_processor_count
src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").uniform_()
dst = torch.empty_like(src)
copy_gbps = 2 * src.numel() * 4 / warm.bench(lambda: dst.copy_(src), budget_s=0.3).median_ms / 1e6
del src, dst
part = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
res = {"gpu": torch.cuda.get_device_name(0), "sms": sms, "copy_gbps": copy_gbps, "triton": triton.__version__,
       "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "sizes": []}
res["empty_us"] = h.bench(lambda: empty[(1,)](part), budget_s=0.2).median_ms * 1e3
res["empty_grid_us"] = h.bench(lambda: empty[(sms * 8,)](part), budget_s=0.2).median_ms * 1e3
print(res["gpu"], "copy", round(copy_gbps), "empty", res["empty_us"], res["empty_grid_us"], flush=True)
MB = [int(x) for x in os.environ.get("SIZES", "").split(",") if x] or [
    4194304, 13107200, 25690112, 33030144, 33554432, 39321600, 52428800, 117440512, 135790592, 268435456, 1073741824]
for nbytes in MB:
    n = nbytes // 4
    x = torch.randint(-8, 8, (n,), dtype=torch.int32, device="cuda")
    ref = int(x.sum().item())
    best = None; rows = []
    for block, iters, warps in itertools.product((1024, 2048, 4096), (1, 2, 4, 8, 16), (4, 8)):
        grid = triton.cdiv(n, block * iters)
        if grid > (1 << 20): continue
        f = lambda: read_grid[(grid,)](x, part, n, BLOCK=block, ITERS=iters, num_warps=warps)
        part.zero_(); f(); torch.cuda.synchronize()
        if int(part[:grid].sum().item()) != ref: rows.append({"kind": "grid", "block": block, "iters": iters, "warps": warps, "error": "wrong sum"}); continue
        t = h.bench(f, budget_s=0.05).median_ms * 1e3
        rows.append({"kind": "grid", "block": block, "iters": iters, "warps": warps, "us": t})
    for block, per_sm, warps in itertools.product((1024, 2048, 4096), (1, 2, 4, 8), (4, 8)):
        grid = min(sms * per_sm, triton.cdiv(n, block))
        f = lambda: read_persistent[(grid,)](x, part, n, BLOCK=block, num_warps=warps)
        part.zero_(); f(); torch.cuda.synchronize()
        if int(part[:grid].sum().item()) != ref: rows.append({"kind": "persistent", "block": block, "per_sm": per_sm, "warps": warps, "error": "wrong sum"}); continue
        t = h.bench(f, budget_s=0.05).median_ms * 1e3
        rows.append({"kind": "persistent", "block": block, "per_sm": per_sm, "warps": warps, "us": t})
    ok = [r for r in rows if "us" in r]
    b = min(ok, key=lambda r: r["us"])
    y = torch.empty(n // 2, dtype=torch.int32, device="cuda"); z = torch.empty_like(y)
    copy_us = h.bench(lambda: z.copy_(y), budget_s=0.1).median_ms * 1e3
    sum_us = h.bench(lambda: x.sum(), budget_s=0.1).median_ms * 1e3
    del y, z, x
    entry = {"bytes": nbytes, "best_read_us": b["us"], "best": b, "pct_copy_bw": 100 * nbytes / b["us"] / 1e3 / copy_gbps,
             "copy_same_bytes_us": copy_us, "torch_sum_us": sum_us, "configs": rows}
    res["sizes"].append(entry)
    print(f"{nbytes/1e6:8.1f} MB  best read {b['us']:7.2f} us ({entry['pct_copy_bw']:.1f}% of copy BW) {b}  copy {copy_us:.2f}  sum {sum_us:.2f}", flush=True)
json.dump(res, open(os.path.join(out, "read_probe.json"), "w"), indent=1)
