"""The contract of a step's configuration: one base class that declares everything the lab may ask
of a configuration, each with its default and what it means.

A step is a builder ``fn(workload, config) -> tvm.s_tir.Schedule`` and a frozen dataclass derived
from :class:`StepConfig`. The dataclass fields are the step's parameters (``--param NAME=VALUE``,
the tuner's knobs), with the classic write-ups' values as defaults. The class attributes and
methods below are its capabilities: the registry, the measurement engine, the CLI and the tuner
read them and nothing else, so a step says what it takes by overriding them::

    @dataclass(frozen=True)
    class MyConfig(StepConfig):
        tile: int = 32                       # a parameter
        dtypes = ("float32",)                # a capability: fp32 inputs only

        def launch(self, wl) -> Launch:      # required: the grid, block and shared memory
            ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .gpus import arch_number


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
class Choice:
    """What a shape-driven step (``best_*``) chose for one workload: the registered step that
    builds it, that step's configuration, a one-line description for tables, and where the
    choice's model was calibrated on another GPU, which."""

    step: str
    config: "StepConfig"
    text: str
    #: The GPU the model that chose was calibrated on, where it is not the GPU the choice is for
    #: (its constants then describe another GPU); None where it is.
    calibrated_on: str | None = None


@dataclass(frozen=True)
class StepConfig:
    """Base of every step's configuration. Override the class attributes and methods a step needs;
    the defaults describe a plain fp32/fp16 GEMM or GEMV step on row-major operands."""

    #: Input types the step takes. ``schedlab run`` with no schedule names leaves out steps that do
    #: not take a workload's type, and asking for one is a one-line error.
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float16")
    #: GEMM operand layouts the step takes (``nn``, ``nt``, ``tn``, ``tt``): a step takes a
    #: transposed operand only once it has been taught to.
    layouts: ClassVar[tuple[str, ...]] = ("nn",)
    #: Why the step takes only ``layouts`` where that is a property of the hardware, not a lesson
    #: not taught yet (the FP8 steps: FP8 wgmma reads both operands K-major): appended to the refusal.
    layout_note: ClassVar[str] = ""
    #: The scalings of 8-bit float inputs the step applies (``tensor``, ``row``, ``block``: see
    #: :class:`schedules.workloads.Gemm`); only the FP8 steps take such inputs.
    scalings: ClassVar[tuple[str, ...]] = ()
    #: Whether the step takes a batch of products (``bmm:...``).
    batched: ClassVar[bool] = False
    #: The step's own ‖out − ref‖/‖ref‖ bound where it is larger than its input type's (the tf32
    #: steps round their inputs to 10 mantissa bits); 0 keeps the input type's.
    tolerance: ClassVar[float] = 0.0
    #: Whether the step takes a GEMM with an epilogue or an output type other than float32 (bias,
    #: activation, residual, scaling, a 16-bit output: ``Gemm.has_epilogue``). A step that does not
    #: refuses such a workload in one line; one that does computes the epilogue in the product's
    #: registers before the single write of the output (:func:`schedules.common.fuse_epilogue`).
    epilogues: ClassVar[bool] = False
    #: Integer parameters for which 0 means "chosen from the workload" rather than an error.
    zero_means_auto: ClassVar[tuple[str, ...]] = ()
    #: The step's search space: parameter name -> the values ``schedlab tune --space STEP`` tries (every
    #: combination that the workload takes, the defaults first); empty: the step is not tuned by name.
    search_space: ClassVar[dict[str, tuple]] = {}
    #: The architectures the step's kernel builds for, where it needs particular ones: ``()`` any
    #: from ``min_arch`` on; else exactly these, as nvcc names them (the Hopper steps:
    #: ``("sm_90a",)``: wgmma, setmaxnreg and TMA multicast exist only in sm_90a, not on Ada or
    #: Blackwell). ``schedlab run`` leaves out a step that does not build for the GPU, and asking
    #: for one is a one-line error naming what it needs (:meth:`arch_refusal`).
    archs: ClassVar[tuple[str, ...]] = ()
    #: The oldest architecture the step builds for (``""``: any nvcc targets). A configuration with
    #: ``async_copy`` needs sm_80 (cp.async) whatever this says.
    min_arch: ClassVar[str] = ""
    #: What the step needs the architecture for, for the refusal's text (e.g. "wgmma, TMA").
    arch_features: ClassVar[str] = ""

    @property
    def async_copy(self) -> bool:
        """Whether the global → shared copies are injected as cp.async (``tirx.use_async_copy``);
        False here. A step whose pipeline is a parameter declares a dataclass field of this name
        (a property, not a class variable, so that the field keeps its place among the fields)."""
        return False

    @property
    def pass_config(self) -> dict:
        """Extra PassContext options the build needs (beside ``async_copy``'s); none by default."""
        return {}

    def pass_config_for(self, wl) -> dict:
        """Options the build of ``wl`` needs that the configuration alone does not say (a tuned
        trace's, read with the workload); none by default."""
        return {}

    def launch(self, wl) -> Launch:
        """The grid, block and shared memory this configuration launches for ``wl`` (required: the
        registry checks it against the GPU's limits before anything is built)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it launches (define launch)")

    def arch_refusal(self, arch: str) -> str | None:
        """Why this configuration's kernel does not build for ``arch`` (``sm_86``...), naming the
        architecture it needs (one line), or None where it does: ``archs``, ``min_arch``, and sm_80
        for cp.async copies (``async_copy``)."""
        have = arch_number(arch)
        why = f" ({self.arch_features})" if self.arch_features else ""
        if self.archs and have not in {arch_number(a) for a in self.archs}:
            return f"needs {' or '.join(self.archs)}{why}, not {arch}"
        floor = max([arch_number(self.min_arch)] if self.min_arch else [0])
        if self.async_copy:
            floor = max(floor, 80)
        if have < floor:
            return f"needs sm_{floor} or newer{why or (' (cp.async)' if self.async_copy else '')}, not {arch}"
        return None

    def check(self, wl) -> None:
        """Raise ScheduleParamError, naming the parameter, if the configuration cannot run ``wl``
        for a reason of its own (beyond the parameters' types, signs and the launch limits)."""

    @classmethod
    def scope_refusal(cls, wl) -> str | None:
        """Why the step is not made for ``wl``'s shape at all, whatever its parameters (a kernel for
        a few rows against a large weight, asked for a 4096-row product), in one line; None where it
        is. ``schedlab run`` without names leaves such a step out, as it leaves out another input
        type or layout; named, it is refused with this line."""
        return None

    def also_takes(self, wl) -> bool:
        """Whether the step also takes a workload of another kind (a GEMV step takes a GEMM with
        one output column); False by default."""
        return False

    def choose(self, wl) -> Choice | None:
        """For a shape-driven step (``best_*``): the step and configuration it builds for ``wl``.
        None for a step that builds itself (every step but the ``best_*`` ones)."""
        return None

    def explain(self, wl) -> str | None:
        """For a shape-driven step: its choice for ``wl`` with the figures it was made on (``schedlab
        show --explain``). None for a step that makes no choice."""
        return None

    def explanation(self, wl) -> dict | None:
        """:meth:`explain` as plain data (``schedlab show --explain --json``). None for a step that
        makes no choice."""
        return None
