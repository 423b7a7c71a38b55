"""The lab's one measurement path: isolate → build → check against float64 → time. ``schedlab run``,
both benchmarks, the random-shape benchmark, the calibration sweep, tuning's reselection and the GPU
tests all go through it.

A *job* is one kernel or library call on one workload: a dict with ``workload`` (``gemm:MxNxK[:dtype]``,
``gemv:MxN``...), ``name`` (a registered step, ``tvm_dlight``, or a baseline of :data:`BASELINES`) and
optionally ``params`` (the step's configuration overrides) and measuring options (``timing``: the
cache policies to time under; ``budget_s``; ``time``: false to only check).

:func:`run_jobs` runs a list of jobs in two phases, each in worker processes (:mod:`reports.engine.isolate`)
so that a crash or a hang is one job's error row:

1. **build** (in parallel, one job per worker at a time): the schedule is built and compiled (the
   lab's compiler: PTX and ptxas's report), its IR is written when asked, and on a GPU machine the
   compiled module is exported for phase 2;
2. **measure** (one worker: the GPU to itself, nothing building beside it): for each job, fresh
   random inputs, the output poisoned with NaN, one run, the error against a float64 product of the
   same inputs (every output must be written and finite, the error under the step's tolerance), then
   the timing: CUDA events around each run, L2 emptied before each, median
   (:class:`reports.engine.measure.CudaHarness`). CPU baselines are timed here too, alone.

Without a GPU, phase 2 only times the CPU baselines; kernel rows say ``no-gpu`` and carry their
build figures, and no time is invented.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile

import tvm

from schedules import ScheduleParamError, get, parse_workload
from schedules.common import use_gpu
from schedules.names import slug
from schedules.registry import PRECISION, input_tolerance

from . import baselines, build as B, measure as M
from .build import cuda_available, device_arch
from .isolate import Pool

BASELINES = {
    "numpy_cpu": "NumPy on the CPU (its BLAS)",
    "torch_cpu": "PyTorch on the CPU",
    "cublas": "cuBLAS through PyTorch, same input and output types as the kernels (TF32 off; the product alone)",
    "cublas_tf32": "cuBLAS through PyTorch in TF32 mode (fp32 inputs read as tf32)",
    "cublaslt_fused": "cuBLASLt's fused epilogue through PyTorch (addmm, _addmm_activation): bias, ReLU or GELU tanh",
    "torch_eager": "eager PyTorch: the product, then one kernel per epilogue operation (bias, activation, residual)",
    "tvm_dlight": "TVM's default GPU rules (s_tir.dlight), a fair TVM baseline",
    "dequant_bf16_cublas": "block-scaled 8-bit inputs dequantized into bfloat16 by PyTorch, then cuBLAS's bf16 GEMM",
}
EPILOGUE_BASELINES = ("cublaslt_fused", "torch_eager")
DEQUANT_BASELINE = "dequant_bf16_cublas"  # block scales: what runs without an FP8 GEMM
GPU_BASELINES = ("cublas", "cublas_tf32", DEQUANT_BASELINE, *EPILOGUE_BASELINES, "tvm_dlight")
CPU_BASELINES = ("numpy_cpu", "torch_cpu")
LIBRARY = ("cublas", "cublas_tf32", DEQUANT_BASELINE, *EPILOGUE_BASELINES, "numpy_cpu", "torch_cpu",
           "ceilings")  # nothing to build
DEFAULT_TIMING = ("read",)


def job_id(job: dict) -> str:
    params = ",".join(f"{k}={v}" for k, v in sorted((job.get("params") or {}).items()))
    return f"{job['workload']}|{job['name']}" + (f"|{params}" if params else "")


def precision(name: str, dtype: str) -> str:
    """The arithmetic a row's figures are compared in: the input type, or tf32 for steps that read
    fp32 inputs as tf32 (and cuBLAS in TF32 mode)."""
    if name == "cublas_tf32":
        return "tf32"
    try:
        spec = get(name)
    except ScheduleParamError:
        return PRECISION[dtype]
    return spec.precision(dtype)


# --- phase 1: build --------------------------------------------------------------------------------
def kernel_fields(built) -> dict:
    k = built.kernel
    threads = 1
    for tag in ("threadIdx.x", "threadIdx.y", "threadIdx.z"):
        threads *= built.launch.get(tag, 1)
    grid = [built.launch.get(f"blockIdx.{a}", 1) for a in "xyz"]
    return {"registers": k.registers, "shared_bytes": k.shared_bytes, "spill_bytes": k.spills,
            "stack_bytes": k.stack_bytes, "threads_per_block": threads, "grid": grid,
            "kernels": len(built.device.kernels), "ptx_counts": ptx_counts(built.device.ptx)}


PTX_MARKS = {"wgmma": "wgmma.mma_async", "mma_sync": "mma.sync.aligned", "wmma": "wmma.mma",
             "cp_async": "cp.async.c", "cp_async_bulk": "cp.async.bulk.tensor", "mbarrier_wait": "mbarrier.try_wait",
             "setmaxnreg": "setmaxnreg", "ld_global_v4": "ld.global.nc.v4", "ld_shared_v4": "ld.shared.v4",
             "bar_sync": "bar.sync", "shfl": "shfl.sync"}


def ptx_counts(ptx: str) -> dict:
    """How often the instructions a step is about appear in its PTX (for the tables and tests)."""
    return {key: ptx.count(mark) for key, mark in PTX_MARKS.items() if mark in ptx}


def write_ir(path: str, name: str, built) -> dict:
    files = {"scheduled": f"{name}.scheduled.py", "lowered": f"{name}.lowered.py", "cuda": f"{name}.cu",
             "ptx": f"{name}.ptx", "ptxas": f"{name}.ptxas.txt"}
    texts = {"scheduled": built.scheduled, "lowered": built.lowered, "cuda": built.device.cuda,
             "ptx": built.device.ptx, "ptxas": built.device.ptxas_log}
    os.makedirs(path, exist_ok=True)
    for key, fname in files.items():
        with open(os.path.join(path, fname), "w") as f:
            f.write(texts[key])
    return {k: os.path.join(path, v) for k, v in files.items()}


def ir_dir(out_dir: str, workload: str) -> str:
    return os.path.join(out_dir, "ir", workload.replace(":", "_"))


def build_kernel(job: dict):
    """(row, Built) for a kernel job (a step or tvm_dlight), built as everything in the lab is."""
    use_gpu(job.get("gpu"))  # the GPU shape-driven choices are made for (the parent read it)
    wl = parse_workload(job["workload"])
    target = B.cuda_target(job.get("arch"))
    row = {"workload": str(wl), "name": job["name"], "kind": wl.kind, "precision": precision(job["name"], wl.dtype)}
    if job["name"] == "tvm_dlight":
        row.update(role="baseline", device="gpu")
        built = B.build(baselines.dlight_module(wl, target), target)
    else:
        spec, _, cfg, resolved = B.resolve_named(job["name"], wl, job.get("params"))  # a best_* choice, made once
        row.update(role="schedule", device="gpu", step=spec.step, ladder=spec.label, params=_asdict(cfg),
                   tolerance=spec.tolerance_for(wl))
        if resolved.chosen is not None:  # a best_* step: what it chose for the shape, the step and its configuration
            row.update(chosen=resolved.chosen, chosen_step=resolved.step.name,
                       chosen_params=_asdict(resolved.step_config))
            if resolved.calibrated_on:  # the model that chose was calibrated on another GPU: which
                row["calibrated_on"] = resolved.calibrated_on
        built = B.build_resolved(resolved, wl, target)
    row.update(kernel_fields(built))
    return row, built


def build_job(job: dict) -> dict:
    """Phase 1 in a worker: build, write the IR files (``ir_dir``), export the module (``lib``)."""
    if job["name"] in LIBRARY:
        return {"status": "ready", "role": "baseline"}
    row, built = build_kernel(job)
    if job.get("ir_dir"):
        row["files"] = write_ir(job["ir_dir"], job["name"] if not job.get("params") else _slug(job_id(job)), built)
    if job.get("lib"):
        built.executable.export_library(job["lib"])
        row["lib"] = job["lib"]
    row["status"] = "built"
    return row


# --- phase 2: check and time -------------------------------------------------------------------------
_STATE: dict = {}  # the measuring worker's harnesses and device inputs, kept across its jobs


def _harness(policy: str):
    key = ("harness", policy)
    if key not in _STATE:
        if policy == "warm":  # no flush; a GPU spin queues the launch so no host gap is timed
            h = M.CudaHarness(flush=None)
            if h.torch is not None:
                h.before_run = lambda: h.torch.cuda._sleep(100_000)
        else:
            h = M.CudaHarness(flush=policy)
        _STATE[key] = h
    return _STATE[key]


def measure_job(job: dict, executable=None) -> dict:
    """Phase 2 for one job: check against float64, then time. ``executable``: an already built
    module (in-process callers: the GPU tests); otherwise the job's exported ``lib`` is loaded."""
    wl = parse_workload(job["workload"])
    name = job["name"]
    row = {"workload": str(wl), "name": name}
    if name == "ceilings":
        return {**row, **measure_ceilings(job.get("copy_bytes", ()))}
    if name in CPU_BASELINES:
        inputs = M.random_inputs(wl)
        out, timing = baselines.run_cpu_baseline(name, wl, inputs)
        err = M.product_error(wl, out, inputs)
        return {**row, "role": "baseline", "device": "cpu", "status": "ok", "rel_error": err,
                "precision": precision(name, wl.dtype), **timing_fields(timing)}
    h = _harness(job.get("timing", DEFAULT_TIMING)[0])
    inputs, out = M.device_buffers(h, wl)
    checked, checked_inputs = wl, inputs  # what the output is checked against
    if name in ("cublas", "cublas_tf32", DEQUANT_BASELINE):
        if name == DEQUANT_BASELINE:
            fn, call = baselines.dequant_call(h.torch, wl, inputs, out)
            tol = baselines.dequant_tolerance(wl)
        else:
            fn, call = baselines.cublas_call(h, wl, inputs, out, tf32=name == "cublas_tf32")
            tol = baselines.cublas_tolerance(wl, tf32=name == "cublas_tf32")
        row.update(role="baseline", device="gpu", cublas_call=call, precision=precision(name, wl.dtype))
        tvm_module, tvm_args = None, None
        if getattr(wl, "epilogue", None) is not None:  # the product alone (FP8: scaled), into the output type
            checked, checked_inputs = wl.product_only(), inputs[:wl.operand_count]
    elif name in EPILOGUE_BASELINES:
        if h.torch is None:
            raise baselines.Unavailable(f"{name} needs torch with CUDA")
        fn, call = baselines.epilogue_call(h.torch, wl, inputs, out, name)
        row.update(role="baseline", device="gpu", cublas_call=call, precision=precision(name, wl.dtype))
        tol = baselines.eager_tolerance(wl) if name == "torch_eager" else baselines.cublas_tolerance(wl)
        tvm_module, tvm_args = None, None
    else:
        module = executable if executable is not None else tvm.runtime.load_module(job["lib"])
        f = module["main"]
        views = [h.tvm_view(b) for b in (*inputs, out)]
        fn = lambda: f(*views)  # noqa: E731
        tvm_module, tvm_args = getattr(module, "mod", module), views
        tol = job.get("tolerance") or _step_tolerance(name, wl)
    M.refill(h, inputs)  # fresh random values for every check
    h.poison(out)
    fn()
    for _ in range(int(job.get("launches", 0))):  # extra untimed launches (a profiler's target)
        fn()
    err = M.product_error(checked, h.to_host(out), [h.to_host(x) for x in checked_inputs])
    row["rel_error"], row["tolerance"] = err, tol
    if not err <= tol:
        nan = M.count_not_finite(h.to_host(out))
        row.update(status="wrong", error=(f"{nan} outputs not written (NaN) or not finite" if nan
                                          else f"relative error {err:.3g} over {tol:g}"))
        return row
    row["status"] = "ok"
    if not job.get("time", True):
        return row
    budget = float(job.get("budget_s", 0.4))
    for n, policy in enumerate(job.get("timing", DEFAULT_TIMING)):
        t = _harness(policy).bench(fn, budget_s=budget, tvm_module=tvm_module, tvm_args=tvm_args)
        if n == 0:
            row.update(timing_fields(t))
        row[f"time_{policy}_ms"] = t.median_ms
    return row


