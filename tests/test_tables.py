"""The derived figures and the report files, from a results dict shaped like a real run's."""

import pytest

from reports import charts, tables


def _results():
    rows = [
        {"workload": "gemm:64x64x64", "name": "naive_gemm", "role": "schedule", "step": 1, "status": "ok",
         "time_ms": 8.0, "device": "gpu"},
        {"workload": "gemm:64x64x64", "name": "thread_1d_gemm", "role": "schedule", "step": 2, "status": "ok",
         "time_ms": 2.0, "device": "gpu"},
        {"workload": "gemm:64x64x64", "name": "thread_2d_gemm", "role": "schedule", "step": 3, "status": "error",
         "error": "boom"},
        {"workload": "gemm:64x64x64", "name": "shared_cache_gemm", "role": "schedule", "step": 4, "status": "ok",
         "time_ms": 1.0, "device": "gpu"},
        {"workload": "gemm:64x64x64", "name": "wgmma_tf32_gemm", "role": "schedule", "step": 23, "status": "ok",
         "time_ms": 0.1, "device": "gpu"},
        {"workload": "gemm:64x64x64", "name": "cublas", "role": "baseline", "status": "ok", "time_ms": 0.5,
         "device": "gpu"},
    ]
    prov = {"gpu": "Test GPU", "tvm": "0.27", "commit": "abc", "date": "today"}
    return {"provenance": prov, "ceilings": {"copy_gbps": 1000.0, "fp32_tflops": 10.0, "fp16_tflops": 20.0},
            "rows": tables.derive(rows)}


def test_speedups_skip_failed_steps_and_compare_with_cublas():
    rows = {r["name"]: r for r in _results()["rows"]}
    assert rows["thread_1d_gemm"]["speedup_vs_first"] == pytest.approx(4.0)
    assert rows["shared_cache_gemm"]["speedup_vs_prev"] == pytest.approx(2.0)  # over step 2: step 3 failed
    assert rows["shared_cache_gemm"]["pct_cublas"] == pytest.approx(50.0)
    assert rows["shared_cache_gemm"]["tflops"] == pytest.approx(2 * 64**3 / 1e-3 / 1e12)
    assert "tflops" not in rows["thread_2d_gemm"]
    # a tf32 step is not held against cuBLAS in full fp32 (the bench compares it with cuBLAS TF32)
    assert "pct_cublas" not in rows["wgmma_tf32_gemm"] and rows["wgmma_tf32_gemm"]["tflops"]


def test_markdown_names_provenance_and_errors():
    md = tables.markdown(_results())
    assert "Test GPU" in md and "commit abc" in md
    assert "**error**" in md and "`thread_2d_gemm` on gemm:64x64x64: boom" in md


def test_charts_are_written(tmp_path):
    res = _results()
    for fn, name in ((charts.time_chart, "t.png"), (charts.roofline_chart, "r.png")):
        path = fn(res, str(tmp_path / name))
        assert path and (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_a_cut_short_run_says_so():
    assert "Partial" in tables.markdown({**_results(), "complete": False})
    assert "Partial" not in tables.markdown({**_results(), "complete": True})
