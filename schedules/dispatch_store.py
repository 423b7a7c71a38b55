"""The dispatcher's model of storing C (:mod:`schedules.dispatch`): the bytes a product's output
and epilogue move, and the share of the bandwidth its stores reach, which depends on how a kernel's
warps write the rows of C (16-byte vectors, pairs from the accumulator fragments, scalars, runs of
a row) and on where those rows start."""

from __future__ import annotations

from dataclasses import replace

from .common import SECTOR_BYTES
from .workloads import itemsize

RUN_UNALIGNED_STORE = 0.5  # store_factor's runs of outputs that straddle sectors, until a sweep fits it


def batches(wl) -> int:
    """Products of a batch (bmm): 1 for a single product."""
    return getattr(wl, "batches", 1)


def output_bytes(wl) -> int:
    """Bytes per output: its type's (4 for fp32, 2 for a 16-bit output)."""
    return itemsize(getattr(wl, "out_dtype", "float32"))


def epilogue_bytes(wl) -> int:
    """Bytes the epilogue of one product reads besides it: the bias (N outputs' worth), R (one per
    output); 0 without an epilogue."""
    return getattr(wl, "epilogue_bytes", 0) // batches(wl)


def store_bytes(wl) -> int:
    """Bytes a block moves per output as it stores its tile: the output, and R read beside it."""
    return output_bytes(wl) * (2 if getattr(wl, "residual", False) else 1)


def store_factor(wl, cal, cfg=None, runs: bool = False, sectors: bool = False) -> float:
    """C's rows start 16-byte aligned only when N % 4 == 0 (fp32; a 16-bit output's rows need N % 8
    for 16-byte stores, but its 8-byte stores of 4 outputs only N % 4): otherwise a thread's 4 or 8
    adjacent outputs leave as scalar stores strided across the warp's lanes (``unaligned_store``).
    A thread tile one column wide (``thread_n = 1``) stores scalars too, but a warp's lanes write 32
    consecutive floats of a row: whole sectors, whatever N's alignment. ``runs``: a kernel whose
    warps store runs of consecutive outputs of a row that do not start on a sector (the TMA
    kernels' staged store, a row of the tile at a time; the TF32 kernel's 8-column groups of C =
    Dᵀ): about two sectors written per sector of output, ``run_unaligned_store`` (0.5 until a sweep
    fits it; the H100's floor candidates: the staged 128 × 128 tile stored 57.6 MB at 5205 columns
    in 51 µs, 1.1 TB/s, where 0.25 had it at 95). ``sectors``: a kernel whose stores are runs of
    one sector of a row, aligned where the row is (the Hopper kernels' stores of an fp32 C from the
    accumulator fragments: 4 lanes × 2 floats, or two float stores to the sector).

    Runs of either kind straddle sectors on rows that are 16-byte aligned but not a whole number of
    sectors (N · the output's bytes not a multiple of 32: an fp32 C with N % 8 = 4 starts every
    other row mid-sector): ``run_unaligned_store`` there too. On the H100, 5067x11356x10 in fp16
    (230 MB of fp32 C) stored at 1.07 TB/s from the TMA kernel's fragments where 8192x8192x32 and
    9000x6000x48 stored at 2.1-2.3; over the TMA kernels' 440 H100 timings the model's mean |log
    error| goes 0.119 -> 0.109, over the 31 it moves 0.244 -> 0.096 (reports/results/
    NVIDIA_H100_80GB_HBM3/store_sectors)."""
    if wl.N % 4 == 0:
        if (runs or sectors) and wl.N * output_bytes(wl) % SECTOR_BYTES:
            return cal.get("run_unaligned_store", RUN_UNALIGNED_STORE)
        return 1.0
    if getattr(cfg, "thread_n", 0) == 1:
        return 1.0
    return cal.get("run_unaligned_store", RUN_UNALIGNED_STORE) if runs else cal["unaligned_store"]


# The SIMT tiles' staged store (FastTileConfig.staged_store): the block's C tile through shared memory, a
# warp's stores on 32 consecutive columns of a row, offered where C's rows are not whole float4s (N % 4 != 0;
# the fragments' float4 stores then leave as scalars, unaligned_store). It stores runs of a row
# (run_unaligned_store), and its body differs: a thread's 8 × 8 outputs one dense block in place of the
# vthreads' 4 × 4 sub-tiles 16 and 32 apart (whose staging would stage a tile per vthread), its lanes ordered
# so that a shared-memory cycle's B reads fill the banks once. Its time against the same tile unstaged on
# aligned products (H100, 087fcc3, reports/results/NVIDIA_H100_80GB_HBM3/simt_staged_store): 128 × 128
# 0.96-1.18x (geometric mean 1.03), 64 × 64 0.98-1.09x (1.04); with the lanes side by side along N (23d8942)
# 1.05-1.12x and 1.19-1.25x.
SIMT_STAGED_BODY = {"simt 128x128 t8x8": 1 / 1.03, "simt 64x64 t8x8": 1 / 1.04}
SIMT_STAGED_OTHER = 1 / 1.035  # the other tiles (unmeasured unstaged-to-staged): the mean of the two above


def simt_staged_twins(wl, cands: list) -> list:
    """``cands`` (SIMT candidates) and, where C's rows are not whole float4s, each one's staged twin: the
    tiles without split-K (their partial sums go to an aligned workspace) and more than one column a
    thread (a one-column thread tile's warp already writes 32 consecutive floats)."""
    if wl.N % 4 == 0:
        return cands
    return cands + [replace(c, config=replace(c.config, staged_store=True)) for c in cands
                    if c.config.split_k == 1 and c.config.thread_n > 1]


def simt_staged_body(cfg, key: str) -> float:
    """The share of its unstaged rate a SIMT tile's body keeps under ``staged_store`` (1 without it)."""
    return SIMT_STAGED_BODY.get(key, SIMT_STAGED_OTHER) if getattr(cfg, "staged_store", False) else 1.0


def with_store(wl, cand, valid):
    """``cand`` (a persistent TMA tile) with the store that suits its output, where ``valid(candidate)``
    (it builds: its ring and the store's shared memory fit) holds, else as it is:

    - ``staged_store`` (tiles 128 or more wide, no split-K) where the fragments' own stores waste sectors: a
      16-bit output or an epilogue, a float32 C with N % 4 ≠ 0; on an aligned float32 C with a short K the staged
      store measured 27% slower, 128 × 64 tiles 8-15% (docs/dispatcher.md#staged-stores);
    - ``tma_store`` (schedules/tma_store.py) for a float32 C whose rows are whole 16 bytes, without an epilogue,
      split-K, stream-K or a batch: the fragments' stores drained at 1.9-2.2 TB/s where a short K makes them the
      whole cost, the TMA unit's at 2.4-2.6 (H100, fp16 inputs: 2768x5208x64 29.7 -> 23.9 µs, 2648x13520x32
      68.8 -> 57.0, 4096x8192x16 61.8 -> 52.2; 4096³ 197 -> 193; docs/dispatcher.md#tma-stores). The model's
      store rate was fitted where those stores drained well: its estimates (24.7, 55.4, 53.0, 194 µs) were
      the TMA store's times, not the fragments'."""
    cfg = cand.config
    if cfg.split_k > 1:
        return cand
    if not (getattr(wl, "has_epilogue", False) or wl.N % 4):  # stream-K, a batch: refused by valid (tma_store_refusal)
        new = replace(cand, config=replace(cfg, tma_store=True))
    elif cfg.block_n >= 128:
        new = replace(cand, config=replace(cfg, staged_store=True))
    else:
        return cand
    return new if valid(new) else cand
