"""``schedlab bench-gemm``: the lab's GEMM choices and tensor-core steps beside TVM's dlight rules and
cuBLAS of the same precision, on fixed shapes (or, with ``--random N``, on shapes nobody chose:
:mod:`reports.experiments.bench_random`).

    schedlab bench-gemm --out out/bench_gemm [--shapes 1024x512x2048,...] [--steps] [--precisions fp32,tf32,fp16,bf16]
    schedlab bench-gemm --precisions fp8 --shapes 4096x4096x4096,8192x8192x8192 --out out/bench_fp8
    schedlab bench-gemm --layouts --out out/bench_layouts   # nn/nt/tn/tt and bmm beside cuBLAS

Per shape and precision: cuBLAS (fp32 with TF32 off; cuBLAS in TF32 mode for tf32; fp16/bf16 inputs
with an fp32 output, as the lab's kernels compute), dlight, the lab's choice for the precision
(``best_gemm``, ``best_tf32_gemm``, ``best_fp16_gemm``) and the tensor-core steps that apply (WMMA,
mma.sync, wgmma, then the Hopper ladder: TMA loads, warp specialization, persistent tiles, clusters);
``--steps`` adds the fast fp32 steps at their defaults. ``fp8`` (asked for by name, not in the
default list): e4m3 inputs in the nt layout with a bf16 output, per-tensor, row-wise and block
scales (three workloads per shape unless the shape names its layout, output or scales),
``best_fp8_gemm`` (the lab's choice), fp8_tma_gemm (also with 2×1 clusters) and
fp8_block_scaled_gemm at their defaults beside ``torch._scaled_mm`` with the same scales (where its
version takes them); block scales also beside cuBLASLt's per-tensor rate at the same shape and
beside their inputs dequantized into bf16 for cuBLAS. Every result is checked against float64
first, then timed (CUDA events, L2 emptied before each run, median). Writes results.json/.csv and
table.md (ratios to cuBLAS of the same precision) into ``--out``.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from schedules import LAYOUTS, parse_workload
from schedules.workloads import workload_for

from ..views import tables as T
from .bench import applies, label, run_bench, write_bench

SHAPES = ("1024x512x2048", "2048x2048x2048", "4096x4096x4096", "3000x1000x2500", "8192x8192x8192", "4096x8192x512")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
EXTRA_PRECISIONS = ("fp8",)  # taken by name only (--precisions fp8)
FP32_STEPS = ("vectorized_shared_gemm", "warp_tiled_gemm", "async_pipeline_gemm", "split_k_gemm", "rasterized_gemm")
# the Hopper tensor-core ladder at its defaults: each adds one piece to the one before
HOPPER = [("tma_gemm", {}), ("warp_specialized_gemm", {}), ("persistent_gemm", {}), ("cluster_gemm", {})]
# the kernels of each precision: (workload dtype, [jobs]); a step that refuses the shape is left out
KERNELS = {
    "fp32": ("float32", [("cublas", {}), ("tvm_dlight", {}), ("best_gemm", {})]),
    "tf32": ("float32", [("cublas_tf32", {}), ("wgmma_tf32_gemm", {}), ("tma_tf32_gemm", {}), ("best_tf32_gemm", {})]),
    "fp16": ("float16", [("cublas", {}), ("tvm_dlight", {}), ("tensor_core_gemm", {}),
                         ("tensor_core_gemm", {"intrinsics": "mma"}), ("wgmma_gemm", {}), *HOPPER, ("best_fp16_gemm", {})]),
    "bf16": ("bfloat16", [("cublas", {}), ("wgmma_gemm", {}), *HOPPER, ("best_fp16_gemm", {})]),
    "fp8": ("float8_e4m3fn", [("cublas", {}), ("dequant_bf16_cublas", {}), ("fp8_tma_gemm", {}),
                              ("fp8_tma_gemm", {"cluster_m": 2}),
                              ("fp8_block_scaled_gemm", {}), ("best_fp8_gemm", {})]),
}
CHOICE = {"fp32": "best_gemm", "tf32": "best_tf32_gemm", "fp16": "best_fp16_gemm", "bf16": "best_fp16_gemm",
          "fp8": "best_fp8_gemm"}
FP8_SCALES = ("tensor", "row", "block")  # an FP8 linear layer: nt, a bf16 output, each scaling (fp8_shapes)
# a shape with an epilogue (2048x8192x1024:nt:out=bfloat16:bias:gelu_tanh): cuBLASLt's fused epilogue and eager
# PyTorch beside cuBLAS's product alone, and the fusion lesson's two steps
EPILOGUE_JOBS = [("cublaslt_fused", {}), ("torch_eager", {}), ("unfused_epilogue_gemm", {}), ("fused_epilogue_gemm", {})]


def shape_workload(shape: str, dtype: str) -> str | None:
    """The workload of a ``--shapes`` entry (``MxNxK``, optionally with a layout, an output type and an
    epilogue) in one precision's input type; None where the entry names another input type."""
    wl = workload_for("gemm", shape.strip().removeprefix("gemm:"), dtype)
    return str(wl) if wl.dtype == dtype else None


