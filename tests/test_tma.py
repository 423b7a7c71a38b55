"""The Hopper steps on TMA (tma_gemm, warp_specialized_gemm, persistent_gemm, cluster_gemm,
tma_tf32_gemm): each compiles for sm_90a without spills, its PTX holds the instructions it is about
(bulk tensor copies, mbarrier waits, setmaxnreg, wgmma), shapes a tensor map cannot describe are
refused in one line, and (on a GPU) the products are right, ragged shapes and bf16 included."""

import pytest

from schedules import ScheduleParamError, get, parse_workload
from tests.helpers import cached_build, rounded_output_bound, run_on_gpu

STEPS = ["tma_gemm", "warp_specialized_gemm", "persistent_gemm", "cluster_gemm"]
BIG = "gemm:4096x4096x4096:float16"
built = cached_build


def test_the_steps_follow_wgmma_in_the_ladder_one_piece_at_a_time():
    steps = [get(n).step for n in ["wgmma_gemm"] + STEPS]
    assert steps == list(range(steps[0], steps[0] + 5))
    assert get("tma_tf32_gemm").step == get("wgmma_tf32_gemm").step + 1
    cfgs = [get(n).config() for n in STEPS]
    assert [(c.warp_specialized, c.persistent, c.cluster_m) for c in cfgs] == \
        [(False, False, 1), (True, False, 1), (True, True, 1), (True, True, 2)]
    for n in STEPS:
        assert get(n).input_dtypes == ("float16", "bfloat16") and get(n).doc


@pytest.mark.parametrize("name", STEPS + ["tma_tf32_gemm"])
def test_compiles_for_sm90a_without_spills_with_its_instructions(name):
    workload = "gemm:4096x4096x4096" if name == "tma_tf32_gemm" else BIG
    b = built(name, workload)
    assert "for 'sm_90a'" in b.device.ptxas_log
    assert all(k.spills == 0 for k in b.device.kernels)
    ptx = b.device.ptx
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait" in ptx and "wgmma.mma_async" in ptx
    assert "CUtensorMap" in b.device.cuda and "__grid_constant__" in b.device.cuda
    ws = get(name).config().warp_specialized
    assert ("setmaxnreg.dec" in ptx and "setmaxnreg.inc" in ptx) == ws
    if name == "cluster_gemm":
        assert ".multicast::cluster" in ptx and "mapa" in ptx
    if name == "tma_tf32_gemm":
        assert ".tf32.tf32" in ptx


@pytest.mark.parametrize("layout, trans_a, trans_b, boxes", [
    ("nn", 0, 1, 1 + 4), ("nt", 0, 0, 1 + 4), ("tn", 1, 1, 2 + 4), ("tt", 1, 0, 2 + 4)])
def test_layouts_read_through_the_transpose_bits_not_copies(layout, trans_a, trans_b, boxes):
    """wgmma's transpose immediates follow the stored operands (A m-major when stored K×M, B
    k-major when stored N×K), and a K tile is the A tile (one box k-major, two 64-column panels
    m-major) plus four 64-column pieces of B: no copy kernel, no extra pass."""
    import re

    b = built("persistent_gemm", f"gemm:1024x1024x1024:float16:{layout}")
    ptx = b.device.ptx
    bits = {tuple(x.rstrip(";").split(",")[-2:]) for x in re.findall(r"wgmma\.mma_async[^;]*;", ptx)}
    assert bits == {(f" {trans_a}", f" {trans_b}")}
    assert len(b.device.kernels) == 1
    # per K tile (nvcc unrolls the producer's loop the same way in every layout: compare with nn's 5)
    nn = built("persistent_gemm", "gemm:1024x1024x1024:float16").device.ptx.count("cp.async.bulk.tensor.2d")
    assert ptx.count("cp.async.bulk.tensor.2d") * 5 == nn * boxes


