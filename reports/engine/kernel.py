"""Take a kernel out of the lab: build any step (a ``best_*`` choice, a tuned configuration) for a
workload and call it on your own PyTorch tensors, or export it with what it takes to launch it.

    from reports import compile_kernel
    k = compile_kernel("best_fp16_gemm", "gemm:4096x4096x4096:float16")
    c = k(a, b)                 # a, b: torch CUDA tensors of the workload's stored shapes and type
    k.launches                  # each entry point in launch order: grid, block, dynamic shared memory
    k.step, k.step_config       # what best_fp16_gemm chose; k.registers, k.spills: ptxas's report
    k.export("out/kernel")      # kernel.so (where the CUDA driver is), kernel.cu, kernel.ptx, launch.json

The kernel runs on PyTorch's current stream, reads and writes the tensors in place through DLPack
(no copy), and checks every argument before the launch: a wrong shape, type, device, layout or
stride is a one-line :class:`KernelArgumentError`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass

import tvm

from . import build as B
from .files import atomic_write
from .provenance import provenance

TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
                "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


class KernelArgumentError(ValueError):
    """A tensor handed to a kernel does not fit its workload (one line: which argument, and why)."""


@dataclass(frozen=True)
class KernelLaunch:
    """One entry point of the compiled module, as the host code launches it."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_shared_bytes: int = 0


_CALL = re.compile(r'T\.call_ffi_kernel\("([^"]+)",(.*?)launch_params=\[([^\]]*)\]')


def launches_of(host_ir: str) -> list[KernelLaunch]:
    """The kernel launches of a compiled module's host function, in order, from the host IR after
    TVM's MakePackedAPI: ``T.call_ffi_kernel(name, args..., extents..., launch_params=[tags])``,
    the last extents being the values of the launch parameters (thread extents, then the dynamic
    shared memory in bytes where the kernel has some)."""
    out = []
    for name, args, params in _CALL.findall(host_ir):
        tags = [t.strip().strip('"') for t in params.split(",") if t.strip()]
        values = [a.strip() for a in _split_args(args) if a.strip()][-len(tags):] if tags else []
        extents = {}
        for tag, value in zip(tags, values):
            m = re.fullmatch(r"(?:T\.int(?:32|64)\()?(\d+)\)?", value)
            extents[tag] = int(m.group(1)) if m else value
        dims = lambda prefix: tuple(int(extents.get(f"{prefix}.{a}", 1)) for a in "xyz")  # noqa: E731
        out.append(KernelLaunch(name, dims("blockIdx"), dims("threadIdx"),
                                int(extents.get("tirx.use_dyn_shared_memory", 0))))
    return out


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated items of an argument list (commas inside brackets kept)."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return items


