"""Benchmark the fast GEMM schedules beside TVM dlight and cuBLAS, in one harness.

    python scripts/bench_gemm.py --out out/bench_gemm [--shapes 1024x512x2048,...] [--steps]

For every shape, fp32 and fp16: cuBLAS (torch; fp32 with TF32 off), TVM's dlight rules, the best
fp32 schedule (``best_gemm``), the tensor-core step (WMMA and mma.sync variants) and, where the shape
allows it, the warpgroup-MMA step (``wgmma_gemm``) and the fp16 choice per shape (``best_fp16_gemm``);
for fp32 shapes also the TF32 warpgroup-MMA step (``wgmma_tf32_gemm``) beside cuBLAS in TF32 mode; ``--steps`` adds
steps 14-18 at their defaults. Each TVM kernel is built in its own process and run in a guarded
timing process (reports.gemm_bench): results checked against float64 first (fresh random inputs,
output poisoned with NaN), then timed with CUDA events, L2 emptied before each run, median.
Prints each kernel's ratio to cuBLAS of the same input type and writes bench.json, bench.csv and
bench.md (GPU, TVM version, git commit, date) into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = ("1024x512x2048", "2048x2048x2048", "4096x4096x4096", "3000x1000x2500")
STEPS = ("vectorized_shared_gemm", "warp_tiled_gemm", "async_pipeline_gemm", "split_k_gemm", "rasterized_gemm")


def make_jobs(shapes, steps=False):
    jobs = []
    for shape in shapes:
        wl = "gemm:" + shape.strip().removeprefix("gemm:")
        jobs += [{"workload": wl, "name": "cublas"}, {"workload": wl, "name": "tvm_dlight"},
                 {"workload": wl, "name": "best_gemm"}]
        if applies("wgmma_tf32_gemm", wl):  # tf32 tensor cores, beside cuBLAS in TF32 mode
            jobs += [{"workload": wl, "name": "cublas_tf32"}, {"workload": wl, "name": "wgmma_tf32_gemm"}]
        if steps:
            jobs += [{"workload": wl, "name": s} for s in STEPS]
        wl16 = f"{wl}:float16"
        jobs += [{"workload": wl16, "name": "cublas"}, {"workload": wl16, "name": "tvm_dlight"},
                 {"workload": wl16, "name": "tensor_core_gemm"},
                 {"workload": wl16, "name": "tensor_core_gemm", "params": {"intrinsics": "mma"}}]
        if applies("wgmma_gemm", wl16):  # 16-byte row copies: K and N multiples of 8
            jobs.append({"workload": wl16, "name": "wgmma_gemm"})
        jobs.append({"workload": wl16, "name": "best_fp16_gemm"})
    return jobs


def get_spec(name):
    from schedules import get

    return get(name)


def applies(name, workload) -> bool:
    from schedules import ScheduleParamError, get, parse_workload

    try:
        get(name).validate(parse_workload(workload))
    except ScheduleParamError:
        return False
    return True


def label(row):
    params = ",".join(f"{k}={v}" for k, v in sorted((row.get("params") or {}).items()))
    return row["name"] + (f"[{params}]" if params else "")


def table_rows(rows):
    """Rows with their ratio to cuBLAS of the same workload and precision (fp32 vs fp32 TF32 off,
    tf32 vs cuBLAS in TF32 mode, fp16 vs fp16)."""
    from reports.gemm_bench import CUBLAS

    cublas = {(r["workload"], r["name"]): r.get("tflops") for r in rows if r["name"] in CUBLAS}
    out = []
    for r in rows:
        tf32 = r["name"] == "cublas_tf32" or (r["name"] not in CUBLAS + ("tvm_dlight",)
                                              and "tf32" in get_spec(r["name"]).tags)
        ref = cublas.get((r["workload"], "cublas_tf32" if tf32 else "cublas"))
        t = r.get("tflops")
        out.append({"workload": r["workload"], "kernel": label(r), "status": r.get("status"),
                    "time_ms": r.get("time_ms"), "tflops": t,
                    "pct_cublas": 100 * t / ref if t and ref else None,
                    "rel_error": r.get("rel_error"), "registers": r.get("registers"),
                    "spill_bytes": r.get("spill_bytes"), "error": r.get("error", ""), "timer": r.get("timer")})
    return out


def markdown(trows, prov):
    timer = next((r["timer"] for r in trows if r.get("timer")), "no GPU: nothing timed")
    lines = [f"# GEMM benchmark: {prov['gpu']}", "",
             f"TVM {prov['tvm']}, commit {prov['commit']}, {prov['date']}. Timer: {timer}; median; "
             "every result checked against float64 first. fp32 kernels are compared "
             "with cuBLAS fp32 (TF32 off), tf32 ones (wgmma_tf32_gemm) with cuBLAS in TF32 mode "
             "(cublas_tf32), fp16 ones with cuBLAS fp16.", "",
             "| workload | kernel | TFLOP/s | % cuBLAS | ms | rel. error | regs | spill B |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in trows:
        f = lambda v, fmt: (fmt % v) if isinstance(v, (int, float)) else "-"  # noqa: E731
        status = "" if r["status"] == "ok" else f" **{r['status']}**: {r['error'][:80]}"
        lines.append(f"| {r['workload']} | {r['kernel']}{status} | {f(r['tflops'], '%.2f')} | "
                     f"{f(r['pct_cublas'], '%.1f')} | {f(r['time_ms'], '%.4f')} | {f(r['rel_error'], '%.2g')} | "
                     f"{f(r['registers'], '%d')} | {f(r['spill_bytes'], '%d')} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench_gemm")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--steps", action="store_true", help="also time steps 14-18 at their defaults")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of timed runs per kernel")
    args = ap.parse_args(argv)

    from reports import gemm_bench
    from reports.provenance import provenance

    jobs = make_jobs(args.shapes.split(","), args.steps)
    rows = gemm_bench.run(jobs, os.path.join("/tmp", f"bench_gemm_libs_{os.getpid()}"),
                          workers=args.workers, budget_s=args.budget)
    prov = provenance()
    if os.environ.get("SCHEDLAB_COMMIT"):  # a copied tree without its .git
        prov["commit"] = os.environ["SCHEDLAB_COMMIT"]
    trows = table_rows(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"provenance": prov, "rows": rows, "table": trows}, f, indent=1, default=float)
    with open(os.path.join(args.out, "bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(trows[0]))
        w.writeheader()
        w.writerows(trows)
    md = markdown(trows, prov)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
