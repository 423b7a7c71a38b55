"""The main job (``schedlab run``, or :func:`run` from Python): every step of the ladders on each
workload beside the library baselines, built, checked against float64 and timed through the lab's
one measurement path (:mod:`reports.engine.harness`); then the results as a DataFrame and its files:
``results.json``, ``results.csv``, ``table.md``, the charts and ``report.html``.

From a notebook::

    from reports import run
    df = run(["gemm:2048x2048x2048"], schedules=["warp_tiled_gemm", "best_gemm"], out_dir="out/nb")
    df[["name", "time_ms", "tflops", "pct_cublas"]]          # df.attrs["out_dir"]: where the files are
"""

from __future__ import annotations

import json
import math
import os

import pandas as pd
import psutil
import tvm

from schedules import ScheduleParamError, all_schedules, get, parse_workload
from schedules.common import current_gpu, limits_of, use_gpu
from schedules.workloads import itemsize

from ..engine import results as R
from ..engine.baselines import gpu_baselines
from ..engine.build import check_runs_here, cuda_available, device_arch, device_spec
from ..engine.files import PARTIAL, ensure_out_dir, fresh_dir, replace_run_files
from ..engine.harness import BASELINES, CPU_BASELINES, GPU_BASELINES, LIBRARY, run_jobs
from ..engine.progress import Progress
from ..engine.provenance import provenance
from ..views import charts
from ..views.page import write_run_report
from ..views.tables import markdown

DEFAULT_WORKLOADS = ("gemm:1024x512x2048", "gemv:16384x16", "gemv:16384x32", "gemv:16384x128")
LEFT_OUT_TAGS = ("tuned", "tf32")  # run by name only: a tuning record / another precision than the fp32 rows


def plan(workloads, schedule_names=None, baseline_names=None, params=None, gpu=True, target=None):
    """``(jobs, left_out)``: for each workload its steps (every step of its kind that takes its input
    type and builds for the GPU ``target``, unless names are given) and baselines;
    ``left_out[workload]`` names the steps of its kind left out because they do not take its input
    type (those that do not build for the GPU: :func:`not_built`). A named step that does not take
    the workload or build for the GPU is refused in one line. ``target``: default the current GPU."""

    jobs, left_out = [], {}
    refusals = not_built(target)
    for text in workloads:
        wl = parse_workload(text)
        if schedule_names:
            specs = [get(n) for n in schedule_names if get(n).kind == wl.kind]
            for spec in specs:
                if not spec.accepts_dtype(wl):
                    raise ScheduleParamError(f"{spec.name} takes {', '.join(spec.input_dtypes)} inputs, not "
                                             f"{wl.dtype} ({wl})")
                cfg = spec.config(**(params or {}).get(spec.name, {}))
                refusal = (spec.layout_refusal(wl) or spec.config_cls.scope_refusal(wl)
                           or spec.arch_refusal(cfg, _limits(target)))
                if refusal:
                    raise ScheduleParamError(refusal)
        else:
            kind = [s for s in all_schedules(wl.kind) if not set(LEFT_OUT_TAGS) & set(s.tags)
                    and s.name not in refusals]  # what builds for the GPU
            specs = [s for s in kind if s.accepts(wl)]  # its input type, its layout, its batch
            left_out[str(wl)] = [s.name for s in kind if not s.accepts(wl)]
        for spec in specs:
            jobs.append({"workload": str(wl), "name": spec.name, "params": (params or {}).get(spec.name, {})})
        names = list(default_baselines(wl, specs)) if baseline_names is None else list(baseline_names)
        for name in names:
            if name not in BASELINES:
                raise ValueError(f"unknown baseline {name!r} (known: {', '.join(BASELINES)})")
            if name in GPU_BASELINES and name != "tvm_dlight" and not gpu:
                continue  # no GPU: no cuBLAS row rather than an invented one
            jobs.append({"workload": str(wl), "name": name})
    return jobs, left_out


def _limits(target):
    return limits_of(target or current_gpu())


