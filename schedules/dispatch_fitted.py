"""Tile widths fitted to whole rounds of the SMs, in the dispatcher's model (:mod:`schedules.dispatch`).

A persistent grid of output tiles runs in rounds of one tile per SM; the last round's idle SMs are
lost time: 224 tiles of 128 × 256 on 132 SMs take two rounds for 1.7 rounds of work. Split-K and
stream-K fill the idle SMs at the price of fp32 pieces and a second kernel; a narrower tile fills
them for free where the tiles can be made to number just under a whole number of rounds: 128 × 224
tiles over 2000 × 3584 are 16 × 16 = 256, two rounds of 0.875 of the work each. cuBLAS does this on
Hopper (its kernels for the language-model layers of the H200 benchmark are 128 × 224, 256 × 160,
256 × 144: reports/results/NVIDIA_H200/fitted_tiles).

A B stored N×K (layouts nt and tt, as PyTorch's Linear keeps its weight) comes in TMA boxes of any
multiple of 8 rows, so the kernel takes any width that is a multiple of 16
(:func:`schedules.tma_common.b_box_rows`); an n-major B comes in 64-column panels, and keeps the
widths of ``TMA_TILES``. A fitted tile's rate is its own where a sweep timed it (the calibration's
"weights stored" sweep: 128 × 192, 128 × 224, 256 × 160, 256 × 192), else the calibrated tiles' of
the same rows interpolated in width, and a 256-row tile wider than the widest calibrated one takes
the best calibrated two-consumer rate (:func:`schedules.calibration.tile_efficiency`).
"""

from __future__ import annotations

from dataclasses import replace

from .common import GpuLimits, ceil_div
from .gemm_tma_ws import PersistentConfig

# rounds of tiles a width is fitted to: one to four, and no more than the widest tile of the same rows takes
# (more rounds leave less to gain: the last round's idle share is at most a quarter of the grid's time by then)
FITTED_ROUNDS = 4
# the rows of the fitted tiles: two consumer warpgroups of 64 or 128 rows
FITTED_ROWS = (128, 256)
# widths in steps of 32 (the kernel takes steps of 16): a 16-bit output leaves through the staged store, 32
# columns at a time; without it (widths 112, 144, 176, 240) the tiles ran 7-57% over the model's time on an
# H200, the widths of 32 within 0-8%, except where a narrower tile took a round more than the widest one
# (1234 x 6000 x 3000, 1500 x 5000 x 2048: 128 x 160 in three rounds 1.04-1.12x slower than 128 x 256 in two;
# reports/results/NVIDIA_H200/fitted_tiles)
FITTED_STEP = 32
SHARED_BYTES = GpuLimits().max_dynamic_shared_bytes  # an sm_90 block's opt-in shared memory
MOST_STAGES = 6


def fitted_stages(bm: int, bn: int, item: int = 2) -> int:
    """Ring slots of a ``bm × bn`` tile: as many as fit in an SM's shared memory with, where the width
    is a multiple of 32, the staged store's areas (the configuration's own count), up to MOST_STAGES."""
    cfg = PersistentConfig(block_m=bm, block_n=bn, stages=1, staged_store=bn % 32 == 0)
    return max(s for s in range(1, MOST_STAGES + 1) if replace(cfg, stages=s).shared_bytes(item) <= SHARED_BYTES)


def fitted_tiles(wl, sms: int, fixed) -> list[tuple[int, int, int]]:
    """(block_m, block_n, stages) of the tiles fitted to whole rounds of ``sms`` tiles: for each row
    count of FITTED_ROWS and each number of rounds r up to FITTED_ROUNDS, the narrowest width (a
    multiple of FITTED_STEP, 64 < width ≤ 256, at most 192 for 256 rows: a consumer's accumulators) whose
    tiles fit in r rounds, where that widest tile takes r rounds or more and the width is not one of the
    ``fixed`` tiles; none where B is not stored N×K or for a batch (its products multiply the tiles)."""
    if not wl.trans_b or getattr(wl, "batched", False):
        return []
    fixed = {(bm, bn) for bm, bn, _ in fixed}
    out = []
    for bm in FITTED_ROWS:
        rows = ceil_div(wl.M, bm)
        widest = 256 if bm == 128 else 192
        # no more rounds than the widest tile of these rows takes: a width is narrowed to do less work in as many
        # rounds, not to add a round of smaller tiles (that measured slower than the model says, see FITTED_STEP)
        for r in range(1, min(FITTED_ROUNDS, ceil_div(rows * ceil_div(wl.N, widest), sms)) + 1):
            cols = r * sms // rows
            if cols < 1:
                continue
            bn = ceil_div(ceil_div(wl.N, cols), FITTED_STEP) * FITTED_STEP
            if 64 < bn <= widest and (bm, bn) not in fixed and all(t[:2] != (bm, bn) for t in out):
                out.append((bm, bn, fitted_stages(bm, bn)))
    return out
