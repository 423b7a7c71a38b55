"""Stream-K on the persistent TMA kernels, fp16/bf16 and tf32 (``stream_k=True``): the decoding
every block runs covers each (tile, K tile) of the product exactly once and the fix-up finds every
piece of every split tile; the kernels compile for sm_90a (a fix-up kernel beside the product); the
knob is refused where it cannot apply; the dispatcher offers it where tiles are not a whole number
of rounds and models it (no partial round; the shared-out K tiles at their measured rate); (on a
GPU) the products are right."""

import pytest

from schedules import ScheduleParamError, get, parse_workload
from schedules.tma_common import StreamUnits, fixup_groups_per_block, stream_k_grid, stream_k_tiles, stream_plan
from tests.helpers import build_spec, rounded_output_bound, run_on_gpu


def _walk(tiles: int, grid: int, KT: int):
    """Every block's units as the kernel decodes them: check the stream and return the pieces and
    the tiles stored whole."""
    units = StreamUnits(tiles, grid, KT)
    done, pieces, whole = {}, {}, set()
    for b in range(grid):
        position = 0
        for t, k0, n_k, pos, piece in units.units_of(b):
            assert 0 <= t < tiles and n_k >= 1 and 0 <= k0 and k0 + n_k <= KT
            assert pos == position  # the ring's stream: the producer's and the consumers' positions agree
            position += n_k
            for k in range(k0, k0 + n_k):
                assert (t, k) not in done, f"K tile {k} of tile {t} walked twice"
                done[t, k] = b
            if piece is None:
                assert n_k == KT and t not in whole
                whole.add(t)
            else:
                assert 0 <= piece < units.PIECES and piece not in pieces
                pieces[piece] = (t, range(k0, k0 + n_k))
    assert len(done) == tiles * KT  # ... and every one walked
    return units, pieces, whole


@pytest.mark.parametrize("tiles,sms", [(1, 132), (75, 132), (131, 132), (133, 132), (263, 132), (264, 132),
                                       (265, 132), (448, 132), (1000, 7), (5, 3), (2, 1), (64, 66)])
def test_the_work_split_covers_every_k_tile_once_and_the_fix_up_every_piece(tiles, sms):
    for KT in (1, 2, 3, 7, 64, 113):
        grid = stream_k_grid(tiles, KT, sms)
        units, pieces, whole = _walk(tiles, grid, KT)
        for t in range(units.SK):  # the fix-up kernel's view of each stream-K tile (local index t)
            b0, b1 = units.first_block(t), units.last_block(t)
            assert b0 <= b1
            if b0 == b1:
                assert units.DP + t in whole  # one block walked it whole and stored it
                continue
            assert units.DP + t not in whole
            covered = []
            for b in range(b0, b1 + 1):
                piece = units.piece_of(b, t) if b == b0 else 2 * b  # the fix-up kernel's indexing
                tile, ks = pieces.pop(piece)
                assert tile == units.DP + t
                covered += list(ks)
            assert sorted(covered) == list(range(KT))
        assert not pieces, f"pieces no fix-up reads: {pieces}"
        assert whole | {units.DP + t for t in range(units.SK)} == set(range(tiles))
        assert set(range(units.DP)) <= whole and units.DP % grid == 0  # whole rounds first