def not_built(target=None) -> dict:
    """``{step: why}``: the steps (at their defaults) that do not build for the GPU ``target``
    (default: the current GPU), each with what it needs (``needs sm_90a (wgmma), not sm_80``);
    ``schedlab run`` leaves them out."""
    arch = _limits(target).arch
    refusals = {s.name: s.config().arch_refusal(arch) for s in all_schedules()}
    return {name: why for name, why in refusals.items() if why}


def default_baselines(wl, specs):
    """NumPy and PyTorch on the CPU (fp32 workloads, plain products), cuBLAS of the same types,
    cuBLAS in TF32 mode where a tf32 step runs, for an epilogue cuBLASLt's fused one and the eager
    sequence (:func:`reports.engine.baselines.gpu_baselines`), and TVM's dlight rules."""
    names = list(CPU_BASELINES) if wl.dtype == "float32" and not wl.has_epilogue else []
    names += gpu_baselines(wl) if wl.kind == "gemm" else ["cublas"]
    if wl.kind == "gemm" and any(s.precision(wl.dtype) == "tf32" for s in specs):
        names.insert(names.index("cublas") + 1, "cublas_tf32")
    names.append("tvm_dlight")
    return names


def check_fits(workloads, gpu: bool, host_copies: bool):
    """Refuse, in one line, a workload whose buffers cannot fit: on the GPU its inputs, output and
    the float64 check (a float64 copy of each and the reference); on the host the same where CPU
    baselines run or the check is made there. Nothing is built before this passes."""
    gpu_total = None
    if gpu:
        try:
            gpu_total = int(tvm.cuda(0).total_global_memory)
        except Exception:  # noqa: BLE001 - unknown: checked by the allocation itself
            gpu_total = None
    host_total = psutil.virtual_memory().total
    for text in workloads:
        wl = parse_workload(text)
        shapes = wl.arg_shapes()
        elems = [int(pd.Series(s).prod()) for s, _ in shapes]
        data = sum(n * itemsize(d) for n, (_, d) in zip(elems, shapes))
        check = 8 * (sum(elems) + 2 * elems[-1])  # float64 inputs, output, reference and difference
        if gpu_total is not None and data + check > gpu_total:
            raise ScheduleParamError(f"{wl} needs {_gb(data + check)} of GPU memory (inputs, output and the float64 "
                                     f"check); the GPU has {_gb(gpu_total)}")
        if (host_copies or not gpu) and data + check > host_total:
            raise ScheduleParamError(f"{wl} needs {_gb(data + check)} of host memory (inputs, output and the float64 "
                                     f"check); this machine has {_gb(host_total)}")


def _gb(n: int) -> str:
    return f"{n / 1e9:.3g} GB"


