"""Shared test helpers: the default and odd workloads, building and running one schedule."""

import numpy as np

from reports import build as B
from reports import measure as M
from schedules import parse_workload

DEFAULT_WORKLOADS = {"gemm": ["gemm:1024x512x2048"],
                     "gemv": ["gemv:16384x16", "gemv:16384x32", "gemv:16384x128"],
                 "gemv_t": ["gemv_t:16384x128"]}
ODD_WORKLOADS = {"gemm": ["gemm:1000x500x2000", "gemm:3x5x7", "gemm:1x4097x1", "gemm:1000x500x2001"],
                 "gemv": ["gemv:16384x17", "gemv:1x4097", "gemv:3x5", "gemv:1000x130"],
                 "gemv_t": ["gemv_t:1x4097", "gemv_t:1000x17", "gemv_t:3x5"]}


def default_workload(spec) -> str:
    """The largest default workload of the spec's kind, in an input type the spec takes."""
    text = DEFAULT_WORKLOADS[spec.kind][-1]
    return text if "float32" in spec.input_dtypes else f"{text}:{spec.input_dtypes[0]}"


def build_spec(spec, workload, **params):
    wl = parse_workload(workload) if isinstance(workload, str) else workload
    cfg = spec.config(**params)
    return B.build_config(spec.build(wl, cfg), cfg, B.cuda_target())


def run_on_gpu(harness, spec, workload, **params):
    """Build, run once on fresh random inputs into a NaN-poisoned output; return the error
    (reports.measure.product_error: relative to ‖ref‖, or to ‖|A|·|B|‖ where ‖ref‖ can cancel)."""
    wl = parse_workload(workload)
    built = build_spec(spec, wl, **params)
    inputs = M.random_inputs(wl)
    shape, dtype = wl.arg_shapes()[-1]
    bufs = [harness.to_device(x) for x in inputs] + [harness.empty(shape, dtype)]
    harness.poison(bufs[-1])
    built.executable["main"](*[harness.tvm_view(b) for b in bufs])
    out = harness.to_numpy(bufs[-1])
    assert not np.isnan(out).any(), f"{int(np.isnan(out).sum())} outputs never written"
    return M.product_error(wl, out, inputs)
