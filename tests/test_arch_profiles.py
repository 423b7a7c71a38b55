"""GPUs the lab is not run on: for each device profile (schedules.gpus: A100, RTX 3090, RTX 4090,
H100, H200, B200, RTX 5090) the default plan and every ``best_*`` choice take only steps that build
for the profile's architecture and fit its limits, nothing Hopper-only (wgmma, TMA, setmaxnreg:
sm_90a) is planned or chosen below sm_90 or on Blackwell, a Hopper step asked for by name there is
refused in one line naming sm_90a, the dispatcher says when its calibration comes from another GPU,
and the plans and choices compile with nvcc for each architecture without spills.

Compiling costs: each distinct kernel source is built once (TVM, then nvcc → PTX and ptxas) for the
oldest architecture that plans it, and its PTX is assembled again by ptxas for every other
architecture (PTX made for sm_80 assembles for sm_86 to sm_120: what the driver's JIT does; the PTX
nvcc makes for sm_86 and sm_89 is that for sm_80 but for its .target line). Registers, hence spills,
are ptxas's, and are checked per architecture. Left to other compiles, to keep this one near a
minute and a half: the sm_90 profiles' plan but their best_* choices (every step, which
tests/test_layouts.py and tests/test_gemm_fast.py build for sm_90); of the fp16 plan the classic
steps (gemm 1-9: the fp32 plan's schedules, compiled here for every architecture, with fp16 loads);
of the GEMV plan all but gemv_dispatch's choice (split-K GEMV; the GEMV ladder's kernels are warp
shuffles and vector loads that every architecture has, built for sm_90 by tests/test_gemv_family.py).
"""

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest
import tvm

from reports.engine import build as B
from reports.experiments.run import not_built, plan
from reports.views.tables import not_built_line
from schedules import ScheduleParamError, all_schedules, get, parse_workload
from schedules.common import GpuSpec, current_gpu, limits_of, pass_config_of, use_gpu
from schedules.gpus import BY_ARCH, PROFILES, arch_number, profile
from tuning.cuda_compile import assemble

KIB = 1024
HOPPER_ONLY = {s.name for s in all_schedules() if s.config_cls.archs == ("sm_90a",)}
PLAN_WORKLOADS = ["gemm:1000x520x2000", "gemm:1024x512x2048:float16", "gemm:1000x520x2000:bfloat16",  # two ragged
                  "gemv:16384x128"]
BEST_WORKLOADS = {"best_gemm": ["gemm:4096x4096x4096", "gemm:64x2048x1024"],
                  "best_fp16_gemm": ["gemm:4096x4096x4096:float16", "gemm:64x2048x1024:bfloat16"],
                  "best_tf32_gemm": ["gemm:4096x4096x4096", "gemm:1000x520x2000"],
                  "gemv_dispatch": ["gemv:16x131072", "gemv:16384x128"]}
COMPILED_CHOICES = [("best_tf32_gemm", "gemm:1000x520x2000"), ("gemv_dispatch", "gemv:16x131072")]  # beside the plan's


@pytest.fixture
def on_gpu():
    """Make choices for a profile inside the test; the GPU before it afterwards."""
    before = current_gpu()
    yield use_gpu
    use_gpu(before)


def test_the_profiles_have_their_architectures_published_limits():
    expect = {"A100": ("sm_80", 108, 164, 2048), "RTX 3090": ("sm_86", 82, 100, 1536),
              "RTX 4090": ("sm_89", 128, 100, 1536), "H100": ("sm_90", 132, 228, 2048),
              "H200": ("sm_90", 132, 228, 2048), "B200": ("sm_100", 148, 228, 2048),
              "RTX 5090": ("sm_120", 170, 100, 1536)}
    for name, (arch, sms, smem_kib, threads) in expect.items():
        spec = PROFILES[name]
        assert (spec.arch, spec.sms, spec.smem_per_sm, spec.threads_per_sm) == (arch, sms, smem_kib * KIB, threads)
        assert spec.smem_per_block == spec.smem_per_sm - KIB and spec.regs_per_sm == 65536  # the runtime's 1 KiB
        assert limits_of(spec).max_dynamic_shared_bytes == spec.smem_per_block and limits_of(spec).arch == arch
    # the H200 is the GPU the lab assumed before it had profiles (its calibration GPU): the same
    # choices; the H100 differs in its memory bandwidth alone (3350 GB/s published, 0.83 of it)
    assumed = dataclasses.asdict(GpuSpec())
    for name, gbps in (("H200", assumed["memory_gbps"]), ("H100", 2780.0)):
        assert {k: v for k, v in dataclasses.asdict(PROFILES[name]).items() if k != "name"} == \
               {k: v for k, v in assumed.items() if k != "name"} | {"memory_gbps": gbps}


