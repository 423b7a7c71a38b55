"""Split-K summed in a thread-block cluster (the warp-specialized TMA kernel's ``cluster_sum``,
:mod:`schedules.gemm_tma_ws`): the K slices of an output tile run on consecutive blocks of one
cluster, one work unit per block, and add their fp32 partial tiles through distributed shared
memory before slice 0 stores the tile, epilogue and all. Split-K otherwise writes every slice's
partial tile to a workspace and a second kernel adds them: a launch and a pass over the partials
that cost a decode-sized layer (a few rows against a large weight) as much as a fifth of its time.

Measured (H200, reports/results/NVIDIA_H200/few_rows_tma): on 128-row tiles the cluster took 1.26x the
second kernel's time (geometric mean of the 51 pairs there), 8 slices of 128 x 128 12-55 µs more, and the
same whether slice 0 kept one or three loads in flight (the gather's load latency is not the cost). Not
measured apart: slice 0 alone reads every other slice's tile through distributed shared memory, and clusters
of blocks that each fill an SM are placed less freely than single blocks. On 64-row tiles (one consumer
warpgroup) it was the fastest configuration on three of eleven 40- and 61-row layers, by up to 0.7 µs. Off by
default; the dispatcher does not offer it."""

from __future__ import annotations

from tvm.script import tirx as T

from .common import MAX_CLUSTER
from .errors import ScheduleParamError
from .tma_common import WorkUnits, split_slices
from .workloads import Gemm

CLUSTER_SUM_BARRIER = 1  # the named barrier (bar.sync) of a block's consumer warpgroups before they park


class ClusterSliceUnits(WorkUnits):
    """WorkUnits with the K slices of a tile on consecutive blocks, one unit per block: block ``b``
    takes slice ``b % SPLIT`` of tile ``b // SPLIT`` (unit ``slice·TILES + tile``, as WorkUnits
    numbers them), so that a cluster of SPLIT consecutive blocks holds one tile's slices."""

    def unit(self, first, i):
        return T.truncmod(first, self.SPLIT) * self.TILES + T.truncdiv(first, self.SPLIT) + i * self.STRIDE


def cluster_slice_sum(SPLIT: int, CONSUMER_THREADS: int, ACC: int):
    """Macros adding a tile's K slices in its cluster (``cluster_sum``; one unit per block, slice =
    rank in the cluster). ``consumers(acc, smem, part, thread)``, after the consumer warpgroups'
    last wgmmas: the consumers of slices 1.. meet on a named barrier (the ring is then idle) and park
    their accumulators at the start of their shared memory; a cluster barrier; slice 0's consumers
    add every other slice's (``ld.shared::cluster``, in slice order: the same sum on every run) into
    their own; a second cluster barrier keeps the peers' shared memory alive until then. Slice 0 then
    stores the tile as an unsplit kernel does. ``producer()``: the producer warpgroup's part in both barriers. The
    accumulators travel in 16-byte groups (``st.shared.v4``, ``ld.shared::cluster.v4``): a parked
    group of a thread at (group·CONSUMER_THREADS + thread)·16, consecutive threads side by side."""
    GROUPS = ACC // 4
    # 16-byte loads from other slices in flight at once: 3 (12 registers) beside 32 accumulators, 2 beside 64
    # (3 spilled 16 bytes at 8 slices of 128 x 128 tiles)
    PEERS_IN_FLIGHT = 3 if ACC <= 32 else 2
    CHUNKS = (SPLIT - 2) // PEERS_IN_FLIGHT + 1  # the other slices, PEERS_IN_FLIGHT at a time

    @T.macro
    def consumers(acc, smem, part, thread):
        base: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(smem.data)
        own: T.let[T.uint32] = T.reinterpret("uint32", thread * 16)  # this thread's 16 bytes of group 0
        if part > 0:
            T.evaluate(T.ptx.bar.sync(T.uint32(CLUSTER_SUM_BARRIER), T.uint32(CONSUMER_THREADS)))
            for q in T.unroll(GROUPS):  # accumulators 4q .. 4q+3 of consumer thread t at (q·threads + t)·16
                T.ptx.st.shared.v4.f32(base + own + T.uint32(16 * CONSUMER_THREADS * q),
                                       acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3])
        T.cuda.cluster_sync()
        if part == 0:
            peer = T.alloc_buffer((SPLIT,), "uint32", scope="local")
            val = T.alloc_buffer((4 * PEERS_IN_FLIGHT,), "float32", scope="local")
            for r in T.unroll(1, SPLIT):  # slice r's shared memory in the cluster's window
                T.evaluate(T.ptx.mapa.shared__cluster.u32(peer[r], base, T.uint32(r)))
            for q in T.unroll(GROUPS):
                # the group's loads from up to PEERS_IN_FLIGHT slices in flight together, then their sums (one
                # load at a time into the same registers measured the same: 54c7f99 against f64d799, few_rows_tma)
                for c in T.unroll(CHUNKS):
                    for i in T.unroll(PEERS_IN_FLIGHT):
                        if c * PEERS_IN_FLIGHT + i < SPLIT - 1:  # constants once unrolled
                            T.ptx.ld.shared__cluster.v4.f32(
                                val[4 * i], val[4 * i + 1], val[4 * i + 2], val[4 * i + 3],
                                peer[1 + c * PEERS_IN_FLIGHT + i] + own + T.uint32(16 * CONSUMER_THREADS * q))
                    for i in T.unroll(PEERS_IN_FLIGHT):
                        if c * PEERS_IN_FLIGHT + i < SPLIT - 1:
                            for e in T.unroll(4):
                                acc[4 * q + e] = acc[4 * q + e] + val[4 * i + e]
        T.cuda.cluster_sync()

    @T.macro
    def producer():
        T.cuda.cluster_sync()
        T.cuda.cluster_sync()

    return consumers, producer


def check_cluster_sum(cfg, wl: Gemm, item: int):
    """Where ``cfg.cluster_sum`` is on, its conditions: the warp-specialized kernel, 2 to 8 K slices
    (a portable cluster), no 2×1 multicast cluster, no stream-K or batch, and a ring large enough to
    park a block's partial tile (fp32, block_m × block_n); ScheduleParamError otherwise."""
    if not cfg.cluster_sum:
        return
    name, slices = cfg.step_name, split_slices(cfg, wl.K)
    if not cfg.warp_specialized:
        raise ScheduleParamError(f"{name}: cluster_sum needs warp_specialized (its consumers hold the partial sums)")
    if not 2 <= slices <= MAX_CLUSTER:
        raise ScheduleParamError(f"{name}: cluster_sum adds 2 to {MAX_CLUSTER} K slices in one cluster; "
                                 f"split_k={cfg.split_k} gives {slices} slice(s) of K={wl.K}")
    if cfg.cluster_m != 1 or cfg.stream_k or getattr(wl, "batched", False):
        raise ScheduleParamError(f"{name}: cluster_sum takes no 2x1 cluster (cluster_m=1), stream_k or batch: "
                                 f"the cluster is the K slices of one tile")
    if 4 * cfg.block_m * cfg.block_n > cfg.stages * cfg.stage_bytes(item):
        raise ScheduleParamError(f"{name}: cluster_sum parks a partial tile ({4 * cfg.block_m * cfg.block_n} "
                                 f"bytes) in the ring ({cfg.stages * cfg.stage_bytes(item)} bytes): more stages")
