"""``pad_pitch``: the row pitch of the TMA kernels' padded copies (``pad_operands``: operands whose rows are not a
whole number of 16 bytes, copied first). 16 bytes is what a tensor map needs; the dispatcher asks for rows of whole
128-byte lines, which the TMA unit reads fastest. The copy kernel writes rows of that pitch, only the operands that
need a copy are copied, values a tensor map cannot take are refused in one line, and on a GPU the products are right
at every pitch (both operands copied, either one, a transposed layout, tf32, a bias and a 16-bit output)."""

import pytest

from schedules import ScheduleParamError, dispatch, get, parse_workload
from schedules.gpus import PROFILES
from tests.helpers import cached_build, run_on_gpu

# K = 2999: A's rows padded to 3000 elements at 16 bytes (375 copies of 16 bytes), to 3008 at 128 (376);
# N = 777: B's (K x N) rows to 784 at 16 bytes, 832 at 128
RAGGED = "gemm:1001x777x2999:float16"
TILE = dict(block_m=128, block_n=128, stages=6, pad_operands=True)


def _copy_kernel(cuda: str) -> str:
    """The definition of the first copy kernel (A's)."""
    start = cuda.index("A_pad_ptr) {")
    return cuda[start:cuda.index("__global__", start)]


def test_the_copy_writes_rows_of_the_pitch_asked_for():
    narrow = cached_build("persistent_gemm", RAGGED, **TILE, pad_pitch=16).device.cuda
    lines = cached_build("persistent_gemm", RAGGED, **TILE, pad_pitch=128).device.cuda
    assert "% 375)" in _copy_kernel(narrow) and "% 376)" not in _copy_kernel(narrow)
    assert "% 376)" in _copy_kernel(lines) and "% 375)" not in _copy_kernel(lines)
    for cuda in (narrow, lines):  # two copies and the product
        assert cuda.count("__global__ void") == 2 * 3


def test_only_the_operands_that_need_a_copy_are_copied():
    """pad_pitch is where a copy goes, not whether: an operand whose rows are whole 16 bytes is read in place."""
    cfg = get("persistent_gemm").config(**TILE, pad_pitch=128)
    assert cfg.copied(parse_workload("gemm:1000x1000x3000:float16")) == (False, False)  # 6000-byte rows: read as stored
    assert cfg.copied(parse_workload("gemm:1000x1001x3000:float16")) == (False, True)
    assert cfg.copied(parse_workload(RAGGED)) == (True, True)


@pytest.mark.parametrize("step, params, word", [
    ("persistent_gemm", dict(TILE, pad_pitch=48), "pad_pitch is the padded copies' row pitch in bytes"),
    ("tma_tf32_gemm", dict(pad_operands=True, pad_pitch=8), "pad_pitch is the padded copies' row pitch in bytes"),
    ("fp8_tma_gemm", dict(pad_k=True, pad_pitch=128), "pad_pitch is for the 16-bit and tf32 steps"),
])
def test_a_pitch_a_tensor_map_cannot_take_is_refused_in_one_line(step, params, word):
    wl = "gemm:256x256x250:float8_e4m3fn:nt" if step.startswith("fp8") else (
        "gemm:256x256x250" if "tf32" in step else "gemm:256x256x250:float16")
    spec = get(step)
    with pytest.raises(ScheduleParamError, match=word) as e:
        spec.validate(parse_workload(wl), spec.config(**params))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("workload, precision", [(RAGGED, "fp16"), ("gemm:1001x777x2999", "tf32")])
def test_the_dispatchers_padded_copies_take_whole_lines_and_aligned_rows_no_copy(workload, precision):
    gpu = PROFILES["H100"]
    ragged = [c.config for c in dispatch.candidates(parse_workload(workload), precision, gpu)
              if c.step in ("persistent_gemm", "tma_tf32_gemm")]
    assert ragged and all(c.pad_operands and c.pad_pitch == 128 for c in ragged)
    aligned = [c.config for c in dispatch.candidates(parse_workload(workload.replace("1001x777x2999", "1024x768x3000")),
                                                     precision, gpu) if c.step in ("persistent_gemm", "tma_tf32_gemm")]
    assert aligned and all(not c.pad_operands and c.pad_pitch == 16 for c in aligned)


GPU_CASES = [
    ("persistent_gemm", RAGGED, dict(TILE, pad_pitch=128, sms=7)),
    ("persistent_gemm", RAGGED, dict(TILE, pad_pitch=32, split_k=3)),
    ("persistent_gemm", "gemm:1000x1001x3000:bfloat16:tn:out=bfloat16:bias", dict(TILE, pad_pitch=128, staged_store=True)),
    ("persistent_gemm", "gemm:979x91x263:float16:nt", dict(TILE, block_n=64, stages=8, pad_pitch=128)),
    ("tma_tf32_gemm", "gemm:1001x777x2999", dict(pad_operands=True, pad_pitch=128)),
    ("tma_tf32_gemm", "gemm:1001x777x2999:tt", dict(pad_operands=True, pad_pitch=64, split_k=2)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("step, workload, params", GPU_CASES)
def test_padded_copies_of_every_pitch_give_the_right_product(harness, step, workload, params):
    spec = get(step)
    err = run_on_gpu(harness, spec, workload, **params)
    tol = spec.tolerance_for(parse_workload(workload))
    print(f"{step} {params} on {workload}: relative error {err:.3g} (tolerance {tol:.3g})")
    assert err <= tol