def test_balanced_hybrid_split():
    # 448 tiles on 132 SMs: three rounds whole, then the partial one (52 tiles) shared out; every
    # block walks 3.39 tiles' worth of K tiles (±1), the persistent grid's busiest 4. A partial round
    # of fewer K tiles than blocks takes one more round with it; whole rounds: one round of single tiles
    assert stream_k_tiles(448, 132, 64) == 52 and stream_k_tiles(75, 132, 64) == 75
    assert stream_k_tiles(264, 132, 64) == 132 and stream_k_tiles(133, 132, 64) == 133
    assert stream_k_tiles(265, 132, 64) == 133 and stream_k_tiles(300, 132, 64) == 36
    units = StreamUnits(448, 132, 64)
    counts = {sum(u[2] for u in units.units_of(b)) for b in range(132)}
    assert counts <= {448 * 64 // 132, 448 * 64 // 132 + 1}
    plan = stream_plan(448, 132, 64)
    assert plan["k_tiles"] == 218 and plan["pieces"] <= 2 * 132 and plan["split_tiles"] <= 184
    # fewer K tiles than SMs: a block per K tile
    assert stream_k_grid(2, 3, 132) == 6


@pytest.fixture(scope="module")
def fused_build():
    # ragged M, N and K, an epilogue and a bf16 output, tiles past two rounds (the whole-tile part runs)
    return build_spec(get("persistent_gemm"), "gemm:1000x4100x1000:bfloat16:nt:out=bfloat16:bias:gelu_tanh",
                      stream_k=True, block_n=64, stages=8)


def test_stream_k_compiles_with_its_fix_up_kernel(fused_build):
    from reports.engine.kernel import launches_of

    b = fused_build
    assert "for 'sm_90a'" in b.device.ptxas_log
    assert len(b.device.kernels) == 2 and all(k.spills == 0 for k in b.device.kernels)
    assert "bf16.bf16" in b.device.ptx and "W = T.alloc_buffer" in b.lowered
    # 520 tiles of 128 x 64 on 132 blocks: the last 124 shared out; the fix-up gives each of them
    # 4 blocks of 2 register groups (8 in all: 32 accumulators a thread), 496 blocks, not 124
    units = StreamUnits(8 * 65, 132, 16)
    assert units.SK == 124 and fixup_groups_per_block(124, 8, 132) == 2
    assert [launch.grid[0] for launch in launches_of(b.host)] == [132, 124 * 4]


def test_tf32_stream_k_compiles():
    # fewer tiles than SMs (every tile shared out), K tiles of 32 in pairs of fragment sets
    b = build_spec(get("tma_tf32_gemm"), "gemm:1000x1000x2000", stream_k=True)
    assert len(b.device.kernels) == 2 and all(k.spills == 0 for k in b.device.kernels)
    assert ".tf32.tf32" in b.device.ptx


@pytest.mark.slow
def test_stream_k_compiles_on_clusters():
    b = build_spec(get("cluster_gemm"), "gemm:1100x512x2104:float16", stream_k=True)
    assert len(b.device.kernels) == 2 and ".multicast::cluster" in b.device.ptx
    assert all(k.spills == 0 for k in b.device.kernels)


def test_stream_k_is_refused_where_it_cannot_apply():
    wl = parse_workload("gemm:1000x1000x2000:float16")
    with pytest.raises(ScheduleParamError, match="split_k must be 1"):
        get("persistent_gemm").validate(wl, get("persistent_gemm").config(stream_k=True, split_k=2))
    with pytest.raises(ScheduleParamError, match="persistent"):
        get("warp_specialized_gemm").validate(wl, get("warp_specialized_gemm").config(stream_k=True))
    with pytest.raises(ScheduleParamError, match="batch"):
        get("persistent_gemm").validate(parse_workload("bmm:4x256x128x64:float16"),
                                        get("persistent_gemm").config(stream_k=True))
    with pytest.raises(ScheduleParamError, match="stream_k is for"):
        get("fp8_tma_gemm").validate(parse_workload("gemm:256x256x256:float8_e4m3fn:nt"),
                                     get("fp8_tma_gemm").config(stream_k=True))
    cfg = get("persistent_gemm").config(stream_k=True)
    assert cfg.describe().endswith("streamk") and cfg.workspace_bytes(wl) > 0


def test_dispatcher_models_stream_k_against_whole_rounds():
    import copy

    from schedules import dispatch
    from schedules.calibration import CALIBRATION
    from schedules.gpus import profile

    h100 = profile("H100")
    # 1000 x 4608 x 3584 bf16 (Qwen2.5's QKV at 1000 rows): 8 x 18 tiles of 128 x 256 are 1.09 rounds;
    # the last 12 tiles' K shared out over every SM: measured 55.6-57.4 µs on an H100 against 61.9 for
    # whole 128 x 192 tiles and 63.7 for 128 x 128 (reports/results/NVIDIA_H100_80GB_HBM3/bench_llm)
    # (among the widths of 64: a width fitted to whole rounds, schedules.dispatch_fitted, ranks above both)
    wl = parse_workload("gemm:1000x4608x3584:bfloat16:nt:out=bfloat16:bias")
    ranked = dispatch.rank(wl, "bf16", h100)
    best = next(e for e in ranked if e.config.block_n % 64 == 0)
    assert best.config.stream_k and best.config.block_n == 256 and best.terms["spread"] == 1.0
    assert best.terms["stream_k"]["split_tiles"] == 12 and best.terms["reduce_us"] > 0
    assert ranked[0].config.block_n % 64 and not ranked[0].config.stream_k
    no_fitted = parse_workload("gemm:1000x4608x3584:bfloat16:out=bfloat16:bias")  # B stored K×N: widths of 64 only
    assert "stream-K" in dispatch.explain(no_fitted, "bf16", gpu=h100).splitlines()[1]
    # 2000 x 3584 x 18944 (its MLP down projection at 2000 rows): 40-56 tiles shared out, each block's
    # range of them read from DRAM (the blocks that share a tile walk different K: none reuses what
    # another read), so the shared-out phase is DRAM-bound: stream-K measured 500 µs, whole tiles win
    long_k = parse_workload("gemm:2000x3584x18944:bfloat16:nt:out=bfloat16")
    ranked = dispatch.rank(long_k, "bf16", h100)
    assert not ranked[0].config.stream_k
    sk = next(e for e in ranked if getattr(e.config, "stream_k", False))  # (the cp.async kernels have none)
    busy = sk.terms["compute_us"] - CALIBRATION["fill_us"]
    assert sk.terms["stream_k"]["sk_tiles"] > 0 and sk.time_us > ranked[0].time_us and busy > 0
    # the shared-out phase at the DRAM's rate: faster shared-out K tiles do not change the estimate
    even = copy.deepcopy(CALIBRATION)
    even["stream_k_factor"] = 1.0
    assert dispatch.estimate(long_k, sk.candidate, h100, even).time_us == pytest.approx(sk.time_us)
    # whole rounds of tiles for every tile shape: not offered
    whole = parse_workload("gemm:8448x8192x4096:float16")
    assert not any(getattr(c.config, "stream_k", False) for c in dispatch.candidates(whole, "fp16", h100))


def test_the_calibration_solves_the_stream_k_factor_apart_from_the_tile_efficiency():
    import copy
    import dataclasses

    from reports.experiments import calibrate
    from schedules import dispatch
    from schedules.calibration import CALIBRATION
    from schedules.gpus import profile

    # a GPU whose memory keeps up with the shared-out phase (its K tiles' A and B pieces come from DRAM,
    # which on the H200 itself sets that phase's time): there the factor sets it, and the fit finds it
    h200 = dataclasses.replace(profile("H200"), memory_gbps=1e6)
    truth = copy.deepcopy(CALIBRATION)
    truth["stream_k_factor"] = 0.7
    pts = []
    for text in ("gemm:1024x1280x16384:float16", "gemm:1000x1000x8192:float16"):  # every tile shared out
        wl = parse_workload(text)
        for sk in (False, True):
            cfg = get("persistent_gemm").config(stream_k=sk)
            cand = dispatch.Candidate("persistent_gemm", cfg, "tma", "tma 128x256")
            pts.append((wl, "fp16", cand, dispatch.estimate(wl, cand, h200, truth).time_us))
    cal = copy.deepcopy(CALIBRATION)
    calibrate._fit_efficiencies(pts, cal, h200)
    calibrate._fit_stream_k_factor(pts, cal, h200)
    assert cal["efficiency"]["tma 128x256"] == pytest.approx(truth["efficiency"]["tma 128x256"], rel=0.01)
    assert cal["stream_k_factor"] == pytest.approx(0.7, rel=0.02)


@pytest.mark.parametrize("tiles,groups,per", [(12, 32, 1), (60, 32, 4), (132, 32, 8), (132, 16, 4),
                                               (1000, 32, 32), (3, 8, 1)])
def test_the_fix_up_spreads_a_few_split_tiles_over_every_sm(tiles, groups, per):
    # 12 split tiles of 128 x 256 on 132 SMs: 384 fix-up blocks of one register group each (they were
    # 12 blocks of 32 groups: 23 us of a 75 us layer); many tiles: up to 4 blocks per SM, each more groups
    assert fixup_groups_per_block(tiles, groups, 132) == per
    assert groups % per == 0 and (tiles * groups // per <= 4 * 132 or per == groups)


@pytest.mark.gpu
@pytest.mark.parametrize("name,workload,params", [
    ("persistent_gemm", "gemm:1000x4608x3584:bfloat16:nt:out=bfloat16:bias", dict(staged_store=True)),  # 12 split tiles
    ("persistent_gemm", "gemm:1000x1001x2000:float16:out=float16:residual", dict(pad_operands=True, block_n=128)),
    ("persistent_gemm", "gemm:1000x520x2000:bfloat16", {}),  # ragged tiles, fewer tiles than SMs
    ("persistent_gemm", "gemm:1892x1042x7208:float16", dict(pad_operands=True)),  # few tiles, long K
    ("persistent_gemm", "gemm:777x1500x1001:float16", dict(pad_operands=True)),  # ragged K
    ("persistent_gemm", "gemm:1000x4100x1000:bfloat16:nt:out=bfloat16:bias:gelu_tanh",
     dict(block_n=64, stages=8)),  # an epilogue, a bf16 output, whole tiles after the shared-out ones
    ("persistent_gemm", "gemm:1000x14336x512:bfloat16:nt:out=bfloat16:residual", {}),  # 3.4 rounds
    ("persistent_gemm", "gemm:64x64x4096:float16", {}),  # one tile over 64 blocks
    ("cluster_gemm", "gemm:1100x512x2104:float16", {}),
])
def test_stream_k_is_right(harness, name, workload, params):
    assert run_on_gpu(harness, get(name), workload, stream_k=True, **params) < rounded_output_bound(workload)


@pytest.mark.gpu
@pytest.mark.parametrize("workload,params", [("gemm:1000x1000x2000", {}),  # every tile shared out
                                             ("gemm:2000x5000x1000", {}),  # whole tiles after them
                                             ("gemm:1001x3001x777:tn", dict(pad_operands=True))])  # ragged K, A copied
def test_tf32_stream_k_is_right(harness, workload, params):
    assert 1e-6 < run_on_gpu(harness, get("tma_tf32_gemm"), workload, stream_k=True, **params) < 2e-3
