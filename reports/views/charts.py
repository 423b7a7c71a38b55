"""Charts from a results DataFrame: time per step on a log scale, achieved throughput on a
roofline of the device's measured ceilings, and the ratios of two runs (``schedlab compare``)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from schedules import parse_workload  # noqa: E402

from .tables import ordered  # noqa: E402

COLORS = {"cublas": "tab:red", "cublas_tf32": "tab:orange", "tvm_dlight": "tab:green"}


def _timed_gpu(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "time_ms" not in df:
        return df.iloc[0:0]
    return df[(df["status"] == "ok") & df["time_ms"].notna() & (df.get("device") == "gpu")]


def time_chart(df: pd.DataFrame, path: str):
    timed = _timed_gpu(df)
    groups = [(w, ordered(g)) for w, g in timed.groupby("workload", sort=False)]
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.8), squeeze=False)
    for ax, (wl, rows) in zip(axes[0], groups):
        labels = [(f"{r['ladder']} " if isinstance(r.get("ladder"), str) else "") + r["name"] for _, r in rows.iterrows()]
        colors = ["tab:blue" if r == "schedule" else "tab:gray" for r in rows["role"]]
        times = rows["time_ms"].to_numpy()
        left = times.min() / 3
        ax.barh(range(len(rows)), times - left, left=left, color=colors)
        for y, t in enumerate(times):
            ax.text(t, y, f" {t:.3g}", va="center", fontsize=6)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(left, times.max() * 4)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("time (ms, log; blue: schedules, grey: baselines)", fontsize=7)
        ax.set_title(wl, fontsize=9)
    fig.suptitle(caption(df.attrs), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def roofline_chart(df: pd.DataFrame, path: str):
    timed = _timed_gpu(df)
    timed = timed[timed["tflops"].notna()] if "tflops" in timed else timed.iloc[0:0]
    if timed.empty:
        return None
    c = df.attrs.get("ceilings") or {}
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    if c.get("copy_gbps") and c.get("fp32_tflops"):
        bw, peak = c["copy_gbps"] / 1e3, c["fp32_tflops"]  # TB/s, TFLOP/s
        xs = np.logspace(-3, 9, 200, base=2)
        ax.plot(xs, np.minimum(peak, bw * xs), "k-", lw=1,
                label=f"measured: {c['copy_gbps']:.0f} GB/s copy, {peak:.1f} TFLOP/s cuBLAS fp32 8192³")
    markers = "os^vDP*Xhp<>"
    for n, (wl, group) in enumerate(timed.groupby("workload", sort=False)):
        w = parse_workload(wl)
        ai = w.flops / w.min_bytes
        marker = markers[n % len(markers)]
        colors = [COLORS.get(name, "tab:blue" if role == "schedule" else "tab:gray")
                  for name, role in zip(group["name"], group["role"])]
        ax.scatter([ai] * len(group), group["tflops"], marker=marker, s=24, alpha=0.8, color=colors)
        steps = group[group["role"] == "schedule"]
        marks = ([steps.loc[steps["tflops"].idxmax()]] if len(steps) else []) + \
            [r for _, r in group[group["name"] == "cublas"].iterrows()]
        for r in marks:
            ax.annotate(r["name"], (ai, r["tflops"]), fontsize=6, xytext=(4, -2), textcoords="offset points")
        ax.scatter([], [], marker=marker, color="k", label=wl)
    ax.scatter([], [], color="tab:blue", label="schedules")
    for name, color in COLORS.items():
        if name in set(timed["name"]):
            ax.scatter([], [], color=color, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of compulsory traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.legend(fontsize=6, loc="upper left")
    ax.set_title(caption(df.attrs), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def caption(meta: dict) -> str:
    p = meta.get("provenance", meta)
    return f"{p.get('gpu')} · TVM {p.get('tvm')} · {p.get('commit')} · {p.get('date')}"


def compare_chart(rows: pd.DataFrame, by: str, labels: tuple[str, str], path: str):
    """``schedlab compare``'s chart: each row's ratio (B's throughput over A's, log scale) as a dot
    in its group's line, the group's geometric mean as a bar; None where no row was timed on both
    sides."""
    timed = rows[rows["ratio"].notna()]
    if timed.empty:
        return None
    keys = timed[by].astype(object).where(timed[by].notna(), "(none)").astype(str)
    names = list(dict.fromkeys(keys))
    fig, ax = plt.subplots(figsize=(6.4, 1.2 + 0.45 * len(names)))
    for y, name in enumerate(names):
        r = timed.loc[keys == name, "ratio"].to_numpy()
        mean = float(np.exp(np.log(r).mean()))
        ax.barh(y, mean - 1, left=1, height=0.6, color="tab:blue", alpha=0.25)
        ax.scatter(r, np.full(len(r), y) + np.linspace(-0.2, 0.2, len(r)), s=10, color="tab:blue")
        ax.text(mean, y - 0.32, f"{mean:.3f}", ha="center", va="bottom", fontsize=7)
    ax.axvline(1, color="k", lw=1)
    ax.set_xscale("log")
    lo, hi = min(timed["ratio"].min(), 1.0), max(timed["ratio"].max(), 1.0)
    ticks = sorted({float(f"{t:.2g}") for t in np.geomspace(lo, hi, 5)} | {1.0})
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(len(names) - 0.5, -0.7)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel(f"{labels[1]}/{labels[0]}: throughput ratio per row (log; bar: geometric mean)", fontsize=8)
    ax.set_title(f"{labels[1]} against {labels[0]}, per {by}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
