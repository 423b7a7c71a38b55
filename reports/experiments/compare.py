"""``schedlab compare A B``: two results folders (two GPUs, two commits, two settings) row by row.

The rows are joined on their ``id`` (docs/results-columns.md: unique in a folder, and the same
measurement in another run of the same experiment); the two folders must be results of the same
kind (``meta.kind``: ``bench-gemm``, ``run``...) and share at least one id. For each row both sides
timed, the **ratio** of B's throughput to A's, that is A's time over B's (> 1: B is faster; the
same for TFLOP/s and GB/s, since both sides ran the same workload), and, where both sides have one,
the % of cuBLAS of the same precision in each run and its difference B − A in points (a ratio to
the library measured in the same run: it compares each side's kernels with its own cuBLAS). Per
group (``by``: the precision unless said otherwise) the geometric mean of the ratios, their
minimum and maximum, and the largest difference of % cuBLAS.

    schedlab compare reports/results/NVIDIA_H200/bench_gemm reports/results/NVIDIA_H100_80GB_HBM3/bench_gemm \\
        [--by precision] [--out DIR] [--json]

``--out`` writes compare.md, compare.json and compare.png (:mod:`reports.views.comparison`,
:func:`reports.views.charts.compare_chart`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..engine.files import atomic_write, ensure_out_dir
from ..engine.results import KEY, ResultsError, load_results, missing
from ..views import charts
from ..views.comparison import markdown

RATIO = "B's throughput / A's (A's time / B's time): > 1, B is faster"
SIDE_COLUMNS = ("status", "time_ms", "tflops", "gbps", "pct_cublas")  # taken from each side, suffixed _a, _b
ROW_COLUMNS = (KEY, "workload", "name", "precision", "role")  # taken from A


@dataclass
class Comparison:
    """Two results folders joined on their ids: ``rows`` (one per id in both, in A's order),
    ``groups`` (one per value of ``by``, then ``all``), the ids found on one side only."""

    a: str
    b: str
    labels: tuple[str, str]
    meta_a: dict
    meta_b: dict
    by: str
    rows: pd.DataFrame
    groups: pd.DataFrame
    only_a: list[str]
    only_b: list[str]
    timers: tuple = (None, None)  # each side's GPU timer (the method and cache policy of its time_ms)

    def to_json(self) -> dict:
        """The comparison as plain JSON values (missing figures as null)."""
        def side(folder, label, meta, timer):
            return {"folder": folder, "label": label, "kind": meta.get("kind"), "provenance": meta.get("provenance"),
                    "timer": timer}

        return {"a": side(self.a, self.labels[0], self.meta_a, self.timers[0]),
                "b": side(self.b, self.labels[1], self.meta_b, self.timers[1]),
                "key": KEY, "ratio": RATIO, "by": self.by, "groups": _records(self.groups),
                "rows": _records(self.rows), "only_a": self.only_a, "only_b": self.only_b}


def compare(a: str, b: str, by: str = "precision") -> Comparison:
    """Join results folders ``a`` and ``b`` on their ids (see the module's docstring). Raises
    ResultsError (one line) for a folder that is not results, two folders of different kinds,
    repeated ids, no id in common, or a ``by`` that is no column of theirs."""
    da, db = load_results(a), load_results(b)
    ka, kb = da.attrs.get("kind"), db.attrs.get("kind")
    if ka != kb:
        raise ResultsError(f"{a} holds {ka!r} results and {b} {kb!r} ones: compare takes two results of the same kind")
    for folder, df in ((a, da), (b, db)):
        repeated = df.loc[df[KEY].duplicated(), KEY]
        if len(repeated):
            raise ResultsError(f"{folder}: {len(repeated)} rows repeat an {KEY} (e.g. {repeated.iloc[0]}), so its rows "
                               f"cannot be joined")
    if by not in da or by not in db:
        raise ResultsError(f"--by {by}: not a column of both folders (e.g. precision, kind, dtype, role, name, ladder)")
    common = da[KEY].isin(set(db[KEY]))
    if not common.any():
        raise ResultsError(f"{a} and {b} have no row {KEY} in common: nothing to compare")
    left = da.loc[common, list(dict.fromkeys([*ROW_COLUMNS, by]))].copy()
    sides = [d.set_index(KEY).reindex(left[KEY]) for d in (da, db)]
    for suffix, side in zip(("a", "b"), sides):
        for col in SIDE_COLUMNS:
            left[f"{col}_{suffix}"] = side[col].to_numpy() if col in side else np.nan
    left.insert(3, "kernel", [kernel_label(k, w, n) for k, w, n in zip(left[KEY], left["workload"], left["name"])])
    timed = ((left["status_a"] == "ok") & (left["status_b"] == "ok") & (left["time_ms_a"] > 0)
             & (left["time_ms_b"] > 0))
    left["ratio"] = (left["time_ms_a"] / left["time_ms_b"]).where(timed)
    left["pct_cublas_diff"] = left["pct_cublas_b"] - left["pct_cublas_a"]
    rows = left.reset_index(drop=True)
    return Comparison(a=a, b=b, labels=labels(da.attrs, db.attrs, a, b), meta_a=_meta(da), meta_b=_meta(db), by=by,
                      rows=rows, groups=groups(rows, by), only_a=list(da.loc[~common, KEY]),
                      only_b=list(db.loc[~db[KEY].isin(set(da[KEY])), KEY]), timers=(gpu_timer(da), gpu_timer(db)))


def gpu_timer(df: pd.DataFrame) -> str | None:
    """The timer of most of a folder's GPU rows (CUDA events and the cache policy), None where none was timed."""
    if "timer" not in df or "device" not in df:
        return None
    timers = df.loc[df["device"] == "gpu", "timer"].dropna()
    return str(timers.mode().iloc[0]) if len(timers) else None


def groups(rows: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per value of ``by`` (in order of appearance), then over all rows: the rows timed on both
    sides, the geometric mean of their ratios, the minimum and maximum ratio, and the largest
    difference of % cuBLAS (points, signed)."""
    out = []
    keys = rows[by].astype(object).where(rows[by].notna(), "(none)")
    for value, g in [*rows.groupby(keys, sort=False), ("all", rows)]:
        r = g["ratio"].dropna()
        diff = g["pct_cublas_diff"].dropna()
        out.append({by: value, "rows": len(r), "geomean": float(np.exp(np.log(r).mean())) if len(r) else np.nan,
                    "min": r.min() if len(r) else np.nan, "max": r.max() if len(r) else np.nan,
                    "largest_pct_cublas_diff": diff.loc[diff.abs().idxmax()] if len(diff) else np.nan})
    return pd.DataFrame(out)


def kernel_label(key: str, workload: str, name: str) -> str:
    """A row's kernel from its id: the name, then each further part of the id (the parameters a job
    set, the part of the experiment) in brackets: ``tensor_core_gemm[intrinsics=mma]``."""
    head = f"{workload}|{name}"
    if not isinstance(key, str) or not (key == head or key.startswith(head + "|")):
        return str(key)
    return name + "".join(f"[{p}]" for p in key[len(head) + 1:].split("|") if p)


def labels(meta_a: dict, meta_b: dict, a: str, b: str) -> tuple[str, str]:
    """What tells the two sides apart: their GPUs (the model's first word where that differs:
    ``H100``, ``H200``), else their commits, else their folders' names, else A and B."""
    pa, pb = meta_a.get("provenance") or {}, meta_b.get("provenance") or {}
    gpus = [str(p.get("gpu") or "").removeprefix("NVIDIA ") for p in (pa, pb)]
    short = [g.split(" ")[0] for g in gpus]
    for la, lb in (short, gpus, (pa.get("commit"), pb.get("commit")),
                   (os.path.basename(os.path.normpath(a)), os.path.basename(os.path.normpath(b)))):
        if la and lb and la != lb:
            return str(la), str(lb)
    return "A", "B"


def write(c: Comparison, out_dir: str) -> dict:
    """compare.md, compare.json and compare.png in ``out_dir``; the paths written."""
    ensure_out_dir(out_dir)
    paths = {"markdown": os.path.join(out_dir, "compare.md"), "json": os.path.join(out_dir, "compare.json")}
    atomic_write(paths["markdown"], markdown(c))
    atomic_write(paths["json"], json.dumps(c.to_json(), indent=1) + "\n")
    chart = charts.compare_chart(c.rows, c.by, c.labels, os.path.join(out_dir, "compare.png"))
    if chart:
        paths["chart"] = chart
    return paths


def _meta(df: pd.DataFrame) -> dict:
    return {k: v for k, v in df.attrs.items() if k in ("kind", "provenance", "out_dir")}


def _records(df: pd.DataFrame) -> list[dict]:
    return [{k: (None if missing(v) else v.item() if isinstance(v, np.generic) else v) for k, v in r.items()}
            for r in df.to_dict("records")]
