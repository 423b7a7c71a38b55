"""``schedlab bench-gemm --layouts``: the four operand layouts (nn, nt, tn, tt) and batched products
beside cuBLAS of the same layout, through the lab's one measurement path (every result checked
against a float64 product of the same stored operands first, then timed).

The jobs:

* every layout at 4096³ and 1024×512×2048, fp32 (``best_gemm``) and fp16 (``best_fp16_gemm``),
  each beside cuBLAS called on transposed views of the same buffers;
* the layout lesson at 1024×512×2048 fp32, nn and nt: the classic ``thread_2d_gemm`` and
  ``shared_cache_gemm`` (nothing adapts: in nt a warp's 32 lanes read B 32 rows of K apart) and
  the adapted ``warp_tiled_gemm`` (B transposed on its way into shared memory);
* batched products at attention-like shapes (``bmm:32x512x512x64`` ..., fp16; nn and nt, nt being
  Q·Kᵀ with K stored as it comes) with ``best_fp16_gemm`` beside ``torch.bmm``.

The tables: per shape, precision and layout the choice's TFLOP/s, its % of cuBLAS of the same
layout and its % of its own nn figure (with the issue's targets: fp32 ≥ 90% of cuBLAS at 4096³
and every layout within 5% of nn; fp16 within 5% of nn; bmm ≥ 70% of cuBLAS bmm); the lesson
(nt against nn per step); the batched products.
"""

from __future__ import annotations

import pandas as pd

from schedules import LAYOUTS, parse_workload

from ..views import tables as T
from .bench import applies, run_bench, write_bench
from .bench_gemm import table

LAYOUT_SHAPES = ("4096x4096x4096", "1024x512x2048")
LAYOUT_PRECISIONS = {"fp32": ("float32", "best_gemm"), "fp16": ("float16", "best_fp16_gemm")}
LESSON_SHAPE = "1024x512x2048"
LESSON_STEPS = ("thread_2d_gemm", "shared_cache_gemm", "warp_tiled_gemm")
LESSON_LAYOUTS = ("nn", "nt")
BMM_SHAPES = ("32x512x512x64", "16x1024x1024x128", "64x128x128x64")
BMM_LAYOUTS = ("nn", "nt")
BMM_CHOICE = "best_fp16_gemm"
# the targets
FP32_MIN_PCT_CUBLAS = 90.0   # best_gemm at 4096³, every layout
NN_TOLERANCE_PCT = 5.0       # every layout within 5% of its own nn figure (fp32 and fp16)
BMM_MIN_PCT_CUBLAS = 70.0    # best_fp16_gemm against torch.bmm at each shape


def workload_text(kind: str, shape: str, dtype: str, layout: str) -> str:
    """The lab's spelling of a workload (defaults left out), e.g. ``gemm:1024x512x2048:nt``."""
    return str(parse_workload(f"{kind}:{shape}:{dtype}:{layout}"))


def make_jobs(layout_shapes=None, precisions=None, bmm_shapes=None, lesson=True) -> list[dict]:
    """The benchmark's jobs (see the module's docstring); the arguments narrow them (defaults: the
    module's shapes and precisions)."""
    layout_shapes = LAYOUT_SHAPES if layout_shapes is None else layout_shapes
    precisions = tuple(LAYOUT_PRECISIONS) if precisions is None else precisions
    bmm_shapes = BMM_SHAPES if bmm_shapes is None else bmm_shapes
    jobs, seen = [], set()

    def add(wl, name):
        if (wl, name) not in seen and applies(name, wl):
            seen.add((wl, name))
            jobs.append({"workload": wl, "name": name, "params": {}})

    for shape in layout_shapes:
        for prec in precisions:
            dtype, choice = LAYOUT_PRECISIONS[prec]
            for layout in LAYOUTS:
                wl = workload_text("gemm", shape, dtype, layout)
                add(wl, "cublas")
                add(wl, choice)
    if lesson:
        for layout in LESSON_LAYOUTS:
            wl = workload_text("gemm", LESSON_SHAPE, "float32", layout)
            add(wl, "cublas")
            for name in LESSON_STEPS:
                add(wl, name)
    for shape in bmm_shapes:
        for layout in BMM_LAYOUTS:
            wl = workload_text("bmm", shape, "float16", layout)
            add(wl, "cublas")
            add(wl, BMM_CHOICE)
    return jobs


