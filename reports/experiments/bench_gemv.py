"""``schedlab bench-gemv``: GEMV at the memory-bandwidth limit. The dispatcher's choice, every GEMV
step (and with ``--sweep`` their parameter sweep), TVM's dlight rule and cuBLAS, checked against
float64 and timed through the lab's one measurement path under three cache policies:

* ``read`` (the lab's standard): L2 emptied before each run by reading 256 MiB;
* ``write``: L2 flushed by writing 256 MiB, as triton's do_bench does; its dirty lines are written
  back while the timed kernel runs, which costs a memory-bound kernel about a tenth;
* ``warm``: no flush (small inputs stay in L2), a GPU spin before each run so no launch gap is timed.

GB/s = the workload's minimum bytes (A, x and y once) / median time; the copy bandwidth (a 1 GiB
device-to-device copy, bytes read + written) is measured in the same run.

    schedlab bench-gemv --out out/bench_gemv [--extra] [--sweep] [--workload gemv:MxN ...]
"""

from __future__ import annotations

import os

import pandas as pd

from schedules import parse_workload
from schedules.gemv import aligned_vector, widest_vector

from ..engine import results as R
from ..views import charts
from ..views import tables as T
from .bench import label, run_bench, write_bench

BENCH_SHAPES = ("gemv:16384x16", "gemv:16384x32", "gemv:16384x64", "gemv:16384x128", "gemv:16384x1024",
                "gemv:16384x4096", "gemv:8192x8192")
EXTRA_SHAPES = ("gemv:16384x17", "gemv:16384x4097", "gemv:1x65536", "gemv:16x65536", "gemv:256x65536",
                "gemv:16384x4096:float16", "gemv:8192x8192:float16",
                "gemv_t:16384x16", "gemv_t:16384x4096", "gemv_t:8192x8192", "gemv_t:8192x8192:float16")
SWEEP_EXTRA = ("gemv:16384x4097", "gemv:256x65536")  # extras that --sweep also sweeps
POLICIES = ("read", "write", "warm")


