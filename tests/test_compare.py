"""`schedlab compare A B`: two results folders joined on their ids, the ratio per row and its
geometric mean per group, as Markdown, JSON and a chart; and the published H200/H100 comparison,
which must be what the command makes of the published folders."""

import json
import math
import os
import re

import pytest

from reports.engine import results as R
from reports.experiments.compare import compare, kernel_label
from reports.views.comparison import markdown
from scripts.schedlab import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200 = os.path.join("reports", "results", "NVIDIA_H200", "bench_gemm")
H100 = os.path.join("reports", "results", "NVIDIA_H100_80GB_HBM3", "bench_gemm")
PUBLISHED = os.path.join(ROOT, "reports", "results", "NVIDIA_H100_80GB_HBM3", "compare_h200_bench_gemm")


@pytest.fixture(scope="module")
def h200_h100():
    cwd = os.getcwd()
    os.chdir(ROOT)  # the folders as the published comparison names them
    try:
        return compare(H200, H100)
    finally:
        os.chdir(cwd)


def test_rows_are_joined_on_the_id_with_the_ratio_and_both_shares_of_cublas(h200_h100):
    c = h200_h100
    assert c.labels == ("H200", "H100") and len(c.rows) == 84 and len(c.only_a) == 82 and not c.only_b
    assert c.rows["id"].is_unique
    row = c.rows.set_index("id").loc["gemm:4096x4096x4096:float16|tma_gemm"]
    # the figures of docs/results.md (4096³ fp16, tma_gemm)
    assert (round(row["pct_cublas_a"], 1), round(row["pct_cublas_b"], 1)) == (95.5, 94.6)
    assert row["ratio"] == pytest.approx(row["time_ms_a"] / row["time_ms_b"])
    assert row["pct_cublas_diff"] == pytest.approx(row["pct_cublas_b"] - row["pct_cublas_a"])
    mma = c.rows.set_index("id").loc["gemm:4096x4096x4096:float16|tensor_core_gemm|intrinsics=mma"]
    assert mma["kernel"] == "tensor_core_gemm[intrinsics=mma]"  # the two tensor_core_gemm rows stay apart
    kernels = c.rows[~c.rows["name"].str.startswith(("best_", "cublas", "tvm_dlight"))]
    assert len(kernels) == 56 and round(kernels["pct_cublas_diff"].abs().max(), 1) == 5.1


def test_geometric_mean_per_group(h200_h100):
    g = h200_h100.groups.set_index("precision")
    assert list(g.index) == ["tf32", "fp16", "bf16", "all"]
    fp16 = h200_h100.rows[h200_h100.rows["precision"] == "fp16"]["ratio"]
    assert g.loc["fp16", "rows"] == 40 == fp16.notna().sum()
    assert g.loc["fp16", "geomean"] == pytest.approx(math.exp(sum(map(math.log, fp16)) / len(fp16)))
    assert g.loc["fp16", "min"] <= g.loc["fp16", "geomean"] <= g.loc["fp16", "max"]
    assert g.loc["all", "rows"] == 84


def test_the_published_comparison_is_what_the_command_makes(h200_h100):
    with open(os.path.join(PUBLISHED, "compare.md"), encoding="utf-8") as f:
        assert f.read() == markdown(h200_h100)
    with open(os.path.join(PUBLISHED, "compare.json"), encoding="utf-8") as f:
        assert json.load(f) == json.loads(json.dumps(h200_h100.to_json()))


def test_command_prints_json_and_writes_table_json_and_chart(tmp_path, capsys):
    assert main(["compare", os.path.join(ROOT, H200), os.path.join(ROOT, H100), "--json", "--by", "name",
                 "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["key"] == "id" and out["by"] == "name" and out["b"]["provenance"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert {g["name"] for g in out["groups"]} >= {"tma_gemm", "cublas", "all"}
    assert len(out["rows"]) == 84 and all(r["ratio"] > 0 for r in out["rows"])
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Geometric mean per name" in (tmp_path / "compare.md").read_text()
    assert json.loads((tmp_path / "compare.json").read_text()) == out


def _folder(path, rows, kind="bench-gemm"):
    meta = {"kind": kind, "provenance": {"gpu": "X", "commit": os.path.basename(path)}}
    R.write_results(R.frame(rows, meta), str(path))
    return str(path)


ROW = {"workload": "gemm:64x64x64", "name": "naive_gemm", "role": "schedule", "status": "ok", "time_ms": 2.0,
       "precision": "fp32"}


@pytest.mark.parametrize("case, message", [
    ("kinds", "holds 'bench-gemm' results and .* 'run' ones: compare takes two results of the same kind"),
    ("keys", "have no row id in common: nothing to compare"),
    ("repeated", "1 rows repeat an id"),
    ("by", "--by nope: not a column of both folders"),
    ("not results", "a comparison of two results folders"),
])
def test_folders_that_cannot_be_compared_are_one_line_errors(tmp_path, capsys, case, message):
    a = _folder(tmp_path / "a", [ROW])
    b = {"kinds": lambda: _folder(tmp_path / "b", [ROW], kind="run"),
         "keys": lambda: _folder(tmp_path / "b", [dict(ROW, workload="gemm:32x32x32")]),
         "repeated": lambda: _folder(tmp_path / "b", [dict(ROW, id="k"), dict(ROW, id="k")]),
         "by": lambda: a,
         "not results": lambda: PUBLISHED}[case]()
    args = ["compare", a, b] + (["--by", "nope"] if case == "by" else [])
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("schedlab: error:")
    assert re.search(message, err), err


def test_ratio_only_where_both_sides_were_timed(tmp_path):
    a = _folder(tmp_path / "a1", [ROW, dict(ROW, name="warp_tiled_gemm", time_ms=1.0)])
    b = _folder(tmp_path / "b2", [dict(ROW, time_ms=0.5), dict(ROW, name="warp_tiled_gemm", status="wrong")])
    c = compare(a, b)
    assert c.labels == ("a1", "b2")  # same GPU, commits differ
    assert "timed differently" not in markdown(c)
    assert c.rows["ratio"].iloc[0] == 4.0 and math.isnan(c.rows["ratio"].iloc[1])
    assert c.groups.set_index("precision").loc["fp32", "rows"] == 1
    assert "a1: ok, b2: wrong" in markdown(c)


def test_kernel_label_from_the_id():
    assert kernel_label("gemm:8x8x8|split_k_gemm|split_k=2|fp32", "gemm:8x8x8", "split_k_gemm") == \
        "split_k_gemm[split_k=2][fp32]"
    assert kernel_label("gemm:8x8x8|naive_gemm", "gemm:8x8x8", "naive_gemm") == "naive_gemm"
    assert kernel_label("custom", "gemm:8x8x8", "naive_gemm") == "custom"


def test_two_sides_timed_differently_are_said_so():
    """The GEMV benchmark timed with L2 emptied by reading, its sweep with L2 flushed by writing."""
    c = compare(os.path.join(ROOT, "reports", "results", "NVIDIA_H200", "bench_gemv"),
                os.path.join(ROOT, "reports", "results", "NVIDIA_H200", "gemv_sweep"))
    assert "by reading" in c.timers[0] and "by writing" in c.timers[1]
    assert "**The two sides were timed differently**" in markdown(c) and c.to_json()["b"]["timer"] == c.timers[1]