def _parsed(df):
    wls = {w: parse_workload(w) for w in df["workload"].dropna().unique()}
    return df.assign(_wl=df["workload"].map(wls))


def _tflops(g, name):
    row = g[g["name"] == name]
    return float(row.iloc[0]["tflops"]) if len(row) and pd.notna(row.iloc[0].get("tflops")) else float("nan")


def _first(g, name, col):
    row = g[g["name"] == name]
    return row.iloc[0].get(col) if len(row) and col in row else None


def layout_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per GEMM shape, precision and layout: the choice's TFLOP/s, % of cuBLAS of the same layout,
    % of its own nn figure, cuBLAS's own % of its nn figure, and whether the targets hold."""
    df = _parsed(df)
    gemm = df[df["_wl"].map(lambda w: w.kind == "gemm" and not w.batched)]
    rows = []
    for prec, (dtype, choice) in LAYOUT_PRECISIONS.items():
        part = gemm[gemm["_wl"].map(lambda w: w.dtype == dtype)]
        for shape in dict.fromkeys(w.shape for w in part["_wl"]):
            same = part[part["_wl"].map(lambda w: w.shape == shape)]
            if not (same["name"] == choice).any():
                continue
            by_layout = {w.layout: g for w, g in ((g["_wl"].iloc[0], g) for _, g in same.groupby("workload", sort=False))}
            nn = by_layout.get("nn")
            nn_choice = _tflops(nn, choice) if nn is not None else float("nan")
            nn_cublas = _tflops(nn, "cublas") if nn is not None else float("nan")
            for layout in ("nn", "nt", "tn", "tt"):
                g = by_layout.get(layout)
                if g is None:
                    continue
                t, c = _tflops(g, choice), _tflops(g, "cublas")
                pct = _first(g, choice, "pct_cublas")
                of_nn = 100 * t / nn_choice if nn_choice == nn_choice and nn_choice else float("nan")
                targets = []
                if prec == "fp32" and shape == "4096x4096x4096" and pct is not None and pd.notna(pct):
                    targets.append(f"≥{FP32_MIN_PCT_CUBLAS:.0f}% cuBLAS: {'yes' if pct >= FP32_MIN_PCT_CUBLAS else 'NO'}")
                if layout != "nn" and of_nn == of_nn:
                    targets.append(f"within {NN_TOLERANCE_PCT:.0f}% of nn: "
                                   f"{'yes' if of_nn >= 100 - NN_TOLERANCE_PCT else 'NO'}")
                status = _first(g, choice, "status")
                rows.append({"shape": shape, "precision": prec, "layout": layout,
                             "choice": str(_first(g, choice, "chosen") or choice),
                             "TFLOP/s": T.fmt(t, ".2f"), "% cuBLAS (same layout)": T.fmt(pct, ".1f"),
                             "% of own nn": T.fmt(of_nn, ".1f"), "cuBLAS TFLOP/s": T.fmt(c, ".2f"),
                             "cuBLAS % of its nn": T.fmt(100 * c / nn_cublas if nn_cublas == nn_cublas and nn_cublas
                                                         else float("nan"), ".1f"),
                             "targets": "; ".join(targets) if status == "ok" else f"**{status}**"})
    return pd.DataFrame(rows)


