"""Build a schedule for CUDA and collect what each stage looks like: the scheduled TIR, the lowered
TIR (with launch_thread, like the classic ``tvm.lower``), the CUDA source, the PTX and the
compiler's resource report (registers, shared memory, spills).

Without an NVIDIA driver ``tvm.compile`` keeps the CUDA source and compiles nothing, so the PTX and
the report come from calling nvcc/ptxas here on that source; with a driver TVM calls our compile
hook, which does the same and hands the cubin to TVM.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import tvm
import tvm_ffi

# the target and the compiler are shared with the tuner's build processes (one definition each)
from tuning import cuda_compile
from tuning.cuda_compile import (DEFAULT_ARCH, GPU_ENV, KernelReport, cuda_available, device_arch,  # noqa: F401
                                 fold_half_constants, parse_ptxas, present_arch, settle_launch_bounds, setup_cuda_env)
from schedules import ScheduleParamError, get, parse_workload
from schedules.common import GpuSpec, current_gpu, pass_config_of, read_gpu_with, use_gpu, with_build_annotations
from schedules.gpus import base_arch, profile, profile_for_device


@dataclass
class DeviceCode:
    cuda: str
    ptx: str
    cubin: bytes
    ptxas_log: str
    kernels: list[KernelReport]


def cuda_target(arch: str | None = None) -> tvm.target.Target:
    """The CUDA target every kernel of the lab is built for (:func:`tuning.cuda_compile.cuda_target`),
    for ``arch``, by default the architecture of the GPU the choices are made for
    (:func:`schedules.common.current_gpu`: the device, or a named profile)."""
    return cuda_compile.cuda_target(arch or current_gpu().arch)


def compile_cuda_source(code: str, arch: str) -> DeviceCode:
    """CUDA source → PTX → cubin, as every kernel of the lab is compiled
    (:func:`tuning.cuda_compile.settle_launch_bounds`), with ptxas's report parsed; the source kept is
    the one compiled (float16 constants folded: :func:`tuning.cuda_compile.fold_half_constants`; a
    request for blocks per SM that was not needed, dropped)."""
    code, ptx_text, cubin, log = settle_launch_bounds(fold_half_constants(code), arch)
    return DeviceCode(code, ptx_text, cubin, log, parse_ptxas(log))


class _CompileHook:
    """Replaces TVM's ``tvm_callback_cuda_compile`` so that every CUDA compile also yields the PTX
    and the resource report (TVM's own hook discards ptxas's output)."""

    def __init__(self):
        self.arch = DEFAULT_ARCH
        self.last: DeviceCode | None = None

    def __call__(self, code):
        self.last = compile_cuda_source(code, self.arch)
        return bytearray(self.last.cubin)


_HOOK = _CompileHook()
tvm_ffi.register_global_func("tvm_callback_cuda_compile", _HOOK, override=True)


@dataclass
class Built:
    executable: object
    scheduled: str
    lowered: str
    device: DeviceCode
    launch: dict = field(default_factory=dict)
    host: str = ""  # the host function after MakePackedAPI: its kernel launches (engine.kernel.launches_of)

    @property
    def kernel(self) -> KernelReport:
        """The report of the main (largest) kernel."""
        return max(self.device.kernels, key=lambda k: (k.registers, k.shared_bytes))


@tvm.instrument.pass_instrument
class _CaptureLowered:
    def __init__(self):
        self.text = None
        self.host = None

    def run_before_pass(self, mod, info):
        if info.name == "tirx.SplitHostDevice" and self.text is None:
            self.text = mod.script()  # now: the module is mutated in place later

    def run_after_pass(self, mod, info):
        if info.name == "tirx.MakePackedAPI" and self.host is None and "main" in [g.name_hint for g in mod.get_global_vars()]:
            self.host = mod["main"].script()  # the host function alone: how it launches each kernel


def build(sch, target: tvm.target.Target | None = None, pass_config: dict | None = None) -> Built:
    """Compile a schedule (or a scheduled IRModule) for CUDA, keeping every stage's text and the
    compiler's report. ``pass_config``: extra PassContext options a schedule needs (those of its
    config: :func:`schedules.common.pass_config_of`)."""
    mod = with_build_annotations(getattr(sch, "mod", sch))  # held blocks per SM, a thread's piece tested once
    setup_cuda_env()
    target = target or cuda_target()
    _HOOK.arch = str(target.arch)
    _HOOK.last = None
    capture = _CaptureLowered()
    try:
        with tvm.transform.PassContext(opt_level=3, config=dict(pass_config or {}), instruments=[capture]), target:
            ex = tvm.compile(mod, target=target)
    except Exception as e:  # noqa: BLE001 - TVM's int32 literal check: a kernel too large for int32 indices
        literal = re.search(r"Literal value (-?\d+) exceeds range of int32", str(e))
        if literal is None:
            raise
        raise ScheduleParamError(f"the kernel's index space exceeds int32 (an extent or index of {literal.group(1)}, "
                                 f"over {2**31 - 1}); the lab's kernels index with int32") from None
    device = _HOOK.last
    if device is None:  # no driver: TVM kept the source; compile it ourselves
        source = ex.mod.imports[0].inspect_source()
        device = compile_cuda_source(source, _HOOK.arch)
    launch = launch_extents(capture.text or "")
    return Built(ex, mod.script(), capture.text or "", device, launch, capture.host or "")


def built_config(cfg, wl=None):
    """The configuration whose build options apply to ``wl``: a ``best_*`` step's is that of the
    step and configuration it chose for the workload (its own has none)."""
    choice = cfg.choose(wl) if wl is not None else None
    return choice.config if choice is not None else cfg


def build_config(sch, cfg, target: tvm.target.Target | None = None, wl=None) -> Built:
    """:func:`build` with the async-copy switch and pass options that ``cfg`` carries (for a
    ``best_*`` step: those of its choice for ``wl``)."""
    return build(sch, target, pass_config=pass_config_of(built_config(cfg, wl), wl))


def build_resolved(resolved, wl, target: tvm.target.Target | None = None) -> Built:
    """Build a step resolved for ``wl`` (:meth:`schedules.registry.ScheduleSpec.resolve`): the
    schedule and the build options of the step that builds it, the choice made once."""
    return build(resolved.schedule(wl), target, pass_config=resolved.pass_config)


def launch_extents(lowered: str) -> dict:
    """Thread and block extents of the main kernel, from the lowered TIR's launch_thread
    statements. A PrimFunc may launch several kernels (copies of the operands first, split-K's
    final sum after), each opening with a blockIdx again; the main kernel is the first, unless a
    later one has at least twice its code (a short copy kernel runs before the product)."""
    kernels, found, start = [], {}, None
    for m in re.finditer(r'launch_thread\("((?:blockIdx|threadIdx|vthread)\.[xyz])",\s*(\d+)\)', lowered):
        tag, extent = m.group(1), int(m.group(2))
        if tag in found and tag.startswith("blockIdx"):
            kernels.append((m.start() - start, found))
            found, start = {}, m.start()
        if start is None:
            start = m.start()
        found.setdefault(tag, extent)
    if found:
        kernels.append((len(lowered) - start, found))
    if not kernels:
        return {}
    main = kernels[0]
    for k in kernels[1:]:
        if k[0] >= 2 * main[0]:
            main = k
    return main[1]


def device_spec():
    """The GPU the lab plans and builds for (schedules.common.GpuSpec): the profile ``$SCHEDLAB_GPU``
    names (``schedlab --gpu``, :func:`select_gpu`) where it is set; else the device's own figures
    (SM count, registers and shared memory per SM and per block, L2 size; the rest from its
    architecture's profile, schedules.gpus); without a GPU, an sm_90 GPU (the defaults of GpuSpec)."""
    named = os.environ.get(GPU_ENV)
    if named:
        return profile(named)
    if not cuda_available():
        return GpuSpec()
    dev = tvm.cuda(0)
    arch = present_arch()
    fields = dict(profile_for_device(str(dev.device_name), arch).__dict__)
    fields.update(name=dev.device_name, arch=arch, sms=int(dev.multi_processor_count))
    try:
        fields["l2_bytes"] = int(dev.l2_cache_size_bytes)
    except Exception:  # noqa: BLE001 - older runtimes: keep the default
        pass
    try:
        import torch  # optional: the device's figures where torch is installed

        props = torch.cuda.get_device_properties(0)
        for key, attr in (("regs_per_sm", "regs_per_multiprocessor"),
                          ("smem_per_sm", "shared_memory_per_multiprocessor"),
                          ("smem_per_block", "shared_memory_per_block_optin"),
                          ("threads_per_sm", "max_threads_per_multi_processor")):
            if getattr(props, attr, None):
                fields[key] = int(getattr(props, attr))
    except Exception:  # noqa: BLE001 - no torch: the architecture's table
        pass
    return GpuSpec(**fields)


read_gpu_with(device_spec)  # where no GPU was set in this process, the choices are made for this one


def select_gpu(name: str | None = None, arch: str | None = None) -> GpuSpec:
    """Plan and build for the GPU ``name`` (a profile of schedules.gpus: ``A100``, ``RTX 4090``...)
    or, without a name, for ``arch``'s profile (``sm_86``: an RTX 3090), in this process and the
    worker processes it starts (``$SCHEDLAB_GPU``). Raises ScheduleParamError, in one line, for an
    unknown name, or an arch that is not the named GPU's."""
    spec = profile(name or arch)
    if name and arch and base_arch(arch) != spec.arch:
        raise ScheduleParamError(f"--arch {arch} is not the architecture of --gpu {name} ({spec.arch})")
    os.environ[GPU_ENV] = name or arch
    return use_gpu(spec)


def check_runs_here(spec: GpuSpec):
    """Raise ScheduleParamError, in one line, where this machine's GPU cannot run kernels built for
    ``spec`` (a cubin runs only on its own architecture's GPUs): a run that times them."""
    here = present_arch()
    if here and base_arch(here) != spec.arch:
        raise ScheduleParamError(f"kernels built for {spec.name} ({spec.arch}) cannot run on this machine's GPU "
                                 f"({tvm.cuda(0).device_name}, {here}): leave out --gpu/$SCHEDLAB_GPU to time "
                                 f"this GPU's, or build for {spec.arch} on a machine without one")


def parse_params(items) -> dict:
    """``--param NAME=VALUE`` overrides of a schedule's configuration: whole numbers, true/false, or
    words (``intrinsics=mma``). Raises ValueError on a malformed item."""
    out = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise ValueError(f"--param {item!r} is malformed: expected NAME=VALUE")
        if value.lstrip("-").isdigit():
            out[key] = int(value)
        elif value.lower() in ("true", "false"):
            out[key] = value.lower() == "true"
        else:
            out[key] = value
    return out


def resolve_named(schedule: str, workload, params: dict | None = None, arch: str | None = None):
    """(spec, workload, config, resolved) of a registered schedule by name on ``workload`` (a
    workload string or object), its configuration overridden by ``params``, resolved (a ``best_*``
    step's choice made once) and checked, for the current GPU, or for ``arch``'s GPU (its profile)
    where ``arch`` is not the current GPU's architecture."""
    spec = get(schedule)
    wl = parse_workload(workload) if isinstance(workload, str) else workload
    cfg = spec.config(**(params or {}))
    current = current_gpu()
    if arch and base_arch(arch) != current.arch:
        use_gpu(profile(arch))
    try:
        resolved = spec.resolve(wl, cfg)
        spec.validate(wl, cfg, resolved=resolved)
    finally:
        use_gpu(current)
    return spec, wl, cfg, resolved


def build_named(schedule: str, workload, params: dict | None = None, arch: str | None = None):
    """(spec, workload, config, Built) of a registered schedule by name (:func:`resolve_named`),
    built for ``arch`` (default: the current GPU's)."""
    spec, wl, cfg, resolved = resolve_named(schedule, workload, params, arch)
    return spec, wl, cfg, build_resolved(resolved, wl, cuda_target(arch))
