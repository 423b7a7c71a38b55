"""How every CUDA kernel of the lab is compiled: CUDA source → PTX (nvcc, through TVM's own helper,
with TVM's flags) → cubin (``ptxas -v -O3``). The harness (``reports.engine.build``) and the tuner's build
processes both compile through :func:`compile_to_cubin`, so a configuration the tuner times is the
same binary ``schedlab run`` times. (TVM's own ``tvm_callback_cuda_compile`` passes ptxas
``--register-usage-level=10``, which schedules the same PTX differently: best_gemm's configuration
timed 7-9% slower built that way, others a little faster.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

from schedules.common import register_blocks

PTXAS_FLAGS = ("-v", "-O3")
DEFAULT_ARCH = "sm_90"  # where there is no GPU to ask
HELD = re.compile(r"__launch_bounds__\((\d+), (\d+)\) (\w+)\(")  # a kernel asking for blocks per SM


def cuda_home() -> str:
    home = os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME")
    if home and os.path.isdir(home):
        return home
    for candidate in ("/usr/local/cuda",):
        if os.path.isdir(candidate):
            return candidate
    found = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(found))) if found else ""


def setup_cuda_env():
    """TVM's nvcc mode (no cuda-bindings needed) and a real toolkit root (the ``nvcc`` on PATH may
    be a wrapper script, from which TVM would guess the wrong root)."""
    os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    home = cuda_home()
    if home:
        os.environ.setdefault("CUDA_PATH", home)
        bin_dir = os.path.join(home, "bin")
        if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = os.environ.get("PATH", "") + os.pathsep + bin_dir


def cuda_available() -> bool:
    import tvm

    try:
        return bool(tvm.runtime.enabled("cuda") and tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001 - no driver, no runtime: no GPU
        return False


GPU_ENV = "SCHEDLAB_GPU"  # a GPU profile's name or an architecture: plan and build for it (schedules.gpus)


def device_arch() -> str:
    """The architecture the lab builds for: that of the GPU named by ``$SCHEDLAB_GPU`` (a profile of
    :mod:`schedules.gpus`, or an architecture) where it is set, else sm_XY of GPU 0, else the
    default."""
    named = os.environ.get(GPU_ENV)
    if named:
        from schedules.gpus import profile

        return profile(named).arch
    return present_arch() or DEFAULT_ARCH


def present_arch() -> str | None:
    """sm_XY of GPU 0 of this machine, or None where there is none."""
    import tvm

    if cuda_available():
        return "sm_" + tvm.cuda(0).compute_version.replace(".", "")
    return None


def cuda_target(arch: str | None = None):
    """The CUDA target every kernel of the lab is built for (the harness's and the tuner's)."""
    import tvm

    return tvm.target.Target({
        "kind": "cuda", "arch": arch or device_arch(), "max_shared_memory_per_block": 49152,
        "max_threads_per_block": 1024, "thread_warp_size": 32, "registers_per_block": 65536,
        "host": {"kind": "llvm"}})


ARCH_SPECIFIC = ("wgmma.", "setmaxnreg.")  # Hopper instructions that only sm_90a accepts


def arch_for(code: str, arch: str) -> str:
    """``arch``, or its architecture-specific form (``sm_90`` → ``sm_90a``) where the source uses
    instructions that only the ``a`` target has (wgmma): code built for it runs on that chip only."""
    if arch == "sm_90" and any(op in code for op in ARCH_SPECIFIC):
        return "sm_90a"
    return arch


_HALF_CONSTANT = re.compile(r"__float2half_rn\((-?0x[0-9a-fA-F.]+p[+-]?\d+f)(?:/\*[^*]*\*/)?\)")


def fold_half_constants(code: str) -> str:
    """TVM 0.27 writes every float16 constant as ``__float2half_rn(<float>)``, which cuda_fp16.hpp
    implements as inline ``cvt`` assembly that nvcc cannot fold: a guarded load of a padded fp16
    operand (``row < M ? A[...] : half(0)``) then stays a branch per element instead of a predicated
    load (650 branches in short_k_gemm's kernel at 229×4755×36, and loads that are not issued
    together). Each such constant becomes its bits, ``__ushort_as_half((unsigned short)0x....U)``,
    the same value (round to nearest even, as ``__float2half_rn``), which nvcc folds."""
    def bits(match):
        with np.errstate(over="ignore"):  # past 65504: inf, as __float2half_rn
            half = np.float16(np.float32(float.fromhex(match.group(1)[:-1])))
        return f"__ushort_as_half((unsigned short){int(half.view(np.uint16)):#06x}U)"

    return _HALF_CONSTANT.sub(bits, code)


def compile_to_cubin(code: str, arch: str) -> tuple[str, bytes, str]:
    """(PTX text, cubin, ptxas's report) of a CUDA source for ``arch`` (e.g. ``sm_90``; ``sm_90a``
    where the source needs it, :func:`arch_for`), compiled as given: its callers (:func:`lab_compile`,
    ``reports.engine.build.compile_cuda_source``) fold its float16 constants first
    (:func:`fold_half_constants`)."""
    import tvm
    from tvm.support import nvcc

    setup_cuda_env()
    arch = arch_for(code, arch)
    with tvm.target.Target({"kind": "cuda", "arch": arch}):
        ptx = nvcc.compile_cuda(code, target_format="ptx", arch=arch, compiler="nvcc")
    ptx_text = ptx.decode() if isinstance(ptx, (bytes, bytearray)) else str(ptx)
    return (ptx_text, *assemble(ptx_text, arch))


def assemble(ptx_text: str, arch: str) -> tuple[bytes, str]:
    """(cubin, ptxas's report) of PTX for ``arch``: ``ptxas -v -O3``, as every kernel of the lab.
    PTX made for an older architecture assembles for a newer one (what the driver's JIT does)."""
    ptxas = os.path.join(cuda_home(), "bin", "ptxas")
    ptxas = ptxas if os.path.exists(ptxas) else "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx_text)
        proc = subprocess.run([ptxas, *PTXAS_FLAGS, f"--gpu-name={arch}", "-o", out, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"ptxas failed: {proc.stderr.strip()[-2000:]}")
        with open(out, "rb") as f:
            cubin = f.read()
    return cubin, proc.stdout + proc.stderr


@dataclass
class KernelReport:
    """ptxas's report for one kernel."""

    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0

    @property
    def spills(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


def parse_ptxas(text: str) -> list[KernelReport]:
    kernels: list[KernelReport] = []
    cur = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line) or \
            re.search(r"Function properties for (\S+)", line)
        if m:
            if cur is None or cur.name != m.group(1):
                cur = next((k for k in kernels if k.name == m.group(1)), None)
                if cur is None:
                    cur = KernelReport(m.group(1))
                    kernels.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.stack_bytes, cur.spill_store_bytes, cur.spill_load_bytes = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur.registers = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            s = re.search(r"(\d+) bytes smem", line)
            cur.barriers = int(b.group(1)) if b else 0
            cur.shared_bytes = int(s.group(1)) if s else 0
    return kernels


def settle_launch_bounds(code: str, arch: str) -> tuple[str, str, bytes, str]:
    """(source compiled, PTX, cubin, ptxas's report) of a CUDA source, where a kernel's request for
    blocks an SM (``__launch_bounds__(threads, blocks)``: FastTileConfig.min_blocks) is kept only where
    it is needed and costs nothing: the source is compiled first without it, and where ptxas's own
    count leaves that kernel fewer blocks of its threads an SM than it asks, again with it; that build
    is kept unless the kernel then spills. Held to a count its registers fit anyway, ptxas schedules
    the same kernel differently: on 48 SIMT tiles whose own count fitted, held ran 0.981x as fast; on
    the 11 whose own count did not and which held without spilling, 1.098x faster (up to 1.26x; H200,
    reports/results/NVIDIA_H200/held_blocks). Of the four that spilled held (248-576 bytes), three
    ran 1.14-1.16x faster and one 0.79x: spills are not taken."""
    requests = HELD.findall(code)
    if not requests:
        return (code, *compile_to_cubin(code, arch))
    free = HELD.sub(lambda m: f"__launch_bounds__({m.group(1)}) {m.group(3)}(", code)
    ptx, cubin, log = compile_to_cubin(free, arch)
    own = {k.name: k for k in parse_ptxas(log)}
    short = [name for threads, blocks, name in requests
             if name in own and register_blocks(int(threads), own[name].registers) < int(blocks)]
    if not short:
        return free, ptx, cubin, log
    held = compile_to_cubin(code, arch)
    if any(k.spills for k in parse_ptxas(held[2]) if k.name in short):
        return free, ptx, cubin, log
    return (code, *held)


def lab_compile(code):
    """A ``tvm_callback_cuda_compile``: the cubin of :func:`compile_to_cubin` for the current
    target's arch (TVM calls it inside ``with target:``), float16 constants folded first."""
    import tvm

    target = tvm.target.Target.current(allow_none=True)
    arch = str(target.arch) if target is not None and target.kind.name == "cuda" else device_arch()
    return bytearray(settle_launch_bounds(fold_half_constants(code), arch)[2])


def use_lab_compiler():
    """Make TVM compile CUDA in this process through :func:`lab_compile` (the tuner's build
    processes call this; ``reports.engine.build`` registers its own hook, which compiles the same way and
    keeps the report)."""
    import tvm_ffi

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", lab_compile, override=True)
