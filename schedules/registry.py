"""The registry every part of the lab reads: the CLI, the tests, the reports and the tuner.

A schedule is registered with the workload kind it applies to, its configuration dataclass
(parameters with the classic write-ups' defaults) and its builder ``fn(workload, config) ->
tvm.s_tir.Schedule``. Its step number is its place in its ladder (:data:`LADDERS`): the GEMM ladder
and the GEMV ladder are each numbered 1, 2, 3... in teaching order, and shown as ``gemm 7`` or
``gemv 3``. ``schedlab list``, the README's table, the charts and the tests read this one order.

A plugin (:mod:`schedules.plugins`) adds steps without editing the package: ``after=`` a step of a
ladder, or into a ``ladder=`` of its own. The built-in numbers never change: the plugin steps after
built-in step *n* are numbered *n*.1, *n*.2 ... (at most 9 after one step), and a plugin's own
ladder is numbered 1, 2, 3... in the order its steps are registered (docs/plugins.md).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Callable

from .common import GpuLimits, current_gpu, limits_of, pass_config_of
from .errors import PluginError, ScheduleParamError
from .reference import fp8_sum_tolerance, output_tolerance
from .step_config import Launch, StepConfig  # noqa: F401  (Launch: re-exported for the steps)
from .workloads import FP8_DTYPES


# Each ladder in teaching order: a step's number is its position here (1-based).
LADDERS = {
    "gemm": (
        # the classic SIMT steps
        "naive_gemm", "thread_1d_gemm", "thread_2d_gemm", "shared_cache_gemm", "register_cache_gemm",
        "uncoalesced_gemm", "block_tiling_gemm", "thread_tiling_gemm", "double_buffer_gemm",
        # towards cuBLAS-class fp32
        "vectorized_shared_gemm", "warp_tiled_gemm", "async_pipeline_gemm", "split_k_gemm", "rasterized_gemm",
        "skinny_gemm", "best_gemm", "tuned_gemm",
        # tensor cores: fp16 and bf16, then Hopper's structure one piece at a time
        "tensor_core_gemm", "wgmma_gemm", "tma_gemm", "warp_specialized_gemm", "persistent_gemm", "cluster_gemm",
        # decode-sized products (a few rows against a large weight) at the bandwidth limit
        "decode_gemm",
        "best_fp16_gemm",
        # tensor cores: fp32 inputs read as tf32
        "wgmma_tf32_gemm", "tma_tf32_gemm", "best_tf32_gemm",
        # tensor cores: 8-bit float inputs (e4m3, e5m2) with their scales, on the same structure
        "fp8_tma_gemm", "fp8_block_scaled_gemm", "best_fp8_gemm",
        # a linear layer's epilogue (bias, activation, residual, a 16-bit output): after the product, then in it
        "unfused_epilogue_gemm", "fused_epilogue_gemm",
        # short K (≤ 64), large output: storing C is the work
        "short_k_gemm",
        # thin 16-bit products (a few dozen rows or columns) on the tensor cores, every layout and row pitch
        "thin_tc_gemm",
        # short K, 16-bit inputs: the whole K in one pass of mma.sync, C staged and stored by rows
        "short_k_tc_gemm",
    ),
    "gemv": ("warp_gemv", "vectorized_gemv", "multi_row_gemv", "multi_warp_gemv", "split_k_gemv", "gemv_dispatch",
             "column_gemv_t"),
}
LADDER_OF_KIND = {"gemm": "gemm", "gemv": "gemv", "gemv_t": "gemv"}
PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}
INT32_MAX = 2**31 - 1  # the largest index a kernel's int32 indices reach
TOLERANCE = {"float32": 1e-5, "float16": 1e-4, "bfloat16": 1e-4}  # 16-bit inputs: exact products, fp32 sums


def input_tolerance(workload) -> float:
    """The ‖out − ref‖/‖ref‖ bound of the fp32 result for the workload's input type: :data:`TOLERANCE`;
    8-bit floats: one that grows with K (:func:`schedules.reference.fp8_sum_tolerance`)."""
    if getattr(workload, "fp8", False):  # block scales: the sums promoted to fp32 every 128 of K
        return fp8_sum_tolerance(workload.K, 128 if workload.scaling == "block" else None)
    return TOLERANCE[workload.dtype]


MAX_AFTER_ONE = 9  # plugin steps after one built-in step: n.1 ... n.9
_NAME = re.compile(r"[a-z][a-z0-9_]*")

# Ladders that plugins added steps to, in full (built-in ladders start as their LADDERS tuple), and the
# plugins' own ladders, in the order they were first named: name -> the step names in order.
_ORDER: dict[str, list[str]] = {}


def ladders() -> list[str]:
    """The ladders, built-in first (``gemm``, ``gemv``), then the plugins' own in the order they appeared."""
    return [*LADDERS, *(name for name in _ORDER if name not in LADDERS)]


