"""The tuning report of a tuning directory: convergence chart (best throughput so far against
trials, one line per run = space/strategy), the runs' summary (trials, failures, trials per minute,
best), the top configurations, failure reasons, the final choice in the harness, and optionally the
tuned schedule timed beside the hand-written steps, cuBLAS and dlight in ``schedlab run``'s harness
(L2 flushed, CUDA events; timed by :mod:`reports.experiments.tuned`).
"""

from __future__ import annotations

import json
import os
from collections import Counter

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from schedules import parse_workload  # noqa: E402
from tuning import records as R  # noqa: E402

from ..engine.provenance import provenance, slug  # noqa: E402
from .tables import fmt, knobs, markdown_table  # noqa: E402


def load_runs(db: str, workload: str) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for r in R.trials(db, workload):
        if r.get("status") == "verify":
            continue
        runs.setdefault(r["run"], []).append(r)
    for rows in runs.values():
        rows.sort(key=lambda r: r.get("trial", 0))
    return runs


def convergence(rows: list[dict]) -> list[tuple[int, float]]:
    """(trial, best GFLOP/s so far) for each trial of a run (0 until the first valid one)."""
    best, out = 0.0, []
    for n, r in enumerate(rows, 1):
        if r.get("status") == "ok":
            best = max(best, r["gflops"])
        out.append((n, best))
    return out


def summarize(rows: list[dict]) -> dict:
    ok = [r for r in rows if r.get("status") == "ok"]
    best = max(ok, key=lambda r: r["gflops"]) if ok else None
    measured = [r for r in rows if not r.get("reused")]
    elapsed = max((r.get("elapsed_s", 0.0) for r in rows), default=0.0)
    return {"trials": len(rows), "valid": len(ok), "failed": len(rows) - len(ok),
            "measured": len(measured), "elapsed_s": elapsed,
            "trials_per_minute": 60.0 * len(measured) / elapsed if elapsed > 0 else None,
            "best_gflops": best["gflops"] if best else None, "best_ms": best["time_ms"] if best else None,
            "best_knobs": best["knobs"] if best else None,
            "first_trial_at_best": next((n for n, g in convergence(rows) if best and g >= best["gflops"]), None)}


CHART_LINES = ("tuned_gemm", "best_gemm", "cublas")  # harness results drawn across the convergence chart


