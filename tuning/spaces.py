"""Search spaces written like AutoTVM templates: a schedule function over the lab's own schedule
helpers whose knobs are MetaSchedule sampling instructions (``sample_categorical``,
``sample_perfect_tile``). MetaSchedule records the function as a trace; a configuration is one
set of decisions for the trace's sampling instructions, and replaying the trace with those
decisions rebuilds the schedule.

- ``classic``: the classic AutoTVM matmul example, exactly: block tile y and x in {8, 16, 32},
  K tile in {8, 16}, vectorized shared-memory loads off/on: 3·3·2·2 = 36 configurations, over the
  step-7 schedule (shared-memory tiles, one output per thread, register accumulator).
- ``tiled``: the fast register-tiled schedules of steps 8 and 9: block, thread (register) and
  sub-tile sizes of each axis and the K tile (perfect tiles), the cooperative-load vector width,
  the unroll depth and the number of pipeline stages (1 = step 8, 2 = step 9's double buffering).
- ``fast``: the fast fp32 schedules warp_tiled_gemm ... rasterized_gemm (``schedules.gemm_fast.fast_tiled``): block tile,
  thread (register) tile and warp arrangement, K tile, pipeline stages and split-K. These change the
  schedule's structure (the thread counts the copies are split by, the rfactor of split-K), so each
  combination is its own design space (how MetaSchedule itself offers structural alternatives), and
  the unroll depth is a ``sample_categorical`` knob inside each; MetaSchedule's search picks among
  the design spaces and mutates the unroll knob.
- ``dispatch`` (``schedlab tune``'s default for fp32): the dispatcher's top 8 candidates
  (:func:`schedules.dispatch.rank`), each the concrete configuration it resolves to and measured
  first, then their neighbours, which differ in split-K, block tile, K tile or ring depth (one or
  two of them), in the model's order (:func:`dispatch_candidates`); the unroll depth sampled in each.
- ``default``: MetaSchedule's own auto-generated space for CUDA (post-order-apply of its rules).
- a step's own: any registered step whose configuration declares a ``search_space`` (parameter ->
  values; a plugin's step, say) is a space of its name: one design space per combination that
  the workload takes, the step's defaults first, each the step's own builder's schedule
  (:func:`step_space`). No sampled knob: measured exhaustively by default.

A workload with an epilogue (``gemm:...:bias:gelu_tanh``) is tuned with it: every hand-written space
inlines the epilogue block into its write-back (:func:`schedules.common.fuse_epilogue`), and
MetaSchedule's own rules fuse the elementwise consumer of the product themselves.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from schedules import dispatch
from schedules.common import fuse_epilogue
from schedules.errors import ScheduleParamError
from schedules.gemm import pipeline_double_buffer, register_tiled_gemm, shared_tiled_gemm
from schedules.gemm_fast import WarpTileConfig, apply_fast_tiled
from schedules.registry import all_schedules, get
from schedules.workloads import Gemm

PIPELINE_KEY = "schedlab.pipeline_stages"
PIPELINE_INNER_KEY = "schedlab.pipeline_inner"
CONFIG_KEY = "schedlab.config"  # a design space's structural choice (the fast space), as text


def _uniform(n):
    return [1.0 / n] * n


# --- classic -----------------------------------------------------------------------------------
CLASSIC_TILES = [8, 16, 32]
CLASSIC_K_TILES = [8, 16]
CLASSIC_VECTOR = [1, 4]  # vectorized (float4) loads off / on


def classic_template(sch, bind: bool = True):
    """The classic AutoTVM template: tile_y, tile_x ∈ {8, 16, 32}, tile_k ∈ {8, 16}, vectorized
    loads off/on, over step 7 (shared-memory block tiling with a register accumulator)."""
    block = sch.get_sblock("C")
    tile_y = sch.sample_categorical(CLASSIC_TILES, _uniform(3))
    tile_x = sch.sample_categorical(CLASSIC_TILES, _uniform(3))
    tile_k = sch.sample_categorical(CLASSIC_K_TILES, _uniform(2))
    vector = sch.sample_categorical(CLASSIC_VECTOR, _uniform(2))
    shared_tiled_gemm(sch, block, tile_y, tile_x, tile_k, register_acc=True, vector=vector, bind=bind)
    fuse_epilogue(sch)  # a workload's epilogue, in the register accumulator's write-back
    return sch


# --- tiled -------------------------------------------------------------------------------------
TILED_VECTOR = [1, 2, 4]
TILED_UNROLL = [0, 16, 64, 512]
TILED_STAGES = [1, 2]


def tiled_template(sch, max_inner: int = 4, max_block_k: int = 32):
    """Steps 8/9 as a template. Each spatial axis is split by ``sample_perfect_tile`` into
    [blocks, sub-tiles per thread (vthreads), threads, sub-tile width ≤ 4]; K into [steps, block_k];
    the shared-memory copies are annotated for MetaSchedule's cooperative fetch with a sampled
    vector width; the unroll depth is MetaSchedule's ``unroll_explicit`` knob; the pipeline-stage
    knob is read by :class:`ApplyPipelineStages` after sampling."""
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    fi = sch.sample_perfect_tile(i, n=4, max_innermost_factor=max_inner)
    fj = sch.sample_perfect_tile(j, n=4, max_innermost_factor=max_inner)
    fk = sch.sample_perfect_tile(k, n=2, max_innermost_factor=max_block_k)
    vector = sch.sample_categorical(TILED_VECTOR, _uniform(len(TILED_VECTOR)))

    def fetch(s, copy):
        s.fuse(*s.get_loops(copy)[-2:])  # the postprocessor splits the fused copy loop over threads
        s.annotate(copy, "meta_schedule.cooperative_fetch", vector)

    h = register_tiled_gemm(sch, block, fi, fj, fk, fetch)
    unroll = sch.sample_categorical(TILED_UNROLL, _uniform(len(TILED_UNROLL)))
    sch.annotate(sch.get_sblock("root"), "meta_schedule.unroll_explicit", unroll)
    stages = sch.sample_categorical(TILED_STAGES, _uniform(len(TILED_STAGES)))
    sch.annotate(h["ko"], PIPELINE_KEY, stages)
    sch.annotate(h["ki"], PIPELINE_INNER_KEY, 1)
    sch.decompose_reduction(block, h["ko"])
    fuse_epilogue(sch)  # a workload's epilogue, in the register accumulator's write-back
    return sch


# --- fast --------------------------------------------------------------------------------------
# (block_m, block_n, thread_m, thread_n, warps_m, warps_n): every arrangement puts 32 lanes in a warp
FAST_TILES = [
    (128, 128, 8, 8, 4, 2), (128, 128, 8, 8, 2, 4),
    (128, 64, 8, 8, 4, 1), (128, 64, 8, 8, 2, 2),
    (64, 128, 8, 8, 1, 4), (64, 128, 8, 8, 2, 2),
    (64, 64, 8, 8, 2, 1), (64, 64, 8, 8, 1, 2),
    (64, 64, 4, 4, 4, 2), (64, 64, 4, 4, 2, 4),
]
FAST_BLOCK_K = [8, 16]
FAST_STAGES = [1, 2]      # 1: one shared buffer (step 8's loop); 2: step 9's register-staged double buffer
FAST_SPLIT_K = [1, 2, 4, 8]
FAST_UNROLL = [16, 64, 256, 1024]


def gemm_of(sch) -> Gemm:
    """The GEMM product a schedule's ``main`` computes (A M×K, B K×N, C M×N; an epilogue after it is
    left out: the choice of tiles is the product's, and the fast body fuses the epilogue itself)."""
    block = sch.get(sch.get_sblock("C"))
    a, b = (r.source for r in block.reads[-2:])
    c = block.writes[0].source
    (m, k), n = (int(x) for x in a.shape), int(b.shape[1])
    return Gemm(m, n, k, str(a.dtype), str(c.dtype))


