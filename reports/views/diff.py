"""``schedlab diff A B``: what one schedule changes against another, in three parts: the schedule
primitives (added, removed, re-parameterized: the difference of the two traces), the compiler's
resource report (registers, shared memory, spills per kernel), and a unified diff of their IR at one
stage (scheduled TIR, lowered TIR, CUDA source or PTX). Without B, the step before A in its ladder
is compared with A (what A changes; for a plugin's step, what it changes against the step it follows)."""

from __future__ import annotations

import difflib
import re

from schedules import ScheduleParamError, all_schedules, get
from schedules.workloads import workload_for

from ..engine import build as B
from .html import render_diff_text

STAGES = ("scheduled", "lowered", "cuda", "ptx")
_RV = re.compile(r"\b[blv]\d+\b")
BOOKKEEPING = ("get_sblock", "get_loops", "get_child_blocks", "get_producers", "get_consumers")


def previous_step(name: str):
    """The step before ``name`` in its ladder that takes the same workload kind: for a plugin's step
    the one it follows (its anchor, or the plugin step before it); for a built-in step the built-in
    step before it, whatever plugins are loaded."""
    spec = get(name)
    ladder = [s for s in all_schedules(ladder=spec.ladder)
              if s is spec or (s.kind == spec.kind and "tuned" not in s.tags and (s.builtin or not spec.builtin))]
    earlier = ladder[:ladder.index(spec)]
    if not earlier:
        raise ScheduleParamError(f"{spec.name} is the first {spec.kind} step: name a schedule to compare it with")
    return earlier[-1]


def resolve(a: str, b: str | None, shape: str | None, default_shapes: dict):
    """(resolved A, resolved B, workload) after the checks that make a diff meaningful (one-line
    errors); a ``best_*`` step resolved to its choice once (:meth:`ScheduleSpec.resolve`)."""

    spec_a, spec_b = (get(a), get(b)) if b else (previous_step(a), get(a))
    if spec_a.kind != spec_b.kind:
        raise ScheduleParamError(f"{spec_a.name} is a {spec_a.kind} schedule and {spec_b.name} a {spec_b.kind} one: "
                                 "a diff needs two schedules of one kind")
    text = shape or default_shapes[spec_a.kind]
    common = [d for d in spec_a.input_dtypes if d in spec_b.input_dtypes]
    if not common:
        raise ScheduleParamError(f"{spec_a.name} takes {', '.join(spec_a.input_dtypes)} inputs and {spec_b.name} "
                                 f"{', '.join(spec_b.input_dtypes)}: no input type for both")
    wl = workload_for(spec_a.kind, text, "float32" if "float32" in common else common[0])
    resolved = []
    for spec in (spec_a, spec_b):
        if not spec.accepts_dtype(wl):
            raise ScheduleParamError(f"{spec.name} does not take {wl.dtype} inputs ({wl})")
        resolved.append(spec.resolve(wl))
        spec.validate(wl, resolved=resolved[-1])  # a shape one of them refuses: its one-line reason
    return resolved[0], resolved[1], wl


def trace_lines(sch) -> list[str]:
    """The schedule's primitives as normalized Python lines (random-variable names blanked, the
    look-ups that change nothing dropped)."""
    out = []
    for line in sch.trace.as_python():
        line = str(line)
        m = re.search(r"sch\.(\w+)\(", line)
        if not m or m.group(1) in BOOKKEEPING:
            continue
        out.append(_RV.sub("_", line[m.start():]).replace("sch.", ""))
    return out


def _primitive(line: str) -> str:
    return line.split("(", 1)[0]


def trace_diff(a: list[str], b: list[str]) -> list[str]:
    """``+ added``, ``- removed``, ``~ re-parameterized: old → new`` lines (B against A)."""
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        old, new = a[i1:i2], b[j1:j2]
        # inside a changed stretch, the same primitive on both sides is one call re-parameterized
        names = difflib.SequenceMatcher(a=[_primitive(x) for x in old], b=[_primitive(x) for x in new], autojunk=False)
        for op2, p1, p2, q1, q2 in names.get_opcodes():
            if op2 == "equal":
                out += [f"~ {x}  →  {y}" for x, y in zip(old[p1:p2], new[q1:q2])]
            else:
                out += [f"- {x}" for x in old[p1:p2]] + [f"+ {y}" for y in new[q1:q2]]
    return out


def resource_diff(built_a, built_b) -> list[str]:
    ka = {k.name: k for k in built_a.device.kernels}
    kb = {k.name: k for k in built_b.device.kernels}
    lines = []
    for name in sorted(set(ka) | set(kb)):
        x, y = ka.get(name), kb.get(name)
        if x is None or y is None:
            lines.append(f"{name}: {'only in B' if x is None else 'only in A'}")
            continue
        parts = [f"{what} {getattr(x, attr)} → {getattr(y, attr)}" if getattr(x, attr) != getattr(y, attr)
                 else f"{what} {getattr(x, attr)}"
                 for what, attr in (("registers", "registers"), ("shared bytes", "shared_bytes"), ("spilled bytes", "spills"))]
        lines.append(f"{name}: " + ", ".join(parts))
    return lines


def stage_text(built, stage: str) -> str:
    return {"scheduled": built.scheduled, "lowered": built.lowered, "cuda": built.device.cuda,
            "ptx": built.device.ptx}[stage]


def diff(a: str, b: str | None = None, shape: str | None = None, stage: str = "scheduled", arch: str | None = None,
         color: bool = False, default_shapes: dict | None = None) -> str:
    """The whole report of ``schedlab diff`` as text."""
    if stage not in STAGES:
        raise ScheduleParamError(f"--stage {stage!r} is not one of {', '.join(STAGES)}")
    res_a, res_b, wl = resolve(a, b, shape, default_shapes or {})
    spec_a, spec_b = res_a.spec, res_b.spec
    target = B.cuda_target(arch)
    built, traces = [], []
    for res in (res_a, res_b):
        sch = res.schedule(wl)
        traces.append(trace_lines(sch))
        built.append(B.build(sch, target, pass_config=res.pass_config))  # the resources need the compiled kernel
    head = f"{spec_a.label} {spec_a.name}  →  {spec_b.label} {spec_b.name}  on {wl}"
    bold = (lambda s: f"\033[1m{s}\033[0m") if color else (lambda s: s)
    tdiff = trace_diff(traces[0], traces[1])
    out = [bold(head), "", bold("schedule primitives (B against A)")]
    if not traces[0] and not traces[1]:
        out.append("  (both are TIR kernels written directly: no schedule primitives)")
    out += [f"  {line}" for line in tdiff] or ["  (the same primitives)"]
    out += ["", bold("ptxas resources")] + [f"  {line}" for line in resource_diff(built[0], built[1])]
    text = render_diff_text(stage_text(built[0], stage), stage_text(built[1], stage), f"{spec_a.name}.{stage}",
                            f"{spec_b.name}.{stage}", color)
    out += ["", bold(f"{stage} IR"), text or "(identical)"]
    return "\n".join(out) + "\n"
