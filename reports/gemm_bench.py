"""GEMM benchmark machinery shared by ``scripts/bench_gemm.py`` and ``scripts/sweep_gemm.py``.

A *job* is one kernel on one workload: a registered schedule with parameters, TVM's dlight rules,
or cuBLAS (through torch). Two phases, each guarded against faults:

1. build: TVM schedules are built in a pool of fresh processes (``spawn``), each exported as a
   shared library with its cubin (on a GPU machine) and its ptxas report;
2. time: one process per workload loads the libraries and, for each job, checks the result against
   float64 (fresh random inputs, output poisoned with NaN), then times it with
   :meth:`reports.measure.CudaHarness.bench` (CUDA events, L2 emptied before each run, median).
   A job that kills its process (illegal address) becomes an error row and the process is
   restarted on the remaining jobs.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job_id(job) -> str:
    params = ",".join(f"{k}={v}" for k, v in sorted(job.get("params", {}).items()))
    return f"{job['workload']}|{job['name']}|{params}"


# --- phase 1: build ----------------------------------------------------------------------------
def _ptx_counts(ptx: str, cuda: str) -> dict:
    return {"cp_async": cuda.count("cp.async"), "mma_sync": ptx.count("mma.sync.aligned.m16n8"),
            "wmma_mma": ptx.count("wmma.mma"),
            "ldmatrix": ptx.count("ldmatrix"), "ld_shared_v4": ptx.count("ld.shared.v4"),
            "st_shared_v4": ptx.count("st.shared.v4"), "ld_global_v4": ptx.count("ld.global.nc.v4"),
            "bar_sync": ptx.count("bar.sync")}


def build_job(job: dict) -> dict:
    """Build one job and export it to ``job['lib']``. Runs in a pool process."""
    t0 = time.time()
    row = {"id": job_id(job), "workload": job["workload"], "name": job["name"], "params": job.get("params", {})}
    try:
        from schedules import get, parse_workload

        from . import baselines, build as B

        wl = parse_workload(job["workload"])
        target = B.cuda_target(job.get("arch"))
        if job["name"] == "tvm_dlight":
            built = B.build(baselines.dlight_module(wl, target), target)
        else:
            spec = get(job["name"])
            cfg = spec.config(**job.get("params", {}))
            spec.validate(wl, cfg)
            row["step"] = spec.step
            built = B.build_config(spec.builder(wl, cfg), cfg, target)
        built.executable.export_library(job["lib"])
        row.update(status="built", lib=job["lib"],
                   kernels=[{"name": k.name, "registers": k.registers, "shared_bytes": k.shared_bytes,
                             "spill_bytes": k.spills} for k in built.device.kernels],
                   registers=built.kernel.registers, spill_bytes=sum(k.spills for k in built.device.kernels),
                   launch=built.launch, **_ptx_counts(built.device.ptx, built.device.cuda))
    except Exception as e:  # noqa: BLE001 - a failed build is this job's row
        msg = str(e).strip().splitlines()
        row.update(status="build-error", error=(msg[-1] if msg else type(e).__name__)[:400],
                   traceback=traceback.format_exc()[-2000:])
    row["build_s"] = round(time.time() - t0, 2)
    return row


def build_all(jobs, lib_dir, workers=8, arch=None, progress=True):
    """Build every TVM job in parallel; returns {id: build row}."""
    os.makedirs(lib_dir, exist_ok=True)
    todo = []
    for n, job in enumerate(jobs):
        if job["name"] in CUBLAS:
            continue
        todo.append({**job, "lib": os.path.join(lib_dir, f"k{n}.so"), "arch": arch})
    rows = {}
    ctx = mp.get_context("spawn")
    for _attempt in range(3):  # a build that kills its worker breaks the pool: start a new one
        todo = [j for j in todo if job_id(j) not in rows]
        if not todo:
            break
        try:
            with ProcessPoolExecutor(min(workers, len(todo)), mp_context=ctx, initializer=_pool_init) as pool:
                futures = [pool.submit(build_job, j) for j in todo]
                for fut in as_completed(futures):
                    row = fut.result()
                    rows[row["id"]] = row
                    if progress:
                        extra = (f"{row['registers']} regs, {row['spill_bytes']} B spilled"
                                 if row["status"] == "built" else row["error"][:160])
                        print(f"  built {row['id']}: {row['status']} ({extra}) {row['build_s']} s", flush=True)
        except BrokenProcessPool as e:
            print(f"  build pool broke ({e}); restarting on the remaining jobs", flush=True)
    for j in todo:
        rows.setdefault(job_id(j), {"id": job_id(j), "workload": j["workload"], "name": j["name"],
                                    "params": j.get("params", {}), "status": "build-error",
                                    "error": "its build process died"})
    return rows


def _pool_init():
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import warnings

    warnings.filterwarnings("ignore")


# --- phase 2: check and time -------------------------------------------------------------------
TOLERANCE = {"float32": 1e-5, "float16": 1e-4}
CUBLAS = ("cublas", "cublas_tf32")  # the library baselines: torch.matmul, the second with TF32 allowed


def tolerance(name: str, dtype: str) -> float:
    """The largest relative error a job passes with: the input type's, or the step's own where it
    is larger (tf32 steps, ScheduleSpec.tolerance); 1e-2 for cuBLAS (its fp16 output rounds)."""
    if name in CUBLAS:
        return 1e-2
    from schedules import ScheduleParamError, get

    try:
        step = get(name).tolerance
    except ScheduleParamError:  # tvm_dlight: not a step of the lab
        step = 0.0
    return max(TOLERANCE[dtype], step)


def _time_jobs(jobs, budget_s):
    """Runs in the timing process: check then time each job; one JSON line per job."""
    import torch
    import tvm

    from schedules import parse_workload

    from .measure import CudaHarness

    h = CudaHarness()
    cache = {}
    for job in jobs:
        print(json.dumps({"start": job["id"]}), flush=True)
        wl = parse_workload(job["workload"])
        row = {"id": job["id"], "workload": job["workload"], "name": job["name"], "params": job.get("params", {})}
        dt = getattr(torch, wl.dtype)
        if wl.shape not in cache:
            cache.clear()
            a = torch.empty(wl.M, wl.K, device="cuda").uniform_(-1, 1).to(dt)
            b = torch.empty(wl.K, wl.N, device="cuda").uniform_(-1, 1).to(dt)
            ref = a.double() @ b.double()
            cache[wl.shape] = (a, b, ref, ref.norm().item())
        a, b, ref, ref_norm = cache[wl.shape]
        a, b = a.to(dt), b.to(dt)
        torch.backends.cuda.matmul.allow_tf32 = job["name"] == "cublas_tf32"  # cuBLAS in TF32 mode: by name
        if job["name"] in CUBLAS:
            out = torch.empty(wl.M, wl.N, device="cuda", dtype=dt)
            fn = lambda: torch.matmul(a, b, out=out)  # noqa: E731
        else:
            out = torch.empty(wl.M, wl.N, device="cuda", dtype=getattr(torch, wl.acc_dtype))
            f = tvm.runtime.load_module(job["lib"])["main"]
            views = [tvm.runtime.from_dlpack(x) for x in (a, b, out)]
            fn = lambda: f(*views)  # noqa: E731
        # fresh inputs for the check (the timing reuses them: values do not change the time)
        a.uniform_(-1, 1)
        b.uniform_(-1, 1)
        torch.matmul(a.double(), b.double(), out=ref)
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        nan = int(torch.isnan(out).sum().item())
        err = float(((out.double() - ref).norm() / ref.norm()).item()) if not nan else float("nan")
        tol = tolerance(job["name"], wl.dtype)
        row["rel_error"] = err
        if nan or not err <= tol:
            row.update(status="wrong", error=f"{nan} outputs not written (NaN)" if nan else
                       f"relative error {err:.3g} over {tol:g}")
        else:
            t = h.bench(fn, budget_s=budget_s)
            row.update(status="ok", time_ms=t.median_ms, time_min_ms=t.min_ms, reps=t.reps, timer=t.method,
                       tflops=wl.flops / t.median_ms / 1e9)
        print(json.dumps(row), flush=True)


def time_all(jobs, budget_s=0.3, timeout_s=600, progress=True):
    """Time jobs grouped by workload, each group in its own process, restarted past a job that
    kills it. Returns {id: row}."""
    rows = {}
    groups = {}
    for job in jobs:
        groups.setdefault(job["workload"], []).append(job)
    for workload, group in groups.items():
        remaining = list(group)
        while remaining:
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", "import json,sys; from reports.gemm_bench import _time_jobs;"
                     "_time_jobs(json.loads(sys.stdin.read()), %r)" % budget_s],
                    input=json.dumps(remaining), capture_output=True, text=True, cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
                    timeout=timeout_s)
            except subprocess.TimeoutExpired:
                for j in remaining:
                    rows.setdefault(j["id"], {"id": j["id"], "workload": workload, "name": j["name"],
                                              "params": j.get("params", {}), "status": "error",
                                              "error": f"timing process ran past {timeout_s} s"})
                break
            started = None
            for line in proc.stdout.splitlines():
                if not line.startswith("{"):
                    continue
                msg = json.loads(line)
                if "start" in msg:
                    started = msg["start"]
                    continue
                rows[msg["id"]] = msg
                started = None
                if progress:
                    detail = (f"{msg['tflops']:.2f} TFLOP/s, err {msg['rel_error']:.2g}" if msg["status"] == "ok"
                              else msg.get("error", ""))
                    print(f"  timed {msg['id']}: {detail}", flush=True)
            done = {r for r in rows}
            if started is not None:  # it died inside this job
                tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-3:]
                job = next(j for j in remaining if j["id"] == started)
                rows[started] = {"id": started, "workload": workload, "name": job["name"],
                                 "params": job.get("params", {}), "status": "crash",
                                 "error": f"process died (exit {proc.returncode}): {' | '.join(tail)[:300]}"}
                print(f"  timed {started}: CRASH {rows[started]['error']}", flush=True)
                done.add(started)
            elif proc.returncode != 0:
                tail = proc.stderr.strip()[-600:]
                for j in remaining:
                    if j["id"] not in rows:
                        rows[j["id"]] = {"id": j["id"], "workload": workload, "name": j["name"],
                                         "params": j.get("params", {}), "status": "crash", "error": tail}
                break
            remaining = [j for j in remaining if j["id"] not in done]
    return rows


def run(jobs, lib_dir, workers=8, budget_s=0.3, progress=True):
    """Build then time ``jobs``; returns the merged rows in job order."""
    for job in jobs:
        job["id"] = job_id(job)
    t0 = time.time()
    from .build import device_arch

    built = build_all(jobs, lib_dir, workers=workers, arch=device_arch(), progress=progress)
    if progress:
        print(f"built {len(built)} kernels in {time.time() - t0:.0f} s", flush=True)
    timeable = []
    for job in jobs:
        b = built.get(job["id"])
        if job["name"] in CUBLAS or (b and b["status"] == "built"):
            timeable.append({**job, "lib": b["lib"] if b else None})
    from .build import cuda_available

    if cuda_available():
        timed = time_all(timeable, budget_s=budget_s, progress=progress)
    else:  # built and reported, never timed: no figure is invented
        timed = {j["id"]: {"status": "no-gpu"} for j in timeable}
    rows = []
    for job in jobs:
        row = {**built.get(job["id"], {}), **timed.get(job["id"], {})}
        row.setdefault("id", job["id"])
        row.setdefault("workload", job["workload"])
        row.setdefault("name", job["name"])
        row.setdefault("params", job.get("params", {}))
        row.pop("traceback", None)
        rows.append(row)
    return rows
