"""Pure TVM schedule builders: workloads, the optimization steps, the registry that lists them, and the
loader of plugins that add steps to it."""

# the step modules (importing them registers the steps)
from . import best, gemm, gemm_decode, gemm_epilogue, gemm_fast, gemm_fp8, gemm_tma, gemm_tma_tf32, gemm_tma_ws  # noqa: F401
from . import gemm_short_k, gemm_short_k_tc, gemm_thin, gemm_wgmma, gemm_wmma  # noqa: F401
from . import gemv, tuned  # noqa: F401
from . import plugins  # noqa: F401  (the registry loads the plugins SCHEDLAB_PLUGINS and entry points name on first use)
from .errors import ScheduleParamError
from .registry import Launch, ScheduleSpec, all_schedules, get, register
from .workloads import LAYOUTS, Epilogue, Gemm, Gemv, GemvT, parse_shape, parse_workload

__all__ = ["LAYOUTS", "Epilogue", "Gemm", "Gemv", "GemvT", "Launch", "ScheduleParamError", "ScheduleSpec", "all_schedules", "get",
           "parse_shape", "parse_workload", "register"]
