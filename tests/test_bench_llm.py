"""``bench-gemm --llm``: the layers of each model as their published configurations give them, the
epilogue each layer carries, one timing per distinct workload, the jobs per layer, the bandwidth
share and the summary computed from a results frame, and the command's refusals (one line, exit 2)."""

import pytest

from reports.engine import results as R
from reports.experiments import bench_llm as L
from schedules import ScheduleParamError, parse_workload
from scripts.schedlab import main


def _layers(name):
    return {layer: (n, k, words) for layer, n, k, words in L.MODELS[name].layers()}


def test_layer_shapes_from_the_models_configurations():
    llama = _layers("llama-3.1-8b")  # 4096 hidden, 14336 intermediate, 32 heads, 8 kv heads of 128
    assert llama == {"qkv": (6144, 4096, []), "o_proj": (4096, 4096, ["residual"]),
                     "gate_up": (28672, 4096, []), "down": (4096, 14336, ["residual"])}
    qwen = _layers("qwen2.5-7b")  # 3584 hidden, 28 heads, 4 kv heads: the QKV projection has a bias
    assert qwen["qkv"] == (4608, 3584, ["bias"]) and qwen["down"] == (3584, 18944, ["residual"])
    phi = _layers("phi-2")  # every linear has a bias, a GELU MLP, attention and MLP in parallel
    assert phi == {"qkv": (7680, 2560, ["bias"]), "o_proj": (2560, 2560, ["bias"]),
                   "up": (10240, 2560, ["bias", "gelu_tanh"]), "down": (2560, 10240, ["bias", "residual"])}
    assert _layers("llama-3.1-70b")["qkv"] == (10240, 8192, [])


def test_each_distinct_layer_is_timed_once_with_its_epilogue_or_none():
    layers = L.plan_layers(["llama-3.1-8b", "llama-3.1-8b"], [1, 61])
    assert len(layers) == 8 and len({e["workload"] for e in layers}) == 8
    assert all(e["also"] == ["llama-3.1-8b " + e["layer"] + " (model)"] for e in layers)
    wl = parse_workload(next(e["workload"] for e in layers if e["layer"] == "down" and e["rows"] == 61))
    assert (wl.M, wl.N, wl.K, wl.dtype, wl.out_dtype, wl.layout) == (61, 4096, 14336, "bfloat16", "bfloat16", "nt")
    assert wl.epilogue.residual and not wl.epilogue.bias
    plain = L.plan_layers(["phi-2"], [16], ["plain"])
    assert all(parse_workload(e["workload"]).epilogue is None for e in plain)
    assert all(parse_workload(e["workload"]).out_dtype == "bfloat16" for e in plain)


def test_the_forms_of_a_layer():
    """Each layer with its model's epilogue, without, and from 65 rows on with a bias and the tanh GELU;
    a workload two forms share (Llama's QKV has no epilogue: model = plain) is timed once."""
    layers = L.plan_layers(["llama-3.1-8b"], [16, 1000], L.FORMS)
    by = {(e["layer"], e["rows"], e["form"]): parse_workload(e["workload"]) for e in layers}
    assert by[("o_proj", 16, "model")].epilogue.residual and by[("o_proj", 16, "plain")].epilogue is None
    assert ("qkv", 16, "plain") not in by  # the same workload as its model form
    assert any("(plain)" in a for e in layers for a in e["also"])
    gelu = by[("o_proj", 1000, "bias_gelu")].epilogue
    assert gelu.bias and gelu.activation == "gelu_tanh" and not gelu.residual
    assert ("o_proj", 16, "bias_gelu") not in by  # decode-sized: the weight's read, not the epilogue, decides
    assert len(layers) == len({e["workload"] for e in layers})
    with pytest.raises(ScheduleParamError, match="not one of model, plain, bias_gelu"):
        L.check_args(["phi-2"], [16], ["fused"])


