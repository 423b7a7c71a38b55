"""persistent_gemm's TMA store (``tma_store``, schedules/tma_store.py): each consumer warp's box of shared
memory written from its accumulators and handed to the TMA unit. CPU: the instructions and their order in the
kernel, no pointer to D in it (only its tensor map), the shared memory counted, the refusals in one line, the
dispatcher's choice of it; GPU: the products right on ragged shapes (the map clips rows and columns past D),
16-bit outputs with epilogues, padded operands, a persistent block's many tiles with an odd number of boxes each."""

import re

import pytest

from schedules import ScheduleParamError, dispatch, get, parse_workload
from schedules.dispatch import Candidate
from schedules.dispatch_store import with_store
from schedules.gemm_tma_ws import PersistentConfig
from tests.helpers import cached_build, rounded_output_bound, run_on_gpu

FP32_C = "gemm:1000x1000x512:float16"  # a float32 C whose rows are 4000 bytes: a tensor map's pitch
S2G = "tvm_builtin_ptx_cp_async_bulk_tensor_s2g_async_bulk_tensor_2d_global_shared__cta_bulk_group("


def test_each_warp_writes_its_box_then_one_lane_hands_it_to_the_tma_unit():
    b = cached_build("persistent_gemm", FP32_C, tma_store=True)
    assert all(k.spills == 0 for k in b.device.kernels) and "for 'sm_90a'" in b.device.ptxas_log
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in b.device.ptx
    cuda = b.device.cuda
    kernel = cuda[cuda.rindex("main_kernel("):]
    # D only through its map: the kernel has no pointer to it, so no thread stores an output
    assert "CUtensorMap D_map" in kernel[:kernel.index("{")] and "C_ptr" not in kernel and "D_ptr" not in kernel
    # a 128 x 256 tile: each warp's 16 rows in 8 boxes of 32 columns, unrolled
    assert kernel.count(S2G) == 256 // 32
    first = kernel.index(S2G)
    # before a box is written: the TMA unit has read it (one store left in flight, the other box's);
    # after: the writes made visible to the async proxy, then the store and its commit
    assert kernel.rindex("bulk_wait_group_read_1()", 0, first) < kernel.rindex("st_vec_shared_v2_f32(", 0, first)
    assert kernel.rindex("st_vec_shared_v2_f32(", 0, first) < kernel.rindex("fence_proxy_proxy_async_shared__cta()",
                                                                             0, first)
    assert "bulk_commit_group" in kernel[first:first + 600]
    # the warp's last act: every store written before the block leaves
    assert kernel.rindex("bulk_wait_group_0()") > kernel.rindex(S2G)
    assert "__syncthreads()" not in kernel[kernel.index("setmaxnreg"):]


def test_a_16_bit_output_and_its_epilogue_go_into_the_box_as_pairs():
    b = cached_build("persistent_gemm", "gemm:1000x1000x512:bfloat16:nt:out=bfloat16:bias:gelu_tanh",
                     tma_store=True, block_n=128, stages=6)
    assert all(k.spills == 0 for k in b.device.kernels)
    kernel = b.device.cuda[b.device.cuda.rindex("main_kernel("):]
    assert "st_vec_shared_v2_b16(" in kernel and "tanhf(" in kernel
    assert kernel.count(S2G) == 128 // 32
    # the bias read once per box, its lane's 8 columns, a box ahead: box q+1's loads come before box q's writes
    loads = [m.start() for m in re.finditer(r"bias_ptr\[", kernel)]
    assert len(loads) == 4 * 8 and loads[8] < kernel.index("st_vec_shared_v2_b16(")


def test_the_boxes_are_counted_in_shared_memory():
    assert PersistentConfig(tma_store=True).shared_bytes(2) - PersistentConfig().shared_bytes(2) == 2 * 4 * 2 * 16 * 32 * 4