def _order(ladder: str) -> list[str]:
    """A copy of the ladder's order (a registration that fails must leave the registry as it was)."""
    return list(_ORDER[ladder] if ladder in _ORDER else LADDERS.get(ladder, ()))


def place(name: str, ladder: str) -> tuple[int | float, str]:
    """(number, text) of a step in its ladder: a built-in step's position (an int, ``11``); a plugin
    step after built-in step *n* is the *k*-th plugin step after it (``11.1``: the float 11.1); a step
    of a plugin's own ladder its position there (an int)."""
    order = _ORDER.get(ladder) or LADDERS.get(ladder, ())
    if name not in order:
        raise ScheduleParamError(f"schedule {name} is not in the {ladder} ladder")
    index = order.index(name)
    builtin = LADDERS.get(ladder)
    if builtin is None:
        return index + 1, str(index + 1)
    if name in builtin:
        n = builtin.index(name) + 1
        return n, str(n)
    k = 1
    while order[index - k] not in builtin:
        k += 1
    n = builtin.index(order[index - k]) + 1
    return float(f"{n}.{k}"), f"{n}.{k}"


def ladder_position(name: str, kind: str) -> int:
    """A built-in step's number (its place in its kind's ladder in :data:`LADDERS`)."""
    ladder = LADDERS[LADDER_OF_KIND[kind]]
    if name not in ladder:
        raise ScheduleParamError(
            f"schedule {name} is not in the {LADDER_OF_KIND[kind]} ladder (schedules/registry.py LADDERS): a plugin "
            "step names its place with after=STEP or ladder=NAME")
    return ladder.index(name) + 1


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    kind: str  # "gemm" | "gemv" | "gemv_t"
    builder: Callable
    config_cls: type
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = field(default=())
    ladder_name: str = ""  # "" : the built-in ladder of its kind; else the ladder a plugin put it in
    plugin: str = ""  # the plugin that registered it ("" for the built-in steps)

    @property
    def ladder(self) -> str:
        return self.ladder_name or LADDER_OF_KIND[self.kind]

    @property
    def builtin(self) -> bool:
        """Whether the step is one of the package's own (in :data:`LADDERS`), not a plugin's."""
        return self.name in LADDERS.get(self.ladder, ())

    @property
    def step(self) -> int | float:
        """Its number in its ladder, from 1: an int for a built-in step and for a step of a plugin's
        own ladder; n.k (a float) for the k-th plugin step after built-in step n (:func:`place`)."""
        return place(self.name, self.ladder)[0]

    @property
    def label(self) -> str:
        """``gemm 7`` / ``gemv 3`` / ``gemm 11.1``: how the lab names a step."""
        return f"{self.ladder} {place(self.name, self.ladder)[1]}"

    @property
    def summary(self) -> str:
        doc = inspect.getdoc(self.builder) or ""
        return " ".join(doc.split("\n\n")[0].split())

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.builder) or ""

    def tolerance_for(self, workload) -> float:
        """The largest ‖out − ref‖/‖ref‖ against float64 that counts as right: the input type's
        (1e-5 for fp32 sums of fp32 products; 1e-4 for fp16/bf16 inputs, whose products are exact
        but whose K-long sums the tensor cores round in fp32), or the step's own where larger
        (``tolerance`` on the config: tf32 steps round their inputs to 10 mantissa bits); for a
        16-bit output, widened by the rounding of the output and of the reference
        (:func:`schedules.reference.output_tolerance`). 8-bit float inputs: :func:`input_tolerance`."""
        return output_tolerance(workload, max(input_tolerance(workload), self.config_cls.tolerance))

    def precision(self, dtype: str) -> str:
        """What the step computes in, for comparisons with cuBLAS: tf32 for the tf32 steps, else
        the input type (fp32, fp16, bf16)."""
        return "tf32" if "tf32" in self.tags and dtype == "float32" else PRECISION[dtype]

    @property
    def input_dtypes(self) -> tuple[str, ...]:
        return self.config_cls.dtypes

    def accepts_dtype(self, workload) -> bool:
        """Whether the step takes the workload's input type (``dtypes`` on its config; fp32 and
        fp16 by default). ``schedlab run`` with no schedule names leaves out steps that do not."""
        return workload.dtype in self.input_dtypes

    @property
    def layouts(self) -> tuple[str, ...]:
        """The GEMM operand layouts the step takes (``layouts`` on its config; nn only where the
        config does not say: a step takes a transposed operand only once it has been taught to)."""
        return self.config_cls.layouts

    @property
    def batched(self) -> bool:
        """Whether the step takes a batch of products (``bmm:...``; ``batched`` on its config)."""
        return bool(self.config_cls.batched)

    def accepts(self, workload) -> bool:
        """Whether the step takes the workload's input type, operand layout, batch, epilogue and
        output type, and is made for its shape (``StepConfig.scope_refusal``): ``schedlab run`` with
        no schedule names leaves out steps that do not."""
        return (self.accepts_dtype(workload) and self.layout_refusal(workload) is None
                and self.config_cls.scope_refusal(workload) is None)

    @property
    def epilogues(self) -> bool:
        """Whether the step takes an epilogue and a 16-bit output (``epilogues`` on its config)."""
        return bool(self.config_cls.epilogues)

    def layout_refusal(self, workload, cfg=None) -> str | None:
        """Why the step does not take ``workload``'s layout, batch, epilogue, output type or (8-bit
        float inputs) scaling (one line), or None."""
        src = cfg if cfg is not None else self.config_cls
        if getattr(workload, "has_epilogue", False) and not src.epilogues:
            what = [f"the epilogue {workload.epilogue}"] if workload.epilogue is not None else []
            what += [f"a {workload.out_dtype} output"] if workload.out_dtype != "float32" else []
            return (f"{self.name} writes the float32 product only: it does not take {' or '.join(what)} "
                    f"({workload})")
        layout = getattr(workload, "layout", "nn")
        layouts = src.layouts
        if layout not in layouts:
            note = f": {src.layout_note}" if getattr(src, "layout_note", "") else ""
            return (f"{self.name} takes the {', '.join(layouts)} layout{'s' if len(layouts) > 1 else ''} "
                    f"only, not {layout} ({workload}){note}")
        if getattr(workload, "batched", False) and not src.batched:
            return f"{self.name} does not take a batch of products (bmm): {workload}"
        if getattr(workload, "scaled", False) and workload.scaling not in src.scalings:
            return (f"{self.name} applies {' or '.join(src.scalings) or 'no'} scales, not scale={workload.scaling} "
                    f"({workload})")
        return None

    def config(self, **overrides):
        """The step's configuration: its defaults with ``overrides`` applied (names checked)."""
        names = {f.name for f in dataclasses.fields(self.config_cls)}
        for key in overrides:
            if key not in names:
                raise ScheduleParamError(
                    f"{self.name}: unknown parameter {key!r} (parameters: {', '.join(sorted(names)) or 'none'})")
        return self.config_cls(**overrides)

    def resolve(self, workload, cfg=None) -> "Resolved":
        """The step and configuration that build ``workload``: this step's own, or for a
        shape-driven step (``best_*``) the choice it makes, asked for once here and carried on
        (validation, build options, the results row). A shape-driven step's configuration is
        checked before it chooses, so that a workload it does not take is refused as
        :meth:`validate` refuses it."""
        cfg = cfg if cfg is not None else self.config()
        if type(cfg).choose is StepConfig.choose:  # a step that builds itself
            return Resolved(self, cfg, self, cfg, None, workload=workload)
        self._check_config(workload, cfg)
        choice = cfg.choose(workload)
        if choice is None:
            return Resolved(self, cfg, self, cfg, None, workload=workload)
        return Resolved(self, cfg, get(choice.step), choice.config, choice.text, choice.calibrated_on, workload)

    def _check_config(self, workload, cfg):
        """The checks that need no launch: the workload's kind and layout, the parameters' types
        and signs, the configuration's own ``check``."""
        if workload.kind != self.kind and not cfg.also_takes(workload):  # a GEMV step on a GEMM with one column
            raise ScheduleParamError(f"schedule {self.name} is for {self.kind}, not {workload.kind} ({workload})")
        dtypes = type(cfg).dtypes
        if (getattr(workload, "fp8", False) or set(dtypes) & set(FP8_DTYPES)) and workload.dtype not in dtypes:
            # 8-bit floats on another step or the other way round: the input type first (its scales
            # would otherwise read as an epilogue the step does not take)
            raise ScheduleParamError(f"{self.name} takes {', '.join(dtypes)} inputs, not {workload.dtype} ({workload})")
        refusal = self.layout_refusal(workload, cfg)
        if refusal:
            raise ScheduleParamError(refusal)
        self.check_params(cfg)
        cfg.check(workload)

    def check_params(self, cfg):
        """Raise ScheduleParamError, naming the parameter, unless each of ``cfg``'s parameters has
        its default's type and every whole number is positive (or 0 where it means "chosen")."""
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            default = f.default if f.default is not dataclasses.MISSING else None
            if default is not None and type(value) is not type(default):  # e.g. --param tile_m=big
                raise ScheduleParamError(f"{self.name}: {f.name} must be {type(default).__name__} "
                                         f"(like its default {default!r}), got {value!r}")
            auto = value == 0 and f.name in cfg.zero_means_auto
            if isinstance(value, int) and not isinstance(value, bool) and value <= 0 and not auto:
                raise ScheduleParamError(f"{self.name}: {f.name} must be positive, got {value}")

    def arch_refusal(self, cfg=None, limits: GpuLimits | None = None) -> str | None:
        """Why the step (``cfg``: its configuration) does not build for the GPU of ``limits`` (default:
        the current GPU's), in one line naming the architecture it needs; None where it does."""
        limits = limits or limits_of(current_gpu())
        why = (cfg if cfg is not None else self.config()).arch_refusal(limits.arch)
        return f"{self.name} {why}" + (f" ({limits.gpu_name})" if limits.gpu_name else "") if why else None

    def validate(self, workload, cfg=None, limits: GpuLimits | None = None, resolved: "Resolved | None" = None):
        """Raise ScheduleParamError, naming the parameter, if ``cfg`` cannot run ``workload`` on the
        GPU of ``limits`` (default: the current GPU's, :func:`schedules.common.current_gpu`): its
        architecture and its per-block limits; else return the launch. ``resolved``: this step's
        :meth:`resolve` for the workload, where the caller has it already."""
        cfg = cfg if cfg is not None else self.config()
        limits = limits or limits_of(current_gpu())
        self._check_config(workload, cfg)
        for shape, _ in workload.arg_shapes():  # the kernels index with int32 (TVM's default index type)
            if math.prod(shape) > INT32_MAX:
                raise ScheduleParamError(
                    f"{workload}: a buffer of {'x'.join(map(str, shape))} = {math.prod(shape)} elements exceeds "
                    f"the int32 index space of the lab's kernels (at most {INT32_MAX})")
        refusal = self.arch_refusal(cfg, limits)
        if refusal:
            raise ScheduleParamError(refusal)
        res = resolved if resolved is not None else self.resolve(workload, cfg)
        if res.step is not self:  # a best_* step: its choice must run the workload, at these limits
            res.step.validate(workload, res.step_config, limits)
        launch = res.step_config.launch(workload)
        if launch.threads > limits.max_threads_per_block:
            raise ScheduleParamError(
                f"{self.name}: {launch.threads_from} = {launch.threads} threads per block exceeds the "
                f"limit of {limits.max_threads_per_block}")
        max_shared = limits.max_dynamic_shared_bytes if launch.dynamic_shared else limits.max_shared_bytes
        if launch.shared_bytes > max_shared:
            raise ScheduleParamError(
                f"{self.name}: {launch.shared_from} need {launch.shared_bytes} bytes of shared memory per "
                f"block, more than the target allows ({max_shared})")
        for axis, extent, lim in zip("xyz", launch.grid,
                                     (limits.max_grid_x, limits.max_grid_y, limits.max_grid_z)):
            if extent > lim:
                raise ScheduleParamError(
                    f"{self.name}: grid {axis} = {extent} blocks for {workload} exceeds the limit of {lim}")
        return launch

    def build(self, workload, cfg=None, limits: GpuLimits | None = None, **overrides):
        """Validate, then return the scheduled ``tvm.s_tir.Schedule``."""
        cfg = cfg if cfg is not None else self.config(**overrides)
        res = self.resolve(workload, cfg)
        self.validate(workload, cfg, limits, resolved=res)
        return res.schedule(workload)


