"""Schedule steps shared by several optimization steps: tiling and binding, cooperative fetch,
register accumulators. Each helper is one named move of the classic write-ups."""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, tirx

MAX_CLUSTER = 8  # the portable thread-block cluster size (blocks per cluster without the non-portable opt-in)
SECTOR_BYTES = 32  # the unit of memory traffic between L2 and the SMs, loads and stores alike
MIN_BLOCKS_KEY = "tirx.launch_bounds_min_blocks_per_sm"  # the second figure of CUDA's __launch_bounds__
PIECE_BOUNDS_KEY = "schedlab.whole_piece_bounds"  # a write-back tested once per thread's piece (whole_piece_bounds)


@dataclass(frozen=True)
class GpuLimits:
    """What one thread block may use, and the architecture its kernel is built for. Defaults are
    those of an sm_90 GPU (H100/H200); :func:`limits_of` gives any GPU's. Static shared memory is
    48 KiB on every CUDA GPU; dynamic shared memory is opt-in up to the GPU's per-block figure."""

    max_threads_per_block: int = 1024
    max_shared_bytes: int = 48 * 1024
    max_dynamic_shared_bytes: int = 227 * 1024  # opt-in dynamic shared memory per block on sm_90
    max_grid_y: int = 65535
    max_grid_z: int = 65535
    max_grid_x: int = 2**31 - 1
    warp_size: int = 32
    arch: str = "sm_90"  # what the kernel is built for: a step that needs another refuses (StepConfig.arch_refusal)
    gpu_name: str = ""  # the GPU those figures are of, for error text


@dataclass(frozen=True)
class GpuSpec:
    """The GPU a shape-driven choice (best_gemm, best_fp16_gemm, ...) is made for and the lab builds
    for: its architecture (which steps build for it) and what the choice reads to count waves and
    occupancy. The lab reads these from the device at run time (``reports.engine.build.device_spec``),
    or from a named profile (:mod:`schedules.gpus`); without either, an H100/H200 (sm_90, 132 SMs)
    is assumed."""

    name: str = "sm_90 (H100/H200 class, assumed)"
    arch: str = "sm_90"  # compute capability as nvcc names it (sm_80, sm_86, sm_89, sm_90, sm_100, sm_120)
    sms: int = 132
    regs_per_sm: int = 65536
    smem_per_sm: int = 228 * 1024
    smem_per_block: int = 227 * 1024  # opt-in dynamic shared memory per block
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    l2_bytes: int = 50 * 1024 * 1024
    memory_gbps: float = 4000.0  # device memory bandwidth, for the roofline terms of the model


def register_blocks(threads: int, regs: int, regs_per_sm: int = GpuSpec.regs_per_sm) -> int:
    """Blocks of ``threads`` an SM's registers hold at ``regs`` a thread (allocated a warp at a time,
    in steps of 256)."""
    return regs_per_sm // max(ceil_div(regs * threads, 256) * 256, 1)


