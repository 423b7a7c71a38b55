"""Results as pandas DataFrames: one row per kernel or baseline on one workload, the derived figures
computed per workload group, and the files (JSON, CSV, and a given Markdown table) written from the frame.

Every results directory the lab writes (``schedlab run``, ``bench-gemm``, ``bench-gemv``, the random
benchmark, sweeps) holds a ``results.json`` of the same shape, ``{"schema": N, "meta": {...}, "rows":
[...]}``, so :func:`load_results` reads any of them back, committed or fresh. Every column is
described in docs/results-columns.md. A row's ``id`` is unique in its folder and names the same
measurement in another run of the same experiment, so it is the key two folders are joined on
(``schedlab compare`` does this)::

    from reports import load_results
    h100 = load_results("reports/results/NVIDIA_H100_80GB_HBM3/bench_gemm")
    h200 = load_results("reports/results/NVIDIA_H200/bench_gemm")
    both = h100.merge(h200, on="id", suffixes=("_h100", "_h200"))
    both["h200_speedup"] = both.time_ms_h100 / both.time_ms_h200
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os

import numpy as np
import pandas as pd

from schedules import parse_workload
from schedules.workloads import Gemm
from schedules.registry import LADDERS

from .files import atomic_write

RESULTS_FILE = "results.json"
LEGACY_FILES = ("results.json.gz", "bench.json", "gemv_bench.json")  # compressed, or written before results.json
SCHEMA_VERSION = 1  # 1: the schema field, tidy workload columns, integer counts, a unique id, files relative
KEY = "id"  # workload|name[|parameters][|part]: unique in a folder, the join key between folders
COUNT_COLUMNS = ("step", "registers", "shared_bytes", "spill_bytes", "stack_bytes", "threads_per_block", "kernels",
                 "reps")  # whole numbers (nullable), as are the workload's sizes
NOT_META = ("schema", "out_dir")  # df.attrs that say where and how a frame was read, not what it holds


class ResultsError(ValueError):
    """A results directory that cannot be read: the message names the file and what is wrong."""


# --- the frame -------------------------------------------------------------------------------------
def frame(rows: list[dict], meta: dict | None = None) -> pd.DataFrame:
    """The rows as a DataFrame with the derived columns (:func:`derive`), the workload's parts as
    columns (:func:`workload_columns`), counts as nullable integers and every row's ``id``; ``meta``
    (provenance, ceilings...) goes to ``df.attrs``."""
    df = derive(pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=["workload", "name"]))
    df = _tidy(df)
    df.attrs.update(meta or {})
    return df


def workload_columns(wl) -> dict:
    """A parsed workload's parts as columns: the one place a workload's fields become columns (a new
    field of the workload is a new entry here and a line in docs/results-columns.md; a whole-number
    part becomes a nullable integer column). ``k`` is empty for a GEMV (A is m×n), ``batch`` for an
    unbatched product, ``layout`` for a GEMV."""
    return {"kind": wl.kind, "m": wl.M, "n": wl.N, "k": getattr(wl, "K", None), "batch": getattr(wl, "batch", None),
            "dtype": wl.dtype, "layout": getattr(wl, "layout", None)}


_EXAMPLE = workload_columns(Gemm(1, 1, 1, batch=1))
WORKLOAD_COLUMNS = tuple(_EXAMPLE)
FRONT = (KEY, "workload", "name", *WORKLOAD_COLUMNS, "precision")  # the columns a frame opens with


def _tidy(df: pd.DataFrame) -> pd.DataFrame:
    parts = {w: workload_columns(parse_workload(w)) for w in df["workload"].dropna().unique()}
    whole = {c for c, v in _EXAMPLE.items() if isinstance(v, int)}
    for col in WORKLOAD_COLUMNS:
        df[col] = df["workload"].map(lambda w, c=col: parts[w][c] if w in parts else None)
        if any(isinstance(p[col], int) and not isinstance(p[col], bool) for p in parts.values()):
            whole.add(col)
    for col in (*whole, *COUNT_COLUMNS):
        if col in df:
            values = pd.to_numeric(df[col])
            # a plugin's step placed after built-in step 11 is 11.1: the column is then Float64
            whole_numbers = values.dropna().mod(1).eq(0).all()
            df[col] = values.astype("Int64" if whole_numbers or col != "step" else "Float64")
    if KEY not in df:
        df[KEY] = None
    no_id = df[KEY].isna()
    if no_id.any():  # rows made outside the harness (it names every job): the workload and the name
        df.loc[no_id, KEY] = df.loc[no_id, "workload"] + "|" + df.loc[no_id, "name"]
    return df[[c for c in FRONT if c in df] + [c for c in df.columns if c not in FRONT]]


def per_workload(df: pd.DataFrame, what) -> pd.Series:
    values = {w: what(parse_workload(w)) for w in df["workload"].dropna().unique()}
    return df["workload"].map(values).astype(float)


def ladder_rank(df: pd.DataFrame) -> pd.Series:
    """0 for the rows of the built-in ladders (and rows that are not steps), 1 for the steps of a
    plugin's own ladder (their ``ladder`` label names another ladder): sorted by (rank, step), a
    plugin's ladder 1, 2, 3... follows the built-in ladder instead of mixing with its first steps."""
    labels = df["ladder"] if "ladder" in df else pd.Series(None, index=df.index, dtype=object)
    return labels.map(lambda x: int(isinstance(x, str) and x.split(" ")[0] not in LADDERS))


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """Add TFLOP/s, GB/s, the speedup over the first and the previous timed step of the same
    workload, and the share of cuBLAS of the same workload and precision (fp32 vs cuBLAS fp32, tf32
    vs cuBLAS in TF32 mode, fp16 vs fp16...); for a workload with an epilogue, also the share of
    cuBLASLt's fused epilogue (``pct_cublaslt``) and the speedup over eager PyTorch's unfused
    sequence (``speedup_vs_eager``); for block-scaled 8-bit inputs, also the share of cuBLAS's rate
    with per-tensor scales at the same shape (``pct_cublas_tensor``) and the speedup over the
    dequantize-then-bf16 product (``speedup_vs_dequant``); each where those rows are there."""
    df = df.copy()
    for col in ("time_ms", "status", "role", "step", "precision"):
        if col not in df:
            df[col] = np.nan
    ok = (df["status"] == "ok") & df["time_ms"].notna() & (df["time_ms"] > 0)
    time = df["time_ms"].where(ok)
    df["tflops"] = per_workload(df, lambda w: w.flops) / time / 1e9
    df["gbps"] = per_workload(df, lambda w: w.min_bytes) / time / 1e6
    steps = df[(df["role"] == "schedule") & ok].assign(_rank=ladder_rank(df)).sort_values(
        ["workload", "_rank", "step"], kind="stable")
    first = steps.groupby("workload")["time_ms"].transform("first")
    prev = steps.groupby("workload")["time_ms"].shift(1)
    df["speedup_vs_first"] = (first / steps["time_ms"]).reindex(df.index)
    df["speedup_vs_prev"] = (prev / steps["time_ms"]).reindex(df.index)
    cublas = (df[ok & df["name"].isin(["cublas", "cublas_tf32"])]
              .groupby(["workload", "precision"])["time_ms"].first())
    ref = pd.Series([cublas.get((w, p), np.nan) for w, p in zip(df["workload"], df["precision"])], index=df.index)
    df["pct_cublas"] = 100 * ref / time
    for name, col, scale in (("cublaslt_fused", "pct_cublaslt", 100), ("torch_eager", "speedup_vs_eager", 1),
                             ("dequant_bf16_cublas", "speedup_vs_dequant", 1)):
        lib = df[ok & (df["name"] == name)].groupby("workload")["time_ms"].first()
        if len(lib):
            df[col] = scale * df["workload"].map(lib).astype(float) / time
    per_tensor = {w: per_tensor_twin(w) for w in df["workload"].dropna().unique()}
    twins = df["workload"].map(per_tensor)
    if twins.notna().any():
        lib = df[ok & (df["name"] == "cublas")].groupby("workload")["time_ms"].first()
        df["pct_cublas_tensor"] = 100 * twins.map(lib).astype(float) / time
    return df


