"""A tuning command's wall-clock limit: when the search must stop so that everything after it (the
float64 check of the best, the reselection, the comparison with the dispatcher and cuBLAS, the
report) still fits, and how work in flight is cut at that moment.

- :class:`Cutoff`: what the builder and the measuring loop ask before (and while) they work: Ctrl-C
  (the tuner's ``INTERRUPTED``) or a moment on the wall clock, which the command moves from phase to
  phase (the search's end, then the check's).
- :func:`runner_cut`: while a candidate is being timed, a watcher ends the local runner's worker
  process once the moment has come; the candidate cut short is not recorded (no verdict), the ones
  measured before it are.
- :class:`Background`: a start-up (a worker process importing TVM) under way while the caller
  prepares the search, instead of one after the other.
- :class:`Plan`: the command's clock (from the process's start: its imports count) and the time
  kept for each step after the search, from the costs measured in this tuning directory by earlier
  commands (``DIR/costs.json``) or, before any, from the search's own build and run times and
  stated defaults.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil

from .measure import kill_workers

COSTS_FILE = "costs.json"
# what a step after the search costs before this directory has measured it (seconds): the harness's
# worker processes start (TVM and the lab imported), a kernel is built there, timed there; the report
DEFAULTS = {"harness_start_s": 10.0, "harness_build_s": 12.0, "harness_time_s": 2.0, "report_s": 6.0,
            "build_s": 10.0, "run_s": 3.0, "start_s": 5.0}
CPU_DEFAULTS = {"build_s": 2.0, "run_s": 1.0}  # a CPU build has no nvcc in it
MARGIN_S = 2.0  # kept back at the end (and 2% of the limit): the interpreter's exit, a step that runs over


class Cutoff:
    """Whether the work under way must stop: Ctrl-C (``interrupted``, a threading.Event) or the wall
    clock past ``until`` (seconds since the epoch; None: no limit). Duck-types Event.is_set for the
    builder (:func:`tuning.measure.make_parallel_builder`'s ``stop``)."""

    def __init__(self, interrupted: threading.Event, until: float | None = None):
        self.interrupted, self.until = interrupted, until

    def expired(self) -> bool:
        return self.until is not None and time.time() >= self.until

    def is_set(self) -> bool:
        return self.interrupted.is_set() or self.expired()

    def left(self) -> float:
        return math.inf if self.until is None else self.until - time.time()


@contextmanager
def runner_cut(cutoff: Cutoff | None, runner):
    """While the body runs, end the local runner's worker processes (MetaSchedule's LocalRunner: one
    pool) once ``cutoff``'s moment has come: the candidate being timed is cut short. The processes
    are signalled, not shut down: the thread waiting for the worker's answer holds its pipe, so the
    pool's own shutdown would wait for the measurement to end (tuning.measure.kill_workers)."""
    pool = getattr(runner, "pool", None)
    if cutoff is None or cutoff.until is None or pool is None:
        yield
        return
    done = threading.Event()

    def watch():
        while not done.wait(0.05):
            if cutoff.expired():
                kill_workers(pool)
                return

    watcher = threading.Thread(target=watch, name="schedlab-runner-cut", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


class Background:
    """``fn()`` in a thread, started now; :meth:`get` waits for its value (or raises its error). The
    tuner starts its runners' worker processes so (their TVM import), while it prepares the search."""

    def __init__(self, fn):
        self.value = self.error = None
        self.started = time.time()
        self.thread = threading.Thread(target=self._run, args=(fn,), name="schedlab-start", daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.value = fn()
        except BaseException as e:  # noqa: BLE001 - raised in the caller, by get()
            self.error = e

    def join(self):
        self.thread.join()

    def get(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


def process_start() -> float:
    """When this process started (seconds since the epoch): the command's clock counts its imports."""
    try:
        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no process table to read: from now
        return time.time()


def recorded_costs(db: str) -> dict:
    try:
        with open(os.path.join(db, COSTS_FILE)) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in value.items() if isinstance(v, (int, float))} if isinstance(value, dict) else {}


def record_costs(db: str, measured: dict) -> None:
    """Keep the costs measured by this command for the next one in ``db`` (the larger of the old and
    the new where both are known: an estimate that runs short costs the limit, one that runs long
    only a little search)."""
    old = recorded_costs(db)
    new = {**old, **{k: round(max(v, old.get(k, 0.0) * 0.8), 3) for k, v in measured.items() if v and v > 0}}
    tmp = os.path.join(db, COSTS_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(new, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(db, COSTS_FILE))


def check_seconds(costs: dict) -> float:
    """The float64 check of a run's best: a build, a run, and the check runner's start (a worker
    process importing TVM; the build pool's, where the search's cut ended it, at the same time)."""
    return sum(costs.get(k, DEFAULTS[k]) for k in ("build_s", "run_s", "start_s")) + 1.0


@dataclass
class Plan:
    """The command's time: ``limit_s`` from ``start``; ``costs``: seconds per step (DEFAULTS, then
    what ``DIR/costs.json`` recorded, then what this command measures as it goes)."""

    limit_s: float | None
    target: str = "cuda"
    start: float = field(default_factory=process_start)
    costs: dict = field(default_factory=dict)
    steps: dict = field(default_factory=dict)  # step -> "done" | "skipped: why"
    measured: dict = field(default_factory=dict)  # the costs this command measured (for DIR/costs.json)

    def __post_init__(self):
        self.costs = {**DEFAULTS, **(CPU_DEFAULTS if self.target != "cuda" else {}), **self.costs}

    @property
    def end(self) -> float | None:
        return None if self.limit_s is None else self.start + self.limit_s * 0.98 - MARGIN_S

    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.time()

    def elapsed(self) -> float:
        return time.time() - self.start

    def learn(self, costs: dict, measured: bool = True) -> None:
        """Costs recorded earlier (``measured=False``: kept for this command only) or measured now."""
        new = {k: float(v) for k, v in costs.items() if v and v > 0}
        self.costs.update(new)
        if measured:
            self.measured.update(new)

    def check_s(self) -> float:
        """The float64 check of the best: a build and a run, and a margin for the runner's start."""
        return check_seconds(self.costs)

    def harness_s(self, jobs: int, builders: int) -> float:
        """``jobs`` kernels in the harness: its workers start, the builds run ``builders`` at a time,
        then each kernel is checked and timed alone."""
        if jobs <= 0:
            return 0.0
        c = self.costs
        return c["harness_start_s"] + math.ceil(jobs / max(builders, 1)) * c["harness_build_s"] + jobs * c["harness_time_s"]

    def fits(self, seconds: float, after: float = 0.0) -> bool:
        """Whether a step of ``seconds`` fits before the end, ``after`` seconds being kept for the steps after it."""
        return self.left() >= seconds + after

    def until(self, after: float = 0.0) -> float | None:
        """The moment a step must be over by, ``after`` seconds being kept for the steps after it."""
        return None if self.end is None else self.end - after
