"""``schedlab bench-gemm --random N --seed S``: the lab's choice on shapes nobody chose.

N shapes are drawn with M, N and K log-uniform in [1, 16384] (a shape whose buffers and float64
check would not fit the GPU's memory is drawn again, and the count of such redraws is reported).
For each shape and precision (fp32, tf32, fp16) the lab's choice (``best_gemm``,
``best_tf32_gemm``, ``best_fp16_gemm``) is timed beside cuBLAS of the same precision (fp32 with
TF32 off, cuBLAS in TF32 mode, fp16 inputs with an fp32 output) in one harness, every result checked
against float64 first. The summary per precision: the geometric mean of the ratios to cuBLAS, the
minimum, and the share of shapes at ≥ 90% of cuBLAS; the chart plots each ratio against M·N·K.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import tvm

from schedules import parse_workload

from ..engine.build import cuda_available
from ..views import charts
from ..views import tables as T
from .bench import run_bench, write_bench

MAX_DIM = 16384
CHOICE = {"fp32": ("best_gemm", "cublas", "float32"), "tf32": ("best_tf32_gemm", "cublas_tf32", "float32"),
          "fp16": ("best_fp16_gemm", "cublas", "float16"), "bf16": ("best_fp16_gemm", "cublas", "bfloat16")}


def needed_bytes(m: int, n: int, k: int, itemsize: int = 4) -> int:
    """GPU memory one shape needs in the harness: inputs and output, and the float64 check (a
    float64 copy of each, the reference and the difference)."""
    return itemsize * (m * k + k * n) + 4 * m * n + 8 * (m * k + k * n + 3 * m * n)


def draw_shapes(n: int, seed: int, max_dim: int = MAX_DIM, memory_bytes: int | None = None):
    """``(shapes, redrawn)``: ``n`` (M, N, K) triples, each dimension log-uniform in [1, max_dim]
    (rounded to the nearest integer), reproducible from ``seed``. A triple that would not fit
    ``memory_bytes`` is drawn again; ``redrawn`` counts those."""
    rng = np.random.default_rng(seed)
    shapes, redrawn = [], 0
    while len(shapes) < n:
        m, nn, k = (int(round(math.exp(x))) for x in rng.uniform(0.0, math.log(max_dim), size=3))
        if memory_bytes is not None and needed_bytes(m, nn, k) > memory_bytes:
            redrawn += 1
            continue
        shapes.append((m, nn, k))
    return shapes, redrawn


def shape_properties(shapes) -> dict:
    """What the drawing must cover: shapes whose dimensions are not all multiples of 8, and shapes
    with a dimension of 4 or less."""
    return {"not_multiple_of_8": sum(any(d % 8 for d in s) for s in shapes),
            "dim_le_4": sum(min(s) <= 4 for s in shapes), "count": len(shapes)}


def make_jobs(shapes, precisions):
    jobs = []
    for m, n, k in shapes:
        for prec in precisions:
            choice, cublas, dtype = CHOICE[prec]
            wl = f"gemm:{m}x{n}x{k}" + ("" if dtype == "float32" else f":{dtype}")
            jobs += [{"workload": wl, "name": choice}, {"workload": wl, "name": cublas}]
    return jobs


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per precision: geometric mean of % cuBLAS, minimum, share ≥ 90%, and failures."""
    rows = []
    choices = df[df["name"].str.startswith("best_")]
    for prec, g in choices.groupby("precision", sort=False):
        pct = g["pct_cublas"].dropna()
        rows.append({"precision": prec, "shapes": len(g), "measured": len(pct),
                     "geomean % cuBLAS": T.fmt(float(np.exp(np.log(pct).mean())) if len(pct) else float("nan"), ".1f"),
                     "min %": T.fmt(pct.min() if len(pct) else float("nan"), ".1f"),
                     "≥ 90% of cuBLAS": f"{(pct >= 90).mean():.0%}" if len(pct) else "",
                     "failed": int((g["status"] != "ok").sum())})
    return pd.DataFrame(rows)


def per_shape(df: pd.DataFrame) -> pd.DataFrame:
    choices = df[df["name"].str.startswith("best_")].copy()
    cub = df[df["name"].isin(["cublas", "cublas_tf32"])].set_index(["workload", "precision"])["time_ms"]
    choices["cublas_ms"] = [cub.get((w, p), float("nan")) for w, p in zip(choices["workload"], choices["precision"])]
    return pd.DataFrame({
        "shape": choices["workload"].str.split(":").str[1], "precision": choices["precision"],
        "choice": choices["chosen"] if "chosen" in choices else "",
        "ms": choices["time_ms"].map(lambda v: T.fmt(v, ".4g")), "cuBLAS ms": choices["cublas_ms"].map(lambda v: T.fmt(v, ".4g")),
        "% cuBLAS": choices["pct_cublas"].map(lambda v: T.fmt(v, ".1f")),
        "rel. error": choices["rel_error"].map(lambda v: T.fmt(v, ".1e")) if "rel_error" in choices else "",
        "status": [s if s == "ok" else f"{s}: {str(e)[:60]}" for s, e in
                   zip(choices["status"], choices["error"] if "error" in choices else [""] * len(choices))]})


# the classes of shape the lab's kernels find hard, each a test on the workload (several can hold)
CLASSES = ("degenerate", "thin", "short K", "long K, few tiles", "misaligned")
FLOOR_SHARE = 0.1  # the worst tenth of the shapes per precision


