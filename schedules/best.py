"""The lab's choice per precision: ``best_gemm`` (fp32), ``best_fp16_gemm`` (fp16 and bf16),
``best_tf32_gemm`` (fp32 inputs read as tf32) and ``best_fp8_gemm`` (8-bit float inputs and their
scales). Each asks the dispatcher's model (:mod:`schedules.dispatch`; FP8:
:mod:`schedules.dispatch_fp8`) for the fastest of the lab's kernels and configurations on the
workload's shape and the GPU's properties, and builds that. ``schedlab show best_gemm --shape S
--explain`` prints the choice with the model's figures for it and the runners-up. A workload with an
epilogue or a 16-bit output is chosen for among the kernels that take one (each computes it in its
write-back), its output bytes and the epilogue's reads counted."""

from __future__ import annotations

from dataclasses import dataclass

from . import dispatch, dispatch_fp8
from .common import current_gpu
from .errors import ScheduleParamError
from .registry import get, register
from .step_config import Choice, Launch, StepConfig
from .workloads import FP8_DTYPES, LAYOUTS, SCALINGS, Gemm


@dataclass(frozen=True)
class BestConfig(StepConfig):
    """No parameters: the configuration is chosen per workload (and GPU) by the dispatcher, among
    the kernels that take the workload's operand layout and batch."""

    dtypes = ("float32",)
    layouts = LAYOUTS
    batched = True
    epilogues = True  # chosen among the kernels that take the workload's epilogue and output type
    precision_name = "fp32"
    step_name = "best_gemm"

    def precision_of(self, wl) -> str:
        return self.precision_name if self.precision_name != "fp16" else {"bfloat16": "bf16"}.get(wl.dtype, "fp16")

    def choose(self, wl: Gemm) -> Choice:
        """The step and configuration the model ranks fastest for ``wl`` (one ranking) on the
        current GPU, among those that build for it; where its model was calibrated on another
        GPU, which (``calibrated_on``). A tf32 choice on a GPU without the lab's tf32 kernels
        (wgmma: sm_90a) is an fp32 kernel, and its text says so."""
        precision = self.precision_of(wl)
        best = dispatch.rank(wl, precision)[0]
        text = dispatch.describe(best.candidate)
        if precision == "tf32" and dispatch.fallback_note(wl, precision):
            text += f" (fp32: no tf32 kernel builds for {current_gpu().arch})"
        return Choice(best.step, best.config, text, dispatch.calibrated_elsewhere())

    def explain(self, wl: Gemm) -> str:
        return dispatch.explain(wl, self.precision_of(wl))

    def explanation(self, wl: Gemm) -> dict:
        return dispatch.explanation(wl, self.precision_of(wl))

    def check(self, wl: Gemm):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"{self.step_name} takes {' or '.join(self.dtypes)} inputs, not {wl.dtype}")

    def launch(self, wl: Gemm) -> Launch:
        choice = self.choose(wl)
        return choice.config.launch(wl)


def _build(wl, cfg: BestConfig):
    choice = cfg.choose(wl)
    return get(choice.step).builder(wl, choice.config)


@register("best_gemm", "gemm", BestConfig, aliases=("best",))
def best_gemm(wl: Gemm, cfg: BestConfig = BestConfig()):
    """Best fp32: the step and configuration the dispatcher's model estimates fastest for the
    workload's shape on this GPU: warp-tiled SIMT blocks (128×128 down to skinny 8×256 or 256×8),
    with split-K where the output tiles leave SMs idle, or the GEMV dispatcher for a
    matrix-vector product (N = 1 or M = 1).

    What changes with the shape is how many blocks a tile makes, how long their K loop is and
    whether the product is bound by the FMA pipes or by memory; ``schedlab show best_gemm --shape
    MxNxK --explain`` prints the estimate for the choice and the next best.
    """
    return _build(wl, cfg)


@dataclass(frozen=True)
class BestFp16Config(BestConfig):
    dtypes = ("float16", "bfloat16")
    precision_name = "fp16"
    step_name = "best_fp16_gemm"


