"""GEMV at the memory-bandwidth limit: the dispatcher's choice, every GEMV variant (and a sweep of
their parameters), TVM's dlight rule and cuBLAS (torch.mv, TF32 off), timed in one process per
shape with one timer (reports.measure.CudaHarness.bench: CUDA events, median) under three cache
policies: the harness's L2 flush (the headline), a clean eviction by reading, and warm L2 (see
timing_policies).

Every result is first checked against a float64 product of the same inputs (fp16 inputs: of the
same halves) on fresh random inputs with the output poisoned with NaN: error < 1e-6 (see
check_error for the measure). GB/s = the workload's minimum bytes (A, x, y once) / median time; the
copy bandwidth (a 1 GiB device-to-device copy, bytes read + written) is measured in the same run.

Kernel faults: everything is compiled first (in parallel, CUDA binaries cached by source), then
the timing runs in a child process; if it dies, the remaining variants are retried one per
process, so a faulting kernel costs only its own row.

    python scripts/bench_gemv.py --out out/gemv            # the benchmark
    python scripts/bench_gemv.py --out out/gemv --sweep    # + every parameter sweep point
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from reports.worker import error_line  # noqa: E402

BENCH_SHAPES = ("gemv:16384x16", "gemv:16384x32", "gemv:16384x64", "gemv:16384x128", "gemv:16384x1024",
                "gemv:16384x4096", "gemv:8192x8192")
EXTRA_SHAPES = ("gemv:16384x17", "gemv:16384x4097", "gemv:1x65536", "gemv:16x65536", "gemv:256x65536",
                "gemv:16384x4096:float16", "gemv:8192x8192:float16",
                "gemv_t:16384x16", "gemv_t:16384x4096", "gemv_t:8192x8192", "gemv_t:8192x8192:float16")
SWEEP_EXTRA = ("gemv:16384x4097", "gemv:256x65536")  # extras that --sweep also sweeps
CACHE_DIR = os.environ.get("GEMV_BENCH_CACHE", os.path.join(tempfile.gettempdir(), "gemv_bench_cubins"))


# --- the variants -------------------------------------------------------------------------------

def variants(wl, sweep: bool):
    """(label, schedule name, params) for one workload; baselines are added by the caller."""
    from schedules.gemv import aligned_vector, widest_vector

    if wl.kind == "gemv_t":
        out = [("column_gemv_t", "column_gemv_t", {})]
        if sweep:
            for rows in (32, 128):
                out.append((f"column_gemv_t[rows={rows}]", "column_gemv_t", {"rows_per_slice": rows}))
            out.append(("column_gemv_t[threads=128]", "column_gemv_t", {"threads": 128}))
        return out
    vmax = aligned_vector(wl.N, widest_vector(wl))
    out = [("gemv_dispatch", "gemv_dispatch", {}),
           ("warp_gemv", "warp_gemv", {}),                      # step 10 as written up: scalar loads
           ("vectorized_gemv", "vectorized_gemv", {"vector": vmax}),
           ("multi_row_gemv", "multi_row_gemv", {}),
           ("multi_warp_gemv", "multi_warp_gemv", {"vector": vmax}),
           ("split_k_gemv", "split_k_gemv", {})]
    if wl.M < 2048 and wl.N * 4 >= 16384:   # few long rows: how many warps per row pays
        for wpr in (8, 16, 32):
            out.append((f"multi_warp_gemv[w={wpr}]", "multi_warp_gemv", {"warps_per_row": wpr, "vector": vmax,
                                                                        "unroll": 4}))
        for wpc in (4, 16):
            out.append((f"split_k_gemv[w={wpc}]", "split_k_gemv", {"warps_per_chunk": wpc}))
    if not sweep:
        return out
    seen = set()

    def add(name, **p):
        key = (name, tuple(sorted(p.items())))
        if key in seen:
            return
        seen.add(key)
        label = name + "[" + ",".join(f"{k[0] if k != 'warps_per_block' else 'wpb'}{'' if k == 'warps_per_block' else '='}{v}"
                                      for k, v in sorted(p.items())) + "]"
        out.append((label, name, p))

    lanes_needed = -(-wl.N // vmax)
    for unroll in (1, 2, 4, 8):
        if unroll == 1 or lanes_needed >= 32 * unroll:
            add("vectorized_gemv", vector=vmax, unroll=unroll)
            if unroll in (1, 4):
                add("warp_gemv", unroll=unroll)
    for wpb in (2, 8):
        add("vectorized_gemv", vector=vmax, unroll=4 if lanes_needed >= 128 else 1, warps_per_block=wpb)
    if lanes_needed <= 32:
        for lanes in (2, 4, 8, 16):
            for unroll in (1, 2, 4):
                if lanes * unroll * vmax <= max(wl.N, vmax) and lanes * vmax * unroll >= wl.N // 2:
                    add("multi_row_gemv", lanes=lanes, rows_per_warp=32 // lanes, vector=vmax, unroll=unroll)
        full = _pow2_ceil(lanes_needed)
        if full <= 16:
            for wpb in (2, 8):
                add("multi_row_gemv", lanes=full, rows_per_warp=32 // full, vector=vmax, warps_per_block=wpb)
    if wl.N * 4 >= 4096 and not wl.dtype == "float16":
        for wpr in (2, 4, 8):
            for unroll in (1, 4):
                add("multi_warp_gemv", warps_per_row=wpr, vector=vmax, unroll=unroll)
    return out


def _pow2_ceil(n):
    p = 1
    while p < n:
        p *= 2
    return p


# --- compiling (parallel, cached) ---------------------------------------------------------------

def install_cubin_cache():
    """Make reports.build compile each distinct CUDA source once, across processes."""
    from reports import build as B

    original = B.compile_cuda_source

    def cached(code, arch):
        os.makedirs(CACHE_DIR, exist_ok=True)
        path = os.path.join(CACHE_DIR, hashlib.sha1((arch + code).encode()).hexdigest() + ".pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                return pickle.load(f)
        device = original(code, arch)
        tmp = path + f".{os.getpid()}"
        with open(tmp, "wb") as f:
            pickle.dump(device, f)
        os.replace(tmp, path)
        return device

    B.compile_cuda_source = cached


def build_variant(wl, name, params, target):
    from reports import baselines
    from reports import build as B
    from schedules import get

    if name == "tvm_dlight":
        return B.build(baselines.dlight_module(wl, target), target)
    spec = get(name)
    cfg = spec.config(**params)
    spec.validate(wl, cfg)
    return B.build(spec.builder(wl, cfg), target)


def _compile_job(job):
    install_cubin_cache()
    from reports import build as B
    from schedules import parse_workload

    wl = parse_workload(job["workload"])
    t0 = time.time()
    try:
        built = build_variant(wl, job["name"], job["params"], B.cuda_target(job["arch"]))
        k = built.kernel
        return {**job, "status": "built", "registers": k.registers, "spill_bytes": k.spills,
                "shared_bytes": max(x.shared_bytes for x in built.device.kernels),
                "kernels": len(built.device.kernels), "build_s": time.time() - t0}
    except Exception as e:  # noqa: BLE001 - a failed build is this variant's error row
        return {**job, "status": "error", "error": error_line(e)}


# --- the child: verify and time one shape's variants --------------------------------------------

def run_variants(job):
    """In a child process: measure the copy bandwidth (if asked), then verify and time each
    variant; one JSON line each to job['rows_file'] as it finishes (so a crash shows which variant
    was running)."""
    install_cubin_cache()
    import numpy as np
    import torch

    from reports import baselines
    from reports import build as B
    from reports import measure as M
    from schedules import parse_workload

    target = B.cuda_target(job["arch"])
    policies = timing_policies(M, torch)
    torch.backends.cuda.matmul.allow_tf32 = False
    tdt = {"float32": torch.float32, "float16": torch.float16}
    tol = 1e-6   # fp16 inputs too: the sum is fp32, the reference the float64 product of the same halves
    if job.get("copy"):
        with open(job["rows_file"], "a") as f:
            f.write(json.dumps({"copy": measure_copy()}) + "\n")
    for v in job["variants"]:
        row = {k: v[k] for k in v if k not in ("rows_file",)}
        wl = parse_workload(v["workload"])
        (a_shape, a_dt), (x_shape, _), (y_shape, y_dt) = wl.arg_shapes()
        with open(job["rows_file"], "a") as f:
            f.write(json.dumps({"started": v["label"]}) + "\n")
        try:
            a = torch.empty(a_shape, dtype=tdt[a_dt], device="cuda").uniform_(-1, 1)
            x = torch.empty(x_shape, dtype=tdt[a_dt], device="cuda").uniform_(-1, 1)
            y = torch.empty(y_shape, dtype=tdt[y_dt], device="cuda")
            if v["name"] == "cublas":
                fn = baselines.cublas_call(policies["flush"], wl, [a, x, y])
            else:
                f_main = build_variant(wl, v["name"], v["params"], target).executable["main"]
                views = [policies["flush"].tvm_view(t) for t in (a, x, y)]
                fn = lambda f_main=f_main, views=views: f_main(*views)  # noqa: E731
            y.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err, measure = check_error(wl, a, x, y)
            row["error_measure"] = measure
            out = y.double().cpu().numpy()
            row["rel_error"] = err
            if not err < tol:
                row["status"] = "wrong"
                row["error"] = (f"relative error {err:.3g} over {tol:g}" if err == err else
                                f"{int(np.isnan(out).sum())} outputs not written (NaN) or not finite")
                if v["name"] != "cublas":
                    raise _Skip()
            else:
                row["status"] = "ok"
            for key, h in policies.items():
                t = h.bench(fn, budget_s=job.get("budget_s", 0.3))
                row[f"us_{key}"] = t.median_ms * 1e3
                row[f"gbps_{key}"] = wl.min_bytes / (t.median_ms * 1e-3) / 1e9
                row[f"timer_{key}"] = POLICY_TEXT[key]
            del a, x, y
        except _Skip:
            pass
        except Exception as e:  # noqa: BLE001
            row.update(status="error", error=error_line(e))
        with open(job["rows_file"], "a") as f:
            f.write(json.dumps(row, default=float) + "\n")


def check_error(wl, a, x, y):
    """(error, what it is relative to) of y against a float64 product of the same inputs, on the GPU.
    ‖y − ref‖ / ‖ref‖; for a single output or sums longer than 16384 terms, relative to ‖|A|·|x|‖
    instead (there ‖ref‖ can be small through cancellation while fp32 rounding grows like √N)."""
    import torch

    a64, x64 = a.double(), x.double()
    prod = (lambda m, v: m.t() @ v) if wl.kind == "gemv_t" else (lambda m, v: m @ v)
    ref = prod(a64, x64)
    out = y.double()
    if not bool(torch.isfinite(out).all()):
        return float("nan"), "finite"
    outputs, sum_length = (wl.N, wl.M) if wl.kind == "gemv_t" else (wl.M, wl.N)
    if outputs > 1 and sum_length <= 16384:
        return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref)), "|y-ref|/|ref|"
    scale = prod(a64.abs(), x64.abs())
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(scale)), "|y-ref|/||A||x||"


class _Skip(Exception):
    pass


POLICY_TEXT = {
    "flush": "CUDA events, median; L2 flushed before each run by a 256 MiB write (triton do_bench's flush)",
    "clean": "CUDA events, median; L2 evicted before each run by reading 256 MiB (no dirty lines left)",
    "warm": "CUDA events, median; no flush (inputs may sit in L2), a GPU spin before each run so "
            "the timed launch is queued behind it (no CPU launch gaps in the timing)",
}


def timing_policies(M, torch):
    """One timer (CudaHarness.bench) under three cache policies: ``clean`` is the project's standard
    (L2 emptied by reading 256 MiB); ``flush`` writes 256 MiB like triton's do_bench, leaving dirty
    lines whose write-back competes with the timed kernel; ``warm`` keeps L2 warm and hides launch gaps."""
    warm = M.CudaHarness(flush=None)
    warm.before_run = lambda: torch.cuda._sleep(100_000)   # ≈ 50 µs at 2 GHz: the launch is queued
    return {"flush": M.CudaHarness(flush="write"), "clean": M.CudaHarness(flush="read"), "warm": warm}


def measure_copy():
    import torch

    from reports import measure as M

    h = M.CudaHarness(flush=False)
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t = h.bench(lambda: dst.copy_(src), budget_s=0.3)
    return {"gpu": torch.cuda.get_device_name(0), "copy_gbps": 2 * src.numel() * 4 / t.median_ms / 1e6,
            "copy_bytes": 2 * src.numel() * 4, "copy_timer": t.method}


def _child(kind, payload, timeout):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind], input=json.dumps(payload),
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return proc


def run_isolated(job, timeout):
    """Run all variants in one child within ``timeout`` seconds; if it dies (a kernel fault kills
    the process), retry each unfinished variant in a child of its own while time is left, so a
    faulting kernel costs only its own row. Returns (rows, copy measurement or None)."""
    deadline = time.time() + timeout
    open(job["rows_file"], "w").close()
    try:
        proc = _child("run", job, timeout)
        died, tail = proc.returncode != 0, (proc.stderr or "").strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        died, tail = False, ["timed out"]
    rows, copy = _read_rows(job["rows_file"])
    done = {(r["workload"], r["label"]) for r in rows}
    todo = [v for v in job["variants"] if (v["workload"], v["label"]) not in done]
    if died:
        print("child died:", " | ".join(tail)[:300], "- retrying the rest one per process", file=sys.stderr)
    for v in todo:
        left = deadline - time.time()
        if not died or left < 15:
            rows.append({**v, "status": "error", "error": "not run: time limit of the benchmark reached"})
            continue
        single = {**job, "variants": [v], "copy": False}
        open(job["rows_file"], "w").close()
        try:
            proc = _child("run", single, min(60, left))
            got, _ = _read_rows(job["rows_file"])
            if got:
                rows += got
            else:
                hint = " | ".join((proc.stderr or "").strip().splitlines()[-2:])[:300]
                rows.append({**v, "status": "error", "error": f"process died (exit {proc.returncode}): {hint}"})
        except subprocess.TimeoutExpired:
            rows.append({**v, "status": "error", "error": "timed out"})
    return rows, copy


def _read_rows(path):
    rows, copy = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if "copy" in r:
                    copy = r["copy"]
                elif "started" not in r:
                    rows.append(r)
    return rows, copy


# --- reports ------------------------------------------------------------------------------------

def derive(rows, copy_gbps):
    by_wl = {}
    for r in rows:
        if r["name"] == "cublas" and r.get("us_flush"):
            by_wl[r["workload"]] = r
    for r in rows:
        cub = by_wl.get(r["workload"])
        for key in ("flush", "clean", "warm"):
            if r.get(f"us_{key}") and cub and cub.get(f"us_{key}"):
                r[f"vs_cublas_{key}"] = cub[f"us_{key}"] / r[f"us_{key}"]
            if r.get(f"gbps_{key}") and copy_gbps:
                r[f"of_copy_{key}"] = r[f"gbps_{key}"] / copy_gbps
    return rows


COLUMNS = ("workload", "label", "name", "status", "us_flush", "gbps_flush", "vs_cublas_flush", "of_copy_flush",
           "us_clean", "gbps_clean", "vs_cublas_clean", "of_copy_clean", "us_warm", "gbps_warm", "vs_cublas_warm", "of_copy_warm", "rel_error", "error_measure", "registers", "spill_bytes",
           "shared_bytes", "kernels", "params", "error")


def markdown(results):
    prov, rows = results["provenance"], results["rows"]
    lines = ["# GEMV bandwidth benchmark", "",
             f"GPU {prov['gpu']} · TVM {prov['tvm']} · commit {prov['commit']} · {prov['date']}  ",
             f"Copy bandwidth (1 GiB device-to-device copy, bytes read + written): **{results['copy']['copy_gbps']:.0f} GB/s**  ",
             "One timer (reports.measure.CudaHarness.bench: CUDA events, median) under three cache policies:  ",
             "*clean*: L2 evicted by reading 256 MiB before each run (no dirty lines whose write-back competes with the kernel) — the project's standard;  ",
             "*flushed*: L2 flushed by a 256 MiB write before each run (triton do_bench's flush; its dirty lines cost a memory-bound kernel ~10%);  ",
             "*warm*: no flush (small inputs stay in L2), a GPU spin before each run so no CPU launch gap is timed.  ",
             "GB/s = (A + x + y bytes) / time; × cuBLAS = cuBLAS time / variant time (> 1: faster); "
             "of copy = GB/s / copy bandwidth.", ""]
    lines += ["| workload | variant | µs flushed | GB/s | × cuBLAS | of copy | µs clean | GB/s | × cuBLAS | of copy | µs warm | × cuBLAS | error | status |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "–"

    for r in rows:
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('error', '')[:90]}"
        lines.append(f"| {r['workload']} | {r['label']} | {f(r.get('us_flush'), '.1f')} | {f(r.get('gbps_flush'), '.0f')} | "
                     f"{f(r.get('vs_cublas_flush'), '.2f')} | {f(r.get('of_copy_flush'), '.0%')} | "
                     f"{f(r.get('us_clean'), '.1f')} | {f(r.get('gbps_clean'), '.0f')} | "
                     f"{f(r.get('vs_cublas_clean'), '.2f')} | {f(r.get('of_copy_clean'), '.0%')} | "
                     f"{f(r.get('us_warm'), '.1f')} | {f(r.get('vs_cublas_warm'), '.2f')} | {f(r.get('rel_error'), '.1e')} | {status} |")
    return "\n".join(lines) + "\n"


def chart(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if r.get("gbps_clean") and r["workload"] in BENCH_SHAPES
            and r["workload"].startswith("gemv:16384x") and r.get("primary", True)]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=90)
    for label in dict.fromkeys(r["label"] for r in rows):
        pts = sorted((int(r["workload"].split("x")[1]), r["gbps_clean"]) for r in rows if r["label"] == label)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=label, lw=2.2 if label in ("gemv_dispatch", "cublas") else 1.2)
    pts = sorted((int(r["workload"].split("x")[1]), r["gbps_flush"]) for r in rows
                 if r["label"] == "gemv_dispatch" and r.get("gbps_flush"))
    if pts:
        ax.plot(*zip(*pts), ls=":", color="gray", marker=".", label="gemv_dispatch, write flush (do_bench)")
    ax.axhline(results["copy"]["copy_gbps"], color="k", ls="--", lw=1, label="copy bandwidth")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (M = 16384, fp32)")
    ax.set_ylabel("GB/s (L2 emptied by reading)")
    ax.set_title(f"GEMV bandwidth, {results['provenance']['gpu']}", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_all(rows, shapes, copy, args, gpu):
    """Results so far → JSON, CSV, Markdown and the chart in args.out (called after every shape,
    so a run cut short still leaves its finished shapes)."""
    from reports.provenance import provenance
    from schedules import parse_workload

    rows = list(rows)
    order = {s: i for i, s in enumerate(str(parse_workload(t)) for t in shapes)}
    rows.sort(key=lambda r: (order.get(r["workload"], 99), not r.get("primary", True), -(r.get("gbps_clean") or 0)))
    prov = provenance()
    if copy.get("gpu"):
        prov["gpu"] = copy["gpu"]
    results = {"provenance": prov, "copy": copy, "sweep": args.sweep, "rows": derive(rows, copy.get("copy_gbps"))}
    with open(os.path.join(args.out, "gemv_bench.json"), "w") as f:
        json.dump(results, f, indent=1, default=float)
    with open(os.path.join(args.out, "gemv_bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "params": json.dumps(r.get("params", {}))})
    if gpu:
        with open(os.path.join(args.out, "gemv_bench.md"), "w") as f:
            f.write(markdown(results))
        chart(results, os.path.join(args.out, "gemv_bench.png"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="out/gemv_bench")
    p.add_argument("--workload", action="append", help="override the shapes (repeatable)")
    p.add_argument("--extra", action="store_true", help="also odd shapes, fp16 and the transposed form")
    p.add_argument("--sweep", action="store_true", help="also every parameter sweep point")
    p.add_argument("--jobs", type=int, default=max(1, min(16, (os.cpu_count() or 2))))
    p.add_argument("--timeout", type=float, default=600, help="seconds for the whole timing phase")
    p.add_argument("--budget", type=float, default=0.3, help="seconds of timing per variant and cache policy")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        job = json.loads(sys.stdin.read())
        run_variants(job)
        return 0

    from multiprocessing import get_context

    from reports.build import cuda_available, device_arch
    from reports.provenance import provenance
    from schedules import parse_workload

    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    arch = device_arch()
    shapes = args.workload or (list(BENCH_SHAPES) + (list(EXTRA_SHAPES) if args.extra else []))
    jobs = []
    for text in shapes:
        wl = parse_workload(text)
        vs = variants(wl, args.sweep and (text in BENCH_SHAPES or text in SWEEP_EXTRA))
        for i, (label, name, params) in enumerate(vs):
            jobs.append({"workload": str(wl), "label": label, "name": name, "params": params, "arch": arch,
                         "primary": "[" not in label})
        jobs.append({"workload": str(wl), "label": "tvm_dlight", "name": "tvm_dlight", "params": {}, "arch": arch,
                     "primary": True})
    with get_context("spawn").Pool(args.jobs) as pool:
        compiled = pool.map(_compile_job, jobs, chunksize=1)
    print(f"compiled {len(compiled)} variants in {time.time() - t_start:.0f} s "
          f"({sum(c['status'] == 'error' for c in compiled)} errors)", flush=True)

    gpu = cuda_available()
    copy = {"copy_gbps": None, "gpu": "no GPU"}
    rows = [c for c in compiled if c["status"] == "error"]
    runnable = []
    for text in shapes:
        wl = str(parse_workload(text))
        runnable += [c for c in compiled if c["workload"] == wl and c["status"] == "built"]
        runnable.append({"workload": wl, "label": "cublas", "name": "cublas", "params": {}, "arch": arch,
                         "primary": True})
    if not gpu:
        rows += [{**c, "status": "no-gpu"} for c in runnable]
    else:
        job = {"arch": arch, "variants": runnable, "budget_s": args.budget, "copy": True,
               "rows_file": os.path.join(tempfile.gettempdir(), f"gemv_rows_{os.getpid()}.jsonl")}
        got, measured = run_isolated(job, args.timeout)
        copy = measured or copy
        rows += got
        print(f"copy bandwidth {copy['copy_gbps'] or float('nan'):.0f} GB/s on {copy['gpu']} "
              f"[{time.time() - t_start:.0f} s]", flush=True)
        for text in shapes:
            wl = str(parse_workload(text))
            mine = [r for r in got if r["workload"] == wl]
            best = max((r for r in mine if r.get("gbps_clean")), key=lambda r: r["gbps_clean"], default=None)
            cub = next((r for r in mine if r["name"] == "cublas"), {})
            disp = next((r for r in mine if r["label"] == "gemv_dispatch"), {})
            print(f"{wl}: dispatch {disp.get('us_clean', float('nan')):.1f} us, "
                  f"cuBLAS {cub.get('us_clean', float('nan')):.1f} us, "
                  f"best {best['label'] if best else '-'} {best['us_clean'] if best else float('nan'):.1f} us", flush=True)
    write_all(rows, shapes, copy, args, gpu)
    print(f"done in {time.time() - t_start:.0f} s → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