def _step_tolerance(name, wl) -> float:
    """A step's own tolerance; the input type's for kernels that are not steps (tvm_dlight)."""
    try:
        return get(name).tolerance_for(wl)
    except ScheduleParamError:
        return input_tolerance(wl)


def timing_fields(t) -> dict:
    return {"time_ms": t.median_ms, "time_min_ms": t.min_ms, "time_max_ms": t.max_ms, "reps": t.reps,
            "timer": t.method}


def measure_ceilings(copy_bytes=()) -> dict:
    """The device's two ceilings, measured: copy bandwidth (bytes read + written by a 1 GiB
    device-to-device copy) and cuBLAS matrix-product throughput at 8192³ (fp32 with TF32 off, fp16).
    With ``copy_bytes``: also the time of a copy that moves each of those many bytes (half read, half
    written; ``copy_us``, keyed by the bytes as text), under the kernels' own timer (L2 emptied
    before each run): what a copy of a small layer's bytes costs, launch included. Not a bound on a kernel
    that reads them all: the copy reads half and its writes stay in L2 (an H100 read 33.6 MB in 14.9 µs at
    best where the copy took 13.0: reports/results/NVIDIA_H100_80GB_HBM3/read_ceiling)."""
    h = M.CudaHarness(flush=None)
    torch = h.torch
    if torch is None:
        return {"status": "unavailable", "error": "measuring the ceilings needs torch with CUDA"}
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t_copy = h.bench(lambda: dst.copy_(src), budget_s=0.3)
    out = {"status": "ok", "gpu": torch.cuda.get_device_name(0),
           "copy_gbps": 2 * src.numel() * 4 / t_copy.median_ms / 1e6}
    del src, dst
    if copy_bytes:
        try:  # what these cost must not lose the ceilings above: an error here is kept beside them
            timed = M.CudaHarness(flush="read")
            out["copy_us"] = {}
            for nbytes in sorted({int(b) for b in copy_bytes}):
                src = torch.empty(max(1, nbytes // 8), dtype=torch.float32, device="cuda").uniform_()
                dst = torch.empty_like(src)
                out["copy_us"][str(nbytes)] = timed.bench(lambda: dst.copy_(src), budget_s=0.1).median_ms * 1e3
                del src, dst
        except Exception as e:  # noqa: BLE001 (out of memory, a device error: one line)
            out["copy_us_error"] = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    n = 8192
    for dtype, key in ((torch.float32, "fp32_tflops"), (torch.float16, "fp16_tflops")):
        a = torch.empty(n, n, dtype=dtype, device="cuda").uniform_(-1, 1)
        b = torch.empty_like(a)
        c = torch.empty_like(a)
        t = h.bench(lambda: torch.matmul(a, b, out=c), budget_s=0.5, min_reps=5)
        out[key] = 2 * n**3 / t.median_ms / 1e9
    out["timer"] = t.method
    props = torch.cuda.get_device_properties(0)
    out.update(sms=props.multi_processor_count, memory_gib=props.total_memory / 2**30)
    return out


# --- both phases ---------------------------------------------------------------------------------------
def run_jobs(jobs: list[dict], *, gpu: bool | None = None, out_dir: str | None = None, workers: int | None = None,
             timeout: float = 300.0, on_row=None, on_build=None, write_ir_files: bool = True,
             until: float | None = None) -> list[dict]:
    """Build, check and time ``jobs`` (see the module's docstring). ``on_row(row)`` is called with
    each job's final row as it is measured (in job order), ``on_build(row)`` with each build's row
    as it finishes. Returns the rows in job order. ``until``: the moment (time.time()) everything is
    over by: the job under way then is killed and the rest are ``skipped`` rows (a time limit). Interrupted (Ctrl-C), it first calls ``on_row``
    for each kernel built but not measured (status ``built``; ``no-gpu`` without a GPU), so that
    what was built is kept, then lets the interrupt go on."""
    gpu = cuda_available() if gpu is None else gpu
    arch = device_arch()
    jobs = [dict(j, id=j.get("id") or job_id(j), arch=j.get("arch") or arch) for j in jobs]
    lib_dir = tempfile.mkdtemp(prefix="schedlab-libs-") if gpu else None
    for n, job in enumerate(jobs):
        if job["name"] not in LIBRARY:
            if out_dir and write_ir_files:  # absolute: the workers run in the lab's folder, not the caller's
                job["ir_dir"] = ir_dir(os.path.abspath(out_dir), job["workload"])
            if gpu:
                job["lib"] = os.path.join(lib_dir, f"k{n}.so")
    built: dict[str, dict] = {}
    reported: set[str] = set()

    def report(row):
        reported.add(row["id"])
        if on_row is not None:
            on_row(row)

    try:
        return _run_jobs(jobs, gpu, workers, timeout, built, report, on_build, out_dir, until)
    except KeyboardInterrupt:
        for job in jobs:
            b = built.get(job["id"], {})
            if job["id"] not in reported and b.get("status") == "built":
                report(_final(job, b, {"status": "no-gpu"}) if not gpu else dict(_final(job, b, {}), status="built"))
        raise
    finally:
        if lib_dir:
            shutil.rmtree(lib_dir, ignore_errors=True)


def _run_jobs(jobs, gpu, workers, timeout, built, on_row, on_build, out_dir, until=None) -> list[dict]:
    to_build = [j for j in jobs if j["name"] not in LIBRARY]
    if to_build:
        workers = workers or max(1, min(len(to_build), (os.cpu_count() or 2) - 1))

        def done_building(index, row):
            if out_dir and isinstance(row.get("files"), dict):  # the IR files, relative to the results folder
                row["files"] = {k: os.path.relpath(v, os.path.abspath(out_dir)) for k, v in row["files"].items()}
            built[to_build[index]["id"]] = row
            if on_build is not None:
                on_build(row)

        with Pool("reports.engine.harness:build_job", workers, timeout, until=until) as pool:
            pool.map(to_build, on_row=done_building)
    rows: list[dict] = []
    measurable = []
    for job in jobs:
        b = built.get(job["id"], {})
        if job["name"] not in LIBRARY and b.get("status") != "built":
            rows.append(_final(job, b, {}))
        elif not gpu and job["name"] not in CPU_BASELINES:
            rows.append(_final(job, b, {"status": "no-gpu"} if job["name"] not in LIBRARY else
                               {"status": "unavailable", "error": "no CUDA GPU here"}))
        else:
            measurable.append(job)
            rows.append(None)
    for r in rows:
        if r is not None:
            on_row(r)
    if measurable:
        slots = [n for n, r in enumerate(rows) if r is None]

        def done(index, row):
            job = measurable[index]
            rows[slots[index]] = final = _final(job, built.get(job["id"], {}), row)
            on_row(final)

        meas = [dict(j, tolerance=built.get(j["id"], {}).get("tolerance")) for j in measurable]
        with Pool("reports.engine.harness:measure_job", 1, timeout, until=until) as pool:
            pool.map(meas, on_row=done)
    return rows


def _final(job: dict, built: dict, measured: dict) -> dict:
    row = {"id": job["id"], "workload": job["workload"], "name": job["name"], **(job.get("extra") or {})}
    row.update({k: v for k, v in built.items() if k not in ("lib",)})
    if built.get("status") == "built":
        row["status"] = "built"
    row.update(measured)
    if row.get("status") in ("built", "ready"):
        row["status"] = "ok"
    defaults = _defaults(job)
    for key, value in defaults.items():
        if key not in row:
            row[key] = value
    return row


def _defaults(job):
    """A row's role, precision and device, and a step's number and label: what a row whose build
    failed before it said them still carries (so that it sorts in its ladder's place)."""
    wl = parse_workload(job["workload"])
    name = job["name"]
    role = "baseline" if name in BASELINES or name == "ceilings" else "schedule"
    try:
        prec = precision(name, wl.dtype)
    except Exception:  # noqa: BLE001 - an unknown name: its row says so already
        prec = None
    out = {"role": role, "precision": prec, "device": "cpu" if name in CPU_BASELINES else "gpu"}
    if role == "schedule":
        try:
            spec = get(name)
            out.update(step=spec.step, ladder=spec.label)
        except ScheduleParamError:  # an unknown name: its row says so already
            pass
    return out


def _asdict(cfg) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def _slug(text: str) -> str:
    """A job's IR file name: its parameters (character for character), cut short, and a hash of
    the whole id."""
    short = hashlib.sha1(text.encode()).hexdigest()[:8]
    return slug(text.split("|", 1)[-1], keep="._-", squeeze=False)[:60] + "-" + short


# --- in-process use (the GPU tests, profiling) ------------------------------------------------------------
def check_in_process(name: str, workload: str, params: dict | None = None, time: bool = False, **options) -> dict:
    """Build and check one kernel in this process (no isolation), through the same functions the
    workers run. Returns the measured row (``rel_error``, ``status``...)."""
    job = {"workload": workload, "name": name, "params": params or {}, "arch": device_arch(), "time": time, **options}
    if name in LIBRARY:
        return measure_job(job)
    row, built = build_kernel(job)
    return {**row, **measure_job(dict(job, tolerance=row.get("tolerance")), executable=built.executable)}


def dump_rows(rows, path):
    with open(path, "w") as f:
        json.dump(rows, f, indent=1, default=float)