SEEDS = 3  # the dispatcher's best few fp32 tile configurations start every fast search


def model_seeds(wl, k: int = SEEDS):
    """The dispatcher's (schedules.dispatch) top ``k`` warp-tiled configurations for ``wl``, its
    choice first: the search starts where best_gemm would, and can only improve on it. A seed may
    keep its K tiles in a cp.async ring (the builder then injects the async copies,
    tuning.measure.module_pass_config)."""
    return [e.config for e in dispatch.rank(wl, "fp32") if e.candidate.family == "simt"][:k]


def fast_configs(wl):
    """The ``fast`` space's structural combinations that are valid for ``wl``, as FastTileConfigs;
    the dispatcher's top choices (best_gemm's first) first."""
    spec = get("warp_tiled_gemm")
    out = [WarpTileConfig(**{**{f.name: getattr(hand, f.name) for f in dataclasses.fields(WarpTileConfig)},
                             "unroll": 0}) for hand in model_seeds(wl)]
    for (bm, bn, tm, tn, wm, wn), bk, stages, split in itertools.product(
            FAST_TILES, FAST_BLOCK_K, FAST_STAGES, FAST_SPLIT_K):
        cfg = WarpTileConfig(block_m=bm, block_n=bn, block_k=bk, thread_m=tm, thread_n=tn, warps_m=wm,
                             warps_n=wn, stages=stages, split_k=split, group_m=8, unroll=0)
        if split > 1 and cfg.splits(wl) < split:
            continue  # K too short for that many slices
        if cfg in out:
            continue
        try:
            spec.validate(wl, dataclasses.replace(cfg, unroll=256))  # unroll=0 is ours, not a user's
        except ScheduleParamError:
            continue
        out.append(cfg)
    return out