def variants(wl, sweep: bool):
    """(schedule name, params) for one workload; dlight and cuBLAS are added by :func:`make_jobs`."""
    if wl.kind == "gemv_t":
        out = [("column_gemv_t", {})]
        if sweep:
            out += [("column_gemv_t", {"rows_per_slice": rows}) for rows in (32, 128)]
            out.append(("column_gemv_t", {"threads": 128}))
        return out
    vmax = aligned_vector(wl.N, widest_vector(wl))
    out = [("gemv_dispatch", {}), ("warp_gemv", {}), ("vectorized_gemv", {"vector": vmax}), ("multi_row_gemv", {}),
           ("multi_warp_gemv", {"vector": vmax}), ("split_k_gemv", {})]
    if wl.M < 2048 and wl.N * 4 >= 16384:  # few long rows: how many warps per row pays
        out += [("multi_warp_gemv", {"warps_per_row": w, "vector": vmax, "unroll": 4}) for w in (8, 16, 32)]
        out += [("split_k_gemv", {"warps_per_chunk": w}) for w in (4, 16)]
    if not sweep:
        return out
    lanes_needed = -(-wl.N // vmax)
    for unroll in (1, 2, 4, 8):
        if unroll == 1 or lanes_needed >= 32 * unroll:
            out.append(("vectorized_gemv", {"vector": vmax, "unroll": unroll}))
            if unroll in (1, 4):
                out.append(("warp_gemv", {"unroll": unroll}))
    for wpb in (2, 8):
        out.append(("vectorized_gemv", {"vector": vmax, "unroll": 4 if lanes_needed >= 128 else 1,
                                        "warps_per_block": wpb}))
    if lanes_needed <= 32:
        for lanes in (2, 4, 8, 16):
            for unroll in (1, 2, 4):
                if lanes * unroll * vmax <= max(wl.N, vmax) and lanes * vmax * unroll >= wl.N // 2:
                    out.append(("multi_row_gemv", {"lanes": lanes, "rows_per_warp": 32 // lanes, "vector": vmax,
                                                   "unroll": unroll}))
        full = 1 << max(0, (lanes_needed - 1).bit_length())
        if full <= 16:
            out += [("multi_row_gemv", {"lanes": full, "rows_per_warp": 32 // full, "vector": vmax,
                                        "warps_per_block": wpb}) for wpb in (2, 8)]
    if wl.N * 4 >= 4096 and wl.dtype != "float16":
        out += [("multi_warp_gemv", {"warps_per_row": w, "vector": vmax, "unroll": u}) for w in (2, 4, 8) for u in (1, 4)]
    seen, unique = set(), []
    for name, params in out:
        key = (name, tuple(sorted(params.items())))
        if key not in seen:
            seen.add(key)
            unique.append((name, params))
    return unique


def make_jobs(shapes, sweep=False):
    jobs = []
    for text in shapes:
        wl = parse_workload(text)
        for name, params in variants(wl, sweep and (text in BENCH_SHAPES or text in SWEEP_EXTRA)):
            jobs.append({"workload": str(wl), "name": name, "params": params})
        jobs += [{"workload": str(wl), "name": "tvm_dlight"}, {"workload": str(wl), "name": "cublas"}]
    for job in jobs:
        job["timing"] = list(POLICIES)
    return jobs


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """µs, GB/s, × cuBLAS (its time / ours: > 1 is faster) and share of the copy bandwidth, per policy."""
    df = df.copy()
    copy = (df.attrs.get("ceilings") or {}).get("copy_gbps")
    nbytes = R.per_workload(df, lambda w: w.min_bytes)
    cublas = df[df["name"] == "cublas"].set_index("workload")
    for p in POLICIES:
        col = f"time_{p}_ms"
        if col not in df:
            df[col] = float("nan")
        df[f"us_{p}"] = df[col] * 1e3
        df[f"gbps_{p}"] = nbytes / df[col] / 1e6
        ref = df["workload"].map(cublas[col]) if col in cublas else float("nan")
        df[f"vs_cublas_{p}"] = ref / df[col]
        df[f"of_copy_{p}"] = df[f"gbps_{p}"] / copy if copy else float("nan")
    df["label"] = [label(n, p) for n, p in zip(df["name"], df.get("params", [None] * len(df)))]
    return df


def markdown(df: pd.DataFrame) -> str:
    d = derive(df)
    copy = (df.attrs.get("ceilings") or {}).get("copy_gbps")
    lines = ["# GEMV bandwidth benchmark", "", T.provenance_line(df.attrs), "",
             f"Copy bandwidth (1 GiB device-to-device copy, bytes read + written): **{copy:.0f} GB/s**." if copy
             else "No GPU: nothing timed.", "",
             "One timer (CUDA events, median) under three cache policies: *read* (L2 emptied by reading 256 MiB "
             "before each run: the lab's standard), *write* (L2 flushed by a 256 MiB write, triton do_bench's "
             "flush), *warm* (no flush, a GPU spin before each run). × cuBLAS = cuBLAS time / variant time "
             "(> 1: faster); of copy = GB/s / copy bandwidth.", ""]
    t = pd.DataFrame({"workload": d["workload"], "variant": d["label"],
                      **{f"µs {p}": d[f"us_{p}"].map(lambda v: T.fmt(v, ".1f")) for p in POLICIES},
                      "GB/s read": d["gbps_read"].map(lambda v: T.fmt(v, ".0f")),
                      "× cuBLAS read": d["vs_cublas_read"].map(lambda v: T.fmt(v, ".2f")),
                      "of copy read": d["of_copy_read"].map(lambda v: T.fmt(v, ".0%")),
                      "× cuBLAS write": d["vs_cublas_write"].map(lambda v: T.fmt(v, ".2f")),
                      "rel. error": d["rel_error"].map(lambda v: T.fmt(v, ".1e")) if "rel_error" in d else "",
                      "status": [s if s == "ok" else f"{s}: {str(e)[:80]}" for s, e in
                                 zip(d["status"], d["error"] if "error" in d else [""] * len(d))]})
    return "\n".join(lines + [T.markdown_table(t, {"variant": "left"})])


def chart(df: pd.DataFrame, path: str):
    """The bandwidth of each variant on the M = 16384 shapes against N (views.charts.gemv_chart)."""
    d = derive(df)
    d = d[d["workload"].isin(BENCH_SHAPES) & d["workload"].str.startswith("gemv:16384x") & d["gbps_read"].notna()
          & ~d["label"].str.contains(r"\[", regex=True)]
    return charts.gemv_chart(d, (df.attrs.get("ceilings") or {}).get("copy_gbps"), df.attrs["provenance"]["gpu"], path)


def command(args) -> int:
    """``schedlab bench-gemv`` (``args``: the command's options)."""
    shapes = args.workload or (list(BENCH_SHAPES) + (list(EXTRA_SHAPES) if args.extra else []))
    for s in shapes:
        parse_workload(s)
    df = run_bench(make_jobs(shapes, args.sweep), args.out, "bench-gemv", workers=args.workers,
                   timeout=args.timeout, budget_s=args.budget, progress=not args.quiet, meta={"sweep": args.sweep})
    md = markdown(df)
    write_bench(df, args.out, md)
    chart(df, os.path.join(args.out, "gemv_bench.png"))
    print(md)
    return 0