@pytest.mark.parametrize("layout, kernels", [("nn", 1), ("nt", 1), ("tn", 2), ("tt", 2)])
def test_tf32_reads_b_in_either_order_and_transposes_a_stored_k_by_m_first(layout, kernels):
    """tf32 wgmma has no transpose bit: B stored N×K is loaded k-major and its register fragments
    read from that layout (no copy); A stored K×M gets a transposing copy kernel first, which the
    dispatcher counts (one read and one write of A)."""
    import re

    from schedules import dispatch

    wl = parse_workload(f"gemm:1024x512x2048:{layout}")
    b = built("tma_tf32_gemm", str(wl))
    assert len(b.device.kernels) == kernels and all(k.spills == 0 for k in b.device.kernels)
    if kernels == 2:
        # the tiled transpose reads its shared tile down a column of rows 33 apart (no bank conflicts)
        assert re.search(r"= tile_ptr\[\(+\(int\)threadIdx\.x\) \* 33\)", b.device.cuda)
    cfg = get("tma_tf32_gemm").config()
    assert cfg.copied(wl) == (layout[0] == "t", False)
    est = dispatch.estimate(wl, dispatch.Candidate("tma_tf32_gemm", cfg, "tma_tf32", "x"))
    assert (est.terms["reduce_us"] > 0) == (layout[0] == "t")


def test_a_bmm_walks_the_batch_with_3d_tensor_maps():
    wl = parse_workload("bmm:6x200x136x72:float16:tn")
    b = built("persistent_gemm", str(wl), block_n=128, stages=6)
    assert "cp.async.bulk.tensor.3d" in b.device.ptx and "cp.async.bulk.tensor.2d" not in b.device.ptx
    # units: 6 products × 2 × 2 tiles, one block per SM up to the SM count
    assert get("persistent_gemm").validate(wl, get("persistent_gemm").config(block_n=128, stages=6)).grid == (24, 1, 1)
    with pytest.raises(ScheduleParamError, match="split_k must be 1 for a bmm"):
        get("persistent_gemm").validate(wl, get("persistent_gemm").config(split_k=2))
    with pytest.raises(ScheduleParamError, match=r"row pitch of A \(M\) is 260 bytes"):
        get("persistent_gemm").validate(parse_workload("bmm:2x130x136x72:float16:tt"))


def test_persistent_grid_is_one_block_per_sm_and_follows_the_gpu():
    from schedules.common import GpuSpec, use_gpu

    wl = parse_workload(BIG)
    assert get("persistent_gemm").validate(wl).grid == (132, 1, 1)
    assert get("warp_specialized_gemm").validate(wl).grid == (512, 1, 1)
    old = use_gpu(None)
    try:
        use_gpu(GpuSpec(name="small", sms=78))
        assert get("persistent_gemm").validate(wl).grid == (78, 1, 1)
    finally:
        use_gpu(old)


@pytest.mark.parametrize("workload, word", [("gemm:1024x1024x1004:float16", "TMA needs a multiple of 16"),
                                            ("gemm:1024x1002x1024:bfloat16", "TMA needs a multiple of 16"),
                                            ("gemm:1024x1024x1024", "float16 or bfloat16")])
def test_refused_where_a_tensor_map_cannot_describe_the_rows(workload, word):
    with pytest.raises(ScheduleParamError, match=word) as e:
        get("persistent_gemm").validate(parse_workload(workload))
    assert len(str(e.value).splitlines()) == 1
    with pytest.raises(ScheduleParamError, match="multiple of 16"):
        get("tma_tf32_gemm").validate(parse_workload("gemm:512x512x1002"))


def test_ragged_shapes_build_with_guarded_stores():
    b = built("persistent_gemm", "gemm:1000x520x2000:bfloat16")
    assert "bf16.bf16" in b.device.ptx and all(k.spills == 0 for k in b.device.kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("name", STEPS)
@pytest.mark.parametrize("workload", [BIG, "gemm:1000x520x2000:float16", "gemm:1000x520x2000:bfloat16",
                                      "gemm:64x64x64:bfloat16", "gemm:136x200x72:float16"])
def test_correct(harness, name, workload):
    assert run_on_gpu(harness, get(name), workload) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["gemm:4096x4096x4096", "gemm:1000x520x2000", "gemm:64x64x64"])
