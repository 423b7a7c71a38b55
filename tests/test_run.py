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
def test_run_without_gpu_builds_everything_and_invents_nothing(tmp_path, capsys, monkeypatch):
    """Also: a relative --out from another folder (the workers run in the lab's) holds the IR that
    results.json names, and a complete run replaces an earlier run's files, leaving none of them
    (its page, a cut-short run's partial folder) beside results they were not made from."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "rel" / "run"
    (out / "partial").mkdir(parents=True)
    (out / "partial" / "results.json").write_text('{"meta": {"complete": false}, "rows": []}')
    (out / "report.html").write_text("<p>an earlier run's page</p>")
    assert main(["run", "--workload", "gemm:96x80x40", "--workload", "gemv:33x17", "--schedules",
                 "shared_cache_gemm,thread_tiling_gemm,warp_gemv", "--baselines", "numpy_cpu,cublas",
                 "--out", os.path.join("rel", "run"), "--quiet", "--strict", "--no-report"]) == 0
    assert sorted(os.listdir(out)) == ["ir", "results.csv", "results.json", "table.md"]
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["complete"] is True
    # the IR under the run's folder, named relative to it
    assert all(path.startswith("ir" + os.sep) for r in res["rows"] for path in r.get("files", {}).values())
    rows = {(r["workload"], r["name"]): r for r in res["rows"]}
    for key in [("gemm:96x80x40", "shared_cache_gemm"), ("gemm:96x80x40", "thread_tiling_gemm"),
                ("gemv:33x17", "warp_gemv")]:
        r = rows[key]
        assert r["status"] == "no-gpu" and "time_ms" not in r and "tflops" not in r
        assert r["registers"] > 0 and r["spill_bytes"] == 0
        for stage in ("scheduled", "lowered", "cuda", "ptx", "ptxas"):
            assert os.path.getsize(out / r["files"][stage]) > 0
    assert rows[("gemm:96x80x40", "shared_cache_gemm")]["ladder"] == "gemm 4"
    assert rows[("gemm:96x80x40", "numpy_cpu")]["status"] == "ok"
    assert rows[("gemm:96x80x40", "numpy_cpu")]["rel_error"] < 1e-5
    assert ("gemm:96x80x40", "cublas") not in rows  # no GPU: no cuBLAS row rather than an invented one
    table = (out / "table.md").read_text()
    assert "no GPU" in table and "shared_cache_gemm" in table and "| gemm 4 " in table
    assert (out / "results.csv").read_text().count("\n") == len(res["rows"]) + 1
    assert "no GPU" in capsys.readouterr().out


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_gemv_benchmark_without_gpu_builds_and_times_nothing(tmp_path):
    assert main(["bench-gemv", "--workload", "gemv:64x64", "--out", str(tmp_path), "--quiet"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert rows and {r["status"] for r in rows} <= {"no-gpu", "unavailable"}
    assert not any(k.startswith(("time_", "gbps")) for r in rows for k in r)
    assert all(r["spill_bytes"] == 0 and r["registers"] > 0 for r in rows if "registers" in r)


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
def test_gemm_benchmark_without_gpu_builds_and_times_nothing(tmp_path):
    # fp32 (dlight and best_gemm) and bf16 (the Hopper ladder and best_fp16_gemm): fp16 would add
    # dlight's and the WMMA steps' builds of the same size (28 s of the suite) and test nothing more
    assert main(["bench-gemm", "--shapes", "256x128x64", "--precisions", "fp32,bf16", "--out", str(tmp_path),
                 "--quiet"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    built = {r["name"] for r in rows if r["status"] == "no-gpu"}
    assert {"best_gemm", "best_fp16_gemm", "wgmma_gemm", "tvm_dlight"} <= built
    assert not any("time_ms" in r for r in rows)
    assert "% cuBLAS" in (tmp_path / "table.md").read_text()
