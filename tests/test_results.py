"""The data layer: rows → DataFrame with derived columns per workload group, the files written from
it, and any results directory loaded back."""

import gzip
import json
import os

import pandas as pd
import pytest

from reports import load_results
from reports.views import charts
from reports.engine import results as R
from reports.views.tables import markdown, summary


def _rows():
    w, w16 = "gemm:64x64x64", "gemm:64x64x64:float16"
    return [
        {"workload": w, "name": "naive_gemm", "role": "schedule", "step": 1, "ladder": "gemm 1", "status": "ok",
         "time_ms": 8.0, "device": "gpu", "precision": "fp32"},
        {"workload": w, "name": "thread_1d_gemm", "role": "schedule", "step": 2, "status": "ok", "time_ms": 2.0,
         "device": "gpu", "precision": "fp32"},
        {"workload": w, "name": "thread_2d_gemm", "role": "schedule", "step": 3, "status": "error", "error": "boom",
         "precision": "fp32"},
        {"workload": w, "name": "shared_cache_gemm", "role": "schedule", "step": 4, "status": "ok", "time_ms": 1.0,
         "device": "gpu", "precision": "fp32", "params": {"tile_m": 16}},
        {"workload": w, "name": "wgmma_tf32_gemm", "role": "schedule", "step": 20, "status": "ok", "time_ms": 0.1,
         "device": "gpu", "precision": "tf32"},
        {"workload": w, "name": "cublas", "role": "baseline", "status": "ok", "time_ms": 0.5, "device": "gpu",
         "precision": "fp32"},
        {"workload": w, "name": "cublas_tf32", "role": "baseline", "status": "ok", "time_ms": 0.05, "device": "gpu",
         "precision": "tf32"},
        {"workload": w16, "name": "naive_gemm", "role": "schedule", "step": 1, "status": "ok", "time_ms": 4.0,
         "device": "gpu", "precision": "fp16"},
        {"workload": w16, "name": "cublas", "role": "baseline", "status": "ok", "time_ms": 0.4, "device": "gpu",
         "precision": "fp16"},
    ]


META = {"provenance": {"gpu": "Test GPU", "tvm": "0.27", "commit": "abc", "date": "today"},
        "ceilings": {"copy_gbps": 1000.0, "fp32_tflops": 10.0, "fp16_tflops": 20.0}, "complete": True}


def test_derived_columns_per_workload_and_precision():
    df = R.frame(_rows(), META).set_index(["workload", "name"])
    w = "gemm:64x64x64"
    assert df.loc[(w, "thread_1d_gemm"), "speedup_vs_first"] == pytest.approx(4.0)
    assert df.loc[(w, "shared_cache_gemm"), "speedup_vs_prev"] == pytest.approx(2.0)  # over step 2: step 3 failed
    assert df.loc[(w, "shared_cache_gemm"), "pct_cublas"] == pytest.approx(50.0)
    assert df.loc[(w, "shared_cache_gemm"), "tflops"] == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    assert df.loc[(w, "wgmma_tf32_gemm"), "pct_cublas"] == pytest.approx(50.0)  # against cuBLAS in TF32 mode
    assert df.loc[("gemm:64x64x64:float16", "naive_gemm"), "pct_cublas"] == pytest.approx(10.0)  # its own cuBLAS
    assert df.loc[("gemm:64x64x64:float16", "naive_gemm"), "speedup_vs_first"] == pytest.approx(1.0)
    assert df.loc[(w, "thread_2d_gemm")][["tflops", "pct_cublas"]].isna().all()


def test_markdown_names_provenance_steps_and_errors():
    md = markdown(R.frame(_rows(), META))
    assert "Test GPU" in md and "commit abc" in md and "| gemm 1 " in md
    assert "**error**" in md and "`thread_2d_gemm` on gemm:64x64x64: boom" in md
    assert "Partial" in markdown(R.frame(_rows(), {**META, "complete": False}))


