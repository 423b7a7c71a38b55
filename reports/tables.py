"""Derived figures (throughput, speedups, share of cuBLAS) and the Markdown/CSV tables."""

from __future__ import annotations

import csv

from schedules import parse_workload


def derive(rows: list[dict]) -> list[dict]:
    """Add TFLOP/s, GB/s, speedup over the first step, over the previous step and % of cuBLAS."""
    out = [dict(r) for r in rows]
    by_wl: dict[str, list[dict]] = {}
    for r in out:
        by_wl.setdefault(r["workload"], []).append(r)
        if r.get("status") == "ok" and r.get("time_ms"):
            wl = parse_workload(r["workload"])
            r["tflops"] = wl.flops / r["time_ms"] / 1e9
            r["gbps"] = wl.min_bytes / r["time_ms"] / 1e6
    for group in by_wl.values():
        steps = sorted((r for r in group if r.get("role") == "schedule"), key=lambda r: r.get("step", 0))
        timed = [r for r in steps if r.get("time_ms")]
        cublas = next((r for r in group if r["name"] == "cublas" and r.get("time_ms")), None)
        first = timed[0] if timed else None
        prev = None
        for r in steps:
            if r.get("time_ms"):
                r["speedup_vs_first"] = first["time_ms"] / r["time_ms"]
                if prev is not None:
                    r["speedup_vs_prev"] = prev["time_ms"] / r["time_ms"]
                prev = r
        for r in group:
            if cublas and r.get("time_ms") and not _other_precision(r):
                r["pct_cublas"] = 100 * cublas["time_ms"] / r["time_ms"]
    return out


def _other_precision(row) -> bool:
    """A tf32 step's row: the run's cuBLAS computes in full fp32 (TF32 off), so no % cuBLAS
    (``scripts/bench_gemm.py`` compares it with cuBLAS in TF32 mode)."""
    from schedules import ScheduleParamError, get

    try:
        return row.get("role") == "schedule" and "tf32" in get(row["name"]).tags
    except ScheduleParamError:  # a step registered elsewhere (tuned_gemm)
        return False


COLUMNS = ["workload", "name", "role", "step", "status", "time_ms", "time_min_ms", "reps", "tflops", "gbps",
           "speedup_vs_first", "speedup_vs_prev", "pct_cublas", "rel_error", "threads_per_block", "grid",
           "registers", "shared_bytes", "spill_bytes", "params", "device", "timer", "error"]


def to_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _plain(r.get(k)) for k in COLUMNS})


def _plain(v):
    if isinstance(v, dict):
        return " ".join(f"{k}={x}" for k, x in v.items())
    if isinstance(v, list):
        return "x".join(str(x) for x in v)
    return "" if v is None else v


def _num(v, fmt):
    return "" if v is None else format(v, fmt)


def _params(r):
    p = r.get("params") or {}
    keys = [k for k in p if k not in ("unroll",)]
    return ", ".join(f"{k}={p[k]}" for k in keys)


def markdown(results: dict) -> str:
    prov = results["provenance"]
    lines = [f"GPU: {prov['gpu']} · TVM {prov['tvm']} · commit {prov['commit']} · {prov['date']}", ""]
    if results.get("complete") is False:
        lines += ["**Partial: the run was cut short; the rows below are those it finished.**", ""]
    if prov.get("commit_note"):
        lines += [f"(commit: {prov['commit_note']})", ""]
    c = results.get("ceilings") or {}
    if c.get("copy_gbps"):
        lines += [f"Measured ceilings: copy bandwidth {c['copy_gbps']:.0f} GB/s, cuBLAS 8192³ "
                  f"{c['fp32_tflops']:.1f} TFLOP/s fp32 (TF32 off), {c['fp16_tflops']:.1f} TFLOP/s fp16.", ""]
    timer = next((r.get("timer") for r in results["rows"] if r.get("device") == "gpu" and r.get("timer")), None)
    if timer:
        lines += [f"GPU timer: {timer}; median of the runs.", ""]
    by_wl: dict[str, list[dict]] = {}
    for r in results["rows"]:
        by_wl.setdefault(r["workload"], []).append(r)
    for wl_text, group in by_wl.items():
        wl = parse_workload(wl_text)
        rate = "TFLOP/s" if wl.kind == "gemm" else "GB/s"
        lines += [f"### {wl_text}", "",
                  f"| step | schedule | time (ms) | {rate} | × first | × prev | % cuBLAS | rel. error | "
                  "threads/block | regs | smem (B) | spills (B) | parameters |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        ordered = sorted(group, key=lambda r: (r.get("role") != "schedule", r.get("step", 0)))
        for r in ordered:
            status = r.get("status")
            if status == "ok":
                t = _num(r.get("time_ms"), ".4g")
                thr = _num(r.get("tflops") if wl.kind == "gemm" else r.get("gbps"), ".3g")
            elif status == "no-gpu":
                t = thr = "no GPU"
            elif status == "unavailable":
                t, thr = "n/a", r.get("error", "")
            else:
                t, thr = f"**{status}**", ""
            lines.append("| " + " | ".join([
                str(r.get("step", "")), f"`{r['name']}`" if r.get("role") == "schedule" else r["name"],
                t, thr, _num(r.get("speedup_vs_first"), ".2f"), _num(r.get("speedup_vs_prev"), ".2f"),
                _num(r.get("pct_cublas"), ".1f"), _num(r.get("rel_error"), ".1e"),
                str(r.get("threads_per_block", "")), str(r.get("registers", "")),
                str(r.get("shared_bytes", "")), str(r.get("spill_bytes", "")), _params(r)]) + " |")
        lines.append("")
    errors = [r for r in results["rows"] if r.get("status") not in ("ok", "no-gpu", "unavailable")]
    if errors:
        lines += ["### Errors", ""] + [f"- `{r['name']}` on {r['workload']}: {r.get('error', '')}" for r in errors]
        lines.append("")
    return "\n".join(lines)
