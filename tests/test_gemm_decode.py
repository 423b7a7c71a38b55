"""decode_gemm (gemm 24): decode-sized products, a few rows against a large weight. It compiles for
sm_90 without spills with the instructions it is about (cp.async into the ring, bf16/fp16
mma.sync), its plan keeps the blocks in one wave and its ring in shared memory, what it does not
take is refused in one line, it takes a linear layer's epilogue and a 16-bit output (in the kernel
that writes the output), best_fp16_gemm chooses it for decode shapes and not for large ones, and (on
a GPU) it is right against float64 on ragged shapes, both forms, split-K, K warps and epilogues."""

import pytest

from schedules import ScheduleParamError, dispatch, get, parse_workload
from schedules.common import GpuSpec
from schedules.decode_plan import decode_form, filling_row_warps
from schedules.gemm_decode import DecodeConfig
from tests.helpers import cached_build, run_on_gpu

def built(workload, **params):
    return cached_build("decode_gemm", workload, **params)


@pytest.mark.parametrize("workload, split, cluster", [
    ("gemm:8x28672x4096:bfloat16:nt", False, False),  # one kernel: the blocks fill the GPU without split-K
    ("gemm:64x4096x4096:float16:nt", True, False),   # 64 tokens: the partials' sum is a second kernel
    ("gemm:2047x24x1000:bfloat16:nt", True, True),   # the mirror (N is the few), ragged rows and K; its
                                                      # slices one cluster, summed in distributed shared memory
])
def test_compiles_for_sm90_without_spills_with_its_instructions(workload, split, cluster):
    b, wl = built(workload), parse_workload(workload)
    p = DecodeConfig().plan(wl)
    assert (p.splits > 1, p.cluster) == (split, cluster)
    assert "for 'sm_90" in b.device.ptxas_log
    assert len(b.device.kernels) == 1 + (split and not cluster) and all(k.spills == 0 for k in b.device.kernels)
    ptx = b.device.ptx
    for word in ("barrier.cluster.arrive", "mapa.shared::cluster", "ld.shared::cluster.f32"):
        assert (word in ptx) == cluster
    assert ('"clusterCtaIdx.x"' in b.host) == cluster  # the launch names the cluster's dimension
    ptype = {"bfloat16": "bf16", "float16": "f16"}[wl.dtype]
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptype}.{ptype}.f32" in ptx
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
    launch = get("decode_gemm").validate(wl)
    assert tuple(b.launch.get(f"blockIdx.{a}", 1) for a in "xyz") == launch.grid
    assert tuple(b.launch.get(f"threadIdx.{a}", 1) for a in "xyz") == launch.block


def test_the_default_plan_takes_it_for_decode_shapes_only():
    from reports.experiments.run import plan

    for text, planned in (("gemm:4096x4096x4096:bfloat16:nt", False), ("gemm:16x4096x4096:bfloat16:nt", True)):
        jobs, left_out = plan([text], baseline_names=[])
        assert ("decode_gemm" in [j["name"] for j in jobs]) == planned
        assert ("decode_gemm" in left_out[text]) != planned
    with pytest.raises(ScheduleParamError, match="M ≤ 64"):  # named, it is refused in one line
        plan(["gemm:4096x4096x4096:bfloat16:nt"], ["decode_gemm"], baseline_names=[])


def test_the_forms_and_what_is_refused():
    assert decode_form(parse_workload("gemm:16x6144x4096:bfloat16:nt")) == ("rows", 16, 6144)
    assert decode_form(parse_workload("gemm:6144x16x4096:bfloat16:nt")) == ("columns", 16, 6144)
    spec = get("decode_gemm")
    for text, word in (("gemm:16x6144x4096:bfloat16", "nt layout only"), ("gemm:65x6144x4096:bfloat16:nt", "M ≤ 64"),
                       ("gemm:16x6144x4100:bfloat16:nt", "multiple of 8"), ("gemm:16x6144x4096:nt", "float16"),
                       ("bmm:2x16x6144x4096:bfloat16:nt", "batch")):
        with pytest.raises(ScheduleParamError, match=word) as err:
            spec.validate(parse_workload(text))
        assert "\n" not in str(err.value)
    with pytest.raises(ScheduleParamError, match="power of two"):
        spec.validate(parse_workload("gemm:16x6144x4096:bfloat16:nt"), spec.config(k_warps=3))


