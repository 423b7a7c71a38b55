"""Pure TVM schedule builders: workloads, the optimization steps, and the registry that lists them."""

from . import best, gemm, gemm_fast, gemm_tma, gemm_wgmma, gemm_wmma, gemv, tuned  # noqa: F401  (registers the steps)
from .errors import ScheduleParamError
from .registry import Launch, ScheduleSpec, all_schedules, get, register
from .workloads import LAYOUTS, Gemm, Gemv, GemvT, parse_shape, parse_workload

__all__ = ["LAYOUTS", "Gemm", "Gemv", "GemvT", "Launch", "ScheduleParamError", "ScheduleSpec", "all_schedules", "get",
           "parse_shape", "parse_workload", "register"]