def test_tf32_correct_to_tf32_rounding(harness, workload):
    err = run_on_gpu(harness, get("tma_tf32_gemm"), workload)
    assert 1e-6 < err < 2e-3


def test_one_consumer_warpgroup_builds_64_row_tiles():
    # a producer warpgroup and one consumer (256 threads, the consumer's setmaxnreg budget 256), m64 wgmmas,
    # a bf16 output with a residual, split-K's sum kernel beside it; no spills
    from reports.engine.kernel import launches_of

    b = built("persistent_gemm", "gemm:61x4096x4096:bfloat16:nt:out=bfloat16:residual",
              block_m=64, consumers=1, block_n=128, stages=8, split_k=3)
    assert len(b.device.kernels) == 2 and all(k.spills == 0 for k in b.device.kernels)
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in b.device.ptx
    assert "setmaxnreg.inc.sync.aligned.u32 256" in b.device.ptx
    product = launches_of(b.host)[0]
    assert product.block[0] == 256 and product.grid[0] == 32 * 3  # 32 tiles of 64 x 128, 3 K slices
    with pytest.raises(ScheduleParamError, match="1 to 3 consumer"):
        get("persistent_gemm").validate(parse_workload(BIG), get("persistent_gemm").config(block_m=256, block_n=64, stages=2, consumers=4))


def test_split_k_and_padded_operands_add_their_kernels():
    b = built("persistent_gemm", "gemm:256x256x16384:float16", split_k=8)
    assert len(b.device.kernels) == 2 and all(k.spills == 0 for k in b.device.kernels)
    assert "TVMBackendAllocWorkspace" in b.lowered or "alloc" in b.lowered.lower()
    b = built("persistent_gemm", "gemm:1001x777x3001:float16", pad_operands=True)
    assert len(b.device.kernels) == 3  # two copies into 16-byte-pitched buffers, then the product
    b = built("persistent_gemm", "gemm:4096x4096x4096:float16", pad_operands=True)
    assert b.device.cuda == built("persistent_gemm", BIG).device.cuda  # nothing to pad: the same kernel
    with pytest.raises(ScheduleParamError, match="split_k"):
        get("tma_gemm").validate(parse_workload(BIG), get("tma_gemm").config(split_k=2))
    with pytest.raises(ScheduleParamError, match="exceeds"):
        get("persistent_gemm").validate(parse_workload("gemm:256x256x640:float16"),
                                        get("persistent_gemm").config(split_k=11))


def test_split_k_partials_keep_their_own_memory_beside_padded_copies():
    # the padded operand is read only through its tensor map: TVM's storage planner once gave the
    # partial products its memory (wrong products on the GPU)
    b = built("persistent_gemm", "gemm:250x250x20000:float16", split_k=32, pad_operands=True)
    assert "B_pad = T.alloc_buffer" in b.lowered and "P = T.alloc_buffer" in b.lowered