def test_a_profile_is_found_by_its_name_a_device_name_or_an_architecture():
    assert profile("a100") is profile("NVIDIA A100-SXM4-80GB") is profile("sm_80") is PROFILES["A100"]
    assert profile("rtx-4090") is profile("4090") is profile("sm_89") is PROFILES["RTX 4090"]
    assert profile("sm_90a") is PROFILES["H100"] and profile("NVIDIA H200") is PROFILES["H200"]
    assert set(BY_ARCH) == {p.arch for p in PROFILES.values()}
    for bad in ("V100", "sm_75", "sm_9x"):
        with pytest.raises(ScheduleParamError) as e:
            profile(bad)
        assert "\n" not in str(e.value)


def test_every_step_builds_for_its_architectures_or_says_which_it_needs(on_gpu):
    """The Hopper steps need sm_90a exactly (not Blackwell: no wgmma there); every other step builds
    from sm_80 on. Asked for below sm_90, a Hopper step is refused in one line naming sm_90a."""
    assert HOPPER_ONLY == {"wgmma_gemm", "tma_gemm", "warp_specialized_gemm", "persistent_gemm", "cluster_gemm",
                           "wgmma_tf32_gemm", "tma_tf32_gemm", "fp8_tma_gemm",
                           "fp8_block_scaled_gemm", "best_fp8_gemm"}
    for name, spec in PROFILES.items():
        refused = set(not_built(spec))
        assert refused == (set() if arch_number(spec.arch) == 90 else HOPPER_ONLY), name
    on_gpu(PROFILES["B200"])
    wl = parse_workload("gemm:1024x512x2048:float16")
    for step in sorted(HOPPER_ONLY - {"wgmma_tf32_gemm", "tma_tf32_gemm", "fp8_tma_gemm", "fp8_block_scaled_gemm",
                                      "best_fp8_gemm"}):
        with pytest.raises(ScheduleParamError) as e:
            get(step).validate(wl)
        assert "sm_90a" in str(e.value) and "sm_100" in str(e.value) and "\n" not in str(e.value)
    assert get("tensor_core_gemm").validate(wl)  # mma.sync / WMMA: every architecture of the table


def test_the_limits_are_the_gpus(on_gpu):
    """A block's shared memory is checked against the GPU's opt-in limit: WMMA 128 × 256 (130 KiB
    for its epilogue) fits an A100 (163 KiB) and an H100, not the 99 KiB of an RTX 3090 or 4090."""
    wl, cfg = parse_workload("gemm:4096x4096x4096:float16"), get("tensor_core_gemm").config(warps_n=4)
    for name in ("A100", "H100", "RTX 3090", "RTX 4090"):
        on_gpu(PROFILES[name])
        if PROFILES[name].smem_per_block > 130 * KIB:
            assert get("tensor_core_gemm").validate(wl, cfg).shared_bytes > 99 * KIB
        else:
            with pytest.raises(ScheduleParamError, match="more than the target allows"):
                get("tensor_core_gemm").validate(wl, cfg)