EPILOGUES = [  # (workload, split-K, cluster_sum): where each output is stored, or where the slices are summed
    ("gemm:16x28672x4096:bfloat16:nt:out=bfloat16:bias:gelu_tanh:residual:alpha=0.5:beta=2", False, True),
    ("gemm:16x1000x4104:float16:nt:out=float16:bias:silu", True, True),   # summed in the cluster
    ("gemm:16x1000x4104:float16:nt:out=float16:bias:silu", True, False),  # ... in a second kernel
    ("gemm:28672x7x4096:bfloat16:nt:out=bfloat16:residual", False, True),  # the mirror: R and D indexed [r, t]
]


@pytest.mark.parametrize("workload, split, cluster_sum", EPILOGUES)
def test_takes_an_epilogue_and_a_16_bit_output(workload, split, cluster_sum):
    """The kernel's arguments are the workload's (A, B, [bias], [R], D); the epilogue is in the kernel
    that writes D (the product's, or split-K's sum kernel), which stores the output type; no spills."""
    wl = parse_workload(workload)
    b = built(workload, **({} if cluster_sum else {"cluster_sum": False}))
    assert (DecodeConfig(cluster_sum=cluster_sum).plan(wl).splits > 1) == split
    params = [p.name for p in get("decode_gemm").build(wl).mod["main"].params]
    assert len(params) == len(wl.arg_names()) and params[:2] == ["A", "B"]
    assert ("bias" in params) == wl.epilogue.bias and ("R" in params) == wl.epilogue.residual
    kernels = 1 + (split and not cluster_sum)
    assert len(b.device.kernels) == kernels and all(k.spills == 0 for k in b.device.kernels)
    ctype = {"bfloat16": "nv_bfloat16", "float16": "half"}[wl.out_dtype]
    writer = b.device.cuda.split("extern \"C\" __global__")[-1]  # the last kernel writes D
    assert ctype in writer
    act = wl.epilogue.activation
    assert act is None or {"gelu_tanh": "tanh", "silu": "exp"}[act] in writer


def _pow2(n):
    return 1 << (n - 1).bit_length()


@pytest.mark.parametrize("workload", ["gemm:1x4096x4096:bfloat16:nt", "gemm:16x6144x4096:bfloat16:nt",
                                      "gemm:64x4096x14336:float16:nt", "gemm:28672x32x4096:bfloat16:nt"])
