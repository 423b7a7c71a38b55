"""Results as pandas DataFrames: one row per kernel or baseline on one workload, the derived figures
computed per workload group, and the files (JSON, CSV, and a given Markdown table) written from the frame.

Every results directory the lab writes (``schedlab run``, ``bench-gemm``, ``bench-gemv``, the random
benchmark, sweeps) holds a ``results.json`` of the same shape, ``{"meta": {...}, "rows": [...]}``, so
:func:`load_results` reads any of them back, committed or fresh::

    from reports import load_results
    h100 = load_results("reports/results/NVIDIA_H100_80GB_HBM3/default")
    h200 = load_results("reports/results/NVIDIA_H200/default")
    both = h100.merge(h200, on=["workload", "name"], suffixes=("_h100", "_h200"))
    both["h200_speedup"] = both.time_ms_h100 / both.time_ms_h200
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pandas as pd

from schedules import parse_workload

from .files import atomic_write

RESULTS_FILE = "results.json"
LEGACY_FILES = ("results.json.gz", "bench.json", "gemv_bench.json")  # compressed, or written before results.json


class ResultsError(ValueError):
    """A results directory that cannot be read: the message names the file and what is wrong."""


# --- the frame -------------------------------------------------------------------------------------
def frame(rows: list[dict], meta: dict | None = None) -> pd.DataFrame:
    """The rows as a DataFrame with the derived columns (:func:`derive`); ``meta`` (provenance,
    ceilings...) goes to ``df.attrs``."""
    df = derive(pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=["workload", "name"]))
    df.attrs.update(meta or {})
    return df


def per_workload(df: pd.DataFrame, what) -> pd.Series:
    values = {w: what(parse_workload(w)) for w in df["workload"].dropna().unique()}
    return df["workload"].map(values).astype(float)


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """Add TFLOP/s, GB/s, the speedup over the first and the previous timed step of the same
    workload, and the share of cuBLAS of the same workload and precision (fp32 vs cuBLAS fp32, tf32
    vs cuBLAS in TF32 mode, fp16 vs fp16...); for a workload with an epilogue, also the share of
    cuBLASLt's fused epilogue (``pct_cublaslt``) and the speedup over eager PyTorch's unfused
    sequence (``speedup_vs_eager``), where those rows are there."""
    df = df.copy()
    for col in ("time_ms", "status", "role", "step", "precision"):
        if col not in df:
            df[col] = np.nan
    ok = (df["status"] == "ok") & df["time_ms"].notna() & (df["time_ms"] > 0)
    time = df["time_ms"].where(ok)
    df["tflops"] = per_workload(df, lambda w: w.flops) / time / 1e9
    df["gbps"] = per_workload(df, lambda w: w.min_bytes) / time / 1e6
    steps = df[(df["role"] == "schedule") & ok].sort_values(["workload", "step"], kind="stable")
    first = steps.groupby("workload")["time_ms"].transform("first")
    prev = steps.groupby("workload")["time_ms"].shift(1)
    df["speedup_vs_first"] = (first / steps["time_ms"]).reindex(df.index)
    df["speedup_vs_prev"] = (prev / steps["time_ms"]).reindex(df.index)
    cublas = (df[ok & df["name"].isin(["cublas", "cublas_tf32"])]
              .groupby(["workload", "precision"])["time_ms"].first())
    ref = pd.Series([cublas.get((w, p), np.nan) for w, p in zip(df["workload"], df["precision"])], index=df.index)
    df["pct_cublas"] = 100 * ref / time
    for name, col, scale in (("cublaslt_fused", "pct_cublaslt", 100), ("torch_eager", "speedup_vs_eager", 1)):
        lib = df[ok & (df["name"] == name)].groupby("workload")["time_ms"].first()
        if len(lib):
            df[col] = scale * df["workload"].map(lib).astype(float) / time
    return df


# --- files -----------------------------------------------------------------------------------------
def write_results(df: pd.DataFrame, out_dir: str, table_md: str | None = None, keep_files: bool = True) -> dict:
    """``results.json`` (meta + rows), ``results.csv`` and, given, ``table.md`` in ``out_dir``; each
    file is written whole or not at all (a temporary file renamed into place). ``keep_files=False``
    drops the per-row IR paths and tracebacks (for published copies)."""
    os.makedirs(out_dir, exist_ok=True)
    rows = df.drop(columns=[c for c in ("files", "traceback", "stderr") if c in df and not keep_files])
    records = [{k: v for k, v in r.items() if not missing(v)} for r in rows.to_dict("records")]
    meta = _plain(dict(df.attrs))
    atomic_write(os.path.join(out_dir, RESULTS_FILE), json.dumps({"meta": meta, "rows": records}, indent=1,
                                                                   default=_json_default))
    flat = rows.copy()
    for col in flat.columns:
        if flat[col].map(lambda v: isinstance(v, (dict, list))).any():
            flat[col] = flat[col].map(_cell)
    atomic_write(os.path.join(out_dir, "results.csv"), flat.to_csv(index=False))
    paths = {"json": os.path.join(out_dir, RESULTS_FILE), "csv": os.path.join(out_dir, "results.csv")}
    if table_md is not None:
        atomic_write(os.path.join(out_dir, "table.md"), table_md)
        paths["markdown"] = os.path.join(out_dir, "table.md")
    return paths


def load_results(path: str) -> pd.DataFrame:
    """A results directory (or its ``results.json``) back as the DataFrame it was written from,
    derived columns recomputed, its meta (provenance, ceilings...) in ``df.attrs``. Raises
    ResultsError, naming the file, for a directory without results or a file that is not one."""
    if not isinstance(path, (str, os.PathLike)):
        raise ResultsError(f"load_results takes a results directory or file path, got {type(path).__name__}")
    path = os.fspath(path)
    candidates = [path] if path.endswith((".json", ".json.gz")) else \
        [os.path.join(path, n) for n in (RESULTS_FILE, *LEGACY_FILES)]
    file = next((p for p in candidates if os.path.isfile(p)), None)
    if file is None:
        raise ResultsError(f"{path}: no results here (expected {RESULTS_FILE})")
    try:
        if file.endswith(".gz"):
            with gzip.open(file, "rt") as f:
                data = json.load(f)
        else:
            with open(file) as f:
                data = json.load(f)
    except (OSError, ValueError) as e:
        raise ResultsError(f"{file}: not a readable results file ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or not all(
            isinstance(r, dict) and "workload" in r and "name" in r for r in data["rows"]):
        raise ResultsError(f"{file}: not a results file (no list of rows with a workload and a name)")
    meta = data.get("meta") or {k: v for k, v in data.items() if k != "rows"}
    try:
        return frame(data["rows"], meta)
    except Exception as e:  # noqa: BLE001 - e.g. a workload string that no longer parses
        raise ResultsError(f"{file}: its rows cannot be read ({type(e).__name__}: {str(e)[:120]})") from None


def missing(v) -> bool:
    """None or NaN: a cell with no value."""
    return v is None or (isinstance(v, float) and np.isnan(v))


def _cell(v):
    if isinstance(v, dict):
        return " ".join(f"{k}={x}" for k, x in v.items())
    if isinstance(v, list):
        return "x".join(str(x) for x in v)
    return v


def _plain(obj):
    return json.loads(json.dumps(obj, default=_json_default))


def _json_default(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)
