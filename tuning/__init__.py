"""Tile-size tuning on MetaSchedule: search spaces over the lab's schedules, strategies, a resumable
database, distributed measurement. The ``tuned_gemm`` step that replays a tuned configuration lives with the other steps (``schedules.tuned``)."""