def test_regimes_follow_the_targets():
    reg = lambda m, words: L.regime(parse_workload(L.layer_workload(m, 4096, 4096, words)))  # noqa: E731
    assert reg(61, ["bias", "gelu_tanh"]) == "decode (M ≤ 64)"
    assert reg(1000, []) == "mid (64 < M < 1024)"
    assert reg(1024, []) == "prefill (M ≥ 1024), no epilogue"
    assert reg(4096, ["bias", "gelu_tanh"]) == "prefill (M ≥ 1024), bias + activation"
    assert reg(4096, ["bias"]) == reg(4096, ["residual"]) == "prefill (M ≥ 1024), other epilogues"


def test_the_jobs_per_layer():
    """cuBLAS and the lab's choice always; cuBLASLt's fused epilogue where PyTorch reaches it (a bias,
    with the tanh GELU or none: no residual); eager PyTorch where there is an epilogue."""
    jobs = L.make_jobs(L.plan_layers(["phi-2"], [16]))
    names = {}
    for j in jobs:
        names.setdefault(j["workload"], []).append(j["name"])
    by_layer = {parse_workload(w).N: n for w, n in names.items()}
    assert by_layer[10240] == ["cublas", "cublaslt_fused", "torch_eager", "best_fp16_gemm"]  # up: bias + GELU
    assert by_layer[7680] == ["cublas", "cublaslt_fused", "torch_eager", "best_fp16_gemm"]   # qkv: bias
    assert "cublaslt_fused" not in names[L.layer_workload(16, 2560, 10240, ["bias", "residual"])]  # a residual
    llama = L.make_jobs(L.plan_layers(["llama-3.1-8b"], [16]))
    assert [j["name"] for j in llama if j["workload"].startswith("gemm:16x6144x")] == ["cublas", "best_fp16_gemm"]


def _frame():
    wl = L.layer_workload(16, 6144, 4096, [])
    big = L.layer_workload(1000, 6144, 4096, ["bias"])
    rows = [{"workload": wl, "name": "cublas", "role": "baseline", "status": "ok", "time_ms": 0.025, "precision": "bf16"},
            {"workload": wl, "name": "best_fp16_gemm", "role": "schedule", "status": "ok", "time_ms": 0.020,
             "precision": "bf16", "chosen": "decode_gemm [decode t16]"},
            {"workload": big, "name": "cublas", "role": "baseline", "status": "ok", "time_ms": 0.10, "precision": "bf16"},
            {"workload": big, "name": "cublaslt_fused", "role": "baseline", "status": "ok", "time_ms": 0.11,
             "precision": "bf16"},
            {"workload": big, "name": "torch_eager", "role": "baseline", "status": "ok", "time_ms": 0.15,
             "precision": "bf16"},
            {"workload": big, "name": "best_fp16_gemm", "role": "schedule", "status": "error", "error": "boom\nmore",
             "precision": "bf16"}]
    meta = {"provenance": {"gpu": "Test GPU", "tvm": "0.27", "commit": "abc", "date": "today"},
            "ceilings": {"copy_gbps": 3000.0, "copy_us": {str(parse_workload(wl).min_bytes): 17.0}},
            "models": ["llama-3.1-8b"], "rows": [16, 1000]}
    layers = [{"workload": wl, "model": "llama-3.1-8b", "layer": "qkv", "rows": 16, "also": []},
              {"workload": big, "model": "qwen2.5-7b", "layer": "qkv", "rows": 1000, "also": ["x y"]}]
    return L.tidy(R.frame(rows, meta), layers)