def shape_classes(wl, sms: int = 132) -> list[str]:
    """Which hard classes a GEMM belongs to: ``degenerate`` (a dimension of 4 or less), ``thin`` (an
    output 64 rows or columns wide or less), ``short K`` (K ≤ 64: storing C is most of the work),
    ``long K, few tiles`` (K ≥ 1024 and fewer 128 × 128 output tiles than the GPU has SMs: a wave
    of long tiles, or split-K), ``misaligned`` (an operand's rows are not a whole number of 16
    bytes: no 16-byte loads, no tensor map). None of them: ``regular``."""
    out = []
    if min(wl.M, wl.N, wl.K) <= 4:
        out.append("degenerate")
    if min(wl.M, wl.N) <= 64:
        out.append("thin")
    if wl.K <= 64:
        out.append("short K")
    if wl.K >= 1024 and -(-wl.M // 128) * -(-wl.N // 128) < sms:
        out.append("long K, few tiles")
    if any(wl.misaligned_rows()):
        out.append("misaligned")
    return out or ["regular"]


def floor(df: pd.DataFrame) -> pd.DataFrame:
    """The worst tenth of the shapes per precision (at least one), by the lab's % of cuBLAS, with
    the classes each belongs to (:func:`shape_classes`) and the kernel chosen."""
    sms = int((df.attrs.get("gpu_spec") or {}).get("sms") or 132)
    choices = df[df["name"].str.startswith("best_") & df["pct_cublas"].notna()]
    rows = []
    for prec, g in choices.groupby("precision", sort=False):
        worst = g.nsmallest(max(1, math.ceil(FLOOR_SHARE * len(g))), "pct_cublas")
        for _, r in worst.iterrows():
            wl = parse_workload(r["workload"])
            rows.append({"precision": prec, "shape": f"{wl.M}x{wl.N}x{wl.K}", "% cuBLAS": T.fmt(r["pct_cublas"], ".1f"),
                         "class": ", ".join(shape_classes(wl, sms)), "choice": str(r.get("chosen") or r["name"])})
    return pd.DataFrame(rows)


def floor_classes(df: pd.DataFrame) -> pd.DataFrame:
    """Per precision, how many of the worst tenth fall in each class (a shape in two classes counts
    in both), beside how many of all the shapes do."""
    sms = int((df.attrs.get("gpu_spec") or {}).get("sms") or 132)
    worst = floor(df)
    choices = df[df["name"].str.startswith("best_") & df["pct_cublas"].notna()]
    rows = []
    for prec, g in choices.groupby("precision", sort=False):
        every = [c for w in g["workload"] for c in shape_classes(parse_workload(w), sms)]
        low = [c for text in worst.loc[worst["precision"] == prec, "class"] for c in text.split(", ")]
        rows.append({"precision": prec, **{c: f"{low.count(c)} of {every.count(c)}" for c in (*CLASSES, "regular")}})
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    props = df.attrs.get("shapes_drawn", {})
    lines = [f"# Random shapes: {df.attrs['provenance']['gpu']}", "", T.provenance_line(df.attrs), "",
             f"{props.get('count')} shapes, M, N, K log-uniform in [1, {MAX_DIM}], seed {df.attrs.get('seed')} "
             f"({props.get('not_multiple_of_8')} with a dimension that is not a multiple of 8, {props.get('dim_le_4')} "
             f"with one of 4 or less; {df.attrs.get('redrawn', 0)} redrawn as too large for the GPU's memory). "
             "Every result checked against float64 first; % cuBLAS against cuBLAS of the same precision "
             "(fp32: TF32 off; tf32: cuBLAS in TF32 mode; fp16: fp16 inputs, fp32 output).", "",
             T.markdown_table(summary(df)),
             "## The floor: the worst tenth per precision", "",
             "The classes (a shape can be in several): degenerate (a dimension ≤ 4), thin (an output ≤ 64 rows or "
             "columns wide), short K (K ≤ 64), long K with few tiles (K ≥ 1024, fewer 128 × 128 output tiles than SMs), "
             "misaligned (an operand's rows not a whole number of 16 bytes); none of them: regular. Per class: the "
             "worst tenth's shapes in it, of all the shapes in it.", "",
             T.markdown_table(floor_classes(df)), T.markdown_table(floor(df)),
             "## Every shape", "", T.markdown_table(per_shape(df))]
    return "\n".join(lines)


def command(args, precisions) -> int:
    """``schedlab bench-gemm --random N`` (``args``: the command's options; ``precisions``: the
    checked list of ``--precisions``)."""
    memory = None
    if cuda_available():
        memory = int(tvm.cuda(0).total_global_memory)
    shapes, redrawn = draw_shapes(args.random, args.seed, memory_bytes=memory)
    precisions = [p for p in precisions if p in ("fp32", "tf32", "fp16")] or ["fp32", "tf32", "fp16"]
    meta = {"seed": args.seed, "redrawn": redrawn, "shapes_drawn": shape_properties(shapes),
            "shapes": [list(s) for s in shapes]}
    df = run_bench(make_jobs(shapes, precisions), args.out, "bench-gemm-random", workers=args.workers,
                   timeout=args.timeout, budget_s=args.budget, progress=not args.quiet, meta=meta)
    md = markdown(df)
    write_bench(df, args.out, md)
    charts.random_chart(df, os.path.join(args.out, "random_shapes.png"))
    print(md)
    return 0
