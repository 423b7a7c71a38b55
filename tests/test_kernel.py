"""A kernel taken out of the lab: compiled for one workload, called on PyTorch tensors, exported
with what it takes to launch it (reports.compile_kernel, schedlab export)."""

import json
import os
import statistics
import subprocess
import sys
import textwrap

import pytest

from reports.engine.kernel import KernelArgumentError, compile_kernel, launches_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)  # the project, then TVM where it was
    return {**os.environ, "PYTHONPATH": path, "CUDA_PATH": os.environ.get("CUDA_PATH", "/usr/local/cuda")}


@pytest.fixture(scope="module")
def fp16_padded():
    """best_fp16_gemm on rows no tensor map can describe: two copy kernels, then the product."""
    return compile_kernel("best_fp16_gemm", "gemm:1000x500x2001:float16")


def test_launch_facts_are_read_from_the_host_code():
    host = ('T.call_ffi_kernel("main_kernel", A.data, A_pad.data, 981, 256, launch_params=["blockIdx.x", '
            '"threadIdx.x"], ret_ty="int32")\n'
            'T.call_ffi_kernel("main_kernel_2", A_map, B_map, C_1.data, T.Cast("int32", n), 64, 2, 384, T.int64(197632), '
            'launch_params=["blockIdx.x", "blockIdx.y", "threadIdx.x", "tirx.use_dyn_shared_memory"], ret_ty="int32")')
    first, second = launches_of(host)
    assert (first.name, first.grid, first.block, first.dynamic_shared_bytes) == ("main_kernel", (981, 1, 1), (256, 1, 1), 0)
    assert (second.grid, second.block, second.dynamic_shared_bytes) == ((64, 2, 1), (384, 1, 1), 197632)


def test_a_best_kernel_carries_its_choice_and_every_launch(fp16_padded):
    k = fp16_padded
    assert k.schedule == "best_fp16_gemm" and k.step == "persistent_gemm" and k.chosen.startswith("persistent_gemm")
    assert k.step_config.pad_operands  # 2001 fp16 columns: no tensor map, so padded copies first
    # the two copies, the product and, where the choice splits K, split-K's sum
    count = 3 + (k.step_config.split_k > 1)
    assert [x.name for x in k.launches] == ["main_kernel"] + [f"main_kernel_{i}" for i in range(1, count)]
    main = k.launches[2]
    assert main.block == (384, 1, 1) and main.dynamic_shared_bytes > 48 * 1024
    assert main.dynamic_shared_bytes == k.step_config.launch(k.workload).shared_bytes
    assert k.registers > 0 and k.spills == 0 and "wgmma.mma_async" in k.ptx


def test_a_plain_step_launches_what_its_configuration_says():
    k = compile_kernel("warp_tiled_gemm", "gemm:1000x500x2000:nt")
    launch = k.step_config.launch(k.workload)
    assert k.chosen is None and k.step == "warp_tiled_gemm"
    assert k.launches[0].grid == launch.grid and k.launches[0].block == launch.block


def test_arguments_are_checked_before_the_launch_in_one_line():
    torch = pytest.importorskip("torch")
    k = compile_kernel("naive_gemm", "gemm:8x16x4")
    a, b, c = torch.zeros(8, 4), torch.zeros(4, 16), torch.zeros(8, 16)
    cases = [((a, b, c, c), "takes 2 inputs"),
             ((a.numpy(), b, c), "must be a torch.Tensor"),
             ((a.half(), b, c), "is float16"),
             ((a, torch.zeros(16, 4), c), "has shape (16, 4)"),
             ((a, torch.zeros(16, 4).t(), c), "strides"),
             ((a, b, c), "not on a CUDA device")]
    for args, words in cases:
        with pytest.raises(KernelArgumentError) as e:
            k.check_args(*args)
        assert words in str(e.value) and "\n" not in str(e.value), (words, str(e.value))


def test_compile_kernel_refuses_what_the_step_refuses():
    from schedules import ScheduleParamError

    with pytest.raises(ScheduleParamError, match="takes float16 or bfloat16"):
        compile_kernel("best_fp16_gemm", "gemm:64x64x64")
    with pytest.raises(TypeError, match="a str"):
        compile_kernel(["best_gemm"], "gemm:64x64x64")


