"""Calibrating the dispatcher's model (schedules.dispatch) on a sweep, and judging it.

``schedlab sweep --set calibration`` measures, on a grid of shapes chosen to cover the regimes
(square and skinny, long and short K, aligned and not, matrix-vector), every configuration *kind*
the dispatcher knows (its best-estimated split-K variant, and the variant without split-K) for fp32,
tf32 and fp16, beside cuBLAS. ``schedlab calibrate DIR`` then fits the model's constants to those
measurements and, with ``--write FILE``, writes the constants :mod:`schedules.calibration` reads
(``SCHEDLAB_CALIBRATION=FILE``; the packaged ``schedules/data/calibration.json`` where FILE is it):

* ``launch_us``: on a grid up to the shortest measured time, the value that fits best (with the
  ones below);
* ``efficiency`` per configuration kind: the median, over the shapes where the model says it is
  compute-bound, of (its compute time at full efficiency) / (measured time − launch − split-K sum);
* ``w_sat`` and ``warp_gamma`` (together), ``wgmma_w_sat`` (the cp.async wgmma kernels' own), ``cp_latency_us`` (their ring's latency floor, schedules.dispatch_latency), ``l2_factor``, ``fill_us``, ``sm_store_gbps``, ``unaligned_store``, ``k_step_us``,
  ``scalar_store_factor`` (the cp.async wgmma kernels' float-at-a-time stores of C):
  chosen on small grids, one at a time (coordinate descent), to minimize the mean squared
  log(predicted / measured) over every measured point, a move taken only if it does not raise the
  regret (below);
* ``simt_copy_factor``, ``simt_async_factor``: SIMT loads narrower than configured, and SIMT
  kernels with a cp.async ring, against their kind's efficiency;
* ``stream_k_factor``: the stream-K kernels' shared-out K tiles against their tile's efficiency
  (which is solved on whole-tile points alone); ``simt_column_split_factor``: the one-column SIMT
  tiles where they split K, against their kind's;
* ``copy_factor``: for cp.async copies narrower than 16 bytes, measured against predicted;
* ``short_k_store_efficiency``: short_k_gemm's share of the DRAM bandwidth on its stores, on
  the short-K shapes where its stores set the time (every short_k_gemm tile is measured there);
* ``short_k_tc_store_efficiency``, ``short_k_tc_load_efficiency``, ``short_k_tc_pass_us``: short_k_tc_gemm's, chosen
  together (:mod:`.fit_short_k_tc`) on its points (every tile of it is measured on the short-K 16-bit shapes);
* ``thin_wait_step_us``, ``thin_trans_factor`` (per token group), ``thin_copy_factor``: thin_tc_gemm's
  waited-for block steps and weight reads, on the thin shapes (every thin_tc_gemm candidate is
  measured there).

Sweeps measured on different GPUs are fitted together (:func:`load_sweeps`): each point is estimated
on the GPU that measured it (its sweep's GPU spec, with the copy rate measured beside the sweep as its
bandwidth), so the constants are the shares and times the GPUs have in common.

FP8 (``schedlab sweep --set calibration --precisions fp8``): the same shapes, each as an e4m3 product
in the nt layout with a bf16 output, with per-tensor and with block scales, every FP8 candidate of
:mod:`schedules.dispatch_fp8` (a handful per shape), beside torch._scaled_mm. The fit then writes the
calibration's ``fp8`` section: the efficiency per tile and cluster (solved on the tensor-scaled
points as above), ``block_promotion`` (the block-scaled kernel against the tensor-scaled efficiency
of its tile), the sweep and the GPU; a sweep of FP8 points alone leaves every other constant as it
was (those of several precisions are fitted on the others' points, then FP8's on top).

It also reports how well the model ranks: for each shape of the sweep, the measured time of the
model's pick over the best measured time (the *regret*), before and after the fit.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import itertools
import json
import math
import os
import pprint

import numpy as np
import pandas as pd

from schedules import ScheduleParamError, dispatch, dispatch_fp8, get, parse_workload
from schedules.calibration import CALIBRATION, ENV, calibration_path
from schedules.common import GpuSpec
from schedules.dispatch_short_k import short_k_register_key
from schedules.dispatch_thin import THIN_EFFICIENCY, token_group, trans_factor, waits_for_loads
from schedules.gemm_thin import access_of
from schedules.workloads import itemsize

from ..engine.files import OutputError, atomic_write, ensure_out_dir
from ..engine.harness import job_id
from ..engine.results import load_results
from .fit_short_k_tc import fit_short_k_tc

SIZES = (128, 2048, 12288)
K_SIZES = (128, 4096)
IRREGULAR = ((1001, 777, 3001), (5000, 33, 4000), (33, 5000, 4000), (2999, 4001, 17), (250, 250, 20000),
             (4096, 1, 4096), (1, 4096, 4096), (8192, 4, 2048), (4, 8192, 2048), (12, 12, 12), (200, 3, 9000))
PRECISIONS = ("fp32", "tf32", "fp16")  # the sweep's default precisions
SWEEP_PRECISIONS = PRECISIONS + ("fp8",)  # fp8: asked for by name (--precisions fp8)
FP8_SWEEP_SCALES = ("tensor", "block")  # row scales cost what per-tensor ones do (both in the epilogue)
FP8_FAMILIES = ("fp8", "fp8_block")
# an efficiency or factor is solved only on points where the term it scales is at least this share of
# the compute term: where the fixed part (pipeline fill, storing C) is most of it, as with a short K,
# a small error in that part moves the solved value a lot
SOLVE_SHARE = 0.5


# shape classes the grid misses, a few shapes each (chosen by class, not taken from any benchmark)
CLASSES = {
    "short K, large output (storing C is the work)": ((6000, 3000, 8), (400, 16000, 3), (9000, 1500, 27),
                                                      # rows of C not 16-byte aligned: stores narrower still
                                                      (2000, 3001, 12), (150, 9001, 5),
                                                      # whole tiles, and K up to short_k_gemm's limit
                                                      (8192, 8192, 16), (4096, 4096, 32), (3000, 5000, 64)),
    # a large C whose rows are not whole 32-byte sectors (N odd, N % 4 = 2, N % 8 = 4 in fp32), K from 9 to 32: the
    # store path's rate on such rows, short_k_gemm's and the tensor-core kernels' staged stores (swept, not in the fit)
    "rows of C not whole sectors, short K (large C)": ((5000, 7001, 20), (3000, 12002, 28), (8000, 5003, 14),
                                                       (2500, 9006, 9), (7000, 3001, 32), (1500, 15004, 24)),
    "misaligned rows, large (narrow loads or padded copies)": ((3001, 1999, 5003), (2500, 501, 9001),
                                                               (7001, 1203, 1201), (1500, 2500, 3333)),
    # a K of a few hundred: the narrow loads run over the whole product, and a padded copy of A and B
    # costs a larger share of it than over a long K
    "misaligned rows, mid-size K (narrow loads against padded copies)": (
        (2000, 3001, 150), (700, 15001, 115), (3001, 1500, 333), (1200, 7001, 250), (100, 90, 601)),
    # a few hundred rows or columns against thousands, K of hundreds, rows not 16-byte aligned: the skinny tiles
    # (one column a thread) against the 16 x 128 and 64 x 64 tiles with split-K, which the model ranks within a
    # few percent of each other and which measured up to 1.5x apart on such products
    "skinny against split, misaligned (a few hundred rows, K of hundreds)": (
        (210, 1701, 310), (75, 5003, 90), (330, 2901, 170), (1301, 190, 450), (95, 9001, 130), (150, 3001, 777)),
    "few outputs, long K (deep split-K)": ((9, 7, 15000), (40, 70, 16000), (120, 100, 4000), (300, 30, 12000)),
    "thin outputs": ((7, 3000, 3000), (3000, 7, 3000), (20, 9000, 700),
                     # rows not 16-byte aligned (thin_tc_gemm's narrower copies; an odd K or N: 2-byte ones)
                     (5001, 23, 301), (13, 7001, 999), (30, 6002, 1500)),
    "small products (a K loop of dependent loads, launch and latency bound)": (
        (160, 200, 2000), (2000, 48, 256), (600, 900, 128), (96, 96, 6000), (300, 1200, 400)),
    "a few waves of large tiles (wave quantization against split-K)": ((3000, 600, 3000), (5000, 300, 2000)),
    # a fraction of a round of 128 x 256 tiles over a long K, and a few tiles over a very long K:
    # stream-K against whole tiles, smaller tiles and split-K
    "a fraction of a round (stream-K against whole tiles)": ((1000, 14336, 4096), (1000, 13824, 5120),
                                                             (1892, 1042, 7208)),
    # B stored N×K (a Linear layer's weight): the TMA kernel's widths fitted to whole rounds and its 256-row tiles
    # wider than 128 (schedules.dispatch_fitted), which only such products get; swept in fp16 only (the fp32 and
    # tf32 kernels' efficiencies stay fitted on nn, as the model has no layout term)
    "weights stored N×K (tile widths fitted to whole rounds)": (
        (2500, 3000, 4000, "nt"), (1500, 9000, 3000, "nt"), (3300, 2200, 6000, "nt"), (700, 12000, 2000, "nt"),
        (5000, 5000, 1500, "nt"), (1200, 2800, 8000, "nt"), (4000, 1800, 5000, "nt"), (900, 6000, 6000, "nt")),
    # 33-64 tokens (thin_tc_gemm's and decode_gemm's widest token group, which no class above reaches) over a
    # K of thousands, in both orientations (nn: a few rows read the weight B transposed; a few columns read X
    # transposed), rows aligned to 16 bytes and not, grids from a fraction of the SMs to several waves
    "thin over a long K (33-64 tokens)": ((40, 4000, 6000), (60, 1500, 12000), (36, 700, 3000), (50, 2001, 5000),
                                          (8000, 40, 6000), (3000, 60, 12000), (10000, 36, 2000), (5000, 50, 7001)),
    # 9-32 tokens over a K of thousands on the GPU the fit is for (the class above is 33-64 tokens, on an H100): a few
    # columns (X read transposed) and a few rows, grids from a fraction of the SMs to several waves
    "few tokens over a long K (9-32, thin)": ((8000, 15, 6000), (12000, 24, 4000), (6000, 30, 9000), (3000, 12, 12000),
                                             (20, 7000, 5000), (12, 9000, 8000)),
    # the same over an odd K: the weight's rows copied 4 bytes at a time (thin_copy_factor "4"; 16 where K is even)
    "few tokens over a long odd K (4-byte copies)": ((8000, 15, 6001), (12000, 26, 3999), (3000, 12, 9001)),
    # 17-64 rows against a weight stored N×K as a linear layer reads it (the thin classes above are nn), K 1800-9000
    "a few dozen rows against a weight stored N×K (17-64 tokens)": ((20, 6000, 3000, "nt"), (28, 14000, 2000, "nt"),
        (36, 3000, 9000, "nt"), (44, 9000, 5000, "nt"), (52, 2200, 4500, "nt"), (60, 5200, 2600, "nt"),
        (64, 11000, 3300, "nt"), (48, 4400, 7000, "nt")),
    "thin and wide (a few rows across thousands of columns: how far to split a skinny tile)": (
        (3, 12000, 1500), (12000, 3, 1500), (6, 5000, 600), (5000, 6, 600), (48, 8000, 400), (8000, 48, 400),
        (16, 16000, 2500)),
}
PARTS = ("all", "grid", "classes")


def calibration_shapes(part: str = "all"):
    """The sweep's shapes: the grid (SIZES × SIZES × K_SIZES and IRREGULAR), the CLASSES, both, or
    the one class whose name starts with ``part``; (M, N, K), or (M, N, K, layout) for a class swept
    in another operand layout than nn."""
    if part not in PARTS:
        named = [shapes for name, shapes in CLASSES.items() if name.startswith(part)]
        if len(named) != 1:
            raise ValueError(f"calibration part {part!r} is not one of {', '.join(PARTS)} or the start of one class's "
                             f"name ({'; '.join(CLASSES)})")
        return list(named[0])
    grid = [(m, n, k) for m in SIZES for n in SIZES for k in K_SIZES] + list(IRREGULAR)
    classes = [shape for shapes in CLASSES.values() for shape in shapes]
    return {"all": grid + classes, "grid": grid, "classes": classes}[part]


def sweep_workloads(m: int, n: int, k: int, precision: str, layout: str = "nn") -> list:
    """The workloads a calibration sweep measures a shape as in ``precision``: fp32 inputs (fp32,
    tf32), fp16 inputs (fp16), or e4m3 inputs in the nt layout with a bf16 output, per tensor and per
    block scales (fp8: the FP8 kernels' form, torch._scaled_mm's). A shape of another ``layout`` than
    nn is swept in fp16 only (none in fp32 and tf32; FP8's layout is nt anyway)."""
    if precision not in SWEEP_PRECISIONS:
        raise ValueError(f"calibration precision {precision!r} is not one of {', '.join(SWEEP_PRECISIONS)}")
    if precision == "fp8":
        return [parse_workload(f"gemm:{m}x{n}x{k}:float8_e4m3fn:nt" + ("" if s == "tensor" else f":scale={s}")
                               + ":out=bfloat16") for s in FP8_SWEEP_SCALES]
    if layout != "nn":
        return [parse_workload(f"gemm:{m}x{n}x{k}:float16:{layout}")] if precision == "fp16" else []
    return [parse_workload(f"gemm:{m}x{n}x{k}" + ("" if precision in ("fp32", "tf32") else ":float16"))]


def rank(wl, precision: str, gpu=None, cal=None):
    """The model's ranking of ``wl``'s candidates in ``precision`` (FP8: schedules.dispatch_fp8's)."""
    return dispatch_fp8.rank(wl, gpu, cal) if precision == "fp8" else dispatch.rank(wl, precision, gpu, cal)


def estimate(wl, cand, gpu, cal):
    """The model's estimate of one measured candidate (an FP8 one by schedules.dispatch_fp8)."""
    if cand.family in FP8_FAMILIES:
        return dispatch_fp8.estimate(wl, cand, gpu, cal)
    return dispatch.estimate(wl, cand, gpu, cal)


def params_of(step: str, cfg) -> dict:
    """A configuration as the step's parameter overrides (fields that differ from its defaults)."""
    default = get(step).config()
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
            if getattr(cfg, f.name) != getattr(default, f.name, None)}


