"""`schedlab run` on a machine without a GPU, and the isolation of every job in a worker process."""

import json
import os

import pytest

from reports.engine.isolate import Pool
from reports.experiments.run import plan, run
from scripts.schedlab import main
from tests.conftest import HAS_GPU


def test_each_failure_is_that_jobs_row_and_the_pool_goes_on():
    jobs = [{"workload": "w", "name": n, "mode": m} for n, m in
            (("a", "ok"), ("b", "abort"), ("c", "hang"), ("d", "print"), ("e", "raise"), ("f", "ok"))]
    with Pool("tests.crash_worker:handle", workers=1, timeout=3) as pool:
        rows = pool.map(jobs)
    by = {r["name"]: r for r in rows}
    assert [r["name"] for r in rows] == list("abcdef")  # job order, every job a row
    assert by["a"]["status"] == by["d"]["status"] == by["f"]["status"] == "ok"
    assert by["b"]["status"] == "error" and "SIGABRT" in by["b"]["error"] and "illegal memory access" in by["b"]["error"]
    assert by["c"]["status"] == "error" and "timed out after 3 s" in by["c"]["error"]
    assert by["e"]["status"] == "error" and "boom in the job" in by["e"]["error"]
    assert by["a"]["pid"] != by["d"]["pid"]  # the worker that faulted (and the hung one) was replaced
    assert by["d"]["pid"] == by["f"]["pid"]  # an exception in a job does not cost its worker


def test_workers_are_reused_and_run_in_parallel():
    jobs = [{"workload": "w", "name": str(n), "mode": "ok"} for n in range(6)]
    with Pool("tests.crash_worker:handle", workers=2, timeout=30) as pool:
        rows = pool.map(jobs)
        again = pool.map(jobs[:2])
    pids = {r["pid"] for r in rows}
    assert len(pids) == 2 and {r["pid"] for r in again} <= pids


def test_a_worker_gets_the_pools_environment_and_directory(monkeypatch, tmp_path):
    """The pool's environment, and the caller's working directory: a job's relative paths (its IR
    files, a tuning directory) are the caller's (the installed lab: tests/test_install.py)."""
    monkeypatch.chdir(tmp_path)
    with Pool("tests.crash_worker:handle", workers=1, timeout=30, env={"SCHEDLAB_X": "one"}) as pool:
        (row,) = pool.map([{"workload": "w", "name": "a", "mode": "ok", "variable": "SCHEDLAB_X"}])
    assert row["value"] == "one" and "SCHEDLAB_X" not in os.environ
    assert row["cwd"] == str(tmp_path)


def test_a_bad_config_is_that_rows_error_and_the_run_goes_on(tmp_path):
    df = run(["gemm:64x64x64"], ["shared_cache_gemm", "naive_gemm"], baselines=[], out_dir=str(tmp_path),
             params={"shared_cache_gemm": {"tile_m": 64, "tile_n": 64}}, progress=False, report=False)
    rows = df.set_index("name")
    assert rows.loc["shared_cache_gemm", "status"] == "error"
    assert "threads per block" in rows.loc["shared_cache_gemm", "error"]
    assert rows.loc["naive_gemm", "status"] in ("ok", "no-gpu")


def test_fp16_plan_leaves_out_the_fp32_only_steps_and_names_them():
    jobs, left = plan(["gemm:256x256x256:float16"], gpu=True)
    names = {j["name"] for j in jobs}
    assert "best_fp16_gemm" in names and "naive_gemm" in names
    assert not {"warp_tiled_gemm", "best_gemm", "split_k_gemm"} & names
    assert {"warp_tiled_gemm", "best_gemm", "split_k_gemm", "vectorized_shared_gemm"} <= set(left["gemm:256x256x256:float16"])
    assert "numpy_cpu" not in names and "cublas" in names  # CPU baselines on fp32 workloads only
    with pytest.raises(ValueError, match="warp_tiled_gemm takes float32 inputs, not float16"):
        plan(["gemm:256x256x256:float16"], ["warp_tiled_gemm"])


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_gemv_benchmark_without_gpu_builds_and_times_nothing(tmp_path):
    assert main(["bench-gemv", "--workload", "gemv:64x64", "--out", str(tmp_path), "--quiet"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert rows and {r["status"] for r in rows} <= {"no-gpu", "unavailable"}
    assert not any(k.startswith(("time_", "gbps")) for r in rows for k in r)
    assert all(r["spill_bytes"] == 0 and r["registers"] > 0 for r in rows if "registers" in r)


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_gemm_benchmark_without_gpu_builds_and_times_nothing(tmp_path):
    assert main(["bench-gemm", "--shapes", "256x128x64", "--precisions", "fp32,fp16", "--out", str(tmp_path),
                 "--quiet"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    built = {r["name"] for r in rows if r["status"] == "no-gpu"}
    assert {"best_gemm", "best_fp16_gemm", "wgmma_gemm", "tvm_dlight"} <= built
    assert not any("time_ms" in r for r in rows)
    assert "% cuBLAS" in (tmp_path / "table.md").read_text()
