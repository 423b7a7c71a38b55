"""`schedlab run` on a machine without a GPU, and the fault isolation of each schedule's process."""

import json
import os

import pytest

from reports.runner import run, run_isolated
from scripts.schedlab import main


def test_a_crashing_schedule_becomes_an_error_row():
    row = run_isolated({"workload": "gemm:8x8x8", "name": "x", "mode": "abort"}, 30, module="tests.crash_worker")
    assert row["status"] == "error" and "illegal memory access" in row["error"]


def test_a_hanging_schedule_is_stopped():
    row = run_isolated({"workload": "gemm:8x8x8", "name": "x", "mode": "hang"}, 2, module="tests.crash_worker")
    assert row["status"] == "error" and "timed out" in row["error"]


def test_a_worker_without_a_result_is_an_error():
    row = run_isolated({"workload": "gemm:8x8x8", "name": "x", "mode": "garbage"}, 30, module="tests.crash_worker")
    assert row["status"] == "error"


def test_a_bad_config_is_that_rows_error_and_the_run_goes_on(tmp_path):
    res = run(["gemm:64x64x64"], ["shared_cache_gemm", "naive_gemm"], baseline_names=[], out_dir=str(tmp_path),
              params={"shared_cache_gemm": {"tile_m": 64, "tile_n": 64}}, progress=False)
    rows = {r["name"]: r for r in res["rows"]}
    assert rows["shared_cache_gemm"]["status"] == "error"
    assert "threads per block" in rows["shared_cache_gemm"]["error"]
    assert rows["naive_gemm"]["status"] in ("ok", "no-gpu")


@pytest.mark.skipif(__import__("tests.conftest", fromlist=["HAS_GPU"]).HAS_GPU, reason="checks the no-GPU path")
def test_run_without_gpu_builds_everything_and_invents_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--workload", "gemm:96x80x40", "--workload", "gemv:33x17", "--schedules",
                 "shared_cache_gemm,thread_tiling_gemm,warp_gemv", "--baselines", "numpy_cpu,cublas",
                 "--out", str(out), "--quiet", "--strict"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True
    rows = {(r["workload"], r["name"]): r for r in res["rows"]}
    for key in [("gemm:96x80x40", "shared_cache_gemm"), ("gemm:96x80x40", "thread_tiling_gemm"),
                ("gemv:33x17", "warp_gemv")]:
        r = rows[key]
        assert r["status"] == "no-gpu" and "time_ms" not in r and "tflops" not in r
        assert r["registers"] > 0 and r["spill_bytes"] == 0
        for stage in ("scheduled", "lowered", "cuda", "ptx", "ptxas"):
            assert os.path.getsize(r["files"][stage]) > 0
    assert rows[("gemm:96x80x40", "numpy_cpu")]["status"] == "ok"
    assert rows[("gemm:96x80x40", "numpy_cpu")]["rel_error"] < 1e-5
    assert ("gemm:96x80x40", "cublas") not in rows  # no GPU: no cuBLAS row rather than an invented one
    table = (out / "table.md").read_text()
    assert "no GPU" in table and "shared_cache_gemm" in table
    assert (out / "results.csv").read_text().count("\n") == len(res["rows"]) + 1
    assert "no GPU" in capsys.readouterr().out


@pytest.mark.skipif(__import__("tests.conftest", fromlist=["HAS_GPU"]).HAS_GPU, reason="checks the no-GPU path")
def test_gemv_benchmark_without_gpu_builds_and_times_nothing(tmp_path):
    from scripts import bench_gemv

    bench_gemv.main(["--workload", "gemv:64x64", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "gemv_bench.json").read_text())["rows"]
    assert rows and {r["status"] for r in rows} == {"no-gpu"}
    assert not any(k.startswith(("us_", "gbps_")) for r in rows for k in r)
    assert all(r["spill_bytes"] == 0 and r["registers"] > 0 for r in rows if "registers" in r)


def test_the_fork_server_isolates_each_job():
    from reports.runner import Zygote

    z = Zygote("tests.crash_worker:handle")
    try:
        ok1 = z({"workload": "w", "name": "a", "mode": "ok"}, 30)
        crash = z({"workload": "w", "name": "b", "mode": "abort"}, 30)
        hang = z({"workload": "w", "name": "c", "mode": "hang"}, 2)
        garbage = z({"workload": "w", "name": "d", "mode": "garbage"}, 30)
        ok2 = z({"workload": "w", "name": "e", "mode": "ok"}, 30)
    finally:
        z.close()
    assert ok1["status"] == ok2["status"] == "ok" and ok1["pid"] != ok2["pid"]  # a process per job
    assert crash["status"] == "error" and "SIGABRT" in crash["error"] and "illegal memory access" in crash["error"]
    assert hang["status"] == "error" and "timed out" in hang["error"]
    assert garbage["status"] == "error"


def test_run_with_the_fork_server_gives_the_same_rows(tmp_path):
    kw = dict(baseline_names=["numpy_cpu"], progress=False)
    a = run(["gemv:33x17"], ["warp_gemv", "multi_row_gemv"], out_dir=str(tmp_path / "a"), **kw)
    b = run(["gemv:33x17"], ["warp_gemv", "multi_row_gemv"], out_dir=str(tmp_path / "b"), fork=True, **kw)
    strip = lambda res: [(r["name"], r["status"], r.get("registers")) for r in res["rows"]]  # noqa: E731
    assert strip(a) == strip(b)
    assert all(r["status"] in ("ok", "no-gpu") for r in b["rows"])


def test_a_jobs_own_environment_reaches_its_process_and_no_other(monkeypatch):
    """``job["env"]`` (how --reselect points each candidate's tuned_gemm at its own file) is set in
    that job's process, fresh or forked, and not in the next job's or in ours."""
    from reports.runner import Zygote

    var = "SCHEDLAB_TEST_JOB_ENV"
    monkeypatch.delenv(var, raising=False)
    job = {"workload": "w", "name": "a", "mode": "env", "variable": var}
    fresh = run_isolated({**job, "env": {var: "one"}}, 30, module="tests.crash_worker")
    z = Zygote("tests.crash_worker:handle")
    try:
        forked = z({**job, "env": {var: "two"}}, 30)
        after = z(job, 30)
    finally:
        z.close()
    assert (fresh["value"], forked["value"], after["value"]) == ("one", "two", None)
    assert var not in os.environ