def _pad(c) -> bool:
    return getattr(c.config, "pad_operands", False)


def _pipeline(c) -> tuple:
    return c.config.stages, c.config.async_copy


def _variants(first):
    """Tests for the variants of ``first``'s kind a calibration sweep measures beside it: without
    split-K (nor stream-K), with another split-K factor, with the other padding choice (copies or
    none), with stream-K where it has none and without where it has, and
    (SIMT) at each other K tile and with each other K pipeline."""
    split = getattr(first.config, "split_k", 1)
    stream = getattr(first.config, "stream_k", False)
    tests = [lambda c: getattr(c.config, "split_k", 1) == 1 and not getattr(c.config, "stream_k", False),
             lambda c: getattr(c.config, "split_k", 1) not in (1, split), lambda c: _pad(c) != _pad(first),
             lambda c: getattr(c.config, "stream_k", False) != stream]
    if first.family == "simt":
        tests += [lambda c, d=d: c.config.block_k == d for d in dispatch.SIMT_BLOCK_K if d != first.config.block_k]
        tests += [lambda c, p=p: _pipeline(c) == p for p in dispatch.SIMT_PIPELINES if p != _pipeline(first)]
    return tests


def calibration_jobs(shapes=None, precisions=PRECISIONS, per_shape: int = 6, min_points: int = 5, part: str = "all",
                     gpu=None, cal=None):
    """For each shape and precision: the ``per_shape`` best-estimated configuration kinds (each
    with its best-estimated split-K), the best two kinds' best variants without split-K, with the
    other padding choice and (SIMT) at the other K tiles and with the other K pipelines
    (:func:`_variants`), and cuBLAS of the precision; then every kind measured on fewer than
    ``min_points`` shapes is added where the model ranks it highest, so that each kind's
    efficiency can be fitted."""
    picked: dict[tuple, list] = {}
    ranked_all: dict[tuple, list] = {}
    for shape, prec in itertools.product(shapes or calibration_shapes(part), precisions):
        for wl in sweep_workloads(*shape[:3], prec, *shape[3:]):
            try:
                ranked = [e.candidate for e in rank(wl, prec, gpu, cal)]
            except ScheduleParamError:  # no FP8 kernel takes the shape (nor would best_fp8_gemm)
                continue
            ranked_all[(str(wl), prec)] = ranked
            chosen, keys = [], []
            for c in ranked:
                if c.key not in keys and len(keys) < per_shape:
                    keys.append(c.key)
                    chosen.append(c)
            for key in keys[:2]:  # the best two kinds' best variant of each other choice
                first = next(c for c in chosen if c.key == key)
                of_key = [c for c in ranked if c.key == key]
                for test in _variants(first):
                    other = next((c for c in of_key if test(c)), None)
                    if other is not None and other not in chosen:
                        chosen.append(other)
            # a short K: each of short_k_gemm's and short_k_tc_gemm's tiles too (their store shares are fitted on
            # them); a thin 16-bit product: thin_tc_gemm's candidates (its bandwidth shares are fitted on them)
            chosen += [c for c in ranked if c.family in ("short_k", "short_k_tc", "thin") and c not in chosen]
            picked[(str(wl), prec)] = chosen
    counts: dict[str, int] = {}
    for chosen in picked.values():
        for c in chosen:
            counts[c.key] = counts.get(c.key, 0) + 1
    for group, ranked in sorted(ranked_all.items(), key=lambda kv: len(kv[1])):
        for c in ranked:
            if counts.get(c.key, 0) < min_points and all(x.key != c.key for x in picked[group]):
                picked[group].append(c)
                counts[c.key] = counts.get(c.key, 0) + 1
    jobs = []
    for (wl, prec), chosen in picked.items():
        for c in chosen:
            jobs.append({"workload": wl, "name": c.step, "params": params_of(c.step, c.config),
                         "extra": {"key": c.key, "family": c.family, "sweep_precision": prec}})
        jobs.append({"workload": wl, "name": "cublas_tf32" if prec == "tf32" else "cublas",
                     "extra": {"sweep_precision": prec}})
    for job in jobs:  # the fp32 and tf32 parts measure the same SIMT kernels: the part makes the row's id unique
        job["id"] = f"{job_id(job)}|{job['extra']['sweep_precision']}"
    return jobs