def test_the_plan_fills_the_gpu_in_one_wave_within_shared_memory(workload):
    wl, gpu = parse_workload(workload), GpuSpec()
    cfg = DecodeConfig()
    p, launch = cfg.plan(wl, gpu), cfg.launch(wl)
    blocks = launch.grid[0]
    per_sm = gpu.smem_per_sm // (launch.shared_bytes + 1024)
    assert per_sm >= 1 and launch.shared_bytes <= gpu.smem_per_block
    # split-K doubles while the grid stays within one wave (with the slices summed in clusters, where a
    # lane has 16 accumulators or fewer: within 1.5 blocks per SM, and only while the grid is under
    # half the SMs)
    clustered = p.acc <= 16
    most = int(1.5 * gpu.sms) if clustered else gpu.sms * per_sm
    assert (blocks * 2 > most or p.splits * 2 > max(1, wl.K // (16 * p.tokens))  # else split-K would fill it
            or (clustered and blocks >= gpu.sms / 2))
    assert p.splits == 1 or blocks <= most
    assert p.cluster == (clustered and p.splits > 1)
    if clustered and p.splits == 1 and blocks <= gpu.sms:  # one block per SM: the ring takes the SM's memory
        assert p.stages == 8 or 4 * (p.stages + 1) * p.slot_words > gpu.smem_per_sm - 4 * p.shared_floats - 8192
    # the rows that share each copy of X: up to 24 tokens those of row blocks that fill the SMs
    # (test_few_tokens_fill_the_sms_with_row_blocks_of_the_whole_k); else 128, or 64 where 128-row
    # blocks would fill under half the SMs (never more than the weight has)
    block_rows = 16 * p.m_tiles * p.row_warps
    want = 128 if p.rows >= 64 * gpu.sms else 64
    assert 2 <= p.stages <= 8
    if p.m_tiles > 1 or not filling_row_warps(-(-p.rows // 16), gpu.sms):
        assert block_rows == min(want, 16 * p.m_tiles * _pow2(-(-p.rows // (16 * p.m_tiles))))
    # split-K's partials stay under a quarter of the weight's bytes
    assert 4 * p.splits * p.tokens <= max(wl.K // 4, 4 * p.tokens)


@pytest.mark.parametrize("workload", ["gemm:16x6144x4096:bfloat16:nt", "gemm:8x4608x3584:bfloat16:nt",
                                      "gemm:24x2560x2560:float16:nt", "gemm:1x4096x4096:bfloat16:nt",
                                      "gemm:4096x12x3584:bfloat16:nt", "gemm:20x12288x4096:bfloat16:nt"])
def test_few_tokens_fill_the_sms_with_row_blocks_of_the_whole_k(workload):
    """Up to 24 tokens (one m16 tile per warp) on sm_90: the fewest row warps (at least 2) whose
    row blocks, each streaming the whole K, fit in one block per SM, where they reach half the SMs."""
    wl, gpu = parse_workload(workload), GpuSpec()
    p = DecodeConfig().plan(wl, gpu)
    assert p.m_tiles == 1 and p.splits == 1 and not p.cluster
    assert gpu.sms / 2 <= p.row_blocks <= gpu.sms
    assert p.row_warps == 2 or -(-p.rows // (16 * (p.row_warps - 1))) > gpu.sms  # one warp fewer: too many blocks
    assert DecodeConfig().launch(wl).grid[0] == p.row_blocks


@pytest.mark.parametrize("workload, why", [
    ("gemm:16x28672x4096:bfloat16:nt", "more row groups than 8 warps a block cover in one round"),
    ("gemm:16x1536x6144:bfloat16:nt", "48 blocks of 2 warps: under half the SMs, K split instead"),
    ("gemm:32x6144x4096:bfloat16:nt", "32 tokens: two m16 tiles per warp"),
])
def test_where_row_blocks_cannot_fill_the_sms_the_plan_is_the_general_one(workload, why):
    wl, gpu = parse_workload(workload), GpuSpec()
    p = DecodeConfig().plan(wl, gpu)
    groups = -(-p.rows // 16)
    assert p.m_tiles > 1 or not filling_row_warps(groups, gpu.sms), why
    assert p.row_warps in (1, 2, 4, 5, 8) and 16 * p.m_tiles * p.row_warps in (32, 64, 80, 96, 128), why
    assert filling_row_warps(448, 132) == 4 and filling_row_warps(96, 132) == 0 and filling_row_warps(2000, 132) == 0


@pytest.mark.parametrize("workload", ["gemm:8x6144x4096:bfloat16:nt", "gemm:16x6144x4096:float16:nt",
                                      "gemm:8x4096x14336:bfloat16:nt",
                                      "gemm:16x4096x4096:bfloat16:nt:out=bfloat16:bias:gelu_tanh"])
def test_best_fp16_chooses_it_for_decode_shapes(workload):
    wl = parse_workload(workload)
    choice = get("best_fp16_gemm").config().choose(wl)
    assert choice.step == "decode_gemm" and "decode t" in choice.text
    assert get("decode_gemm").validate(wl, choice.config)


@pytest.mark.parametrize("workload", ["gemm:4096x4096x4096:float16:nt", "gemm:512x6144x4096:bfloat16:nt",
                                      "gemm:16x6144x4096:bfloat16:nn", "gemm:1x4096x4096:float16",
                                      "gemm:1x6144x4096:bfloat16:nt:out=bfloat16"])  # one token: the GEMV steps
def test_best_fp16_does_not_choose_it_elsewhere(workload):
    wl = parse_workload(workload)
    assert all(e.step != "decode_gemm" for e in dispatch.rank(wl, "bf16" if wl.dtype == "bfloat16" else "fp16"))


GPU_CASES = [("gemm:5x1000x4104:bfloat16:nt", {}), ("gemm:37x3000x1000:float16:nt", {}),
             ("gemm:37x3000x1000:bfloat16:nt", {"row_warps": 2, "k_warps": 4, "split_k": 3}),
             ("gemm:64x4096x4096:bfloat16:nt", {}), ("gemm:4095x24x1000:bfloat16:nt", {}),
             ("gemm:2000x61x2056:float16:nt", {"split_k": 2, "stages": 2}), ("gemm:1x1x8:bfloat16:nt", {}),
             ("gemm:17x5000x776:float16:nt", {"warp_rows": 32, "unroll": 1}),
             *((w, {} if c else {"cluster_sum": False}) for w, _, c in EPILOGUES), ("gemm:1x6144x4096:bfloat16:nt:out=bfloat16", {}),
             ("gemm:37x3000x1000:bfloat16:nt:out=bfloat16:bias:gelu_erf", {"split_k": 3}),
             ("gemm:2000x61x2056:float16:nt:out=float16:bias:relu:residual", {"split_k": 2, "stages": 2}),
             # the slices summed by a second kernel (cluster_sum off, or more slices than a cluster takes)
             ("gemm:37x3000x1000:bfloat16:nt:out=bfloat16:bias:gelu_erf", {"split_k": 3, "cluster_sum": False}),
             ("gemm:16x1000x8192:float16:nt", {"split_k": 12}),
             ("gemm:16x1000x8192:bfloat16:nt:out=bfloat16:residual", {"split_k": 8, "k_warps": 1}),
             ("gemm:61x700x4096:bfloat16:nt", {"split_k": 5, "row_warps": 1})]


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", GPU_CASES, ids=lambda c: str(c))
def test_right_on_the_gpu(harness, workload, params):
    err = run_on_gpu(harness, get("decode_gemm"), workload, **params)
    tol = get("decode_gemm").tolerance_for(parse_workload(workload))  # 1e-5 and, for a 16-bit output, its rounding
    assert err < max(tol, 1e-5), f"{workload} {params}: relative error {err:.3g}"


def test_the_model_counts_a_grid_smaller_than_the_gpu():
    """61 rows against a 3584 × 3584 weight: 28 row blocks × 2 K slices on an H200's 132 SMs stream at
    56/132 of the bandwidth (measured: 33 µs, cuBLAS 12.7); the model says so, and best_fp16_gemm
    takes a tiled kernel that fills the GPU instead. A grid that fills it is not scaled."""
    from schedules.common import use_gpu
    from schedules.gpus import profile

    before = dispatch.current_gpu()
    try:
        gpu = use_gpu(profile("H200"))
        small = parse_workload("gemm:61x3584x3584:bfloat16:nt:out=bfloat16:residual")
        cand = dispatch.decode_candidates(small)[0]
        p = cand.config.plan(small, gpu)
        est = dispatch.estimate(small, cand, gpu)
        assert p.row_blocks * p.splits < gpu.sms and est.terms["fill"] == pytest.approx(p.row_blocks * p.splits / gpu.sms)
        assert dispatch.rank(small, "bf16")[0].step != "decode_gemm"
        full = parse_workload("gemm:16x6144x4096:bfloat16:nt:out=bfloat16")
        assert dispatch.estimate(full, dispatch.decode_candidates(full)[0], gpu).terms["fill"] == 1.0
        assert dispatch.rank(full, "bf16")[0].step == "decode_gemm"
    finally:
        use_gpu(before)


def test_the_slices_are_summed_in_their_cluster_where_that_pays():
    """From sm_90 the K slices of a row block form one cluster and add their sums in distributed
    shared memory (one kernel, no partials in device memory), where a lane has at most 16
    accumulators (at 64 tokens the second kernel was faster) and the automatic split-K then keeps
    the grid within 1.5 blocks per SM; on an A100, with cluster_sum off, or with more than 8 slices,
    the second kernel sums them; the model counts no sum kernel for a cluster."""
    from schedules.common import use_gpu
    from schedules.gpus import profile

    before = dispatch.current_gpu()
    try:
        gpu = use_gpu(profile("H100"))
        wl = parse_workload("gemm:16x2048x4096:bfloat16:nt:out=bfloat16:residual")
        p = DecodeConfig().plan(wl, gpu)
        assert p.cluster and 1 < p.splits <= 8 and p.row_blocks * p.splits <= 1.5 * gpu.sms
        slots = DecodeConfig(cluster_sum=False).plan(wl, gpu)
        assert not slots.cluster and slots.splits == 2 * p.splits  # without clusters: up to the slots of one wave
        assert not DecodeConfig().plan(parse_workload("gemm:61x4096x4096:bfloat16:nt"), gpu).cluster
        assert not DecodeConfig(split_k=12).plan(parse_workload("gemm:16x1000x8192:float16:nt"), gpu).cluster
        assert not DecodeConfig().plan(wl, profile("A100")).cluster
        est = {c: dispatch.estimate(wl, dispatch.Candidate("decode_gemm", DecodeConfig(split_k=p.splits, cluster_sum=c),
                                                           "decode", "decode t16"), gpu) for c in (True, False)}
        assert est[True].terms["reduce_us"] == 0 < est[False].terms["reduce_us"]
        assert est[True].time_us < est[False].time_us
        choice = get("best_fp16_gemm").config().choose(wl)  # the choice says where its slices are summed
        assert choice.step == "decode_gemm" and f"split-K {p.splits} in a cluster" in choice.text
    finally:
        use_gpu(before)
