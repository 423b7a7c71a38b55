"""Charts: time per step on a log scale, and achieved throughput on a roofline of the device's
measured ceilings."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from schedules import parse_workload  # noqa: E402


def _groups(results):
    by_wl: dict[str, list[dict]] = {}
    for r in results["rows"]:
        by_wl.setdefault(r["workload"], []).append(r)
    return by_wl


def time_chart(results: dict, path: str):
    groups = {w: [r for r in g if r.get("status") == "ok" and r.get("time_ms") and r.get("device") == "gpu"]
              for w, g in _groups(results).items()}
    groups = {w: g for w, g in groups.items() if g}
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.8), squeeze=False)
    for ax, (wl, rows) in zip(axes[0], groups.items()):
        rows = sorted(rows, key=lambda r: (r.get("role") != "schedule", r.get("step", 0)))
        labels = [(f"{r['step']} " if r.get("step") else "") + r["name"] for r in rows]
        colors = ["tab:blue" if r.get("role") == "schedule" else "tab:gray" for r in rows]
        times = [r["time_ms"] for r in rows]
        left = min(times) / 3
        ax.barh(range(len(rows)), [t - left for t in times], left=left, color=colors)
        for y, t in enumerate(times):
            ax.text(t, y, f" {t:.3g}", va="center", fontsize=6)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(left, max(times) * 4)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("time (ms, log; blue: schedules, grey: baselines)", fontsize=7)
        ax.set_title(wl, fontsize=9)
    fig.suptitle(_caption(results), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


COLORS = {"cublas": "tab:red", "tvm_dlight": "tab:green"}


def roofline_chart(results: dict, path: str):
    rows = [r for r in results["rows"] if r.get("status") == "ok" and r.get("tflops") and r.get("device") == "gpu"]
    if not rows:
        return None
    c = results.get("ceilings") or {}
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    if c.get("copy_gbps") and c.get("fp32_tflops"):
        bw, peak = c["copy_gbps"] / 1e3, c["fp32_tflops"]  # TB/s, TFLOP/s
        xs = np.logspace(-3, 9, 200, base=2)
        ax.plot(xs, np.minimum(peak, bw * xs), "k-", lw=1,
                label=f"measured: {c['copy_gbps']:.0f} GB/s copy, {peak:.1f} TFLOP/s cuBLAS fp32 8192³")
    markers = "os^vDP*Xhp<>"
    for n, (wl, group) in enumerate(_groups({"rows": rows}).items()):
        w = parse_workload(wl)
        ai = w.flops / w.min_bytes
        marker = markers[n % len(markers)]
        for r in group:
            ax.scatter(ai, r["tflops"], marker=marker, s=24, alpha=0.8,
                       color=COLORS.get(r["name"], "tab:blue" if r.get("role") == "schedule" else "tab:gray"))
        best = max((r for r in group if r.get("role") == "schedule"), key=lambda r: r["tflops"], default=None)
        for r in [best] + [r for r in group if r["name"] == "cublas"]:
            if r is not None:
                ax.annotate(r["name"], (ai, r["tflops"]), fontsize=6, xytext=(4, -2), textcoords="offset points")
        ax.scatter([], [], marker=marker, color="k", label=wl)
    ax.scatter([], [], color="tab:blue", label="schedules")
    for name, color in COLORS.items():
        ax.scatter([], [], color=color, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of compulsory traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.legend(fontsize=6, loc="upper left")
    ax.set_title(_caption(results), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _caption(results):
    p = results["provenance"]
    return f"{p['gpu']} · TVM {p['tvm']} · {p['commit']} · {p['date']}"