# --- the fit -------------------------------------------------------------------------------------------
def config_of(row):
    """A sweep row's configuration: its step's config with the row's parameters (those the step
    still has)."""
    spec = get(row["name"])
    params = row.get("params")
    fields = {f.name for f in dataclasses.fields(spec.config_cls)}
    return spec.config(**{k: v for k, v in (params if isinstance(params, dict) else {}).items() if k in fields})


def candidate_of(row) -> dispatch.Candidate:
    cfg = config_of(row)
    # a SIMT kind's key from its configuration (sweeps before the K tile was a choice named it the same way)
    key = dispatch.simt_key(cfg) if row["family"] == "simt" else row["key"]
    return dispatch.Candidate(row["name"], cfg, row["family"], key)


def sweep_gpu(attrs: dict) -> GpuSpec:
    """The GPU a sweep measured on, as the model sees it (its results' ``gpu_spec``), with the copy rate
    measured beside the sweep as its bandwidth; the generic spec where it names none."""
    gpu = GpuSpec(**attrs["gpu_spec"]) if attrs.get("gpu_spec") else GpuSpec()
    copy_gbps = (attrs.get("ceilings") or {}).get("copy_gbps")
    return dataclasses.replace(gpu, memory_gbps=float(copy_gbps)) if copy_gbps else gpu


