"""Tile-size tuning on MetaSchedule: search spaces over the lab's schedules, strategies, a resumable
database, distributed measurement. ``tuning.tuned`` registers the ``tuned_gemm`` schedule."""