def fast_template(sch, configs=None):
    """One design space per valid structural combination of :func:`fast_configs` (or of
    ``configs(wl)``), each with a sampled unroll depth, annotated on the loop where the hand-written
    steps put theirs (so the seed is best_gemm's own kernel, not a look-alike unrolled elsewhere)."""
    wl = gemm_of(sch)
    spaces = []
    for cfg in (configs or fast_configs)(wl):
        s = sch.copy()
        # the structural choice, readable back from the trace (knob_values) for the reports
        s.annotate(s.get_sblock("root"), CONFIG_KEY, fast_config_text(cfg))
        unroll = s.sample_categorical(FAST_UNROLL, _uniform(len(FAST_UNROLL)))
        apply_fast_tiled(s, wl, cfg, unroll=unroll)
        spaces.append(s)
    return spaces


def fast_config_text(cfg) -> str:
    ring = " async_copy=true" if cfg.async_copy else ""  # a seed of the dispatcher's: a cp.async ring
    pad = " pad_operands=true" if cfg.pad_operands else ""  # padded copies of misaligned operands
    held = f" min_blocks={cfg.min_blocks}" if cfg.min_blocks else ""  # held to the blocks per SM the model counts
    return (f"block={cfg.block_m}x{cfg.block_n} thread={cfg.thread_m}x{cfg.thread_n} "
            f"warps={cfg.warps_m}x{cfg.warps_n} block_k={cfg.block_k} stages={cfg.stages} split_k={cfg.split_k}"
            f"{ring}{pad}{held}")


# --- dispatch ----------------------------------------------------------------------------------
DISPATCH_SEEDS = 8  # the dispatcher's top candidates, measured first
DISPATCH_SIZE = 192  # design spaces in all: the seeds, then their neighbours, the model's best first


def simt_knobs(cfg) -> dict:
    """The structural knobs of a SIMT configuration that the ``dispatch`` space varies: the block
    tile (with its thread tile and warp arrangement), the K tile, the K pipeline (register double
    buffer or a cp.async ring and its depth), split-K, the padded copies of misaligned operands, C
    staged through shared memory (offered where C's rows are not whole float4s), and any parameter
    its step declares searchable (``search_space``: a balanced split, say)."""
    out = {"tile": (cfg.block_m, cfg.block_n, cfg.thread_m, cfg.thread_n, cfg.warps_m, cfg.warps_n),
           "block_k": cfg.block_k, "pipeline": (cfg.stages, cfg.async_copy), "split_k": cfg.split_k,
           "pad_operands": cfg.pad_operands, "staged_store": cfg.staged_store}
    out.update({name: getattr(cfg, name) for name in type(cfg).search_space})
    return out


