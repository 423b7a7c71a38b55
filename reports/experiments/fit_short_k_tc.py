"""short_k_tc_gemm's constants (:mod:`schedules.dispatch_short_k`) fitted to a calibration sweep's points of it.

Its model is ``launch + fill + pass + max(store / s + load / l, mma)``: the store and load terms are fixed by
the shape and the tile at shares s = l = 1, so the three unknowns (``short_k_tc_store_efficiency`` s,
``short_k_tc_load_efficiency`` l, ``short_k_tc_pass_us``) are chosen together on a grid, for the least mean
squared log(estimate / measured) over the points. Too few points (fewer than :data:`MIN_POINTS`) fit nothing:
the defaults stand.
"""

from __future__ import annotations

import numpy as np

from schedules import dispatch

MIN_POINTS = 6
STORE_GRID = np.round(np.arange(0.6, 1.6001, 0.02), 3)
LOAD_GRID = np.round(np.arange(0.2, 1.6001, 0.02), 3)
PASS_GRID = np.round(np.arange(0.0, 5.0001, 0.1), 2)


def fit_short_k_tc(points, cal: dict) -> dict:
    """The three constants fitted to ``points`` ((workload, candidate, measured µs, GPU) of short_k_tc_gemm),
    or {} where there are too few."""
    if len(points) < MIN_POINTS:
        return {}
    unit = dict(cal, short_k_tc_store_efficiency=1.0, short_k_tc_load_efficiency=1.0, short_k_tc_pass_us=0.0)
    base, store, load, mma, measured = [], [], [], [], []
    for wl, cand, t, gpu in points:
        e = dispatch.estimate(wl, cand, gpu, unit)
        store.append(e.terms["store_us"])
        load.append(e.terms["l2_us"])
        mma.append(e.terms["compute_us"])
        base.append(e.time_us - max(e.terms["store_us"] + e.terms["l2_us"], e.terms["compute_us"]))
        measured.append(t)
    base, store, load, mma, log_t = (np.array(v) for v in (base, store, load, mma, np.log(measured)))
    best = None
    for pass_us in PASS_GRID:
        # every (store share, load share) at once: [store grid, load grid, point]
        work = store / STORE_GRID[:, None, None] + load / LOAD_GRID[None, :, None]
        err = np.mean((np.log(base + pass_us + np.maximum(work, mma)) - log_t) ** 2, axis=2)
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if best is None or err[i, j] < best[0]:
            best = (err[i, j], STORE_GRID[i], LOAD_GRID[j], pass_us)
    _, s, l, p = best
    return {"short_k_tc_store_efficiency": float(s), "short_k_tc_load_efficiency": float(l), "short_k_tc_pass_us": float(p)}
