"""A probe: short-K products on tensor cores (WMMA) whose blocks own whole sectors of C, against the same kernel with
its blocks' pieces meeting mid-sector, and cuBLAS. Usage, from the checkout's root on a CUDA machine with nvcc and torch:
    PYTHONPATH=. python3 reports/results/NVIDIA_H200/store_skew/tc_probe.py reports/results/NVIDIA_H200/store_skew/tc_probe.cu OUT"""
import ctypes, json, os, subprocess, sys, time
import torch
from reports.engine import measure as M

cu, out = sys.argv[1], sys.argv[2]; os.makedirs(out, exist_ok=True)
cubin = os.path.join(out, "tc_probe.cubin")
subprocess.check_call(["nvcc", "-cubin", "-arch=sm_90", "-O3", cu, "-o", cubin])
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
lib = ctypes.CDLL("libcuda.so.1")
mod = ctypes.c_void_p()
assert lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(open(cubin, "rb").read())) == 0
fn = {}
for name in ("tc_skew_fp16", "tc_skew_tf32"):
    f = ctypes.c_void_p(); assert lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0; fn[name] = f
h = M.CudaHarness(flush="read")
res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": []}
SHAPES = [(6113, 8145, 27), (2646, 16133, 15), (2673, 2860, 12), (1399, 10621, 17), (16305, 6904, 3), (4096, 8192, 32),
          (8000, 4099, 17), (5067, 11356, 10), (3001, 2003, 31), (12000, 6001, 24)]
for prec in ("fp16", "tf32"):
    for (m, n, k) in SHAPES:
        dt = torch.float16 if prec == "fp16" else torch.float32
        A = torch.randn(m, k, device="cuda").to(dt); B = torch.randn(k, n, device="cuda").to(dt)
        C = torch.empty(m, n, device="cuda")
        ref = A.double() @ B.double()
        row = {"shape": f"{m}x{n}x{k}", "precision": prec}
        for skew in (0, 1):
            args = [ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()), ctypes.c_void_p(C.data_ptr()),
                    ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_int(skew)]
            arr = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
            stream = torch.cuda.current_stream().cuda_stream
            def run(arr=arr, args=args, f=fn["tc_skew_" + prec]):
                assert lib.cuLaunchKernel(f, (n + 7 + 127) // 128, (m + 63) // 64, 1, 256, 1, 1, 0, ctypes.c_void_p(stream), arr, None) == 0
            C.fill_(float("nan")); run(); torch.cuda.synchronize()
            row[f"rel_error_skew{skew}"] = float(((C.double() - ref).abs().max() / ref.abs().max()).item())
            row[f"us_skew{skew}"] = h.bench(run, budget_s=0.2).median_ms * 1e3
        if prec == "fp16":
            try:
                f = lambda: torch.mm(A, B, out_dtype=torch.float32)
                f(); row["cublas"] = "fp16 in, fp32 out (torch.mm out_dtype)"
            except Exception as e:  # noqa
                f = lambda: torch.mm(A, B); row["cublas"] = f"fp16 out ({type(e).__name__})"
        else:
            torch.backends.cuda.matmul.allow_tf32 = True
            f = lambda: torch.mm(A, B, out=C); row["cublas"] = "tf32"
        row["us_cublas"] = h.bench(f, budget_s=0.2).median_ms * 1e3
        torch.backends.cuda.matmul.allow_tf32 = False
        row["c_tbps_skew1"] = m * n * 4 / row["us_skew1"] / 1e6
        res["rows"].append(row)
        print(f"{prec} {row['shape']}: pieces meeting {row['us_skew0']:.1f} us err {row['rel_error_skew0']:.1e} | "
              f"whole sectors {row['us_skew1']:.1f} us ({row['c_tbps_skew1']:.2f} TB/s) err {row['rel_error_skew1']:.1e} | "
              f"cuBLAS {row['us_cublas']:.1f} ({row['cublas']})", flush=True)
        del A, B, C, ref
json.dump(res, open(os.path.join(out, "tc_probe.json"), "w"), indent=1)
