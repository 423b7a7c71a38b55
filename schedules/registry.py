"""The registry every part of the lab reads: the CLI, the tests, the reports and the tuner.

A schedule is registered with the workload kind it applies to, its configuration dataclass
(parameters with the classic write-ups' defaults) and its builder ``fn(workload, config) ->
tvm.s_tir.Schedule``. Its step number is its place in its ladder (:data:`LADDERS`): the GEMM ladder
and the GEMV ladder are each numbered 1, 2, 3... in teaching order, and shown as ``gemm 7`` or
``gemv 3``. ``schedlab list``, the README's table, the charts and the tests read this one order.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from dataclasses import dataclass, field
from typing import Callable

from .common import GpuLimits, current_gpu, limits_of, pass_config_of
from .errors import ScheduleParamError
from .step_config import Launch, StepConfig  # noqa: F401  (Launch: re-exported for the steps)


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
        "best_fp16_gemm",
        # tensor cores: fp32 inputs read as tf32
        "wgmma_tf32_gemm", "tma_tf32_gemm", "best_tf32_gemm",
    ),
    "gemv": ("warp_gemv", "vectorized_gemv", "multi_row_gemv", "multi_warp_gemv", "split_k_gemv", "gemv_dispatch",
             "column_gemv_t"),
}
LADDER_OF_KIND = {"gemm": "gemm", "gemv": "gemv", "gemv_t": "gemv"}
PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
TOLERANCE = {"float32": 1e-5, "float16": 1e-4, "bfloat16": 1e-4}  # 16-bit inputs: exact products, fp32 sums


def ladder_position(name: str, kind: str) -> int:
    ladder = LADDERS[LADDER_OF_KIND[kind]]
    if name not in ladder:
        raise RuntimeError(f"schedule {name} is not in the {LADDER_OF_KIND[kind]} ladder (schedules/registry.py LADDERS)")
    return ladder.index(name) + 1


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    kind: str  # "gemm" | "gemv" | "gemv_t"
    builder: Callable
    config_cls: type
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = field(default=())

    @property
    def ladder(self) -> str:
        return LADDER_OF_KIND[self.kind]

    @property
    def step(self) -> int:
        """Position in its ladder, from 1."""
        return ladder_position(self.name, self.kind)

    @property
    def label(self) -> str:
        """``gemm 7`` / ``gemv 3``: how the lab names a step."""
        return f"{self.ladder} {self.step}"

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
        (``tolerance`` on the config: tf32 steps round their inputs to 10 mantissa bits)."""
        return max(TOLERANCE[workload.dtype], self.config_cls.tolerance)

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
        """Whether the step takes the workload's input type, operand layout and batch
        (``schedlab run`` with no schedule names leaves out steps that do not)."""
        return self.accepts_dtype(workload) and self.layout_refusal(workload) is None

    def layout_refusal(self, workload, cfg=None) -> str | None:
        """Why the step does not take ``workload``'s layout or batch (one line), or None."""
        src = cfg if cfg is not None else self.config_cls
        layout = getattr(workload, "layout", "nn")
        layouts = src.layouts
        if layout not in layouts:
            return (f"{self.name} takes the {', '.join(layouts)} layout{'s' if len(layouts) > 1 else ''} "
                    f"only, not {layout} ({workload})")
        if getattr(workload, "batched", False) and not src.batched:
            return f"{self.name} does not take a batch of products (bmm): {workload}"
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
            return Resolved(self, cfg, self, cfg, None)
        self._check_config(workload, cfg)
        choice = cfg.choose(workload)
        if choice is None:
            return Resolved(self, cfg, self, cfg, None)
        return Resolved(self, cfg, get(choice.step), choice.config, choice.text, choice.calibrated_on)

    def _check_config(self, workload, cfg):
        """The checks that need no launch: the workload's kind and layout, the parameters' types
        and signs, the configuration's own ``check``."""
        if workload.kind != self.kind and not cfg.also_takes(workload):  # a GEMV step on a GEMM with one column
            raise ScheduleParamError(f"schedule {self.name} is for {self.kind}, not {workload.kind} ({workload})")
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

    def schedule(self, workload):
        """The scheduled ``tvm.s_tir.Schedule`` (built by the step that builds it)."""
        return self.step.builder(workload, self.step_config)

    @property
    def pass_config(self) -> dict:
        """The build options of the step that builds it (:func:`schedules.common.pass_config_of`)."""
        return pass_config_of(self.step_config)


_REGISTRY: dict[str, ScheduleSpec] = {}
_ALIASES: dict[str, str] = {}


def register(name: str, kind: str, config: type, aliases=(), tags=()):
    """Decorator: add a builder to the registry (its name must be in its kind's ladder)."""

    def wrap(fn):
        if name in _REGISTRY or name in _ALIASES:
            raise RuntimeError(f"schedule {name} registered twice")
        register_spec(ScheduleSpec(name, kind, fn, config, tuple(aliases), tuple(tags)))
        return fn

    return wrap


def get(name: str) -> ScheduleSpec:
    key = _ALIASES.get(name, name)
    if key not in _REGISTRY:
        raise ScheduleParamError(
            f"unknown schedule {name!r} (known: {', '.join(s.name for s in all_schedules())})")
    return _REGISTRY[key]


def all_schedules(kind: str | None = None, tag: str | None = None, ladder: str | None = None) -> list[ScheduleSpec]:
    """The registered steps in ladder order (GEMM, then GEMV), optionally of one workload kind,
    carrying one tag, or of one ladder."""
    order = list(LADDERS)
    specs = sorted(_REGISTRY.values(), key=lambda s: (order.index(s.ladder), s.step))
    return [s for s in specs if (kind is None or s.kind == kind) and (tag is None or tag in s.tags)
            and (ladder is None or s.ladder == ladder)]


def register_spec(spec: ScheduleSpec):
    """Add a ready-made spec (the tuner registers tuned schedules this way)."""
    ladder_position(spec.name, spec.kind)
    _REGISTRY[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name
    return spec


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
    ``schedlab list``, :func:`ladder_steps_markdown`). Pure: reads the registry only."""
    rows = ["| step | schedule | what it changes |", "|---:|---|---|"]
    for spec in all_schedules():
        head = f"| {spec.label} | `{spec.name}` | "
        text = _shorten(spec.summary.replace("|", "\\|"), width - len(head) - 2)
        rows.append(f"{head}{text} |")
    return "\n".join(rows) + "\n"


def ladder_steps_markdown(width: int = 100) -> str:
    """Every step with its aliases and its full summary, lines wrapped at ``width``: the body of docs/steps.md."""
    parts = []
    for spec in all_schedules():
        aliases = f" (also {', '.join(f'`{a}`' for a in spec.aliases)})" if spec.aliases else ""
        kind = f", a `{spec.kind}` workload" if spec.kind != spec.ladder else ""
        parts.append(f"- **{spec.label}** `{spec.name}`{aliases}{kind}:\n"
                     + textwrap.fill(spec.summary, width, initial_indent="  ", subsequent_indent="  ",
                                     break_long_words=False, break_on_hyphens=False))
    return "\n".join(parts) + "\n"
