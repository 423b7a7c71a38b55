"""gemm 35: thin 16-bit products on the tensor cores, in every layout and at any row pitch (thin_tc_gemm).

    C (M×N) = op(A)·op(B) with M ≤ 64 (the few rows: the weight is B) or N ≤ 64 (the few columns:
    the weight is A), fp16 or bf16 inputs, layouts nn, nt, tn, tt, rows of any length

decode_gemm (gemm 24) streams the weight of such a product through a ring of 16-byte cp.async
copies into ``mma.sync`` (the weight as the 16-row operand, the few rows X as the 8-column one), but
only where both operands are K-contiguous with rows a multiple of 16 bytes (layout nt, K % 8 = 0).
Everywhere else a thin 16-bit product went to SIMT tiles (the inputs widened to fp32: 16-bit FMAs
at a sixteenth of the tensor cores' rate, and as many instructions per token as per weight row) or
to the TMA kernels over padded copies of A and B (a 64- or 128-wide tile mostly padding, and a
copy kernel first). This step is decode_gemm's kernel (one body, :func:`schedules.gemm_decode.
decode_kernel`) with the operand reads switched per workload (:class:`schedules.decode_plan.Access`):

* a K-contiguous weight whose pitch is not a multiple of 16 bytes is copied into decode_gemm's
  shared layout by 8- or 4-byte cp.async where the pitch allows it (consecutive lanes on
  consecutive words of a row: coalesced); past K and past the last row the copies are zero-filled.
  An odd pitch (an odd K: every other row starts at an odd element, where no 4-byte access is
  aligned) is copied by 4-byte cp.async too, each row from the even element at or before its start
  (a 17th word per 32 elements), and a lane realigns the rows that start late as it reads them (a
  16-bit funnel of two words per register), so the copies stay asynchronous (``odd_copy=2``: two
  plain 2-byte loads per shared word instead, which a warp waits for);
* a weight stored K × rows (M thin in nn and tn: B is K×N; N thin in tn and tt: A is K×M) is
  copied as stored, each warp's rows of a K row as one piece (16, 8 or 4 bytes as the pitch allows,
  else packed pairs), into a K-row tile per warp whose rows follow the kernel's permuted K order,
  and read into the mma's A registers by ``ldmatrix.x4.trans`` (one per m16 tile and mma; the rows
  padded to an odd number of 16-byte chunks: the 8 rows of each ldmatrix phase on distinct banks).
  With an odd pitch the odd K rows start one element late; they are copied from the element before
  (4-byte cp.async), and each lane gathers its fragments' halves from the rows with their offsets
  (no ldmatrix: it reads 16-byte aligned rows only);
* X (at most 64 rows or columns) K-contiguous is copied as decode_gemm copies it, in narrower
  pieces where its pitch asks; stored K × tokens it is read two K rows at a time (consecutive
  threads on consecutive tokens, so the loads coalesce) and transposed into its slot as words of
  two elements;
* split-K (the fp32 partials and tma_common's sum), the cross-warp sum and the write-back
  (:func:`schedules.gemm_decode.make_store`: masked, the epilogue and a 16-bit output) are
  decode_gemm's. A batch is not taken (the product index would be one more grid axis and operand
  offset; the dispatcher gives a batch of thin products to the kernels that take batches).

The plan is decode_gemm's (:func:`schedules.decode_plan.plan_decode`, on the same shape in nt) with two
changes: where its blocks would number fewer than the SMs, the rows per block are halved (down to
one warp's) so that a small weight reaches more SMs (the products this step serves are a few µs,
latency more than bandwidth); and the ring's depth counts the transposed tile's padded rows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from tvm import s_tir

from .common import current_gpu
from .errors import ScheduleParamError
from .decode_plan import K_STEP, MAX_TOKENS, Access, DecodePlan, plan_decode, thin_form, trans_pitch
from .gemm_decode import DecodeConfig, check_knobs, decode_kernel
from .registry import register
from .workloads import LAYOUTS, Gemm


def _widest(pitch_elements: int) -> int:
    """Bytes of the widest copy every row of a 16-bit matrix with this row length is aligned to."""
    return next(b for b in (16, 8, 4, 2) if 2 * pitch_elements % b == 0)


def access_of(wl, odd_copy: int = 4) -> Access:
    """How ``wl``'s operands are read: the weight K-contiguous (columns form: A not transposed;
    rows form: B stored N×K) or stored K × rows, X likewise, each copy as wide as its pitch allows;
    a weight whose pitch is odd by 4-byte copies realigned on the way (``odd_copy`` 4) or by
    2-byte loads (``odd_copy`` 2)."""
    form, tokens, rows = thin_form(wl) or ("rows", wl.M, wl.N)
    if form == "rows":
        w_trans, x_trans = not wl.trans_b, wl.trans_a
    else:
        w_trans, x_trans = wl.trans_a, not wl.trans_b
    w_bytes = _widest(rows if w_trans else wl.K)
    odd = w_bytes == 2 and odd_copy == 4  # an odd pitch: 4-byte copies from the even element before each row
    return Access(w_trans=w_trans, w_bytes=4 if odd else w_bytes, x_trans=x_trans,
                  x_bytes=2 if x_trans else _widest(wl.K), w_odd=odd)


@dataclass(frozen=True)
class ThinPlan(DecodePlan):
    """decode_gemm's plan, and the weight's layout in a slot where it is not decode_gemm's: the
    transposed tile (K rows padded to an odd number of 16-byte chunks) or an odd pitch's rows (20
    words per 32 elements)."""

    w_trans: bool = False
    w_odd: bool = False

    @property
    def slot_words(self) -> int:
        if self.w_trans:
            weight = self.warps * self.unroll * 32 * trans_pitch(self.m_tiles)
        elif self.w_odd:  # rows of 20 words (Access.row_words)
            weight = self.warps * self.unroll * self.m_tiles * 2 * 8 * 20
        else:
            return super().slot_words
        return weight + 8 * self.token_tiles * self.x_pitch


def _as_nt(wl) -> Gemm:
    """The same shape in layout nt, no epilogue: what decode_gemm's plan reads (the form, K)."""
    return Gemm(wl.M, wl.N, wl.K, wl.dtype, layout="nt")


