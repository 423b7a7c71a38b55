"""``report.html``: the results of a run (or of a tuning directory) as one self-contained page
(:mod:`reports.views.html`): provenance, the step tables (sortable), the charts, and per schedule its
parameters, compiler resources and IR at every stage with a diff against the previous step of its
ladder. ``schedlab run`` and ``schedlab tune`` write it at the end; ``schedlab report DIR`` writes it
for any results directory, rebuilding the IR (no GPU needed) where the directory holds none (the
published results keep only the figures), and writes into a published folder only when told to."""

from __future__ import annotations

import json
import os

import pandas as pd

from schedules import ScheduleParamError, get
from schedules.names import slug as _id_slug
from tuning import records as Rec

from ..engine import results as R
from ..engine.files import OutputError, atomic_write, ensure_out_dir
from ..engine.harness import build_kernel
from ..engine.provenance import provenance, slug
from .html import render_page, write_page
from .tables import knobs, not_built_line, ordered, params_text, time_cell
from .tuning_report import dispatcher_move, harness_bests, load_runs, summarize, write_report

PUBLISHED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")  # reports/results
STAGE_FILES = {"scheduled": "scheduled", "lowered": "lowered", "cuda": "cuda", "ptx": "ptx"}


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _stages_from_files(files, folder: str) -> dict:
    """A row's IR texts from its ``files`` (paths relative to the results folder)."""
    if not isinstance(files, dict):
        return {}
    out = {}
    for stage in STAGE_FILES:
        text = _read(os.path.join(folder, files[stage])) if files.get(stage) else None
        if text is not None:
            out[stage] = text
    return out


def _rebuild(row) -> dict:
    """The IR of a row's schedule, built again here (same configuration, the run's architecture and
    GPU: a best_* step chooses as it chose in the run)."""
    job = {"workload": row["workload"], "name": row["name"], "params": row.get("params") or {},
           "arch": row.get("_arch"), "gpu": row.get("_gpu")}
    params = job["params"]
    if isinstance(params, dict):  # the full configuration was saved: pass only what differs from the defaults
        defaults = get(row["name"]).config().__dict__
        job["params"] = {k: v for k, v in params.items() if defaults.get(k) != v}
    _, built = build_kernel(job)
    return {"scheduled": built.scheduled, "lowered": built.lowered, "cuda": built.device.cuda, "ptx": built.device.ptx}


def _bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def run_page(df: pd.DataFrame, out_dir: str, rebuild: bool = True) -> dict:
    """The page dict (see reports.views.html.write_page) of a run's results."""
    meta = df.attrs
    prov = meta.get("provenance", {})
    notes = []
    c = meta.get("ceilings") or {}
    if c.get("copy_gbps"):
        notes.append(f"Measured ceilings: copy bandwidth {c['copy_gbps']:.0f} GB/s, cuBLAS 8192³ "
                     f"{c['fp32_tflops']:.1f} TFLOP/s fp32 (TF32 off), {c['fp16_tflops']:.1f} TFLOP/s fp16.")
    if "timer" in df and df["timer"].notna().any():
        notes.append(f"GPU timer: {df.loc[df['timer'].notna(), 'timer'].iloc[0]}; median of the runs. Every row was "
                     "checked against a float64 product of fresh random inputs before it was timed.")
    if meta.get("complete") is False:
        notes.append("Partial: the run was cut short; the rows are those it finished.")
    if not meta.get("gpu", True):
        notes.append("No GPU here: every schedule was built and compiled; nothing was timed.")
    if meta.get("not_built"):
        notes.append(not_built_line(meta))
    tables, schedules = [], []
    for wl_text, group in df.groupby("workload", sort=False):
        rate = "TFLOP/s" if wl_text.startswith("gemm") else "GB/s"
        cols = ["step", "schedule", "time (ms)", rate, "× first", "× prev", "% cuBLAS", "rel. error", "threads/block",
                "registers", "smem (B)", "spills (B)", "parameters"]
        rows, keys = [], []
        previous = None
        for _, r in ordered(group).iterrows():
            t, thr, _ = time_cell(r)
            sched = r.get("role") == "schedule"
            key = f"{wl_text}/{r['name']}" if sched else None
            rows.append([r.get("ladder") if sched and isinstance(r.get("ladder"), str) else "", r["name"], t, thr,
                         _num(r.get("speedup_vs_first")), _num(r.get("speedup_vs_prev")), _num(r.get("pct_cublas")),
                         _num(r.get("rel_error")), _num(r.get("threads_per_block")), _num(r.get("registers")),
                         _num(r.get("shared_bytes")), _num(r.get("spill_bytes")), params_text(r.get("params"))])
            if not sched:
                keys.append(None)
                continue
            stages = _stages_from_files(r.get("files"), out_dir)
            if not stages and rebuild and r.get("status") in ("ok", "no-gpu", "wrong"):
                try:
                    stages = _rebuild({**r.to_dict(), "_arch": meta.get("arch"), "_gpu": meta.get("gpu_spec")})
                except (ScheduleParamError, Exception):  # noqa: BLE001 - the page says it has no IR
                    stages = {}
            keys.append(key if stages else None)
            if stages:
                schedules.append({"id": key, "workload": wl_text, "name": r["name"], "kind": wl_text.split(":")[0],
                                  "step": str(r.get("ladder") or ""), "summary": _summary(r["name"]),
                                  "params": r.get("params") if isinstance(r.get("params"), dict) else {},
                                  "resources": {k: _plain(r.get(k)) for k in ("registers", "shared_bytes", "spill_bytes",
                                                                              "threads_per_block", "grid", "kernels")
                                                if not R.missing(r.get(k)) if k in r},
                                  "stages": stages, "previous": previous})
                previous = key
        tables.append({"id": _slug(wl_text), "caption": wl_text, "columns": cols, "rows": rows, "row_schedule": keys})
        left = (meta.get("left_out") or {}).get(wl_text)
        if left:
            notes.append(f"{wl_text}: left out (they do not take its input type, operand layout or batch): "
                         f"{', '.join(left)}.")
    charts = [{"caption": cap, "png": _bytes(os.path.join(out_dir, f))} for f, cap in
              (("time_per_step.png", "Time per step (log scale)"), ("roofline.png", "Roofline of the measured ceilings"))]
    return {"title": f"schedlab run · {prov.get('gpu')} · {prov.get('date')}", "provenance": prov, "notes": notes,
            "tables": tables, "charts": [c for c in charts if c["png"]], "schedules": schedules}


