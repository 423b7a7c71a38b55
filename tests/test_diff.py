"""`schedlab diff`: the schedule primitives B adds, removes or re-parameterizes against A, the
compiler's resources of both, and a unified diff of their IR; bad input is one line."""

import pytest

from scripts.schedlab import main


def test_diff_of_two_steps_names_the_primitives_and_the_resources(capsys):
    assert main(["diff", "shared_cache_gemm", "register_cache_gemm", "--shape", "256x256x256", "--stage", "cuda",
                 "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("gemm 4 shared_cache_gemm  →  gemm 5 register_cache_gemm")
    assert "+ cache_write(" in out and "reverse_compute_at(" in out  # the register accumulator
    assert "~ split(loop=_, factors=[None, 16]" in out and "→  split(loop=_, factors=[None, 32]" in out
    assert "ptxas resources" in out and "registers" in out
    assert "--- shared_cache_gemm.cuda" in out and "+++ register_cache_gemm.cuda" in out
    assert "\033[" not in out
    assert any(line.startswith("+") and "C_local" in line for line in out.splitlines())


def test_without_b_the_step_is_compared_with_the_one_before_it(capsys):
    assert main(["diff", "double_buffer_gemm", "--shape", "256x256x256", "--color", "always"]) == 0
    out = capsys.readouterr().out
    assert "thread_tiling_gemm" in out and "double_buffer_gemm" in out
    assert "\033[32m+" in out  # added lines in green on request
    assert "software_pipeline_stage" in out


@pytest.mark.parametrize("argv, word", [
    (["diff", "naive_gemm", "warp_gemv"], "a diff needs two schedules of one kind"),
    (["diff", "naive_gemm", "nope"], "unknown schedule 'nope'"),
    (["diff", "naive_gemm", "thread_1d_gemm", "--stage", "sass"], "--stage 'sass'"),
    (["diff", "naive_gemm", "thread_1d_gemm", "--shape", "70000x2x2"], "grid y = 70000 blocks"),
    (["diff", "naive_gemm"], "is the first gemm step"),
    (["diff", "warp_tiled_gemm", "wgmma_gemm"], "no input type for both"),
])
def test_bad_input_is_one_line(argv, word, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert word in err and len(err.splitlines()) == 1, err