def fp8_shapes(shape: str) -> list[str]:
    """The FP8 workloads of a ``--shapes`` entry: e4m3 inputs (where it names no input type), the nt
    layout and a bf16 output where it names neither, and each scaling (per tensor, per row, per
    block) where it names none."""
    text = shape.strip().removeprefix("gemm:")
    fields = [f.strip() for f in text.split(":")[1:]]
    wl = workload_for("gemm", text, KERNELS["fp8"][0])
    if not any(f in LAYOUTS for f in fields):
        wl = dataclasses.replace(wl, layout="nt")  # FP8 wgmma and cuBLASLt read both operands K-major
    if not any(f.startswith("out=") for f in fields):
        wl = dataclasses.replace(wl, out_dtype="bfloat16")
    if any(f.startswith("scale=") for f in fields):
        return [str(wl)]
    return [str(dataclasses.replace(wl, scaling=s)) for s in FP8_SCALES]


def make_jobs(shapes, precisions=PRECISIONS, steps=False):
    jobs = []
    for entry in shapes:
        for prec in precisions:
            dtype, kernels = KERNELS[prec]
            for wl in (fp8_shapes(entry) if prec == "fp8" else [shape_workload(entry, dtype)]):
                if wl is None:
                    continue
                extra = [(s, {}) for s in FP32_STEPS] if steps and prec == "fp32" else []
                extra += EPILOGUE_JOBS if parse_workload(wl).has_epilogue and prec != "tf32" else []
                for name, params in kernels + extra:
                    if applies(name, wl, params):
                        jobs.append({"workload": wl, "name": name, "params": params})
    return jobs


