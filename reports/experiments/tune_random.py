"""``schedlab tune-random``: does tuning finish the job on shapes nobody chose?

The same draw as ``schedlab bench-gemm --random N --seed S`` (:func:`.bench_random.draw_shapes`):
the fp32 shapes where the dispatcher's choice (best_gemm) is furthest from cuBLAS, from that run's
results (``--from DIR``) or from timing the draw's fp32 choices here, are each tuned by ``schedlab
tune --time-limit T`` (the dispatch space: the dispatcher's top candidates and their split-K, tile,
K tile and ring neighbours), one command per shape in its own tuning directory. Per shape the
report gives the dispatcher's % of cuBLAS in the benchmark and in the tuning command's harness
comparison, the tuned best's % of cuBLAS there (``schedlab run``'s harness: isolated build, float64
check, L2 emptied before each timed run, beside cuBLAS timed in the same run), the command's wall
time against its limit, and the trials. Written under ``--out``: ``tune_random.md``,
``tune_random.json`` (with provenance), the benchmark's results (``bench/``) where it ran here, and
each shape's tuning directory (``tune/<shape>/``, its report in ``report/``). ``--ranks`` tunes some
of the K shapes only (a command per shape), adding them to the table the earlier ones wrote.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import tvm

from schedules import parse_workload
from schedules.names import slug

from ..engine import results as R
from ..engine.build import cuda_available
from ..engine.files import ensure_out_dir
from ..engine.provenance import provenance
from ..views import tables as T
from . import bench_random as BR
from .bench import run_bench, write_bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET_PCT = 95.0  # the goal: the tuned kernel at 95% of cuBLAS or more


def draw_results(args, shapes, meta) -> pd.DataFrame:
    """The fp32 rows of the draw: read from ``--from DIR`` (a ``bench-gemm --random`` run of the same
    draw: refused in one line if its seed or shapes differ) or timed now into ``OUT/bench``."""
    if args.source:
        df = R.load_results(args.source)
        drawn = [tuple(s) for s in df.attrs.get("shapes") or []]
        if df.attrs.get("seed") != args.seed or drawn != [tuple(s) for s in shapes]:
            raise ValueError(f"--from {args.source}: its draw (seed {df.attrs.get('seed')}, {len(drawn)} shapes) is not "
                             f"--random {args.random} --seed {args.seed}'s")
        if "fp32" not in set(df["precision"].dropna()):
            raise ValueError(f"--from {args.source}: no fp32 results in it (run bench-gemm --random with fp32)")
        return df
    out = os.path.join(args.out, "bench")
    df = run_bench(BR.make_jobs(shapes, ["fp32"]), out, "bench-gemm-random", workers=args.workers,
                   timeout=args.timeout, progress=not args.quiet, meta=meta)
    write_bench(df, out, BR.markdown(df))
    return df


def worst_fp32(df: pd.DataFrame, k: int) -> pd.DataFrame:
    """The ``k`` fp32 shapes whose choice (best_gemm) measured furthest below cuBLAS."""
    choices = df[(df["name"] == "best_gemm") & (df["precision"] == "fp32") & df["pct_cublas"].notna()]
    return choices.nsmallest(k, "pct_cublas")


def tune_shape(workload: str, db: str, args) -> dict:
    """``schedlab tune --time-limit`` on one shape, as its own process; its wall time from outside."""
    cmd = [sys.executable, "-m", "scripts.schedlab", "tune", "--workload", workload, "--db", db, "--time-limit",
           f"{args.time_limit:g}", "--reselect", str(args.reselect), "--quiet"]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=os.getcwd(), capture_output=True, text=True,
                              timeout=args.time_limit + 120, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)})
        code, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        code, err = None, f"killed {args.time_limit + 120:g} s after it started: {e.stderr or ''}"
    wall = time.time() - t0
    return {"code": code, "wall_s": wall, "error": "" if code == 0 else str(err).strip().splitlines()[-1:] or [""]}


def shape_row(bench_row, workload: str, db: str, ran: dict, sms: int) -> dict:
    """One shape's figures: the benchmark's, and the tuning command's (its directory)."""
    def load(name):
        try:
            with open(os.path.join(db, name)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    compared = load(f"dispatcher_{slug(workload)}.json")
    summary = load("last_summary.json")
    runs = summary.get("runs") or []
    best_gemm, tuned, cublas = (compared.get(k) or {} for k in ("best_gemm", "tuned_gemm", "cublas"))
    wl = parse_workload(workload)
    error = ran["error"][0] if isinstance(ran["error"], list) and ran["error"] else ran["error"]
    return {"workload": workload, "shape": f"{wl.M}x{wl.N}x{wl.K}", "class": ", ".join(BR.shape_classes(wl, sms)),
            "choice": bench_row.get("chosen"), "bench_pct_cublas": bench_row.get("pct_cublas"),
            "dispatcher_ms": best_gemm.get("time_ms"), "dispatcher_pct_cublas": best_gemm.get("pct_cublas"),
            "tuned_ms": tuned.get("time_ms"), "tuned_pct_cublas": tuned.get("pct_cublas"),
            "tuned_rel_error": tuned.get("rel_error"), "cublas_ms": cublas.get("time_ms"),
            "tuned_status": tuned.get("status") or "not timed", "tuned_from": tuned.get("run"),
            "wall_s": ran["wall_s"], "command_s": (summary.get("command") or {}).get("elapsed_s"),
            "trials": sum(r.get("trials", 0) for r in runs), "exit": ran["code"], "error": error,
            "steps": (summary.get("command") or {}).get("steps"), "db": db}


def table(rows: list[dict], limit: float) -> pd.DataFrame:
    return pd.DataFrame([{
        "shape": r["shape"], "class": r["class"], "bench: best_gemm % cuBLAS": T.fmt(r["bench_pct_cublas"], ".1f"),
        "best_gemm % cuBLAS": T.fmt(r["dispatcher_pct_cublas"], ".1f"), "tuned % cuBLAS": T.fmt(r["tuned_pct_cublas"], ".1f"),
        "tuned / best_gemm": (f"{r['dispatcher_ms'] / r['tuned_ms']:.2f}×" if r["dispatcher_ms"] and r["tuned_ms"] else ""),
        "wall (s)": f"{r['wall_s']:.0f}" + (" (over)" if r["wall_s"] > limit else ""), "trials": r["trials"],
        "status": r["tuned_status"] if r["exit"] == 0 else f"exit {r['exit']}: {str(r['error'])[:80]}".replace("|", "/")}
        for r in rows])


def summary_lines(rows: list[dict], limit: float) -> list[str]:
    pct = [r["tuned_pct_cublas"] for r in rows if r["tuned_pct_cublas"]]
    before = [r["dispatcher_pct_cublas"] for r in rows if r["dispatcher_pct_cublas"]]
    geo = (lambda xs: float(np.exp(np.mean(np.log(xs)))) if xs else math.nan)
    over = sum(r["wall_s"] > limit for r in rows)
    return [f"- {sum(p >= TARGET_PCT for p in pct)} of {len(rows)} shapes tuned to ≥ {TARGET_PCT:g}% of cuBLAS "
            f"(geometric mean {T.fmt(geo(pct), '.1f')}%, from the dispatcher's {T.fmt(geo(before), '.1f')}% in the same "
            "harness runs)",
            f"- wall time per shape: at most {max((r['wall_s'] for r in rows), default=0):.0f} s for a limit of "
            f"{limit:g} s ({over} over it)"]


def markdown(info: dict, rows: list[dict]) -> str:
    prov, limit = info["provenance"], info["time_limit_s"]
    return "\n".join([
        f"# Tuning the dispatcher's worst fp32 shapes: {prov['gpu']}", "",
        f"{prov['gpu']} · TVM {prov['tvm']} · {prov['commit']} · {prov['date']}", "",
        f"The draw of `bench-gemm --random {info['random']} --seed {info['seed']}` ({info['bench']}); its "
        f"{len(rows)} fp32 shapes where best_gemm measured furthest below cuBLAS, each tuned by `schedlab tune "
        f"--time-limit {limit:g} --reselect {info['reselect']}` (the dispatch space; the whole command within the "
        "limit, wall time measured from outside). best_gemm, the tuned best and cuBLAS are timed side by side in "
        "schedlab run's harness by the tuning command (isolated builds, float64 check, L2 emptied before each timed "
        "run); the benchmark's column is from the draw's own run.", "",
        *summary_lines(rows, limit), "", T.markdown_table(table(rows, limit))])


def parse_ranks(text: str | None, worst: int) -> set[int]:
    """``--ranks 1,3``: which of the ``worst`` shapes to tune (1: the furthest from cuBLAS); all by default."""
    if not text:
        return set(range(1, worst + 1))
    try:
        ranks = {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise ValueError(f"--ranks takes comma-separated whole numbers, got {text!r}") from None
    if not ranks or not all(1 <= r <= worst for r in ranks):
        raise ValueError(f"--ranks {text}: each between 1 and --worst {worst}")
    return ranks


def earlier_rows(path: str, info: dict) -> list[dict]:
    """The shapes an earlier ``tune-random`` of the same draw, limit and reselection wrote to ``path``
    (``--ranks`` splits the experiment into several commands writing one table)."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return []
    same = all(old.get(k) == info[k] for k in ("random", "seed", "time_limit_s", "reselect"))
    return list(old.get("shapes") or []) if same else []


def command(args) -> int:
    """``schedlab tune-random`` (``args``: the command's options)."""
    if not cuda_available():
        raise ValueError("tune-random times and tunes kernels on a GPU, and there is no CUDA GPU here")
    for name, value in (("--random", args.random), ("--worst", args.worst)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise ValueError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    parse_ranks(args.ranks, args.worst)  # a malformed --ranks: its one-line error before anything runs
    ensure_out_dir(args.out)
    shapes, redrawn = BR.draw_shapes(args.random, args.seed, memory_bytes=int(tvm.cuda(0).total_global_memory))
    meta = {"seed": args.seed, "redrawn": redrawn, "shapes_drawn": BR.shape_properties(shapes),
            "shapes": [list(s) for s in shapes]}
    df = draw_results(args, shapes, meta)
    sms = int((df.attrs.get("gpu_spec") or {}).get("sms") or 132)
    info = {"kind": "tune-random", "provenance": provenance(), "random": args.random, "seed": args.seed,
            "worst": args.worst, "time_limit_s": args.time_limit, "reselect": args.reselect,
            "bench": args.source or os.path.join(args.out, "bench")}
    ranks = parse_ranks(args.ranks, args.worst)
    path = os.path.join(args.out, "tune_random.json")
    rows = earlier_rows(path, info)
    for n, (_, r) in enumerate(worst_fp32(df, args.worst).iterrows(), 1):
        if n not in ranks:
            continue
        workload = r["workload"]
        db = os.path.join(args.out, "tune", slug(workload.split(":", 1)[1]))
        if not args.quiet:
            print(f"[{n}/{args.worst}] tuning {workload} (best_gemm at {r['pct_cublas']:.1f}% of cuBLAS) for "
                  f"{args.time_limit:g} s", file=sys.stderr, flush=True)
        ran = tune_shape(workload, db, args)
        rows = [x for x in rows if x["workload"] != workload] + [dict(shape_row(r.to_dict(), workload, db, ran, sms),
                                                                      rank=n)]
        rows.sort(key=lambda x: x.get("rank", 0))
        with open(path, "w") as f:  # after every shape: a run cut short keeps them
            json.dump({**info, "complete": False, "shapes": rows}, f, indent=1, default=str)
    md = markdown(info, rows)
    with open(path, "w") as f:
        json.dump({**info, "complete": True, "shapes": rows}, f, indent=1, default=str)
    with open(os.path.join(args.out, "tune_random.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0
