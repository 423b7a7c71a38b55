"""The SIMT tiles' write-back tests a thread's piece of C against C's edges once
(schedules.common.whole_piece_bounds): inside C, a piece stores without a test; on C's edges each
store keeps its own. With the test at every store, ptxas gave the 128 x 128 tile of 8 x 8 outputs a
thread 200-214 registers on products whose C is cut on both sides (one block an SM where two fit)."""

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from reports.engine import build as B  # noqa: E402
from schedules import get, parse_workload  # noqa: E402
from schedules.common import PIECE_BOUNDS_KEY, new_schedule, with_build_annotations  # noqa: E402
from tests import helpers  # noqa: E402
from tests.helpers import rounded_output_bound, run_on_gpu  # noqa: E402

TILE = dict(block_m=128, block_n=128, block_k=8, thread_m=8, thread_n=8, vector=4, warps_m=4, warps_n=2, group_m=8)
CUT_BOTH_WAYS = "gemm:4422x797x4904"  # 4422 rows, 797 columns: C's last tiles are cut on both sides


def _schedule(workload, step="warp_tiled_gemm", tested_at_every_store=False, **params):
    _, wl, _, resolved = B.resolve_named(step, workload, {**TILE, **params})
    sch = resolved.schedule(wl)
    return (helpers.without_piece_test(sch) if tested_at_every_store else sch), resolved


def _built(workload, step="warp_tiled_gemm", tested_at_every_store=False, **params):
    sch, resolved = _schedule(workload, step, tested_at_every_store, **params)
    return B.build(sch, B.cuda_target("sm_90"), pass_config=resolved.pass_config)


@pytest.fixture(scope="module")
def cut_both_ways():
    return _built(CUT_BOTH_WAYS), _built(CUT_BOTH_WAYS, tested_at_every_store=True)


def test_a_tile_cut_both_ways_keeps_its_register_count(cut_both_ways):
    once, every = cut_both_ways
    assert every.kernel.registers > 160  # the balloon: one block of 256 threads an SM
    assert once.kernel.registers <= 128 and once.kernel.spills == 0


def test_a_piece_inside_stores_without_tests_and_one_on_the_edge_with(cut_both_ways):
    once, every = cut_both_ways
    stores = lambda cuda: len(re.findall(r"\bC_ptr\[", cuda))  # noqa: E731
    assert stores(every.device.cuda) == 64  # a thread's 8 x 8 outputs, unrolled
    assert stores(once.device.cuda) == 2 * 64  # the piece inside C, and the piece on its edges
    assert once.device.cuda.count("} else {") >= 4  # one test for each of the thread's 4 x 4 pieces
    assert PIECE_BOUNDS_KEY not in once.scheduled  # the annotation is spent when the module is built


@pytest.mark.parametrize("workload", ["gemm:4096x1024x512", "gemm:4000x1024x512"])
def test_a_write_back_not_cut_both_ways_is_left_as_it_is(workload):
    """No bounds test (C a whole number of tiles), or a row test alone: nothing to take out of the
    stores, and the CUDA is the one built without the annotation."""
    once, every = _built(workload), _built(workload, tested_at_every_store=True)
    assert once.device.cuda == every.device.cuda


def test_a_piece_smaller_than_8_by_8_keeps_a_test_at_each_store():
    """4 x 4 and 8 x 1 pieces never ballooned, and ran 0.86-0.98x as fast tested once."""
    wl = parse_workload(CUT_BOTH_WAYS)
    for step, params in (("skinny_gemm", {}), ("warp_tiled_gemm", dict(TILE, thread_m=4, thread_n=4))):
        spec = get(step)
        assert PIECE_BOUNDS_KEY not in spec.build(wl, spec.config(**params)).mod.script()
    assert PIECE_BOUNDS_KEY in get("warp_tiled_gemm").build(wl, get("warp_tiled_gemm").config(**TILE)).mod.script()


def test_the_annotation_is_in_the_trace_and_survives_a_replay():
    wl = parse_workload(CUT_BOTH_WAYS)
    spec = get("warp_tiled_gemm")
    sch = spec.build(wl, spec.config(**TILE))
    fresh = new_schedule(wl.prim_func())
    sch.trace.apply_to_schedule(fresh, remove_postproc=False)
    assert fresh.mod.script().count(PIECE_BOUNDS_KEY) == 1
    built = with_build_annotations(fresh.mod).script()
    assert PIECE_BOUNDS_KEY not in built and "T.where" not in built.split('T.sblock("C_pad_local")')[1].split("T.sblock")[0]


def test_an_annotated_block_that_is_not_a_write_back_is_left_as_it_is():
    """The annotation on a block whose loop holds more than it, or whose predicate is not C's two
    edges (here the unscheduled product's block: no predicate), is dropped and the block kept as it was."""
    fresh = new_schedule(parse_workload("gemm:1x4097x1").prim_func())
    fresh.annotate(fresh.get_sblock("C"), PIECE_BOUNDS_KEY, 1)
    before = fresh.mod.script().replace(f'T.sblock_attr({{"{PIECE_BOUNDS_KEY}": 1}})', "")
    after = with_build_annotations(fresh.mod).script()
    assert PIECE_BOUNDS_KEY not in after
    assert [line.strip() for line in after.splitlines() if line.strip()] == \
        [line.strip() for line in before.splitlines() if line.strip()]


@pytest.mark.gpu
@pytest.mark.parametrize("step,workload", [
    ("warp_tiled_gemm", CUT_BOTH_WAYS),  # scalar stores: a row of C is not a whole number of float4s
    ("warp_tiled_gemm", "gemm:1000x1000x300"),  # float4 stores, cut on both sides
    ("warp_tiled_gemm", "gemm:1000x500x2001:bias:gelu_tanh:residual"),  # an epilogue in the write-back
    ("split_k_gemm", "gemm:700x300x3001:nt:bias:relu"),
])
def test_pieces_inside_and_on_the_edges_are_right_on_the_gpu(harness, step, workload):
    params = dict(TILE, split_k=3) if step == "split_k_gemm" else TILE
    assert run_on_gpu(harness, get(step), workload, **params) < rounded_output_bound(workload)