def write_run_report(df: pd.DataFrame, out_dir: str, rebuild: bool = True) -> str:
    return write_page(run_page(df, out_dir, rebuild), os.path.join(out_dir, "report.html"))


def tuning_page(db: str, workload: str, out_dir: str) -> dict:
    """The page of a tuning directory: convergence chart, runs, best configuration, top trials and
    the final choice in the harness."""
    runs = load_runs(db, workload)
    if not runs:
        raise R.ResultsError(f"{db}: no tuning trials for {workload}")
    prov = {}
    measured_on = os.path.join(db, "provenance.json")
    if os.path.exists(measured_on):
        with open(measured_on) as f:
            prov = json.load(f)
    prov = {**provenance(), **{k: v for k, v in prov.items() if k in ("gpu", "date", "host", "timer")}}
    summaries = {run: summarize(rows) for run, rows in runs.items()}
    table_runs = [[run, s["trials"], s["valid"], s["failed"], _num(s["trials_per_minute"]), _num(s["best_gflops"]),
                   _num(s["best_ms"]), s["first_trial_at_best"], knobs(s["best_knobs"])] for run, s in summaries.items()]
    ok = sorted((r for rows in runs.values() for r in rows if r.get("status") == "ok" and not r.get("reused")),
                key=lambda r: -r["gflops"])[:20]
    top = [[i + 1, r["run"], _num(r["time_ms"]), _num(r["gflops"]), knobs(r.get("knobs"))] for i, r in enumerate(ok)]
    tables = [{"id": "runs", "caption": "Runs", "columns": ["run", "trials", "valid", "failed", "trials/min",
                                                              "best GFLOP/s", "best ms", "at trial", "best configuration"],
               "rows": table_runs, "row_schedule": [None] * len(table_runs)},
              {"id": "top", "caption": "Top configurations (the tuner's timer)",
               "columns": ["#", "run", "ms", "GFLOP/s", "configuration"], "rows": top, "row_schedule": [None] * len(top)}]
    notes = []
    best_file = Rec.best_path(db, workload)
    if os.path.exists(best_file):
        with open(best_file) as f:
            best = json.load(f)
        notes.append(f"Best configuration (tuned_gemm): {best['run']}, {best['time_ms']:.4g} ms, {best['gflops']:.0f} "
                     f"GFLOP/s; {knobs(best.get('knobs'))}"
                     + (f"; chosen as the {best['selected_by']} ({best['harness_ms']:.4g} ms there)"
                        if best.get("selected_by") else ""))
    reselect_file = os.path.join(db, f"reselect_{slug(workload)}.json")
    if os.path.exists(reselect_file):
        with open(reselect_file) as f:
            cands = json.load(f)["candidates"]
        bests = harness_bests(cands)
        rows = [[run, _num(r["harness_ms"]), knobs(r.get("knobs")), "hand seed" if r.get("seed") else ""]
                for run, r in sorted(bests.items(), key=lambda kv: kv[1]["harness_ms"])]
        tables.append({"id": "final", "caption": "Final choice in the harness (each run's best there)",
                       "columns": ["run", "harness ms", "configuration", ""], "rows": rows,
                       "row_schedule": [None] * len(rows)})
    move = dispatcher_move(db, workload, runs)
    moved = [[t["run"], "the tuner's", _num(t["dispatcher_ms"]), "", _num(t["tuned_ms"]), "", f"{t['speedup']:.2f}×",
              t["trials"], _num(t["search_s"])] for t in move["tuner"]]
    h = move["harness"]
    if h:
        moved.append(["best_gemm → tuned_gemm", "schedlab run's harness", _num(h["dispatcher_ms"]),
                      _num(h["dispatcher_pct_cublas"]), _num(h["tuned_ms"]), _num(h["tuned_pct_cublas"]),
                      f"{h['speedup']:.2f}×" if h.get("speedup") else "", "", ""])
    if moved:
        tables.insert(1, {"id": "dispatcher", "caption": "How far tuning moved the dispatcher's choice",
                          "columns": ["run", "timer", "dispatcher's choice ms", "% cuBLAS", "tuned ms", "% cuBLAS",
                                      "speedup", "trials", "search s"], "rows": moved,
                          "row_schedule": [None] * len(moved)})
    chart = os.path.join(out_dir, f"convergence_{slug(workload)}.png")
    charts = [{"caption": "Convergence: best GFLOP/s so far against trials", "png": _bytes(chart)}]
    return {"title": f"schedlab tune · {workload} · {prov.get('gpu')}", "provenance": prov, "notes": notes,
            "tables": tables, "charts": [c for c in charts if c["png"]], "schedules": []}