def table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel: TFLOP/s and % of cuBLAS of the same workload and precision."""
    out = pd.DataFrame({
        "workload": df["workload"], "precision": df["precision"],
        "kernel": [label(n, p) for n, p in zip(df["name"], df.get("params", [None] * len(df)))],
        "chosen": df["chosen"] if "chosen" in df else "",
        "TFLOP/s": df["tflops"].map(lambda v: T.fmt(v, ".2f")),
        "% cuBLAS": df["pct_cublas"].map(lambda v: T.fmt(v, ".1f")),
        **({"% cuBLASLt fused": df["pct_cublaslt"].map(lambda v: T.fmt(v, ".1f"))} if "pct_cublaslt" in df else {}),
        **({"× eager": df["speedup_vs_eager"].map(lambda v: T.fmt(v, ".2f"))} if "speedup_vs_eager" in df else {}),
        **fp8_columns(df),
        "ms": df["time_ms"].map(lambda v: T.fmt(v, ".4f")),
        "rel. error": df["rel_error"].map(lambda v: T.fmt(v, ".2g")) if "rel_error" in df else "",
        "regs": df["registers"].map(lambda v: T.fmt(v, ".0f")) if "registers" in df else "",
        "spill B": df["spill_bytes"].map(lambda v: T.fmt(v, ".0f")) if "spill_bytes" in df else "",
        "status": [s if s == "ok" else f"**{s}**: {str(e)[:80]}" for s, e in
                   zip(df["status"], df["error"] if "error" in df else [""] * len(df))],
    })
    out["chosen"] = out["chosen"].fillna("") if "chosen" in df else ""
    return out


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """The lab's choice per shape and precision, its % of cuBLAS and dlight's."""
    rows, extra = [], fp8_columns(df)
    for (wl, prec), g in df.groupby(["workload", "precision"], sort=False):
        choice = g[g["name"] == CHOICE.get(prec)]  # the step at its defaults comes first
        dl = g[g["name"] == "tvm_dlight"]
        if choice.empty:
            continue
        c = choice.iloc[0]
        scales = f", {parse_workload(wl).scaling} scales" if prec == "fp8" else ""
        rows.append({"shape": wl.split(":")[1] + scales, "precision": prec,
                     "choice": str(c.get("chosen") or c["name"]), "TFLOP/s": T.fmt(c.get("tflops"), ".2f"),
                     "% cuBLAS": T.fmt(c.get("pct_cublas"), ".1f"),
                     **{k: v.loc[c.name] for k, v in extra.items()},
                     "dlight % cuBLAS": T.fmt(dl.iloc[0].get("pct_cublas"), ".1f") if len(dl) else ""})
    return pd.DataFrame(rows)


def fp8_columns(df: pd.DataFrame) -> dict:
    """Block scales' two other baselines, where the frame has them: % of cuBLASLt's per-tensor rate at
    the same shape and the speedup over dequantizing into bf16 for cuBLAS."""
    cols = {}
    if "pct_cublas_tensor" in df:
        cols["% LT per-tensor"] = df["pct_cublas_tensor"].map(lambda v: T.fmt(v, ".1f"))
    if "speedup_vs_dequant" in df:
        cols["× dequant+bf16"] = df["speedup_vs_dequant"].map(lambda v: T.fmt(v, ".2f"))
    return cols


def markdown(df: pd.DataFrame) -> str:
    timer = df["timer"].dropna().iloc[0] if "timer" in df and df["timer"].notna().any() else "no GPU: nothing timed"
    lines = [f"# GEMM benchmark: {df.attrs['provenance']['gpu']}", "", T.provenance_line(df.attrs), "",
             f"Timer: {timer}; median; every result checked against float64 first. fp32 kernels are compared "
             "with cuBLAS fp32 (TF32 off), tf32 ones with cuBLAS in TF32 mode, fp16/bf16 ones with cuBLAS of "
             "the same input type and an fp32 output (or the workload's output type; with an epilogue, the product alone, "
             "beside cuBLASLt's fused epilogue and eager PyTorch); fp8 ones with torch._scaled_mm (cuBLASLt) of the same "
             "scales and output type; block-scaled ones also with cuBLASLt's per-tensor rate at the same shape "
             "(% LT per-tensor) and with their inputs dequantized into bf16 for cuBLAS (× dequant+bf16).", "",
             "## The lab's choice per shape", "",
             T.markdown_table(summary(df)), "## Every kernel", "", T.markdown_table(table(df))]
    return "\n".join(lines)


def command(args, precisions) -> int:
    """``schedlab bench-gemm`` on fixed shapes (``args``: the command's options; ``precisions``: the
    checked list of ``--precisions``)."""
    shapes = [s.strip() for s in (",".join(SHAPES) if args.shapes is None else args.shapes).split(",") if s.strip()]
    for s in shapes:
        workload_for("gemm", s.removeprefix("gemm:"))  # a malformed entry: its one-line error before anything runs
    df = run_bench(make_jobs(shapes, precisions, args.steps), args.out, "bench-gemm", workers=args.workers,
                   timeout=args.timeout, budget_s=args.budget, progress=not args.quiet)
    md = markdown(df)
    write_bench(df, args.out, md)
    print(md)
    return 0
