"""GPU correctness of the classic steps (marker gpu: skipped without a GPU): relative error under
1e-5 against float64 on the default shapes and on shapes that are not tile multiples. The fast
GEMM steps and the GEMV family have their own GPU tests (test_gemm_fast.py, test_gemv_family.py)."""

import pytest

from schedules import all_schedules
from tests.helpers import DEFAULT_WORKLOADS, ODD_WORKLOADS, run_on_gpu

CLASSIC = [s for s in all_schedules() if s.step <= 12 or s.name == "gemv_dispatch"]
CASES = [(s, w) for s in CLASSIC for w in DEFAULT_WORKLOADS[s.kind] + ODD_WORKLOADS[s.kind]]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[1]}")
def test_correct_on_gpu(case, harness):
    spec, workload = case
    err = run_on_gpu(harness, spec, workload)
    assert err < 1e-5, f"{spec.name} on {workload}: relative error {err:.3g}"