def test_the_default_plan_takes_only_what_builds_for_the_gpu(on_gpu):
    everything, _ = plan(PLAN_WORKLOADS, baseline_names=[], target=GpuSpec())
    for name, spec in PROFILES.items():
        jobs, _ = plan(PLAN_WORKLOADS, baseline_names=[], target=spec)
        names = {j["name"] for j in jobs}
        if spec.arch == "sm_90":
            assert jobs == everything and HOPPER_ONLY - {"wgmma_tf32_gemm", "tma_tf32_gemm", "fp8_tma_gemm",
                                                         "fp8_block_scaled_gemm", "best_fp8_gemm"} <= names
        else:
            assert not names & HOPPER_ONLY, name
            assert jobs == [j for j in everything if j["name"] not in HOPPER_ONLY]
            assert {"tensor_core_gemm", "skinny_gemm", "best_fp16_gemm", "best_gemm"} <= names
            with pytest.raises(ScheduleParamError, match=r"wgmma_gemm needs sm_90a .*not sm_\d+"):
                plan(PLAN_WORKLOADS[1:2], ["wgmma_gemm"], baseline_names=[], target=spec)
    # the run's table and page say what was left out and what it needs
    line = not_built_line({"not_built": not_built(PROFILES["RTX 3090"]), "gpu_spec": PROFILES["RTX 3090"].__dict__})
    assert line == ("Left out (they do not build for sm_86): wgmma_gemm, wgmma_tf32_gemm need sm_90a (wgmma); "
                    "tma_gemm, warp_specialized_gemm, persistent_gemm, cluster_gemm, tma_tf32_gemm, fp8_tma_gemm, "
                    "fp8_block_scaled_gemm, best_fp8_gemm need sm_90a (wgmma, TMA, setmaxnreg).")


def _choices(spec):
    """{(best step, workload): Resolved} of every best_* step at its workloads on ``spec``."""
    use_gpu(spec)
    out = {}
    for step, workloads in BEST_WORKLOADS.items():
        for text in workloads:
            wl = parse_workload(text)
            resolved = get(step).resolve(wl)
            get(step).validate(wl, resolved=resolved)
            out[step, text] = resolved
    return out


def test_best_choices_are_legal_on_every_gpu_and_fall_back_below_hopper(on_gpu):
    for name, spec in PROFILES.items():
        choices = _choices(spec)
        for (step, text), res in choices.items():
            assert res.step.arch_refusal(res.step_config, limits_of(spec)) is None, (name, step, text)
            res.step.validate(parse_workload(text), res.step_config, limits_of(spec))
        chosen = {key: res.step.name for key, res in choices.items()}
        if spec.arch == "sm_90":
            assert not set(chosen.values()) - ({"warp_tiled_gemm", "split_k_gemm", "skinny_gemm", "gemv_dispatch"}
                                               | HOPPER_ONLY)
            assert chosen["best_fp16_gemm", "gemm:4096x4096x4096:float16"] in HOPPER_ONLY
            assert chosen["best_tf32_gemm", "gemm:4096x4096x4096"] == "tma_tf32_gemm"
            continue
        assert not set(chosen.values()) & HOPPER_ONLY, (name, chosen)
        # fp16: the WMMA tensor cores; bf16 (WMMA has none): a thin product on mma.sync from sm_80
        # (thin_tc_gemm) where the model ranks it first, else the SIMT body widens it
        assert chosen["best_fp16_gemm", "gemm:4096x4096x4096:float16"] == "tensor_core_gemm"
        assert chosen["best_fp16_gemm", "gemm:64x2048x1024:bfloat16"] in (
            ("thin_tc_gemm", "skinny_gemm") if arch_number(spec.arch) >= 80 else ("skinny_gemm",))
        # tf32: no tf32 kernel below sm_90: an fp32 kernel, and the choice says so
        tf32 = choices["best_tf32_gemm", "gemm:4096x4096x4096"]
        assert tf32.step.name in ("warp_tiled_gemm", "split_k_gemm")
        assert tf32.chosen.endswith(f" (fp32: no tf32 kernel builds for {spec.arch})")


