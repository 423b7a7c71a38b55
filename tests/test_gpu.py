"""GPU correctness of the classic steps (marker gpu: skipped without a GPU): relative error under
1e-5 against float64 on the default shapes and on shapes that are not tile multiples. The fast
GEMM steps and the GEMV family have their own GPU tests (test_gemm_fast.py, test_gemv_family.py)."""

import pytest

from schedules import all_schedules
from tests.helpers import DEFAULT_WORKLOADS, ODD_WORKLOADS, run_on_gpu

CLASSIC = [s for s in all_schedules(ladder="gemm") if s.step <= 9] + \
    [s for s in all_schedules(ladder="gemv") if s.name in ("warp_gemv", "vectorized_gemv", "multi_row_gemv",
                                                           "gemv_dispatch")]
CASES = [(s, w) for s in CLASSIC for w in DEFAULT_WORKLOADS[s.kind] + ODD_WORKLOADS[s.kind]]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[1]}")
def test_correct_on_gpu(case, harness):
    spec, workload = case
    err = run_on_gpu(harness, spec, workload)
    assert err < 1e-5, f"{spec.name} on {workload}: relative error {err:.3g}"


CUBLAS_CASES = [("cublas", w) for w in ("gemm:256x192x320", "gemm:256x192x320:float16", "gemm:256x192x320:bfloat16",
                                        "gemv:1000x130", "gemv:1000x130:float16", "gemv_t:1000x130",
                                        "gemv_t:1000x130:float16")] + [("cublas_tf32", "gemm:256x192x320")]


@pytest.mark.gpu
@pytest.mark.parametrize("name,workload", CUBLAS_CASES)
def test_cublas_baseline_for_every_kind_and_type(name, workload):
    """One cuBLAS call per (kind, input type, output type) through the run's and the benchmarks'
    measurement path: it runs, writes an fp32 output of the kernels' shape, and is right."""
    from reports.engine.harness import check_in_process

    row = check_in_process(name, workload, time=True, budget_s=0.02)
    assert row["status"] == "ok", row.get("error")
    assert row["time_ms"] > 0 and "→ torch.float32" in row["cublas_call"]
    assert row["rel_error"] < (2e-3 if name == "cublas_tf32" else 1e-4)