def per_tensor_twin(workload: str) -> str | None:
    """The same product with per-tensor scales, for a block-scaled 8-bit workload (None otherwise)."""
    try:
        wl = parse_workload(workload)
    except ValueError:
        return None
    if getattr(wl, "scaling", None) != "block":
        return None
    return str(dataclasses.replace(wl.product_only(), scaling="tensor"))


# --- files -----------------------------------------------------------------------------------------
def write_results(df: pd.DataFrame, out_dir: str, table_md: str | None = None, keep_files: bool = True) -> dict:
    """``results.json`` (schema, meta and rows), ``results.csv`` and, given, ``table.md`` in
    ``out_dir``; each file is written whole or not at all (a temporary file renamed into place).
    A row's ``files`` keep only the IR files that exist in ``out_dir`` (paths relative to it);
    ``keep_files=False`` drops them and the tracebacks (for published copies)."""
    os.makedirs(out_dir, exist_ok=True)
    rows = df.drop(columns=[c for c in ("files", "traceback", "stderr") if c in df and not keep_files])
    if "files" in rows:
        rows = rows.assign(files=rows["files"].map(lambda f: existing_files(f, out_dir)))
    records = [{k: v for k, v in r.items() if not missing(v)} for r in rows.to_dict("records")]
    meta = _plain({k: v for k, v in df.attrs.items() if k not in NOT_META})
    atomic_write(os.path.join(out_dir, RESULTS_FILE), json.dumps({"schema": SCHEMA_VERSION, "meta": meta,
                                                                   "rows": records}, indent=1, default=_json_default))
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