def points(df: pd.DataFrame, gpus=None):
    """(workload, precision, candidate, measured µs, GPU) of every measured kernel of the sweep: the
    GPU is ``gpus[row's sweep]`` where the results name their sweep (``sweep`` column: several
    sweeps, on several GPUs, fitted together), else None (the fit's GPU)."""
    out = []
    ok = df[(df["status"] == "ok") & df["time_ms"].notna() & df.get("key", pd.Series(index=df.index)).notna()]
    for _, r in ok.iterrows():
        gpu = gpus[int(r["sweep"])] if gpus is not None and "sweep" in r and pd.notna(r["sweep"]) else None
        try:
            out.append((parse_workload(r["workload"]), r["sweep_precision"], candidate_of(r), 1e3 * r["time_ms"], gpu))
        except Exception:  # noqa: BLE001 - a configuration this version no longer has
            continue
    return out


def _each(pts, gpu):
    """``(workload, precision, candidate, µs, GPU)`` of each point: its own GPU where it has one (a
    point of :func:`points`), else ``gpu`` (a point made as a 4-tuple, as the tests make them)."""
    for p in pts:
        yield (*p[:4], p[4] if len(p) > 4 and p[4] is not None else gpu)


def _errors(pts, cal, gpu):
    return np.array([abs(np.log(estimate(wl, c, g, cal).time_us / t)) for wl, _, c, t, g in _each(pts, gpu)])


def _probe(cal: dict) -> dict:
    """A copy of ``cal`` whose dicts, at every depth, are new (what ``set_x`` writes into); the
    values they hold are shared, as the model only reads them. ``copy.deepcopy`` of the calibration
    once per point was most of a fit's time."""
    return {k: _probe(v) if isinstance(v, dict) else v for k, v in cal.items()}


def _solve_unknown(wl, cand, t, gpu, cal, set_x):
    """``(x, terms)``: the model's compute term is ``waves · (k · flops / (rate · x) + fixed)`` in
    an unknown ``x`` (an efficiency or a factor; ``set_x(probe, value)`` sets it in a copy of
    ``cal``), solved at the measured time ``t`` from two estimates (x = 1, and x so large that only
    the fixed part is left). ``x`` is None where compute does not dominate the estimate (or the
    time leaves it no room, or the fixed part is more than ``1 - SOLVE_SHARE`` of it), or where the
    K loop's latency floor (``k_step_us``) and not the arithmetic sets the compute term at the solved ``x``; ``terms`` are the estimate's at x = 1."""
    probe = _probe(cal)
    probe["k_step_us"] = 0.0  # the floor is not part of the linear form solved here
    set_x(probe, 1.0)
    terms = estimate(wl, cand, gpu, probe).terms
    comp1 = terms.get("compute_us")
    if not comp1 or comp1 < 2 * max(terms.get("dram_us", 0), terms.get("l2_us", 0)) or comp1 < 3 * cal["launch_us"]:
        return None, terms
    set_x(probe, 1e9)
    fixed = estimate(wl, cand, gpu, probe).terms["compute_us"]
    busy = t - cal["launch_us"] - terms.get("reduce_us", 0)
    if not (busy > fixed * 1.05 and comp1 > fixed):
        return None, terms
    if comp1 - fixed < SOLVE_SHARE * comp1:  # ill-conditioned: the fixed part's error would move x most
        return None, terms
    x = (comp1 - fixed) / (busy - fixed)
    if cal.get("k_step_us"):
        set_x(probe, x)
        free = estimate(wl, cand, gpu, probe).terms["compute_us"]
        probe["k_step_us"] = cal["k_step_us"]
        if estimate(wl, cand, gpu, probe).terms["compute_us"] > free * 1.001:
            return None, terms
    return x, terms


