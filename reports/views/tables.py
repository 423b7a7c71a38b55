"""Markdown tables and the cells every view shares: number formats, the run's step table
(``table.md``), a row's time cell, parameters and tuning knobs as text."""

from __future__ import annotations

import pandas as pd

from schedules import parse_workload

from ..engine.results import ladder_rank, missing


def fmt(v, spec: str) -> str:
    """``v`` formatted by ``spec``; empty for a missing value."""
    return "" if missing(v) else format(v, spec)


def markdown_table(df: pd.DataFrame, align: dict | None = None, numparse: bool = True) -> str:
    """A GitHub Markdown table of an already formatted frame (tabulate, through pandas);
    ``numparse=False`` keeps every cell's text as formatted (``1.000``, not ``1``)."""
    if df.empty:
        return "(no rows)\n"
    colalign = [(align or {}).get(c, "right" if c not in ("workload", "schedule", "kernel", "name", "parameters",
                                                          "status", "choice", "shape") else "left") for c in df.columns]
    return df.to_markdown(index=False, colalign=colalign, disable_numparse=not numparse) + "\n"


def provenance_line(meta: dict) -> str:
    """Where the figures came from, in one line (GPU, TVM, commit, date)."""
    p = meta.get("provenance", meta)
    return f"GPU: {p.get('gpu')} · TVM {p.get('tvm')} · commit {p.get('commit')} · {p.get('date')}"


def ordered(group: pd.DataFrame) -> pd.DataFrame:
    """Schedules in ladder order (the built-in ladder, then a plugin's own), then the baselines."""
    return group.assign(_b=group["role"] != "schedule", _l=ladder_rank(group), _s=group["step"].fillna(0)).sort_values(
        ["_b", "_l", "_s"], kind="stable").drop(columns=["_b", "_l", "_s"])


def time_cell(r) -> tuple[str, str, str]:
    """A row's time, its throughput (TFLOP/s for a GEMM, GB/s for a GEMV) and a note, as text: the
    figures where it was timed, else what happened (no GPU, unavailable, the failed status)."""
    status = r.get("status")
    rate = "tflops" if str(r["workload"]).startswith("gemm") else "gbps"
    if status == "ok" and not missing(r.get("time_ms")):
        return fmt(r["time_ms"], ".4g"), fmt(r.get(rate), ".3g"), ""
    if status == "no-gpu":
        return "no GPU", "no GPU", ""
    if status == "unavailable":
        return "n/a", str(r.get("error", ""))[:60], ""
    return f"**{status}**", "", ""


def params_text(p) -> str:
    """A step's configuration as ``k=v, ...`` (the unroll factor left out)."""
    if not isinstance(p, dict):
        return ""
    return ", ".join(f"{k}={v}" for k, v in p.items() if k != "unroll")


def knobs(k) -> str:
    """A tuned configuration's knobs as ``k=v, ...``."""
    return ", ".join(f"{a}={b}" for a, b in (k or {}).items())


def not_built_line(meta: dict) -> str:
    """The steps a run left out because they do not build for its GPU (``not_built``), with what
    each needs."""
    arch = (meta.get("gpu_spec") or {}).get("arch") or meta.get("arch")
    needs: dict = {}
    for name, why in meta["not_built"].items():  # "needs sm_90a (wgmma), not sm_80"
        needs.setdefault(why.split(", not ")[0].removeprefix("needs "), []).append(name)
    return (f"Left out (they do not build for {arch}): "
            + "; ".join(f"{', '.join(names)} need{'s' if len(names) == 1 else ''} {need}"
                        for need, names in needs.items()) + ".")