def dispatch_candidates(wl, seeds: int = DISPATCH_SEEDS, size: int = DISPATCH_SIZE):
    """The ``dispatch`` space's configurations for ``wl`` (an fp32 GEMM), as dispatcher estimates:
    its top ``seeds`` SIMT candidates (:func:`schedules.dispatch.rank`, its choice first: best_gemm's
    own kernel; for a matrix-vector product, whose choice is a GEMV kernel, the SIMT tiles the model
    ranks highest, which are then what tuning can put beside it), then every candidate that differs
    from one of them in one knob of :func:`simt_knobs` (another split-K, block tile, K tile or ring
    depth), then those that differ in two (a smaller tile with more K slices, say), each group in
    the model's order, ``size`` in all.
    Where the model is wrong about a shape (the weak classes), the measured neighbours of its
    choices are where the faster kernels are."""
    ranked = [e for e in dispatch.rank(wl, "fp32") if e.candidate.family == "simt"]
    if not ranked:  # a matrix-vector product, which the dispatcher gives its GEMV kernel alone: the SIMT tiles
        ranked = sorted((dispatch.estimate(wl, c) for c in dispatch.simt_candidates(wl)), key=lambda e: e.time_us)
    if not ranked:
        raise ScheduleParamError(f"the dispatch space tunes the dispatcher's SIMT kernels, and none takes {wl}")
    top = ranked[:seeds]
    knobs = [simt_knobs(e.config) for e in top]

    def distance(e) -> int:
        mine = simt_knobs(e.config)
        return min(sum(mine.get(k) != v for k, v in seed.items()) for seed in knobs)

    rest = ranked[seeds:]
    near = [e for e in rest if distance(e) == 1] + [e for e in rest if distance(e) == 2]
    return (top + near)[:size]


def dispatch_configs(wl):
    """:func:`dispatch_candidates` as the configurations the fast body takes (unroll sampled apart)."""
    out = []
    for e in dispatch_candidates(wl):
        cfg = dataclasses.replace(e.config, unroll=0)
        if cfg not in out:
            out.append(cfg)
    return out


def dispatch_template(sch):
    """One design space per configuration of :func:`dispatch_configs`, the unroll depth sampled in each."""
    return fast_template(sch, dispatch_configs)


def dispatch_seeds(wl):
    """The dispatcher's top candidates (design spaces 0 .. DISPATCH_SEEDS-1, its choice first) at their
    own unroll depth: measured before anything else."""
    seeds = [e.config for e in dispatch_candidates(wl)[:DISPATCH_SEEDS]]
    return [(n, [FAST_UNROLL.index(cfg.unroll if cfg.unroll in FAST_UNROLL else 256)]) for n, cfg in enumerate(seeds)]


def fast_seeds(wl):
    """The dispatcher's top configurations (design spaces 0 .. SEEDS-1, its choice first) with
    warp_tiled_gemm's unroll depth of 256: measured before anything else."""
    return [(n, [FAST_UNROLL.index(256)]) for n in range(len(model_seeds(wl)))]


def _update_block(sch):
    """The GEMM's update block (``C_update`` once the reduction is decomposed)."""
    for name in ("C_update", "C"):
        try:
            return sch.get_sblock(name)
        except Exception:  # noqa: BLE001
            continue
    return None


