"""A SIMT tile held to the blocks per SM the model counted (FastTileConfig.min_blocks, CUDA's
__launch_bounds__(threads, blocks)): the request reaches the product's kernel alone, ptxas holds the
count to the line without spilling where it would have landed a few registers over, the request is
in the schedule's trace (the tuner replays traces), and the dispatcher asks for it only where its
register count is on the line and the loads are full width."""

import copy
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from reports.engine import build as B  # noqa: E402
from schedules import dispatch, get, gpus, parse_workload  # noqa: E402
from schedules.common import MIN_BLOCKS_KEY, new_schedule, with_build_annotations  # noqa: E402
from schedules.dispatch_registers import held_blocks  # noqa: E402
from tests.helpers import run_on_gpu, without_piece_test  # noqa: E402

# the 128 x 128 tile of 8 x 8 threads built for this product with its write-back tested at every store
# (as it was built before whole_piece_bounds): ptxas gives it 137 registers, one block of 256 threads
# an SM where 128 lets two share it
OVER_THE_LINE = "gemm:1126x8700x1352"
H200 = gpus.profile("NVIDIA H200")


def _built(workload, step="warp_tiled_gemm", every_store=False, **params):
    _, wl, _, resolved = B.resolve_named(step, workload, params)
    sch = resolved.schedule(wl)
    if every_store:
        without_piece_test(sch)
    return B.build(sch, B.cuda_target("sm_90"), pass_config=resolved.pass_config)


def _bounds(cuda):
    return re.findall(r"__global__ void __launch_bounds__\(([^)]*)\) (\w+)\(", cuda)


@pytest.fixture(scope="module")
def over_the_line():
    return _built(OVER_THE_LINE, every_store=True), _built(OVER_THE_LINE, every_store=True, min_blocks=2)


def test_a_tile_over_the_line_is_held_to_two_blocks_without_spills(over_the_line):
    free, held = over_the_line
    assert free.kernel.registers > 128  # the cliff: one block an SM
    assert held.kernel.registers <= 128 and held.kernel.spills == 0
    assert ("256", "main_kernel") in set(_bounds(free.device.cuda))
    assert ("256, 2", "main_kernel") in set(_bounds(held.device.cuda))
    # nothing else of the kernel changes: the CUDA differs in the launch bounds alone
    strip = lambda s: re.sub(r"__launch_bounds__\([^)]*\)", "", s)  # noqa: E731
    assert strip(free.device.cuda) == strip(held.device.cuda)
    assert MIN_BLOCKS_KEY in held.lowered and MIN_BLOCKS_KEY not in free.lowered


def test_only_the_products_kernel_asks():
    """Split-K's second kernel (the sum of the partials) keeps its own bounds: TVM's source asks for
    blocks per SM on the product's kernel alone."""
    built = _built("gemm:1000x500x2001", "split_k_gemm", min_blocks=2)
    emitted = built.executable.mod.imports[0].inspect_source()
    bounds = dict((name, b) for b, name in _bounds(emitted))
    assert len(bounds) == 2 and sorted(bounds.values()).count("256, 2") == 1


def test_a_request_ptxas_meets_by_itself_is_dropped():
    """Where ptxas's own count fits the blocks asked for (128 registers, two blocks of 256), the kernel
    is built without the request: held to a count it fits anyway, ptxas schedules it differently, and
    such kernels ran 2-7% slower. The source kept is the one compiled."""
    free = _built("gemm:9760x7747x5126", group_m=8, pad_operands=True)
    asked = _built("gemm:9760x7747x5126", group_m=8, pad_operands=True, min_blocks=2)
    assert free.kernel.registers <= 128
    assert asked.device.cuda == free.device.cuda and asked.kernel.registers == free.kernel.registers
    assert "256, 2" in asked.executable.mod.imports[0].inspect_source()  # what TVM emitted: the request


def test_a_request_that_would_spill_is_dropped():
    """206 registers held to 128 (eight blocks of 64 threads) spill 576 bytes, and ran 0.79x as fast:
    the kernel keeps ptxas's own count (the write-back tested at every store, as :data:`OVER_THE_LINE`)."""
    params = dict(block_m=64, block_n=64, warps_m=2, warps_n=1, group_m=8, pad_operands=True)
    asked = _built("gemm:2059x5897x1584", every_store=True, min_blocks=8, **params)
    assert asked.kernel.registers > 128 and asked.kernel.spills == 0
    assert "__launch_bounds__(64)" in asked.device.cuda and "__launch_bounds__(64, 8)" not in asked.device.cuda