def markdown(df: pd.DataFrame) -> str:
    """The run's ``table.md``: provenance, the measured ceilings, one table per workload, the steps
    left out and the errors."""
    meta = df.attrs
    lines = [provenance_line(meta), ""]
    if meta.get("complete") is False:
        lines += ["**Partial: the run was cut short; the rows below are those it finished.**", ""]
    c = meta.get("ceilings") or {}
    if c.get("copy_gbps"):
        lines += [f"Measured ceilings: copy bandwidth {c['copy_gbps']:.0f} GB/s, cuBLAS 8192³ "
                  f"{c['fp32_tflops']:.1f} TFLOP/s fp32 (TF32 off), {c['fp16_tflops']:.1f} TFLOP/s fp16.", ""]
    timers = df.loc[df.get("device", pd.Series(dtype=object)) == "gpu", "timer"].dropna() if "timer" in df else []
    if len(timers):
        lines += [f"GPU timer: {timers.iloc[0]}; median of the runs.", ""]
    if meta.get("not_built"):
        lines += [not_built_line(meta), ""]
    for wl_text, group in df.groupby("workload", sort=False):
        rate = "TFLOP/s" if wl_text.startswith("gemm") else "GB/s"
        table = []
        for _, r in ordered(group).iterrows():
            t, thr, _ = time_cell(r)
            sched = r.get("role") == "schedule"
            table.append({"step": r.get("ladder") if sched and isinstance(r.get("ladder"), str) else "",
                          "schedule": f"`{r['name']}`" if sched else r["name"], "time (ms)": t, rate: thr,
                          "× first": fmt(r.get("speedup_vs_first"), ".2f"),
                          "× prev": fmt(r.get("speedup_vs_prev"), ".2f"),
                          "% cuBLAS": fmt(r.get("pct_cublas"), ".1f"), "rel. error": fmt(r.get("rel_error"), ".1e"),
                          "threads/block": fmt(r.get("threads_per_block"), ".0f"),
                          "regs": fmt(r.get("registers"), ".0f"), "smem (B)": fmt(r.get("shared_bytes"), ".0f"),
                          "spills (B)": fmt(r.get("spill_bytes"), ".0f"), "parameters": params_text(r.get("params"))})
        lines += [f"### {wl_text}", "", markdown_table(pd.DataFrame(table), {"step": "left"})]
        skipped = (meta.get("left_out") or {}).get(wl_text)
        if skipped:
            wl = parse_workload(wl_text)
            what = f"{wl.dtype} inputs" if wl.kind != "gemm" or (wl.layout == "nn" and not wl.batched) else \
                f"{wl.dtype} inputs, the {wl.layout} layout{' or a batch' if wl.batched else ''}"
            lines += [f"Left out (they do not take {what}): {', '.join(skipped)}.", ""]
    bad = df[~df["status"].isin(["ok", "no-gpu", "unavailable"])] if "status" in df else df.iloc[0:0]
    if len(bad):
        lines += ["### Errors", ""] + [f"- `{r['name']}` on {r['workload']}: {r.get('error', '')}"
                                       for _, r in bad.iterrows()] + [""]
    return "\n".join(lines)


SUMMARY_COLUMNS = ("workload", "step", "name", "role", "precision", "status", "time_ms", "tflops", "gbps",
                   "speedup_vs_first", "speedup_vs_prev", "pct_cublas", "rel_error", "threads_per_block", "registers",
                   "shared_bytes", "spill_bytes", "params", "chosen", "chosen_step", "chosen_params", "error")


def summary(df: pd.DataFrame, **where) -> dict:
    """What ``table.md`` says, as plain data (``schedlab run --json``): the run's provenance,
    ceilings and completeness, the steps left out, ``where`` (its files: ``out_dir``, ``report``...),
    and one object per row in the table's order, its step as the ladder's label (a ``best_*`` row
    with what it was resolved to: ``chosen``, ``chosen_step``, ``chosen_params``); a missing figure
    is null."""
    rows = []
    for _, group in df.groupby("workload", sort=False):
        for _, r in ordered(group).iterrows():
            row = {c: (None if missing(r.get(c)) else _plain(r.get(c))) for c in SUMMARY_COLUMNS}
            row["step"] = r.get("ladder") if r.get("role") == "schedule" and isinstance(r.get("ladder"), str) else None
            rows.append(row)
    meta = df.attrs
    return {**where, "complete": bool(meta.get("complete", True)), "provenance": meta.get("provenance") or {},
            "ceilings": meta.get("ceilings") or {}, "left_out": meta.get("left_out") or {}, "rows": rows}


def _plain(v):
    """A cell as JSON's types (NumPy numbers as Python numbers)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v