class Kernel:
    """A step compiled for one workload: call it on PyTorch tensors, read its launch facts, export it.

    Attributes: ``schedule`` (the step asked for), ``step`` and ``step_config`` (the step that
    builds it: a ``best_*`` step's choice), ``chosen`` (that choice in one line, or None),
    ``workload``, ``launches`` (every entry point in launch order), ``registers``, ``spills`` and
    ``shared_bytes`` (ptxas's report of the main kernel), ``arch``, ``cuda`` and ``ptx``."""

    def __init__(self, resolved, workload, built, arch: str):
        self.schedule = resolved.spec.name
        self.config = resolved.config
        self.step = resolved.step.name
        self.step_config = resolved.step_config
        self.chosen = resolved.chosen
        self.workload = workload
        self.arch = arch
        self.tolerance = resolved.spec.tolerance_for(workload)
        self._built = built
        self.launches = launches_of(built.host)
        main = built.kernel
        self.registers, self.spills, self.shared_bytes = main.registers, main.spills, main.shared_bytes
        self.cuda, self.ptx = built.device.cuda, built.device.ptx
        self._func = None

    # -- calling ----------------------------------------------------------------------------------
    @property
    def arg_shapes(self) -> list[tuple[tuple[int, ...], str]]:
        """(stored shape, dtype) of each argument in order: the inputs, then the output."""
        return self.workload.arg_shapes()

    @property
    def arg_names(self) -> list[str]:
        """Each argument's name in order: A, B, C (or A, x, y); with an epilogue or another output
        type A, B, [bias], [R], D; with 8-bit float inputs A, B, scale_a, scale_b, [bias], [R], D."""
        return self.workload.arg_names()

    def check_args(self, *tensors):
        """Raise KernelArgumentError unless ``tensors`` (inputs, then the output) fit the workload:
        torch tensors on one CUDA device, of the stored shapes and types, row-major contiguous."""
        import torch

        names = self.arg_names
        wanted = self.arg_shapes
        if len(tensors) != len(wanted):
            raise KernelArgumentError(f"{self.schedule} on {self.workload} takes {len(wanted) - 1} inputs "
                                      f"({', '.join(names[:-1])}) and an optional output, got {len(tensors) - 1}")
        device = None
        for name, t, (shape, dtype) in zip(names, tensors, wanted):
            if not isinstance(t, torch.Tensor):
                raise KernelArgumentError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if str(t.dtype).replace("torch.", "") != TORCH_DTYPES[dtype]:
                raise KernelArgumentError(f"{name} is {str(t.dtype).replace('torch.', '')}, {self.workload} takes {dtype}")
            if tuple(t.shape) != tuple(shape):
                raise KernelArgumentError(f"{name} has shape {tuple(t.shape)}, {self.workload} stores it as "
                                          f"{tuple(shape)} (layout {getattr(self.workload, 'layout', 'nn')})")
            if not t.is_contiguous():
                raise KernelArgumentError(f"{name} has strides {tuple(t.stride())}: the kernel reads row-major "
                                          f"contiguous tensors (call .contiguous(), or pick the layout that "
                                          f"matches how it is stored)")
        for name, t in zip(names, tensors):
            if t.device.type != "cuda":
                raise KernelArgumentError(f"{name} is on {t.device}, not on a CUDA device")
            if device is not None and t.device != device:
                raise KernelArgumentError(f"{name} is on {t.device}, the other tensors on {device}")
            device = t.device

    def __call__(self, *inputs, out=None):
        """Run the kernel on ``inputs`` (torch CUDA tensors: A, B, the scales of 8-bit inputs, then the
        bias and R where the workload's epilogue has them), writing ``out`` (allocated when not given: the workload's
        output shape and type) on PyTorch's current stream; returns ``out``."""
        import torch
        import tvm_ffi

        shape, dtype = self.arg_shapes[-1]
        if out is None and inputs and isinstance(inputs[0], torch.Tensor):
            out = torch.empty(shape, dtype=getattr(torch, TORCH_DTYPES[dtype]), device=inputs[0].device)
        self.check_args(*inputs, out)
        if self._func is None:
            self._func = self._built.executable["main"]
        views = [tvm.runtime.from_dlpack(t) for t in (*inputs, out)]
        with torch.cuda.device(out.device), tvm_ffi.use_torch_stream():
            self._func(*views)
        return out

    # -- facts and export -------------------------------------------------------------------------
    def facts(self) -> dict:
        """What it takes to launch the kernel elsewhere (``launch.json``)."""
        names = self.arg_names
        prov = provenance()
        return {
            "schedule": self.schedule, "step": self.step, "chosen": self.chosen,
            "config": _plain(asdict(self.step_config)), "workload": str(self.workload),
            "layout": getattr(self.workload, "layout", None), "out_dtype": self.workload.out_dtype,
            "epilogue": None if self.workload.epilogue is None else str(self.workload.epilogue),
            "arguments": [{"name": n, "shape": list(s), "dtype": d, "role": "output" if i == len(names) - 1 else "input",
                           "layout": "row-major, contiguous"}
                          for i, (n, (s, d)) in enumerate(zip(names, self.arg_shapes))],
            "entry_points": [{"name": k.name, "grid": list(k.grid), "block": list(k.block),
                              "dynamic_shared_bytes": k.dynamic_shared_bytes} for k in self.launches],
            "host_function": "main", "arch": self.arch, "registers": self.registers, "spills": self.spills,
            "static_shared_bytes": self.shared_bytes, "tolerance": self.tolerance,
            "tvm": prov.get("tvm"), "commit": prov.get("commit"), "date": prov.get("date"),
        }

    def export(self, out_dir: str) -> dict:
        """Write ``kernel.cu``, ``kernel.ptx``, ``kernel.cubin``, ``launch.json`` and, where the CUDA
        runtime is present to embed the cubin, ``kernel.so`` (load it with
        ``tvm.runtime.load_module`` and call its ``main`` on the arguments in order). Returns
        the paths written."""
        os.makedirs(out_dir, exist_ok=True)
        paths = {}
        for key, name, text in (("cuda", "kernel.cu", self.cuda), ("ptx", "kernel.ptx", self.ptx)):
            paths[key] = os.path.join(out_dir, name)
            atomic_write(paths[key], text)
        paths["cubin"] = os.path.join(out_dir, "kernel.cubin")
        with open(paths["cubin"], "wb") as f:
            f.write(self._built.device.cubin)
        facts = self.facts()
        if B.cuda_available():
            paths["so"] = os.path.join(out_dir, "kernel.so")
            self._built.executable.export_library(paths["so"])
            facts["module"] = "kernel.so"
        else:
            facts["module"] = None
            facts["module_note"] = ("no kernel.so: without an NVIDIA driver TVM cannot create the CUDA module to "
                                    "embed; kernel.cubin with the entry points above launches through the CUDA "
                                    "driver API, or export again on a machine with the driver")
        paths["launch"] = os.path.join(out_dir, "launch.json")
        atomic_write(paths["launch"], json.dumps(facts, indent=1) + "\n")
        return paths

    def __repr__(self):
        chosen = f" → {self.chosen}" if self.chosen else ""
        return f"<Kernel {self.schedule}{chosen} on {self.workload}, {len(self.launches)} launch(es), {self.registers} registers>"


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def compile_kernel(schedule: str, workload, params: dict | None = None, arch: str | None = None) -> Kernel:
    """Build ``schedule`` (a step's name, ``best_*``, or ``tuned_gemm``) for ``workload`` (a string
    like ``gemm:4096x4096x4096:float16:nt`` or a workload object) with its configuration
    overridden by ``params``, for ``arch`` (default: the GPU's, else sm_90), and return the Kernel."""
    if not isinstance(schedule, str):
        raise TypeError(f"schedule must be a step's name (a str), got {type(schedule).__name__}")
    _, wl, _, resolved = B.resolve_named(schedule, workload, params, arch)  # the choices for arch's GPU
    target = B.cuda_target(arch)
    return Kernel(resolved, wl, B.build_resolved(resolved, wl, target), str(target.arch))


