"""Charts: time per step on a log scale, and achieved throughput on a roofline of the device's
measured ceilings."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
        ax.barh(range(len(rows)), [r["time_ms"] for r in rows], color=colors)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("time (ms, log)")
        ax.set_title(wl, fontsize=9)
    fig.suptitle(_caption(results), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def roofline_chart(results: dict, path: str):
    rows = [r for r in results["rows"] if r.get("status") == "ok" and r.get("tflops") and r.get("device") == "gpu"]
    if not rows:
        return None
    c = results.get("ceilings") or {}
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    if c.get("copy_gbps") and c.get("fp32_tflops"):
        bw, peak = c["copy_gbps"] / 1e3, c["fp32_tflops"]  # TB/s, TFLOP/s
        xs = [2**e for e in range(-4, 9)]
        ax.plot(xs, [min(peak, bw * x) for x in xs], "k-", lw=1,
                label=f"roofline: {c['copy_gbps']:.0f} GB/s copy, {peak:.1f} TFLOP/s cuBLAS fp32")
    markers = "os^vDP*Xhp<>"
    for n, (wl, group) in enumerate(_groups({"rows": rows}).items()):
        w = parse_workload(wl)
        ai = w.flops / w.min_bytes
        for r in group:
            ax.scatter(ai, r["tflops"], marker=markers[n % len(markers)], s=22,
                       color="tab:blue" if r.get("role") == "schedule" else "tab:red")
            ax.annotate(r["name"], (ai, r["tflops"]), fontsize=5, xytext=(3, 0), textcoords="offset points")
        ax.scatter([], [], marker=markers[n % len(markers)], color="k", label=wl)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of compulsory traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=6)
    ax.set_title(_caption(results), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _caption(results):
    p = results["provenance"]
    return f"{p['gpu']} · TVM {p['tvm']} · {p['commit']} · {p['date']}"
