"""TVM's dlight rules as one more tuning run (``dlight``): one fixed schedule for the workload,
measured by the tuner's builder and runner like a one-trial run, so that the report draws it beside
the searches."""

from __future__ import annotations

import os
import time
from dataclasses import asdict

import numpy as np
import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from schedules import parse_workload

from . import records as R
from .deadline import Cutoff
from .tuner import (INTERRUPTED, RunState, TuneOptions, _log, _measure, make_builder, make_runner, make_target,
                    setup_env)


def dlight_schedule(wl, target):
    from tvm.s_tir import dlight as dl

    mod = tvm.IRModule({"main": wl.prim_func()})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.Fallback())(mod)
    return s_tir.Schedule(mod)


def measure_dlight(opts: TuneOptions, on_trial=None, until: float | None = None) -> dict:
    """Measure TVM's dlight schedule once (run ``dlight``); logged like a one-trial run. ``until``: the
    moment its build and run are cut short (the command's time limit), and it is not recorded."""
    setup_env()
    wl = parse_workload(opts.workload)
    target = make_target(opts.target, opts.arch)
    if target.kind.name != "cuda":
        return {"run": "dlight", "skipped": "dlight rules are for GPU targets"}
    old = [r for r in R.trials(opts.db, str(wl), "dlight") if r.get("status") != "verify"]
    if old:
        return {"run": "dlight", "workload": str(wl), "result": old[-1]}
    sch = dlight_schedule(wl, target)
    cut = Cutoff(INTERRUPTED, until)
    builder = make_builder(TuneOptions(**{**asdict(opts), "builders": 1}), cut)
    try:
        runner, _ = make_runner(opts)
        t0 = time.time()
        res = _measure([ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod))], target,
                       "cuda", builder, runner, stop=cut)[0]
    finally:
        builder.shutdown()
    if res is None or INTERRUPTED.is_set():
        return {"run": "dlight", "workload": str(wl),
                "skipped": "interrupted" if INTERRUPTED.is_set() else "cut short by the time limit"}
    row = {"key": "dlight", "status": res["status"], "reused": False, "knobs": {}}
    if res["status"] == "ok":
        t = float(np.median(res["secs"]))
        row.update(time_ms=t * 1e3, gflops=wl.flops / t / 1e9)
    else:
        row["reason"] = res.get("reason", "")
    state = RunState("dlight", 1)
    dl_opts = TuneOptions(**{**asdict(opts), "space": "dlight", "strategy": "dlight"})
    _log(os.path.join(opts.db, R.TRIALS_FILE), dl_opts, "dlight", str(wl), row, state, t0, 0.0, on_trial)
    return {"run": "dlight", "workload": str(wl), "result": row}