def _sweep_registers(df: pd.DataFrame) -> dict:
    """Registers per thread of each SIMT thread tile and K tile (``dispatch.simt_register_key``)
    and of each short_k_gemm thread tile, input width and K (``short_k_register_key``): the median of
    what ptxas reported for its kernels in the sweep, in steps of 8 (the occupancy terms read them);
    not those built with ``min_blocks``, whose count is the one they were held to."""
    seen: dict[str, list[int]] = {}
    if "family" not in df or "registers" not in df:
        return {}
    for family, key_of in (("simt", lambda r, cfg: dispatch.simt_register_key(cfg)),
                           ("short_k", lambda r, cfg: short_k_register_key(cfg, itemsize(r["dtype"]), int(r["k"])))):
        for _, r in df[(df["family"] == family) & df["registers"].notna()].iterrows():
            cfg = config_of(r)
            if getattr(cfg, "min_blocks", 0):  # held to a count: not the one ptxas would choose
                continue
            seen.setdefault(key_of(r, cfg), []).append(int(r["registers"]))
    return {key: int(-(-np.median(v) // 8) * 8) for key, v in seen.items()}


def _fit_efficiencies(pts, cal, gpu):
    by_key: dict[str, list[float]] = {}
    full_width: dict[str, list[float]] = {}  # SIMT points whose loads are as wide as configured
    for wl, _, c, t, g in _each(pts, gpu):
        if getattr(c.config, "stream_k", False):  # its tile's efficiency from whole tiles: stream_k_factor is its own
            continue
        value, terms = _solve_unknown(wl, c, t, g, cal, lambda probe, x, key=c.key: probe["efficiency"].update({key: x}))
        if value is None:
            continue
        by_key.setdefault(c.key, []).append(value)
        if terms.get("load_width") == "1" and terms.get("pipeline") != "async":
            full_width.setdefault(c.key, []).append(value)
    for key, vals in by_key.items():
        # a SIMT kind's efficiency from its full-width points with the register double buffer
        # where there are some: narrower loads and cp.async rings have their own factors
        # (simt_copy_factor, simt_async_factor, fitted after)
        vals = full_width.get(key) if len(full_width.get(key, [])) >= 2 else vals
        cal["efficiency"][key] = round(float(np.clip(np.median(vals), 0.02, 1.1)), 3)  # ≤ 1.1 × the measured peak
    return {k: len(v) for k, v in by_key.items()}


def _solved_median(pts, cal, gpu, applies, set_x, low: float, high: float, solve=None):
    """A factor on the efficiency: the median of its value solved (``solve``, default
    :func:`_solve_unknown`) on the points ``applies`` selects, with the kinds' efficiencies as
    fitted, within [low, high]; None where no point could be solved."""
    ratios = []
    for wl, _, c, t, g in _each(pts, gpu):
        if applies(wl, c):
            value, _ = (solve or _solve_unknown)(wl, c, t, g, cal, set_x)
            if value is not None:
                ratios.append(value)
    return round(float(np.clip(np.median(ratios), low, high)), 3) if ratios else None


def _fit_factor(pts, cal, gpu, table: str, width: str, applies):
    """One entry of a load-width factor table (``copy_factor`` or ``simt_copy_factor``), solved on
    the points ``applies`` selects."""
    value = _solved_median(pts, cal, gpu, applies, lambda probe, x: probe.setdefault(table, {}).update({width: x}),
                           0.05, 1.0)
    if value is not None:
        cal.setdefault(table, {})[width] = value


def _fit_simt_copy_factor(pts, cal, gpu):
    """SIMT loads narrower than configured, per fraction of the full width."""
    for width in ("0.5", "0.25"):
        _fit_factor(pts, cal, gpu, "simt_copy_factor", width,
                    lambda wl, c: c.family == "simt" and dispatch._simt_copy_factor(wl, c.config, cal)[1] == width)


def _fit_simt_async_factor(pts, cal, gpu):
    """SIMT kernels with a cp.async ring against their kind's efficiency (one factor: the 4-byte
    copies of a tile transposed on its way in cost issue slots), on the points where the
    arithmetic, not the wait for loads, sets the time."""
    value = _solved_median(pts, cal, gpu, lambda wl, c: c.family == "simt" and c.config.async_copy,
                           lambda probe, x: probe.update(simt_async_factor=x), 0.05, 1.1)
    if value is not None:
        cal["simt_async_factor"] = value


def _fit_stream_k_factor(pts, cal, gpu):
    """Stream-K's shared-out K tiles against their tile's efficiency (``stream_k_factor``: their
    pieces, the fix-up and the L2 their staggered K offsets do not share), on the stream-K points
    where the arithmetic sets the time."""
    value = _solved_median(pts, cal, gpu, lambda wl, c: getattr(c.config, "stream_k", False),
                           lambda probe, x: probe.update(stream_k_factor=x), 0.1, 1.2)
    if value is not None:
        cal["stream_k_factor"] = value


def _column_split(wl, c) -> bool:
    """A one-column SIMT tile (thread tile t?x1) splitting K (``simt_column_split_factor``)."""
    return c.family == "simt" and c.config.thread_n == 1 and c.config.splits(wl) > 1


def _fit_column_split_factor(pts, cal, gpu):
    """The one-column SIMT tiles where they split K against their kind's efficiency, solved on all its
    points (``simt_column_split_factor``: what their split points run at beyond that median)."""
    value = _solved_median(pts, cal, gpu, _column_split, lambda probe, x: probe.update(simt_column_split_factor=x),
                           0.3, 1.5)
    if value is not None:
        cal["simt_column_split_factor"] = value


def _fit_short_k_store(pts, cal, gpu):
    """short_k_gemm's share of the DRAM bandwidth on its stores (``short_k_store_efficiency``): the
    median, over its points where the store term is at least twice the compute and L2 terms and
    the measured time (less the launch) a fifth over the latency path (whose stores then set it),
    of (its bytes at the full bandwidth) / (measured time − launch − fill)."""
    ratios = []
    for wl, _, c, t, g in _each(pts, gpu):
        if c.family != "short_k":
            continue
        terms = dispatch.estimate(wl, c, g, cal).terms
        store = terms["store_us"] * terms["store_efficiency"]  # at the full bandwidth
        busy = t - cal["launch_us"] - cal["fill_us"]
        if busy > 0 and terms["store_us"] >= 2 * max(terms["compute_us"], terms["l2_us"]) \
                and t - cal["launch_us"] >= 1.2 * terms["latency_us"]:
            ratios.append(store / busy)
    if ratios:
        cal["short_k_store_efficiency"] = round(float(np.clip(np.median(ratios), 0.2, 1.2)), 3)


def _fit_cp_copy_factor(pts, cal, gpu):
    """Narrow cp.async copies (the wgmma steps), per width in bytes."""
    def applies(width):
        def test(wl, c):
            if c.family not in ("cp", "cp_tf32"):
                return False
            a, b = c.config.copy_widths(wl)
            return str(a if c.family == "cp_tf32" else min(a, b)) == width
        return test

    for width in ("8", "4", "2"):
        _fit_factor(pts, cal, gpu, "copy_factor", width, applies(width))


# the range a bandwidth share is solved in (and its median kept in) by _solve_share
SHARE_RANGE = (0.05, 1.5)


def _solve_share(wl, cand, t, gpu, cal, set_x, low: float = SHARE_RANGE[0], high: float = SHARE_RANGE[1],
                 rising: bool = False):
    """``(x, terms)``: a bandwidth share ``x`` (``set_x(probe, value)`` sets it in a copy of ``cal``)
    at which the whole estimate equals the measured time ``t``, by bisection on log x (the estimate
    falls as the share grows; ``rising``: it grows with x, as with a time per step). ``x`` is None where
    no x in [low, high] gives ``t``: the time is set by another term (latency, launches) wherever x
    lies, or is off the range."""
    probe = _probe(cal)

    def est(x):
        set_x(probe, x)
        return estimate(wl, cand, gpu, probe)

    terms = est(1.0).terms
    fast, slow = (low, high) if rising else (high, low)
    if not est(fast).time_us < t < est(slow).time_us:
        return None, terms
    lo, hi = math.log(low), math.log(high)
    for _ in range(50):
        mid = (lo + hi) / 2
        too_slow = est(math.exp(mid)).time_us > t
        lo, hi = (lo, mid) if too_slow == rising else (mid, hi)
    return math.exp((lo + hi) / 2), terms


# the range a waited-for block step's time (µs) is solved in by _fit_thin_factors
STEP_RANGE = (0.05, 20.0)
# ... and a transposed weight's share, relative to decode_gemm's share of the token group (THIN_EFFICIENCY):
# above 1 where decode's own plan holds that group back (at 33-64 tokens its 64 accumulators per lane: 0.5)
TRANS_RANGE = (0.05, 2.5)


def _fit_thin_factors(pts, cal, gpu):
    """thin_tc_gemm's constants (:mod:`schedules.dispatch_thin`), each the median of the values at
    which the estimate equals the measured time: ``thin_wait_step_us``, a waited-for block step's time per
    8 tokens (X read transposed or a 2-byte copy), for a weight copied as stored
    (``even_per_8_tokens``) and one realigned on the way (``odd_per_8_tokens``), solved where it is
    above the K loop's floor; ``thin_trans_factor``, the bandwidth share of a weight stored K × rows, per token
    group, solved on its 16-byte points (the copies at full width; a group without such points takes
    the median over every group's); then ``thin_copy_factor`` per narrower width, solved on all its
    points with those applied. A width's factor is then at least the next narrower width's (a copy
    twice as wide moves the same bytes with half the instructions: it is not slower, whatever the few
    points of one width say)."""
    def access(wl, c):
        return access_of(wl, c.config.odd_copy)

    def thin(wl, c):
        return c.family == "thin"

    for kind in ("even_per_8_tokens", "odd_per_8_tokens"):
        step = _solved_median(pts, cal, gpu, lambda wl, c, kind=kind: thin(wl, c) and waits_for_loads(access(wl, c))
                              and access(wl, c).w_odd == kind.startswith("odd"),
                              lambda probe, x, kind=kind: probe.setdefault("thin_wait_step_us", {}).update({kind: x}),
                              *STEP_RANGE, lambda *a: _solve_share(*a, *STEP_RANGE, rising=True))
        if step is not None:
            cal.setdefault("thin_wait_step_us", {})[kind] = step

    def transposed(wl, c, group=None):
        return thin(wl, c) and access(wl, c).w_trans and access(wl, c).w_bytes == 16 \
            and group in (None, str(token_group(c.config.plan(wl, gpu).token_tiles)))

    # one factor over every group's points (as where the groups are not told apart), then each group's own
    def solve(*a):
        return _solve_share(*a, *TRANS_RANGE)

    overall = _solved_median(pts, cal, gpu, transposed, lambda probe, x: probe.update(thin_trans_factor=x),
                             *TRANS_RANGE, solve)
    if overall is not None:
        groups = {str(g): overall for g in THIN_EFFICIENCY}
        for group in list(groups):
            value = _solved_median(pts, cal, gpu, lambda wl, c, group=group: transposed(wl, c, group),
                                   lambda probe, x, group=group: probe.update(thin_trans_factor={**groups, group: x}),
                                   *TRANS_RANGE, solve)
            groups[group] = overall if value is None else value
        cal["thin_trans_factor"] = groups
    for width in ("8", "4", "2"):
        value = _solved_median(pts, cal, gpu,
                               lambda wl, c, width=width: thin(wl, c) and str(access(wl, c).w_bytes) == width,
                               lambda probe, x, width=width: probe.setdefault("thin_copy_factor", {}).update({width: x}),
                               *SHARE_RANGE, _solve_share)
        if value is not None:
            cal.setdefault("thin_copy_factor", {})[width] = value
    factors = cal.get("thin_copy_factor", {})
    for narrow, wide in (("2", "4"), ("4", "8")):
        if narrow in factors and wide in factors:
            factors[wide] = max(factors[wide], factors[narrow])


def fit(df: pd.DataFrame, gpu=None) -> tuple[dict, dict]:
    """(new calibration, report) fitted to a calibration sweep's results: each point estimated on the
    GPU that measured it (``df.attrs["sweep_gpus"]``, one per sweep, as :func:`load_sweeps` reads
    them), or on ``gpu`` where given (every point), or on the GPU the results name."""
    gpus = None if gpu is not None else [GpuSpec(**g) for g in df.attrs.get("sweep_gpus") or []] or None
    every = points(df, gpus)
    if gpu is None:  # the GPU of most points: the one the constants are said to describe
        measured_on = [p[4] for p in every if p[4] is not None]
        most = collections.Counter(g.name for g in measured_on).most_common(1)
        gpu = next(g for g in measured_on if g.name == most[0][0]) if most else sweep_gpu(df.attrs)
    if not every:
        raise ValueError("no measured kernels in these results: is it a calibration sweep (schedlab sweep --set calibration)?")
    pts = [p for p in every if p[1] != "fp8"]
    fp8 = [p for p in every if p[1] == "fp8"]
    sweeps = df.attrs.get("sweeps") or [df.attrs.get("provenance", {})]
    named = "; ".join(f"{p.get('date')} on {p.get('gpu')}, commit {p.get('commit')}" for p in sweeps)
    what = f"{'the sweep' if len(sweeps) == 1 else f'{len(sweeps)} sweeps'} ({named}"
    on = {"gpu": gpu.name if gpus else sweeps[-1].get("gpu") or gpu.name, "arch": gpu.arch, "sms": gpu.sms}
    cal, report = _fit_all(pts, df, gpu, what, on) if pts else (copy.deepcopy(CALIBRATION), {})
    if fp8:  # FP8's constants, on top of the others (as fitted here, or as they were)
        report["fp8"] = _fit_fp8(fp8, cal, gpu, what, on)
    return cal, report


def _fit_all(pts, df, gpu, what: str, on: dict) -> tuple[dict, dict]:
    """(calibration, report): every constant but FP8's, fitted to the points of the other precisions."""
    cal = copy.deepcopy(CALIBRATION)
    before = _errors(pts, cal, gpu)
    cal["regs"].update(_sweep_registers(df))
    shortest = min(p[3] for p in pts)
    launches = {round(float(x), 2) for x in np.linspace(0.25, 1.0, 7) * shortest}
    launches |= {x for x in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0) if x <= shortest}
    grids = {"launch_us": sorted(launches),  # no kernel takes less than its launch
             "w_sat": [4, 6, 8, 12, 16, 24], "wgmma_w_sat": [4, 8, 12, 16, 24], "warp_gamma": [0.4, 0.5, 0.6, 0.7, 0.8, 1.0], "l2_factor": [2.0, 3.0, 4.0, 6.0, 8.0],
             "fill_us": [0.0, 0.5, 1.0, 2.0, 4.0], "sm_store_gbps": [15.0, 30.0, 60.0, 120.0, 240.0],
             "unaligned_store": [0.15, 0.25, 0.5, 1.0], "k_step_us": [0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3],
             "scalar_store_factor": [0.25, 0.35, 0.5, 0.7, 1.0], "cp_latency_us": [0.0, 0.8, 1.0, 1.3, 1.6, 2.0]}

    def score(trial):
        # the per-kind efficiencies (from full-width points), the narrow-load factor, and the
        # efficiencies again with it; then (mean squared log error, regret geomean)
        _fit_efficiencies(pts, trial, gpu)
        _fit_simt_copy_factor(pts, trial, gpu)
        _fit_simt_async_factor(pts, trial, gpu)
        _fit_stream_k_factor(pts, trial, gpu)
        _fit_column_split_factor(pts, trial, gpu)
        _fit_short_k_store(pts, trial, gpu)
        counts = _fit_efficiencies(pts, trial, gpu)
        return float(np.mean(_errors(pts, trial, gpu) ** 2)), regret(pts, trial, gpu)["geomean"], counts

    best_err, best_regret, counts = score(cal)
    # coordinate descent over the global constants, efficiencies refitted each time; the launch
    # overhead and the L2 factor both move small kernels' times, so they are searched together.
    # A move must lower the squared error without raising the regret: the model is there to
    # choose, and a constant that fits the times better but picks worse kernels is not taken
    coordinates = [("launch_us", "l2_factor"), ("w_sat", "warp_gamma"), ("wgmma_w_sat",), ("cp_latency_us",), ("fill_us",), ("sm_store_gbps",), ("unaligned_store",),
                   ("k_step_us",), ("scalar_store_factor",)]
    for _round in range(8):
        improved = False
        for names in coordinates:
            for values in itertools.product(*(grids[n] for n in names)):
                trial = copy.deepcopy(cal)
                trial.update(zip(names, values))
                err, reg, c = score(trial)
                if err < best_err * (1 - 1e-9) and reg <= best_regret * (1 + 1e-9):
                    best_err, best_regret, cal, counts, improved = err, reg, trial, c, True
        if not improved:
            break
    _fit_cp_copy_factor(pts, cal, gpu)
    _fit_thin_factors(pts, cal, gpu)
    cal.update(fit_short_k_tc([(wl, c, t, g) for wl, _, c, t, g in _each(pts, gpu) if c.family == "short_k_tc"], cal))
    after = _errors(pts, cal, gpu)
    cal["source"] = f"fitted by schedlab calibrate to {what}; {len(pts)} measured kernels)"
    # the GPU the constants describe: the dispatcher says so where it chooses for another one
    cal["calibrated_on"] = dict(on)
    report = {"points": len(pts), "fitted_efficiencies": counts,
              "median_abs_log_error": {"before": float(np.median(before)), "after": float(np.median(after))},
              "p90_abs_log_error": {"before": float(np.percentile(before, 90)), "after": float(np.percentile(after, 90))},
              "regret": {"before": regret(pts, CALIBRATION, gpu), "after": regret(pts, cal, gpu)}}
    return cal, report


def _set_fp8(probe: dict, name: str, value, key: str | None = None):
    """Set an FP8 constant (``efficiency[key]`` or ``name``) in the calibration ``probe``'s ``fp8``
    section, which starts as the constants the model reads now (dispatch_fp8.constants)."""
    section = probe.setdefault("fp8", {k: copy.deepcopy(v) for k, v in dispatch_fp8.constants(probe).items()
                                       if k in ("efficiency", "block_promotion", "pingpong_block_promotion")})
    if key is None:
        section[name] = value
    else:
        section.setdefault(name, {})[key] = value


def _solve_pingpong(wl, cand, t, gpu, cal, set_x):
    """:func:`_solve_unknown` for a ping-pong candidate, whose compute term is not linear in 1/x (a
    tile's epilogue hides behind the other consumer's mainloop up to the mainloop's length): the
    linear solution's conditions, then x by bisection (the compute term falls as x grows)."""
    x0, terms = _solve_unknown(wl, cand, t, gpu, cal, set_x)
    if x0 is None:
        return None, terms
    probe = _probe(cal)
    busy = t - cal["launch_us"] - terms.get("reduce_us", 0)

    def comp(x):
        set_x(probe, x)
        return estimate(wl, cand, gpu, probe).terms["compute_us"]

    lo, hi = x0 / 4, x0 * 4
    if not comp(hi) <= busy <= comp(lo):
        return None, terms
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if comp(mid) > busy else (lo, mid)
    return (lo + hi) / 2, terms


def _fit_fp8(pts, cal, gpu, what: str, on: dict) -> dict:
    """Fit the calibration's ``fp8`` section to the FP8 points (in place) and report it: each tile
    and cluster's efficiency (the median solved on the tensor-scaled points, as
    :func:`_fit_efficiencies`), then ``block_promotion`` (the median solved on the block-scaled
    points, at the efficiency of their tile) and ``pingpong_block_promotion`` (the same on the
    block-scaled ping-pong points); the constants no point could solve keep their value."""
    before, regret_before = _errors(pts, cal, gpu), regret(pts, cal, gpu)
    for name in ("block_promotion", "pingpong_block_promotion"):
        _set_fp8(cal, name, dispatch_fp8.constants(cal)[name])
    by_key: dict[str, list[float]] = {}
    for wl, _, c, t, g in _each(pts, gpu):
        if c.family != "fp8":
            continue
        key = dispatch_fp8.efficiency_key(c)
        solve = _solve_pingpong if c.config.pingpong else _solve_unknown
        value, _ = solve(wl, c, t, g, cal, lambda probe, x, key=key: _set_fp8(probe, "efficiency", x, key))
        if value is not None:
            by_key.setdefault(key, []).append(value)
    for key, vals in by_key.items():
        _set_fp8(cal, "efficiency", round(float(np.clip(np.median(vals), 0.02, 1.1)), 3), key)
    fitted = {}
    for name, pp in (("block_promotion", False), ("pingpong_block_promotion", True)):
        fitted[name] = _solved_median(pts, cal, gpu, lambda wl, c, pp=pp: c.family == "fp8_block" and c.config.pingpong == pp,
                                      lambda probe, x, name=name: _set_fp8(probe, name, x), 0.05, 1.1,
                                      _solve_pingpong if pp else None)
        if fitted[name] is not None:
            _set_fp8(cal, name, fitted[name])
    kept = "" if by_key else f"; the efficiencies as they were: {dispatch_fp8.constants(cal)['source']}"  # no tensor scales
    cal["fp8"].update(source=f"fitted by schedlab calibrate to {what}; {len(pts)} measured FP8 kernels){kept}",
                      calibrated_on=dict(on))
    after = _errors(pts, cal, gpu)
    return {"points": len(pts), "fitted_efficiencies": {k: len(v) for k, v in by_key.items()},
            **{name: {"fitted": value is not None, "value": cal["fp8"][name]} for name, value in fitted.items()},
            "median_abs_log_error": {"before": float(np.median(before)), "after": float(np.median(after))},
            "regret": {"before": regret_before, "after": regret(pts, cal, gpu)}}


def regret(pts, cal, gpu) -> dict:
    """Over the sweep's shapes: measured time of the model's pick / best measured time."""
    groups: dict = {}
    for wl, prec, c, t, g in _each(pts, gpu):
        est = estimate(wl, c, g, cal)
        # a kernel the dispatcher would not offer (split-K partials beyond L2) is never its pick;
        # a shape measured on two GPUs is two shapes
        groups.setdefault((str(wl), prec, g.name), []).append((est.time_us if dispatch.partials_fit(wl, est, g) else math.inf, t))
    ratios = [min(g, key=lambda x: x[0])[1] / min(x[1] for x in g) for g in groups.values() if len(g) > 1]
    r = np.array(ratios)
    return {"shapes": len(r), "median": float(np.median(r)), "geomean": float(np.exp(np.log(r).mean())),
            "max": float(r.max()), "share_within_10pct": float((r <= 1.1).mean())}


def write_calibration(cal: dict, path: str):
    """Write the model's constants as JSON to ``path``, read back by
    :func:`schedules.calibration.load_calibration` (``SCHEDLAB_CALIBRATION=path``)."""
    atomic_write(path, json.dumps(cal, indent=1, sort_keys=True) + "\n")
    return path


def load_sweeps(dirs) -> pd.DataFrame:
    """Several sweeps' results as one frame: each row's ``sweep`` (its index in ``dirs``), and in the
    attrs each sweep's provenance (``sweeps``) and GPU as the model sees it (``sweep_gpus``), so that
    sweeps measured on different GPUs are fitted together, each point on its own GPU."""
    frames = [load_results(d) for d in dirs]
    for i, frame in enumerate(frames):
        frame["sweep"] = i
    df = pd.concat(frames, ignore_index=True)
    df.attrs.update(frames[-1].attrs)
    df.attrs["sweeps"] = [f.attrs.get("provenance", {}) for f in frames]
    df.attrs["sweep_gpus"] = [dataclasses.asdict(sweep_gpu(f.attrs)) for f in frames]
    return df


def command(args) -> int:
    """``schedlab calibrate DIR...`` (``args``: the command's options): fit, print the fit's report,
    and with ``--write FILE`` write the constants to FILE."""
    if args.write:  # a destination that cannot be written fails now, not after the fit
        if os.path.isdir(args.write):
            raise OutputError(f"--write {args.write}: is a directory; name the file to write (DIR/calibration.json)")
        ensure_out_dir(os.path.dirname(os.path.abspath(args.write)), "--write")
    cal, report = fit(load_sweeps(args.dirs))
    text = json.dumps(report, indent=1)
    print(text)
    if args.report:
        atomic_write(args.report, text + "\n")
    if args.write:
        print(f"wrote {write_calibration(cal, args.write)}")
        if os.path.abspath(args.write) != os.path.abspath(calibration_path()):
            print(f"  use it: {ENV}={args.write} schedlab show best_gemm --shape MxNxK --explain")
    else:
        pprint.pprint(cal, width=110)
    return 0
