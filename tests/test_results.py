"""The data layer: rows → DataFrame with derived columns per workload group, the files written from
it, and any results directory loaded back."""

import json

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
    assert (tmp_path / "results.csv").read_text().splitlines()[0].startswith("workload,name")


def test_two_runs_compare_in_a_few_lines(tmp_path):
    a, b = tmp_path / "h100", tmp_path / "h200"
    R.write_results(R.frame(_rows(), META), str(a))
    faster = [dict(r, time_ms=r["time_ms"] / 2) if "time_ms" in r else r for r in _rows()]
    R.write_results(R.frame(faster, META), str(b))
    both = load_results(str(a)).merge(load_results(str(b)), on=["workload", "name"], suffixes=("_a", "_b"))
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