def test_files_round_trip_through_load_results(tmp_path):
    df = R.frame(_rows(), META)
    R.write_results(df, str(tmp_path), table_md="x")
    back = load_results(str(tmp_path))
    assert back.attrs["provenance"]["gpu"] == "Test GPU"
    assert list(back["name"]) == list(df["name"])
    assert back["pct_cublas"].round(6).equals(df["pct_cublas"].round(6))
    assert back.loc[back["name"] == "shared_cache_gemm", "params"].iloc[0] == {"tile_m": 16}
    assert (tmp_path / "results.csv").read_text().splitlines()[0].startswith("id,workload,name,kind,m,n,k,batch")


def test_two_runs_compare_in_a_few_lines(tmp_path):
    a, b = tmp_path / "h100", tmp_path / "h200"
    R.write_results(R.frame(_rows(), META), str(a))
    faster = [dict(r, time_ms=r["time_ms"] / 2) if "time_ms" in r else r for r in _rows()]
    R.write_results(R.frame(faster, META), str(b))
    both = load_results(str(a)).merge(load_results(str(b)), on="id", suffixes=("_a", "_b"))
    speedup = (both.time_ms_a / both.time_ms_b).dropna()
    assert len(speedup) == 8 and (speedup == 2.0).all()


@pytest.mark.parametrize("content, word", [(None, "no results here"), ("{not json", "not a readable results file"),
                                           ('{"rows": [{"x": 1}]}', "not a results file"),
                                           ('{"rows": [{"workload": "conv:1", "name": "x"}]}', "cannot be read")])
def test_unreadable_results_are_one_line_errors(tmp_path, content, word):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    with pytest.raises(R.ResultsError, match=word) as e:
        load_results(str(tmp_path))
    assert len(str(e.value).splitlines()) == 1


