"""GPU correctness of every schedule (marker gpu: skipped without a GPU): relative error under
1e-5 against float64 on the default shapes and on shapes that are not tile multiples."""

import pytest

from schedules import all_schedules
from tests.helpers import DEFAULT_WORKLOADS, ODD_WORKLOADS, run_on_gpu

CASES = [(s, w) for s in all_schedules() for w in DEFAULT_WORKLOADS[s.kind] + ODD_WORKLOADS[s.kind]
         if s.kind in DEFAULT_WORKLOADS]


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[1]}")
def test_correct_on_gpu(case, harness):
    spec, workload = case
    err = run_on_gpu(harness, spec, workload)
    assert err < 1e-5, f"{spec.name} on {workload}: relative error {err:.3g}"
