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
    fig = roofline_figure(df)
    if fig is None:
        return None
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def roofline_figure(df: pd.DataFrame):
    """Achieved TFLOP/s per workload at its arithmetic intensity under the roof of the measured
    ceilings; the fastest step and cuBLAS of each workload labelled (labels that would overlap
    stacked apart, :func:`place_labels`), the legend outside the axes so that it covers neither
    the roof nor a point. None when nothing was timed on a GPU."""
    timed = _timed_gpu(df)
    timed = timed[timed["tflops"].notna()] if "tflops" in timed else timed.iloc[0:0]
    if timed.empty:
        return None
    c = df.attrs.get("ceilings") or {}
    fig, ax = plt.subplots(figsize=(8.2, 4.4))
    groups = [(parse_workload(wl), g) for wl, g in timed.groupby("workload", sort=False)]
    intensities = [w.flops / w.min_bytes for w, _ in groups]
    lo, hi = min(intensities), max(intensities)
    top, bottom = float(timed["tflops"].max()), float(timed["tflops"].min())
    if c.get("copy_gbps") and c.get("fp32_tflops"):
        bw, peak = c["copy_gbps"] / 1e3, c["fp32_tflops"]  # TB/s, TFLOP/s
        lo, hi, top = min(lo, peak / bw), max(hi, peak / bw), max(top, peak)
        xs = np.logspace(np.log2(lo / 4), np.log2(hi * 4), 200, base=2)
        ax.plot(xs, np.minimum(peak, bw * xs), "k-", lw=1,
                label=f"measured roof: {c['copy_gbps']:.0f} GB/s copy,\n{peak:.1f} TFLOP/s cuBLAS fp32 8192³")
    markers = "os^vDP*Xhp<>"
    labels = []
    for n, ((w, group), ai) in enumerate(zip(groups, intensities)):
        marker = markers[n % len(markers)]
        colors = [COLORS.get(name, "tab:blue" if role == "schedule" else "tab:gray")
                  for name, role in zip(group["name"], group["role"])]
        ax.scatter([ai] * len(group), group["tflops"], marker=marker, s=24, alpha=0.8, color=colors)
        steps = group[group["role"] == "schedule"]
        marks = ([steps.loc[steps["tflops"].idxmax()]] if len(steps) else []) + \
            [r for _, r in group[group["name"] == "cublas"].iterrows()]
        labels += [((ai, float(r["tflops"])), r["name"]) for r in marks]
        ax.scatter([], [], marker=marker, color="k", label=str(w))
    ax.scatter([], [], color="tab:blue", label="schedules")
    for name, color in COLORS.items():
        if name in set(timed["name"]):
            ax.scatter([], [], color=color, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(lo / 4, hi * 4)  # two octaves of room either side: the labels to the right of the points
    ax.set_ylim(bottom / 2, top * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of compulsory traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    ax.set_title(caption(df.attrs), fontsize=7)
    fig.tight_layout()
    place_labels(ax, [p for p, _ in labels], [t for _, t in labels])  # after the layout: in its final place
    return fig


def place_labels(ax, points, texts, fontsize: float = 6, offset_pt: float = 4, gap_pt: float = 1):
    """Label ``points`` (data coordinates) with ``texts``, each to the right of its point; where
    labels would overlap (two points at nearly the same place: the fastest step and cuBLAS), the
    lower one moves down below the other, with a thin line back to its point. The placement is
    measured on the figure's renderer, top label first, so it is the same on every run. Returns
    the annotations."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    px_per_pt = fig.dpi / 72
    anchors = [ax.transData.transform(p) for p in points]
    boxes = []
    for p, t in zip(points, texts):  # measured where they would go unmoved
        probe = ax.annotate(t, p, xytext=(offset_pt, 0), textcoords="offset points", fontsize=fontsize, va="center")
        boxes.append(probe.get_window_extent(renderer))
        probe.remove()
    placed, shifts = [], [0.0] * len(points)
    for i in sorted(range(len(points)), key=lambda i: (-anchors[i][1], anchors[i][0], texts[i])):
        box, dy = boxes[i], 0.0
        while True:
            hits = [b for b in placed if box.x0 < b.x1 and b.x0 < box.x1 and box.y0 + dy < b.y1 and b.y0 < box.y1 + dy]
            if not hits:
                break
            dy = min(b.y0 for b in hits) - gap_pt * px_per_pt - box.y1  # its top just below the lowest one hit
        placed.append(box.translated(0, dy))
        shifts[i] = dy
    out = []
    for p, t, dy, box in zip(points, texts, shifts, boxes):
        moved = abs(dy) > box.height / 2
        out.append(ax.annotate(t, p, xytext=(offset_pt, dy / px_per_pt), textcoords="offset points", fontsize=fontsize,
                               va="center", arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.5",
                                                        "shrinkA": 0, "shrinkB": 2} if moved else None))
    return out


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


def llm_chart(df: pd.DataFrame, choice: str, path: str):
    """``bench-gemm --llm``'s chart: the lab's choice as a % of cuBLAS (the product alone, same
    types) against the rows M (log), one line per model's layer, of the products timed without an
    epilogue where the run has them; None where nothing was timed."""
    lab = df[(df["name"] == choice) & df["pct_cublas"].notna()]
    plain = lab["workload"].map(lambda w: parse_workload(w).epilogue is None).astype(bool)
    if plain.any():
        lab = lab[plain]
    if lab.empty:
        return None
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    for (model, layer), g in lab.groupby(["model", "layer"], sort=False):
        g = g.sort_values("m")
        ax.plot(g["m"], g["pct_cublas"], marker="o", ms=3, lw=1, label=f"{model} {layer}")
    ax.axhline(100, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("rows M (tokens; log)", fontsize=8)
    ax.set_ylabel("% of cuBLAS (same types)", fontsize=8)
    ax.set_title(f"linear layers, bf16, the lab's choice: {caption(df.attrs)}", fontsize=7)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, ax, path)


def _save(fig, ax, path: str):
    """A benchmark chart's last strokes: a light grid, the layout tightened, written at 90 dpi."""
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def random_chart(df: pd.DataFrame, path: str):
    """``bench-gemm --random``'s chart: each shape's % of cuBLAS (the lab's choice, per precision)
    against M·N·K (log); None where nothing was timed."""
    choices = df[df["name"].str.startswith("best_") & df["pct_cublas"].notna()]
    if choices.empty:
        return None
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for prec, g in choices.groupby("precision", sort=False):
        x = [parse_workload(w).flops / 2 for w in g["workload"]]
        ax.scatter(x, g["pct_cublas"], s=18, alpha=0.8, label=prec)
    ax.axhline(100, color="k", lw=0.8)
    ax.axhline(90, color="gray", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("M·N·K (log)")
    ax.set_ylabel("% of cuBLAS of the same precision")
    p = df.attrs.get("provenance", {})
    ax.set_title(f"random shapes (seed {df.attrs.get('seed')}), {p.get('gpu')} · {p.get('commit')}", fontsize=8)
    ax.legend(fontsize=7)
    return _save(fig, ax, path)


def gemv_chart(d: pd.DataFrame, copy_gbps, gpu: str, path: str):
    """``bench-gemv``'s chart: GB/s (L2 emptied by reading) of each variant against N for the M = 16384
    shapes (``d``: bench_gemv's derived rows), gemv_dispatch's write-flush figure dotted, the copy
    bandwidth as a line; None where nothing was timed."""
    if d.empty:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    d = d.assign(n=d["workload"].str.split("x").str[1].astype(int))
    for lab, g in d.groupby("label", sort=False):
        g = g.sort_values("n")
        ax.plot(g["n"], g["gbps_read"], marker="o", label=lab, lw=2.2 if lab in ("gemv_dispatch", "cublas") else 1.2)
    disp = d[d["label"] == "gemv_dispatch"].sort_values("n")
    if len(disp):
        ax.plot(disp["n"], disp["gbps_write"], ls=":", color="gray", marker=".", label="gemv_dispatch, write flush")
    if copy_gbps:
        ax.axhline(copy_gbps, color="k", ls="--", lw=1, label="copy bandwidth")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (M = 16384, fp32)")
    ax.set_ylabel("GB/s (L2 emptied by reading)")
    ax.set_title(f"GEMV bandwidth, {gpu}", fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, ax, path)