def test_the_request_is_in_the_trace_and_survives_a_replay():
    wl = parse_workload(OVER_THE_LINE)
    spec = get("warp_tiled_gemm")
    sch = spec.build(wl, spec.config(min_blocks=2))
    fresh = new_schedule(wl.prim_func())
    sch.trace.apply_to_schedule(fresh, remove_postproc=False)
    lowered = with_build_annotations(fresh.mod).script()
    assert lowered.count(MIN_BLOCKS_KEY) == 1 and 'T.attr(0, "tirx.launch_bounds_min_blocks_per_sm", 2)' in lowered
    plain = spec.build(wl, spec.config(thread_m=4, thread_n=4)).mod  # no hold, no piece test (4 x 4 pieces)
    assert with_build_annotations(plain) is plain  # nothing asked, nothing rebuilt


def test_min_blocks_is_a_parameter_with_zero_for_ptxas_choice():
    spec = get("warp_tiled_gemm")
    spec.validate(parse_workload("gemm:256x256x256"), spec.config(min_blocks=0))
    with pytest.raises(Exception, match="min_blocks must be positive"):
        spec.validate(parse_workload("gemm:256x256x256"), spec.config(min_blocks=-1))


def test_the_dispatcher_holds_a_tile_only_where_its_registers_are_on_the_line():
    wl = parse_workload(OVER_THE_LINE)
    cfg = get("warp_tiled_gemm").config(group_m=8)  # 128 x 128, 8 x 8 a thread: 256 threads
    assert held_blocks(wl, cfg, 128, H200, 16) == 2    # 136 would leave one block an SM
    assert held_blocks(wl, cfg, 120, H200, 16) == 0    # 8 more still fit two: nothing to hold
    assert held_blocks(wl, cfg, 136, H200, 16) == 0    # the model counts one already
    narrow = parse_workload("gemm:1126x8700x1351")  # rows of A not whole float4s: narrow loads, held alike
    assert min(cfg.load_vectors(narrow)) < cfg.vector and held_blocks(narrow, cfg, 128, H200, 16) == 2
    # one column a thread, 512 threads: four blocks at 32 registers, three at 40, whose 48 warps still saturate the SM
    skinny = get("skinny_gemm").config(block_m=16, block_n=128, thread_n=1, vector=1, warps_n=4)
    assert skinny.threads == 512 and held_blocks(parse_workload("gemm:211x3x200"), skinny, 32, H200, 16) == 0


def test_the_dispatchers_choice_carries_it_and_says_so():
    cal = copy.deepcopy(dispatch.CALIBRATION)
    wl = parse_workload(OVER_THE_LINE)

    def plain_tiles():  # the 128 x 128 tile of 8 x 8 threads, K tile 8, register double buffer: registers "t8x8"
        return [e for e in dispatch.rank(wl, "fp32", H200, cal) if dispatch.simt_register_key(e.config) == "t8x8"
                and e.candidate.key == "simt 128x128 t8x8"]

    cal["regs"]["t8x8"] = 128
    ests = plain_tiles()
    assert ests and all(e.config.min_blocks == 2 and e.terms["per_sm"] == 2 for e in ests)
    assert "held to 2 blocks/SM" in dispatch.describe(ests[0].candidate)
    cal["regs"]["t8x8"] = 120
    ests = plain_tiles()
    assert ests and not any(e.config.min_blocks for e in ests)


def test_the_sweeps_register_median_leaves_out_held_builds():
    import pandas as pd

    from reports.experiments.calibrate import _sweep_registers

    rows = [{"family": "simt", "name": "warp_tiled_gemm", "params": {"min_blocks": 2}, "registers": 120}] * 3
    rows += [{"family": "simt", "name": "warp_tiled_gemm", "params": {}, "registers": r} for r in (129, 137)]
    assert _sweep_registers(pd.DataFrame(rows)) == {"t8x8": 136}


@pytest.mark.gpu
def test_a_held_tile_is_right_on_the_gpu(harness):
    assert run_on_gpu(harness, get("warp_tiled_gemm"), OVER_THE_LINE, min_blocks=2) < 1e-5
    assert run_on_gpu(harness, get("split_k_gemm"), "gemm:700x300x3001:nt:bias:relu", min_blocks=2) < 1e-5
