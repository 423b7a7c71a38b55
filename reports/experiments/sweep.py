"""``schedlab sweep``: configurations of the GEMM steps beside dlight and cuBLAS, on a GPU.

    schedlab sweep --out out/sweep [--set calibration|fp32|fp16|all|round2|wgmma|tf32] [--part all|grid|classes]
                   [--precisions fp32,tf32,fp16|fp8] [--where PARAM=VALUE ...]

``--set calibration`` (the default) is the dispatcher's calibration sweep
(reports/experiments/calibrate.py): ``schedlab calibrate out/sweep --write`` fits the model to it;
``--precisions fp8`` measures the FP8 kernels instead, on the same shapes. The other sets are the sweeps the
steps' default configurations were chosen from. ``--where`` keeps the configurations whose
parameters have those values (``--where async_copy=true``: the cp.async variants only, e.g. to add
a new kind of kernel to a calibration measured before), with cuBLAS beside them.

Builds every configuration in parallel, checks and times each through the lab's one measurement
path (reports.engine.harness), prints one table per workload sorted by speed, and writes
results.json.
"""

from __future__ import annotations

import itertools
import json

from ..views import tables as T
from .bench import label, run_bench, write_bench
from .calibrate import PRECISIONS, calibration_jobs, config_of

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


def make_jobs(shapes, which, part="all", precisions=PRECISIONS):
    if which == "calibration":  # the dispatcher's calibration grid (its own shapes; --shapes ignored)
        return calibration_jobs(part=part, precisions=precisions)
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


def where(jobs, conditions):
    """The jobs whose configurations match every ``PARAM=VALUE`` of ``conditions`` (values read as
    JSON: true, 16, "k_major"; else as text; a parameter left at the step's default has the
    default's value), and the cuBLAS jobs of the workloads they leave."""
    wanted = {}
    for cond in conditions:
        name, sep, text = cond.partition("=")
        if not sep or not name:
            raise SystemExit(f"--where takes PARAM=VALUE, not {cond!r}")
        try:
            wanted[name] = json.loads(text)
        except ValueError:
            wanted[name] = text
    def blas(job):
        return job["name"].startswith("cublas")

    def group(job):
        return job["workload"], (job.get("extra") or {}).get("sweep_precision")

    def matches(job):  # the configuration's values: a parameter left at its default is not in params
        cfg = config_of(job)
        return all(getattr(cfg, k, None) == v for k, v in wanted.items())

    kept = [not blas(j) and matches(j) for j in jobs]
    groups = {group(j) for j, keep in zip(jobs, kept) if keep}
    return [j for j, keep in zip(jobs, kept) if keep or (blas(j) and group(j) in groups)]


def command(args) -> int:
    """``schedlab sweep`` (``args``: the command's options)."""
    jobs = make_jobs((",".join(SHAPES) if args.shapes is None else args.shapes).split(","), args.set, args.part,
                     getattr(args, "precisions", None) or PRECISIONS)
    if args.where:
        jobs = where(jobs, args.where)
    df = run_bench(jobs, args.out, f"sweep-{args.set}", workers=args.workers,
                   timeout=args.timeout, budget_s=args.budget, progress=not args.quiet)
    text = tables(df)
    write_bench(df, args.out, text)
    print(text)
    return 0


def tables(df) -> str:
    """One table per workload, fastest first, with the share of cuBLAS of the same precision."""
    out = []
    for wl, g in df.groupby("workload", sort=False):
        g = g.sort_values("tflops", ascending=False, na_position="last")
        t = g.assign(kernel=[label(n, p) for n, p in zip(g["name"], g["params"])])
        out += [f"## {wl}", "", T.markdown_table(t.assign(
            **{"TFLOP/s": t["tflops"].map(lambda v: T.fmt(v, ".2f")), "% cuBLAS": t["pct_cublas"].map(lambda v: T.fmt(v, ".1f"))}
        )[["kernel", "TFLOP/s", "% cuBLAS", "status"]])]
    return "\n".join(out)
