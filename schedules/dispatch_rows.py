"""The dispatcher's model of the operands' row pitch on the TMA kernels: which operands are copied first into padded
rows, what the copies cost, and what the rows read in place cost.

A tensor map needs rows of whole 16 bytes: an operand whose stored rows are not (K or N not a multiple of 8 for a
16-bit type, of 4 for fp32) is copied first into a padded buffer (``pad_operands``), a kernel of its own that reads
and writes the operand once (:func:`pad_us`). The TMA unit also reads rows that are whole 16 bytes but not whole 32
slowly (every other row starts 16 bytes off a 32-byte boundary): 3000 × 3000 × 3000 bf16 (rows of 6000 bytes) ran
437 TFLOP/s on its best tile where 3008³ ran 672 and 4096 × 4096 × 4000 (rows of 8000 bytes) as fast as 4096³
(H100, reports/results/NVIDIA_H100_80GB_HBM3/pad_pitch). So the dispatcher's padded candidates copy to rows of whole
128-byte lines (``pad_pitch`` = :data:`ALIGNED_PITCH`), and with that pitch a copy also takes the operands whose rows
would be read slowly (:meth:`schedules.tma_fp16.TmaConfig.copied`); where no operand needs a copy but one has slow
rows, each TMA candidate is offered both ways (:func:`slow_row_twins`): read in place at :data:`SLOW_ROWS_FACTOR`
of its efficiency, or copied first."""

from __future__ import annotations

import math
from dataclasses import replace

from .tma_fp16 import ALIGNED_PITCH
from .workloads import itemsize

# A TMA kernel's rate on rows read in place that are whole 16 bytes but not whole 32, against whole lines: three tiles
# over two pairs of bf16 products whose K alone differs, 3000 against 3008 (M, N 3000 and 3008), ran 0.62-0.83x
# (128 x 192: 136.0 against 88.2 us at 3000 x 3000 x 3000/3008; 256 x 160: 123.6 against 102.5; 128 x 256: 145.1
# against 108.9); the geometric mean of the six, until a calibration sweep fits it (H100, 27b39c4:
# reports/results/NVIDIA_H100_80GB_HBM3/pad_pitch/alignment_probe.json.gz)
SLOW_ROWS_FACTOR = 0.73
TMA_FAMILIES = ("tma", "tma_small", "tma_tf32")


def padding(wl) -> dict:
    """The padding knobs of the dispatcher's TMA candidates for ``wl``: where a tensor map cannot take an operand's rows,
    copies of whole 128-byte lines (which take the slow rows of the other operand too); else none."""
    return dict(pad_operands=True, pad_pitch=ALIGNED_PITCH) if any(wl.misaligned_rows()) else {}


def slow_rows(wl, cfg) -> bool:
    """Whether the TMA kernel of ``cfg`` reads an operand in place whose rows are whole 16 bytes but not whole 32."""
    copied = cfg.copied(wl) if hasattr(cfg, "copied") else (False, False)
    return any(slow and not copy for slow, copy in zip(wl.misaligned_rows(32), copied))


def slow_row_twins(wl, cands) -> list:
    """Where no operand needs a copy but one has slow rows: each persistent TMA candidate of ``cands`` again with those
    operands copied first to whole lines (the model weighs the copies against the slow reads)."""
    if any(wl.misaligned_rows()) or not any(wl.misaligned_rows(32)):
        return []
    return [replace(c, config=replace(c.config, pad_operands=True, pad_pitch=ALIGNED_PITCH)) for c in cands
            if c.step in ("persistent_gemm", "tma_tf32_gemm")]


def pad_us(wl, cfg, gpu, cal) -> float:
    """The copy kernels a configuration runs first (its ``copied(wl)``): ``pad_operands`` giving rows a pitch of
    ``pad_pitch`` bytes, or the tf32 TMA kernel transposing A stored K×M; each reads and writes its operand once."""
    copied = getattr(cfg, "copied", None)
    if copied is None:
        return 0.0
    item, us = itemsize(wl.dtype), 0.0
    for shape, copy in zip((wl.a_shape, wl.b_shape), copied(wl)):
        if copy:
            us += cal["launch_us"] + 2 * item * math.prod(shape) / (gpu.memory_gbps * 1e3)
    return us
