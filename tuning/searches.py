"""The tuner's own search strategies, beside MetaSchedule's: ``exhaustive`` (every decision set of
every design space, in order) and ``ordered``.

The ``ordered`` search strategy: a space's design spaces in the space's own order, each measured
once at a first set of decisions, and every other decision set of a design space right after it
proves the fastest so far.

Made for the ``dispatch`` space, whose design spaces are the dispatcher's top candidates followed by
their neighbours (another split-K, block tile, K tile or ring depth) in the model's order: the
structure decides a kernel's speed far more than the one sampled knob inside it (the unroll depth),
so a time-limited search should first see as many structures as it can, in the order the model
thinks most promising, and spend the other unroll depths only on the structures that measure
fastest. MetaSchedule's evolutionary search picks design spaces at random for its population, so on
a few hundred of them it leaves most of the model's first choices unmeasured.
"""

from __future__ import annotations

import math
from collections import deque

from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from .spaces import enumerate_decisions, sample_insts


class ExhaustiveSearch:
    """Every decision set of the design spaces, in order, as measure candidates; configurations a
    postprocessor rejects (too many threads, too much shared memory...) come back as rejections."""

    def __init__(self, ctx, design_spaces, mod):
        self.ctx, self.mod = ctx, mod
        self.postprocs = list(ctx.space_generator.postprocs)

        def combos():
            for ds in design_spaces:
                trace = ds.trace
                insts = sample_insts(trace)
                for combo in enumerate_decisions(trace):
                    yield trace, insts, combo

        self.iter = combos()

    def generate(self, n: int):
        cands, rejected = [], []
        for trace, insts, combo in self.iter:
            cand, t, failed = candidate_from_decisions(self.mod, self.postprocs, trace, insts, combo)
            if failed:
                rejected.append((t, failed))
            else:
                cands.append(cand)
            if len(cands) + len(rejected) >= n:
                break
        return cands, rejected


def candidate_from_decisions(mod, postprocs, trace, insts, combo):
    """Replay ``trace`` with the decisions ``combo`` (aligned with ``insts``) onto ``mod`` and
    postprocess it. Returns (candidate or None, the trace with the decisions, rejection reason)."""
    t = trace
    for inst, decision in zip(insts, combo):
        t = t.with_decision(inst, decision, remove_postproc=True)
    sch = s_tir.Schedule(mod)
    t.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    failed = None
    for p in postprocs:
        try:
            ok = p.apply(sch)
        except Exception as e:  # noqa: BLE001
            ok, failed = False, f"{_pname(p)}: {str(e).strip().splitlines()[-1][:200]}"
        if not ok:
            failed = failed or f"rejected by {_pname(p)} (e.g. threads or shared memory over the limit)"
            break
    if failed:
        return None, t, failed
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod)), t, None


def _pname(p) -> str:
    name = type(p).__name__
    if name == "_PyPostproc":
        try:
            return p.legacy_repr() if hasattr(p, "legacy_repr") else "python postproc"
        except Exception:  # noqa: BLE001
            return "python postproc"
    return name




class OrderedSearch:
    """Candidates in order (see the module's docstring). ``first(index, trace, insts)`` gives design
    space ``index``'s first decision list; ``choices(trace)`` all its decision lists;
    ``make(mod, postprocs, trace, insts, combo)`` the candidate (:func:`candidate_from_decisions`:
    (candidate or None, trace, rejection reason)); ``sample_insts(trace)`` its knobs.
    :meth:`notify` is told the measured times."""

    def __init__(self, design_spaces, mod, postprocs, first, choices, make, sample_insts):
        self.mod, self.postprocs, self.make = mod, postprocs, make
        self.traces = [ds.trace for ds in design_spaces]
        self.insts = [sample_insts(t) for t in self.traces]
        self.first = [first(n, t, i) for n, (t, i) in enumerate(zip(self.traces, self.insts))]
        self.choices = choices
        self.next = 0  # the next design space to measure for the first time
        self.expanded: set[int] = set()
        self.exploit: deque = deque()  # (design space, decisions) of the fastest structures' other decisions
        self.times: dict[int, float] = {}  # design space -> its fastest measured time
        self.origin: dict[int, int] = {}  # id(candidate) -> its design space
        self.best = math.inf

    def _expand(self, n: int):
        self.expanded.add(n)
        self.exploit.extend((n, list(c)) for c in self.choices(self.traces[n]) if list(c) != self.first[n])

    def _next(self):
        if self.exploit:
            return self.exploit.popleft()
        if self.next < len(self.traces):
            n, self.next = self.next, self.next + 1
            return n, self.first[n]
        # every structure measured once: the other decisions of the fastest ones not yet expanded
        left = sorted((t, n) for n, t in self.times.items() if n not in self.expanded)
        if not left:
            return None
        self._expand(left[0][1])
        return self._next()

    def generate(self, count: int):
        cands, rejected = [], []
        while len(cands) + len(rejected) < count:
            item = self._next()
            if item is None:
                break
            n, combo = item
            try:
                cand, trace, failed = self.make(self.mod, self.postprocs, self.traces[n], self.insts[n], combo)
            except Exception as e:  # noqa: BLE001 - decisions this design space does not take
                rejected.append((self.traces[n], f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}"))
                continue
            if failed:
                rejected.append((trace, failed))
            else:
                self.origin[id(cand)] = n
                cands.append(cand)
        return cands, rejected

    def notify(self, cands, seconds):
        """``seconds``: each candidate's measured time, None where it failed or was not measured. The
        batch's fastest, if it is the fastest so far, has its other decisions measured next."""
        fastest = None
        for cand, t in zip(cands, seconds):
            n = self.origin.pop(id(cand), None)
            if n is None or t is None:
                continue
            self.times[n] = min(t, self.times.get(n, math.inf))
            if t < self.best:
                self.best, fastest = t, n
        if fastest is not None and fastest not in self.expanded:
            self._expand(fastest)
