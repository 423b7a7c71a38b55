"""An example plugin: one step of your own, added to the GEMM ladder without editing the package.

    schedlab --plugin docs/examples/plugin_wide_tile.py list          # gemm 11.1  wide_warp_tiled_gemm ...
    schedlab diff wide_warp_tiled_gemm --plugin docs/examples/plugin_wide_tile.py   # against warp_tiled_gemm
    schedlab run --plugin docs/examples/plugin_wide_tile.py --schedules warp_tiled_gemm,wide_warp_tiled_gemm
    schedlab tune --plugin docs/examples/plugin_wide_tile.py --space wide_warp_tiled_gemm --db out/wide

The step changes one thing of a built-in step: warp_tiled_gemm's 128 × 128 block tile becomes
128 × 256 (the warp grid grows from 4 × 2 to 4 × 4 so that each warp keeps its 32 × 64 sub-tile).
Everything else (the builder, the checks, the launch) is the built-in step's, reused by deriving
from its configuration. docs/plugins.md describes the contract, the numbering and the ways to load
a plugin.
"""

from dataclasses import dataclass

# A plugin imports the lab like any other code: the registry, the base of every configuration and
# whatever it reuses of the built-in steps (here warp_tiled_gemm's configuration and body).
from schedules.gemm_fast import WarpTileConfig, fast_tiled
from schedules.registry import register


# The configuration: a frozen dataclass deriving (here through WarpTileConfig) from StepConfig.
# Its fields are the step's parameters (--param NAME=VALUE), with this step's defaults; only the
# ones that differ from warp_tiled_gemm's are written out.
@dataclass(frozen=True)
class WideWarpTileConfig(WarpTileConfig):
    block_n: int = 256  # the one change: twice the columns per block (warp_tiled_gemm: 128)
    warps_n: int = 4    # follows from it: 4 × 4 warps of 32 × 64 outputs, 512 threads

    # Capabilities are class attributes (no annotation, so they are not parameters). This one makes
    # the step tunable by name: `schedlab tune --space wide_warp_tiled_gemm` measures every
    # combination the workload takes (here one or two shared buffers × row-major or grouped block
    # order), the defaults first.
    search_space = {"stages": (1, 2), "group_m": (1, 8)}

    # `launch` (the grid, block and shared memory, checked against the GPU's limits before any
    # build) and `check` (the reasons of its own to refuse a workload) come from WarpTileConfig.


# The builder: registered `after` a step of the GEMM ladder, so it is numbered after it (gemm 11.1:
# the built-in numbers never change). Its docstring's first paragraph is its summary in
# `schedlab list`, the report page and `schedlab show`.
@register("wide_warp_tiled_gemm", "gemm", WideWarpTileConfig, aliases=("wide_tile",), after="warp_tiled_gemm")
def wide_warp_tiled_gemm(wl, cfg: WideWarpTileConfig = WideWarpTileConfig()):
    """Wide warp tiles: warp_tiled_gemm with a 128 × 256 block tile, 4 × 4 warps of 32 × 64 outputs
    (512 threads), each A tile read into shared memory serving twice the columns.

    Half as many blocks load each A tile, so global traffic for A halves; the price is a block of
    512 threads that needs the whole register file of an SM (about 124 registers each), so one
    block per SM, and half as many blocks to spread over the SMs on a small product.
    """
    return fast_tiled(wl, cfg)