def linear_module(weight, schedule: str = "best_fp16_gemm", bias=None):
    """A ``torch.nn.Module`` computing ``x @ weight.T (+ bias)`` with the lab's kernel, the weight
    stored N×K as ``torch.nn.Linear`` keeps it (the ``nt`` layout); one kernel is compiled per
    row count M seen (x of shape (..., K), flattened to M rows)."""
    import torch

    class LabLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(weight.detach(), requires_grad=False)
            self.bias = None if bias is None else torch.nn.Parameter(bias.detach(), requires_grad=False)
            self.schedule = schedule
            self.kernels: dict[int, Kernel] = {}

        def kernel_for(self, rows: int) -> Kernel:
            if rows not in self.kernels:
                n, k = self.weight.shape
                dtype = str(self.weight.dtype).replace("torch.", "")
                self.kernels[rows] = compile_kernel(self.schedule, f"gemm:{rows}x{n}x{k}:{dtype}:nt")
            return self.kernels[rows]

        def forward(self, x):
            lead = x.shape[:-1]
            x2 = x.reshape(-1, x.shape[-1]).contiguous()
            out = self.kernel_for(x2.shape[0])(x2, self.weight)
            if self.bias is not None:
                out += self.bias
            return out.reshape(*lead, out.shape[-1])

    return LabLinear()