@derived_object
class ApplyPipelineStages(ms.postproc.PyPostproc):
    """Postprocessor: where the ``tiled`` space sampled 2 pipeline stages, apply step 9's software
    pipeline (schedules.gemm.pipeline_double_buffer) to the annotated K loops; remove the marks."""

    def _initialize_with_tune_context(self, context) -> None:  # noqa: D401
        pass

    def apply(self, sch) -> bool:
        block = _update_block(sch)
        if block is None:  # not our space
            return True
        ko = ki = None
        stages = 1
        for loop in sch.get_loops(block):
            ann = sch.get(loop).annotations
            if PIPELINE_KEY in ann:
                ko, stages = loop, int(ann[PIPELINE_KEY])
            if PIPELINE_INNER_KEY in ann:
                ki = loop
        if ko is None:
            return True
        sch.unannotate(ko, PIPELINE_KEY)
        if ki is not None:
            sch.unannotate(ki, PIPELINE_INNER_KEY)
        if stages >= 2 and ki is not None:
            pipeline_double_buffer(sch, ko, ki, sch.get_sblock("A_shared"), sch.get_sblock("B_shared"))
        return True

    def clone(self):
        return ApplyPipelineStages()


@derived_object
class TileConstraints(ms.postproc.PyPostproc):
    """Postprocessor: AutoTVM-style filters on the ``tiled`` space's tiles, rejecting (before any
    build) configurations that cannot be fast: fewer than ``min_threads`` or more than
    ``max_threads`` threads per block, or more than ``max_per_thread`` outputs per thread axis (the
    register tile; larger ones spill). The search strategy then samples another one."""

    def __init__(self, min_threads: int = 32, max_threads: int = 1024, max_per_thread: int = 8):
        self.min_threads, self.max_threads, self.max_per_thread = min_threads, max_threads, max_per_thread

    def _initialize_with_tune_context(self, context) -> None:  # noqa: D401
        pass

    def apply(self, sch) -> bool:
        block = _update_block(sch)
        if block is None:
            return True
        threads, per_thread = 1, {"y": 1, "x": 1}
        loops = sch.get_loops(block)
        for n, loop in enumerate(loops):
            stmt = sch.get(loop)
            tag = stmt.thread_binding.thread_tag if stmt.thread_binding is not None else ""
            extent = int(stmt.extent)
            if tag.startswith("threadIdx"):
                threads *= extent
            elif tag.startswith("vthread"):
                per_thread[tag[-1]] *= extent
        # the two innermost spatial loops of the update are the sub-tile widths
        for axis, loop in zip(("y", "x"), loops[-2:]):
            per_thread[axis] *= int(sch.get(loop).extent)
        return (self.min_threads <= threads <= self.max_threads
                and max(per_thread.values()) <= self.max_per_thread)

    def clone(self):
        return TileConstraints(self.min_threads, self.max_threads, self.max_per_thread)


# --- the registry of spaces --------------------------------------------------------------------
@dataclass
class Space:
    name: str
    description: str
    template: Callable | None  # None: MetaSchedule's post-order-apply (auto-generated) space
    knobs: list[str] = field(default_factory=list)
    needs_pipeline_postproc: bool = False
    cpu: bool = False  # has a CPU twin (llvm target)
    seeds: Callable | None = None  # wl -> decision lists measured first (the hand-written configs)
    strategy: str = "evolutionary"  # the search strategy when none is asked for
    # its configurations were checked against the GPU's limits by their steps (the dispatcher's candidates):
    # MetaSchedule's VerifyGPUCode, which knows only the static 48 KiB of shared memory, is left out, so a
    # cp.async ring in dynamic shared memory past it (opted in, as the harness builds it) is measured
    checked_by_steps: bool = False

    def generator(self, target) -> ms.space_generator.SpaceGenerator:
        gpu = target.kind.name == "cuda"
        if self.template is None:
            return ms.space_generator.PostOrderApply(sch_rules="from-target", postprocs="from-target",
                                                     mutator_probs="from-target")
        if not gpu and not self.cpu:
            raise ValueError(f"space {self.name!r} is for CUDA targets only")
        postprocs = list(ms.postproc.Postproc.create("cuda" if gpu else "llvm"))
        if self.checked_by_steps:
            postprocs = [p for p in postprocs if type(p).__name__ != "VerifyGPUCode"]
        if self.needs_pipeline_postproc:
            postprocs[:0] = [TileConstraints(), ApplyPipelineStages()]
        mutators = ms.mutator.Mutator.create("cuda" if gpu else "llvm")
        template = self.template
        fn = (lambda sch: template(sch)) if gpu else (lambda sch: template(sch, bind=False))
        return ms.space_generator.ScheduleFn(fn, sch_rules=[], postprocs=postprocs, mutator_probs=mutators)


