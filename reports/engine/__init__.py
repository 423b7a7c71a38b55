"""The measurement engine: the lab's one measurement path (isolate → build → check against float64 →
time) and its plumbing (provenance, safe files, progress, results frames). It imports neither
:mod:`reports.views` nor :mod:`reports.experiments`."""