def convergence_chart(runs: dict, path: str, title: str, lines: dict | None = None):
    """Best GFLOP/s so far against trials, a line per run; ``lines``: name -> GFLOP/s drawn across
    (dlight, and the chosen schedules timed in the harness). The legend sits beside the plot."""
    fig, ax = plt.subplots(figsize=(8.6, 4.2))
    for run, rows in runs.items():
        if run == "dlight" or len(rows) < 2:
            continue
        pts = convergence(rows)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=run, lw=1.4)
    styles = iter(["--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1))])
    for name, gflops in (lines or {}).items():
        if gflops:
            ax.axhline(gflops, ls=next(styles, "--"), lw=1, color="gray" if "dlight" in name else None,
                       label=f"{name} ({gflops:.0f})")
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s so far")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def trials_frame(runs: dict) -> pd.DataFrame:
    """Every trial of every run (one row each), as a DataFrame."""
    rows = [r for rs in runs.values() for r in rs]
    return pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=["run", "status", "key"])


def runs_frame(summaries: dict) -> pd.DataFrame:
    """One row per run: trials, failures, trials per minute, the best."""
    return pd.DataFrame([{"run": run, **s, "best configuration": knobs(s["best_knobs"])}
                         for run, s in summaries.items()]).drop(columns=["best_knobs"], errors="ignore")


def top_frame(runs: dict, n: int = 10) -> pd.DataFrame:
    """The ``n`` fastest distinct configurations measured (not answered from the log)."""
    df = trials_frame(runs)
    if df.empty or "gflops" not in df:
        return pd.DataFrame(columns=["#", "run", "time (ms)", "GFLOP/s", "configuration"])
    ok = df[(df["status"] == "ok") & ~df.get("reused", pd.Series(False, index=df.index)).fillna(False).astype(bool)]
    top = ok.sort_values("gflops", ascending=False).drop_duplicates("key").head(n)
    return pd.DataFrame({"#": range(1, len(top) + 1), "run": top["run"].to_numpy(),
                         "time (ms)": top["time_ms"].map(lambda v: f"{v:.4g}").to_numpy(),
                         "GFLOP/s": top["gflops"].map(lambda v: f"{v:.0f}").to_numpy(),
                         "configuration": top["knobs"].map(knobs).to_numpy()})


def top_table(runs: dict, n: int = 10) -> list[str]:
    return [markdown_table(top_frame(runs, n))]


TIMER_TEXT = {
    "warm": "MetaSchedule's runner (time_evaluator, median of repeats of back-to-back runs, inputs L2-resident)",
    "cold": "the cold timer (time_evaluator, one run per timing, L2 flushed before each by a 256 MiB device "
            "copy, median of up to 20)",
}


DISPATCHER_SEEDED = ("dispatch", "fast")  # spaces whose first seed is the dispatcher's choice (best_gemm's)
DISPATCHER_FILE = "dispatcher_{}.json"  # the comparison in the harness (reports.experiments.tuned)


def dispatcher_move(db: str, workload: str, runs: dict) -> dict:
    """How far tuning moved the dispatcher's choice. ``tuner``: per run over a space seeded with it,
    the dispatcher's choice (the run's first seed, best_gemm's configuration) and the run's best,
    both in the tuner's timer, the ratio, the trials and the search's wall time. ``harness``: where
    the comparison ran (``DIR/dispatcher_<workload>.json``), best_gemm, the tuned best and cuBLAS
    timed side by side in schedlab run's harness, each as % of cuBLAS where cuBLAS was timed."""
    tuner = []
    for run, rows in runs.items():
        seeds = sorted((r for r in rows if r.get("seed") and r.get("status") == "ok"
                        and r.get("space") in DISPATCHER_SEEDED), key=lambda r: r.get("trial", 0))
        ok = [r for r in rows if r.get("status") == "ok"]
        if not seeds:
            continue
        start, best = seeds[0], min(ok, key=lambda r: r["time_ms"])
        tuner.append({"run": run, "dispatcher_ms": start["time_ms"], "tuned_ms": best["time_ms"],
                      "speedup": start["time_ms"] / best["time_ms"], "trials": len(rows),
                      "search_s": max((r.get("elapsed_s", 0.0) for r in rows), default=0.0),
                      "dispatcher_knobs": start.get("knobs"), "tuned_knobs": best.get("knobs"),
                      "tuned_trial": best.get("trial")})
    harness = None
    path = os.path.join(db, DISPATCHER_FILE.format(slug(workload)))
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        best_gemm, tuned, cublas = (saved.get(k) or {} for k in ("best_gemm", "tuned_gemm", "cublas"))
        harness = {"dispatcher_ms": best_gemm.get("time_ms"), "dispatcher_pct_cublas": best_gemm.get("pct_cublas"),
                   "dispatcher_status": best_gemm.get("status"), "chosen": best_gemm.get("chosen"),
                   "dispatcher_step": best_gemm.get("name") or "best_gemm",
                   "tuned_ms": tuned.get("time_ms"), "tuned_pct_cublas": tuned.get("pct_cublas"),
                   "tuned_status": tuned.get("status"), "cublas_ms": cublas.get("time_ms"),
                   "cublas_status": cublas.get("status"), "selected_from": saved.get("selected_from"),
                   "gpu": (saved.get("provenance") or {}).get("gpu"), "date": (saved.get("provenance") or {}).get("date")}
        if harness["dispatcher_ms"] and harness["tuned_ms"]:
            harness["speedup"] = harness["dispatcher_ms"] / harness["tuned_ms"]
    return {"tuner": tuner, "harness": harness}


def _ms(v) -> str:
    return fmt(v, ".4g") if v else ""


def dispatcher_lines(move: dict, command: dict | None = None) -> list[str]:
    """The report's section on how far tuning moved the dispatcher's choice (:func:`dispatcher_move`)."""
    if not move["tuner"] and not move["harness"]:
        return []
    out = ["## How far tuning moved the dispatcher's choice", ""]
    if move["tuner"]:
        out += ["In the tuner's timer (the dispatcher's choice is each run's first trial):", "",
                markdown_table(pd.DataFrame([{
                    "run": t["run"], "dispatcher's choice (ms)": _ms(t["dispatcher_ms"]), "tuned best (ms)": _ms(t["tuned_ms"]),
                    "speedup": f"{t['speedup']:.2f}×", "found at trial": fmt(t.get("tuned_trial"), ".0f"),
                    "trials": t["trials"], "search (s)": fmt(t["search_s"], ".0f"),
                    "tuned configuration": knobs(t.get("tuned_knobs") or {})} for t in move["tuner"]]))]
    h = move["harness"]
    if h:
        def cell(ms, pct, status):
            if not ms:
                return status or "not timed"
            return f"{ms:.4g} ms" + (f" ({pct:.1f}% of cuBLAS)" if pct else "")

        chosen = f" ({h['chosen']})" if h.get("chosen") else ""
        out += ["", f"In schedlab run's harness (isolated builds, float64 check, L2 emptied before each timed run; "
                f"{h.get('gpu') or '?'}, {h.get('date') or '?'}):", "",
                f"- the dispatcher's choice, {h['dispatcher_step']}{chosen}: "
                f"{cell(h['dispatcher_ms'], h['dispatcher_pct_cublas'], h['dispatcher_status'])}",
                f"- the tuned best, tuned_gemm" + (f" (the fastest there of the runs' top {h['selected_from']} and the "
                                                    "dispatcher's choice)" if h.get("selected_from") else "")
                + f": {cell(h['tuned_ms'], h['tuned_pct_cublas'], h['tuned_status'])}",
                f"- cuBLAS: {cell(h['cublas_ms'], None, h['cublas_status'])}"]
        if h.get("speedup"):
            out.append(f"- tuning moved it {h['speedup']:.2f}× ({h['dispatcher_ms']:.4g} ms → {h['tuned_ms']:.4g} ms)")
    if command:
        limit = command.get("limit_s")
        out += ["", f"The command: {fmt(command.get('elapsed_s'), '.0f')} s of wall time up to this report"
                + (f" (time limit {limit:g} s)" if limit else "") + f", {command.get('trials', '?')} trials."]
        skipped = {k: v for k, v in (command.get("steps") or {}).items() if v != "done"}
        if skipped:
            out.append("Steps left out: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()) + ".")
    return out + [""]


def harness_bests(rows: list[dict]) -> dict:
    """Each run's fastest configuration in the harness (from the reselection), by run."""
    best = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("harness_ms") and (
                r["run"] not in best or r["harness_ms"] < best[r["run"]]["harness_ms"]):
            best[r["run"]] = r
    return best


def _reselect_table(db: str, workload: str) -> list[str]:
    path = os.path.join(db, f"reselect_{slug(workload)}.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        saved = json.load(f)
    rows = saved["candidates"]
    flops = parse_workload(workload).flops
    bests = harness_bests(rows)
    chosen = min(bests.values(), key=lambda r: r["harness_ms"], default=None)
    seeds = " and the hand seeds" if any(r.get("seed") for r in rows) else ""
    per_run = pd.DataFrame([{
        "run": run + (" (hand seed)" if r.get("seed") else "") + (" **(chosen: tuned_gemm)**" if r is chosen else ""),
        "its best in the harness: ms": f"{r['harness_ms']:.4g}", "TFLOP/s": f"{flops / r['harness_ms'] / 1e9:.2f}",
        "vs the chosen": f"{chosen['harness_ms'] / r['harness_ms']:.2f}×", "configuration": knobs(r.get("knobs") or {})}
        for run, r in sorted(bests.items(), key=lambda kv: kv[1]["harness_ms"])])
    every = pd.DataFrame([{
        "#": r["rank"], "run": r["run"] + (" (hand seed)" if r.get("seed") else ""), "tuner ms": f"{r['tuner_ms']:.4g}",
        "harness ms": f"{r['harness_ms']:.4g}" if r.get("harness_ms") else f"{r.get('status')}: {(r.get('error') or '')[:60]}",
        "rel. error": f"{r['rel_error']:.1e}" if r.get("rel_error") is not None else "",
        "configuration": knobs(r.get("knobs") or {})} for r in rows])
    return ["", f"## Final choice in the harness (each run's top {saved.get('per_run', '?')} by the tuner's timer{seeds}, "
            "timed again with L2 emptied by reading)", "", markdown_table(per_run), markdown_table(every)]


def write_report(db: str, workload: str, out_dir: str, hand: dict | None = None, command: dict | None = None) -> dict:
    """The tuning report of ``db``'s trials on ``workload`` in ``out_dir``: ``tuning_<workload>.md``
    (and ``.json``) and the convergence chart. ``hand``: the hand comparison's results
    (:func:`reports.experiments.tuned.hand_comparison`) to draw and tabulate beside the runs.
    ``command``: what the tuning command spent (``elapsed_s``, ``limit_s``, ``trials``) and the steps
    it left out for its time limit (``steps``)."""
    os.makedirs(out_dir, exist_ok=True)
    prov = provenance()
    measured_on = os.path.join(db, "provenance.json")
    if os.path.exists(measured_on):  # where the trials were measured (written by the tuner)
        with open(measured_on) as fh:
            tuned = json.load(fh)
        prov.update(gpu=tuned.get("gpu", prov["gpu"]), tuned_on=tuned.get("date"), tuned_host=tuned.get("host"),
                    timer=tuned.get("timer", "warm"))
    runs = load_runs(db, workload)
    summaries = {run: summarize(rows) for run, rows in runs.items()}
    lines = {}
    if "dlight" in summaries and summaries["dlight"]["best_gflops"]:
        lines["dlight (tuning runner)"] = summaries["dlight"]["best_gflops"]
    hand_rows = []
    if hand:
        prov["gpu"] = hand["provenance"].get("gpu", prov["gpu"])
        hand_rows = hand["rows"]
        for r in hand_rows:
            if r.get("status") == "ok" and r.get("tflops") and r["name"] in CHART_LINES:
                lines[f"{r['name']} (harness)"] = r["tflops"] * 1e3
    caption = f"{workload} · {prov['gpu']} · TVM {prov['tvm']} · {prov['commit']} · {prov['date']}"
    chart = convergence_chart(runs, os.path.join(out_dir, f"convergence_{slug(workload)}.png"), caption, lines)
    md = [f"# Tuning report: {workload}", "", f"GPU: {prov['gpu']} · TVM {prov['tvm']} · commit "
          f"{prov['commit']} · report {prov['date']} · trials measured {prov.get('tuned_on') or '?'} on "
          f"{prov.get('tuned_host') or prov['host']}", "",
          f"Tuning times: {TIMER_TEXT.get(prov.get('timer', 'warm'), prov.get('timer'))}; "
          "every candidate is checked on 512 sampled outputs against float64 before it is timed, and the "
          "best of each run against the full float64 product.", "",
          "## Runs", ""]
    runs_df = runs_frame(summaries)
    if not runs_df.empty:
        shown = runs_df.assign(
            **{"trials/min": runs_df["trials_per_minute"].map(lambda v: fmt(v, ".1f")),
               "best GFLOP/s": runs_df["best_gflops"].map(lambda v: fmt(v, ".0f")),
               "best ms": runs_df["best_ms"].map(lambda v: fmt(v, ".4g")),
               "at trial": runs_df["first_trial_at_best"].map(lambda v: fmt(v, ".0f"))})
        md.append(markdown_table(shown[["run", "trials", "valid", "failed", "measured", "trials/min", "best GFLOP/s",
                                        "best ms", "at trial", "best configuration"]]))
    move = dispatcher_move(db, workload, runs)
    md += ["", f"![convergence]({os.path.basename(chart)})", ""] + dispatcher_lines(move, command) + \
        ["## Top configurations", ""] + top_table(runs)
    reasons = Counter()
    for run, rows in runs.items():
        for r in rows:
            if r.get("status") != "ok":
                reasons[(run, r.get("status"), (r.get("reason") or "")[:120])] += 1
    if reasons:
        failed = pd.DataFrame([{"run": run, "status": status, "reason": reason.replace("|", "/"), "count": count}
                               for (run, status, reason), count in reasons.most_common(20)])
        md += ["", "## Failed candidates (recorded, search went on)", "", markdown_table(failed)]
    best_file = R.best_path(db, workload)
    if os.path.exists(best_file):
        with open(best_file) as f:
            best = json.load(f)
        md += ["", "## Best configuration (tuned_gemm)", "",
               f"{best['run']}: {best['time_ms']:.4g} ms, {best['gflops']:.0f} GFLOP/s, relative error vs "
               f"float64 {best.get('rel_error')}; {knobs(best['knobs'])}; launch {best.get('launch')}"
               + (f"; chosen as the {best['selected_by']} ({best['harness_ms']:.4g} ms there)"
                  if best.get("selected_by") else ""), "",
               f"`SCHEDLAB_TUNED={db} schedlab run --workload {workload} --schedules tuned_gemm`"]
    md += _reselect_table(db, workload)
    if hand_rows:
        hand = pd.DataFrame.from_records(hand_rows).sort_values("time_ms", na_position="last")
        table = pd.DataFrame({
            "schedule": hand["name"],
            "status": [st if st in ("ok", "no-gpu") else f"{st}: {str(e)[:80]}".replace("|", "/")
                       for st, e in zip(hand["status"], hand.get("error", pd.Series("", index=hand.index)).fillna(""))],
            **{title: hand[col].map(lambda v, f=f: fmt(v, f)) if col in hand else ""
               for title, col, f in (("time (ms)", "time_ms", ".4g"), ("TFLOP/s", "tflops", ".2f"),
                                     ("% cuBLAS", "pct_cublas", ".1f"), ("rel. error", "rel_error", ".1e"),
                                     ("regs", "registers", ".0f"), ("smem (B)", "shared_bytes", ".0f"))}})
        md += ["", "## Tuned vs hand-written schedules vs cuBLAS (schedlab run harness: L2 flushed, CUDA events)", "",
               markdown_table(table)]
        best = hand.set_index("name")
        if {"tuned_gemm", "best_gemm"} <= set(best.index) and best.loc["tuned_gemm", "time_ms"] == \
                best.loc["tuned_gemm", "time_ms"]:
            md.append(f"tuned_gemm against best_gemm (the dispatcher's choice), both in this harness: "
                      f"{best.loc['best_gemm', 'time_ms'] / best.loc['tuned_gemm', 'time_ms']:.3f}× "
                      f"({best.loc['tuned_gemm', 'time_ms']:.4g} ms against {best.loc['best_gemm', 'time_ms']:.4g} ms).")
    path = os.path.join(out_dir, f"tuning_{slug(workload)}.md")
    with open(path, "w") as fh:
        fh.write("\n".join(md) + "\n")
    with open(os.path.join(out_dir, f"tuning_{slug(workload)}.json"), "w") as fh:
        json.dump({"provenance": prov, "workload": workload, "runs": summaries, "hand": hand_rows,
                   "dispatcher_move": move, "command": command}, fh,
                  indent=1, default=float)
    return {"markdown": path, "chart": chart}
