"""A probe: the rate at which blocks write tiles of a float32 C whose rows are not whole 32-byte sectors, by how
the blocks' pieces of a row meet (raw CUDA kernels in store_probe.cu, launched through the driver API with ctypes),
and a short-K product whose blocks own whole sectors. Lab timer (reports.engine.measure: L2 emptied, CUDA events).
Usage, from the checkout's root on a CUDA machine with nvcc and torch:
    PYTHONPATH=. python3 reports/results/NVIDIA_H200/store_skew/store_probe.py reports/results/NVIDIA_H200/store_skew/store_probe.cu OUT"""
import ctypes, json, os, subprocess, sys, time
import torch
from reports.engine import measure as M

cu, out = sys.argv[1], sys.argv[2]; os.makedirs(out, exist_ok=True)
cubin = os.path.join(out, "store_probe.cubin")
subprocess.check_call(["nvcc", "-cubin", "-arch=sm_90", "-O3", cu, "-o", cubin])
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
lib = ctypes.CDLL("libcuda.so.1")
mod = ctypes.c_void_p()
data = open(cubin, "rb").read()
assert lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(data)) == 0
funcs = {}
for name in ("scalar_tile", "lines_tile", "sectors_tile", "skewed_scalar_tile", "skewed_sector_tile", "vector_tile"):
    f = ctypes.c_void_p()
    assert lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
    funcs[name] = f

def launcher(f, C, m, n, bm, bn, threads):
    args = [ctypes.c_void_p(C.data_ptr()), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(bm), ctypes.c_int(bn)]
    arr = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    gx, gy = (n + bn - 1) // bn, (m + bm - 1) // bm
    stream = torch.cuda.current_stream().cuda_stream
    def run():
        r = lib.cuLaunchKernel(f, gx, gy, 1, threads, 1, 1, 0, ctypes.c_void_p(stream), arr, None)
        assert r == 0, r
    run._keep = (args, arr)
    return run

h = M.CudaHarness(flush="read")
res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": []}
SHAPES = [(6113, 8145), (2767, 5205), (5067, 11356), (3001, 2003), (4096, 8160), (8000, 4099)]
for (m, n) in SHAPES:
    C = torch.empty((m, n), dtype=torch.float32, device="cuda")
    ref = (torch.arange(m, device="cuda")[:, None] * 7 + torch.arange(n, device="cuda")[None, :]).float()
    nbytes = m * n * 4
    t = h.bench(lambda: C.fill_(1.0), budget_s=0.2).median_ms * 1e3
    res["rows"].append({"shape": f"{m}x{n}", "n_mod_32": n % 32, "variant": "flat", "us": t, "tbps": nbytes / t / 1e6})
    line = [f"{m}x{n} N%32={n % 32} flat {nbytes / t / 1e6:.2f}"]
    for bm, bn in ((128, 128), (128, 256), (64, 128)):
        for name, f in funcs.items():
            for threads in (256,):
                run = launcher(f, C, m, n, bm, bn, threads)
                C.zero_(); run(); torch.cuda.synchronize()
                ok = bool(torch.equal(C, ref))
                t = h.bench(run, budget_s=0.1).median_ms * 1e3
                res["rows"].append({"shape": f"{m}x{n}", "n_mod_32": n % 32, "variant": name, "tile": f"{bm}x{bn}",
                                    "threads": threads, "right": ok, "us": t, "tbps": nbytes / t / 1e6})
                line.append(f"{bm}x{bn} {name.replace('_tile', '')} {'' if ok else 'WRONG '}{nbytes / t / 1e6:.2f}")
    print(" | ".join(line), flush=True)
    del C, ref
    torch.cuda.empty_cache()

g = ctypes.c_void_p()
assert lib.cuModuleGetFunction(ctypes.byref(g), mod, b"skew_gemm") == 0
res["gemm"] = []
for (m, n, k) in [(6113, 8145, 27), (8000, 4099, 17), (5067, 11356, 10), (2767, 5205, 21), (3001, 2003, 31), (4096, 8192, 32), (5000, 3001, 9)]:
    A = torch.randn(m, k, device="cuda"); B = torch.randn(k, n, device="cuda"); C = torch.empty(m, n, device="cuda")
    ref = (A.double() @ B.double())
    line = [f"{m}x{n}x{k}"]
    for skew in (0, 1):
        args = [ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()), ctypes.c_void_p(C.data_ptr()),
                ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_int(skew)]
        arr = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
        stream = torch.cuda.current_stream().cuda_stream
        def run(arr=arr, args=args):
            assert lib.cuLaunchKernel(g, (n + 7 + 127) // 128, (m + 63) // 64, 1, 256, 1, 1, 0, ctypes.c_void_p(stream), arr, None) == 0
        C.zero_(); run(); torch.cuda.synchronize()
        err = float(((C.double() - ref).abs().max() / ref.abs().max()).item())
        t = h.bench(run, budget_s=0.2).median_ms * 1e3
        res["gemm"].append({"shape": f"{m}x{n}x{k}", "skew": skew, "rel_error": err, "us": t, "c_tbps": m * n * 4 / t / 1e6})
        line.append(f"skew={skew} err={err:.1e} {t:.1f} us ({m * n * 4 / t / 1e6:.2f} TB/s of C)")
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        t = h.bench(lambda: torch.mm(A, B, out=C), budget_s=0.2).median_ms * 1e3
        res["gemm"].append({"shape": f"{m}x{n}x{k}", "cublas": "tf32" if tf32 else "fp32", "us": t})
        line.append(f"cublas {'tf32' if tf32 else 'fp32'} {t:.1f}")
    torch.backends.cuda.matmul.allow_tf32 = False
    print(" | ".join(line), flush=True)
    del A, B, C, ref
json.dump(res, open(os.path.join(out, "store_probe.json"), "w"), indent=1)