@register("best_fp16_gemm", "gemm", BestFp16Config, aliases=("best_fp16", "best_bf16"), tags=("float16",))
def best_fp16_gemm(wl: Gemm, cfg: BestFp16Config = BestFp16Config()):
    """Best fp16/bf16: the dispatcher's choice among the tensor-core steps: the persistent,
    warp-specialized TMA kernel (its block tile, ring depth and split-K), the one-warpgroup TMA
    kernel for short M, wgmma with cp.async where a row pitch is not a multiple of 16 bytes (no
    tensor map can describe it; copies as wide as the rows allow), or the GEMV dispatcher for a
    matrix-vector product.
    """
    return _build(wl, cfg)


@dataclass(frozen=True)
class BestTf32Config(BestConfig):
    dtypes = ("float32",)
    precision_name = "tf32"
    step_name = "best_tf32_gemm"
    tolerance = 2e-3  # its kernels read fp32 as tf32 (10 mantissa bits)


@register("best_tf32_gemm", "gemm", BestTf32Config, aliases=("best_tf32",), tags=("tf32",))
def best_tf32_gemm(wl: Gemm, cfg: BestTf32Config = BestTf32Config()):
    """Best tf32: the dispatcher's choice for fp32 inputs on the tensor cores: the persistent TMA
    kernel (Cᵀ = Bᵀ·Aᵀ) where the rows allow a tensor map, wgmma with cp.async where they do not,
    and the fp32 SIMT or GEMV kernels where those are faster (a matrix-vector product, a very short
    K: they compute the same product more exactly). Compare it with cuBLAS in TF32 mode.
    """
    return _build(wl, cfg)


@dataclass(frozen=True)
class BestFp8Config(BestConfig):
    """No parameters: among the FP8 kernels (fp8_tma_gemm for scales per tensor or row,
    fp8_block_scaled_gemm for block scales), the configuration the FP8 model
    (:mod:`schedules.dispatch_fp8`) ranks fastest; where K is not a multiple of 16, one that pads
    A and B along K first. Where no FP8 calibration sweep was fitted, the choice says so
    (``calibrated_on``: the FP8 constants are defaults)."""

    dtypes = FP8_DTYPES
    layouts = ("nt",)
    layout_note = ("FP8 wgmma reads both operands K-major (no transpose immediates): store A as M×K and B as "
                   "N×K, as torch._scaled_mm takes them")
    batched = False
    scalings = SCALINGS
    archs = ("sm_90a",)  # every FP8 kernel is Hopper's (wgmma, TMA, setmaxnreg)
    arch_features = "wgmma, TMA, setmaxnreg"
    precision_name = "fp8"
    step_name = "best_fp8_gemm"

    def precision_of(self, wl) -> str:
        return "fp8"

    def choose(self, wl: Gemm) -> Choice:
        best = dispatch_fp8.rank(wl)[0]
        return Choice(best.step, best.config, dispatch_fp8.describe(best.candidate), dispatch_fp8.calibrated_elsewhere())

    def explain(self, wl: Gemm) -> str:
        return dispatch_fp8.explain(wl)

    def explanation(self, wl: Gemm) -> dict:
        return dispatch_fp8.explanation(wl)

    def check(self, wl: Gemm):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"{self.step_name} takes 8-bit float inputs ({', '.join(self.dtypes)}), "
                                     f"not {wl.dtype}")


@register("best_fp8_gemm", "gemm", BestFp8Config, aliases=("best_fp8",), tags=("fp8",))
def best_fp8_gemm(wl: Gemm, cfg: BestFp8Config = BestFp8Config()):
    """Best FP8: the dispatcher's choice among the FP8 kernels by shape: fp8_tma_gemm's block tile
    (128 × 256, 128 × 128 or 256 × 128), ring and 2×1 clusters for scales per tensor or row,
    fp8_block_scaled_gemm's for block scales; A and B padded along K where K is not a multiple of 16.

    The FP8 model is the 16-bit TMA kernels' with one byte per input, the tensor cores at twice
    their 16-bit rate, the output bytes of its type and, for block scales, a factor for promoting
    every K tile; ``schedlab show best_fp8_gemm --shape MxNxK --explain`` prints the estimate for
    the choice and the next best.
    """
    return _build(wl, cfg)
