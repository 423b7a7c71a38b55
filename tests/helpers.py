"""Shared test helpers: the default and odd workloads, building one schedule, and checking one on
the GPU through the lab's measurement path (reports.engine.harness, in this process)."""

from reports.engine import build as B
from reports.engine.harness import check_in_process

DEFAULT_WORKLOADS = {"gemm": ["gemm:1024x512x2048"],
                     "gemv": ["gemv:16384x16", "gemv:16384x32", "gemv:16384x128"],
                     "gemv_t": ["gemv_t:16384x128"]}
ODD_WORKLOADS = {"gemm": ["gemm:1000x500x2000", "gemm:3x5x7", "gemm:1x4097x1", "gemm:1000x500x2001"],
                 "gemv": ["gemv:16384x17", "gemv:1x4097", "gemv:3x5", "gemv:1000x130"],
                 "gemv_t": ["gemv_t:1x4097", "gemv_t:1000x17", "gemv_t:3x5"]}


STEP_WORKLOADS = {"decode_gemm": "gemm:16x1024x2048:float16:nt",  # a step for one shape class: one of its own
                  "thin_tc_gemm": "gemm:16x1000x300:float16",  # a thin product: its weight B stored K × N
                  "short_k_gemm": "gemm:1024x512x16",  # K ≤ 64
                  "short_k_tc_gemm": "gemm:1024x512x27:float16",  # K ≤ 64, 16-bit inputs
                  "fp8_tma_gemm": "gemm:1024x512x2048:float8_e4m3fn:nt:out=bfloat16",  # FP8: K-major operands (nt)
                  "fp8_block_scaled_gemm": "gemm:1024x512x2048:float8_e4m3fn:nt:scale=block:out=bfloat16",
                  "best_fp8_gemm": "gemm:1024x512x2048:float8_e4m3fn:nt:out=bfloat16"}
# the epilogue steps' default: a linear layer's (bf16, bias, GELU tanh, a residual), not tile multiples
EPILOGUE_WORKLOAD = "gemm:1000x500x2001:bfloat16:out=bfloat16:bias:gelu_tanh:residual"


def default_workload(spec) -> str:
    """The largest default workload of the spec's kind, in an input type the spec takes (the step's
    own, :data:`STEP_WORKLOADS`, for a step made for one class of shapes; for the epilogue steps,
    :data:`EPILOGUE_WORKLOAD`)."""
    if spec.name in STEP_WORKLOADS:
        return STEP_WORKLOADS[spec.name]
    if "epilogue" in spec.tags:
        return EPILOGUE_WORKLOAD
    text = DEFAULT_WORKLOADS[spec.kind][-1]
    return text if "float32" in spec.input_dtypes else f"{text}:{spec.input_dtypes[0]}"


def build_spec(spec, workload, **params):
    """Built of ``spec`` on ``workload`` with ``params``, checked and resolved (a best_* choice made once)."""
    _, wl, _, resolved = B.resolve_named(spec.name, workload, params)
    return B.build_resolved(resolved, wl, B.cuda_target())


_BUILT: dict = {}


def cached_build(name: str, workload: str, **params):
    """:func:`build_spec` of the registered step ``name``, built once per (step, workload, parameters)
    in this process: the tests of a file (one worker's, with --dist loadfile) share their builds."""
    key = (name, workload, tuple(sorted(params.items())))
    if key not in _BUILT:
        from schedules import get

        _BUILT[key] = build_spec(get(name), workload, **params)
    return _BUILT[key]


def without_piece_test(sch):
    """``sch`` with the piece test of its SIMT write-back taken off (schedules.common.whole_piece_bounds):
    the write-back as the lab built it before, each store with its own bounds test."""
    from schedules.common import PIECE_BOUNDS_KEY

    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if PIECE_BOUNDS_KEY in sch.get(block).annotations:
            sch.unannotate(block, PIECE_BOUNDS_KEY)
    return sch


def run_on_gpu(harness, spec, workload, **params):
    """Build, run once on fresh random inputs into a NaN-poisoned output, check against float64
    (reports.engine.harness.measure_job: the run's and the benchmarks' own check). Returns the error;
    fails if any output was left unwritten."""
    row = check_in_process(spec.name, workload, params)
    assert row["status"] in ("ok", "wrong"), row.get("error")
    assert "not written" not in str(row.get("error", "")), row["error"]
    return row["rel_error"]


def rounded_output_bound(workload: str) -> float:
    """The error bound of a kernel that stores its product in another way than the fragments do
    (staged, or summed by stream-K's fix-up): a float32 C as exact as before (1e-4), a 16-bit D
    within its one rounding (2^-8 for bf16: the harness's own check)."""
    from schedules import parse_workload

    return 1e-4 if parse_workload(workload).out_dtype == "float32" else 2.0 ** -8


def documented_columns() -> set[str]:
    """The results columns docs/results-columns.md describes (the first cell of its columns table)."""
    import os
    import re

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "results-columns.md")
    with open(path, encoding="utf-8") as f:
        text = f.read().split("## Columns", 1)[1].split("\n## ", 1)[0]
    return {name for line in text.splitlines() if line.startswith("| `")
            for name in re.findall(r"`([A-Za-z0-9_]+)`", line.split("|")[1])}
