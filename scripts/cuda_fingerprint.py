"""Fingerprint the CUDA every step generates, to check that a change of the code's structure
changes no kernel: ``--write FILE`` records, for each step and each test workload it takes, a hash
of the CUDA source TVM generates (and, for a ``best_*`` step, the step and configuration it chose);
``--compare FILE`` generates the same again and lists every difference (exit 1 if any).

    python -m scripts.cuda_fingerprint --write before.json     # on the old commit
    python -m scripts.cuda_fingerprint --compare before.json   # on the new one

Only TVM's code generation runs (no nvcc, no GPU); the CUDA is the source ``tvm.compile`` emits
for ``sm_90a`` under the pass options the step's configuration asks for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

GEMM_SHAPES = ("gemm:1024x512x2048", "gemm:1000x500x2000", "gemm:3x5x7", "gemm:1x4097x1", "gemm:1000x500x2001",
               "gemm:4096x4096x4096", "gemm:100x300x150", "gemm:2999x4001x17", "gemm:64x2048x1024")
GEMV_SHAPES = {"gemv": ("gemv:16384x16", "gemv:16384x32", "gemv:16384x128", "gemv:16384x17", "gemv:1x4097",
                        "gemv:3x5", "gemv:1000x130", "gemv:8192x8192"),
               "gemv_t": ("gemv_t:16384x128", "gemv_t:1x4097", "gemv_t:1000x17", "gemv_t:3x5")}
LAYOUT_SHAPES = ("gemm:1024x512x2048", "gemm:1000x500x2001")
BMM_SHAPES = ("bmm:4x256x128x64", "bmm:3x100x60x70")
# 8-bit float inputs in the forms the FP8 steps take (nt; the shapes above are per-tensor scaled at most):
# each scaling, a mixed pair, an epilogue, a 16-bit output, ragged tiles, K not a multiple of 16
FP8_WORKLOADS = ("gemm:4096x4096x4096:float8_e4m3fn:nt:out=bfloat16",
                 "gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=row:out=bfloat16:bias:gelu_tanh:residual",
                 "gemm:4096x4096x4096:float8_e4m3fn:nt:scale=block:out=bfloat16",
                 "gemm:1000x520x2000:float8_e4m3fn:b=float8_e5m2:nt:scale=block",
                 "gemm:1000x500x2001:float8_e4m3fn:nt:scale=row:out=bfloat16")


# Knobs that no default configuration turns on, each at a workload it takes: their kernels are built
# from code paths of their own (stream-K's producer and fix-up, split-K's sum, the FP8 block-scaled
# variants, one consumer warpgroup, split-K summed in the cluster, ping-pong consumers, padded rows of whole
# lines), which the defaults above never reach.
# Each job: step @ workload {params}.
KNOB_JOBS = (("persistent_gemm", "gemm:1024x512x2048:bfloat16", {"stream_k": True}),
             ("persistent_gemm", "gemm:1000x500x2000:float16", {"split_k": 3}),
             ("tma_tf32_gemm", "gemm:1000x1000x2000", {"stream_k": True}),
             ("fp8_block_scaled_gemm", FP8_WORKLOADS[2], {"pipelined": True, "pipe_tiles": 8}),
             ("fp8_block_scaled_gemm", FP8_WORKLOADS[3], {"pingpong": True, "block_m": 64, "stages": 8}),
             ("fp8_tma_gemm", FP8_WORKLOADS[0], {"pingpong": True, "block_n": 128, "stages": 6}),
             ("fp8_block_scaled_gemm", FP8_WORKLOADS[2], {"pipelined": True, "scales_in_ring": True}),
             ("persistent_gemm", "gemm:61x4096x4096:bfloat16:nt:out=bfloat16:residual",
              {"block_m": 64, "consumers": 1, "block_n": 128, "stages": 8, "split_k": 3}),
             ("persistent_gemm", "gemm:61x2560x2560:bfloat16:nt:out=bfloat16:bias",
              {"block_n": 128, "stages": 6, "split_k": 4, "cluster_sum": True}),
             ("persistent_gemm", "gemm:1000x520x2000:bfloat16:nt:out=bfloat16:bias:gelu_tanh",
              {"pingpong": True, "block_m": 128, "block_n": 128, "stages": 6, "staged_store": True, "sms": 5}),
             ("persistent_gemm", "bmm:3x500x704x256:float16", {"pingpong": True, "block_n": 128, "stages": 6,
                                                              "staged_store": True}),
             ("tma_tf32_gemm", "gemm:1001x777x2999", {"pad_operands": True, "pad_pitch": 128}),
             # the few-token kernels' own plans (the shapes above give them 64 tokens or none): row blocks
             # that fill the SMs, the mirror with ragged rows, K slices summed in the cluster, another layout
             ("decode_gemm", "gemm:16x6144x4096:bfloat16:nt:out=bfloat16", {}),
             ("decode_gemm", "gemm:4095x24x1000:float16:nt:out=float16:residual", {}),
             ("decode_gemm", "gemm:8x2048x4096:bfloat16:nt:out=bfloat16:bias:silu", {}),
             ("thin_tc_gemm", "gemm:13x3000x1001:float16:out=float16", {}))


def jobs() -> list[tuple[str, str]]:
    """(step, workload) pairs: each step at the test workloads of its kind, in each input type it
    takes, each layout it takes, and batched where it takes a batch; then :data:`KNOB_JOBS` (the
    workload followed by the parameters, JSON)."""
    from schedules import all_schedules

    out = []
    for spec in all_schedules():
        if spec.kind == "gemm":
            texts = list(GEMM_SHAPES)
            texts += [f"{s}:{lay}" for s in LAYOUT_SHAPES for lay in spec.layouts if lay != "nn"]
            if spec.batched:
                texts += [f"{s}:{lay}" for s in BMM_SHAPES for lay in ("nn", "nt")]
        else:
            texts = list(GEMV_SHAPES[spec.kind])
        for dtype in spec.input_dtypes:
            for text in texts:
                head, _, rest = text.partition(":")
                shape, _, layout = rest.partition(":")
                wl = f"{head}:{shape}" + ("" if dtype == "float32" else f":{dtype}") + (f":{layout}" if layout else "")
                out.append((spec.name, wl))
        if any(d.startswith("float8") for d in spec.input_dtypes):
            out += [(spec.name, wl) for wl in FP8_WORKLOADS]
    names = {spec.name for spec in all_schedules()}
    out += [(name, f"{wl} {json.dumps(params, sort_keys=True)}") for name, wl, params in KNOB_JOBS if name in names]
    return out


def _chosen(spec, cfg, wl):
    """A ``best_*`` step's choice (step, configuration) for ``wl``, or None for a plain step."""
    choose = getattr(cfg, "choose", None)
    if callable(choose):  # the StepConfig protocol
        choice = choose(wl)
        return (choice.step, choice.config) if choice is not None else None
    chosen = getattr(cfg, "chosen", None)  # before it (kept so that old commits can be fingerprinted)
    return chosen(wl) if callable(chosen) else None