def test_the_run_times_a_copy_of_each_decode_layers_bytes():
    """The ceilings job times a copy moving each decode-sized layer's bytes (once per distinct count),
    not the prefill layers'."""
    layers = L.plan_layers(["phi-2"], [16, 1000])
    counts = L.copy_bytes(layers)
    decode = {parse_workload(e["workload"]).min_bytes for e in layers if e["rows"] == 16}
    assert counts == sorted(decode) and len(counts) == len(set(counts))
    from reports.engine import harness
    from reports.engine.build import cuda_available

    measured = harness.measure_ceilings([1 << 20, 1 << 20])  # without a GPU: unavailable, in one line
    assert measured["status"] == ("ok" if cuda_available() else "unavailable")
    if measured["status"] == "ok":
        assert list(measured["copy_us"]) == [str(1 << 20)] and measured["copy_us"][str(1 << 20)] > 0


def test_bandwidth_share_summary_and_table_from_a_results_frame():
    df = _frame().set_index("name", append=True)
    lab = df.xs("best_fp16_gemm", level="name").iloc[0]
    moved = 2 * (6144 * 4096 + 16 * 4096 + 16 * 6144)  # bf16: the weight, the rows in, the rows out
    assert lab["pct_copy_bw"] == pytest.approx(100 * moved / 20e-6 / 3000e9)
    assert lab["pct_cublas"] == pytest.approx(125.0) and lab["model"] == "llama-3.1-8b" and lab["layer"] == "qkv"
    # a copy moving the layer's bytes under the same timer: 17 µs against the kernel's 20
    assert lab["pct_same_size_copy"] == pytest.approx(85.0)
    assert df.xs("cublas", level="name").iloc[0]["pct_same_size_copy"] == pytest.approx(68.0)
    s = L.summary(_frame()).set_index("regime")
    decode, prefill = s.loc["decode (M ≤ 64)"], s.loc["mid (64 < M < 1024)"]
    assert decode["geomean % cuBLAS"] == "125.0" and decode["measured"] == 1
    assert float(decode["cuBLAS % copy BW"]) == pytest.approx(0.8 * float(decode["lab % copy BW"]), rel=1e-2)
    assert prefill["failed"] == 1 and prefill["measured"] == 0
    assert decode["lab % same-size copy"] == "85.0" and decode["cuBLAS % same-size copy"] == "68.0"
    assert decode["min lab % copy BW"] == decode["lab % copy BW"]  # one decode row
    assert "lab % same-size copy" not in prefill or prefill["lab % same-size copy"] != prefill["lab % same-size copy"]
    md = L.markdown(_frame())
    assert "Test GPU" in md and "3000 GB/s" in md and "decode_gemm [decode t16]" in md
    assert "**error**: boom" in md and "more" not in md  # an error in one line


@pytest.mark.parametrize("argv, word", [
    (["--llm", "--shapes", "1x2x3"], "not --shapes"),
    (["--llm", "--random", "5"], "not --random"),
    (["--llm", "--models", "gpt-9"], "not one of llama-3.1-8b"),
    (["--llm", "--rows", "0,16"], "between 1 and 65536"),
    (["--llm", "--rows", "16,x"], "not a whole number"),
    (["--rows", "16"], "go with --llm"),
    (["--forms", "plain"], "go with --llm"),
    (["--llm", "--forms", "plain,fused"], "not one of model, plain, bias_gelu"),
])
def test_refusals_are_one_line(argv, word, capsys, tmp_path):
    assert main(["bench-gemm", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert word in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_parse_list_defaults_and_errors():
    assert L.parse_list(None, L.ROWS, "rows", int) == list(L.ROWS)
    assert L.parse_list(" 1, 7 ,", L.ROWS, "rows", int) == [1, 7]
    with pytest.raises(ScheduleParamError, match="empty"):
        L.parse_list(" , ", L.ROWS, "rows", int)


def test_the_chart_is_drawn_where_something_was_timed(tmp_path):
    from reports.views.charts import llm_chart

    df = _frame()
    assert llm_chart(df, L.CHOICE, str(tmp_path / "a.png")) == str(tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 1000
    nothing = df.assign(pct_cublas=float("nan"))
    assert llm_chart(nothing, L.CHOICE, str(tmp_path / "b.png")) is None and not (tmp_path / "b.png").exists()