def test_export_without_a_gpu_writes_source_ptx_cubin_and_launch_facts(tmp_path):
    """``schedlab export best_gemm --shape 512x512x512 --out DIR`` on a machine without a GPU."""
    proc = subprocess.run([sys.executable, "-m", "scripts.schedlab", "export", "best_gemm", "--shape", "512x512x512",
                           "--out", str(tmp_path)], env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads((tmp_path / "launch.json").read_text())
    assert facts["schedule"] == "best_gemm" and facts["step"] in ("split_k_gemm", "warp_tiled_gemm", "skinny_gemm")
    assert [a["name"] for a in facts["arguments"]] == ["A", "B", "C"]
    assert facts["arguments"][2] == {"name": "C", "shape": [512, 512], "dtype": "float32", "role": "output",
                                     "layout": "row-major, contiguous"}
    assert facts["entry_points"] and all(len(e["grid"]) == 3 and len(e["block"]) == 3 for e in facts["entry_points"])
    assert facts["config"] and facts["arch"].startswith("sm_") and facts["tvm"] and facts["spills"] == 0
    assert "__global__" in (tmp_path / "kernel.cu").read_text()
    assert ".entry" in (tmp_path / "kernel.ptx").read_text() and (tmp_path / "kernel.cubin").stat().st_size > 0
    import tvm

    if not tvm.runtime.enabled("cuda"):
        assert not (tmp_path / "kernel.so").exists() and facts["module"] is None and "driver" in facts["module_note"]


# --- on the GPU ----------------------------------------------------------------------------------
CASES = [("best_gemm", f"gemm:777x1000x513:{lay}") for lay in ("nn", "nt", "tn", "tt")] + \
    [("best_fp16_gemm", f"gemm:1024x768x512:float16:{lay}") for lay in ("nn", "nt", "tn", "tt")] + \
    [("best_fp16_gemm", "gemm:1000x500x2001:bfloat16:nt"), ("best_tf32_gemm", "gemm:1024x1024x1024"),
     ("best_fp16_gemm", "bmm:8x256x128x64:float16:nt"), ("best_gemm", "bmm:3x100x60x70:tn"),
     ("gemv_dispatch", "gemv:4096x1000"), ("warp_tiled_gemm", "gemm:1000x500x2000"),
     ("persistent_gemm", "gemm:2048x2048x1024:bfloat16")]


def _torch_inputs(torch, wl):
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    return [(torch.rand(shape, device="cuda") * 2 - 1).to(dtypes[dtype]) for shape, dtype in wl.arg_shapes()[:-1]]


@pytest.mark.gpu
@pytest.mark.parametrize("name, workload", CASES)
def test_the_kernel_on_torch_tensors_matches_torch_matmul(name, workload):
    import torch

    from schedules.reference import product_error

    k = compile_kernel(name, workload)
    wl = k.workload
    inputs = _torch_inputs(torch, wl)
    out = torch.full(wl.arg_shapes()[-1][0], float("nan"), device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the kernel runs on torch's current stream
        got = k(*inputs, out=out)
    stream.synchronize()
    assert got is out
    err = product_error(wl, out, inputs)
    assert err <= k.tolerance, (err, k.tolerance)
    if wl.kind == "gemm":
        a, b = wl.operands(*inputs)
        want = torch.matmul(a.double(), b.double())
        assert torch.allclose(out.double(), want, rtol=0, atol=50 * k.tolerance * float(want.abs().max()) + 1e-6)
    again = k(*inputs)  # an output allocated for the caller
    assert again.shape == out.shape and torch.equal(again, out) or product_error(wl, again, inputs) <= k.tolerance


@pytest.mark.gpu
def test_a_linear_module_uses_the_lab_kernel():
    import torch

    from reports import linear_module

    weight = (torch.rand(384, 256, device="cuda") * 2 - 1).half()
    layer = linear_module(weight, "best_fp16_gemm")
    x = (torch.rand(2, 50, 256, device="cuda") * 2 - 1).half()
    y = layer(x)
    want = x.double() @ weight.double().t()
    assert y.shape == (2, 50, 384)
    assert float((y.double() - want).norm() / want.norm()) < 1e-4
    assert list(layer.kernels) == [100] and layer.kernels[100].workload.layout == "nt"


def _median_ms(torch, fn, reps=60):
    cache = torch.empty(256 << 18, dtype=torch.int32, device="cuda")  # 256 MiB: more than the L2
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        cache.sum(dtype=torch.int64)  # empty the L2, as the harness does
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


@pytest.mark.gpu
@pytest.mark.parametrize("name, workload", [("best_fp16_gemm", "gemm:4096x4096x4096:float16"),
                                            ("best_gemm", "gemm:2048x2048x2048")])
def test_timed_from_pytorch_it_runs_as_fast_as_the_harness_says(name, workload):
    import torch

    from reports.engine.harness import check_in_process

    k = compile_kernel(name, workload)
    inputs = _torch_inputs(torch, k.workload)
    out = torch.empty(k.workload.arg_shapes()[-1][0], device="cuda")
    mine = _median_ms(torch, lambda: k(*inputs, out=out))
    harness = check_in_process(name, workload, time=True)
    assert harness["status"] == "ok"
    assert abs(mine / harness["time_ms"] - 1) <= 0.05, (mine, harness["time_ms"])


@pytest.mark.gpu
def test_an_exported_module_runs_in_a_process_with_only_the_tvm_runtime(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scripts.schedlab", "export", "best_fp16_gemm", "--shape",
                           "1000x500x2001:float16", "--out", str(tmp_path)],
                          env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "kernel.so").exists()
    check = textwrap.dedent("""
        import ctypes, json, os, sys
        import numpy as np
        os.environ["TVM_USE_RUNTIME_LIB"] = "1"  # TVM's runtime library alone, no compiler
        import tvm
        import tvm.base
        runtime = tvm.base._LOADED_LIBS["tvm_runtime"]._name
        ctypes.CDLL(os.path.join(os.path.dirname(runtime), "libtvm_runtime_cuda.so"))  # CUDA, loaded by hand
        assert set(tvm.base._LOADED_LIBS) == {"tvm_runtime"}, tvm.base._LOADED_LIBS
        here = sys.argv[1]
        facts = json.load(open(os.path.join(here, "launch.json")))
        lib = tvm.runtime.load_module(os.path.join(here, "kernel.so"))
        dev = tvm.cuda(0)
        rng = np.random.default_rng(0)
        args = [rng.uniform(-1, 1, a["shape"]).astype(a["dtype"]) for a in facts["arguments"][:2]]
        out = tvm.runtime.empty(facts["arguments"][2]["shape"], "float32", dev)
        lib[facts["host_function"]](*[tvm.runtime.tensor(x, dev) for x in args], out)
        a, b = (x.astype(np.float64) for x in args)
        ref = a @ b
        err = np.linalg.norm(out.numpy() - ref) / np.linalg.norm(ref)
        print(err)
        sys.exit(0 if err < facts["tolerance"] else 1)
    """)
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}  # not the project: TVM alone
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if "tvm" in p or "site" in p)
    run = subprocess.run([sys.executable, "-c", check, str(tmp_path)], env=env, cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "schedules" not in run.stderr