def test_a_write_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    from reports.engine import files

    R.write_results(R.frame(_rows(), META), str(tmp_path))
    before = (tmp_path / "results.json").read_text()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    with pytest.raises(files.OutputError, match="No space left on device"):
        R.write_results(R.frame(_rows()[:2], META), str(tmp_path))
    assert (tmp_path / "results.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    json.loads(before)


def test_charts_are_written(tmp_path):
    df = R.frame(_rows(), META)
    for fn, name in ((charts.time_chart, "t.png"), (charts.roofline_chart, "r.png")):
        path = fn(df, str(tmp_path / name))
        assert path and (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


# --- tidy results: the workload's parts, integer counts, the key, the schema ----------------------------
def test_tidy_columns_from_the_workload_and_integer_counts(tmp_path):
    rows = _rows() + [
        {"workload": "bmm:8x64x32x16:float16:nt", "name": "wgmma_gemm", "role": "schedule", "step": 19, "status": "ok",
         "time_ms": 0.1, "precision": "fp16", "registers": 90.0, "threads_per_block": 384},
        {"workload": "gemv:33x17", "name": "warp_gemv", "role": "schedule", "step": 1, "status": "no-gpu",
         "precision": "fp32", "registers": 17},
    ]
    rows[0]["registers"] = 32.0  # as a float, as pandas made it from rows where some had none
    df = R.frame(rows, META)
    assert list(df.columns[:11]) == ["id", "workload", "name", "kind", "m", "n", "k", "batch", "dtype", "layout",
                                     "precision"]
    by = df.set_index("id")
    parts = ["kind", "m", "n", "k", "batch", "dtype", "layout"]
    assert by.loc["bmm:8x64x32x16:float16:nt|wgmma_gemm", parts].tolist() == ["gemm", 64, 32, 16, 8, "float16", "nt"]
    gemv = by.loc["gemv:33x17|warp_gemv"]
    assert (gemv["kind"], gemv["m"], gemv["n"], gemv["dtype"]) == ("gemv", 33, 17, "float32")
    assert gemv[["k", "batch", "layout"]].isna().all()
    assert by.loc["gemm:64x64x64|naive_gemm", "batch"] is pd.NA and by.loc["gemm:64x64x64|naive_gemm", "layout"] == "nn"
    for col in ("m", "n", "k", "batch", "step", "registers", "threads_per_block"):
        assert str(df[col].dtype) == "Int64", col
    R.write_results(df, str(tmp_path))
    csv = pd.read_csv(tmp_path / "results.csv", dtype=str, keep_default_na=False)
    assert csv.loc[0, "registers"] == "32" and csv.loc[0, "step"] == "1" and csv.loc[1, "registers"] == ""
    back = load_results(str(tmp_path))
    assert str(back["registers"].dtype) == "Int64" and back["registers"].iloc[0] == 32
    assert back["id"].is_unique and (back["id"] == df["id"]).all()


def test_schema_version_is_written_and_a_newer_one_refused(tmp_path):
    R.write_results(R.frame(_rows(), META), str(tmp_path))
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["schema"] == R.SCHEMA_VERSION and "schema" not in data["meta"] and "out_dir" not in data["meta"]
    back = load_results(str(tmp_path))
    assert back.attrs["schema"] == R.SCHEMA_VERSION and back.attrs["out_dir"] == str(tmp_path)
    data["schema"] = R.SCHEMA_VERSION + 1
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(R.ResultsError, match=f"schema {R.SCHEMA_VERSION + 1}, which this schedlab does not read") as e:
        load_results(str(tmp_path))
    assert len(str(e.value).splitlines()) == 1


def test_schema_0_is_upgraded_on_reading(tmp_path, monkeypatch):
    """A calibration sweep of schema 0 measured the same kernel in its fp32 and tf32 parts under one
    id, and wrote IR paths relative to the working directory it ran in."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "out" / "cal"
    (folder / "ir").mkdir(parents=True)
    (folder / "ir" / "k.cu").write_text("// cuda")
    job = "gemm:64x64x64|split_k_gemm|split_k=2"
    rows = [{"id": job, "workload": "gemm:64x64x64", "name": "split_k_gemm", "sweep_precision": p, "status": "ok",
             "time_ms": 1.0, "registers": 40.0, "step": 13.0, "role": "schedule", "precision": "fp32",
             "files": {"cuda": "out/cal/ir/k.cu", "ptx": "out/cal/ir/k.ptx"}} for p in ("fp32", "tf32")]
    (folder / "results.json").write_text(json.dumps({"meta": {"kind": "sweep-calibration"}, "rows": rows}))
    df = load_results(str(folder))
    assert list(df["id"]) == [f"{job}|fp32", f"{job}|tf32"]
    assert df["files"].iloc[0] == {"cuda": os.path.join("ir", "k.cu")}  # the file that exists, relative to the folder
    assert str(df["registers"].dtype) == "Int64" and df["step"].iloc[0] == 13


def test_files_are_relative_to_the_folder_and_only_those_that_exist(tmp_path):
    (tmp_path / "ir").mkdir()
    (tmp_path / "ir" / "a.cu").write_text("// cuda")
    rows = _rows()[:2]
    rows[0]["files"] = {"cuda": "ir/a.cu", "ptx": "ir/a.ptx"}
    rows[1]["files"] = {"cuda": "ir/gone.cu"}
    R.write_results(R.frame(rows, META), str(tmp_path))
    written = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert written[0]["files"] == {"cuda": os.path.join("ir", "a.cu")} and "files" not in written[1]
    R.write_results(R.frame(rows, META), str(tmp_path / "copy"))  # elsewhere the paths would dangle: dropped
    assert not any("files" in r for r in json.loads((tmp_path / "copy" / "results.json").read_text())["rows"])


# --- every published folder ----------------------------------------------------------------------------
PUBLISHED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reports", "results")
NOT_RESULTS = {"calibration": "a calibration folder", "tuning": "a tuning folder",
               "compare_h200_bench_gemm": "a comparison of two results folders",
               "tune_random_seed7": "a tune-random report", "tune_random_seed7_gemv": "a tune-random report",
               "floor_candidates": "no results here", "fp8_block_variants": "no results here",
               "floor_candidates_short_k": "no results here", "store_runs_flips": "no results here",
               "tune_random_seed12": "a tune-random report", "store_sectors": "no results here",
               "floor_candidates_seed15_16": "no results here", "fp8_block_scales_ring": "no results here",
               "fp8_block_steady_state": "no results here",
               "gemv_few_rows": "no results here", "few_rows_tma": "no results here",
               "fitted_tiles": "no results here", "simt_staged_store": "no results here",
               "bench_random_seed19": "no results here", "tune_random_seed20": "a tune-random report",
               "floor_candidates_h200": "no results here", "fp8_block_promotion_probes": "no results here",
               "cp_narrow_copies": "no results here", "column_split_choices": "no results here",
               "held_blocks": "no results here", "gemv_column_groups": "no results here",
               "floor_candidates_seed46_47": "no results here", "piece_bounds": "no results here",
               "gemv_column_partials": "no results here", "held_blocks_narrow": "no results here",
               "floor_candidates_seed48_49": "no results here", "small_fp16_products": "no results here",
               "wgmma_two_byte_copies": "no results here", "thin_x_loads": "no results here",
               "floor_candidates_seed50_51": "no results here", "split_sum_unroll": "no results here",
               "last_slice_sum": "no results here", "fp8_row_scales_early": "no results here",
               "cp_ring_latency": "no results here", "cp_ring_depth": "no results here",
               "fp8_block_stagger": "no results here", "decode_row_blocks": "no results here",
               "fp8_balanced_grid": "no results here", "fp8_block_unrolled": "no results here",
               "short_k_tc": "no results here", "floor_candidates_seed42_43": "no results here",
               "gemv_column_single_pass": "no results here",
               "gemv_mid_rows": "no results here",
               "floor_candidates_seed22_23": "no results here", "split_factors": "no results here",
               "short_k_registers": "no results here", "read_ceiling": "no results here",
               "gemv_epilogue": "no results here", "tma_store": "no results here",
               "tma_store_choices": "no results here", "tma_store_16bit": "no results here",
               "floor_candidates_seed30_31": "no results here", "floor_candidates_seed32_33": "no results here",
               "choices_wgmma_w_sat": "no results here", "pingpong_16bit": "no results here",
               "pad_pitch": "no results here", "slow_rows": "no results here",
               "thin_simt_tiles": "no results here", "floor_candidates_seed36_37": "no results here",
               "floor_candidates_seed40_41": "no results here",
               "tune_random_seed36": "a tune-random report", "tune_random_seed37": "a tune-random report",
               "tuned_ring_replay": "no results here", "tune_random_seed38": "a tune-random report",
               "gemv_column_serial": "no results here", "store_skew": "no results here",
               "bench_random_seed35": "no results here", "fp8_chunk_scales": "no results here",
               "fp8_pingpong_stages": "no results here", "fp8_best_before_after": "no results here",
               "fp8_block_experiments": "no results here", "fp8_uniform_wg": "no results here",
               "fp8_block_epilogue": "no results here", "fp8_block_experiments_2": "no results here",
               "fp8_tma_store_scales": "no results here", "fp8_pingpong_tma_store": "no results here"}


@pytest.fixture(scope="module")
def published():
    """Every folder reports/results/<gpu>/<name>[/...] that holds files: its frame, or the one-line
    error that says what it is."""
    out = {}
    for dirpath, _, names in sorted(os.walk(PUBLISHED)):
        folder = os.path.relpath(dirpath, PUBLISHED)
        if os.sep in folder and names:
            try:
                out[folder] = load_results(dirpath)
            except R.ResultsError as e:
                out[folder] = e
    return out


def test_every_published_folder_loads_or_says_what_it_is(published):
    errors = {k: v for k, v in published.items() if isinstance(v, Exception)}
    outer = {k: v for k, v in errors.items() if os.path.dirname(k) not in errors}  # not inside another such folder
    assert {os.path.basename(k) for k in outer} == set(NOT_RESULTS), sorted(outer)
    for folder, e in outer.items():
        assert str(e).count("\n") == 0 and NOT_RESULTS[os.path.basename(folder)] in str(e), str(e)
    loaded = {k for k, v in published.items() if not isinstance(v, Exception)}
    assert {os.path.join("NVIDIA_H200", n) for n in ("default", "bench_gemm", "bench_gemv", "gemv_sweep",
                                                      "bench_layouts", "bench_random", "calibration/sweep8")} <= loaded
    assert os.path.join("NVIDIA_H100_80GB_HBM3", "bench_gemm") in loaded and len(loaded) == 115


def test_published_results_are_tidy_with_unique_ids_and_no_dangling_files(published):
    for folder, df in published.items():
        if isinstance(df, Exception):
            continue
        with gzip.open(os.path.join(PUBLISHED, folder, "results.json.gz"), "rt") as f:
            assert json.load(f)["schema"] == R.SCHEMA_VERSION, folder  # written in the current schema
        assert df["id"].is_unique, (folder, df.loc[df["id"].duplicated(), "id"].iloc[0])
        assert df[["m", "n", "dtype", "precision", "kind"]].notna().all().all(), folder
        for col in (*R.COUNT_COLUMNS, "m", "n", "k", "batch"):
            assert col not in df or str(df[col].dtype) == "Int64", (folder, col)
        for files in df.get("files", pd.Series(dtype=object)).dropna():
            for path in files.values():
                assert os.path.isfile(os.path.join(PUBLISHED, folder, path)), (folder, path)


def test_docs_describe_every_column(published):
    from reports.engine.harness import timing_fields
    from reports.engine.measure import Timing
    from tests.helpers import documented_columns

    columns = {c for df in published.values() if not isinstance(df, Exception) for c in df.columns}
    columns |= set(R.frame(_rows()).columns) | set(timing_fields(Timing(1.0, 1.0, 1.0, 3, "x")))
    columns |= {"chosen_step", "chosen_params", "files", "traceback", "stderr", "error"}  # rows no published folder has
    undocumented = columns - documented_columns()
    assert not undocumented, f"columns missing from docs/results-columns.md: {sorted(undocumented)}"


def test_a_calibration_sweeps_parts_give_the_same_kernel_two_ids():
    """Its fp32 and tf32 parts time the same SIMT kernels: the part is in the id, so each row has its own."""
    from reports.engine.harness import job_id
    from reports.experiments.calibrate import calibration_jobs

    jobs = calibration_jobs(shapes=[(1500, 700, 300)], precisions=("fp32", "tf32"))
    assert len({j["id"] for j in jobs}) == len(jobs)
    shared = {job_id(j) for j in jobs if j["extra"]["sweep_precision"] == "fp32"} & \
        {job_id(j) for j in jobs if j["extra"]["sweep_precision"] == "tf32"}
    assert shared and all(j["id"] == f"{job_id(j)}|{j['extra']['sweep_precision']}" for j in jobs)
def test_the_run_summary_is_the_table_as_data():
    """``schedlab run --json``: the rows in the table's order (steps in ladder order, then the
    baselines), the table's figures as numbers (null where missing), the run's provenance."""
    df = R.frame(_rows(), META)
    s = json.loads(json.dumps(summary(df, out_dir="out/x", report=None)))  # plain JSON through and through
    assert s["out_dir"] == "out/x" and s["report"] is None and s["complete"] is True
    assert s["provenance"]["gpu"] == "Test GPU" and s["ceilings"]["copy_gbps"] == 1000.0
    first = [r["name"] for r in s["rows"] if r["workload"] == "gemm:64x64x64"]
    assert first == ["naive_gemm", "thread_1d_gemm", "thread_2d_gemm", "shared_cache_gemm", "wgmma_tf32_gemm",
                     "cublas", "cublas_tf32"]
    rows = {(r["workload"], r["name"]): r for r in s["rows"]}
    shared = rows[("gemm:64x64x64", "shared_cache_gemm")]
    assert shared["pct_cublas"] == pytest.approx(50.0) and shared["speedup_vs_prev"] == pytest.approx(2.0)
    assert shared["params"] == {"tile_m": 16} and shared["time_ms"] == 1.0
    assert rows[("gemm:64x64x64", "naive_gemm")]["step"] == "gemm 1" and rows[("gemm:64x64x64", "cublas")]["step"] is None
    failed = rows[("gemm:64x64x64", "thread_2d_gemm")]
    assert failed["status"] == "error" and failed["error"] == "boom" and failed["time_ms"] is None


def _boxes_overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_roofline_labels_do_not_overlap_and_the_legend_leaves_the_roof_clear():
    """Two labelled points at nearly the same place (the fastest step and cuBLAS at 37.0 and 37.3
    TFLOP/s) get labels apart; the legend covers no part of the roof line (measured on the
    figure's renderer); nothing is cut off at the figure's edge."""
    import numpy as np
    from matplotlib.text import Text

    w, v = "gemm:1024x512x2048", "gemv:16384x128"
    rows = [{"workload": w, "name": n, "role": role, "step": s, "status": "ok", "device": "gpu", "precision": "fp32",
             "time_ms": 2 * 1024 * 512 * 2048 / tflops / 1e9}
            for n, role, s, tflops in (("naive_gemm", "schedule", 1, 0.2), ("warp_tiled_gemm", "schedule", 11, 20.0),
                                       ("best_gemm", "schedule", 16, 37.0), ("cublas", "baseline", None, 37.3),
                                       ("tvm_dlight", "baseline", None, 14.0))]
    rows += [{"workload": v, "name": n, "role": role, "step": s, "status": "ok", "device": "gpu", "precision": "fp32",
              "time_ms": t} for v, n, role, s, t in (
        (v, "multi_row_gemv", "schedule", 3, 0.0105), (v, "cublas", "baseline", None, 0.0104),
        ("gemv:16384x16", "gemv_dispatch", "schedule", 6, 0.008), ("gemv:16384x32", "gemv_dispatch", "schedule", 6, 0.009))]
    meta = {**META, "ceilings": {"copy_gbps": 4250.0, "fp32_tflops": 51.3, "fp16_tflops": 700.0}}
    fig = charts.roofline_figure(R.frame(rows, meta))
    ax = fig.axes[0]
    fig.canvas.draw()  # every artist in its place, as saved
    renderer = fig.canvas.get_renderer()
    assert len(ax.texts) == 6 and {"best_gemm", "multi_row_gemv", "gemv_dispatch"} <= {t.get_text() for t in ax.texts}
    boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the text (an annotation's own adds its line)
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _boxes_overlap(a, b)]
    legend = ax.get_legend().get_window_extent(renderer)
    roof = ax.lines[0]
    xs = np.logspace(*np.log2(ax.get_xlim()), 2000, base=2)  # the roof, densely, where the axes show it
    pts = ax.transData.transform(np.column_stack([xs, np.minimum(51.3, 4.25 * xs)]))
    assert np.allclose(roof.get_ydata()[[0, -1]], np.minimum(51.3, 4.25 * roof.get_xdata()[[0, -1]]))
    inside = (pts[:, 0] >= legend.x0) & (pts[:, 0] <= legend.x1) & (pts[:, 1] >= legend.y0) & (pts[:, 1] <= legend.y1)
    assert not inside.any()
    page = fig.bbox
    for box in [legend, *boxes]:
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    import matplotlib.pyplot as plt

    plt.close(fig)