def lesson_table(df: pd.DataFrame) -> pd.DataFrame:
    """The layout lesson: each classic and adapted step on nn and nt, and what nt costs it."""
    df = _parsed(df)
    part = df[df["_wl"].map(lambda w: w.kind == "gemm" and not w.batched and w.shape == LESSON_SHAPE
                            and w.dtype == "float32" and w.layout in LESSON_LAYOUTS)]
    by_layout = {g["_wl"].iloc[0].layout: g for _, g in part.groupby("workload", sort=False)}
    rows = []
    for name in (*LESSON_STEPS, "cublas"):
        t = {lay: _tflops(by_layout[lay], name) if lay in by_layout else float("nan") for lay in LESSON_LAYOUTS}
        if all(v != v for v in t.values()):
            continue
        rows.append({"kernel": name, "nn TFLOP/s": T.fmt(t["nn"], ".2f"), "nt TFLOP/s": T.fmt(t["nt"], ".2f"),
                     "nt / nn": T.fmt(t["nt"] / t["nn"] if t["nn"] == t["nn"] and t["nn"] else float("nan"), ".2f")})
    return pd.DataFrame(rows)


def bmm_table(df: pd.DataFrame) -> pd.DataFrame:
    """Batched products: the choice against torch.bmm on the same buffers."""
    df = _parsed(df)
    part = df[df["_wl"].map(lambda w: w.batched)]
    rows = []
    for wl_text, g in part.groupby("workload", sort=False):
        w = g["_wl"].iloc[0]
        pct = _first(g, BMM_CHOICE, "pct_cublas")
        status = _first(g, BMM_CHOICE, "status")
        target = ("" if pct is None or pd.isna(pct) else
                  f"≥{BMM_MIN_PCT_CUBLAS:.0f}% cuBLAS: {'yes' if pct >= BMM_MIN_PCT_CUBLAS else 'NO'}")
        rows.append({"shape": w.shape, "layout": w.layout, "choice": str(_first(g, BMM_CHOICE, "chosen") or BMM_CHOICE),
                     "TFLOP/s": T.fmt(_tflops(g, BMM_CHOICE), ".2f"), "% cuBLAS bmm": T.fmt(pct, ".1f"),
                     "cuBLAS TFLOP/s": T.fmt(_tflops(g, "cublas"), ".2f"),
                     "target": target if status == "ok" else f"**{status}**"})
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    timer = df["timer"].dropna().iloc[0] if "timer" in df and df["timer"].notna().any() else "no GPU: nothing timed"
    lines = [f"# GEMM operand layouts and batched products: {df.attrs['provenance']['gpu']}", "",
             T.provenance_line(df.attrs), "",
             f"Timer: {timer}; median; every result checked against a float64 product of the same stored "
             "operands first. Layouts in the BLAS convention, C = op(A)·op(B): t = stored transposed (A as "
             "K×M, B as N×K, row-major). cuBLAS gets the same buffers as transposed views (no copy).", "",
             "## Every layout: the lab's choice beside cuBLAS of the same layout", "",
             T.markdown_table(layout_summary(df)),
             "## The layout lesson (1024×512×2048 fp32)", "",
             "thread_2d_gemm and shared_cache_gemm index the stored B as it is: in nt a warp's lanes "
             "read B a row of K apart (uncoalesced) where nn reads 32 consecutive floats; warp_tiled_gemm "
             "transposes B on its way into shared memory and reads it along K with vector loads.", "",
             T.markdown_table(lesson_table(df)),
             "## Batched products (fp16, attention-like shapes)", "",
             T.markdown_table(bmm_table(df)),
             "## Every kernel", "", T.markdown_table(table(df))]
    return "\n".join(lines)


def command(args) -> int:
    """``schedlab bench-gemm --layouts`` (``args``: the command's options: --out, --workers, --budget...)."""
    df = run_bench(make_jobs(), args.out, "bench-gemm-layouts", workers=args.workers, timeout=args.timeout,
                   budget_s=args.budget, progress=not args.quiet)
    md = markdown(df)
    write_bench(df, args.out, md)
    print(md)
    return 0
