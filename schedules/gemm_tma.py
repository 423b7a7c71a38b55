"""gemm 20: TMA loads (tma_gemm). Written, as the Hopper steps after it, as TIR kernels (TVMScript +
``T.ptx`` calls) in the style of ``schedules/gemm_wgmma.py``.

    C (M×N, fp32, row-major) = A (M×K, fp16|bf16, row-major) · B (K×N, same dtype, row-major)

The Hopper steps, a file per stretch of the ladder:

* gemm 20, tma_gemm: this file, its kernel and the fp16/bf16 pieces of gemm 20-23 (the
  configuration, geometry, loader, wgmma macro, epilogue) in tma_fp16.py;
* gemm 21-23, warp_specialized_gemm, persistent_gemm, cluster_gemm: gemm_tma_ws.py;
* gemm 27, tma_tf32_gemm: gemm_tma_tf32.py;
* gemm 29-30, fp8_tma_gemm and fp8_block_scaled_gemm (8-bit float inputs and their scales): gemm_fp8.py;
* what they share (TMA loads, tensor maps, mbarriers, split-K, copy kernels, the warp-specialized
  ring): tma_common.py.

What TVM 0.27 provides and these files use:

* ``T.tvm_stack_alloca("tensormap", 1)`` + ``T.tensormap_encode_tiled(...)`` in the *host* part of
  the PrimFunc (before the first ``launch_thread``): the default ``tvm.compile`` pipeline lowers it
  to a packed call of ``runtime.cuTensorMapEncodeTiled`` (libtvm_runtime_cuda.so → the driver's
  ``cuTensorMapEncodeTiled``), run on every call of ``f(A, B, C)``, and ``SplitHostDevice`` passes
  the 128-byte map to the kernel as ``const __grid_constant__ CUtensorMap``.
* ``T.ptx["cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"]``,
  ``T.ptx.mbarrier.*``, ``T.cuda.mbarrier_wait`` (``mbarrier.try_wait.parity`` loop),
  ``T.ptx["setmaxnreg.{inc,dec}.sync.aligned.u32"]``, ``T.ptx["wgmma.mma_async..."]``.

What TVM does not provide for Hopper: a wgmma tile primitive (``gemm_async`` is tcgen05, i.e.
Blackwell only), so the MMA is raw ``T.ptx`` as in gemm_wgmma.py. Its tile-level TMA
(``Tx.copy_async(dispatch="tma_auto")``) only lowers in a tirx-dialect kernel built with
``tir_pipeline="tirx"``, not in the lab's launch_thread kernels through the default pipeline
(tried). The ``tvm.backend.cuda.lang`` helpers (PipelineState, Pipeline/MBarrier,
ClusterPersistentScheduler2D, WarpgroupRole) do build in this style (tried); these files keep the
equivalent logic in closed form (slot = it % stages, parity = it // stages % 2, grouped tile
index) so the simplifier folds it and every barrier is visible in one place.

gemm 20 (``warp_specialized=False``) is the stepping stone: all warpgroups compute; thread 0
issues the TMA loads ``stages-1`` tiles ahead, one ``__syncthreads`` per K tile frees the slot
(like gemm_wgmma.py, but no thread copies operand bytes itself). The warp-specialized kernel of
gemm 21-23 (gemm_tma_ws.py) starts from it.

Operand layouts and batches (16-bit kernels): an operand stored with K contiguous (A of nn/nt, B of
nt/tt) is loaded k-major, one stored with M or N contiguous (A of tn/tt, B of nn/tn) in 64-column
panels, m/n-major; wgmma reads either form through its transpose immediates and the descriptors'
strides (see ``Geometry``), so a transposed operand costs no copy and no extra instruction. A bmm
(``bmm:BxMxNxK``) gets 3-D tensor maps (the batch outermost) and work units (product, tile),
product-major; the batch fills the GPU the way split-K does, so a bmm takes ``split_k=1``.
"""


from __future__ import annotations

from dataclasses import dataclass

from .gemm_tma_ws import fp16_tma_schedule
from .registry import register
from .tma_fp16 import TmaConfig
from .workloads import Gemm


# ------------------------------------------------------------------------------------------------
# gemm 20, the registered step (gemm 21-23: gemm_tma_ws.py)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TmaLoadConfig(TmaConfig):
    warp_specialized: bool = False
    persistent: bool = False
    step_name = "tma_gemm"


@register("tma_gemm", "gemm", TmaLoadConfig, aliases=("tma",), tags=("float16",))
def tma_gemm(wl: Gemm, cfg: TmaLoadConfig = TmaLoadConfig()):
    """TMA loads: wgmma_gemm's 128 × 256 blocks and 4-slot ring, but the A and B tiles enter shared
    memory through the Tensor Memory Accelerator (``cp.async.bulk.tensor``), issued by one thread,
    their arrival tracked by mbarriers (``expect_tx`` / ``try_wait``) instead of cp.async groups.

    wgmma_gemm's 256 threads each issued 16-byte copies of every tile (8 192 per K tile) and spent
    issue slots and registers on their addresses; here one thread describes a whole tile with a
    tensor map (encoded on the host, ``cuTensorMapEncodeTiled``, passed to the kernel as a
    ``__grid_constant__`` parameter) and the copy engine writes it already in the 128-byte
    swizzled layout wgmma reads. Zero-filled past the matrix edges, so ragged shapes need no
    clamping. Shapes whose row pitch is not a multiple of 16 bytes cannot be described by a tensor
    map and are refused (best_fp16_gemm falls back to wgmma_gemm's cp.async there).
    """
    return fp16_tma_schedule(wl, cfg)