@pytest.mark.parametrize("name,workload,params", [
    ("tma_tf32_gemm", "gemm:33x5000x4000", dict(split_k=3)),
    ("tma_tf32_gemm", "gemm:250x250x20000", dict(split_k=32, pad_operands=True)),
    ("persistent_gemm", "gemm:4096x1x4096:float16", dict(split_k=4, block_n=64, stages=8, pad_operands=True)),
])
def test_a_short_last_k_slice_compiles(name, workload, params):
    # the last slice's K tiles past K: ring offsets the device passes must prove non-negative
    b = built(name, workload, **params)
    assert len(b.device.kernels) >= 2 and all(k.spills == 0 for k in b.device.kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("name,workload,params", [
    ("persistent_gemm", "gemm:256x256x16384:float16", dict(split_k=8)),
    ("persistent_gemm", "gemm:384x200x8000:bfloat16", dict(split_k=8, pad_operands=True)),
    ("persistent_gemm", "gemm:1001x777x3001:float16", dict(pad_operands=True)),
    ("persistent_gemm", "gemm:250x250x20000:float16", dict(split_k=16, block_n=64, stages=8, pad_operands=True)),
    ("cluster_gemm", "gemm:1100x512x2104:float16", dict(split_k=4)),
    ("warp_specialized_gemm", "gemm:1000x512x4096:bfloat16", dict(split_k=2)),
    ("persistent_gemm", "gemm:250x250x20000:float16", dict(split_k=32, pad_operands=True)),
    ("persistent_gemm", "gemm:4096x1x4096:float16", dict(split_k=4, block_n=64, stages=8, pad_operands=True)),
    # one consumer warpgroup: 64-row tiles (a few rows against a large weight), an epilogue and a 16-bit output
    ("persistent_gemm", "gemm:61x4096x4096:bfloat16:nt:out=bfloat16:residual",
     dict(block_m=64, consumers=1, block_n=128, stages=8, split_k=4)),
    ("persistent_gemm", "gemm:100x1000x3000:float16", dict(block_m=64, consumers=1, block_n=256, stages=5)),
    ("persistent_gemm", "gemm:61x10240x2560:bfloat16:nt:out=bfloat16:bias:gelu_tanh",
     dict(block_m=64, consumers=1, block_n=128, stages=8, staged_store=True)),
    ("persistent_gemm", "gemm:61x2560x2560:bfloat16:nt:out=bfloat16:bias:gelu_tanh",
     dict(block_m=64, consumers=1, block_n=64, stages=12, split_k=2, cluster_sum=True)),
])
def test_split_k_and_padding_are_right(harness, name, workload, params):
    assert run_on_gpu(harness, get(name), workload, **params) < rounded_output_bound(workload)


@pytest.mark.gpu
@pytest.mark.parametrize("workload,params", [("gemm:256x256x16384", dict(split_k=8)),
                                             ("gemm:1001x777x3001", dict(pad_operands=True)),
                                             ("gemm:384x200x8002", dict(split_k=8, pad_operands=True)),
                                             ("gemm:1001x777x3001", dict(split_k=4, pad_operands=True)),
                                             ("gemm:5000x33x4000", dict(split_k=6, pad_operands=True)),
                                             ("gemm:33x5000x4000", dict(split_k=3)),
                                             ("gemm:4096x1x4096", dict(split_k=8, pad_operands=True))])
def test_tf32_split_k_and_padding_are_right(harness, workload, params):
    assert 1e-6 < run_on_gpu(harness, get("tma_tf32_gemm"), workload, **params) < 2e-3


def test_staged_store_takes_an_epilogue_and_a_16_bit_output():
    # D in its type: the epilogue applied to the values read back, pairs stored by rows (N even)
    b = built("persistent_gemm", "gemm:1000x4096x4096:bfloat16:nt:out=bfloat16:bias:residual", staged_store=True,
              block_n=128)
    assert all(k.spills == 0 for k in b.device.kernels) and "st.shared.v2.f32" in b.device.ptx
    cuda = b.device.cuda
    assert "*(nv_bfloat162*)(D_ptr" in cuda
    # read ahead of their use: the bias of the lane's 4 column pairs once per tile (a 128-wide tile:
    # 4 chunks of 32 columns), R as pairs for a chunk's 8 rows before the chunk is staged; read
    # inside the row loop, each load's latency sat between two stores (a bias cost 20% of the time)
    assert cuda.count("(bias_ptr +") == 4 and "bias_ptr[" not in cuda
    assert cuda.count("(R_ptr +") == 4 * 8 and cuda.count("R_ptr[") == 1  # the 4 chunks unrolled; 1: the prefetch
    body = cuda[cuda.rindex("main_kernel("):]
    first_r, first_stage = body.index("(R_ptr +"), body.index("tvm_builtin_ptx_st_vec_shared_v2_f32(")
    assert body.index("(bias_ptr +") < first_r < first_stage
    # and R's lines of the tile asked into L2 before its mainloop (its first wgmma)
    assert "prefetch.global.L2" in b.device.ptx
    assert body.index("tvm_builtin_ptx_prefetch_global_L2(") < body.index("_mma_async_") < first_r


def test_staged_store_writes_c_through_each_warps_shared_area():
    # staged_store: the accumulators go through a per-warp area of shared memory after the ring
    # (8 warps x 16 rows x 40 floats), read back a row at a time; only __syncwarp orders them (a
    # __syncthreads here would wait for the producer warpgroup, which never comes)
    plain = built("persistent_gemm", "gemm:1000x1001x512:float16", pad_operands=True)
    staged = built("persistent_gemm", "gemm:1000x1001x512:float16", pad_operands=True, staged_store=True)
    main = staged.device.kernels[-1]
    assert main.spills == 0 and "for 'sm_90a'" in staged.device.ptxas_log
    assert "st.shared.v2.f32" in staged.device.ptx and "bar.warp.sync" in staged.device.ptx
    assert "st.shared.v2.f32" not in plain.device.ptx
    src = staged.device.cuda[staged.device.cuda.index("main_kernel_1("):]
    assert "__syncthreads()" not in src[src.index("setmaxnreg"):]
    cfg = get("persistent_gemm").config(pad_operands=True, staged_store=True)
    assert cfg.shared_bytes(2) == get("persistent_gemm").config().shared_bytes(2) + 2 * 4 * 16 * 40 * 4


@pytest.mark.parametrize("name,workload,params,word", [
    ("tma_gemm", "gemm:512x512x512:float16", {}, "warp_specialized"),
])
def test_staged_store_is_refused_where_the_kernel_does_not_take_it(name, workload, params, word):
    with pytest.raises(ScheduleParamError, match=word):
        get(name).validate(parse_workload(workload), get(name).config(staged_store=True, **params))


@pytest.mark.gpu
@pytest.mark.parametrize("name,workload,params", [
    ("persistent_gemm", "gemm:1000x1001x512:float16", dict(pad_operands=True, block_n=128)),
    ("persistent_gemm", "gemm:6790x1715x177:float16", dict(pad_operands=True)),
    ("persistent_gemm", "gemm:4096x4096x4096:bfloat16", {}),
    ("persistent_gemm", "gemm:136x200x72:float16", dict(block_n=64, stages=8)),
    ("persistent_gemm", "gemm:1892x1042x7208:float16", dict(pad_operands=True, split_k=2, block_n=128)),
    ("persistent_gemm", "gemm:1000x1001x4096:float16", dict(pad_operands=True, stream_k=True, block_n=128)),
    ("persistent_gemm", "bmm:3x500x701x256:float16", dict(pad_operands=True, block_n=128)),
    ("cluster_gemm", "gemm:1100x513x2104:bfloat16", dict(pad_operands=True)),
    ("warp_specialized_gemm", "gemm:999x1003x640:float16", dict(pad_operands=True, block_m=256, block_n=128)),
    ("persistent_gemm", "gemm:1000x4096x4096:bfloat16:nt:out=bfloat16:residual", {}),
    ("persistent_gemm", "gemm:1000x1001x512:float16:out=float16:bias:relu", dict(pad_operands=True)),
    ("persistent_gemm", "gemm:2048x8192x1024:bfloat16:nt:out=bfloat16:bias:gelu_tanh", {}),
    ("persistent_gemm", "bmm:3x500x702x256:float16:out=bfloat16:residual", dict(pad_operands=True, block_n=128)),
    ("persistent_gemm", "gemm:1000x2560x10240:bfloat16:nt:out=bfloat16", dict(stream_k=True, block_n=128)),
])
def test_staged_store_is_right(harness, name, workload, params):
    assert run_on_gpu(harness, get(name), workload, staged_store=True, **params) < rounded_output_bound(workload)
