"""Tuned configurations timed in ``schedlab run``'s harness: the hand comparison (tuned_gemm beside
the hand-written steps, cuBLAS and dlight) and the reselection (each run's fastest configurations
timed again, the fastest there kept as tuned_gemm); then the tuning report
(:mod:`reports.views.tuning_report`) with what was timed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from schedules import parse_workload
from tuning import records as R
from tuning.tuner import make_target, save_best

from ..engine.build import cuda_available
from ..engine.harness import run_jobs
from ..engine.provenance import provenance, slug
from ..engine.results import frame, missing, write_results
from ..views import tuning_report
from .bench import applies
from .run import run

# the classic steps the classic space tiles, and the fast hand-written ones the fast space spans
HAND_SCHEDULES = ("block_tiling_gemm", "thread_tiling_gemm", "double_buffer_gemm",
                  "warp_tiled_gemm", "split_k_gemm", "rasterized_gemm", "best_gemm")


def hand_comparison(db: str, workload: str, out_dir: str, timeout: float = 300.0, until: float | None = None) -> dict:
    """Time tuned_gemm, the fast hand schedules, cuBLAS and dlight in schedlab run's harness.
    ``until``: the moment it is all over by (a time limit): the same harness, what was not timed by
    then marked ``skipped``, and no run folder of its own."""
    if until is None:
        df = run([workload], ["tuned_gemm", *HAND_SCHEDULES], ["cublas", "tvm_dlight"],
                 out_dir=os.path.join(out_dir, "hand"), timeout=timeout, progress=False, report=False,
                 params={"tuned_gemm": {"source": os.path.abspath(db)}})
    else:
        jobs = [{"workload": workload, "name": "tuned_gemm", "params": {"source": os.path.abspath(db)}},
                *({"workload": workload, "name": n} for n in HAND_SCHEDULES if applies(n, workload)),
                {"workload": workload, "name": "cublas"}, {"workload": workload, "name": "tvm_dlight"}]
        df = frame(run_jobs(jobs, timeout=timeout, until=until), {"provenance": provenance(), "complete": True})
        write_results(df, os.path.join(out_dir, "hand"))  # where the run's own folder would be
    return {"provenance": df.attrs["provenance"], "rows": [{k: v for k, v in r.items() if not missing(v)}
                                                           for r in df.to_dict("records")]}


SEEDED_SPACES = ("fast", "tiled")  # the spaces whose runs measure hand-written configurations first


def seed_keys(rows: list[dict]) -> set:
    """The hand-written configurations the runs started from: the rows marked ``seed``; in logs from
    before the mark, trial 1 of each run over a seeded space (seeds are measured first)."""
    if any("seed" in r for r in rows):
        return {r["key"] for r in rows if r.get("seed")}
    return {r["key"] for r in rows if r.get("trial") == 1 and r.get("space") in SEEDED_SPACES
            and r.get("status") == "ok"}


def structure(row: dict):
    """What makes a trial's configuration another kernel for the reselection: its knobs without the
    sampled unroll depth (the same tiles, split and ring at another unroll are near-twins: a dispatch
    run on 121 × 206 × 4260 had its three fastest trials one configuration at three depths, all three
    slower in the harness than the dispatcher's own choice); its key where it records no knobs."""
    knobs = row.get("knobs")
    if not knobs:
        return row["key"]
    return tuple(sorted((name, str(value)) for name, value in knobs.items() if name != "unroll"))


def reselect_candidates(rows: list[dict], k: int, seeds: int | None = None) -> list[dict]:
    """Each run's ``k`` fastest distinct valid configurations (distinct in :func:`structure`: the
    fastest unroll depth of each), fastest first within a run, then the
    runs' seeds (the hand-written configurations the search started from, timed again whatever the
    tuner's timer said: the final choice is then never slower in the harness than the hand schedule
    the search started from; ``seeds``: only each run's first so many, the first being the
    dispatcher's own choice). dlight, one fixed schedule, is timed in the hand comparison instead; a
    configuration two runs share is taken once."""
    bad = {r["key"] for r in rows if r.get("status") == "verify" and not r.get("passed")}
    seed_set = seed_keys(rows)
    ok = sorted((r for r in rows if r.get("status") == "ok" and r.get("trace") and r.get("key") not in bad
                 and r.get("run") != "dlight"), key=lambda r: r["time_ms"])
    if seeds is not None:  # each run's first ``seeds`` seeds, in the order they were measured
        first: dict[str, list] = {}
        for r in sorted(ok, key=lambda r: r.get("trial", 0)):
            if r["key"] in seed_set and r["key"] not in first.setdefault(r["run"], []):
                first[r["run"]].append(r["key"])
        seed_set = {key for keys in first.values() for key in keys[:seeds]}
    picked, seen, shapes, per_run = [], set(), set(), {}
    for r in ok:
        if r["key"] in seen or (r["run"], structure(r)) in shapes or per_run.get(r["run"], 0) >= k:
            continue
        seen.add(r["key"])
        shapes.add((r["run"], structure(r)))
        per_run[r["run"]] = per_run.get(r["run"], 0) + 1
        picked.append(dict(r, seed=r["key"] in seed_set))
    for r in ok:
        if r["key"] in seed_set and r["key"] not in seen:
            seen.add(r["key"])
            picked.append(dict(r, seed=True))
    return picked


def reselect(db: str, workload: str, out_dir: str, k: int = 5, timeout: float = 300.0) -> list[dict]:
    """Time each run's ``k`` fastest distinct configurations (by the tuner's timer) and the hand
    seeds (:func:`reselect_candidates`) in ``schedlab run``'s harness (L2 emptied before every run by
    reading, CUDA events, full float64 check), and save the fastest there as the workload's best,
    the one ``tuned_gemm`` replays. The tuner's timer and the harness can order close
    configurations differently (a warm tuner keeps the inputs in L2; the cold one flushes by
    copying), so the final choice is made where the report measures, and every space (fast,
    MetaSchedule's default, classic) is compared there on the same footing."""
    if not cuda_available():
        raise RuntimeError("--reselect times configurations on the GPU, and there is no CUDA GPU here")
    top = reselect_candidates(R.trials(db, workload), k)
    return _time_candidates(db, workload, top, k, [], timeout, None)[0]


def _time_candidates(db, workload, top, k, extra, timeout, until):
    """Time the reselection's candidates ``top`` (and the jobs ``extra`` before them) in one run of the
    harness; keep the fastest candidate there as the workload's best. Returns (the candidates' rows,
    the extra jobs' rows)."""
    wl = parse_workload(workload)
    target = make_target("cuda")
    files = {rank: save_best(tempfile.mkdtemp(prefix="reselect"), wl, target, row["run"], row.get("space"), row)
             for rank, row in enumerate(top, 1)}
    jobs = list(extra) + [{"workload": workload, "name": "tuned_gemm", "params": {"source": files[rank]}}
                          for rank in files]
    measured = run_jobs(jobs, timeout=timeout, until=until) if jobs else []
    extra_rows, measured = measured[:len(extra)], measured[len(extra):]
    results = [{"rank": rank, "run": row["run"], "key": row["key"], "knobs": row.get("knobs"),
                "seed": bool(row.get("seed")), "tuner_ms": row["time_ms"], "harness_ms": res.get("time_ms"),
                "status": res.get("status"), "rel_error": res.get("rel_error"), "error": res.get("error")}
               for (rank, row), res in zip(enumerate(top, 1), measured)]
    ok = [r for r in results if r["status"] == "ok" and r["harness_ms"]]
    if ok:
        chosen = min(ok, key=lambda r: r["harness_ms"])
        with open(files[chosen["rank"]]) as f:
            best = json.load(f)
        best.update(rel_error=chosen["rel_error"], harness_ms=chosen["harness_ms"],
                    selected_by=f"fastest in schedlab run's harness of {len(top)} configurations "
                    f"(each run's top {k} by the tuner's timer, and the hand seeds)")
        R.save_json(R.best_path(db, workload), best)
    for path in files.values():
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    if top:
        R.save_json(os.path.join(db, f"reselect_{slug(workload)}.json"),
                    {"workload": workload, "per_run": k, "candidates": results})
    return results, extra_rows


DISPATCHER_FILE = "dispatcher_{}.json"


DISPATCHER_STEP = {"float32": "best_gemm", "float16": "best_fp16_gemm", "bfloat16": "best_fp16_gemm"}


def dispatcher_jobs(workload: str) -> list[dict]:
    """The dispatcher's choice (best_gemm; best_fp16_gemm for 16-bit inputs) and cuBLAS of the same
    input type (fp32: TF32 off), as harness jobs."""
    step = DISPATCHER_STEP.get(parse_workload(workload).dtype, "best_gemm")
    return [{"workload": workload, "name": step}, {"workload": workload, "name": "cublas"}]


def dispatcher_comparison(db: str, workload: str, k: int = 0, until: float | None = None,
                          timeout: float = 300.0) -> dict:
    """Time the dispatcher's choice (best_gemm), cuBLAS and the tuned best side by side in ``schedlab
    run``'s harness (isolated builds, the float64 check, L2 emptied before every timed run), in one
    run of it. With ``k``, the tuned best is chosen there (:func:`reselect_candidates`: each run's
    ``k`` fastest by the tuner's timer and its first seed, the dispatcher's own choice), else it is
    the saved best (tuned_gemm). ``until``: the moment it is all over by (the command's time limit;
    what was not timed by then says so). Saved as ``DIR/dispatcher_<workload>.json`` for the report."""
    if not cuda_available():
        raise RuntimeError("the comparison with the dispatcher times kernels on the GPU, and there is no CUDA GPU here")
    extra = dispatcher_jobs(workload)
    if k:
        top = reselect_candidates(R.trials(db, workload), k, seeds=1)
        results, (best, cublas) = _time_candidates(db, workload, top, k, extra, timeout, until)
        ok = [r for r in results if r["status"] == "ok" and r["harness_ms"]]
        chosen = min(ok, key=lambda r: r["harness_ms"]) if ok else None
        tuned = ({"status": "ok", "time_ms": chosen["harness_ms"], "rel_error": chosen["rel_error"], "run": chosen["run"],
                  "key": chosen["key"], "knobs": chosen["knobs"]} if chosen else
                 {"status": (results[0]["status"] if results else "missing"),
                  "error": (results[0].get("error") if results else "no valid configuration to time")})
    else:
        jobs = extra + [{"workload": workload, "name": "tuned_gemm", "params": {"source": os.path.abspath(db)}}]
        best, cublas, tuned = run_jobs(jobs, timeout=timeout, until=until)
    keep = ("name", "status", "time_ms", "rel_error", "error", "chosen", "run", "key", "knobs", "gpu")
    rows = {name: {key: row.get(key) for key in keep if not missing(row.get(key))}
            for name, row in (("best_gemm", best), ("cublas", cublas), ("tuned_gemm", tuned))}
    cub = rows["cublas"].get("time_ms") if rows["cublas"].get("status") == "ok" else None
    for row in rows.values():
        if cub and row.get("status") == "ok" and row.get("time_ms"):
            row["pct_cublas"] = 100.0 * cub / row["time_ms"]
    out = {"workload": workload, "selected_from": k, "provenance": provenance(), **rows}
    R.save_json(os.path.join(db, DISPATCHER_FILE.format(slug(workload))), out)
    return out


def write_report(db: str, workload: str, out_dir: str, hand: bool = False, until: float | None = None,
                 command: dict | None = None) -> dict:
    """The tuning report of ``db`` (:func:`reports.views.tuning_report.write_report`); ``hand``: with
    tuned_gemm timed beside the hand schedules first (:func:`hand_comparison`, needs a GPU; ``until``:
    over by then). ``command``: what the tuning command spent and skipped (its time limit)."""
    timed = None
    if hand:
        try:
            timed = hand_comparison(db, workload, out_dir, until=until)
        except RuntimeError as e:  # the harness's workers did not start before the time limit: the report without it
            if until is None:
                raise
            command = dict(command or {}, steps={**(command or {}).get("steps", {}), "hand": f"failed: {e}"})
    return tuning_report.write_report(db, workload, out_dir, hand=timed, command=command)
