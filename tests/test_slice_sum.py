"""Split-K summed by the last slice to finish (``last_slice_sum`` on the warp-specialized TMA kernel,
schedules/slice_sum.py): one kernel, no sum kernel; the count and the sum in the PTX (a fence, the
consumers' named barrier, one atomic increment that wraps, the partials' pairs loaded after an acquire fence); the knob refused where it
cannot apply; (on a GPU) the products right, bit for bit the sum kernel's, and again on every later
call (the counters reset themselves)."""

import pytest

from schedules import ScheduleParamError, get, parse_workload
from tests.helpers import build_spec, rounded_output_bound, run_on_gpu

FUSED = "gemm:61x4608x3584:bfloat16:nt:out=bfloat16:bias:gelu_tanh"
FUSED_PARAMS = dict(block_m=64, consumers=1, block_n=128, split_k=3, staged_store=True)


@pytest.fixture(scope="module")
def fused_build():
    # 61 rows against a 4608 x 3584 weight, bias and GELU, a bf16 output: 36 tiles of 64 x 128, 3 slices
    return build_spec(get("persistent_gemm"), FUSED, last_slice_sum=True, **FUSED_PARAMS)


def test_the_last_slice_sums_in_one_kernel(fused_build):
    from reports.engine.kernel import launches_of

    b = fused_build
    assert "for 'sm_90a'" in b.device.ptxas_log
    assert len(b.device.kernels) == 1 and all(k.spills == 0 for k in b.device.kernels)
    (launch,) = launches_of(b.host)  # the sum kernel is gone
    assert launch.grid[0] == 36 * 3
    ptx = b.device.ptx
    assert ptx.count("atom.global.inc.u32") == 1  # one count per unit, by one thread
    assert "bar.sync" in ptx and ptx.count("fence.acq_rel.gpu") == 2  # before the count, before the sum's loads
    assert ".global .align 4 .b8 schedlab_slice_count_36[144]" in ptx  # a counter per tile, in the module
    assert ptx.count("ld.global.v2.f32") >= 3 * 16  # every slice's pair at each of a thread's output pairs
    assert "tanh.approx" in ptx  # the epilogue is the main kernel's now
    assert "P = T.alloc_buffer" in b.lowered  # the partials still go through the workspace
    cfg = get("persistent_gemm").config(last_slice_sum=True, **FUSED_PARAMS)
    assert cfg.describe().endswith("sk3 lastsum")
    assert cfg.workspace_bytes(parse_workload(FUSED)) == 4 * 3 * 61 * 4608


def test_without_the_knob_the_sum_kernel_stays():
    from reports.engine.kernel import launches_of

    b = build_spec(get("persistent_gemm"), FUSED, **FUSED_PARAMS)
    assert len(launches_of(b.host)) == 2 and "atom.global.inc" not in b.device.ptx


def test_last_slice_sum_is_refused_where_it_cannot_apply():
    wl = parse_workload("gemm:128x1024x4096:float16")
    step = get("persistent_gemm")
    for params, match in [(dict(split_k=1), "needs split_k ≥ 2"), (dict(split_k=2, cluster_sum=True), "cluster_sum"),
                          (dict(split_k=2, tma_store=True), "tma_store")]:
        with pytest.raises(ScheduleParamError, match=match):
            step.validate(wl, step.config(last_slice_sum=True, **params))
    with pytest.raises(ScheduleParamError, match="stream_k"):
        step.validate(parse_workload("gemm:1000x1000x8192:float16"), step.config(last_slice_sum=True, stream_k=True))
    with pytest.raises(ScheduleParamError, match="split_k must be 1"):  # the FP8 kernel: no split-K at all
        get("fp8_tma_gemm").validate(parse_workload("gemm:256x256x4096:float8_e4m3fn:nt"),
                                     get("fp8_tma_gemm").config(split_k=2, last_slice_sum=True))


@pytest.mark.gpu
@pytest.mark.parametrize("workload,params", [
    (FUSED, FUSED_PARAMS),
    ("gemm:61x4096x4096:bfloat16:nt:out=bfloat16:residual", dict(block_m=64, consumers=1, block_n=128, split_k=4)),
    ("gemm:61x2560x2560:bfloat16:nt:out=bfloat16:bias", dict(block_n=128, stages=6, split_k=4)),
    ("gemm:61x4096x4096:bfloat16:nt:out=bfloat16", dict(block_n=128, stages=6, split_k=6)),  # the last slice short
    ("gemm:200x1000x8200:float16", dict(block_n=128, stages=6, split_k=3)),  # ragged tiles, an fp32 C from fragments
    ("gemm:300x520x4100:float16", dict(block_n=64, stages=8, split_k=5, staged_store=True, pad_operands=True)),
    ("gemm:1024x1024x8192:float16", dict(block_n=128, stages=6, split_k=4)),  # 256 units: two rounds per block
    ("gemm:512x1024x8192:bfloat16:nt:out=bfloat16", dict(block_n=128, stages=6, split_k=4, cluster_m=2)),
    ("gemm:100x777x2001:float16:out=float16:residual", dict(block_n=128, stages=6, split_k=4, pad_operands=True)),
])
def test_last_slice_sum_is_right(harness, workload, params):
    assert run_on_gpu(harness, get("persistent_gemm"), workload, last_slice_sum=True, **params) < \
        rounded_output_bound(workload)


@pytest.mark.gpu
def test_the_sum_is_the_sum_kernels_on_every_call():
    """The same additions in the same order as the sum kernel, whichever slice ends last; and the
    counters back at zero after each call (a count left behind would make the next call's sums wrong)."""
    torch = pytest.importorskip("torch")
    from reports import compile_kernel

    wl = "gemm:61x4096x4096:bfloat16:nt:out=bfloat16:bias"
    params = dict(block_m=64, consumers=1, block_n=128, split_k=4)
    two_kernels = compile_kernel("persistent_gemm", wl, params)
    one_kernel = compile_kernel("persistent_gemm", wl, dict(params, last_slice_sum=True))
    torch.manual_seed(0)
    a = torch.randn(61, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    want = two_kernels(a, w, bias)
    for _ in range(3):
        assert torch.equal(one_kernel(a, w, bias), want)
