"""``schedlab bench-gemm --llm``: the linear layers of language models as they run: bf16 in and out,
the weight stored N×K (``nt``, as PyTorch's ``Linear`` keeps it), M from one token (a decode step)
to a long prompt (prefill), in up to three forms: with the epilogue its model puts after it (a bias,
a GELU, the residual add, or none: ``model``), as the product alone (``plain``), and, from 65 rows on,
with a bias and the tanh GELU (``bias_gelu``: the epilogue cuBLASLt fuses, on every layer).

    schedlab bench-gemm --llm --out out/bench_llm [--models llama-3.1-8b,...] [--rows 1,16,...]
                        [--forms model,plain,bias_gelu | --no-epilogue]

Per layer and row count: cuBLAS of the same types (the product alone, ``torch.matmul`` into bf16),
where the layer has an epilogue cuBLASLt's fused one (``torch.addmm`` / ``torch._addmm_activation``,
where PyTorch reaches it) and eager PyTorch's unfused sequence, and the lab's choice
(``best_fp16_gemm``). Every result is checked against float64 first (the reference applies the same
epilogue and rounds to bf16 last), then timed (CUDA events, L2 emptied before each run, median).
Beside the times, the bytes the layer must move (the weight, the rows in, the rows out, the bias and
residual) over the time, as a share of the copy bandwidth measured in the same run: a few rows
against a large weight are bound by reading the weight, and that share says how close to the
bound a kernel is. A small layer cannot reach the copy bandwidth of a large copy (its launch and
the first bytes' latency are a good part of its time), so the run also times a copy that moves as
many bytes as each decode-sized layer does, under the same timer: ``% same-size copy`` is that
copy's time over the kernel's.

The layer sizes come from the models' published configurations (``config.json``): hidden size,
intermediate size, attention heads, key/value heads and head size (grouped-query attention makes the
fused QKV projection hidden + 2 · kv_heads · head_dim wide), which linears carry a bias, and the MLP's
activation. A gated MLP (SiLU(gate) · up, Llama and Qwen) multiplies two products, which no GEMM
epilogue computes: its fused gate-and-up projection runs as the product alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schedules import ScheduleParamError, parse_workload

from ..views import charts
from ..views import tables as T
from .bench import applies, run_bench, write_bench

CHOICE = "best_fp16_gemm"
LIBRARY = ("cublas", "cublaslt_fused", "torch_eager")
# one decode step, a few speculative or batched tokens, short and long prompts; not all powers of two
ROWS = (1, 16, 61, 256, 1000, 2000, 4096, 8192)
DECODE_ROWS = 64  # up to this many rows, the weight's read is the bound: the bandwidth columns apply
PREFILL_ROWS = 1024  # from this many rows on, a product runs at the tensor cores' rate (the summary's prefill)
# the forms a layer is timed in: its model's epilogue, the product alone, a bias and the tanh GELU (past
# DECODE_ROWS rows: what cuBLASLt's fused epilogue computes, so that every layer meets it)
FORMS = ("model", "plain", "bias_gelu")
BIAS_GELU = ["bias", "gelu_tanh"]


@dataclass(frozen=True)
class Model:
    """A decoder's linear layers, from its published configuration."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool = False      # the QKV projection has a bias (Qwen2)
    linear_bias: bool = False   # every linear has a bias (Phi-2, GPT-2)
    gated: bool = True          # SiLU(gate) · up (Llama, Qwen); else up, activation, down
    activation: str = "gelu_tanh"  # the MLP's activation where it is not gated
    parallel_block: bool = False  # attention and MLP add into the residual together (Phi-2)

    def layers(self) -> list[tuple[str, int, int, list[str]]]:
        """``(layer, N, K, epilogue words)`` per linear of a decoder block, in the order they run. The
        output projection and the MLP's last product add into the residual stream (``residual``)."""
        qkv = self.hidden + 2 * self.kv_heads * self.head_dim
        bias = ["bias"] if self.linear_bias else []
        out = [("qkv", qkv, self.hidden, ["bias"] if self.qkv_bias or self.linear_bias else []),
               ("o_proj", self.hidden, self.hidden, bias + ([] if self.parallel_block else ["residual"]))]
        if self.gated:
            out.append(("gate_up", 2 * self.intermediate, self.hidden, []))
        else:
            out.append(("up", self.intermediate, self.hidden, bias + [self.activation]))
        out.append(("down", self.hidden, self.intermediate, bias + ["residual"]))
        return out


