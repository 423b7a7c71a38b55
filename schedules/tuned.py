"""``tuned_gemm``: the best configuration the tuner found for a workload, as a lab schedule that
``schedlab run`` and ``schedlab show`` use by name.

The builder replays the saved trace (``best_<workload>.json``, written by ``schedlab tune``) onto the
workload: the trace is the schedule, sampling decisions and postprocessing included, so nothing
has to be searched or re-derived. Where to look: ``$SCHEDLAB_TUNED`` (a tuning directory or one
``best_*.json`` file), else ``out/tune`` under the working directory (``schedlab tune``'s default
``--db``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from tvm import s_tir

from .common import pass_config_of
from .errors import ScheduleParamError
from .gemm_fast import FastTileConfig
from .names import slug
from .registry import Launch, ScheduleSpec, register_spec
from .step_config import StepConfig

ENV = "SCHEDLAB_TUNED"
DEFAULT_SOURCE = os.path.join("out", "tune")  # under the working directory, as `schedlab tune --db` is


ASYNC_STAGES = "software_pipeline_async_stages"  # the annotation of a K loop pipelined with cp.async stages


def ring_options(text: str) -> dict:
    """The build options of a schedule whose text (a module's script, or a saved trace) pipelines a
    K loop with async stages: cp.async injected and the shared tiles kept float-typed, as the
    hand-written rings are built (FastTileConfig.pass_config); none otherwise. Without them the
    ring's copies are built as ordinary loads and stores: on 121x206x4260 a tuned ring of 4 stages
    timed 17.8 us in the tuner ran 24.4 us when replayed."""
    return pass_config_of(FastTileConfig(stages=3, async_copy=True)) if ASYNC_STAGES in text else {}


def tuned_source(source: str = "") -> str:
    """Where a tuned configuration is read from: ``source``, else $SCHEDLAB_TUNED, else out/tune."""
    return source or os.environ.get(ENV) or DEFAULT_SOURCE


def load_best(wl, source: str = "") -> dict:
    src = tuned_source(source)
    path = src if src.endswith(".json") else os.path.join(src, f"best_{slug(str(wl))}.json")
    try:
        with open(path) as f:
            rec = json.load(f)
    except (FileNotFoundError, NotADirectoryError):
        raise ScheduleParamError(
            f"tuned_gemm: no tuned configuration for {wl} at {path}; run `schedlab tune --workload {wl} "
            f"--db DIR` and set {ENV}=DIR") from None
    except (OSError, ValueError) as e:
        raise ScheduleParamError(f"tuned_gemm: {path} is not readable JSON ({type(e).__name__}: {str(e)[:100]})") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("trace"), list):
        raise ScheduleParamError(f"tuned_gemm: {path} is not a tuned configuration (no saved trace)")
    if '"cuda"' not in str(rec.get("target", '"cuda"')):
        raise ScheduleParamError(f"tuned_gemm: {path} was tuned for a CPU target; tune with --target cuda")
    if rec.get("workload") != str(wl):
        raise ScheduleParamError(f"tuned_gemm: {path} was tuned for {rec.get('workload')}, not {wl}")
    return rec


@dataclass(frozen=True)
class TunedConfig(StepConfig):
    """``source``: a tuning directory or one ``best_*.json`` (default: $SCHEDLAB_TUNED, else out/tune
    under the working directory);
    the configuration itself is the saved trace."""

    source: str = ""
    epilogues = True  # the trace was tuned on the workload itself, its epilogue included

    def check(self, wl):
        load_best(wl, self.source)

    def pass_config_for(self, wl) -> dict:
        """The saved trace's build options (:func:`ring_options`): the tuner built it with them."""
        return ring_options(json.dumps(load_best(wl, self.source)["trace"]))

    def launch(self, wl) -> Launch:
        la = launch_of(tuned_gemm(wl, self))  # from the trace itself, not a figure saved beside it
        grid = tuple(int(la.get(f"blockIdx.{a}", 1)) for a in "xyz")
        block = tuple(int(la.get(f"threadIdx.{a}", 1)) for a in "xyz")
        # shared memory is not known before the build (the saved record carries none); ptxas reports it
        return Launch(grid=grid, block=block, shared_bytes=0,
                      threads_from="the tuned configuration", shared_from="the tuned configuration")


def launch_of(sch) -> dict:
    """Thread/block extents of the first (main) kernel of a scheduled module, from its loop bindings
    in program order; a second kernel (split-K's summing kernel) starts where a blockIdx repeats."""
    text = sch.mod.script()
    found: dict[str, int] = {}
    for args, tag in re.findall(r'T\.thread_binding\(([^)]*?),?\s*thread="((?:blockIdx|threadIdx|vthread)\.[xyz])"', text):
        nums = [int(x) for x in re.findall(r"\d+", args)]
        if not nums:
            continue
        if tag in found and tag.startswith("blockIdx"):
            break
        extent = nums[-1] - (nums[0] if len(nums) == 2 else 0)
        found[tag] = max(found.get(tag, 1), extent)
    return found


def tuned_gemm(wl, cfg: TunedConfig = TunedConfig()):
    """Tuned: the fastest configuration ``schedlab tune`` found for this workload (its saved
    MetaSchedule trace replayed: tile sizes, vector width, unroll depth, pipeline stages).

    Whatever the search found best among the configurations it measured, verified against a
    float64 reference before it was saved.
    """
    rec = load_best(wl, cfg.source)
    sch = s_tir.Schedule(wl.prim_func())
    try:
        s_tir.schedule.Trace.apply_json_to_schedule(rec["trace"], sch)
    except Exception as e:  # noqa: BLE001 - a trace of another TVM, or edited by hand
        raise ScheduleParamError(f"tuned_gemm: the saved trace does not apply to {wl} "
                                 f"({type(e).__name__}: {str(e).strip().splitlines()[-1][:120] if str(e).strip() else ''})") from None
    return sch


SPEC = register_spec(ScheduleSpec("tuned_gemm", "gemm", tuned_gemm, TunedConfig, aliases=("tuned",),
                                  tags=("tuned",)))