@dataclass(frozen=True)
class Resolved:
    """A step resolved for one workload: the step asked for (``spec``, ``config``) and the step
    that builds it (``step``, ``step_config``: the same, except for a ``best_*`` step, whose
    choice they are; ``chosen`` is then its one-line description, and ``calibrated_on`` the GPU
    the choice's model was calibrated on where that is not the GPU it was made for)."""

    spec: ScheduleSpec
    config: object
    step: ScheduleSpec
    step_config: object
    chosen: str | None = None
    calibrated_on: str | None = None
    workload: object = None  # the workload it was resolved for

    def schedule(self, workload):
        """The scheduled ``tvm.s_tir.Schedule`` (built by the step that builds it)."""
        return self.step.builder(workload, self.step_config)

    @property
    def pass_config(self) -> dict:
        """The build options of the step that builds it for its workload (:func:`schedules.common.pass_config_of`)."""
        return pass_config_of(self.step_config, self.workload)


_REGISTRY: dict[str, ScheduleSpec] = {}
_ALIASES: dict[str, str] = {}
_LOADING: list[str] = []  # the plugins being loaded, innermost last (schedules.plugins)
_FIRST_USE: list[Callable] = []  # run once, on the first look-up: schedules.plugins loads the environment's plugins


def register(name: str, kind: str, config: type, aliases=(), tags=(), *, after: str | None = None,
             ladder: str | None = None):
    """Decorator: add a builder to the registry. A built-in step's name is in its kind's ladder in
    :data:`LADDERS`; a plugin's step names its place: ``after`` a registered step (name or alias) of
    its kind's ladder or of a plugin's ladder, or at the end of ``ladder``, a ladder of the plugin's
    own. A plugin step's builder is guarded: anything but a ScheduleParamError it raises becomes one
    line naming the plugin and the step."""

    def wrap(fn):
        plugin = _LOADING[-1] if _LOADING else ""
        placed = after is not None or ladder is not None
        builder = _guarded(fn, name, plugin) if placed else fn
        register_spec(ScheduleSpec(name, kind, builder, config, tuple(aliases), tuple(tags),
                                   ladder_name=ladder or "", plugin=plugin), after=after)
        return fn

    return wrap