# config.json of each model on its model page (hidden_size, intermediate_size, num_attention_heads,
# num_key_value_heads, head_dim = hidden / heads where not given; biases and activation as in the modeling code)
MODELS = {m.name: m for m in (
    Model("llama-3.1-8b", 4096, 14336, 32, 8, 128),
    Model("qwen2.5-7b", 3584, 18944, 28, 4, 128, qkv_bias=True),
    Model("phi-2", 2560, 10240, 32, 32, 80, linear_bias=True, gated=False, activation="gelu_tanh",
          parallel_block=True),
    Model("llama-3.1-70b", 8192, 28672, 64, 8, 128),
)}
DEFAULT_MODELS = ("llama-3.1-8b", "qwen2.5-7b", "phi-2")


def layer_workload(m: int, n: int, k: int, words: list[str]) -> str:
    """The bf16 ``nt`` workload of a layer with ``m`` rows, its output bf16, with the epilogue ``words``
    (none where empty)."""
    return ":".join([f"gemm:{m}x{n}x{k}", "bfloat16", "nt", "out=bfloat16", *words])


def form_words(form: str, words: list[str], m: int) -> list[str] | None:
    """The epilogue words of a layer with ``m`` rows in ``form`` (:data:`FORMS`), None where the
    form does not apply (``bias_gelu`` on a decode-sized product)."""
    if form == "model":
        return list(words)
    if form == "plain":
        return []
    if form == "bias_gelu":
        return BIAS_GELU if m > DECODE_ROWS else None
    raise ScheduleParamError(f"--forms: {form!r} is not one of {', '.join(FORMS)}")


def plan_layers(models, rows, forms=("model",)) -> list[dict]:
    """One entry per (model, layer, rows, form): the workload and where it comes from. The same
    workload (a shape and epilogue in two models, or two forms that coincide) is timed once, under
    the first model and form that have it."""
    seen, out = {}, []
    for form in forms:
        for name in models:
            for layer, n, k, words in MODELS[name].layers():
                for m in rows:
                    ep = form_words(form, words, m)
                    if ep is None:
                        continue
                    wl = layer_workload(m, n, k, ep)
                    if wl in seen:
                        seen[wl]["also"].append(f"{name} {layer} ({form})")
                        continue
                    seen[wl] = {"workload": wl, "model": name, "layer": layer, "rows": m, "form": form, "also": []}
                    out.append(seen[wl])
    return out


def make_jobs(layers: list[dict]) -> list[dict]:
    """cuBLAS, cuBLASLt's fused epilogue and eager PyTorch where the layer has them, and the lab's
    choice, per layer workload."""
    jobs = []
    for entry in layers:
        for name in (*LIBRARY, CHOICE):
            if applies(name, entry["workload"]):
                jobs.append({"workload": entry["workload"], "name": name})
    return jobs


def parse_list(text: str | None, default, what: str, convert=str):
    """``--models`` / ``--rows``: a comma-separated list, each entry checked (one-line errors)."""
    if text is None:
        return list(default)
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ScheduleParamError(f"--{what}: empty list")
    out = []
    for t in items:
        try:
            out.append(convert(t))
        except ValueError:
            raise ScheduleParamError(f"--{what}: {t!r} is not a whole number") from None
    return out


def check_args(models: list[str], rows: list[int], forms: list[str] = ("model",)):
    for form in forms:
        form_words(form, [], 1)  # an unknown form: its one-line error
    for name in models:
        if name not in MODELS:
            raise ScheduleParamError(f"--models: {name!r} is not one of {', '.join(MODELS)}")
    for m in rows:
        if not 1 <= m <= 65536:
            raise ScheduleParamError(f"--rows: {m} is not between 1 and 65536")
    for name in models:  # a layer the lab cannot describe: its one-line error before anything runs
        for layer, n, k, words in MODELS[name].layers():
            parse_workload(layer_workload(rows[0], n, k, words))


def tidy(df: pd.DataFrame, layers: list[dict]) -> pd.DataFrame:
    """The results with the layer's model, name and rows, and ``pct_copy_bw``: the layer's bytes
    (:attr:`Gemm.min_bytes`) over the time, as a share of the copy bandwidth measured in the run."""
    where = {e["workload"]: e for e in layers}
    df = df.copy()
    df["model"] = df["workload"].map(lambda w: where.get(w, {}).get("model"))
    df["layer"] = df["workload"].map(lambda w: where.get(w, {}).get("layer"))
    df["form"] = df["workload"].map(lambda w: where.get(w, {}).get("form"))
    df["also"] = df["workload"].map(lambda w: ", ".join(where.get(w, {}).get("also", [])) or None)
    copy = (df.attrs.get("ceilings") or {}).get("copy_gbps")
    df["pct_copy_bw"] = 100 * df["gbps"] / copy if copy else np.nan
    same = (df.attrs.get("ceilings") or {}).get("copy_us") or {}
    copy_us = df["workload"].map(lambda w: same.get(str(parse_workload(w).min_bytes), np.nan))
    df["pct_same_size_copy"] = 100 * copy_us / (df["time_ms"] * 1e3) if "time_ms" in df else np.nan
    return df


