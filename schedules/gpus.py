"""The GPUs the lab plans and builds for without having them: one profile per GPU (its
architecture, SM count, registers and shared memory per SM and per block, resident threads and
blocks per SM, L2, memory bandwidth), and how a name or an architecture finds one.

``schedlab run --gpu A100`` (or ``SCHEDLAB_GPU=A100``, or ``--arch sm_80``) makes every choice for
that GPU and builds every kernel for its architecture on any machine, a CPU-only one included
(``reports.engine.build.device_spec``); on a GPU the device's own figures are read instead.

Figures: per-SM and per-block limits are the CUDA programming guide's for the compute capability
(shared memory per block is the opt-in maximum: the SM's less the 1 KiB the runtime keeps per
block); SM counts, L2 sizes and bandwidths are the products' published ones. ``memory_gbps`` is
what the dispatcher's model takes for a copy's sustained bandwidth: 0.83 of the published peak,
the share the calibration GPU (an H200: 4000 of 4800 GB/s) reached; the H200 keeps the 4000 GB/s
its calibration was fitted at (and the lab assumes for an sm_90 GPU it cannot name). The H100
(3350 GB/s published) gets its own 2780: it copies at 3000 GB/s where the H200 copies at 4230
(bench-gemm --llm's copy, the same timer), and planned at 4000 its memory-bound estimates were
30-45% short of what it measured.
"""

from __future__ import annotations

import re

from .common import GpuSpec
from .errors import ScheduleParamError

KIB, MIB = 1024, 1024 * 1024
COPY_SHARE = 0.83  # sustained copy bandwidth / published peak (the calibration H200: 4000 / 4800 GB/s)


def _gbps(peak: float) -> float:
    return round(COPY_SHARE * peak, -1)


# per compute capability: shared memory per SM and per block, resident threads and blocks per SM
_CC = {
    "sm_80": dict(smem_per_sm=164 * KIB, smem_per_block=163 * KIB, threads_per_sm=2048, blocks_per_sm=32),
    "sm_86": dict(smem_per_sm=100 * KIB, smem_per_block=99 * KIB, threads_per_sm=1536, blocks_per_sm=16),
    "sm_89": dict(smem_per_sm=100 * KIB, smem_per_block=99 * KIB, threads_per_sm=1536, blocks_per_sm=24),
    "sm_90": dict(smem_per_sm=228 * KIB, smem_per_block=227 * KIB, threads_per_sm=2048, blocks_per_sm=32),
    "sm_100": dict(smem_per_sm=228 * KIB, smem_per_block=227 * KIB, threads_per_sm=2048, blocks_per_sm=32),
    "sm_120": dict(smem_per_sm=100 * KIB, smem_per_block=99 * KIB, threads_per_sm=1536, blocks_per_sm=32),
}


def _profile(name: str, arch: str, sms: int, l2_mib: int, memory_gbps: float) -> GpuSpec:
    return GpuSpec(name=name, arch=arch, sms=sms, regs_per_sm=65536, l2_bytes=l2_mib * MIB,
                   memory_gbps=memory_gbps, **_CC[arch])


#: The device profiles, by the short name ``--gpu`` takes (matched without case, spaces or dashes).
PROFILES: dict[str, GpuSpec] = {
    "A100": _profile("NVIDIA A100-SXM4-80GB", "sm_80", 108, 40, _gbps(2039)),
    "RTX 3090": _profile("NVIDIA GeForce RTX 3090", "sm_86", 82, 6, _gbps(936)),
    "RTX 4090": _profile("NVIDIA GeForce RTX 4090", "sm_89", 128, 72, _gbps(1008)),
    "H100": _profile("NVIDIA H100 80GB HBM3", "sm_90", 132, 50, _gbps(3350)),
    "H200": _profile("NVIDIA H200", "sm_90", 132, 50, 4000.0),
    "B200": _profile("NVIDIA B200", "sm_100", 148, 126, _gbps(8000)),
    "RTX 5090": _profile("NVIDIA GeForce RTX 5090", "sm_120", 170, 96, _gbps(1792)),
}
#: The profile an architecture alone names (``--arch sm_86``): its best-known GPU.
BY_ARCH = {"sm_80": "A100", "sm_86": "RTX 3090", "sm_89": "RTX 4090", "sm_90": "H100", "sm_100": "B200",
           "sm_120": "RTX 5090"}


def arch_number(arch: str) -> int:
    """The compute capability of ``sm_XY`` (or ``sm_XYa``, ``sm_XYf``) as a number: 80, 86, 90, 100, 120."""
    m = re.fullmatch(r"sm_(\d+)[af]?", str(arch).strip())
    if not m:
        raise ScheduleParamError(f"{arch!r} is not a CUDA architecture (sm_80, sm_86, sm_89, sm_90, sm_100, sm_120)")
    return int(m.group(1))


def base_arch(arch: str) -> str:
    """``sm_90a`` → ``sm_90``: the architecture a device reports, without the feature-set suffix."""
    return f"sm_{arch_number(arch)}"


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


def profile(name: str) -> GpuSpec:
    """The profile a name gives: a short name (``A100``, ``rtx4090``, ``RTX 3090``), a device name
    (``NVIDIA H200``), or an architecture (``sm_86``: :data:`BY_ARCH`). Raises ScheduleParamError,
    listing the names, for anything else."""
    text = str(name).strip()
    if re.fullmatch(r"sm_\d+[af]?", text):
        arch = base_arch(text)
        if arch not in BY_ARCH:
            raise ScheduleParamError(f"no GPU profile for {text} (profiles: {', '.join(sorted(BY_ARCH))})")
        return PROFILES[BY_ARCH[arch]]
    key = _key(text.removeprefix("NVIDIA").removeprefix("nvidia"))
    for short, spec in PROFILES.items():
        if key in (_key(short), _key(spec.name.removeprefix("NVIDIA")), _key(short.removeprefix("RTX "))):
            return spec
    raise ScheduleParamError(f"unknown GPU {name!r} (profiles: {', '.join(PROFILES)}; or an architecture: "
                             f"{', '.join(BY_ARCH)})")


def profile_for_device(name: str, arch: str) -> GpuSpec:
    """The profile of a device by its name where the table has it, else its architecture's."""
    try:
        spec = profile(name)
        if spec.arch == base_arch(arch):
            return spec
    except ScheduleParamError:
        pass
    return profile(base_arch(arch)) if base_arch(arch) in BY_ARCH else GpuSpec(arch=base_arch(arch))