def tiled_seeds(wl):
    """Steps 8/9's configuration (128×128 block, 8×8 per thread as 2×2 vthreads of 4×4, block_k 8,
    float4 loads, unroll, 1 or 2 stages) as decisions of the tiled template, where it tiles the
    workload perfectly."""
    if wl.M % 128 or wl.N % 128 or wl.K % 8:
        return []
    i, j, k = [wl.M // 128, 2, 16, 4], [wl.N // 128, 2, 16, 4], [wl.K // 8, 8]
    vec, unroll = TILED_VECTOR.index(4), TILED_UNROLL.index(512)
    return [[i, j, k, vec, unroll, TILED_STAGES.index(s)] for s in (2, 1)]


SPACES = {
    "classic": Space("classic", "classic AutoTVM template: tile_y, tile_x in {8,16,32}, tile_k in {8,16}, "
                     "vector loads off/on (36 configurations) over step 7", classic_template,
                     ["tile_y", "tile_x", "tile_k", "vector"], cpu=True, strategy="exhaustive"),
    "tiled": Space("tiled", "register-tiled steps 8/9: block/vthread/thread/sub-tile sizes per axis, K tile, "
                   "vector width, unroll depth, pipeline stages", tiled_template,
                   ["tile_i", "tile_j", "tile_k", "vector", "unroll", "stages"], needs_pipeline_postproc=True,
                   seeds=tiled_seeds),
    "fast": Space("fast", "fast fp32 steps warp_tiled_gemm..rasterized_gemm: block/thread tile and warp arrangement, K tile, pipeline "
                  "stages, split-K (one design space each) x unroll depth", fast_template,
                  ["unroll"], seeds=fast_seeds, checked_by_steps=True),
    "dispatch": Space("dispatch", "the dispatcher's top 8 candidates, then their neighbours: split-K, block tile, K tile, "
                      "ring depth (one design space each, the model's order) x unroll depth", dispatch_template,
                      ["unroll"], seeds=dispatch_seeds, strategy="ordered", checked_by_steps=True),
    "default": Space("default", "MetaSchedule's auto-generated CUDA space (post-order-apply)", None),
}


def get_space(name: str) -> Space:
    """A space of :data:`SPACES`, or the space of a registered step (a plugin's, say) that declares
    a ``search_space`` (:func:`step_space`)."""
    if name in SPACES:
        return SPACES[name]
    try:
        spec = get(name)
    except ScheduleParamError:
        spec = None
    if spec is not None and spec.config_cls.search_space:
        return step_space(spec)
    steps = [s.name for s in all_schedules(kind="gemm") if s.config_cls.search_space]
    raise ValueError(f"unknown space {name!r} (known: {', '.join([*SPACES, *steps])}; a step is a space once its "
                     "configuration declares a search_space)")


# --- a step's own space ------------------------------------------------------------------------
def step_configs(spec, wl) -> list:
    """The configurations of ``spec``'s ``search_space`` (every combination of its values over the
    step's defaults) that the step takes for ``wl``, its defaults first."""
    space = spec.config_cls.search_space
    default = spec.config()
    out = []
    for cfg in [default, *(dataclasses.replace(default, **dict(zip(space, values)))
                           for values in itertools.product(*space.values()))]:
        if cfg in out:
            continue
        try:
            spec.validate(wl, cfg)
        except ScheduleParamError:
            continue
        out.append(cfg)
    return out


def step_config_text(spec, cfg) -> str:
    """The values of a configuration's search-space parameters, as the trace records them."""
    return " ".join(f"{name}={getattr(cfg, name)}" for name in spec.config_cls.search_space)


def step_space(spec) -> Space:
    """The space of a step that declares a ``search_space``: one design space per configuration of
    :func:`step_configs`, each the step's builder's schedule for it replayed onto MetaSchedule's
    schedule of the workload, its configuration annotated (``knob_values`` reads it back)."""
    if spec.kind != "gemm":
        raise ValueError(f"space {spec.name!r}: schedlab tune tunes GEMM steps, and {spec.name} is a {spec.kind} step")

    def template(sch):
        wl = gemm_of(sch)
        spaces = []
        for cfg in step_configs(spec, wl):
            built = spec.resolve(wl, cfg).schedule(wl)
            s = sch.copy()
            built.trace.apply_to_schedule(s, remove_postproc=False)
            s.annotate(s.get_sblock("root"), CONFIG_KEY, step_config_text(spec, cfg))
            spaces.append(s)
        if not spaces:
            raise ScheduleParamError(f"{spec.name}: no configuration of its search space takes {wl}")
        return spaces

    values = ", ".join(f"{k} in {{{', '.join(map(str, v))}}}" for k, v in spec.config_cls.search_space.items())
    return Space(spec.name, f"{spec.label} {spec.name}'s search space: {values}", template, strategy="exhaustive")


# --- decisions: naming and enumerating ---------------------------------------------------------
SAMPLE_KINDS = ("SampleCategorical", "SamplePerfectTile")


def sample_insts(trace):
    """The trace's sampling instructions (the knobs), in order."""
    return [inst for inst in trace.insts if inst.kind.name in SAMPLE_KINDS]


def knob_values(trace, names=None) -> dict:
    """{knob name: chosen value} of a trace: categorical knobs by value, tiles as factor lists."""
    out = {}
    for inst in trace.insts:  # structural choices of a design space (the fast space's annotation)
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == CONFIG_KEY:
            out.update(item.split("=", 1) for item in str(inst.inputs[1]).split())
    insts = sample_insts(trace)
    names = names if names and len(names) == len(insts) else [f"knob{n}" for n in range(len(insts))]
    for name, inst in zip(names, insts):
        decision = trace.decisions.get(inst) if hasattr(trace.decisions, "get") else trace.get_decision(inst)
        if decision is None:
            continue
        if inst.kind.name == "SampleCategorical":
            value = inst.attrs[0][int(decision)]
            out[name] = value.value if hasattr(value, "value") else int(value)
        else:
            out[name] = [int(x) for x in decision]
    return out


def _perfect_tiles(extent: int, n: int, max_inner: int):
    """Every way of writing ``extent`` as an ordered product of ``n`` factors, the last ≤ max_inner."""
    def rec(rest, parts):
        if parts == 1:
            yield [rest]
            return
        for d in range(1, rest + 1):
            if rest % d == 0:
                for tail in rec(rest // d, parts - 1):
                    yield [d] + tail
    for tiles in rec(extent, n):
        if max_inner <= 0 or tiles[-1] <= max_inner:
            yield tiles


def decision_choices(inst, decision):
    """All decisions a sampling instruction can take (its current ``decision`` gives a tile's extent)."""
    if inst.kind.name == "SampleCategorical":
        return list(range(len(inst.attrs[0])))
    n, max_inner = int(inst.attrs[0]), int(inst.attrs[1])
    extent = math.prod(int(x) for x in decision)
    return list(_perfect_tiles(extent, n, max_inner))


def space_size(trace) -> int:
    return math.prod(len(decision_choices(i, trace.get_decision(i))) for i in sample_insts(trace))


def enumerate_decisions(trace, limit: int = 100_000):
    """Every combination of decisions of the trace's knobs, as lists aligned with sample_insts."""
    insts = sample_insts(trace)
    choices = [decision_choices(i, trace.get_decision(i)) for i in insts]
    size = math.prod(len(c) for c in choices)
    if size > limit:
        raise ValueError(f"the space has {size} configurations, too many to enumerate (limit {limit}); "
                         "use --strategy random or evolutionary")
    for combo in itertools.product(*choices):
        yield list(combo)