def test_the_choices_use_the_gpus_own_sm_count_and_shared_memory(on_gpu):
    """The same shapes on GPUs of different sizes: split-K GEMV cuts each row into as many chunks as
    fill the warps the GPU holds (SMs × warps per SM: 3936 on an RTX 3090, 6912 on an A100, 8448 on
    an H100), the WMMA tile takes as much shared memory as the SM has (one 128 × 128 block of 66 KiB
    per SM of 100 KiB loses to smaller tiles)."""
    gemv = parse_workload("gemv:16x131072")
    splits = {}
    for name in ("RTX 3090", "A100", "H100"):
        res = _choices(PROFILES[name])["gemv_dispatch", "gemv:16x131072"]
        splits[name] = res.step_config.launch(gemv).grid[1]
    assert splits["RTX 3090"] < splits["A100"] < splits["H100"], splits
    from schedules import dispatch

    wl, tiles, per_sm = parse_workload("gemm:4096x4096x4096:float16"), {}, {}
    for name in ("A100", "RTX 3090"):
        cfg = _choices(PROFILES[name])["best_fp16_gemm", str(wl)].step_config
        tiles[name] = cfg.block_m * cfg.block_n
        wide = next(c for c in dispatch.candidates(wl, "fp16") if c.key == "wmma 128x128")
        per_sm[name] = dispatch.estimate(wl, wide).terms["per_sm"]
    assert per_sm == {"A100": 2, "RTX 3090": 1} and tiles["A100"] > tiles["RTX 3090"]
    use_gpu(PROFILES["RTX 3090"])
    text = dispatch.explain(parse_workload("gemm:1024x512x2048"), "fp32")
    assert "on NVIDIA GeForce RTX 3090 (sm_86): 82 SMs, 65536 registers and 100 KiB shared memory per SM" in text


def test_the_dispatcher_says_when_its_calibration_is_another_gpus(on_gpu):
    from schedules import dispatch
    from schedules.calibration import CALIBRATION

    assert CALIBRATION["calibrated_on"]["gpu"] == "NVIDIA H200"
    wl = parse_workload("gemm:1024x512x2048")
    on_gpu(PROFILES["H200"])
    assert get("best_gemm").resolve(wl).calibrated_on is None
    assert "another GPU" not in dispatch.explain(wl, "fp32")
    on_gpu(PROFILES["A100"])
    assert get("best_gemm").resolve(wl).calibrated_on == "NVIDIA H200 (sm_90, 132 SMs)"
    assert "calibrated on another GPU: NVIDIA H200 (sm_90, 132 SMs)" in dispatch.explain(wl, "fp32")