def _guarded(fn, name: str, plugin: str):
    where = f"plugin {plugin}: step {name}" if plugin else f"step {name}"

    @functools.wraps(fn)
    def build(wl, cfg):
        try:
            return fn(wl, cfg)
        except ScheduleParamError:
            raise
        except Exception as e:  # noqa: BLE001 - a plugin's builder: one line that names it
            raise PluginError(f"{where}: the builder raised {describe(e)}") from e

    return build


def describe(e: BaseException) -> str:
    """One line for an exception: the message of the lab's own errors, else the type and the first
    line of the message (a SyntaxError with its line number)."""
    if isinstance(e, ScheduleParamError):
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, SyntaxError):
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:300]}" if lines else type(e).__name__


def get(name: str) -> ScheduleSpec:
    first_use()
    key = _ALIASES.get(name, name)
    if key not in _REGISTRY:
        raise ScheduleParamError(
            f"unknown schedule {name!r} (known: {', '.join(s.name for s in all_schedules())})")
    return _REGISTRY[key]


def all_schedules(kind: str | None = None, tag: str | None = None, ladder: str | None = None,
                  builtin: bool | None = None) -> list[ScheduleSpec]:
    """The registered steps in ladder order (GEMM, then GEMV, then the plugins' own ladders),
    optionally of one workload kind, carrying one tag, of one ladder, or only the built-in ones
    (``builtin=True``) or only the plugins' (``builtin=False``)."""
    first_use()
    order = ladders()
    specs = sorted(_REGISTRY.values(), key=lambda s: (order.index(s.ladder), s.step))
    return [s for s in specs if (kind is None or s.kind == kind) and (tag is None or tag in s.tags)
            and (ladder is None or s.ladder == ladder) and (builtin is None or s.builtin == builtin)]


