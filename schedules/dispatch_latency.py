"""The cp.async wgmma kernels' ring in the dispatcher's model (:mod:`schedules.dispatch`): a block of
``wgmma_gemm`` (gemm 19) or its tf32 kernel keeps ``stages - 1`` K tiles of A and B in flight and waits for
the oldest before that K tile's wgmmas, so its K loop takes at least one memory latency per ``stages - 1`` K
tiles, whatever bandwidth is left over (Little's law: the bytes a block keeps in flight over the time each
takes to arrive). Where many blocks share the GPU the DRAM term is the longer; where a few dozen rows meet a
large weight (one tile row: one block an SM, each streaming a long K) this floor is: on the H200's sweep of
such products the cp tiles streamed 17-58 GB/s per SM, their rings' 48-144 KiB in flight at a latency of
1.0-2.9 µs, and ran up to 2.1x the model's time without it (reports/results/NVIDIA_H200/calibration/
sweep_few_dozen_nt/model.md). ``cp_latency_us`` is fitted by ``schedlab calibrate`` (0 or absent: no floor)."""

from __future__ import annotations

from .common import ceil_div


def ring_latency_us(blocks: int, per_sm: int, k_tiles: int, stages: int, gpu, cal: dict) -> float:
    """The least time of a grid of ``blocks`` cp.async wgmma blocks (``per_sm`` fit an SM), each walking
    ``k_tiles`` K tiles through a ring of ``stages`` slots: its rounds of resident blocks, each round
    ``k_tiles`` K tiles at one ``cp_latency_us`` per ``stages - 1`` of them."""
    latency = cal.get("cp_latency_us", 0.0)
    if not latency:
        return 0.0
    resident = max(1, min(per_sm, ceil_div(blocks, gpu.sms)))
    return ceil_div(blocks, gpu.sms * resident) * k_tiles * latency / max(1, stages - 1)