def fingerprint(job: tuple[str, str]) -> tuple[str, str, dict]:
    import tvm

    from schedules import get, parse_workload
    from schedules.common import pass_config_of, with_build_annotations
    from schedules.errors import ScheduleParamError

    name, text = job
    try:
        wl_text, _, params = text.partition(" ")  # a knob job: the workload, then its parameters (JSON)
        spec, wl = get(name), parse_workload(wl_text)
        cfg = spec.config(**json.loads(params)) if params else spec.config()
        try:
            spec.validate(wl, cfg)
        except ScheduleParamError as exc:
            return name, text, {"refused": str(exc)}
        chosen = _chosen(spec, cfg, wl)
        build_cfg = chosen[1] if chosen else cfg
        sch = spec.build(wl, cfg)
        target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
        with tvm.transform.PassContext(opt_level=3, config=pass_config_of(build_cfg)), target:
            ex = tvm.compile(with_build_annotations(getattr(sch, "mod", sch)), target=target)
        source = ex.mod.imports[0].inspect_source()
        entry = {"cuda_sha256": hashlib.sha256(source.encode()).hexdigest(), "cuda_bytes": len(source)}
        if chosen:
            entry["chosen"] = f"{chosen[0]} {chosen[1]!r}"
        return name, text, entry
    except Exception as exc:  # noqa: BLE001 - recorded: an error must stay the same error
        return name, text, {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}


def collect(workers: int, steps: list[str] | None = None) -> dict:
    todo = [j for j in jobs() if not steps or j[0] in steps]
    out: dict = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, (name, text, entry) in enumerate(pool.map(fingerprint, todo, chunksize=4), 1):
            out[f"{name} @ {text}"] = entry
            if i % 50 == 0:
                print(f"  {i}/{len(todo)}", file=sys.stderr, flush=True)
    return out


def compare(old: dict, new: dict) -> list[str]:
    lines = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            lines.append(f"missing now: {key}")
        elif key not in old:
            lines.append(f"new: {key}")
        elif old[key] != new[key]:
            lines.append(f"differs: {key}: {old[key]} -> {new[key]}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="FILE", help="record the fingerprints in FILE")
    group.add_argument("--compare", metavar="FILE", help="compare with the fingerprints in FILE")
    ap.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--steps", help="comma-separated step names: fingerprint only these (both runs must name the same)")
    args = ap.parse_args(argv)
    new = collect(args.workers, args.steps.split(",") if args.steps else None)
    if args.write:
        with open(args.write, "w") as f:
            json.dump(new, f, indent=1, sort_keys=True)
        print(f"{len(new)} fingerprints written to {args.write}")
        return 0
    with open(args.compare) as f:
        old = json.load(f)
    diffs = compare(old, new)
    for line in diffs:
        print(line)
    print(f"{len(new)} fingerprints, {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
