"""Sweep configurations of the fast GEMM steps (14-19) beside dlight and cuBLAS, on a GPU.

    python scripts/sweep_gemm.py --out out/sweep [--set fp32|fp16|all] [--workers 14]

Builds every configuration in parallel, checks and times each (reports.gemm_bench), prints one
table per workload sorted by speed, and writes sweep.json. The winners feed
``schedules.gemm_fast.BEST_FP32``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = ("1024x512x2048", "2048x2048x2048", "4096x4096x4096", "3000x1000x2500")

BIG = dict(block_m=128, block_n=128, thread_m=8, thread_n=8)
MID = dict(block_m=128, block_n=64, thread_m=8, thread_n=8)       # 128 threads
SMALL = dict(block_m=64, block_n=64, thread_m=4, thread_n=4)      # 256 threads
SMALL8 = dict(block_m=64, block_n=64, thread_m=8, thread_n=4)     # 128 threads


def fp32_configs():
    """(step, params) pairs: the steps' defaults and the variants worth timing."""
    out = [(s, {}) for s in ("thread_tiling_gemm", "double_buffer_gemm", "vectorized_shared_gemm",
                             "warp_tiled_gemm", "async_pipeline_gemm", "split_k_gemm", "rasterized_gemm")]
    a = "async_pipeline_gemm"
    for warps, bk, stages in itertools.product(((2, 4), (4, 2)), (8, 16), (3, 4)):
        p = dict(BIG, warps_m=warps[0], warps_n=warps[1], block_k=bk, stages=stages)
        out.append((a, p))
        out.append((a, dict(p, group_m=8)))
    out.append((a, dict(BIG, warps_m=4, warps_n=2, block_k=8, stages=4, a_layout="m_major")))
    out.append((a, dict(block_m=128, block_n=256, thread_m=8, thread_n=16, warps_m=2, warps_n=4,
                        block_k=8, stages=3, group_m=8)))
    out.append(("warp_tiled_gemm", dict(warps_m=4, warps_n=2)))
    out.append(("warp_tiled_gemm", dict(warps_m=4, warps_n=2, block_k=8)))
    for base, warps, split in itertools.product((MID, SMALL, SMALL8), ((2, 2), (4, 1), (2, 1), (1, 2)),
                                                (1, 2, 4)):
        threads = (base["block_m"] // base["thread_m"]) * (base["block_n"] // base["thread_n"])
        if threads // (warps[0] * warps[1]) != 32:
            continue
        out.append(("split_k_gemm", dict(base, warps_m=warps[0], warps_n=warps[1], split_k=split)))
    for split in (2, 4):
        out.append(("split_k_gemm", dict(BIG, warps_m=4, warps_n=2, split_k=split)))
    return out


def fp16_configs():
    t = "tensor_core_gemm"
    return [(t, {}), (t, dict(async_copy=False, stages=2)), (t, dict(chunk_k=4)), (t, dict(stages=4)),
            (t, dict(warps_m=2, warps_n=2, frags_m=4, frags_n=4, stages=3)),
            (t, dict(warps_m=2, warps_n=2, frags_m=4, frags_n=4, chunk_k=4, stages=3)),
            (t, dict(warps_m=4, warps_n=2, frags_m=2, frags_n=4, stages=4)),
            (t, dict(warps_m=2, warps_n=4, frags_m=4, frags_n=4, stages=3)),
            (t, dict(warps_m=4, warps_n=4, frags_m=2, frags_n=2, chunk_k=4, stages=3, group_m=1))]


def round2_fp32():
    """Second round, around the first round's winners (H200): register-staged warp tiles, split-K
    on them, fragment-pipelined cp.async."""
    w, a, k = "warp_tiled_gemm", "async_pipeline_gemm", "split_k_gemm"
    out = [(s, {}) for s in ("double_buffer_gemm", "vectorized_shared_gemm", w, a, k, "rasterized_gemm")]
    for warps, bk, group in itertools.product(((4, 2), (2, 4)), (8, 16), (1, 8)):
        out.append((w, dict(warps_m=warps[0], warps_n=warps[1], block_k=bk, group_m=group)))
    for split in (2, 3, 4, 6, 8):
        out.append((w, dict(warps_m=4, warps_n=2, block_k=8, split_k=split)))
        out.append((k, dict(BIG, warps_m=4, warps_n=2, split_k=split)))
    for split in (4, 8):
        out.append((k, dict(MID, warps_m=2, warps_n=2, split_k=split)))
        out.append((w, dict(MID, warps_m=2, warps_n=2, block_k=8, split_k=split)))
    for bk, stages in itertools.product((8, 16), (3, 4)):
        out.append((a, dict(warps_m=2, warps_n=4, block_k=bk, stages=stages, group_m=8, fragment_pipeline=True)))
    return out


def round2_fp16():
    t = "tensor_core_gemm"
    big = dict(warps_m=2, warps_n=2, frags_m=4, frags_n=4)
    out = [(t, {}), (t, dict(big, stages=3)), (t, dict(big, stages=4)), (t, dict(big, stages=3, fragment_pipeline=True))]
    for intr in ("mma",):
        for stages, chunk, fp in itertools.product((3, 4), (2, 4), (False, True)):
            out.append((t, dict(big, stages=stages, chunk_k=chunk, intrinsics=intr, fragment_pipeline=fp)))
        out.append((t, dict(warps_m=4, warps_n=2, frags_m=4, frags_n=4, stages=3, intrinsics=intr)))
        out.append((t, dict(warps_m=2, warps_n=4, frags_m=4, frags_n=4, stages=3, intrinsics=intr)))
        out.append((t, dict(warps_m=2, warps_n=4, frags_m=4, frags_n=2, stages=4, intrinsics=intr)))
        out.append((t, dict(big, stages=3, intrinsics=intr, group_m=16)))
    out.append((t, dict(warps_m=4, warps_n=2, frags_m=4, frags_n=4, stages=3)))
    return out


ODD_SHAPES = ("1000x500x2001", "3x5x7", "1x4097x1")


def wgmma_configs():
    """Step 21's block shapes and ring depths: 128x256 (2 warpgroups, 1 block per SM) down to
    128x128 (2 blocks per SM where 3 stages fit)."""
    w = "wgmma_gemm"
    out = [("tensor_core_gemm", {})]
    for bm, bn, stages in ((128, 256, 4), (128, 256, 3), (128, 128, 4), (128, 128, 3), (256, 128, 4),
                           (256, 128, 3), (64, 256, 4), (128, 64, 4)):
        out.append((w, dict(block_m=bm, block_n=bn, stages=stages, mma_overlap=False)))
        if stages == 4:
            out.append((w, dict(block_m=bm, block_n=bn, stages=stages, mma_overlap=True)))
    return out


WGMMA_ODD = ("1000x520x2000", "8x8x8", "130x264x72")


def make_jobs(shapes, which):
    if which == "round2":
        jobs = []
        for shape in shapes:
            for dt, cfgs in (("", round2_fp32()), (":float16", round2_fp16())):
                wl = f"gemm:{shape}{dt}"
                jobs += [{"workload": wl, "name": "cublas"}, {"workload": wl, "name": "tvm_dlight"}]
                jobs += [{"workload": wl, "name": n, "params": p} for n, p in cfgs]
        for shape in ODD_SHAPES:  # correctness of every step's default (and the mma variant) at odd shapes
            for n, p in [(s, {}) for s in ("vectorized_shared_gemm", "warp_tiled_gemm", "async_pipeline_gemm",
                                           "split_k_gemm", "rasterized_gemm")] + [
                    ("split_k_gemm", dict(BIG, warps_m=4, warps_n=2, split_k=4)),
                    ("warp_tiled_gemm", dict(split_k=4, block_k=8, warps_m=4, warps_n=2))]:
                jobs.append({"workload": f"gemm:{shape}", "name": n, "params": p})
            for p in ({}, dict(warps_m=2, warps_n=2, frags_m=4, frags_n=4, intrinsics="mma")):
                jobs.append({"workload": f"gemm:{shape}:float16", "name": "tensor_core_gemm", "params": p})
        return jobs
    jobs = []
    if which == "tf32":  # step 23's block shapes, beside cuBLAS in TF32 mode
        for shape in shapes:
            wl = f"gemm:{shape}"
            jobs += [{"workload": wl, "name": "cublas_tf32"}, {"workload": wl, "name": "best_gemm"}]
            jobs += [{"workload": wl, "name": "wgmma_tf32_gemm", "params": p}
                     for p in (dict(block_m=128, block_n=256), dict(block_m=128, block_n=256, mma_overlap=False), {},
                               dict(block_m=128, block_n=128, stages=3, mma_overlap=False),
                               dict(block_m=128, block_n=64, mma_overlap=False))]
        return jobs
    if which == "wgmma":
        for shape in shapes:
            wl = f"gemm:{shape}:float16"
            jobs += [{"workload": wl, "name": "cublas"}]
            jobs += [{"workload": wl, "name": n, "params": p} for n, p in wgmma_configs()]
        jobs += [{"workload": f"gemm:{shape}:float16", "name": "wgmma_gemm", "params": p}
                 for shape in WGMMA_ODD for p in ({}, dict(block_n=128, stages=3, mma_overlap=False),
                                                  dict(mma_overlap=False))]
        return jobs
    for shape in shapes:
        if which in ("fp32", "all"):
            wl = f"gemm:{shape}"
            jobs += [{"workload": wl, "name": "cublas"}, {"workload": wl, "name": "tvm_dlight"}]
            jobs += [{"workload": wl, "name": n, "params": p} for n, p in fp32_configs()]
        if which in ("fp16", "all"):
            wl = f"gemm:{shape}:float16"
            jobs += [{"workload": wl, "name": "cublas"}, {"workload": wl, "name": "tvm_dlight"}]
            jobs += [{"workload": wl, "name": n, "params": p} for n, p in fp16_configs()]
    return jobs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/sweep")
    ap.add_argument("--set", default="all", choices=("fp32", "fp16", "all", "round2", "wgmma", "tf32"))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--budget", type=float, default=0.15, help="seconds of timed runs per kernel")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args(argv)
    from reports import gemm_bench

    jobs = make_jobs(args.shapes.split(","), args.set)
    os.makedirs(args.out, exist_ok=True)
    if args.build_only:
        for job in jobs:
            job["id"] = gemm_bench.job_id(job)
        rows = list(gemm_bench.build_all(jobs, "/tmp/sweep_libs", workers=args.workers).values())
    else:
        rows = gemm_bench.run(jobs, "/tmp/sweep_libs", workers=args.workers, budget_s=args.budget)
    from reports.provenance import provenance

    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump({"provenance": provenance(), "rows": rows}, f, indent=1, default=float)
    print_tables(rows)


def print_tables(rows):
    from reports import gemm_bench

    by_wl = {}
    for r in rows:
        by_wl.setdefault(r["workload"], []).append(r)
    for wl, rs in by_wl.items():
        cublas = next((r.get("tflops") for r in rs if r["name"] in gemm_bench.CUBLAS), None)
        print(f"\n## {wl} (cuBLAS {cublas and round(cublas, 2)} TFLOP/s)")
        for r in sorted(rs, key=lambda r: -(r.get("tflops") or 0)):
            t = r.get("tflops")
            pct = f"{100 * t / cublas:5.1f}%" if t and cublas else "     "
            status = f"{t:7.2f}" if t else f"{r.get('status')}: {r.get('error', '')[:90]}"
            params = ",".join(f"{k}={v}" for k, v in sorted(r.get("params", {}).items()))
            print(f"{status} {pct} regs={r.get('registers', '-')} spill={r.get('spill_bytes', '-')} "
                  f"{r['name']} {params}")


if __name__ == "__main__":
    main()