@pytest.mark.parametrize("workload, params, word", [
    ("gemm:1000x1002x512:float16:nt", {}, "multiple of 16 bytes"),  # 4008-byte rows of C
    (FP32_C, dict(staged_store=True), "take one"),
    (FP32_C, dict(split_k=2), "whole tiles"),
    (FP32_C, dict(stream_k=True), "whole tiles"),
    ("bmm:2x512x512x512:float16", {}, "whole tiles"),
    ("gemm:1000x1000x512:float16:nt", dict(block_n=80), "multiple of 32"),
    (FP32_C, dict(warp_specialized=False, persistent=False), "warp-specialized"),
])
def test_refused_where_it_cannot_store_the_tile_in_one_line(workload, params, word):
    with pytest.raises(ScheduleParamError, match=word) as e:
        get("persistent_gemm").validate(parse_workload(workload), PersistentConfig(tma_store=True, **params))
    assert "\n" not in str(e.value)


def _store_of(workload: str, **knobs) -> str:
    cand = Candidate("persistent_gemm", PersistentConfig(**knobs), "tma", "tma 128x256")
    wl = parse_workload(workload)
    cfg = with_store(wl, cand, lambda c: dispatch._valid(c.step, wl, c.config)).config
    return "tma" if cfg.tma_store else "staged" if cfg.staged_store else "fragments"


def test_the_dispatcher_stores_an_aligned_float32_c_by_tma_and_the_rest_as_before():
    assert _store_of(FP32_C) == "tma"
    assert _store_of("gemm:1000x1002x512:float16", pad_operands=True) == "staged"  # rows not whole 16 bytes
    assert _store_of("gemm:1000x1000x512:bfloat16:nt:out=bfloat16") == "staged"  # a 16-bit output
    assert _store_of("gemm:1000x1000x512:float16:bias") == "staged"  # an epilogue
    assert _store_of(FP32_C, split_k=2) == "fragments"
    assert _store_of(FP32_C, stream_k=True) == "fragments"
    assert _store_of("bmm:2x512x512x512:float16") == "fragments"
    # where the boxes do not fit beside the ring, the candidate keeps the fragments' stores
    cand = Candidate("persistent_gemm", PersistentConfig(block_n=192, stages=5), "tma", "tma 128x192")
    wl = parse_workload(FP32_C)
    kept = with_store(wl, cand, lambda c: dispatch._valid(c.step, wl, c.config))
    assert not kept.config.tma_store and not kept.config.staged_store
    assert "C by TMA" in dispatch.describe(dispatch.rank(parse_workload("gemm:4096x4096x4096:float16"), "fp16")[0].candidate)


@pytest.mark.gpu
@pytest.mark.parametrize("workload, params", [
    (FP32_C, {}),
    ("gemm:2768x5208x64:float16", dict(block_n=128, stages=6)),
    ("gemm:1000x1004x520:float16:nt", dict(block_n=128, stages=6)),
    ("gemm:1001x1004x517:float16", dict(pad_operands=True)),  # A's rows copied to a padded buffer first
    ("gemm:2048x2080x256:bfloat16:nt:out=bfloat16", dict(block_n=160)),  # 5 boxes a tile, 208 tiles on the SMs
    ("gemm:1000x1000x512:bfloat16:nt:out=bfloat16:bias:gelu_tanh", {}),
    ("gemm:1000x1000x520:float16:out=float16:residual", dict(block_n=192)),
    ("gemm:333x1000x72:bfloat16:nt:out=bfloat16:bias", dict(block_m=256, block_n=128)),
    ("gemm:61x4096x1024:bfloat16:nt:out=bfloat16", dict(block_m=64, consumers=1, block_n=256, stages=5)),
])
def test_right_on_ragged_shapes_and_epilogues(harness, workload, params):
    assert run_on_gpu(harness, get("persistent_gemm"), workload, tma_store=True, **params) < rounded_output_bound(workload)