def _names(value):
    """A list of names (workloads, schedules, baselines) from a list, a tuple or one name; None stays None."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def run(workloads=DEFAULT_WORKLOADS, schedules=None, baselines=None, out_dir="out/run", timeout=300.0,
        params=None, progress=True, workers=None, report=True, gpu: bool | None = None) -> pd.DataFrame:
    """The main job. Returns the results DataFrame (``df.attrs``: provenance, ceilings, ``out_dir``)
    after writing its files into ``out_dir``. They are written in ``out_dir/partial`` as the run goes
    and moved into ``out_dir`` together once it is complete; a run cut short (Ctrl-C) leaves the
    rows it finished (and those of the kernels it built) in ``out_dir/partial``, marked incomplete,
    and an earlier run's files in ``out_dir`` as they were. ``gpu=False`` builds everything and
    times nothing even where there is a GPU."""
    workloads, schedules, baselines = (_names(x) for x in (workloads, schedules, baselines))
    if not workloads:
        raise ScheduleParamError("no workload given")
    for text in workloads:  # bad input fails before anything is built
        parse_workload(text)
    for n in schedules or ():
        get(n)
    for n, p in (params or {}).items():  # a parameter's name and type, as `schedlab show` checks them
        get(n).check_params(get(n).config(**p))
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ScheduleParamError(f"--timeout must be a positive number of seconds (finite), got {timeout!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ScheduleParamError(f"--workers must be a whole number of processes, at least 1, got {workers!r}")
    gpu = cuda_available() if gpu is None else gpu
    spec = use_gpu(device_spec())  # the GPU the run plans and builds for (a named profile, or this machine's)
    if gpu:
        check_runs_here(spec)
    jobs, left_out = plan(workloads, schedules, baselines, params, gpu, spec)
    check_fits(workloads, gpu, host_copies=any(j["name"] in CPU_BASELINES for j in jobs))
    ensure_out_dir(out_dir)  # after every refusal: a refused run leaves no folder behind
    given, out_dir = out_dir, os.path.abspath(out_dir)  # the workers run in the lab's folder, not the caller's
    partial = fresh_dir(os.path.join(out_dir, PARTIAL))  # this run's files until it is complete
    for job in jobs:
        job["gpu"] = spec.__dict__
    if gpu:
        jobs.insert(0, {"workload": jobs[0]["workload"] if jobs else workloads[0], "name": "ceilings"})
    meta = {"provenance": provenance(), "arch": device_arch(), "gpu": gpu, "ceilings": {}, "complete": False,
            "left_out": left_out, "not_built": not_built(spec), "kind": "run", "gpu_spec": spec.__dict__}
    rows: list[dict] = []
    builds = Progress(sum(j["name"] not in LIBRARY for j in jobs), "build") if progress else None
    measures = None

    def built(row):
        if builds is not None:
            builds.update(f"{row['name']} on {row['workload']}: {row.get('status')}")

    def measured(row):
        nonlocal measures
        if row["name"] == "ceilings":
            meta["ceilings"] = {k: v for k, v in row.items() if k not in ("id", "workload", "name", "status")}
            if row.get("gpu"):
                meta["provenance"]["gpu"] = row["gpu"]
        else:
            rows.append(row)
            R.write_results(R.frame(rows, meta), partial)  # a run cut short still leaves what it measured
        if progress:
            if measures is None:
                builds and builds.close()
                measures = Progress(len(jobs), "run")
            status = row.get("status")
            detail = f"{row['time_ms']:.4g} ms" if status == "ok" and row.get("time_ms") else status
            measures.update(f"{row['name']} on {row['workload']}: {detail}")

    try:
        run_jobs(jobs, gpu=gpu, out_dir=partial, workers=workers, timeout=timeout, on_row=measured, on_build=built)
        meta["complete"] = True
        df = R.frame(rows, meta)
        write_all(df, partial, report=report)  # the page reads each step's IR from partial/ir
    except KeyboardInterrupt as stop:  # Ctrl-C (or SIGTERM in schedlab): the rows so far, beside OUT's files
        for bar in (builds, measures):
            if bar is not None:
                bar.close()
        df = R.frame(rows, meta)
        R.write_results(df, partial, table_md=markdown(df))
        raise type(stop)(_kept(len(rows), meta["complete"], os.path.join(given, PARTIAL), given)) from None
    finally:
        for bar in (builds, measures):
            if bar is not None:
                bar.close()
    replace_run_files(partial, out_dir)  # all together, over any earlier run's
    df.attrs["out_dir"] = out_dir
    return df


def _kept(n: int, complete: bool, partial: str, out_dir: str) -> str:
    """What an interrupted run says it kept, and where."""
    try:
        with open(os.path.join(out_dir, R.RESULTS_FILE)) as f:
            earlier = json.load(f).get("meta", {}).get("complete") is True
    except (OSError, ValueError, AttributeError):
        earlier = False
    kept = (f"{n} row{'s' if n != 1 else ''} (kernels built, checked or timed) in {partial}"
            + ("" if complete else ", marked incomplete"))
    return kept + (f"; the complete results of an earlier run in {out_dir} are as they were" if earlier else "")


def write_all(df: pd.DataFrame, out_dir: str, report: bool = True, ir: bool = True) -> dict:
    """results.json/.csv, table.md, the charts and (``report``) report.html of a finished run."""
    paths = R.write_results(df, out_dir, table_md=markdown(df), keep_files=ir)
    paths["time_chart"] = charts.time_chart(df, os.path.join(out_dir, "time_per_step.png"))
    paths["roofline"] = charts.roofline_chart(df, os.path.join(out_dir, "roofline.png"))
    if report:
        paths["report"] = write_run_report(df, out_dir)
    return paths
