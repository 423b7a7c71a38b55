"""``tuned_gemm``: the best configuration the tuner found for a workload, as a lab schedule that
``schedlab run`` and ``schedlab show`` use by name.

The builder replays the saved trace (``best_<workload>.json``, written by ``schedlab tune``) onto the
workload: the trace is the schedule, sampling decisions and postprocessing included, so nothing
has to be searched or re-derived. Where to look: ``$SCHEDLAB_TUNED`` (a tuning directory or one
``best_*.json`` file), else ``out/tune`` under the repository.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from tvm import s_tir

from schedules.errors import ScheduleParamError
from schedules.registry import Launch, ScheduleSpec, register_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "SCHEDLAB_TUNED"


def tuned_source() -> str:
    return os.environ.get(ENV) or os.path.join(ROOT, "out", "tune")


def _slug(workload: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", workload).strip("_")


def load_best(wl) -> dict:
    src = tuned_source()
    path = src if src.endswith(".json") else os.path.join(src, f"best_{_slug(str(wl))}.json")
    try:
        with open(path) as f:
            rec = json.load(f)
    except FileNotFoundError:
        raise ScheduleParamError(
            f"tuned_gemm: no tuned configuration for {wl} at {path}; run `schedlab tune --workload {wl} "
            f"--db DIR` and set {ENV}=DIR") from None
    except ValueError as e:
        raise ScheduleParamError(f"tuned_gemm: {path} is not readable JSON ({e})") from None
    if '"cuda"' not in str(rec.get("target", '"cuda"')):
        raise ScheduleParamError(f"tuned_gemm: {path} was tuned for a CPU target; tune with --target cuda")
    if rec.get("workload") != str(wl):
        raise ScheduleParamError(f"tuned_gemm: {path} was tuned for {rec.get('workload')}, not {wl}")
    return rec


@dataclass(frozen=True)
class TunedConfig:
    """No parameters: the configuration is the saved trace."""

    def check(self, wl):
        load_best(wl)

    def launch(self, wl) -> Launch:
        from .tuner import launch_of

        la = launch_of(tuned_gemm(wl, self))  # from the trace itself, not a figure saved beside it
        grid = tuple(int(la.get(f"blockIdx.{a}", 1)) for a in "xyz")
        block = tuple(int(la.get(f"threadIdx.{a}", 1)) for a in "xyz")
        # shared memory is not known before the build (the saved record carries none); ptxas reports it
        return Launch(grid=grid, block=block, shared_bytes=0,
                      threads_from="the tuned configuration", shared_from="the tuned configuration")


def tuned_gemm(wl, cfg: TunedConfig = TunedConfig()):
    """Tuned: the fastest configuration ``schedlab tune`` found for this workload (its saved
    MetaSchedule trace replayed: tile sizes, vector width, unroll depth, pipeline stages).

    Whatever the search found best among the configurations it measured, verified against a
    float64 reference before it was saved.
    """
    rec = load_best(wl)
    sch = s_tir.Schedule(wl.prim_func())
    s_tir.schedule.Trace.apply_json_to_schedule(rec["trace"], sch)
    return sch


SPEC = register_spec(ScheduleSpec("tuned_gemm", "gemm", 14, tuned_gemm, TunedConfig, aliases=("tuned",),
                                  tags=("tuned",)))
