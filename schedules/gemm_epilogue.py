"""The fusion lesson, gemm 32 and 33: a linear layer's epilogue (bias, activation, residual, scaling,
a 16-bit output) computed after the product in a kernel of its own (what eager PyTorch does), then
in the product's registers before its one write.

Both steps build the same product: tensor_core_gemm's for fp16 inputs (WMMA, fp32 accumulators
staged through shared memory on their way out) and warp_tiled_gemm's for fp32 and bf16 inputs (the
SIMT body, bf16 widened to fp32 on its way to the FMAs: TVM 0.27 has no bf16 tensor-core
intrinsics). What differs is only where the elementwise block "D" of the workload
(:meth:`schedules.workloads.Gemm.prim_func`) runs. ``schedlab diff unfused_epilogue_gemm
fused_epilogue_gemm --shape 2048x8192x1024:bfloat16:nt:out=bfloat16:bias:gelu_tanh`` shows it: the
elementwise kernel's five primitives give way to one ``reverse_compute_inline``, the buffer C
disappears, and the write-back from the registers stores D.
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import aligned_vector, epilogue_block, fuse_epilogue
from .errors import ScheduleParamError
from .gemm_fast import WarpTileConfig, fast_tiled
from .gemm_wmma import TensorCoreConfig, tensor_core_tiled
from .registry import Launch, register
from .step_config import StepConfig
from .workloads import LAYOUTS, Gemm


@dataclass(frozen=True)
class WidenedWarpTileConfig(WarpTileConfig):
    """warp_tiled_gemm's configuration, taking 16-bit inputs too (widened to fp32 on their way to the
    FMAs, as skinny_gemm does)."""

    dtypes = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class EpilogueStepConfig(StepConfig):
    """The product is chosen by the input type (:meth:`product`); the parameters are those of the
    elementwise kernel of the unfused form."""

    dtypes = ("float32", "float16", "bfloat16")
    layouts = LAYOUTS
    batched = True
    epilogues = True
    threads: int = 256  # unfused: threads per block of the elementwise kernel
    vector: int = 4     # unfused: consecutive outputs per thread (a vector load of C, a vector store of D)

    def product(self, wl):
        """(builder, configuration) of the product: tensor_core_gemm's for fp16 inputs, else
        warp_tiled_gemm's (bf16 widened)."""
        if wl.dtype == "float16":
            return tensor_core_tiled, TensorCoreConfig()
        return fast_tiled, WidenedWarpTileConfig()

    @property
    def async_copy(self) -> bool:
        """The tensor-core product's cp.async ring needs the async copies injected; the SIMT product
        has no async pipeline stage, so the option changes nothing there."""
        return True

    def check(self, wl):
        if wl.kind != "gemm":
            raise ScheduleParamError(f"the epilogue steps compute GEMMs, not {wl.kind}")
        if self.vector not in (1, 2, 4, 8):
            raise ScheduleParamError(f"vector must be 1, 2, 4 or 8, got {self.vector}")
        _, cfg = self.product(wl)
        cfg.check(wl)

    def launch(self, wl: Gemm) -> Launch:
        """The product's launch (the larger kernel; the elementwise one has ``threads`` per block)."""
        return self.product(wl)[1].launch(wl)


def _product(wl: Gemm, cfg: EpilogueStepConfig, fuse: bool):
    build, product_cfg = cfg.product(wl)
    return build(wl, product_cfg, fuse=fuse)


def elementwise_kernel(sch, wl: Gemm, threads: int, vector: int):
    """Schedule the epilogue block "D" as a kernel of its own: the outputs in row-major order,
    ``vector`` consecutive ones per thread (as wide as the rows allow), ``threads`` per block."""
    block = epilogue_block(sch)
    if block is None:
        return
    vec = aligned_vector(wl.N, vector)
    bx, tx, v = sch.split(sch.fuse(*sch.get_loops(block)), [None, threads, vec])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)


@register("unfused_epilogue_gemm", "gemm", EpilogueStepConfig, aliases=("unfused_epilogue", "unfused"), tags=("epilogue",))
def unfused_epilogue_gemm(wl: Gemm, cfg: EpilogueStepConfig = EpilogueStepConfig()):
    """Unfused epilogue: the product's kernel writes C in fp32, then a second, elementwise kernel
    reads C back with the bias (and R) and writes act(alpha·C + bias) + beta·R in the output type:
    eager PyTorch's ``matmul``, then ``+ bias``, then the activation, in two kernels instead of three.

    The product is tensor_core_gemm's for fp16 inputs, warp_tiled_gemm's for fp32 and bf16 (widened
    to fp32 FMAs). The cost of the epilogue is not its arithmetic, a few operations per output, but
    its memory traffic: C leaves the SM as 4 bytes per output, is read back as 4 more, and D is
    written again; for a linear layer of 2048×8192 outputs in fp16 that is 2 × 64 MiB moved for
    nothing, and a second launch. Workload ``gemm:MxNxK:float16:out=float16:bias:gelu_tanh``.
    """
    sch = _product(wl, cfg, fuse=False)
    elementwise_kernel(sch, wl, cfg.threads, cfg.vector)
    return sch


@register("fused_epilogue_gemm", "gemm", EpilogueStepConfig, aliases=("fused_epilogue", "fused"), tags=("epilogue",))
def fused_epilogue_gemm(wl: Gemm, cfg: EpilogueStepConfig = EpilogueStepConfig()):
    """Fused epilogue: the same product, with the elementwise block inlined into the write-back of
    the accumulators (``reverse_compute_inline``): each output leaves the registers (or the
    tensor-core tile's shared staging) as act(alpha·C + bias) + beta·R in the output type, once.

    C never reaches memory and is never read back: the kernel reads the bias and R where it stores,
    and writes 2 bytes per output for a 16-bit output instead of 4 + 4 + 2. One launch. Every fast
    step and best_* fuses the same way (:func:`~schedules.common.fuse_epilogue`); split-K fuses into
    its final sum, since the activation of a partial sum is not that of the sum.
    """
    sch = _product(wl, cfg, fuse=False)
    fuse_epilogue(sch)
    return sch