def thin_plan(cfg: "ThinConfig", wl, gpu) -> ThinPlan:
    """:meth:`ThinConfig.plan`: decode_gemm's plan of the same shape in nt, its blocks halved while
    they number fewer than the SMs, its ring refitted to the slot's size."""
    nt, access = _as_nt(wl), access_of(wl, cfg.odd_copy)
    if access.w_bytes == 2:
        # a weight copied by plain loads: a thread waits for each block step's loads before its mma,
        # so what hides their latency is how much one step loads (four 32-element pieces per warp
        # where K has them), not the ring's depth (two slots: one filling while one is read)
        cfg = replace(cfg, unroll=cfg.unroll or (4 if wl.K >= 8 * K_STEP else 0), stages=cfg.stages or 2)
    p = plan_decode(cfg, nt, gpu)
    # fewer blocks than SMs: smaller blocks, down to one warp's rows, until the grid reaches them, but
    # not fewer weight rows than X's (8 per token group): each block loads all of X for its K
    while (not cfg.row_warps and p.row_warps > 1 and p.row_blocks * p.splits < gpu.sms
           and p.block_rows // 2 >= 8 * p.token_tiles):
        p = plan_decode(replace(cfg, row_warps=p.row_warps // 2, k_warps=cfg.k_warps or p.k_warps), nt, gpu)
    w_trans = access.w_trans
    thin = ThinPlan(**{f.name: getattr(p, f.name) for f in fields(DecodePlan)}, w_trans=w_trans, w_odd=access.w_odd)
    if (w_trans or access.w_odd) and not cfg.stages:  # the padded rows: as many slots as the same budget holds
        budget = cfg.ring_bytes or gpu.smem_per_sm // 2 - 4 * thin.shared_floats - 8 * 1024
        thin = replace(thin, stages=max(2, min(8, budget // (4 * thin.slot_words))))
    return thin


@dataclass(frozen=True)
class ThinConfig(DecodeConfig):
    """decode_gemm's parameters (0: chosen from the shape and the GPU, :meth:`plan`), in every
    layout and at any K."""

    layouts = LAYOUTS   # a transposed weight through ldmatrix.trans, X transposed on its way in
    arch_features = "cp.async, mma.sync, ldmatrix"
    zero_means_auto = DecodeConfig.zero_means_auto
    fill_sms = False  # decode_gemm's row blocks that fill the SMs: not measured on this kernel's layouts
    # a weight whose pitch is an odd number of elements: 4-byte cp.async from the even element at or
    # before each row, realigned on the way to the mma (4), or two plain 2-byte loads per word (2)
    odd_copy: int = 4
    cluster_sum: bool = False  # the cluster sum is decode_gemm's; here not yet measured against the second kernel

    @classmethod
    def scope_refusal(cls, wl) -> str | None:
        """A thin product only: a few rows (or columns) against a larger weight, no batch."""
        if wl.kind == "gemm" and thin_form(wl) is None:
            return f"thin_tc_gemm needs M ≤ {MAX_TOKENS} or N ≤ {MAX_TOKENS} and no batch: {wl}"
        return None

    def check(self, wl):
        if wl.dtype not in self.dtypes:
            raise ScheduleParamError(f"thin_tc_gemm takes float16 or bfloat16 inputs, not {wl.dtype}")
        refusal = self.scope_refusal(wl)
        if refusal:
            raise ScheduleParamError(refusal)
        if self.odd_copy not in (2, 4):
            raise ScheduleParamError(f"thin_tc_gemm: odd_copy is 4 (4-byte copies, realigned) or 2 (2-byte loads), "
                                     f"got {self.odd_copy}")
        check_knobs("thin_tc_gemm", self, wl)

    def plan(self, wl, gpu=None) -> ThinPlan:
        """decode_gemm's plan for the same shape (:meth:`DecodeConfig.plan`), its blocks made smaller
        where they would not reach every SM, its ring as deep as the transposed tile allows."""
        return thin_plan(self, wl, gpu or current_gpu())


@register("thin_tc_gemm", "gemm", ThinConfig, aliases=("thin_tc", "gemm_thin"), tags=("float16",))
def thin_tc_gemm(wl: Gemm, cfg: ThinConfig = ThinConfig()):
    """Thin 16-bit products (M ≤ 64 or N ≤ 64) on the tensor cores in every layout and at any row
    pitch: decode_gemm's kernel (mma.sync with the weight as the 16-row operand, a ring of cp.async
    copies, split-K, the epilogue in the write-back) with narrower copies where the weight's or
    X's pitch is not a multiple of 16 bytes (an odd pitch: 4-byte copies from the even element
    before each row, realigned as the lanes read them), a weight stored K × rows copied as stored
    and read by ``ldmatrix.trans``, and X stored K × tokens transposed on its way into shared
    memory.

    The SIMT tiles it replaces widen the 16-bit inputs to fp32 and spend an FMA per token per
    weight element; the TMA kernels pad a 64- or 128-wide tile around a few dozen rows and, for
    rows that are not 16-byte multiples, copy A and B into padded buffers first. Here each weight
    element is read once and 16 rows × 16 K of it meet up to 8 tokens in one mma instruction.
    """
    cfg.check(wl)
    return s_tir.Schedule(decode_kernel(wl, cfg.plan(wl), access_of(wl, cfg.odd_copy)))