def blocks_per_sm(threads: int, regs: int, smem: int, gpu: GpuSpec) -> int:
    """Occupancy: how many blocks of this size one SM holds (threads, registers, shared memory)."""
    limits = [gpu.blocks_per_sm, gpu.threads_per_sm // threads, register_blocks(threads, regs, gpu.regs_per_sm)]
    if smem:
        limits.append(gpu.smem_per_sm // (smem + 1024))  # the runtime's 1 KiB per block
    return max(0, min(limits))


_CURRENT_GPU: list = [None]
_GPU_READER = [GpuSpec]  # what gives the GPU where none was set: the engine installs the device's reader


def current_gpu() -> GpuSpec:
    """The GPU choices are made and steps are checked for: the one :func:`use_gpu` set, else the
    one the installed reader gives (:func:`read_gpu_with`: the device or a named profile, once the
    build engine is loaded), else an sm_90 GPU."""
    if _CURRENT_GPU[0] is None:
        _CURRENT_GPU[0] = _GPU_READER[0]()
    return _CURRENT_GPU[0]


def use_gpu(spec: GpuSpec | dict | None):
    """Make shape-driven choices in this process for ``spec`` (a GpuSpec or its fields as a dict)."""
    if spec is not None:
        _CURRENT_GPU[0] = spec if isinstance(spec, GpuSpec) else GpuSpec(**spec)
    return current_gpu()


def read_gpu_with(reader):
    """Where no GPU was set, ask ``reader()`` (a GpuSpec) for it when first needed. The schedules
    read no device themselves: ``reports.engine.build`` installs its device reader."""
    _GPU_READER[0] = reader


def limits_of(gpu: GpuSpec) -> GpuLimits:
    """What one thread block may use on ``gpu`` (its opt-in shared memory per block) and its
    architecture."""
    return GpuLimits(max_dynamic_shared_bytes=gpu.smem_per_block, arch=gpu.arch, gpu_name=gpu.name)


def pass_config_of(cfg, wl=None) -> dict:
    """The PassContext options a schedule's config needs when it is compiled: a config with
    ``async_copy`` has its global → shared copies injected as cp.async (``tirx.use_async_copy``),
    plus whatever its ``pass_config`` asks for (:class:`schedules.step_config.StepConfig`), and for
    a workload ``wl`` its ``pass_config_for(wl)``."""
    config = {"tirx.use_async_copy": True} if cfg.async_copy else {}
    config.update(cfg.pass_config)
    if wl is not None and hasattr(cfg, "pass_config_for"):
        config.update(cfg.pass_config_for(wl))
    return config


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def aligned_vector(n: int, vector: int) -> int:
    """The widest load not over ``vector`` that every row start allows: a row of a row-major
    matrix with rows of ``n`` elements begins at element i·n, so a v-element load needs
    n % v == 0 (float4: n % 4 == 0). A row's last, partial vector is predicated off as a whole."""
    while vector > 1 and n % vector:
        vector //= 2
    return vector


def new_schedule(func) -> s_tir.Schedule:
    return s_tir.Schedule(func)


def is_one(value) -> bool:
    """True for the plain integer 1 (a sampled knob, an ExprRV, is never known to be 1 here)."""
    return isinstance(value, int) and value == 1


def tile_and_bind_2d(sch, block, tile_m, tile_n, *, rows_on="y", inner_split=None, bind=True):
    """Split the two spatial loops of ``block`` into block tiles of ``tile_m × tile_n``, bind the
    tile index to blockIdx and the position inside it to threadIdx.

    ``rows_on="y"`` puts rows on threadIdx.y and columns on threadIdx.x, so consecutive threads of a
    warp touch consecutive columns (coalesced); ``rows_on="x"`` is the uncoalesced mapping.
    Tile sizes may be integers or sampled knobs (ExprRVs, for tuning spaces); ``bind=False`` leaves
    the loops serial (the CPU twin). Returns ``(bi, bj, ti, tj, k)``.
    """
    i, j, k = sch.get_loops(block)
    bi, ti = sch.split(i, [None, tile_m])
    bj, tj = sch.split(j, [None, tile_n])
    sch.reorder(bi, bj, ti, tj, k)
    if not bind:
        return bi, bj, ti, tj, k
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    if rows_on == "y":
        sch.bind(ti, "threadIdx.y")
        sch.bind(tj, "threadIdx.x")
    else:
        sch.bind(ti, "threadIdx.x")
        sch.bind(tj, "threadIdx.y")
    return bi, bj, ti, tj, k


def cooperative_fetch(sch, copy_block, threads, vector=1, bind=True):
    """All threads of the block copy a tile together: fuse the copy loops, split them over
    ``threads = (threads_y, threads_x)`` (and a vector lane), bind. Non-divisible extents become
    predicates, so any tile size works. ``threads`` and ``vector`` may be sampled knobs; a sampled
    vector width always gets its (possibly unit) vector loop. ``bind=False`` (the CPU twin) only
    splits off and vectorizes the vector lane."""
    loops = sch.get_loops(copy_block)
    fused = sch.fuse(*loops[-2:])
    if not bind:
        if not is_one(vector):
            _, v = sch.split(fused, [None, vector])
            sch.vectorize(v)
        return
    ty, tx = threads
    if not is_one(vector):
        _, y, x, v = sch.split(fused, [None, ty, tx, vector])
        sch.vectorize(v)
    else:
        _, y, x = sch.split(fused, [None, ty, tx])
    sch.bind(y, "threadIdx.y")
    sch.bind(x, "threadIdx.x")


def shared_tiles(sch, block, at_loop, threads=None, vector=1, fetch=None, bind=True):
    """Stage the A and B tiles that ``block`` reads into shared memory at ``at_loop`` (the K-outer
    loop), fetched cooperatively (``fetch(sch, copy_block)`` replaces the fetch, e.g. by
    MetaSchedule's cooperative-fetch annotation). Returns the two copy blocks."""
    copies = []
    for index in (0, 1):
        cache = sch.cache_read(block, index, "shared")
        sch.compute_at(cache, at_loop, preserve_unit_loops=True)
        if fetch is not None:
            fetch(sch, cache)
        else:
            cooperative_fetch(sch, cache, threads, vector, bind=bind)
        copies.append(cache)
    return copies


def register_accumulator(sch, block, at_loop):
    """Accumulate the block's output in registers (a ``local`` cache) and write it back once,
    after the reduction, at ``at_loop``. Returns the write-back block."""
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, at_loop, preserve_unit_loops=True)
    return write_back


def register_fragments(sch, block, at_loop, indices=(0, 1), vector: int | None = None):
    """Stage the block's inputs ``indices`` in registers (``local`` caches) at ``at_loop``, each read
    as one vector load (its innermost loop vectorized; with ``vector``, as loads of that many).
    Returns the fragment blocks."""
    frags = []
    for index in indices:
        frag = sch.cache_read(block, index, "local")
        sch.compute_at(frag, at_loop, preserve_unit_loops=True)
        last = sch.get_loops(frag)[-1]
        if vector:
            last = sch.split(last, [None, vector])[1]
        sch.vectorize(last)
        frags.append(frag)
    return frags


def inline_padding(sch, reads=("A_pad", "B_pad"), writes=("C_pad",)):
    """Fold the copies ``pad_einsum`` made into their neighbours: the zero-filled input copies
    (``reads``) into their readers (guarded loads), the output copy (``writes``) into its producer
    (a guarded store). Shapes that are already tile multiples have no such blocks."""
    for names, inline in ((reads, sch.compute_inline), (writes, sch.reverse_compute_inline)):
        for name in names:
            try:
                block = sch.get_sblock(name)
            except s_tir.ScheduleError:
                continue
            inline(block)


def padded_copy(sch, name: str, threads: int = 256, per_thread: int = 4):
    """Schedule ``pad_einsum``'s zero-filled copy ``name`` as a kernel of its own (instead of
    inlining it into its reader as guarded loads): the elements in row-major order, consecutive
    threads on consecutive elements (coalesced reads and writes), ``per_thread`` each. The reader
    then loads from a buffer whose rows are whole tiles: aligned, full-width, unguarded."""
    block = sch.get_sblock(name)
    fused = sch.fuse(*sch.get_loops(block))
    bx, u, tx = sch.split(fused, [None, per_thread, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.unroll(u)


def cooperative_fetch_axes(sch, copy_block, axes, vector=1):
    """:func:`cooperative_fetch` for any thread shape: ``axes`` is ``((tag, extent), ...)`` outermost
    first (e.g. threadIdx.z, .y, .x of a warp-tiled block); a ``vector``-wide lane innermost."""
    loops = sch.get_loops(copy_block)
    fused = sch.fuse(*loops[-2:])
    factors = [None] + [extent for _, extent in axes] + ([vector] if vector > 1 else [])
    parts = sch.split(fused, factors)
    if vector > 1:
        sch.vectorize(parts[-1])
        parts = parts[:-1]
    for (tag, extent), loop in zip(axes, parts[1:]):
        sch.bind(loop, tag)


def epilogue_block(sch):
    """The elementwise block "D" of a product with an epilogue or another output type
    (:attr:`schedules.workloads.Gemm.has_epilogue`), or None for a plain product."""
    try:
        return sch.get_sblock("D")
    except s_tir.ScheduleError:
        return None


def fuse_epilogue(sch):
    """Compute the epilogue where the product is written: the elementwise block "D" (bias,
    activation, residual, scaling, the rounding to the output type) inlined into the block that
    writes C from the accumulators (a register or shared-memory write-back, padding already folded
    into it), which then stores D instead of C. C is never written to memory, nor read back; the
    bias and R are read where each output is stored. A plain product (no "D") is left as it is.
    Call it last, once the write-back block is in place and ``inline_padding`` has run."""
    block = epilogue_block(sch)
    if block is not None:
        sch.reverse_compute_inline(block)


def fit_blocks_per_sm(sch, loop, blocks: int):
    """Ask the compiler for ``blocks`` resident blocks an SM: CUDA's ``__launch_bounds__(threads,
    blocks)``, with which ptxas keeps a thread's registers within 65536 / (threads × blocks). A tile
    whose natural count lands a few registers over that line (134 where 128 lets two blocks of 256
    threads share an SM) then keeps the occupancy its register budget was planned for. ``loop``: the
    kernel's blockIdx loop, annotated (so the request is in the schedule's trace and survives a
    replay); :func:`with_build_annotations` turns the annotation into the attribute TVM's host/device
    split reads, when the module is built."""
    sch.annotate(loop, MIN_BLOCKS_KEY, blocks)


def whole_piece_bounds(sch, block):
    """Test a thread's piece of C against C's edges once, not at every store. ``block`` writes the
    outputs a thread holds, rows and columns past C's edge left out by one predicate (row < M and
    column < N). Unrolled, every store carries that test, each in its own form after TVM's
    simplification, and ptxas, keeping them ready, can take a 128 × 128 tile of 8 × 8 outputs a
    thread from 128 registers to 200-214 (one block an SM where two fit). Tested once, the piece's
    last row and column, a piece inside C (all but the blocks on its edges) stores without tests,
    and the count stays at the tile's 128. Annotated here (in the trace, kept through a replay);
    :func:`with_build_annotations` rewrites the block when the module is built."""
    sch.annotate(block, PIECE_BOUNDS_KEY, 1)


def _piece_bounds(realize, inner):
    """``realize`` (an annotated write-back) with its predicate, where it is exactly row < rows and
    column < columns of the buffer it writes, moved into its body behind the test of the thread's
    piece: where the piece's last row and column (``inner``: the loops over the piece, each at its
    last value) are inside, every store goes without a test; else each keeps its own."""
    block = realize.block
    notes = {k: v for k, v in block.annotations.items() if k != PIECE_BOUNDS_KEY}
    body, predicate = block.body, realize.predicate
    if isinstance(body, tirx.BufferStore) and isinstance(predicate, tirx.And) and len(body.indices) >= 2:
        shape = body.buffer.shape
        value = {iv.var: bound for iv, bound in zip(block.iter_vars, realize.iter_values)}
        tests = [(predicate.a, body.indices[-2], shape[-2]), (predicate.b, body.indices[-1], shape[-1])]
        if all(isinstance(test, tirx.LT) and index in value and tvm_ffi.structural_equal(test.a, value[index])
               and tvm_ffi.structural_equal(test.b, edge) for test, index, edge in tests):
            whole = [_last_of(test.a, inner) for test, _, _ in tests]
            if all(last is not None for last in whole):
                whole = tirx.And(whole[0] < tests[0][2], whole[1] < tests[1][2])
                body = tirx.IfThenElse(whole, body, tirx.IfThenElse(predicate, body, None))
                predicate = tirx.const(True, "bool")
    new = s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                       block.alloc_buffers, block.match_buffers, notes)
    return block, s_tir.SBlockRealize(realize.iter_values, predicate, new)


def _last_of(index, inner):
    """``index`` at the last iteration of the loops ``inner``, where it grows with each of them
    (a sum of their variables with constant, non-negative coefficients), else None."""
    coeffs = tvm.sym.detect_linear_equation(index, [loop.loop_var for loop in inner])
    if not coeffs or not all(isinstance(c, tirx.IntImm) and c.value >= 0 for c in coeffs[:-1]):
        return None
    return sum((c * (loop.min + loop.extent - 1) for c, loop in zip(coeffs[:-1], inner)), coeffs[-1])


def with_build_annotations(mod):
    """``mod`` with the schedule's notes for the build turned into the IR that TVM reads: the held
    blocks per SM of :func:`fit_blocks_per_sm` and the bounds tests of :func:`whole_piece_bounds`.
    ``mod`` itself where it has neither."""
    text = mod.script()
    if MIN_BLOCKS_KEY in text:
        mod = _launch_bounds_attrs(mod)
    if PIECE_BOUNDS_KEY in text:  # last: its test reads the loops' variables inside the block
        sch = s_tir.Schedule(mod)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            if PIECE_BOUNDS_KEY in sch.get(block).annotations:
                loops = sch.get_loops(block)
                nodes = [sch.get(loop) for loop in loops]
                if not nodes or not isinstance(nodes[-1].body, s_tir.SBlockRealize):  # not a write-back's loop nest
                    sch.unannotate(block, PIECE_BOUNDS_KEY)
                    continue
                bound = max((i for i, node in enumerate(nodes) if node.thread_binding is not None), default=-1)
                loop, node = loops[-1], nodes[-1]
                old, realize = _piece_bounds(node.body, nodes[bound + 1:])
                sch.state.replace(sch.get_sref(loop), tirx.For(node.loop_var, node.min, node.extent, node.kind, realize,
                                                               node.thread_binding, node.annotations),
                                  {old: realize.block})
        mod = sch.mod
    return mod


def _launch_bounds_attrs(mod):
    """``mod`` (whose text holds the annotation) with the body of every loop :func:`fit_blocks_per_sm`
    annotated wrapped in the ``tirx.launch_bounds_min_blocks_per_sm`` attribute (a kernel's device code
    is where TVM looks for it: on the function, or as a loop annotation, it is not read)."""
    sch = s_tir.Schedule(mod)
    while True:
        found = next(((loop, sch.get(loop)) for block in sch.get_child_blocks(sch.get_sblock("root"))
                      for loop in sch.get_loops(block) if MIN_BLOCKS_KEY in sch.get(loop).annotations), None)
        if found is None:
            return sch.mod
        loop, node = found
        blocks = node.annotations[MIN_BLOCKS_KEY]
        body = tirx.AttrStmt(tirx.IntImm("int32", 0), MIN_BLOCKS_KEY, tirx.IntImm("int32", int(blocks)), node.body)
        rest = {k: v for k, v in node.annotations.items() if k != MIN_BLOCKS_KEY}
        sch.state.replace(sch.get_sref(loop), tirx.For(node.loop_var, node.min, node.extent, node.kind, body,
                                                       node.thread_binding, rest))