def test_the_command_line_names_a_gpu(on_gpu, monkeypatch, capsys):
    from scripts.schedlab import main

    monkeypatch.setenv(B.GPU_ENV, "")  # recorded: the variable the commands below set is put back afterwards
    monkeypatch.delenv(B.GPU_ENV)
    assert main(["show", "wgmma_gemm", "--gpu", "RTX 4090", "--shape", "256x256x256"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "schedlab: error: wgmma_gemm needs sm_90a (wgmma), not sm_89 (NVIDIA GeForce RTX 4090)"
    assert main(["show", "best_gemm", "--gpu", "V100"]) == 2 and "unknown GPU 'V100'" in capsys.readouterr().err
    assert main(["show", "best_gemm", "--gpu", "A100", "--arch", "sm_90"]) == 2
    assert "--arch sm_90 is not the architecture of --gpu A100 (sm_80)" in capsys.readouterr().err
    assert main(["show", "best_fp16_gemm", "--arch", "sm_86", "--shape", "4096x4096x4096", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "RTX 3090 (sm_86)" in out and "chosen: tensor_core_gemm" in out and "need sm_90a" in out
    assert B.device_arch() == "sm_86" and B.cuda_target().arch == "sm_86"  # the processes it starts: the same


# --- compiled for every architecture -----------------------------------------------------------
CLASSIC = {s.name for s in all_schedules(ladder="gemm")[:9]}  # gemm 1-9


def _kernels_to_build():
    """{(step, configuration, workload): [architectures]}: the default plan's steps of each profile
    (best_gemm and best_fp16_gemm among them) and the other best_* steps' choices
    (:data:`COMPILED_CHOICES`), resolved for it (a best_* step by what it chose); see the module's
    docstring for what is left to other compiles."""
    todo: dict = {}
    for spec in PROFILES.values():
        use_gpu(spec)
        jobs, _ = plan([w for w in PLAN_WORKLOADS if w.startswith("gemm")], baseline_names=[], target=spec)
        names = [(j["name"], j["workload"]) for j in jobs if (spec.arch != "sm_90" or j["name"].startswith("best_"))
                 and not (j["name"] in CLASSIC and parse_workload(j["workload"]).dtype == "float16")]
        resolved = [(B.resolve_named(name, text)[3], text) for name, text in names + COMPILED_CHOICES]
        for res, text in resolved:
            archs = todo.setdefault((res.step.name, res.step_config, text), [])
            if spec.arch not in archs:
                archs.append(spec.arch)
    return todo


def _source(step, cfg, wl, arch) -> str:
    """The CUDA source TVM generates for ``step`` on ``wl`` with ``cfg``, targeting ``arch``. Where a
    driver is, TVM compiles it as it generates it (the lab's compiler hook): build() keeps the source."""
    sch, target = get(step).builder(wl, cfg), B.cuda_target(arch)
    if B.cuda_available():
        return B.build(sch, target, pass_config_of(cfg)).device.cuda
    with tvm.transform.PassContext(opt_level=3, config=pass_config_of(cfg)), target:
        return tvm.compile(sch.mod, target=target).mod.imports[0].inspect_source()


def _compile(source: str, archs: list) -> tuple[dict, str]:
    """({arch: ptxas's kernel reports}, PTX): nvcc for the first architecture (the lab's compile),
    ptxas on its PTX for the others."""
    first = B.compile_cuda_source(source, archs[0])
    reports = {arch: B.parse_ptxas(assemble(first.ptx, arch)[1]) for arch in archs[1:]}
    return {archs[0]: first.kernels, **reports}, first.ptx


@pytest.fixture(scope="module")
def compiled():
    """{(step, configuration, workload, arch): (ptxas's kernel reports, PTX)}: each kernel's source
    made once (TVM, one after the other) for its oldest architecture, then compiled by nvcc for it
    and assembled by ptxas for the others (two at a time: nvcc and ptxas are processes of their own)."""
    before = current_gpu()
    sources = {}
    try:
        for (step, cfg, text), archs in _kernels_to_build().items():
            archs = sorted(archs, key=arch_number)
            use_gpu(profile(archs[0]))
            sources[step, cfg, text] = (_source(step, cfg, parse_workload(text), archs[0]), archs)
    finally:
        use_gpu(before)
    texts: dict = {}  # the same source for two kernels (a choice that is a plan's step): compiled once
    for source, archs in sources.values():
        texts[source] = sorted(set(texts.get(source, [])) | set(archs), key=arch_number)
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(texts, pool.map(lambda item: _compile(*item), texts.items())))
    return {(*key, arch): (done[source][0][arch], done[source][1])
            for key, (source, archs) in sources.items() for arch in archs}


@pytest.mark.slow  # every profile's plan compiled for its architecture: minutes of nvcc
def test_the_plans_and_choices_compile_for_every_architecture_without_spills(compiled):
    archs = {key[3] for key in compiled}
    assert archs == {spec.arch for spec in PROFILES.values()}
    spilled = [f"{step} on {text} for {arch}: {k.name} spills {k.spills} bytes"
               for (step, _, text, arch), (kernels, _) in compiled.items() for k in kernels if k.spills]
    assert not spilled, spilled
    assert all(kernels and all(k.registers > 0 for k in kernels) for kernels, _ in compiled.values())
    below = {step for (step, _, _, arch) in compiled if arch_number(arch) != 90}
    assert not below & HOPPER_ONLY and {"tensor_core_gemm", "skinny_gemm", "gemv_dispatch"} <= below


@pytest.mark.slow  # every profile's plan compiled for its architecture: minutes of nvcc
def test_the_hopper_kernels_do_not_assemble_for_blackwell(compiled):
    """Why the Hopper steps say sm_90a and not "sm_90 or newer": ptxas refuses their wgmma for
    Blackwell (sm_100a has tcgen05 instead; sm_120 neither) as for Ampere."""
    ptx = next(p for (step, _, _, _), (_, p) in compiled.items() if step in HOPPER_ONLY)  # an sm_90 choice
    assert "wgmma.mma_async" in ptx
    for arch in ("sm_100a", "sm_120", "sm_80"):
        with pytest.raises(RuntimeError, match="ptxas failed"):
            assemble(ptx, arch)


def test_naming_a_gpu_leaves_no_trace_on_the_tests_after_it():
    """Runs after test_the_command_line_names_a_gpu (file order): the GPU the lab builds for is this
    machine's (sm_90 where there is none) again, in this process and in the processes it starts."""
    import os

    assert not os.environ.get(B.GPU_ENV) and B.device_arch() == B.DEFAULT_ARCH
    assert B.cuda_target().arch == "sm_90a" or B.cuda_target().arch.startswith("sm_90")