def copy_bytes(layers: list[dict]) -> list[int]:
    """The bytes each decode-sized layer moves (:attr:`Gemm.min_bytes`): the copies the run times
    beside them (:func:`reports.engine.harness.measure_ceilings`)."""
    wls = [parse_workload(e["workload"]) for e in layers]
    return sorted({w.min_bytes for w in wls if decode_sized(w)})


def per_layer(df: pd.DataFrame) -> pd.DataFrame:
    """One row per layer workload: each kernel's µs, the lab's % of cuBLAS (and of cuBLASLt's fused
    epilogue, × eager), and, for decode-sized rows, the share of the copy bandwidth."""
    rows = []
    for wl, g in df.groupby("workload", sort=False):
        by = {r["name"]: r for r in g.to_dict("records")}
        lab, cub = by.get(CHOICE, {}), by.get("cublas", {})
        w = parse_workload(wl)
        decode = decode_sized(w)

        def us(r):
            return T.fmt(r.get("time_ms", np.nan) * 1e3 if r.get("status") == "ok" else np.nan, ".1f")

        rows.append({
            "model": lab.get("model") or cub.get("model"), "layer": lab.get("layer") or cub.get("layer"),
            "form": lab.get("form") or cub.get("form"),
            "M": w.M, "N×K": f"{w.N}×{w.K}", "epilogue": " ".join(w.epilogue.words()) if w.epilogue else "",
            "cuBLAS µs": us(cub), "cuBLASLt fused µs": us(by.get("cublaslt_fused", {})),
            "eager µs": us(by.get("torch_eager", {})), "lab µs": us(lab),
            "% cuBLAS": T.fmt(lab.get("pct_cublas"), ".0f"),
            "% cuBLASLt": T.fmt(lab.get("pct_cublaslt"), ".0f"),
            "× eager": T.fmt(lab.get("speedup_vs_eager"), ".2f"),
            "lab % copy BW": T.fmt(lab.get("pct_copy_bw"), ".0f") if decode else "",
            "cuBLAS % copy BW": T.fmt(cub.get("pct_copy_bw"), ".0f") if decode else "",
            "lab % same-size copy": T.fmt(lab.get("pct_same_size_copy"), ".0f") if decode else "",
            "lab's choice": _choice(lab),
        })
    return pd.DataFrame(rows)


def decode_sized(wl) -> bool:
    """A few rows (or columns) against the weight: reading it is the bound (:data:`DECODE_ROWS`)."""
    return min(wl.M, wl.N) <= DECODE_ROWS


def _choice(row: dict) -> str:
    """The lab's choice where it was built (timed, or built without a GPU), else its status and the
    first line of its error."""
    if row.get("status") in ("ok", "no-gpu"):
        return str(row.get("chosen") or "")
    error = str(row.get("error") or "").strip().splitlines()
    return f"**{row.get('status')}**" + (f": {error[0][:60]}" if error else "")


def _geomean(values) -> float:
    v = np.asarray([x for x in values if x == x and x > 0], dtype=float)
    return float(np.exp(np.log(v).mean())) if len(v) else float("nan")


# the summary's groups (:func:`regime`), in the order the table shows them
REGIMES = (f"decode (M ≤ {DECODE_ROWS})", f"mid ({DECODE_ROWS} < M < {PREFILL_ROWS})",
           f"prefill (M ≥ {PREFILL_ROWS}), no epilogue", f"prefill (M ≥ {PREFILL_ROWS}), bias + activation",
           f"prefill (M ≥ {PREFILL_ROWS}), other epilogues")


