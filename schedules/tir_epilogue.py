"""A GEMM's epilogue in the kernels written as TIR (TVMScript) rather than scheduled: the value an
output gets (:func:`epilogue_value`), the split-K sum that applies it (:func:`split_sum_epilogue`) and
the kernel's signature (:func:`workload_params`).

The scheduled steps get the epilogue from the workload's own elementwise block "D", inlined into
their write-back (:func:`schedules.common.fuse_epilogue`). A TIR kernel writes its outputs itself, so
it computes the same expression where it stores each one: ``act(alpha·acc + bias[col]) +
beta·R[row, col]`` in float32, rounded to the output type last (:func:`schedules.workloads.epilogue_value`,
the expression of the scheduled steps' block "D"; the Hopper kernels' own store of pairs is
:mod:`schedules.wgmma_epilogue`).
"""

from __future__ import annotations

import tvm
from tvm.script import tirx as T

from .common import ceil_div
from .workloads import Epilogue, Gemm
from .workloads import epilogue_value as workload_epilogue

SUM_THREADS = 256


def epilogue_value(wl: Gemm, x, bias, R, row, col):
    """The output at (``row``, ``col``) from the float32 product ``x``: the workload's epilogue on
    it, rounded to its output type (:func:`schedules.workloads.epilogue_value`, with the bias of its
    column and R's element). ``bias`` and ``R``: the kernel's buffers (None where the workload has
    none); ``row``, ``col``: the output's indices in a 2-D output."""
    ep = wl.epilogue or Epilogue()
    return workload_epilogue(wl, x, bias[col] if ep.bias else None, R[row, col] if ep.residual else None)


def workload_params(func, wl: Gemm):
    """``func`` written with every argument a GEMM can have, ``(A, B, bias, R, C)``, keeping those
    the workload has (:meth:`Gemm.arg_names`: A, B, C; or A, B, [bias], [R], D), in that order: a
    TIR kernel declares its signature once, and an argument its body never reads is dropped here."""
    keep = {"bias": bool(wl.epilogue and wl.epilogue.bias), "R": bool(wl.epilogue and wl.epilogue.residual)}
    params = [p for p in func.params if keep.get(p.name, True)]
    return tvm.tirx.PrimFunc(params, func.body, func.ret_type, func.attrs)


def split_sum_epilogue(wl: Gemm, SPLIT: int):
    """(macro, blocks): split-K's second kernel for a 2-D product with an epilogue: ``D =
    epilogue(Σ_s P[s])`` over the fp32 partial products P[SPLIT, M, N]. One thread per output,
    consecutive threads on consecutive outputs (coalesced), the slices summed in order
    (deterministic), the epilogue applied to the sum (:func:`epilogue_value`)."""
    M, N = wl.M, wl.N
    MN = M * N
    BLOCKS = ceil_div(MN, SUM_THREADS)
    GUARD = MN % SUM_THREADS != 0

    @T.macro
    def split_sum(P, D, bias, R):
        with T.launch_thread("blockIdx.x", BLOCKS) as sum_bid:
            sum_tid = T.launch_thread("threadIdx.x", SUM_THREADS)
            total = T.alloc_buffer((1,), "float32", scope="local")
            P_flat = T.decl_buffer((SPLIT * MN,), "float32", data=P.data)
            e: T.let[T.int32] = sum_bid * SUM_THREADS + sum_tid
            if (e < MN) if GUARD else True:
                total[0] = P_flat[e]
                for s in T.unroll(1, SPLIT):
                    total[0] = total[0] + P_flat[s * MN + e]
                D[e // N, e % N] = epilogue_value(wl, total[0], bias, R, e // N, e % N)

    return split_sum, BLOCKS