def existing_files(files, folder: str, from_cwd: bool = False) -> dict | None:
    """The entries of a row's ``files`` (stage -> path) whose file exists, as paths relative to the
    results ``folder``; None where none is left. ``from_cwd``: a path may also be relative to the
    working directory (schema 0 wrote them so)."""
    if not isinstance(files, dict):
        return None
    out = {}
    for stage, p in files.items():
        if not isinstance(p, str) or not p:
            continue
        inside = os.path.join(folder, p)
        if not os.path.isabs(p) and os.path.isfile(inside):
            out[stage] = os.path.normpath(p)
        elif (os.path.isabs(p) or from_cwd) and os.path.isfile(p):
            out[stage] = os.path.relpath(p, folder)
    return out or None


def load_results(path: str) -> pd.DataFrame:
    """A results directory (or its ``results.json``) back as the DataFrame it was written from,
    derived columns recomputed, its meta (provenance, ceilings...) in ``df.attrs`` (with ``out_dir``:
    the folder). Results of an older schema are upgraded (:func:`upgrade`). Raises ResultsError in
    one line, naming the file, for a newer schema, a file that is not results, or a folder without
    results (saying what the folder is: a calibration, a tuning, a comparison folder...)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ResultsError(f"load_results takes a results directory or file path, got {type(path).__name__}")
    path = os.fspath(path)
    candidates = [path] if path.endswith((".json", ".json.gz")) else \
        [os.path.join(path, n) for n in (RESULTS_FILE, *LEGACY_FILES)]
    file = next((p for p in candidates if os.path.isfile(p)), None)
    if file is None:
        raise ResultsError(f"{path}: {what_folder(path)}")
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
    version = data.get("schema", 0)
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= SCHEMA_VERSION:
        raise ResultsError(f"{file}: results schema {version!r}, which this schedlab does not read (it reads "
                           f"schemas 0 to {SCHEMA_VERSION}: a newer schedlab wrote it)")
    meta = data.get("meta") or {k: v for k, v in data.items() if k not in ("rows", "schema")}
    folder = os.path.dirname(file) or "."
    try:
        df = frame(upgrade(data["rows"], meta, version, folder), meta)
    except Exception as e:  # noqa: BLE001 - e.g. a workload string that no longer parses
        raise ResultsError(f"{file}: its rows cannot be read ({type(e).__name__}: {str(e)[:120]})") from None
    df.attrs.update(schema=SCHEMA_VERSION, out_dir=folder)
    return df


def upgrade(rows: list[dict], meta: dict, version: int, folder: str) -> list[dict]:
    """Rows of an older schema as this one writes them. From 0 (no ``schema`` field): a calibration
    sweep's ``id`` gains its part (``|fp32``...: its fp32 and tf32 parts measure the same SIMT
    kernels), and ``files`` keep only the IR files that exist, relative to the folder. The tidy
    columns, the integer counts and a missing ``id`` are made by :func:`frame` for every schema."""
    if version >= 1:
        return rows
    sweep = meta.get("kind") == "sweep-calibration"
    out = []
    for r in rows:
        r = dict(r)
        if sweep and r.get("sweep_precision") and r.get(KEY):
            r[KEY] = f"{r[KEY]}|{r['sweep_precision']}"
        if "files" in r:
            r["files"] = existing_files(r["files"], folder, from_cwd=True)
            if r["files"] is None:
                del r["files"]
        out.append(r)
    return out


def what_folder(path: str) -> str:
    """What a folder without a results file is, and what reads it, in a few words (for one-line errors)."""
    if not os.path.isdir(path):
        return "no such folder"
    names = sorted(os.listdir(path))
    inner = [n for n in names if any(os.path.isfile(os.path.join(path, n, f)) for f in (RESULTS_FILE, *LEGACY_FILES))]
    if "compare.json" in names:
        return ("a comparison of two results folders (compare.json, compare.md, written by `schedlab compare`), "
                "not results: json.load reads compare.json")
    if "fit.json" in names and inner:
        return (f"a calibration folder: fit.json (the fit's report) and the sweeps {', '.join(inner)}; load_results "
                f"reads each sweep ({os.path.join(path, inner[0])}), `schedlab calibrate SWEEP...` fits them")
    if inner:
        return f"a folder of results folders ({', '.join(inner)}): load_results reads each"
    if "tune_random.json" in names:
        return ("a tune-random report (tune_random.json/.md, written by `schedlab tune-random`), not results: "
                "json.load reads tune_random.json")
    if "trials.jsonl" in names:
        return "a tuning database (trials.jsonl), not results: `schedlab report DIR` writes its page"
    if any(n.startswith("tuning_") and n.endswith(".json") for n in names):
        return ("a tuning folder (the reports tuning_*.json/.md and tuning databases, which SCHEDLAB_TUNED=DB "
                "replays as tuned_gemm), not results: json.load reads a report")
    return f"no results here (expected {RESULTS_FILE})"


def missing(v) -> bool:
    """None, NaN or pandas' NA: a cell with no value."""
    return v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))


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