def regime(wl) -> str:
    """The summary's group of a layer workload, as the targets read: decode-sized (the weight's read
    bounds it), between, and from PREFILL_ROWS rows on split by epilogue: none (against cuBLAS), a
    bias with an activation (against cuBLASLt's fused epilogue), the others (a bias alone, a residual)."""
    decode, mid, plain, fused, other = REGIMES
    if decode_sized(wl):
        return decode
    if wl.M < PREFILL_ROWS:
        return mid
    ep = wl.epilogue
    if ep is None:
        return plain
    return fused if ep.bias and ep.activation else other


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per regime (:func:`regime`), the lab's choice against the libraries: geometric means of
    % cuBLAS, % cuBLASLt fused and × eager, the lowest % cuBLAS, and for decode the geometric mean
    and lowest share of the copy bandwidth (the lab's; cuBLAS's geometric mean) and of a same-size copy."""
    lab = df[df["name"] == CHOICE].copy()
    cub = df[df["name"] == "cublas"].set_index("workload")
    lab["_regime"] = lab["workload"].map(lambda w: regime(parse_workload(w)))
    out = []
    order = {r: i for i, r in enumerate(REGIMES)}
    for name, g in sorted(lab.groupby("_regime", sort=False), key=lambda x: order.get(x[0], 99)):
        ok = g[g["status"] == "ok"]
        row = {"regime": name, "layers": len(g), "measured": len(ok), "failed": int((g["status"] != "ok").sum()),
               "geomean % cuBLAS": T.fmt(_geomean(ok["pct_cublas"]), ".1f"),
               "min % cuBLAS": T.fmt(ok["pct_cublas"].min() if len(ok) else np.nan, ".1f"),
               "geomean % cuBLASLt fused": T.fmt(_geomean(ok.get("pct_cublaslt", pd.Series(dtype=float))), ".1f"),
               "geomean × eager": T.fmt(_geomean(ok.get("speedup_vs_eager", pd.Series(dtype=float))), ".2f")}
        if name == REGIMES[0]:
            row["lab % copy BW"] = T.fmt(_geomean(ok["pct_copy_bw"]), ".1f")
            row["min lab % copy BW"] = T.fmt(ok["pct_copy_bw"].min() if len(ok) else np.nan, ".1f")
            c = cub.reindex(ok["workload"])
            row["cuBLAS % copy BW"] = T.fmt(_geomean(c["pct_copy_bw"][c["status"] == "ok"]), ".1f")
            row["lab % same-size copy"] = T.fmt(_geomean(ok.get("pct_same_size_copy", pd.Series(dtype=float))), ".1f")
            row["cuBLAS % same-size copy"] = T.fmt(
                _geomean(c.get("pct_same_size_copy", pd.Series(dtype=float))[c["status"] == "ok"]), ".1f")
        out.append(row)
    return pd.DataFrame(out)


def markdown(df: pd.DataFrame) -> str:
    timer = df["timer"].dropna().iloc[0] if "timer" in df and df["timer"].notna().any() else "no GPU: nothing timed"
    copy = (df.attrs.get("ceilings") or {}).get("copy_gbps")
    models = df.attrs.get("models", [])
    lines = [f"# Language-model linear layers: {df.attrs['provenance']['gpu']}", "", T.provenance_line(df.attrs), "",
             f"Models: {', '.join(models)}; rows: {', '.join(map(str, df.attrs.get('rows', [])))}; bf16 inputs and "
             f"output, weight N×K (nt); forms: {', '.join(df.attrs.get('forms', ['model']))} (model: the model's "
             f"epilogue; plain: none; bias_gelu: a bias and the tanh GELU, past {DECODE_ROWS} rows). Timer: {timer}; "
             f"median; every result checked against float64 first. % cuBLAS: against cuBLAS's product alone in the "
             f"same types; % cuBLASLt: against its fused epilogue where PyTorch reaches it (a bias, with ReLU or the "
             f"tanh GELU); × eager: eager PyTorch's time over the lab's. % copy BW: the layer's bytes over the time, "
             f"as a share of the copy bandwidth measured in this run "
             f"({T.fmt(copy, '.0f') + ' GB/s' if copy else 'not measured'}), for M ≤ {DECODE_ROWS}; % same-size copy: "
             f"the time of a copy moving the layer's bytes (half read, half written; same timer) over the kernel's.", "",
             T.markdown_table(summary(df)), "## Every layer", "", T.markdown_table(per_layer(df))]
    return "\n".join(lines)


def command(args) -> int:
    """``schedlab bench-gemm --llm`` (``args``: the command's options)."""
    models = parse_list(args.models, DEFAULT_MODELS, "models")
    rows = parse_list(args.rows, ROWS, "rows", int)
    forms = ["plain"] if args.no_epilogue else parse_list(args.forms, FORMS, "forms")
    check_args(models, rows, forms)
    layers = plan_layers(models, rows, forms)
    meta = {"models": models, "rows": rows, "forms": forms,
            "layers": [{k: v for k, v in e.items() if k != "also"} for e in layers]}
    df = run_bench(make_jobs(layers), args.out, "bench-gemm-llm", workers=args.workers, timeout=args.timeout,
                   budget_s=args.budget, progress=not args.quiet, meta=meta, copy_bytes=copy_bytes(layers))
    df = tidy(df, layers)
    md = markdown(df)
    write_bench(df, args.out, md)
    charts.llm_chart(df, CHOICE, os.path.join(args.out, "llm_layers.png"))
    print(md)
    return 0