def write_tuning_page(db: str, workload: str, out_dir: str) -> str:
    return write_page(tuning_page(db, workload, out_dir), os.path.join(out_dir, "report.html"))


def published(directory: str) -> bool:
    """Whether ``directory`` is a published results folder: one under the lab's ``reports/results/``
    (committed, its figures and page those of the commit it names)."""
    root, where = os.path.realpath(PUBLISHED), os.path.realpath(directory)
    return where == root or where.startswith(root + os.sep)


def report(directory: str, out: str | None = None, force: bool = False) -> tuple[str, bool]:
    """``schedlab report DIR``: the page of a run's results directory or of a tuning directory, in
    ``DIR`` (or in ``out``). ``(path, written)``: a page identical to the one already there is left
    untouched (``written`` False); any other is replaced whole. A published folder (:func:`published`)
    is not written into unless ``force``. Raises ResultsError (one line) for a directory with nothing
    to report or a corrupt file, OutputError for a published destination without ``force``."""
    if not os.path.isdir(directory):
        raise R.ResultsError(f"{directory}: not a directory")
    dest = out or directory
    if published(dest) and not force:
        raise OutputError(f"{dest} is a published results folder (under reports/results/): write the page "
                          "elsewhere with --out DIR, or replace its files there with --force")
    if out:
        ensure_out_dir(out)
    if os.path.exists(os.path.join(directory, "trials.jsonl")):
        workloads = sorted({r["workload"] for r in Rec.trials(directory) if r.get("workload")})
        if not workloads:
            raise R.ResultsError(f"{directory}: its trials.jsonl holds no trials")
        write_report(directory, workloads[0], dest)
        page = tuning_page(directory, workloads[0], dest)
    else:
        df = R.load_results(directory)
        try:
            page = run_page(df, directory)
        except KeyError as e:
            raise R.ResultsError(f"{directory}: results without the column {e}") from None
    path = os.path.join(dest, "report.html")
    doc = render_page(page).encode()
    if _bytes(path) == doc:  # the same bytes already there: untouched
        return path, False
    atomic_write(path, doc)
    return path, True


def _summary(name):
    try:
        return get(name).summary
    except Exception:  # noqa: BLE001
        return ""


def _num(v):
    if R.missing(v):
        return None
    return float(v) if isinstance(v, float) else v


def _plain(v):
    if isinstance(v, (list, tuple)):
        return "×".join(str(x) for x in v)
    return _num(v)


def _slug(text):
    """A table's HTML id: every character other than a letter or a digit a hyphen."""
    return _id_slug(text, sep="-", squeeze=False)
