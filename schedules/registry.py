"""The registry every part of the lab reads: the CLI, the tests, the reports and the tuner.

A schedule is registered with its optimization step number, the workload kind it applies to, its
configuration dataclass (parameters with the classic write-ups' defaults) and its builder
``fn(workload, config) -> tvm.s_tir.Schedule``.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Callable

from .common import GpuLimits
from .errors import ScheduleParamError


@dataclass(frozen=True)
class Launch:
    """The launch a configuration implies for a workload, checked against GpuLimits before any
    build. ``threads_from``/``shared_from`` say which parameters set the figures, for error text."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    threads_from: str = "threads"
    shared_from: str = "tiles"
    dynamic_shared: bool = False  # shared memory allocated at launch ("shared.dyn"): the opt-in limit applies

    @property
    def threads(self) -> int:
        x, y, z = self.block
        return x * y * z


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    kind: str  # "gemm" | "gemv"
    step: int
    builder: Callable
    config_cls: type
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = field(default=())

    @property
    def summary(self) -> str:
        doc = inspect.getdoc(self.builder) or ""
        return " ".join(doc.split("\n\n")[0].split())

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.builder) or ""

    @property
    def tolerance(self) -> float:
        """The largest ‖out − ref‖/‖ref‖ against float64 that counts as right (``tolerance`` on the
        config: tf32 steps round their inputs; every other step is checked to 1e-5)."""
        return getattr(self.config_cls, "tolerance", 1e-5)

    @property
    def input_dtypes(self) -> tuple[str, ...]:
        return getattr(self.config_cls, "dtypes", ("float32", "float16"))

    def accepts_dtype(self, workload) -> bool:
        """Whether the step takes the workload's input type (``dtypes`` on its config; fp32 and
        fp16 by default). ``schedlab run`` with no schedule names skips steps that do not."""
        return workload.dtype in self.input_dtypes

    def config(self, **overrides):
        """The step's configuration: its defaults with ``overrides`` applied (names checked)."""
        names = {f.name for f in dataclasses.fields(self.config_cls)}
        for key in overrides:
            if key not in names:
                raise ScheduleParamError(
                    f"{self.name}: unknown parameter {key!r} (parameters: {', '.join(sorted(names)) or 'none'})")
        return self.config_cls(**overrides)

    def validate(self, workload, cfg=None, limits: GpuLimits = GpuLimits()):
        """Raise ScheduleParamError, naming the parameter, if ``cfg`` cannot run ``workload``."""
        cfg = cfg if cfg is not None else self.config()
        if workload.kind != self.kind:
            raise ScheduleParamError(f"schedule {self.name} is for {self.kind}, not {workload.kind} ({workload})")
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            default = f.default if f.default is not dataclasses.MISSING else None
            if default is not None and type(value) is not type(default):  # e.g. --param tile_m=big
                raise ScheduleParamError(f"{self.name}: {f.name} must be {type(default).__name__} "
                                         f"(like its default {default!r}), got {value!r}")
            if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
                raise ScheduleParamError(f"{self.name}: {f.name} must be positive, got {value}")
        check = getattr(cfg, "check", None)
        if check is not None:
            check(workload)
        launch = cfg.launch(workload)
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

    def build(self, workload, cfg=None, limits: GpuLimits = GpuLimits(), **overrides):
        """Validate, then return the scheduled ``tvm.s_tir.Schedule``."""
        cfg = cfg if cfg is not None else self.config(**overrides)
        self.validate(workload, cfg, limits)
        return self.builder(workload, cfg)


_REGISTRY: dict[str, ScheduleSpec] = {}
_ALIASES: dict[str, str] = {}


def register(name: str, kind: str, step: int, config: type, aliases=(), tags=()):
    """Decorator: add a builder to the registry."""

    def wrap(fn):
        if name in _REGISTRY or name in _ALIASES:
            raise RuntimeError(f"schedule {name} registered twice")
        register_spec(ScheduleSpec(name, kind, step, fn, config, tuple(aliases), tuple(tags)))
        return fn

    return wrap


def get(name: str) -> ScheduleSpec:
    key = _ALIASES.get(name, name)
    if key not in _REGISTRY:
        raise ScheduleParamError(
            f"unknown schedule {name!r} (known: {', '.join(s.name for s in all_schedules())})")
    return _REGISTRY[key]


def all_schedules(kind: str | None = None, tag: str | None = None) -> list[ScheduleSpec]:
    specs = sorted(_REGISTRY.values(), key=lambda s: (s.kind, s.step, s.name))
    return [s for s in specs if (kind is None or s.kind == kind) and (tag is None or tag in s.tags)]


def register_spec(spec: ScheduleSpec):
    """Add a ready-made spec (the tuner registers tuned schedules this way)."""
    _REGISTRY[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name
    return spec
