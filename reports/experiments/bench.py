"""What every benchmark shares: a list of jobs through the lab's one measurement path
(:func:`reports.engine.harness.run_jobs`), the device's ceilings measured in the same run, progress,
and the results as a DataFrame with its provenance. A benchmark module only says which jobs to run
and how to tabulate them (:mod:`reports.experiments.bench_gemm`, :mod:`~.bench_gemv`,
:mod:`~.bench_layouts`, :mod:`~.bench_random`, :mod:`~.sweep`)."""

from __future__ import annotations

import pandas as pd

from schedules import ScheduleParamError, get, parse_workload

from ..engine import results as R
from ..engine.baselines import gpu_baselines
from ..engine.build import check_runs_here, cuda_available, device_arch, device_spec
from ..engine.files import ensure_out_dir
from ..engine.harness import DEQUANT_BASELINE, EPILOGUE_BASELINES, LIBRARY, run_jobs
from ..engine.progress import Progress
from ..engine.provenance import provenance


def label(name: str, params) -> str:
    """``name[k=v,...]``: a kernel with its non-default parameters."""
    params = params if isinstance(params, dict) else {}
    text = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    return name + (f"[{text}]" if text else "")


def applies(name: str, workload: str, params=None) -> bool:
    """Whether a step takes this workload (its input type, its shape) with these parameters."""
    if name in ("cublas", "cublas_tf32", "tvm_dlight"):
        return True
    if name in (*EPILOGUE_BASELINES, DEQUANT_BASELINE):  # cuBLASLt's fused epilogue where it has one; eager for
        return name in gpu_baselines(parse_workload(workload))  # any epilogue; dequantize-then-bf16 for block scales
    try:
        spec = get(name)
        wl = parse_workload(workload)
        if not spec.accepts_dtype(wl):
            return False
        spec.validate(wl, spec.config(**(params or {})))
    except ScheduleParamError:
        return False
    return True


def run_bench(jobs: list[dict], out_dir: str, kind: str, *, workers: int | None = None, timeout: float = 300.0,
              budget_s: float = 0.3, progress: bool = True, meta: dict | None = None, ceilings: bool = True,
              write_ir: bool = False, copy_bytes=()) -> pd.DataFrame:
    """Run ``jobs`` (each checked against float64, then timed) and return the results frame, written
    to ``out_dir`` after every row (a run cut short leaves what it measured). ``kind`` names the
    benchmark in the results' meta; ``copy_bytes``: byte counts whose copy the ceilings also time
    (:func:`reports.engine.harness.measure_ceilings`)."""
    ensure_out_dir(out_dir)
    gpu = cuda_available()
    spec = device_spec()
    if gpu:
        check_runs_here(spec)  # a GPU named by $SCHEDLAB_GPU that is not this one: nothing to time
    jobs = [dict(j, gpu=spec.__dict__, budget_s=j.get("budget_s", budget_s)) for j in jobs]
    if gpu and ceilings:
        jobs.insert(0, {"workload": jobs[0]["workload"], "name": "ceilings", "copy_bytes": list(copy_bytes)})
    info = {"provenance": provenance(), "arch": device_arch(), "gpu": gpu, "kind": kind, "complete": False,
            "ceilings": {}, "gpu_spec": spec.__dict__, **(meta or {})}
    rows: list[dict] = []
    builds = Progress(sum(j["name"] not in LIBRARY for j in jobs), f"{kind}: build") if progress else None
    bar = {}

    def built(row):
        if builds is not None:
            builds.update(f"{label(row['name'], row.get('params'))} on {row['workload']}: {row.get('status')}")

    def measured(row):
        if row["name"] == "ceilings":
            info["ceilings"] = {k: v for k, v in row.items() if k not in ("id", "workload", "name", "status")}
            if row.get("gpu"):
                info["provenance"]["gpu"] = row["gpu"]
        else:
            rows.append(row)
            R.write_results(R.frame(rows, info), out_dir)
        if progress:
            if "m" not in bar:
                if builds is not None:
                    builds.close()
                bar["m"] = Progress(len(jobs), f"{kind}: measure")
            detail = (f"{row['time_ms']:.4g} ms, err {row.get('rel_error', float('nan')):.2g}"
                      if row.get("status") == "ok" and row.get("time_ms") else row.get("status"))
            bar["m"].update(f"{label(row['name'], row.get('params'))} on {row['workload']}: {detail}")

    try:
        run_jobs(jobs, gpu=gpu, out_dir=out_dir if write_ir else None, workers=workers, timeout=timeout,
                 on_row=measured, on_build=built, write_ir_files=write_ir)
    finally:
        for b in (builds, bar.get("m")):
            if b is not None:
                b.close()
    info["complete"] = True
    df = R.frame(rows, info)
    df.attrs["out_dir"] = out_dir
    return df


def write_bench(df: pd.DataFrame, out_dir: str, table_md: str) -> dict:
    return R.write_results(df, out_dir, table_md=table_md, keep_files=False)
