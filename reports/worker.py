"""One schedule (or baseline) on one workload: build, write its IR files, check and time it on the
GPU. The runner starts this in its own process with a time limit, so that a kernel that faults (a
CUDA illegal address aborts the whole process) or hangs becomes that row's error, not the run's.

Protocol: a JSON job on stdin, one JSON row as the last line of stdout.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _ir_dir(job):
    if not job.get("out_dir"):
        return None
    path = os.path.join(job["out_dir"], "ir", job["workload"].replace(":", "_"))
    os.makedirs(path, exist_ok=True)
    return path


def write_artifacts(path, name, built):
    if path is None:
        return {}
    files = {"scheduled": f"{name}.scheduled.py", "lowered": f"{name}.lowered.py",
             "cuda": f"{name}.cu", "ptx": f"{name}.ptx", "ptxas": f"{name}.ptxas.txt"}
    texts = {"scheduled": built.scheduled, "lowered": built.lowered, "cuda": built.device.cuda,
             "ptx": built.device.ptx, "ptxas": built.device.ptxas_log}
    for key, fname in files.items():
        with open(os.path.join(path, fname), "w") as f:
            f.write(texts[key])
    return {k: os.path.join(path, v) for k, v in files.items()}


def kernel_fields(built):
    k = built.kernel
    threads = 1
    for tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
        threads *= built.launch.get(tag, 1)
    grid = [built.launch.get(f"blockIdx.{a}", 1) for a in "xyz"]
    return {"registers": k.registers, "shared_bytes": k.shared_bytes, "spill_bytes": k.spills,
            "stack_bytes": k.stack_bytes, "threads_per_block": threads, "grid": grid,
            "kernels": len(built.device.kernels)}


def run_job(job) -> dict:
    import tuning.tuned  # noqa: F401  (registers tuned_gemm)
    from schedules import get, parse_workload

    from . import baselines, build as B, measure as M

    wl = parse_workload(job["workload"])
    name = job["name"]
    row = {"workload": str(wl), "kind": wl.kind, "name": name, "status": "ok"}
    gpu = job.get("gpu", False)
    target = B.cuda_target(job.get("arch"))
    out_shape, out_dtype = wl.arg_shapes()[-1]

    if name == "ceilings":
        return {**row, **measure_ceilings()}
    if name in ("numpy_cpu", "torch_cpu"):
        inputs = M.random_inputs(wl)
        ref = M.reference(wl, inputs)
        out, timing = baselines.run_cpu_baseline(name, wl, inputs)
        row.update(role="baseline", device="cpu", rel_error=M.product_error(wl, out, inputs, ref), **_timing(timing))
        return row

    module = None
    tol = 1e-5  # a baseline's; a step's own (ScheduleSpec.tolerance: larger for tf32 steps)
    if name == "cublas":
        row.update(role="baseline", device="gpu")
    else:
        if name == "tvm_dlight":
            row.update(role="baseline", device="gpu")
            built = B.build(baselines.dlight_module(wl, target), target)
        else:
            spec = get(name)
            tol = spec.tolerance
            cfg = spec.config(**job.get("params", {}))
            spec.validate(wl, cfg)
            row.update(role="schedule", step=spec.step, device="gpu", params=_asdict(cfg))
            built = B.build_config(spec.builder(wl, cfg), cfg, target)
        row.update(kernel_fields(built))
        row["files"] = write_artifacts(_ir_dir(job), name, built)
        module = built.executable
    if not gpu:
        row["status"] = "no-gpu"
        return row

    inputs = M.random_inputs(wl)  # fresh for every check
    ref = M.reference(wl, inputs)
    h = M.CudaHarness(flush=job.get("flush", True))
    bufs = [h.to_device(x) for x in inputs] + [h.empty(out_shape, out_dtype)]
    if module is not None:
        f = module["main"]
        views = [h.tvm_view(b) for b in bufs]
        fn = lambda: f(*views)  # noqa: E731
    else:
        fn = baselines.cublas_call(h, wl, bufs)
    h.poison(bufs[-1])
    fn()
    out = h.to_numpy(bufs[-1])
    row["rel_error"] = err = M.product_error(wl, out, inputs, ref)
    if not err <= tol:
        row["status"] = "wrong"
        row["error"] = (f"relative error {err:.3g} over {tol:g}" if err == err
                        else f"{int(np.isnan(out).sum())} outputs not written (NaN) or not finite")
        return row
    if not job.get("time", True):
        return row
    timing = h.bench(fn, tvm_module=getattr(module, "mod", None),
                     tvm_args=[h.tvm_view(b) for b in bufs])
    row.update(_timing(timing))
    return row


def measure_ceilings() -> dict:
    """The device's two ceilings, measured: copy bandwidth (bytes read + written by a 1 GiB
    device-to-device copy) and cuBLAS matrix-product throughput at 8192³ (fp32 with TF32 off, fp16)."""
    from . import measure as M

    h = M.CudaHarness(flush=False)
    torch = h.torch
    if torch is None:
        return {"status": "error", "error": "measuring the ceilings needs torch with CUDA"}
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t_copy = h.bench(lambda: dst.copy_(src), budget_s=0.3)
    out = {"gpu": torch.cuda.get_device_name(0), "copy_gbps": 2 * src.numel() * 4 / t_copy.median_ms / 1e6}
    del src, dst
    n = 8192
    for dtype, key in ((torch.float32, "fp32_tflops"), (torch.float16, "fp16_tflops")):
        a = torch.empty(n, n, dtype=dtype, device="cuda").uniform_(-1, 1)
        b = torch.empty_like(a)
        c = torch.empty_like(a)
        t = h.bench(lambda: torch.matmul(a, b, out=c), budget_s=0.5, min_reps=5)
        out[key] = 2 * n**3 / t.median_ms / 1e9
    out["timer"] = t.method
    return out


def _timing(t):
    return {"time_ms": t.median_ms, "time_min_ms": t.min_ms, "time_max_ms": t.max_ms,
            "reps": t.reps, "timer": t.method}


def _asdict(cfg):
    import dataclasses

    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


import numpy as np  # noqa: E402


def error_line(e) -> str:
    """The line of an exception that says what went wrong (ptxas and TVM put 'error' in it;
    the last line is often only ptxas's timing note)."""
    msg = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    line = next((ln for ln in msg if "error" in ln.lower()), msg[-1] if msg else "")
    return f"{type(e).__name__}: {line[:300]}"


def run_job_safe(job) -> dict:
    """run_job, with any exception turned into this job's row."""
    try:
        return run_job(job)
    except Exception as e:  # noqa: BLE001 - a build or run failure is this row's error
        from schedules import ScheduleParamError

        from .baselines import Unavailable

        base = {"workload": job["workload"], "name": job["name"]}
        if isinstance(e, Unavailable):
            return {**base, "role": "baseline", "status": "unavailable", "error": str(e)}
        return {**base, "status": "error",
                "error": str(e) if isinstance(e, ScheduleParamError) else error_line(e),
                "traceback": traceback.format_exc()[-4000:]}


def main():
    row = run_job_safe(json.loads(sys.stdin.read()))
    sys.stdout.write("\n" + json.dumps(row, default=float) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
