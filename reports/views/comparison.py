"""The Markdown of ``schedlab compare`` (:mod:`reports.experiments.compare`): the two folders with
their provenance, the geometric mean of the ratios per group, and every joined row."""

from __future__ import annotations

import pandas as pd

from .tables import fmt, markdown_table, provenance_line


def markdown(c) -> str:
    """``c``: a :class:`reports.experiments.compare.Comparison`."""
    la, lb = c.labels
    only = []
    if c.only_a:
        only.append(f"{len(c.only_a)} only in {la}")
    if c.only_b:
        only.append(f"{len(c.only_b)} only in {lb}")
    lines = [f"# {la} (A) against {lb} (B)", "",
             f"- A, {la}: `{c.a}` · {provenance_line(c.meta_a)}",
             f"- B, {lb}: `{c.b}` · {provenance_line(c.meta_b)}", "",
             f"Rows joined on `id`: {len(c.rows)} in both" + (f" ({', '.join(only)})" if only else "") + ". "
             f"{lb}/{la}: {lb}'s throughput over {la}'s, {la}'s time / {lb}'s time (> 1: {lb} is faster). "
             f"% cuBLAS: of cuBLAS of the same precision in the same run; difference: {lb} − {la}, in points.", ""]
    ta, tb = c.timers
    if ta and tb and ta != tb:
        lines += [f"**The two sides were timed differently** ({la}: {ta}; {lb}: {tb}): the ratios include it.", ""]
    lines += [f"## Geometric mean per {c.by}", ""]
    g = c.groups
    lines.append(markdown_table(pd.DataFrame({
        c.by: g[c.by].astype(str), "rows": g["rows"], f"geomean {lb}/{la}": g["geomean"].map(lambda v: fmt(v, ".3f")),
        "min": g["min"].map(lambda v: fmt(v, ".3f")), "max": g["max"].map(lambda v: fmt(v, ".3f")),
        "largest difference of % cuBLAS (points)": g["largest_pct_cublas_diff"].map(lambda v: fmt(v, ".1f"))}),
        {c.by: "left"}, numparse=False))
    r = c.rows
    notes = [("" if a == b == "ok" else f"{la}: {a}, {lb}: {b}") for a, b in zip(r["status_a"], r["status_b"])]
    lines += ["## Every row", "", markdown_table(pd.DataFrame({
        "workload": r["workload"], "precision": r["precision"], "kernel": r["kernel"],
        f"{la} ms": r["time_ms_a"].map(lambda v: fmt(v, ".4g")),
        f"{lb} ms": r["time_ms_b"].map(lambda v: fmt(v, ".4g")),
        f"{lb}/{la}": r["ratio"].map(lambda v: fmt(v, ".3f")),
        f"{la} % cuBLAS": r["pct_cublas_a"].map(lambda v: fmt(v, ".1f")),
        f"{lb} % cuBLAS": r["pct_cublas_b"].map(lambda v: fmt(v, ".1f")),
        "difference (points)": r["pct_cublas_diff"].map(lambda v: fmt(v, ".1f")), "note": notes}),
        {"precision": "left", "note": "left"}, numparse=False)]
    return "\n".join(lines)