def first_use():
    """Run what waits for the registry's first look-up (the plugins the environment names), once."""
    while _FIRST_USE:
        _FIRST_USE.pop(0)()


def on_first_use(fn: Callable):
    """Run ``fn`` once, when the registry is first asked for a step (:func:`get`, :func:`all_schedules`)."""
    _FIRST_USE.append(fn)


def register_spec(spec: ScheduleSpec, after: str | None = None):
    """Add a ready-made spec (``tuned_gemm`` is registered this way), placed as :func:`register`
    says, after the checks of :func:`check_step`. Errors are one line (ScheduleParamError)."""
    for key in (spec.name, *spec.aliases):
        if key in _REGISTRY or key in _ALIASES:
            owner = _ALIASES.get(key, key)
            what = f"step {key!r}" if key == spec.name else f"alias {key!r} of step {spec.name!r}"
            raise ScheduleParamError(f"{what} already registered" if key == owner else
                                     f"{what} is already an alias of {owner}")
    if spec.kind not in LADDER_OF_KIND:
        raise ScheduleParamError(f"step {spec.name!r}: kind {spec.kind!r} is not one of {', '.join(LADDER_OF_KIND)}")
    ladder, order = _placed(spec, after)
    check_step(spec)
    if ladder is not None:
        spec = dataclasses.replace(spec, ladder_name=ladder)
        _ORDER[ladder] = order
    _REGISTRY[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name
    return spec


def _placed(spec: ScheduleSpec, after: str | None):
    """(ladder, its new order) for a step a plugin places, or (None, None) for a built-in step."""
    own = spec.ladder_name
    if after is None and not own:
        ladder_position(spec.name, spec.kind)  # a built-in step: its name is in LADDERS
        return None, None
    if after is not None and own:
        raise ScheduleParamError(f"step {spec.name!r}: give after=STEP or ladder=NAME, not both")
    if after is None:
        if own in LADDERS:
            raise ScheduleParamError(f"step {spec.name!r}: the {own} ladder is built in: place a step in it with "
                                     "after=STEP")
        if not _NAME.fullmatch(own):
            raise ScheduleParamError(f"step {spec.name!r}: ladder name {own!r} is not lower-case letters, digits "
                                     "and _")
        return own, [*_order(own), spec.name]
    home = LADDER_OF_KIND[spec.kind]
    anchor = _REGISTRY.get(_ALIASES.get(after, after))
    if anchor is None or (anchor.ladder in LADDERS and anchor.ladder != home):
        raise ScheduleParamError(f"anchor {after!r} is not a step of the {home} ladder")
    order = _order(anchor.ladder)
    order.insert(order.index(anchor.name) + 1, spec.name)
    builtin = LADDERS.get(anchor.ladder, ())
    if builtin:
        run = 0
        for name in order:
            run = 0 if name in builtin else run + 1
            if run > MAX_AFTER_ONE:
                raise ScheduleParamError(f"step {spec.name!r}: more than {MAX_AFTER_ONE} plugin steps after one "
                                         f"step of the {anchor.ladder} ladder")
    return anchor.ladder, order


def check_step(spec: ScheduleSpec):
    """Raise ScheduleParamError (one line, naming the step) unless ``spec`` keeps the contract of
    every step: a lower-case name (and aliases); a configuration that is a frozen dataclass deriving
    from StepConfig, with a default for every parameter, that says how it launches (``launch``, or
    ``choose`` for a shape-driven step) and whose ``search_space`` names its parameters with values
    of their type; a callable builder whose docstring's first paragraph is the step's summary."""
    name = spec.name
    for key in (name, *spec.aliases):
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            raise ScheduleParamError(f"step {name!r}: the name {key!r} is not lower-case letters, digits and _")
    cfg = spec.config_cls
    # "__dataclass_params__" of its own: a subclass left undecorated would have its parent's fields only
    if not (isinstance(cfg, type) and issubclass(cfg, StepConfig) and "__dataclass_params__" in vars(cfg)
            and cfg.__dataclass_params__.frozen):
        what = getattr(cfg, "__name__", repr(cfg))
        raise ScheduleParamError(f"step {name!r}: its configuration {what} is not a frozen dataclass deriving from "
                                 "StepConfig (@dataclass(frozen=True) class ...(StepConfig))")
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    bare = [f for f in fields.values() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if bare:
        raise ScheduleParamError(f"step {name!r}: parameter {bare[0].name} of {cfg.__name__} has no default")
    if cfg.launch is StepConfig.launch and cfg.choose is StepConfig.choose:
        raise ScheduleParamError(f"step {name!r}: {cfg.__name__} does not say how it launches (define launch)")
    space = cfg.search_space
    if not isinstance(space, dict):
        raise ScheduleParamError(f"step {name!r}: {cfg.__name__}.search_space must be a dict (parameter -> values)")
    for key, values in space.items():
        if key not in fields:
            raise ScheduleParamError(f"step {name!r}: search_space names {key!r}, not a parameter of {cfg.__name__}")
        default = fields[key].default
        if not isinstance(values, (tuple, list)) or not values or \
                any(type(v) is not type(default) for v in values):
            raise ScheduleParamError(f"step {name!r}: search_space[{key!r}] must be a non-empty tuple of "
                                     f"{type(default).__name__} values (like the default {default!r})")
    if not callable(spec.builder):
        raise ScheduleParamError(f"step {name!r}: its builder is not callable")
    if not (inspect.getdoc(spec.builder) or "").strip():
        raise ScheduleParamError(f"step {name!r}: its builder has no docstring (its first paragraph is the "
                                 "step's summary)")


def snapshot():
    """The registry's state, for :func:`restore` (a plugin that fails to load leaves nothing behind)."""
    return dict(_REGISTRY), dict(_ALIASES), {k: list(v) for k, v in _ORDER.items()}


def restore(state):
    registry, aliases, order = state
    _REGISTRY.clear()
    _REGISTRY.update(registry)
    _ALIASES.clear()
    _ALIASES.update(aliases)
    _ORDER.clear()
    _ORDER.update({k: list(v) for k, v in order.items()})


# The README's ladder table and docs/steps.md are generated from the registry (scripts/update_readme_table.py writes
# them, tests/test_readme.py checks them), so that no hand-copied list of steps can drift from `schedlab list`.

def _shorten(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else cut before `` …`` at the last clause boundary (``; ``,
    ``: ``, ``, ``) outside parentheses and code, or at the last such space where that would drop too much."""
    if len(text) <= limit:
        return text
    room = limit - 2

    def closed(head: str) -> bool:
        return head.count("(") == head.count(")") and head.count("`") % 2 == 0

    def last(pattern: str) -> int:
        return max((m.start() for m in re.finditer(pattern, text[:room]) if closed(text[:m.start()])), default=0)

    cut = last(r"[;:,] ")
    if cut < 0.6 * room:  # no clause boundary late enough: the last word boundary
        cut = last(" ") or room
    return text[:cut].rstrip(" ,;:") + " …"


def ladder_table_markdown(width: int = 200) -> str:
    """Both ladders as a Markdown table (step label, schedule name, what it changes): the README's table.

    The third column is each step's summary (:attr:`ScheduleSpec.summary`, the first paragraph of its builder's
    docstring), cut at a clause boundary where the row would be longer than ``width`` characters (the full summaries:
    ``schedlab list``, :func:`ladder_steps_markdown`). The built-in steps only: a loaded plugin's steps are not the
    package's. Pure: reads the registry only."""
    rows = ["| step | schedule | what it changes |", "|---:|---|---|"]
    for spec in all_schedules(builtin=True):
        head = f"| {spec.label} | `{spec.name}` | "
        text = _shorten(spec.summary.replace("|", "\\|"), width - len(head) - 2)
        rows.append(f"{head}{text} |")
    return "\n".join(rows) + "\n"


def ladder_steps_markdown(width: int = 100) -> str:
    """Every built-in step with its aliases and its full summary, lines wrapped at ``width``: the body of
    docs/steps.md."""
    parts = []
    for spec in all_schedules(builtin=True):
        aliases = f" (also {', '.join(f'`{a}`' for a in spec.aliases)})" if spec.aliases else ""
        kind = f", a `{spec.kind}` workload" if spec.kind != spec.ladder else ""
        parts.append(f"- **{spec.label}** `{spec.name}`{aliases}{kind}:\n"
                     + textwrap.fill(spec.summary, width, initial_indent="  ", subsequent_indent="  ",
                                     break_long_words=False, break_on_hyphens=False))
    return "\n".join(parts) + "\n"
